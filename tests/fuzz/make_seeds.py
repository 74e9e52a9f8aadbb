#!/usr/bin/env python3
"""Writes quill's own small seed inputs into tests/fuzz/corpus/<target>/ (they are committed; rerun after edits).

fuzz_gguf: two complete tiny llama models (f32 and f16 weights, 1 layer, n_embd 8) with an SPM and a byte-level BPE
vocabulary, so mutations reach the config, weight and tokenizer loaders at once instead of stopping in the header
(fuzz_tokenizer and fuzz_detokenizer take their vocabularies too), and one of each architecture beyond llama with
its features' keys and tensors (arch_model). fuzz_gguf_header: the llama f32 one and the mixture-of-experts ones.
fuzz_tokenizer: texts at the edges (multi-byte and invalid UTF-8, NUL, special-token texts, whitespace runs).
fuzz_detokenizer: id sequences in its input format (see fuzz_detokenizer.cpp). fuzz_batch_input and fuzz_messages:
JSON nested as deep as the limit allows (64 levels), one level more, and 20,000 levels (a recursive copy of that
overflowed the stack under ASan before the limit). fuzz_template: chat templates in the shapes models ship (a
default system message, role checks, macros, filters, loop variables, namespaces, tool calls, raise_exception), and
hostile ones (work that doubles, shared values walked in full, quadratic string searches), each of which the render
budgets must stop in milliseconds (tests/unit/chat/test_template_hostile.cpp has the same cases). The test data in
../shared/testdata (GGUFs, .inp vectors, real templates) is added by .ci/fuzz at run time when it is there.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# GGUF value types
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types
GGML_F32, GGML_F16 = 0, 1


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, v):
    if vtype == U32:
        return struct.pack("<I", v)
    if vtype == I32:
        return struct.pack("<i", v)
    if vtype == F32:
        return struct.pack("<f", v)
    if vtype == BOOL:
        return struct.pack("<?", v)
    if vtype == STRING:
        return gguf_string(v)
    elem_type, items = v
    return struct.pack("<IQ", elem_type, len(items)) + b"".join(gguf_value(elem_type, x) for x in items)


def gguf_file(kv, tensors):
    """kv: [(key, type, value)]; tensors: [(name, ne, ggml type, data bytes)]. GGUF v3, alignment 32."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, vtype, v in kv:
        out += gguf_string(key) + struct.pack("<I", vtype) + gguf_value(vtype, v)
    offset, blobs = 0, b""
    for name, ne, ttype, data in tensors:
        out += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", ttype, offset)
        pad = (-len(data)) % 32
        blobs += data + b"\0" * pad
        offset += len(data) + pad
    out += b"\0" * ((-len(out)) % 32)
    return out + blobs


def weights(ne, ttype, salt):
    n = 1
    for d in ne:
        n *= d
    values = [((i * 37 + salt * 11) % 17 - 8) / 64.0 for i in range(n)]
    fmt = "<%d%s" % (n, "f" if ttype == GGML_F32 else "e")
    return struct.pack(fmt, *values)


def tiny_model(vocab_kv, n_vocab, ttype):
    n_embd, n_ff, n_head, n_head_kv = 8, 16, 2, 1
    kv = [("general.architecture", STRING, "llama"), ("general.name", STRING, "tiny"),
          ("llama.context_length", U32, 64), ("llama.embedding_length", U32, n_embd),
          ("llama.block_count", U32, 1), ("llama.feed_forward_length", U32, n_ff),
          ("llama.attention.head_count", U32, n_head), ("llama.attention.head_count_kv", U32, n_head_kv),
          ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5)] + vocab_kv
    kv_dim = n_embd // n_head * n_head_kv
    shapes = [("token_embd.weight", [n_embd, n_vocab]), ("output_norm.weight", [n_embd]),
              ("blk.0.attn_norm.weight", [n_embd]), ("blk.0.attn_q.weight", [n_embd, n_embd]),
              ("blk.0.attn_k.weight", [n_embd, kv_dim]), ("blk.0.attn_v.weight", [n_embd, kv_dim]),
              ("blk.0.attn_output.weight", [n_embd, n_embd]), ("blk.0.ffn_norm.weight", [n_embd]),
              ("blk.0.ffn_gate.weight", [n_embd, n_ff]), ("blk.0.ffn_up.weight", [n_embd, n_ff]),
              ("blk.0.ffn_down.weight", [n_ff, n_embd])]
    tensors = []
    for i, (name, ne) in enumerate(shapes):
        t = GGML_F32 if len(ne) == 1 else ttype  # norms stay f32
        tensors.append((name, ne, t, weights(ne, t, i)))
    return gguf_file(kv, tensors)


def arch_model(arch, vocab_kv, n_vocab):
    """A one- or two-layer F32 model of an architecture beyond llama (qwen3, qwen3moe, gpt-oss, phi3, gemma2, smollm3,
    mistral3, glm4, granite, olmo2, exaone4, ernie4_5, seed_oss) with the tensors and keys of its features (Q/K norms,
    experts with router and biases, attention sinks, fused QKV and gate/up, RoPE factors, post-norms, blocks without
    input norms, soft-caps, sliding window, YaRN, attention temperature, Granite's multipliers), as
    `quill bench --synthetic NAME-tiny --save` writes them but a few KB small, so that mutations reach each
    architecture's config and weight checks."""
    n_embd, n_ff, n_head, n_head_kv, head_dim, n_expert, n_used, n_ff_exp = 8, 16, 2, 1, 4, 4, 2, 8
    n_layer = 2 if arch in ("gemma2", "gpt-oss") else 1
    n_q, n_kv = n_head * head_dim, n_head_kv * head_dim
    p = arch + "."
    kv = [("general.architecture", STRING, arch), ("general.name", STRING, "tiny-" + arch),
          (p + "context_length", U32, 256), (p + "embedding_length", U32, n_embd), (p + "block_count", U32, n_layer),
          (p + "feed_forward_length", U32, n_ff_exp if arch == "gpt-oss" else n_ff),
          (p + "attention.head_count", U32, n_head), (p + "attention.head_count_kv", U32, n_head_kv),
          (p + "attention.key_length", U32, head_dim), (p + "attention.value_length", U32, head_dim),
          (p + "attention.layer_norm_rms_epsilon", F32, 1e-6), (p + "rope.freq_base", F32, 10000.0)]
    if arch in ("qwen3moe", "gpt-oss"):
        kv += [(p + "expert_count", U32, n_expert), (p + "expert_used_count", U32, n_used),
               (p + "expert_feed_forward_length", U32, n_ff_exp)]
    if arch == "gpt-oss":
        kv += [(p + "attention.sliding_window", U32, 4), (p + "rope.scaling.type", STRING, "yarn"),
               (p + "rope.scaling.factor", F32, 4.0), (p + "rope.scaling.original_context_length", U32, 64)]
    if arch == "phi3":
        kv += [(p + "rope.dimension_count", U32, 2), (p + "rope.scaling.original_context_length", U32, 64),
               (p + "rope.scaling.attn_factor", F32, 1.2), (p + "attention.sliding_window", U32, 0)]
    if arch == "gemma2":
        kv += [(p + "attention.sliding_window", U32, 4), (p + "attn_logit_softcapping", F32, 50.0),
               (p + "final_logit_softcapping", F32, 30.0)]
    if arch == "smollm3":
        kv += [(p + "attention.sliding_window", U32, 0)]
    if arch == "mistral3":
        kv += [(p + "rope.scaling.type", STRING, "yarn"), (p + "rope.scaling.factor", F32, 16.0),
               (p + "rope.scaling.original_context_length", U32, 16), (p + "rope.scaling.yarn_beta_fast", F32, 32.0),
               (p + "rope.scaling.yarn_beta_slow", F32, 1.0), (p + "rope.scaling.yarn_log_multiplier", F32, 1.0),
               (p + "attention.temperature_scale", F32, 0.1)]
    if arch == "glm4":
        kv += [(p + "rope.dimension_count", U32, 2)]
    if arch == "granite":
        kv += [(p + "logit_scale", F32, 8.0), (p + "residual_scale", F32, 0.22), (p + "embedding_scale", F32, 12.0),
               (p + "attention.scale", F32, 0.25)]
    kv += vocab_kv
    input_norms = arch not in ("olmo2", "exaone4")
    post_norms = arch in ("gemma2", "glm4", "olmo2", "exaone4")
    shapes = [("token_embd.weight", [n_embd, n_vocab]), ("output_norm.weight", [n_embd])]
    if arch not in ("gemma2", "ernie4_5"):  # (their output is the embedding)
        shapes.append(("output.weight", [n_embd, n_vocab]))
    if arch == "phi3":
        shapes += [("rope_factors_long.weight", [1]), ("rope_factors_short.weight", [1])]
    for i in range(n_layer):
        b = "blk.%d." % i
        if input_norms:
            shapes.append((b + "attn_norm.weight", [n_embd]))
        if arch == "phi3":
            shapes.append((b + "attn_qkv.weight", [n_embd, n_q + 2 * n_kv]))
        else:
            shapes += [(b + "attn_q.weight", [n_embd, n_q]), (b + "attn_k.weight", [n_embd, n_kv]),
                       (b + "attn_v.weight", [n_embd, n_kv])]
        shapes.append((b + "attn_output.weight", [n_q, n_embd]))
        if input_norms:
            ffn_norm = "post_attention_norm.weight" if arch in ("gpt-oss", "seed_oss") else "ffn_norm.weight"
            shapes.append((b + ffn_norm, [n_embd]))
        if arch in ("qwen3", "qwen3moe", "exaone4"):
            shapes += [(b + "attn_q_norm.weight", [head_dim]), (b + "attn_k_norm.weight", [head_dim])]
        if arch == "olmo2":  # (over the whole Q and K)
            shapes += [(b + "attn_q_norm.weight", [n_q]), (b + "attn_k_norm.weight", [n_kv])]
        if arch in ("glm4", "seed_oss"):
            shapes += [(b + "attn_q.bias", [n_q]), (b + "attn_k.bias", [n_kv]), (b + "attn_v.bias", [n_kv])]
        if post_norms:
            shapes += [(b + "post_attention_norm.weight", [n_embd]), (b + "post_ffw_norm.weight", [n_embd])]
        if arch in ("qwen3moe", "gpt-oss"):
            shapes += [(b + "ffn_gate_inp.weight", [n_embd, n_expert]),
                       (b + "ffn_gate_exps.weight", [n_embd, n_ff_exp, n_expert]),
                       (b + "ffn_up_exps.weight", [n_embd, n_ff_exp, n_expert]),
                       (b + "ffn_down_exps.weight", [n_ff_exp, n_embd, n_expert])]
        elif arch in ("phi3", "glm4"):
            shapes += [(b + "ffn_up.weight", [n_embd, 2 * n_ff]), (b + "ffn_down.weight", [n_ff, n_embd])]
        else:
            shapes += [(b + "ffn_gate.weight", [n_embd, n_ff]), (b + "ffn_up.weight", [n_embd, n_ff]),
                       (b + "ffn_down.weight", [n_ff, n_embd])]
        if arch == "gpt-oss":
            shapes += [(b + "attn_q.bias", [n_q]), (b + "attn_k.bias", [n_kv]), (b + "attn_v.bias", [n_kv]),
                       (b + "attn_output.bias", [n_embd]), (b + "attn_sinks.weight", [n_head]),
                       (b + "ffn_gate_inp.bias", [n_expert]), (b + "ffn_gate_exps.bias", [n_ff_exp, n_expert]),
                       (b + "ffn_up_exps.bias", [n_ff_exp, n_expert]), (b + "ffn_down_exps.bias", [n_embd, n_expert])]
    tensors = []
    for i, (name, ne) in enumerate(shapes):
        data = weights(ne, GGML_F32, i)
        if "norm" in name or "rope_factors" in name:  # norm weights near 1, RoPE divisors positive
            data = struct.pack("<%df" % (len(data) // 4), *([1.0] * (len(data) // 4)))
        tensors.append((name, ne, GGML_F32, data))
    return gguf_file(kv, tensors)


ARCHS = ("qwen3", "qwen3moe", "gpt-oss", "phi3", "gemma2", "smollm3", "mistral3", "glm4", "granite", "olmo2", "exaone4",
         "ernie4_5", "seed_oss")


def spm_vocab():
    pieces = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + \
             ["\u2581", "\u2581a", "b", "\u2581ab", "c", "\u00e9", "<|im_end|>"]
    types = [2, 3, 3] + [6] * 256 + [1, 1, 1, 1, 1, 1, 4]
    scores = [0.0] * len(pieces)
    for i in range(259, len(pieces)):
        scores[i] = -float(i - 259)
    kv = [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.tokens", ARRAY, (STRING, pieces)),
          ("tokenizer.ggml.scores", ARRAY, (F32, scores)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
          ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
          ("tokenizer.ggml.unknown_token_id", U32, 0)]
    return kv, len(pieces)


def bpe_vocab():
    # GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others for U+0100 onwards.
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapped, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapped[b] = chr(b)
        else:
            mapped[b] = chr(0x100 + extra)
            extra += 1
    pieces = [mapped[b] for b in range(256)] + ["\u0120a", "\u0120ab", "<|endoftext|>"]
    types = [1] * 258 + [3]
    merges = ["\u0120 a", "\u0120a b"]
    kv = [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "gpt-2"),
          ("tokenizer.ggml.tokens", ARRAY, (STRING, pieces)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
          ("tokenizer.ggml.merges", ARRAY, (STRING, merges)), ("tokenizer.ggml.bos_token_id", U32, 258),
          ("tokenizer.ggml.eos_token_id", U32, 258)]
    return kv, len(pieces)


TEXTS = {
    "ascii": b"Hello world, it's 2024! Once upon a time...",
    "utf8": "caf\u00e9 \u4e2d\u6587 \U0001F600 \u2581x \u0130stanbul".encode(),
    "invalid_utf8": b"\xff\xfe abc \xe2\x82 b\xc3 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf",
    "nul_and_controls": b"x\x00y\x01\x1b[31m\r\n\t\x7f",
    "specials": b"<s>hi</s> <|endoftext|> <|im_end|>\n<|user|>\nHi<|end|>\n<fim_prefix>x",
    "whitespace": b"   \n\n\n  \t\t  a  \n " + b" " * 40,
    "digits_and_contractions": b"12345678901234 I'M you'RE it's 3.14159 $100,000",
}

SHARED = (b"{% set ns = namespace(l=[1], m=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}"
          b"{% set ns.m = [ns.m, ns.m] %}{% endfor %}")

HOSTILE_TEMPLATES = {
    "shared-eq": SHARED + b"{{ ns.l == ns.m }}",
    "shared-string": SHARED + b"{{ ns.l | string }}",
    "shared-tojson": SHARED + b"{{ ns.l | tojson }}",
    "shared-dict": b"{% set ns = namespace(d={}) %}{% for i in range(60) %}{% set ns.d = {'a': ns.d, 'b': ns.d} %}"
                   b"{% endfor %}{{ ns.d | tojson }}",
    "sort-loop": b"{% set big = range(100000) | list %}{% for i in range(100000) %}{% set s = big | sort %}"
                 b"{% endfor %}",
    "unique": b"{{ range(100000) | unique | length }}",
    "doubling-string": b"{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "kept-strings": b"{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + ['x' * 3000000 ~ i] %}"
                    b"{% endfor %}",
    "long-list": b"{{ (range(100000) | list) * 20 }}",
    "string-chars": b"{% for c in 'x' * 4000000 %}{% endfor %}",
    "quadratic-in": b"{{ ('a' * 1000000 ~ 'b') in ('a' * 4000000) }}{{ ('a' * 4000000).strip('b' * 2000000 ~ 'a') }}",
    "injection": b"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}"
                 b"{{ raise_exception('\x1b[2J' ~ messages[0].content * 100) }}",
}


TEMPLATES = {
    "chatml_default_system.jinja":
        "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are helpful.<|im_end|>\n{% endif %}"
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "alternating_roles.jinja":
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] | trim + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] | trim + eos_token }}{% endif %}"
        "{% endfor %}",
    "headers_and_tools.jinja":
        "{%- set ns = namespace(system='', first=true) -%}\n"
        "{%- macro header(role) -%}<|start_header_id|>{{ role }}<|end_header_id|>\n\n{%- endmacro -%}\n"
        "{{- bos_token -}}\n"
        "{%- if tools is defined and tools -%}{{ header('system') }}Tools: {{ tools | tojson(indent=2) }}<|eot_id|>"
        "{%- endif -%}\n"
        "{%- for m in messages if m.role != 'tool' -%}\n"
        "  {%- if m.role == 'system' -%}{%- set ns.system = m.content -%}{%- continue -%}{%- endif -%}\n"
        "  {{- header(m.role) }}{{ m.content | default('', true) | replace('<|eot_id|>', '') }}\n"
        "  {%- for call in m.tool_calls | default([]) -%}{\"name\": {{ call.function.name | tojson }}, "
        "\"arguments\": {{ call.function.arguments | tojson }}}{%- endfor -%}<|eot_id|>\n"
        "  {%- set ns.first = false -%}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt %}{{ header('assistant') }}{% endif -%}\n"
        "{#- system: {{ ns.system }} #}{{ (messages | length) ~ ' ' ~ messages[-1].role | upper }}"
        "{{ strftime_now('%d %b %Y') if strftime_now is defined else '' }}",
}


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    spm_kv, spm_n = spm_vocab()
    bpe_kv, bpe_n = bpe_vocab()
    write("fuzz_gguf", "tiny-spm-f32.gguf", tiny_model(spm_kv, spm_n, GGML_F32))
    write("fuzz_gguf", "tiny-bpe-f16.gguf", tiny_model(bpe_kv, bpe_n, GGML_F16))
    write("fuzz_gguf_header", "tiny-spm-f32.gguf", tiny_model(spm_kv, spm_n, GGML_F32))
    for arch in ARCHS:
        write("fuzz_gguf", "tiny-%s-f32.gguf" % arch, arch_model(arch, spm_kv, spm_n))
    for arch in ("qwen3moe", "gpt-oss"):  # (the header check of a download looks at the experts)
        write("fuzz_gguf_header", "tiny-%s-f32.gguf" % arch, arch_model(arch, spm_kv, spm_n))
    for name, text in TEXTS.items():
        write("fuzz_tokenizer", name + ".txt", text)
    # Detokenizer inputs: vocab selector, flags, then 3-byte ids; 0x80 marks "the token of byte <next byte>".
    def byte_ids(bs):
        return b"".join(bytes([0x80, b, 0]) for b in bs)
    write("fuzz_detokenizer", "split_euro", bytes([0, 1]) + byte_ids(b"a\xe2\x82\xacb"))
    write("fuzz_detokenizer", "ill_formed", bytes([1, 0]) + byte_ids(b"\xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0"))
    write("fuzz_detokenizer", "plain_ids", bytes([3, 1]) + b"\x00\x01\x00\x00\x10\x00\x7f\xff\xff\x00\x00\x02")
    # Nesting: documents `depth` levels deep in all, under a field quill reads ("messages") and one it does not ("x").
    def arrays(n):
        return b"[" * n + b"]" * n
    def mixed(n):  # arrays and objects in turn
        return b"".join(b'{"k":' if i % 2 else b"[" for i in range(n)) + b"".join(
            b"}" if i % 2 else b"]" for i in reversed(range(n)))
    for depth in (64, 65, 20000):
        write("fuzz_batch_input", "depth-%d.jsonl" % depth,
              b'{"id": "d", "prompt": "hi", "x": ' + arrays(depth - 1) + b'}\n'
              b'{"id": "e", "messages": [{"role": "user", "content": "x", "y": ' + mixed(min(depth, 200) - 3) + b"}]}\n")
        write("fuzz_messages", "depth-%d.json" % depth,
              b'{"messages": [{"role": "user", "content": "hi", "x": ' + mixed(depth - 3) + b"}]}")
    write("fuzz_messages", "plain.json",
          b'[{"role": "system", "content": null}, {"role": "user", "content": "Hi \xc3\xa9"}, '
          b'{"role": "assistant", "content": "Hello", "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, true]}}}]}]')
    for name, source in TEMPLATES.items():
        write("fuzz_template", name, source.encode())
    for name, text in HOSTILE_TEMPLATES.items():
        write("fuzz_template", name + ".jinja", text)


if __name__ == "__main__":
    main()

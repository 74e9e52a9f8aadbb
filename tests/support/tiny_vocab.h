// Vocabularies the tests build themselves, so that tokenizer mechanics and tiny models need no test data: an SPM
// one with byte fallback and a byte-level BPE one, both with a few English words and chatml's markers as control
// tokens; and a chatml chat template for the tiny models to carry (tests/support/random_model.h).
#pragma once

#include "engine/format/gguf.h"
#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace quill::test {

struct TinyVocab {
    std::string model;                // tokenizer.ggml.model: "llama" (SPM) or "gpt2" (byte-level BPE)
    std::vector<std::string> pieces;  // [n_vocab]
    std::vector<int32_t> types;       // [n_vocab] GGUF token types (1 normal, 2 unknown, 3 control, 6 byte)
    std::vector<float> scores;        // [n_vocab] SPM only
    std::vector<std::string> merges;  // BPE only, by rank
    int32_t bos = -1, eos = -1, unk = -1;

    int64_t size() const { return static_cast<int64_t>(pieces.size()); }
    // The id of a piece; UsageError when the vocabulary lacks it.
    int32_t id(std::string_view piece) const;
    // Sets its tokenizer.ggml.* keys.
    void write(GgufWriter& w) const;
};

// SPM with byte fallback: <unk> <s> </s> (ids 0, 1, 2), the byte tokens <0x00>..<0xFF> (ids 3..258, as in llama's
// vocabulary), with `chatml` <|im_start|> and <|im_end|> (control, 259 and 260), then "▁", the printable ASCII
// characters, and every prefix of "▁" + word for the words of kTinyWords, longer pieces scoring higher. Each word is
// reached by one chain of merges, so " Once upon a time" is the four pieces ▁Once ▁upon ▁a ▁time. (Without chatml's
// markers quill finds no chat format in the vocabulary, as with a base model.)
TinyVocab tiny_spm_vocab(bool chatml = false);
// Byte-level BPE with the gpt-2 pre-tokenizer: the 256 byte characters (ids 0..255, in GPT-2's byte-to-unicode
// order of bytes), then for each word of kTinyWords the merges that build "Ġ" + word a character at a time, and
// last <|endoftext|> (BOS and EOS), <|im_start|> and <|im_end|> (control). No BOS is added.
TinyVocab tiny_bpe_vocab();
// A vocabulary-only GGUF of it (general.name "tiny-<model>"), and the tokenizer quill builds from that.
GgufFile vocab_gguf(const TinyVocab& vocab);
std::unique_ptr<Tokenizer> make_tokenizer(const TinyVocab& vocab);

// The words the tiny vocabularies hold whole (the prompts the tests use are made of them).
extern const std::vector<std::string_view> kTinyWords;

// A chatml template as models ship them: a default system message when the conversation has none, then each
// message between <|im_start|>role and <|im_end|>, and the assistant's header as the generation prompt.
inline constexpr const char* kTinyChatTemplate =
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a tiny test model.<|im_end|>\n{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace quill::test

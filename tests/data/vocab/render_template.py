#!/usr/bin/env python3
"""Renders a chat template as Hugging Face does (Jinja2 sandbox, trim_blocks, lstrip_blocks, loopcontrols, tojson
without ASCII escapes, raise_exception), with add_generation_prompt.

usage: render_template.py TEMPLATE.jinja MESSAGES.json BOS_TEXT EOS_TEXT > RENDERED.txt

deepseek-r1-qwen.chat.txt is this on the template of models/deepseek-r1-qwen.vocab.gguf (Jinja2 3.1.6), with
deepseek-r1-qwen.chat.json and the BOS and EOS token texts <｜begin▁of▁sentence｜> and <｜end▁of▁sentence｜>;
deepseek-r1-qwen.chat.ids is what llama.cpp's llama-tokenize gives that text (--no-bos, special tokens parsed).
"""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


tmpl, msgs, bos, eos = sys.argv[1:5]
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.policies["json.dumps_kwargs"] = {"ensure_ascii": False, "sort_keys": False}
env.globals["raise_exception"] = raise_exception
out = env.from_string(open(tmpl, encoding="utf-8").read()).render(
    messages=json.load(open(msgs, encoding="utf-8")), add_generation_prompt=True, bos_token=bos, eos_token=eos)
sys.stdout.write(out)

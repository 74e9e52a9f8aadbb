#!/usr/bin/env python3
"""Renders a GGUF's chat template as Hugging Face does (Jinja2 sandbox, trim_blocks, lstrip_blocks, loopcontrols,
tojson without ASCII escapes, raise_exception) on a conversation file as quill template --messages reads it
({"messages": [...], "tools": [...]}), with add_generation_prompt.

usage: render.py MODEL.gguf CONVERSATION.json > RENDERED.txt   (needs the gguf and jinja2 packages)
"""
import json
import sys

import gguf
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


model, conversation = sys.argv[1:3]
reader = gguf.GGUFReader(model)
tokens = reader.fields["tokenizer.ggml.tokens"]
token = lambda key: tokens.contents(reader.fields[key].contents())
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.policies["json.dumps_kwargs"] = {"ensure_ascii": False, "sort_keys": False}
env.globals["raise_exception"] = raise_exception
request = json.load(open(conversation, encoding="utf-8"))
out = env.from_string(reader.fields["tokenizer.chat_template"].contents()).render(
    **request, add_generation_prompt=True, bos_token=token("tokenizer.ggml.bos_token_id"),
    eos_token=token("tokenizer.ggml.eos_token_id"))
sys.stdout.write(out)

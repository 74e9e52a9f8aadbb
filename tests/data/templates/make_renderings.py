#!/usr/bin/env python3
"""Renders every chat template in src/ (copied from llama.cpp's models/templates, which holds each model's template as
its publisher ships it; THUDM-GLM-Z1-9B-0414.jinja, which llama.cpp's folder lacks, is GLM-Z1-0414's template as a
public repository quotes it, since the hub cannot be reached from here) with Python's Jinja2 as Hugging Face transformers renders chat templates,
for the conversations in cases.json, into golden/<template>/<case>.txt (or <case>.error: "ExceptionClass: message"
when Jinja2 raises). tests/unit/chat/test_template_corpus.cpp renders the same with quill and compares byte for byte.

The environment is transformers' (_compile_jinja_template): ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, the loopcontrols extension and {% generation %} blocks, tojson without ASCII escaping,
raise_exception, and strftime_now at the fixed time cases.json gives. Each case's variables are cases.json's
"variables", then the case's own (messages, add_generation_prompt, tools).

Which cases a template gets: "basic", "no_generation_prompt" and "content_parts" (content as a list of text parts)
always; "tools" (arguments as an object, as transformers passes them) and "tools_openai" (arguments as a JSON string
and null content, as OpenAI clients send them) when its source mentions tools; "reasoning" when it mentions
reasoning_content or thinking; "options" (enable_thinking false, reasoning_effort high, builtin_tools, documents,
date_string, ...) when it reads one of OPTIONS.

  python3 make_renderings.py [--copy-from DIR]   # --copy-from: first copy DIR/*.jinja into src/
"""
import argparse
import json
import shutil
import sys
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = Path(__file__).resolve().parent
# The variables of the "options" case: templates that read one of them get it.
OPTIONS = ("enable_thinking", "reasoning_effort", "builtin_tools", "tools_in_user_message", "date_string",
           "model_identity", "documents")


class GenerationBlock(Extension):
    """transformers' AssistantTracker without the tracking: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def applies(case_name, source):
    if case_name.startswith("tools"):
        return "tools" in source
    if case_name == "reasoning":
        return "reasoning_content" in source or "thinking" in source
    if case_name == "options":
        return any(name in source for name in OPTIONS)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--copy-from", type=Path, help="copy DIR/*.jinja into src/ first")
    args = ap.parse_args()
    src = HERE / "src"
    golden = HERE / "golden"
    if args.copy_from:
        src.mkdir(exist_ok=True)
        for p in sorted(args.copy_from.glob("*.jinja")):
            shutil.copyfile(p, src / p.name)
    cases = json.loads((HERE / "cases.json").read_text(encoding="utf-8"))
    env = make_environment(datetime.fromisoformat(cases["strftime_now_date"]))
    if golden.exists():
        shutil.rmtree(golden)
    counts = {"txt": 0, "error": 0}
    for path in sorted(src.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        out_dir = golden / path.stem
        out_dir.mkdir(parents=True)
        try:
            template = env.from_string(source)
        except jinja2.exceptions.TemplateError as e:
            print(f"{path.stem}: does not parse: {e}", file=sys.stderr)
            (out_dir / "parse.error").write_text(f"{type(e).__name__}: {e}\n", encoding="utf-8")
            counts["error"] += 1
            continue
        for case_name, case in cases["cases"].items():
            if not applies(case_name, source):
                continue
            variables = dict(cases["variables"])
            variables.update(case)
            try:
                text = template.render(**variables)
                (out_dir / f"{case_name}.txt").write_bytes(text.encode("utf-8"))
                counts["txt"] += 1
            except Exception as e:  # noqa: BLE001 -- any exception is the template's answer, recorded for the test
                (out_dir / f"{case_name}.error").write_text(f"{type(e).__name__}: {e}\n", encoding="utf-8")
                counts["error"] += 1
    print(f"{counts['txt']} renderings, {counts['error']} errors", file=sys.stderr)


if __name__ == "__main__":
    main()

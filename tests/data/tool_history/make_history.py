#!/usr/bin/env python3
"""Renders, with Python's Jinja2 as Hugging Face does (../templates/make_renderings.py's environment and clock), the
conversations that `quill chat` keeps after a reply that calls a tool, a /tool result and the reply to it: the
assistant message with "tool_calls" (arguments as the object, as transformers passes them; ids as quill draws them
from the turn's seed 7: 9 letters and digits for Mistral's templates), then the "tool" message with the call's id
and name. tests/unit/chat/test_tool_call_history.cpp renders quill's stored conversation, a next user message and
the generation prompt, and compares with these bytes.

  python3 make_history.py   # writes <name>.txt here
"""
import json
import sys
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE.parent / "templates"
sys.path.insert(0, str(TEMPLATES))
from make_renderings import make_environment  # noqa: E402

OPENAI_ID = "call_b358faf74ef9765a475c3d96"
MISTRAL_ID = "6gGuqVYqG"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]
CASES = {
    # name: (template, call id)
    "qwen2_5": ("Qwen-Qwen2.5-7B-Instruct", OPENAI_ID),
    "mistral_small": ("Mistral-Small-3.2-24B-Instruct-2506", MISTRAL_ID),
    "mistral_nemo": ("mistralai-Mistral-Nemo-Instruct-2407", MISTRAL_ID),
    "llama3_1": ("meta-llama-Llama-3.1-8B-Instruct", OPENAI_ID),
    "qwen3_coder": ("Qwen3-Coder", OPENAI_ID),
    "gpt_oss": ("openai-gpt-oss-120b", OPENAI_ID),
}


def messages(call_id):
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": call_id, "name": "get_weather",
         "content": "{\"temperature\": 18, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 18 \u00b0C and clear in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]


def main():
    cases = json.loads((TEMPLATES / "cases.json").read_text(encoding="utf-8"))
    env = make_environment(datetime.fromisoformat(cases["strftime_now_date"]))
    for name, (template, call_id) in CASES.items():
        source = (TEMPLATES / "src" / f"{template}.jinja").read_text(encoding="utf-8")
        text = env.from_string(source).render(messages=messages(call_id), tools=TOOLS, add_generation_prompt=True,
                                              bos_token="", eos_token="")
        (HERE / f"{name}.txt").write_bytes(text.encode("utf-8"))


if __name__ == "__main__":
    main()

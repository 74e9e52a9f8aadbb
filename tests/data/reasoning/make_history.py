#!/usr/bin/env python3
"""Renders, with Python's Jinja2 as Hugging Face does (../templates/make_renderings.py's environment and clock), the
conversations that `quill chat` keeps after a reasoning model's reply, with the reasoning in the field each template
reads: reasoning_content (Qwen3, SmolLM3, which drops it) or thinking (gpt-oss). The next turn's prompt must be these
bytes; tests/unit/chat/test_reasoning_history.cpp renders quill's stored conversation and compares.

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

USER = {"role": "user", "content": "Hi"}
NEXT = {"role": "user", "content": "And you?"}
CASES = {
    # name: (template, stored assistant message, messages after it, add_generation_prompt)
    "qwen3_next_turn": ("Qwen-Qwen3-0.6B",
                        {"role": "assistant", "content": "Hello!", "reasoning_content": "The user greets."}, [NEXT], True),
    "qwen3_last_turn": ("Qwen-Qwen3-0.6B",
                        {"role": "assistant", "content": "Hello!", "reasoning_content": "The user greets."}, [], False),
    "smollm3_next_turn": ("HuggingFaceTB-SmolLM3-3B",
                          {"role": "assistant", "content": "Hello!", "reasoning_content": "The user greets."}, [NEXT],
                          True),
    "gpt_oss_next_turn": ("openai-gpt-oss-120b",
                          {"role": "assistant", "content": "Hello!", "thinking": "The user greets."}, [NEXT], True),
}


def main():
    cases = json.loads((TEMPLATES / "cases.json").read_text(encoding="utf-8"))
    env = make_environment(datetime.fromisoformat(cases["strftime_now_date"]))
    for name, (template, assistant, after, generation_prompt) in CASES.items():
        source = (TEMPLATES / "src" / f"{template}.jinja").read_text(encoding="utf-8")
        text = env.from_string(source).render(messages=[USER, assistant] + after,
                                              add_generation_prompt=generation_prompt, bos_token="", eos_token="")
        (HERE / f"{name}.txt").write_bytes(text.encode("utf-8"))


if __name__ == "__main__":
    main()

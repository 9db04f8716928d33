#!/usr/bin/env python3
"""Writes the tool-calling demo's data (no dependencies): adding numbers of six digits, too large for the
tiny model to add in its head, with the calculator of examples/tools/calculator.py.

  examples/data/tools_sft/train.jsonl    256 traces: the user asks "What is A plus B?", the assistant
                                         calls add(a=A, b=B), the tool answers, the assistant repeats
                                         the sum; each row carries the calculator's `tools` column
  examples/data/tools_grpo/train.jsonl   256 other questions as prompts, with their `answer`
  examples/data/tools_grpo/test.jsonl    64 held-out questions, with their `answer`

The tool schemas are those the adapter announces (examples/tools/python_tools.py), so the SFT rows
render the same system turn as the GRPO prompts. Run from the repository root:
python3 scripts/tool_demo_data.py
"""
import json
import pathlib
import random
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "tools"))
import calculator  # noqa: E402
import python_tools  # noqa: E402

SFT_ROWS, GRPO_ROWS, TEST_ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 256, 256, 64


def main():
    tools = [python_tools.schema(calculator.add), python_tools.schema(calculator.multiply)]
    rng = random.Random(11)
    pairs, seen = [], set()
    while len(pairs) < SFT_ROWS + GRPO_ROWS + TEST_ROWS:
        a, b = rng.randrange(100000, 1000000), rng.randrange(100000, 1000000)
        if (a, b) not in seen:
            seen.add((a, b))
            pairs.append((a, b))
    question = "What is {} plus {}?".format

    def write(path, rows):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    traces = []
    for a, b in pairs[:SFT_ROWS]:
        user = {"role": "user", "content": question(a, b)}
        call = {"type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}
        traces.append({"messages": [user, {"role": "assistant", "content": "", "tool_calls": [call]},
                                    {"role": "tool", "name": "add", "content": str(a + b)},
                                    {"role": "assistant", "content": str(a + b)}],
                       "tools": tools})
    write(ROOT / "examples/data/tools_sft/train.jsonl", traces)
    direct = [{"messages": [{"role": "user", "content": question(a, b)}, {"role": "assistant", "content": str(a + b)}]}
              for a, b in pairs[:SFT_ROWS]]
    write(ROOT / "examples/data/direct_sft/train.jsonl", direct)
    prompts = [{"prompt": [{"role": "user", "content": question(a, b)}], "answer": a + b} for a, b in pairs[SFT_ROWS:]]
    write(ROOT / "examples/data/tools_grpo/train.jsonl", prompts[:GRPO_ROWS])
    write(ROOT / "examples/data/tools_grpo/test.jsonl", prompts[GRPO_ROWS:])
    print(f"{SFT_ROWS} traces, {GRPO_ROWS} training prompts, {TEST_ROWS} held out")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the tool-calling demo's data (no dependencies beyond the standard library): "What digit is in
box 7?", where each row's ten boxes hold random digits that only the boxes environment's open_box tool
shows (examples/tools/boxes.py). A model that answers without the tool can only guess (one in ten).

  examples/data/tools_sft/train.jsonl          the SFT traces: the user asks, the assistant calls
                                               open_box(box=7), the tool answers, the assistant repeats
                                               the digit; each row carries the tool's schema (`tools`)
  examples/data/tools_direct_sft/train.jsonl   the same questions answered without the tool (the baseline)
  examples/data/tools_grpo/train.jsonl         other rows as prompts, with their `boxes` and `answer`
  examples/data/tools_grpo/test.jsonl          held-out rows, likewise

The schema is the one the adapter announces for the environment (examples/tools/python_tools.py), so the
SFT rows render the same system turn as the GRPO prompts. Run from the repository root:
python3 scripts/tool_demo_data.py
"""
import json
import pathlib
import random
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "tools"))
import boxes  # noqa: E402
import python_tools  # noqa: E402

SFT_ROWS, GRPO_ROWS, TEST_ROWS = 1024, 512, 128


def main():
    tools = [python_tools.schema(boxes.Boxes().open_box)]
    rng = random.Random(11)

    def row():
        contents = "".join(str(rng.randrange(10)) for _ in range(10))
        box = rng.randrange(10)
        return contents, box, int(contents[box])

    def question(box):
        return {"role": "user", "content": f"What digit is in box {box}?"}

    def write(path, rows):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    sft = [row() for _ in range(SFT_ROWS)]
    traces = []
    for _, box, digit in sft:
        call = {"type": "function", "function": {"name": "open_box", "arguments": {"box": box}}}
        traces.append({"messages": [question(box), {"role": "assistant", "content": "", "tool_calls": [call]},
                                    {"role": "tool", "name": "open_box", "content": str(digit)},
                                    {"role": "assistant", "content": str(digit)}],
                       "tools": tools})
    write(ROOT / "examples/data/tools_sft/train.jsonl", traces)
    write(ROOT / "examples/data/tools_direct_sft/train.jsonl",
          [{"messages": [question(box), {"role": "assistant", "content": str(digit)}]} for _, box, digit in sft])
    prompts = [{"prompt": [question(box)], "boxes": contents, "answer": digit}
               for contents, box, digit in (row() for _ in range(GRPO_ROWS + TEST_ROWS))]
    write(ROOT / "examples/data/tools_grpo/train.jsonl", prompts[:GRPO_ROWS])
    write(ROOT / "examples/data/tools_grpo/test.jsonl", prompts[GRPO_ROWS:])
    print(f"{SFT_ROWS} traces (and as many direct answers), {GRPO_ROWS} training prompts, {TEST_ROWS} held out")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A trlx reward program: is the sum right? ("What is 12 plus 30?")

Reads one JSON request per line on stdin and answers one JSON line on stdout
(docs/reward_programs.md). The dataset needs a column `answer` (the correct
integer); without it, columns `a` and `b` are added up instead.

  reward = 1.0      the last integer in the completion is the answer
         = 0.0      another integer (with --partial: max(0, 1 - |x - answer| / max(1, |answer|)),
                    x being that integer: credit for coming close)
         = null     no integer in the completion, or no answer for the row

Use it in a trainer config:

  reward_funcs:
    - command: python3 examples/rewards/addition_reward.py            # or: ... addition_reward.py --partial

Try it by hand:

  echo '{"prompts":["What is 2 plus 3?"],"completions":["5"],"completion_ids":[[20]],"columns":{"answer":[5]}}' \
    | python3 examples/rewards/addition_reward.py
"""
import json
import re
import sys

# An integer, possibly negative, possibly grouped with commas ("1,234").
INTEGER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?!\d)|-?\d+")


def completion_text(completion):
    # A conversational prompt gets [{"role": "assistant", "content": ...}]; with
    # tools, the whole exchange [assistant, tool, ..., assistant]: the answer is
    # the last assistant message's.
    if isinstance(completion, list):
        answers = [m.get("content", "") for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        return answers[-1] if answers and isinstance(answers[-1], str) else ""
    return completion if isinstance(completion, str) else ""


def final_integer(text):
    matches = INTEGER.findall(text)
    return int(matches[-1].replace(",", "")) if matches else None


def expected(columns, i):
    if "answer" in columns:
        value = columns["answer"][i]
    elif "a" in columns and "b" in columns:
        a, b = columns["a"][i], columns["b"][i]
        value = None if a is None or b is None else int(a) + int(b)
    else:
        value = None
    if value is None:
        return None
    return int(str(value).strip().replace(",", ""))


def reward(text, answer, partial):
    x = final_integer(text)
    if x is None or answer is None:
        return None
    if x == answer:
        return 1.0
    return max(0.0, 1.0 - abs(x - answer) / max(1, abs(answer))) if partial else 0.0


def main():
    partial = "--partial" in sys.argv[1:]
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        columns = request.get("columns", {})
        rewards = [
            reward(completion_text(c), expected(columns, i), partial) for i, c in enumerate(request["completions"])
        ]
        # One line per request, flushed: trlx waits for it.
        print(json.dumps({"rewards": rewards}, allow_nan=False), flush=True)


if __name__ == "__main__":
    main()

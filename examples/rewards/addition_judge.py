#!/usr/bin/env python3
"""A trlx judge program: which of two answers to "What is a plus b?" is better?

Reads one JSON request per line on stdin ({"prompts": [...], "completions": [[first, second], ...],
"columns": {"answer": [...]}, ...}) and answers one JSON line on stdout: {"preferences": [...]},
per pair 0 when the first completion's last integer is nearer the answer, 1 when the second's is,
null when neither has one or they are equally near (docs/reward_programs.md, "Judges").

Use it with online DPO:

  judge: {command: python3 examples/rewards/addition_judge.py}

Try it by hand:

  echo '{"prompts":["What is 2 plus 3?"],"completions":[["4","5"]],"columns":{"answer":[5]}}' \\
    | python3 examples/rewards/addition_judge.py
"""
import json
import sys

from addition_reward import completion_text, expected, final_integer


def distance(completion, answer):
    x = final_integer(completion_text(completion))
    return None if x is None or answer is None else abs(x - answer)


def prefer(pair, answer):
    d = [distance(c, answer) for c in pair]
    if d[0] is None and d[1] is None:
        return None
    if d[1] is None or (d[0] is not None and d[0] < d[1]):
        return 0
    if d[0] is None or d[1] < d[0]:
        return 1
    return None


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        columns = request.get("columns", {})
        preferences = [prefer(pair, expected(columns, i)) for i, pair in enumerate(request["completions"])]
        print(json.dumps({"preferences": preferences}), flush=True)


if __name__ == "__main__":
    main()

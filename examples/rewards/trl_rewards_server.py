#!/usr/bin/env python3
"""Serves one of TRL's own reward functions (trl.rewards) as a trlx reward program.

For runs that must score exactly as TRL does (accuracy_reward with math_verify,
for instance). One program serves one function; start one per function:

  reward_funcs:
    - {command: "python3 examples/rewards/trl_rewards_server.py accuracy_reward", name: accuracy_reward}
    - command: >-
        python3 examples/rewards/trl_rewards_server.py get_soft_overlong_punishment
        --param max_completion_len=512 --param soft_punish_cache=64

Usage: trl_rewards_server.py FUNCTION [--param KEY=VALUE ...]

FUNCTION is a name in trl.rewards (accuracy_reward, reasoning_accuracy_reward,
think_format_reward, get_cosine_scaled_reward, get_repetition_penalty_reward,
get_soft_overlong_punishment, ...). A factory (a name starting with get_) is
called once with the parameters and serves the function it returns; any other
function gets the parameters as extra keyword arguments on every call. VALUE
is read as JSON when it parses (512, -1.0, true, ["</think>"]), else taken as
a string.

Each request is handed over as TRL's GRPOTrainer does: prompts=, completions=,
completion_ids=, every dataset column as a keyword argument (solution=, ...),
and trainer_state (with global_step, when trlx sends "step"). Two adaptations:
a completion that is a plain string is handed over as
[{"role": "assistant", "content": ...}], the form trl.rewards functions read;
and a NaN reward is answered as null (JSON has no NaN; TRL treats both alike).

Needs `pip install trl` (and `math_verify` for the accuracy rewards). The
protocol is in docs/reward_programs.md.
"""
import argparse
import json
import math
import os
import sys
import types

# Functions that verify answers with math_verify (TRL checks only when called).
NEEDS_MATH_VERIFY = {"accuracy_reward", "reasoning_accuracy_reward", "get_cosine_scaled_reward"}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("function", help="a name in trl.rewards, e.g. accuracy_reward")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a parameter of the function (repeatable); VALUE is JSON or a string")
    args = parser.parse_args()
    params = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--param {item!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return args.function, params


def load(name, params):
    try:
        import trl.rewards
    except ImportError as e:
        sys.exit(f"trl_rewards_server: cannot import trl.rewards ({e}); pip install trl")
    available = sorted(n for n in dir(trl.rewards) if not n.startswith("_") and callable(getattr(trl.rewards, n, None)))
    if name not in available:
        sys.exit(f"trl_rewards_server: trl.rewards has no function {name!r}; it has: {', '.join(available)}")
    if name in NEEDS_MATH_VERIFY:
        from trl.import_utils import is_math_verify_available

        if not is_math_verify_available():
            sys.exit(f"trl_rewards_server: {name} needs math_verify; pip install math-verify")
    func = getattr(trl.rewards, name)
    if name.startswith("get_"):
        return func(**params), {}
    return func, params


def as_message(completion):
    return [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion


def to_reward(value):
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def main():
    name, params = parse_args()
    # The protocol owns stdout: whatever the libraries print goes to stderr,
    # which trlx keeps for its error messages.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    func, call_params = load(name, params)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        kwargs = dict(request.get("columns", {}))
        kwargs.update(call_params)
        kwargs["trainer_state"] = types.SimpleNamespace(global_step=request.get("step"))
        rewards = func(
            prompts=request["prompts"],
            completions=[as_message(c) for c in request["completions"]],
            completion_ids=request["completion_ids"],
            **kwargs,
        )
        answers.write(json.dumps({"rewards": [to_reward(r) for r in rewards]}, allow_nan=False) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()

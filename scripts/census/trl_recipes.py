#!/usr/bin/env python3
"""Writes tests/data/config/trl_recipes/: the command lines TRL ships as
recipes in the docstrings of its training scripts (trl/scripts/<trainer>.py
from an installed TRL, `python3 -m pip install trl`, and, given a clone of
TRL's repository, its examples/scripts/), one file per recipe:
the trainer on the first line, then one flag and its value(s) per line.
tests/e2e/trl_recipes.sh feeds each to `trlx validate`: a recipe validates,
or fails only on settings refused by name, never on an unknown one.

  python3 scripts/census/trl_recipes.py [--repo <git dir of a TRL clone>]
"""
import ast
import pathlib
import re
import shlex
import subprocess
import sys

import trl

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "config" / "trl_recipes"
SCRIPTS = {"sft": "sft", "dpo": "dpo", "kto": "kto", "reward": "reward", "grpo": "grpo", "rloo": "rloo"}
# examples/scripts/<name>.py of TRL's repository -> the trlx trainer.
EXAMPLES = {"sft": "sft", "dpo": "dpo", "kto": "kto", "cpo": "cpo", "orpo": "orpo", "online_dpo": "online-dpo",
            "reward_modeling": "reward", "rloo": "rloo", "gspo": "grpo", "ppo/ppo": "ppo", "ppo/ppo_tldr": "ppo"}


def recipes(text):
    doc = ast.get_docstring(ast.parse(text)) or ""
    for block in [doc]:
        command = block.replace("\\\n", " ")
        for line in command.splitlines():
            if ("scripts/" in line and ".py" in line) or line.strip().startswith("trl ") or "-m trl.scripts." in line:
                yield shlex.split(line)


CLASS_TO_TRAINER = {"SFTConfig": "sft", "DPOConfig": "dpo", "KTOConfig": "kto", "CPOConfig": "cpo",
                    "ORPOConfig": "orpo", "RewardConfig": "reward", "GRPOConfig": "grpo", "RLOOConfig": "rloo",
                    "OnlineDPOConfig": "online-dpo", "PPOConfig": "ppo"}


def config_calls(text):
    """(trainer, [(field, value)]) for each `XConfig(...)` call of a script: its keyword arguments whose values
    are literals, field for field (the others are computed in Python and left out)."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CLASS_TO_TRAINER:
            fields = []
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                try:
                    fields.append((kw.arg, ast.literal_eval(kw.value)))
                except ValueError:
                    pass
            yield CLASS_TO_TRAINER[node.func.id], fields


def flags(argv):
    start = next(i for i, a in enumerate(argv)
                 if a.endswith(".py") or a.startswith("trl.scripts.") or (a in SCRIPTS and i and argv[i - 1] == "trl")) + 1
    out, current = [], None
    for a in argv[start:]:
        if a.startswith("--"):
            current = [a[2:]]
            out.append(current)
        elif current is not None:
            current.append(a)
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.args"):
        old.unlink()
    root = pathlib.Path(trl.__file__).parent / "scripts"
    sources = [(f"scripts_{s}", t, (root / f"{s}.py").read_text()) for s, t in SCRIPTS.items()]
    if "--repo" in sys.argv:
        repo = sys.argv[sys.argv.index("--repo") + 1]
        for s, t in EXAMPLES.items():
            text = subprocess.run(["git", "-C", repo, "show", f"HEAD:examples/scripts/{s}.py"], capture_output=True,
                                  text=True, check=True).stdout
            sources.append(("examples_" + s.replace("/", "_"), t, text))
    repo_commit = ""
    if "--repo" in sys.argv:
        repo_commit = subprocess.run(["git", "-C", sys.argv[sys.argv.index("--repo") + 1], "rev-parse", "HEAD"],
                                     capture_output=True, text=True, check=True).stdout.strip()
    count = 0
    for name, trainer, text in sources:
        n = 0
        for argv in recipes(text):
            n += 1
            lines = [trainer] + [" ".join(shlex.quote(x) for x in f) for f in flags(argv)]
            (OUT / f"{name}_{n}.args").write_text("\n".join(lines) + "\n")
            count += 1
        for config_trainer, fields in config_calls(text):
            n += 1
            lines = [config_trainer]
            for k, v in fields:
                values = v if isinstance(v, (list, tuple)) else [v]
                words = ["null" if x is None else str(x).lower() if isinstance(x, bool) else str(x) for x in values]
                lines.append(" ".join(shlex.quote(x) for x in [k] + words) if values else f"{k} []")
            (OUT / f"{name}_{n}.args").write_text("\n".join(lines) + "\n")
            count += 1
    (OUT / "README").write_text(
        f"The recipes of TRL {trl.__version__}'s trl/scripts/*.py (scripts_*) and of the TRL repository's "
        f"examples/scripts/*.py at commit {repo_commit or '(none given)'} (examples_*): their command lines and "
        "XConfig(...) calls, written by "
        "scripts/census/trl_recipes.py: the trainer, then one flag and its value(s) per line.\n")
    print(f"wrote {count} recipes to {OUT}")


if __name__ == "__main__":
    main()

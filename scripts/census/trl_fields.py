#!/usr/bin/env python3
"""Counts, per trainer, how many of TRL's config fields trlx builds, refuses
by name (accepted only at their default, with a reason) and does not know
(an unknown key stops the run). TRL's fields come from an installed TRL (dev
time: `python3 -m pip install trl`), read the way scripts/fixtures/
config_fixtures.py reads them; trlx's from `trlx docs`, the reference
generated from its config tables. TrainingArguments' own fields are counted
apart from the TRL-specific ones (those TRL's config classes add), since
most of transformers' are about its Trainer.

  python3 scripts/census/trl_fields.py build/apps/trlx/trlx [--unknown]
"""
import dataclasses
import re
import subprocess
import sys

import transformers
import trl
from trl import DistillationConfig, DPOConfig, GRPOConfig, KTOConfig, ModelConfig, RewardConfig, RLOOConfig, ScriptArguments, SFTConfig
from trl.experimental.cpo import CPOConfig
from trl.experimental.online_dpo import OnlineDPOConfig
from trl.experimental.orpo import ORPOConfig

CLASSES = {"sft": SFTConfig, "dpo": DPOConfig, "kto": KTOConfig, "reward": RewardConfig, "cpo": CPOConfig,
           "orpo": ORPOConfig, "grpo": GRPOConfig, "rloo": RLOOConfig, "online-dpo": OnlineDPOConfig,
           "distill": DistillationConfig}
try:  # PPOConfig left TRL's main package after 0.26
    from trl.experimental.ppo import PPOConfig
    CLASSES["ppo"] = PPOConfig
except ImportError:
    pass


def trlx_fields(trlx):
    text = subprocess.run([trlx, "docs"], capture_output=True, text=True, check=True).stdout
    out, trainer = {}, None
    for line in text.splitlines():
        m = re.match(r"^## trlx (\S+)", line)
        if m:
            trainer = m.group(1)
            out[trainer] = {}
            continue
        m = re.match(r"^\| `([^`]+)` \|", line)
        if m and trainer:
            state = "refused" if "only the default (not built" in line else "built"
            out[trainer][m.group(1)] = state
            # A section (model_init_kwargs.dtype, ...): TRL's field is the
            # mapping, built when any of its keys is.
            if "." in m.group(1):
                section = m.group(1).split(".")[0]
                if out[trainer].get(section) != "built":
                    out[trainer][section] = state
    return out


def main():
    trlx = sys.argv[1]
    show_unknown = "--unknown" in sys.argv
    known = trlx_fields(trlx)
    ta = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    shared = {f.name for f in dataclasses.fields(ModelConfig)} | {f.name for f in dataclasses.fields(ScriptArguments)}
    print(f"TRL {trl.__version__}, transformers {transformers.__version__}")
    print(f"{'trainer':<12} {'TRL-specific: built':>20} {'refused':>8} {'unknown':>8}   "
          f"{'TrainingArguments: built':>24} {'refused':>8} {'unknown':>8}")
    totals = [0] * 6
    unknown_all = {}
    for name, cls in CLASSES.items():
        fields = {f.name for f in dataclasses.fields(cls)} | shared
        mine = known.get(name, {})
        row = []
        for group in (sorted(fields - ta), sorted(fields & ta)):
            built = sum(1 for f in group if mine.get(f) == "built")
            refused = sum(1 for f in group if mine.get(f) == "refused")
            unknown = [f for f in group if f not in mine]
            row += [built, refused, len(unknown)]
            for f in unknown:
                unknown_all.setdefault(f, []).append(name)
        totals = [a + b for a, b in zip(totals, row)]
        print(f"{name:<12} {row[0]:>20} {row[1]:>8} {row[2]:>8}   {row[3]:>24} {row[4]:>8} {row[5]:>8}")
    print(f"{'all':<12} {totals[0]:>20} {totals[1]:>8} {totals[2]:>8}   {totals[3]:>24} {totals[4]:>8} {totals[5]:>8}")
    if show_unknown:
        for f, where in sorted(unknown_all.items()):
            print(f"  {f}: {', '.join(where)}")


if __name__ == "__main__":
    main()

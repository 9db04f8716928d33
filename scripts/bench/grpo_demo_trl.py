#!/usr/bin/env python3
"""TRL's GRPOTrainer (or RLOOTrainer) on the GRPO demo, for the README's
side-by-side curve: the settings of configs/grpo.yaml (the quickstart SFT
model in runs/sft, the adding prompts, 8 completions per prompt, 128 per step,
16 tokens, lr 3e-5, 600 steps), rewarded by the same function as
examples/rewards/addition_reward.py (1 for the right sum), imported from it. Dev time only (needs
trl). Writes the trained model and TRL's log_history (JSON lines) to OUT:

  python3 scripts/bench/grpo_demo_trl.py OUT [grpo|rloo]
  scripts/bench/addition_accuracy.sh OUT
"""
import importlib.util
import pathlib
import sys

import torch
from datasets import load_dataset
from demo_common import save_run
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
out = pathlib.Path(sys.argv[1])
trainer = sys.argv[2] if len(sys.argv) > 2 else "grpo"
spec = importlib.util.spec_from_file_location("addition_reward", ROOT / "examples/rewards/addition_reward.py")
addition = importlib.util.module_from_spec(spec)
spec.loader.exec_module(addition)


def addition_reward(completions, answer, **kwargs):
    return [addition.reward(addition.completion_text(c), a, False) for c, a in zip(completions, answer)]


torch.set_num_threads(2)
tok = AutoTokenizer.from_pretrained(ROOT / "runs/sft")
model = AutoModelForCausalLM.from_pretrained(ROOT / "runs/sft", dtype=torch.float32)
ds = load_dataset("json", data_files=str(ROOT / "examples/data/grpo/train.jsonl"), split="train")
common = dict(output_dir=str(out), per_device_train_batch_size=128, num_generations=8, max_completion_length=16,
              learning_rate=3e-5, lr_scheduler_type="constant", max_steps=600, temperature=1.0, bf16=False, use_cpu=True,
              gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=50, seed=42,
              beta=0.0, max_grad_norm=1.0, dataloader_num_workers=0)
if trainer == "grpo":
    from trl import GRPOConfig, GRPOTrainer
    tr = GRPOTrainer(model=model, args=GRPOConfig(**common, loss_type="dapo"), train_dataset=ds,
                     processing_class=tok, reward_funcs=addition_reward)
else:
    from trl import RLOOConfig, RLOOTrainer
    tr = RLOOTrainer(model=model, args=RLOOConfig(**common), train_dataset=ds, processing_class=tok,
                     reward_funcs=addition_reward)
tr.train()
save_run(tr, tok, out)

#!/usr/bin/env python3
"""TRL's OnlineDPOTrainer on the online DPO demo, for the README's side-by-side figures: the
settings of configs/online_dpo.yaml (the quickstart SFT model in runs/sft, the adding prompts,
16 prompts per step, 16 new tokens, temperature 0.9, beta 0.1, missing_eos_penalty 1), ranked
by the quickstart reward model (runs/reward). Dev time only (needs trl). Writes the trained model
and TRL's log_history (JSON lines) to OUT:

  python3 scripts/bench/online_dpo_demo_trl.py OUT [learning_rate] [max_steps]
"""
import pathlib
import sys

import torch
from datasets import load_dataset
from demo_common import save_run
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer

ROOT = pathlib.Path(__file__).resolve().parents[2]
out = pathlib.Path(sys.argv[1])
lr = float(sys.argv[2]) if len(sys.argv) > 2 else 1e-4
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 150

torch.set_num_threads(2)
tok = AutoTokenizer.from_pretrained(ROOT / "runs/sft")
model = AutoModelForCausalLM.from_pretrained(ROOT / "runs/sft", dtype=torch.float32)
reward = AutoModelForSequenceClassification.from_pretrained(ROOT / "runs/reward", num_labels=1, dtype=torch.float32)
reward_tok = AutoTokenizer.from_pretrained(ROOT / "runs/reward")
ds = load_dataset("json", data_files=str(ROOT / "examples/data/grpo/train.jsonl"), split="train")
ds = ds.remove_columns(["answer"])
args = OnlineDPOConfig(output_dir=str(out), per_device_train_batch_size=16, max_new_tokens=16, max_length=64,
                       temperature=0.9, beta=[0.1], missing_eos_penalty=1.0, learning_rate=lr,
                       lr_scheduler_type="constant", max_steps=steps, bf16=False, use_cpu=True,
                       gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=10, seed=42,
                       max_grad_norm=1.0, dataloader_num_workers=0)
tr = OnlineDPOTrainer(model=model, reward_funcs=[reward], reward_processing_classes=[reward_tok], args=args,
                      train_dataset=ds, processing_class=tok)
tr.train()
save_run(tr, tok, out)

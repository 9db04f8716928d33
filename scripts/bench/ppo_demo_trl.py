#!/usr/bin/env python3
"""TRL's PPOTrainer on the PPO demo, for the README's side-by-side figures: the settings of
configs/ppo.yaml (the quickstart SFT model in runs/sft, the adding prompts, 16 prompts per step,
16-token responses ending at eos, temperature 1.3, missing_eos_penalty 1, 4 PPO epochs, kl_coef 0.05),
scored by the quickstart reward model (runs/reward), which also gives the value model its starting
weights. Dev time only: TRL's PPOTrainer lives in trl 0.26's trl.experimental.ppo (see
scripts/fixtures/ppo_fixtures.py for the virtual environment). TRL's PPO never clips gradients
(configs/ppo.yaml: max_grad_norm 1.0; pass 0 to trlx to compare like with like). Writes the trained
policy and TRL's log_history (JSON lines) to OUT:

  python3 scripts/bench/ppo_demo_trl.py OUT [learning_rate] [total_episodes]
"""
import pathlib
import sys

import torch
from datasets import load_dataset
from demo_common import save_run
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
from trl.experimental.ppo import PPOConfig, PPOTrainer

ROOT = pathlib.Path(__file__).resolve().parents[2]
out = pathlib.Path(sys.argv[1])
lr = float(sys.argv[2]) if len(sys.argv) > 2 else 3e-4
episodes = int(sys.argv[3]) if len(sys.argv) > 3 else 2400

torch.set_num_threads(2)
tok = AutoTokenizer.from_pretrained(ROOT / "runs/sft")
tok.padding_side = "left"
policy = AutoModelForCausalLM.from_pretrained(ROOT / "runs/sft", dtype=torch.float32)
ref = AutoModelForCausalLM.from_pretrained(ROOT / "runs/sft", dtype=torch.float32)
reward = AutoModelForSequenceClassification.from_pretrained(ROOT / "runs/reward", num_labels=1, dtype=torch.float32)
value = AutoModelForSequenceClassification.from_pretrained(ROOT / "runs/reward", num_labels=1, dtype=torch.float32)
ds = load_dataset("json", data_files=str(ROOT / "examples/data/grpo/train.jsonl"), split="train")
ds = ds.map(lambda row: {"input_ids": tok(row["prompt"])["input_ids"]}, remove_columns=ds.column_names)
args = PPOConfig(output_dir=str(out), per_device_train_batch_size=16, response_length=16, stop_token="eos",
                 temperature=1.3, missing_eos_penalty=1.0, num_ppo_epochs=4, kl_coef=0.05, learning_rate=lr,
                 total_episodes=episodes, bf16=False, use_cpu=True, gradient_checkpointing=False, report_to="none",
                 save_strategy="no", logging_steps=10, seed=42, num_sample_generations=0)
tr = PPOTrainer(args=args, processing_class=tok, model=policy, ref_model=ref, reward_model=reward,
                value_model=value, train_dataset=ds)
tr.train()
save_run(tr, tok, out)

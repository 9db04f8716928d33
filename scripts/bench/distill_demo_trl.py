#!/usr/bin/env python3
"""TRL's DistillationTrainer (on-policy distillation) on CPU in fp32, the TRL side of
scripts/bench/bench_distill.sh. Dev time only (needs trl >= 1.16).

  python3 scripts/bench/distill_demo_trl.py STUDENT TEACHER TRAIN_JSONL OUT \
      [--steps 3] [--batch 2] [--completion_len 512] [--beta 1.0] [--temperature 1.0] \
      [--threads 2] [--seed 42] [--learning_rate 1e-5]

Writes TRL's log_history as JSON lines to OUT/log_history.jsonl (the model is not saved)
and prints one JSON line, prefixed "bench ", with what the bench compares:
  step_end_s  seconds from the start of train() to the end of each optimizer step
  generation_s  seconds in _generate_and_score_completions (sampling the completions), summed
  train_runtime  TRL's own train_runtime
"""
import argparse
import json
import pathlib
import time

import torch
from datasets import load_dataset
from transformers import AutoTokenizer, TrainerCallback
from trl import DistillationConfig, DistillationTrainer

p = argparse.ArgumentParser()
p.add_argument("student")
p.add_argument("teacher")
p.add_argument("train")
p.add_argument("out", type=pathlib.Path)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--completion_len", type=int, default=512)
p.add_argument("--beta", type=float, default=1.0)
p.add_argument("--temperature", type=float, default=1.0)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--seed", type=int, default=42)
p.add_argument("--learning_rate", type=float, default=1e-5)
a = p.parse_args()
torch.set_num_threads(a.threads)


class StepClock(TrainerCallback):
    def __init__(self):
        self.t0, self.ends = None, []

    def on_train_begin(self, args, state, control, **kw):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.ends.append(time.perf_counter() - self.t0)


tok = AutoTokenizer.from_pretrained(a.student, padding_side="left")
ds = load_dataset("json", data_files=a.train, split="train")
args = DistillationConfig(
    output_dir=str(a.out), teacher_model_name_or_path=a.teacher, model_init_kwargs={"dtype": "float32"},
    teacher_model_init_kwargs={"dtype": "float32"}, beta=a.beta, temperature=a.temperature,
    max_completion_length=a.completion_len, per_device_train_batch_size=a.batch, gradient_accumulation_steps=1,
    max_steps=a.steps, learning_rate=a.learning_rate, logging_steps=1, bf16=False, use_cpu=True,
    gradient_checkpointing=False, save_strategy="no", report_to="none", seed=a.seed, shuffle_dataset=False,
    dataloader_num_workers=0)
clock = StepClock()
tr = DistillationTrainer(model=a.student, teacher_model=a.teacher, args=args, train_dataset=ds, processing_class=tok,
                         callbacks=[clock])

gen_s = 0.0
generate = tr._generate_and_score_completions


def timed_generate(*args, **kw):
    global gen_s
    t = time.perf_counter()
    try:
        return generate(*args, **kw)
    finally:
        gen_s += time.perf_counter() - t


tr._generate_and_score_completions = timed_generate
tr.train()
a.out.mkdir(parents=True, exist_ok=True)
with open(a.out / "log_history.jsonl", "w") as f:
    for row in tr.state.log_history:
        f.write(json.dumps(row) + "\n")
end = [r for r in tr.state.log_history if "train_runtime" in r][-1]
print("bench " + json.dumps({"step_end_s": clock.ends, "generation_s": gen_s, "train_runtime": end["train_runtime"]}),
      flush=True)

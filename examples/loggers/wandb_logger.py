#!/usr/bin/env python3
"""A trlx logger program for Weights & Biases (docs/loggers.md).

trlx starts it on rank 0 and writes the run to its stdin as JSON lines:
{"event": "start", "config": {...}, ...}, then {"event": "log", "step": N,
"metrics": {...}} for each logged row, then {"event": "end", ...}; stdin
closes when the run ends. It answers nothing.

    report_to:
      - command: python3 examples/loggers/wandb_logger.py

Needs `pip install wandb`. WANDB_PROJECT names the project (default trlx);
WANDB_MODE=offline writes the run under ./wandb for a later `wandb sync`,
without a network. Metric names follow transformers' WandbCallback: eval_x
is logged as eval/x, everything else as train/x.
"""
import json
import os
import sys


def main():
    import wandb

    run = None
    for line in sys.stdin:
        event = json.loads(line)
        kind = event.get("event")
        if kind == "start":
            run = wandb.init(
                project=os.environ.get("WANDB_PROJECT", "trlx"),
                name=event.get("run_name") or None,
                config=event.get("config", {}),
                dir=os.environ.get("WANDB_DIR") or None,
            )
            run.config.update({"trlx_trainer": event.get("trainer"), "world_size": event.get("world_size")},
                              allow_val_change=True)
        elif kind == "log" and run is not None:
            metrics = {}
            for k, v in event["metrics"].items():
                metrics[("eval/" + k[5:]) if k.startswith("eval_") else ("train/" + k)] = v
            metrics["train/global_step"] = event["step"]
            run.log(metrics, step=event["step"])
        elif kind == "end" and run is not None:
            run.summary["interrupted"] = event.get("interrupted", False)
    if run is not None:
        run.finish()


if __name__ == "__main__":
    main()

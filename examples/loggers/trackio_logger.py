#!/usr/bin/env python3
"""A trlx logger program for Trackio (docs/loggers.md): each logged row goes
to trackio.log, so that `trackio show` lists the run.

    report_to:
      - command: python3 examples/loggers/trackio_logger.py

Needs `pip install trackio`. TRACKIO_PROJECT names the project (default
trlx); the run is named by run_name when the config sets one.
"""
import json
import os
import sys


def main():
    import trackio

    started = False
    for line in sys.stdin:
        event = json.loads(line)
        kind = event.get("event")
        if kind == "start":
            trackio.init(project=os.environ.get("TRACKIO_PROJECT", "trlx"), name=event.get("run_name") or None,
                         config=event.get("config", {}))
            started = True
        elif kind == "log" and started:
            metrics = {}
            for k, v in event["metrics"].items():
                metrics[("eval/" + k[5:]) if k.startswith("eval_") else ("train/" + k)] = v
            trackio.log(metrics, step=event["step"])
    if started:
        trackio.finish()


if __name__ == "__main__":
    main()

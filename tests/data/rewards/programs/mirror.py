#!/usr/bin/env python3
"""A reward program for tests/unit/rewards_program: behaves (or misbehaves)
as its first argument says, so that each test sees one protocol case.

  column NAME        rewards = the request's column NAME, as given
  count              rewards = how many requests this process has seen
  step               rewards = the request's "step" (null when absent)
  len                rewards = len(completion_ids[i]); null for an empty one
  record PATH        appends each request line to PATH; rewards = 0
  crash_after N      answers N requests, then says so on stderr and exits 3
  hang PIDFILE       writes its pid, then reads requests and never answers
  garbage            answers "this is not json"
  wrong_count        answers one reward too many
  no_rewards         answers {"scores": [...]}
  nan                answers NaN, as Python's json.dumps writes it
  stray              answers, then prints an extra line
  flood_stderr N     writes N bytes to stderr for every chunk of a request it
                     reads, and N more before each answer
  close_stdin        closes its stdin and sleeps
  ignore_eof PIDFILE writes its pid, answers, and keeps running after EOF
  unflushed          answers without flushing (PYTHONUNBUFFERED rescues it)
"""
import json
import os
import sys
import time

mode = sys.argv[1]
arg = sys.argv[2] if len(sys.argv) > 2 else None

if mode in ("hang", "ignore_eof"):
    with open(arg, "w") as f:
        f.write(str(os.getpid()))

if mode == "close_stdin":
    os.close(0)
    time.sleep(60)
    sys.exit(0)

if mode == "flood_stderr":
    # Reads with os.read so that the stderr writes interleave with trlx still
    # writing the request: a reader that ignores stderr until the request is
    # written would deadlock here.
    pending = b""
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            sys.exit(0)
        os.write(2, b"x" * int(arg))
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            n = len(json.loads(line)["completions"])
            os.write(2, b"y" * int(arg))
            os.write(1, (json.dumps({"rewards": [float(len(line))] * n}) + "\n").encode())

requests = 0
for line in sys.stdin:
    requests += 1
    req = json.loads(line)
    n = len(req["completions"])
    if mode == "column":
        rewards = req["columns"][arg]
    elif mode == "count":
        rewards = [requests] * n
    elif mode == "step":
        rewards = [req.get("step")] * n
    elif mode == "len":
        rewards = [len(ids) or None for ids in req["completion_ids"]]
    elif mode == "record":
        with open(arg, "a") as f:
            f.write(line)
        rewards = [0.0] * n
    elif mode == "crash_after":
        if requests > int(arg):
            sys.stderr.write(f"mirror: giving up at request {requests}\n")
            sys.exit(3)
        rewards = [1.0] * n
    elif mode == "hang":
        sys.stderr.write("mirror: thinking forever\n")
        sys.stderr.flush()
        time.sleep(3600)
    elif mode == "garbage":
        print("this is not json", flush=True)
        continue
    elif mode == "wrong_count":
        rewards = [0.5] * (n + 1)
    elif mode == "no_rewards":
        print(json.dumps({"scores": [0.0] * n}), flush=True)
        continue
    elif mode == "nan":
        print(json.dumps({"rewards": [float("nan")] * n}), flush=True)
        continue
    elif mode == "stray":
        # One write, so that both lines reach trlx together.
        sys.stdout.write(json.dumps({"rewards": [0.0] * n}) + "\ndebug: done\n")
        sys.stdout.flush()
        continue
    elif mode == "unflushed":
        sys.stdout.write(json.dumps({"rewards": [2.0] * n}) + "\n")
        continue
    else:
        rewards = [0.0] * n
    print(json.dumps({"rewards": rewards}), flush=True)

if mode == "ignore_eof":
    time.sleep(3600)

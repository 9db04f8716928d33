#!/usr/bin/env python3
"""A tool program that plays each case of the tool protocol (tests/unit/rewards_program/tool_program_test.cpp).

Modes (argv[1]): serve (default), silent (announces nothing), bad-announce, exit-at-once, environment,
no-name. Tools: echo(text) -> text; fail(message) -> error; crash() exits 3; hang() sleeps;
garbage() prints a line that is not JSON; count() -> how many calls this process has answered;
later(x) (announced async) -> x.
"""
import json
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "serve"
if mode == "exit-at-once":
    print("cannot import my_tools", file=sys.stderr)
    sys.exit(1)
if mode == "silent":
    time.sleep(60)
    sys.exit(0)
if mode == "bad-announce":
    print("hello", flush=True)
    time.sleep(60)
    sys.exit(0)


def fn(name, **params):
    return {"type": "function", "function": {"name": name, "description": name,
                                             "parameters": {"type": "object", "properties": params}}}


tools = [fn("echo", text={"type": "string"}), fn("fail", message={"type": "string"}), fn("crash"), fn("hang"),
         fn("garbage"), fn("count"), fn("later", x={"type": "integer"})]
announcement = {"tools": tools, "async": ["later"]}
if mode == "environment":
    announcement["environment"] = {"name": "Env", "reward": True}
if mode == "no-name":
    announcement = {"tools": [{"type": "function", "function": {"description": "x"}}]}
print(json.dumps(announcement), flush=True)
answered = 0
for line in sys.stdin:
    call = json.loads(line)["call"]
    name, args = call["name"], call["arguments"]
    answered += 1
    if name == "echo":
        print(json.dumps({"result": args["text"]}), flush=True)
    elif name == "fail":
        print(json.dumps({"error": args["message"]}), flush=True)
    elif name == "crash":
        print("boom: the tool crashed", file=sys.stderr, flush=True)
        sys.exit(3)
    elif name == "hang":
        time.sleep(60)
    elif name == "garbage":
        print("this is not json", flush=True)
    elif name == "count":
        print(json.dumps({"result": answered}), flush=True)
    elif name == "later":
        print(json.dumps({"result": args["x"]}), flush=True)

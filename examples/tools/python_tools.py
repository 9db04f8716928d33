#!/usr/bin/env python3
"""Serve Python functions as trlx tools (grpo/rloo `tools:`), the protocol of docs/tools.md.

    tools:
      - {command: "python3 examples/tools/python_tools.py examples/tools/calculator.py"}

Every public function of the named files (or, when a file defines TOOLS = [f, g], those) becomes a
tool, as a list of Python callables does for TRL's GRPOTrainer(tools=[...]): its JSON schema comes
from its type hints and Google-style docstring (transformers' get_json_schema when transformers is
installed, the same rules otherwise), it is called with the model's arguments as keyword arguments,
and its result reaches the model as str(result); an exception reaches it as {'error': str(e)}.
`async def` tools are announced as async, so that trlx orders their results after the others', as
TRL does. Only the standard library is needed.

    python3 examples/tools/python_tools.py --environment my_env.py:CalcEnv [more_tools.py ...]

serves an environment, as TRL's GRPOTrainer(environment_factory=CalcEnv) uses one: an instance per
episode (trlx's episode i is the i-th rollout of a process's batch, and its instance is kept and reset
for the next batch, as TRL's pool does), `reset(**row)` at the start of each rollout (its string is
appended to the prompt), every other public method a tool called on that episode's instance, and
`get_reward()` (when the class has one) the environment's reward.
"""
import asyncio
import importlib.util
import inspect
import json
import os
import re
import sys
import typing


def load(path):
    # Named by the file's stem, as `import calculator` would name it (Python's messages carry it).
    name = os.path.splitext(os.path.basename(path))[0]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        sys.exit(f"python_tools: cannot load {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if hasattr(module, "TOOLS"):
        return list(module.TOOLS)
    return [
        f
        for name, f in vars(module).items()
        if not name.startswith("_") and inspect.isfunction(f) and f.__module__ == module.__name__
    ]


_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null",
          list: "array", tuple: "array", dict: "object"}


def _json_type(hint):
    if hint is typing.Any or hint is inspect.Parameter.empty:
        return {}
    origin = typing.get_origin(hint)
    if origin is typing.Union or (sys.version_info >= (3, 10) and origin is __import__("types").UnionType):
        args = [a for a in typing.get_args(hint)]
        types = [_json_type(a) for a in args if a is not type(None)]
        out = types[0] if len(types) == 1 else {"type": [t["type"] for t in types if "type" in t]}
        if type(None) in args:
            out = dict(out, nullable=True)
        return out
    if origin is typing.Literal:
        values = list(typing.get_args(hint))
        return {"type": _TYPES.get(type(values[0]), "string"), "enum": values}
    if origin in (list, tuple):
        args = typing.get_args(hint)
        out = {"type": "array"}
        if origin is list and args:
            out["items"] = _json_type(args[0])
        return out
    if origin is dict:
        return {"type": "object"}
    if hint in _TYPES:
        return {"type": _TYPES[hint]}
    return {}


def _schema_fallback(f):
    """get_json_schema's rules: description from the docstring, one Args entry per parameter."""
    doc = inspect.getdoc(f) or ""
    if not doc:
        raise ValueError(f"tool {f.__name__} has no docstring; describe it and each argument (Google style)")
    parts = re.split(r"\n\s*(?:Args|Arguments|Returns|Raises):\s*\n", doc)
    description = parts[0].strip()
    arg_docs = {}
    m = re.search(r"\n\s*(?:Args|Arguments):\s*\n(.*?)(?=\n\s*(?:Returns|Raises):|\Z)", "\n" + doc, re.S)
    if m:
        for name, text in re.findall(r"^\s*(\w+)(?:\s*\([^)]*\))?:\s*(.*(?:\n(?!\s*\w+(?:\s*\([^)]*\))?:).*)*)",
                                     m.group(1), re.M):
            arg_docs[name] = " ".join(text.split())
    hints = typing.get_type_hints(f)
    props, required = {}, []
    for name, p in inspect.signature(f).parameters.items():
        if name not in arg_docs:
            raise ValueError(f"tool {f.__name__}: argument {name} has no description in the docstring's Args")
        props[name] = dict(_json_type(hints.get(name, p.annotation)), description=arg_docs[name])
        if p.default is inspect.Parameter.empty:
            required.append(name)
    params = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    out = {"name": f.__name__, "description": description, "parameters": params}
    if "return" in hints:
        out["return"] = _json_type(hints["return"])
    return {"type": "function", "function": out}


def schema(f):
    try:
        from transformers.utils import get_json_schema
    except Exception:
        return _schema_fallback(f)
    return get_json_schema(f)


def run(value):
    return asyncio.run(value) if inspect.isawaitable(value) else value


def main():
    args = sys.argv[1:]
    env_class = None
    if len(args) >= 2 and args[0] == "--environment":
        path, _, name = args[1].rpartition(":")
        if not path or not name:
            sys.exit("python_tools: --environment takes FILE.py:ClassName")
        load(path)
        env_class = getattr(sys.modules[os.path.splitext(os.path.basename(path))[0]], name, None)
        if not inspect.isclass(env_class):
            sys.exit(f"python_tools: {path} has no class {name}")
        if not callable(getattr(env_class, "reset", None)):
            sys.exit(f"python_tools: the environment {name} has no reset method")
        args = args[2:]
    if not args and env_class is None:
        sys.exit("usage: python_tools.py [--environment env.py:Class] tools.py [more_tools.py ...]")
    functions = {}
    for path in args:
        for f in load(path):
            functions[f.__name__] = f
    announcement = {"tools": [schema(f) for f in functions.values()],
                    "async": [n for n, f in functions.items() if inspect.iscoroutinefunction(f)]}
    methods = []
    if env_class is not None:
        # The tools are the public methods other than reset and get_reward, bound to an instance.
        probe = env_class()
        methods = [n for n, f in inspect.getmembers(env_class, inspect.isfunction)
                   if not n.startswith("_") and n not in ("reset", "get_reward")]
        announcement["tools"] += [schema(getattr(probe, n)) for n in methods]
        announcement["async"] += [n for n in methods if inspect.iscoroutinefunction(getattr(env_class, n))]
        announcement["environment"] = {"name": env_class.__name__,
                                       "reward": callable(getattr(env_class, "get_reward", None))}
    print(json.dumps(announcement), flush=True)
    episodes = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "reset" in request:
            k = request["reset"]["episode"]
            if k not in episodes:
                episodes[k] = env_class()
            observation = run(episodes[k].reset(**request["reset"]["row"]))
            print(json.dumps({"observation": observation if observation is None else str(observation)}), flush=True)
            continue
        if "reward" in request:
            rewards = [run(episodes[k].get_reward()) for k in request["reward"]["episodes"]]
            print(json.dumps({"rewards": [None if r is None else float(r) for r in rewards]}), flush=True)
            continue
        call = request["call"]
        name = call["name"]
        try:
            if name in functions:
                f = functions[name]
            elif name in methods and request.get("episode") in episodes:
                f = getattr(episodes[request["episode"]], name)
            else:
                raise LookupError(f"Tool {name} not found.")
            answer = {"result": str(run(f(**call["arguments"])))}
        except Exception as e:  # the model sees what went wrong, as under TRL
            answer = {"error": str(e)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()

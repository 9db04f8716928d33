"""Tools for the agent-rollout goldens (tests/data/agents/, written by scripts/fixtures/agent_fixtures.py).

TRL's GRPOTrainer gets these two callables as `tools=[multiply, get_weather]`; the C++ side runs the same
module. `multiply` is sync; `get_weather` is async (TRL awaits it on its daemon event loop, after the sync
calls of the same turn, which puts its result after theirs in the tool messages). Their JSON schemas come
from transformers' `get_json_schema` (the docstrings below are part of the golden prompt ids).
"""


def multiply(a: int, b: int) -> int:
    """
    Multiply two integers.

    Args:
        a: First integer.
        b: Second integer.
    """
    return a * b


async def get_weather(city: str) -> str:
    """
    Get the weather in a city.

    Args:
        city: City name.
    """
    if city == "Paris":
        return "sunny"
    raise ValueError("no such city")

"""A calculator for tool-calling rollouts: `trlx grpo` with
tools: [{command: "python3 examples/tools/python_tools.py examples/tools/calculator.py"}]."""


def add(a: int, b: int) -> int:
    """Add two integers exactly, however large.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers exactly, however large.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a * b

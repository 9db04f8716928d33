"""Environment for the agent-rollout goldens with TRL's `environment_factory` (tests/data/agents/env_steps*.json,
written by scripts/fixtures/agent_fixtures.py --env).

TRL gets the class itself: `GRPOTrainer(environment_factory=CalcEnv, ...)`. It constructs instances with no
arguments, calls `reset(**row)` on one instance per rollout (the dataset row: prompt messages, answer and any
other column), exposes the public methods other than `reset` and `get_reward` (`multiply`, `submit`) as tools
bound to that instance (their JSON schemas come from transformers' `get_json_schema`, without `self`; the
docstrings below are part of the golden prompt ids), and adds `get_reward` as a reward function named
"CalcEnv" with weight 1. The C++ side imports this file and instantiates `CalcEnv` by name in the same way.
Plain Python, no imports: instances are reused across rollouts, so `reset` clears all state.
"""


class CalcEnv:
    """A calculator session for one rollout: counts multiply calls and remembers the submitted answer."""

    def __init__(self):
        self.answer = None      # the row's target product
        self.submitted = None   # the last answer passed to submit (None: never submitted)
        self.multiply_calls = 0

    def reset(self, prompt, answer, **kwargs):
        """Starts a rollout for a dataset row. Returns the observation TRL appends to the last prompt message's
        content: " (Use the tools.)" when the target is even, None (prompt unchanged) when it is odd."""
        self.answer = answer
        self.submitted = None
        self.multiply_calls = 0
        return " (Use the tools.)" if answer % 2 == 0 else None

    def multiply(self, a: int, b: int) -> int:
        """
        Multiply two integers.

        Args:
            a: First integer.
            b: Second integer.
        """
        self.multiply_calls += 1
        return a * b

    def submit(self, answer: int) -> str:
        """
        Submit the final answer.

        Args:
            answer: The final answer.
        """
        self.submitted = answer
        return "correct" if answer == self.answer else "wrong"

    def get_reward(self) -> float:
        """1.0 if the last submitted answer equals the target (else 0.0), minus 0.1 per multiply call."""
        return (1.0 if self.submitted == self.answer else 0.0) - 0.1 * self.multiply_calls

"""Ten closed boxes for tool-calling rollouts: an environment (TRL's `environment_factory`) for `trlx grpo`

    tools:
      - command: python3 examples/tools/python_tools.py --environment examples/tools/boxes.py:Boxes

Each dataset row fills the boxes (its `boxes` column: ten digits, box 0's first) when a rollout starts;
the model can only learn what a box holds by opening it. configs/grpo_tools.yaml uses it.
"""


class Boxes:
    """Ten boxes numbered 0 to 9, each holding a digit."""

    def __init__(self):
        self.boxes = "0000000000"

    def reset(self, boxes, **row):
        """Fills the boxes for a rollout from the row's `boxes` column; the prompt is left as it is."""
        self.boxes = boxes
        return None

    def open_box(self, box: int) -> int:
        """
        Open a box and look at the digit inside.

        Args:
            box: The number of the box, from 0 to 9.
        """
        return int(self.boxes[box])

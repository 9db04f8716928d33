"""What the TRL side of the README's demos shares (dev time only): saving a trained run."""
import json


def save_run(trainer, tokenizer, out):
    """The trained model and tokenizer in OUT, and TRL's log_history as JSON lines in
    OUT/log_history.jsonl (the curves the README puts beside trlx's)."""
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    with open(out / "log_history.jsonl", "w") as f:
        for row in trainer.state.log_history:
            f.write(json.dumps(row) + "\n")

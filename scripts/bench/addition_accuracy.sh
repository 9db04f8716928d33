#!/usr/bin/env bash
# Held-out accuracy of a model on the adding task: greedy completions of the
# prompts in examples/data/grpo/test.jsonl ("What is a plus b?") from
# `trlx generate`, counted right when their last integer is the sum; the
# mean partial credit (1 - |x - sum| / sum, the GRPO demo's reward) beside it.
#   scripts/bench/addition_accuracy.sh MODEL_DIR [DATA.jsonl] [TRLX]
set -euo pipefail
model=${1:?usage: $0 MODEL_DIR [DATA.jsonl] [TRLX]}
data=${2:-examples/data/grpo/test.jsonl}
trlx=${3:-build/apps/trlx/trlx}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$trlx" generate --model "$model" --prompts "$data" --max_new_tokens 16 --json >"$tmp/out.jsonl" 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; exit 1; }
python3 - "$data" "$tmp/out.jsonl" "$model" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
outs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
assert len(rows) == len(outs), (len(rows), len(outs))
right, credit = 0, 0.0
for r, o in zip(rows, outs):
    nums = re.findall(r"-?\d+", o["completion"])
    x = int(nums[-1]) if nums else None
    right += x == r["answer"]
    if x is not None:
        credit += max(0.0, 1 - abs(x - r["answer"]) / max(1, abs(r["answer"])))
print(f"{sys.argv[3]}: accuracy {right / len(rows):.3f} ({right}/{len(rows)}), mean partial credit {credit / len(rows):.3f}")
PY

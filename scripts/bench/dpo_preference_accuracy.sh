#!/usr/bin/env bash
# Preference accuracy of a causal LM on a prompt/chosen/rejected JSONL file:
# the share of pairs whose chosen completion gets a higher log-prob sum than
# the rejected one, scored with `trlx score` (the trainers' own log-prob code).
#   scripts/bench/dpo_preference_accuracy.sh MODEL_DIR [DATA.jsonl] [TRLX]
set -euo pipefail
model=${1:?usage: $0 MODEL_DIR [DATA.jsonl] [TRLX]}
data=${2:-examples/data/dpo/test.jsonl}
trlx=${3:-build/apps/trlx/trlx}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$data" "$tmp" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for side in ("chosen", "rejected"):
    with open(f"{sys.argv[2]}/{side}.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps({"prompt": r["prompt"], "completion": r[side]}) + "\n")
PY
"$trlx" score --model "$model" --input "$tmp/chosen.jsonl" > "$tmp/chosen.out"
"$trlx" score --model "$model" --input "$tmp/rejected.jsonl" > "$tmp/rejected.out"
python3 - "$tmp" "$model" <<'PY'
import json, sys
c = [json.loads(l)["sum_logprob"] for l in open(f"{sys.argv[1]}/chosen.out")]
r = [json.loads(l)["sum_logprob"] for l in open(f"{sys.argv[1]}/rejected.out")]
acc = sum(a > b for a, b in zip(c, r)) / len(c)
margin = sum(a - b for a, b in zip(c, r)) / len(c)
print(f"{sys.argv[2]}: preference accuracy {acc:.3f} over {len(c)} pairs, mean log-prob margin {margin:.3f}")
PY

#!/usr/bin/env bash
# The preference and reward trainers through the real binary on their
# shipped configs: the runs finish, log TRL's metric names, and what they
# learn shows up in `trlx score` on held-out pairs.
# Usage: preference.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
# Fraction of held-out pairs where the first column (chosen) beats the second.
wins() { paste -d' ' "$1" "$2" | awk '{n++; if ($1 > $2) w++} END {printf "%.2f", w / n}'; }
field() { sed "s/.*\"$1\":\([^,}]*\).*/\1/" "$2"; }

# Reward model: Bradley-Terry on chosen/rejected.
"$TRLX" reward --config configs/reward.yaml --max_steps 30 --eval_steps 30 --output_dir "$TMP/reward" >"$TMP/reward.log" 2>&1
check "[ $? = 0 ] || { tail -5 '$TMP/reward.log'; false; }"
for k in loss accuracy margin mean_reward min_reward max_reward eval_accuracy; do
  check "grep -q '\"$k\"' '$TMP/reward/metrics.jsonl'"
done
"$TRLX" score --model "$TMP/reward" --input examples/data/reward/score/chosen.jsonl 2>/dev/null >"$TMP/c.json"
"$TRLX" score --model "$TMP/reward" --input examples/data/reward/score/rejected.jsonl 2>/dev/null >"$TMP/r.json"
acc=$(wins <(field reward "$TMP/c.json") <(field reward "$TMP/r.json"))
echo "reward: held-out preference accuracy $acc"
check "awk 'BEGIN{exit !($acc >= 0.9)}'"

# KTO on unpaired desirable/undesirable examples.
"$TRLX" kto --config configs/kto.yaml --output_dir "$TMP/kto" >"$TMP/kto.log" 2>&1
check "[ $? = 0 ] || { tail -5 '$TMP/kto.log'; false; }"
for k in loss kl rewards/chosen rewards/margins logps/chosen logits/rejected; do
  check "grep -q '\"$k\"' '$TMP/kto/metrics.jsonl'"
done
lacc() {
  "$TRLX" score --model "$1" --input examples/data/kto/score/chosen.jsonl 2>/dev/null >"$TMP/kc.json"
  "$TRLX" score --model "$1" --input examples/data/kto/score/rejected.jsonl 2>/dev/null >"$TMP/kr.json"
  wins <(field sum_logprob "$TMP/kc.json") <(field sum_logprob "$TMP/kr.json")
}
before=$(lacc examples/tiny-model)
after=$(lacc "$TMP/kto")
echo "kto: held-out preference accuracy $before -> $after"
check "awk 'BEGIN{exit !($after > $before + 0.1)}'"

# Preview shows each example's label and the completion tokens that carry loss.
"$TRLX" preview kto --config configs/kto.yaml --num_examples 2 >"$TMP/pv.txt" 2>&1
check "[ $? = 0 ] && grep -q 'label true (desirable)' '$TMP/pv.txt' && grep -q 'label false (undesirable)' '$TMP/pv.txt'"
"$TRLX" preview kto --config configs/kto.yaml --num_examples 2 --json >"$TMP/pv.jsonl" 2>/dev/null
check "[ \$(wc -l <'$TMP/pv.jsonl') = 2 ] && grep -q '\"label\":true' '$TMP/pv.jsonl'"

# cpo and orpo: chosen and rejected with their completions (the loss tokens)
# marked; reward: the token each score is read at. The JSON's marked tokens
# are the completion's (cpo, orpo) or the last one (reward).
for t in cpo orpo reward; do
  "$TRLX" preview $t --config configs/$t.yaml --model_name_or_path examples/tiny-model --num_examples 2 >"$TMP/pv_$t.txt" 2>&1
  check "[ $? = 0 ] && grep -q '^--- chosen: [0-9]* tokens, [0-9]* with loss' '$TMP/pv_$t.txt' && grep -q '^--- rejected' '$TMP/pv_$t.txt' && grep -q 'training pairs shown' '$TMP/pv_$t.txt'" ||
    cat "$TMP/pv_$t.txt"
  "$TRLX" preview $t --config configs/$t.yaml --model_name_or_path examples/tiny-model --num_examples 2 --json >"$TMP/pv_$t.jsonl" 2>/dev/null
  check "python3 - '$TMP/pv_$t.jsonl' $t <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2, rows
for r in rows:
    for side in ('chosen', 'rejected'):
        toks = r[side]['tokens']
        marked = [i for i, t in enumerate(toks) if t['loss']]
        assert marked and marked[-1] == len(toks) - 1, (side, marked)
        assert marked == list(range(marked[0], len(toks))), marked
        if sys.argv[2] == 'reward':
            assert len(marked) == 1
        else:
            assert marked[0] > 0 and len(marked) == r[side]['num_loss_tokens']
PY"
done

finish

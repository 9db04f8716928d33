#!/usr/bin/env bash
# Generation speed, trlx's generator (`trlx generate`) vs transformers'
# generate(), same run, same threads, same ~25M-parameter Qwen2-shaped model
# and the same prompt token ids: generated tokens per second, greedy and
# sampled, at batch 8 and 32, 128 new tokens (eos ignored on both sides, so
# every row runs its full length). Then the saving of shared prefill: 8
# samples per prompt, prompts 4x longer than completions, trlx with
# --num_return_sequences 8 against the same rows as 8 separate copies of
# each prompt (and transformers' num_return_sequences 8, which copies too).
#
# Each repeat runs both sides back to back (alternating which goes first);
# ratios are per repeat, summarised as median and spread, with the load
# average around every run.
#
# Last, under mpirun on 2 ranks with ZeRO-3 (ZERO=0 skips it): seconds per
# generation round (4 prompts of 32 tokens per rank, 32 new tokens) and the
# per-rank peak of gathered weights, for ds3_gather_for_generation true,
# false, and a budget of half the model.
#
# Needs python3 with torch and transformers (dev time). Environment: THREADS
# (default 2), REPEATS (default 3), NEW (default 128), BUILD_DIR (default
# build), NO_BUILD=1 to skip the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-3}
NEW=${NEW:-128}
TRLX="$BUILD_DIR/apps/trlx/trlx"
ZERO=${ZERO:-1}
if [[ -z ${NO_BUILD:-} ]]; then
  cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
  [[ $ZERO == 0 ]] || cmake --build "$BUILD_DIR" --target generate_zero_bench -j2 >/dev/null
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
  --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --max_position_embeddings 2048 \
  --out "$WORK/m25" >/dev/null
export OMP_NUM_THREADS=$THREADS
load() { cut -d' ' -f1 /proc/loadavg; }

# Prompts as token ids, written for both sides: $1 rows of $2 tokens.
make_prompts() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, random, sys
rows, length, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
random.seed(rows * 1000 + length)
with open(out, "w") as f:
    for _ in range(rows):
        n = random.randint(length * 3 // 4, length)
        f.write(json.dumps({"ids": [random.randint(3, 300) for _ in range(n)]}) + "\n")
PY
}

run_trlx() {  # $1: prompts file, $2: name, rest: flags; prints generated tokens/s
  local file=$1 name=$2; shift 2
  "$TRLX" generate --model "$WORK/m25" --prompt_ids "$file" --max_new_tokens "$NEW" --ignore_eos --json "$@" \
    >"$WORK/trlx_$name.out" 2>"$WORK/trlx_$name.log" ||
    { echo "trlx $name failed:" >&2; tail -20 "$WORK/trlx_$name.log" >&2; exit 1; }
  sed -n 's/.*generated \([0-9]*\) tokens for .* in \([0-9.]*\) s.*/\1 \2/p' "$WORK/trlx_$name.log" |
    awk '{printf "%.1f\n", $1 / $2}'
}

run_hf() {  # $1: prompts file, $2: name, $3: do_sample 0/1, $4: samples per prompt; prints generated tokens/s
  python3 - "$WORK/m25" "$1" "$NEW" "$THREADS" "$3" "$4" >"$WORK/hf_$2.out" 2>"$WORK/hf_$2.err" <<'PY' ||
import json, sys, time
import torch
from transformers import AutoModelForCausalLM
model_dir, prompts, new, threads, sample, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1", int(sys.argv[6])
torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
model.generation_config.eos_token_id = None
rows = [json.loads(l)["ids"] for l in open(prompts)]
width = max(len(r) for r in rows)
ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
kwargs = dict(do_sample=True, temperature=0.9, top_p=0.95, top_k=0) if sample else dict(do_sample=False)
start = time.perf_counter()
with torch.no_grad():
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
                         num_return_sequences=n, **kwargs)
secs = time.perf_counter() - start
print(f"{(out.shape[1] - width) * out.shape[0] / secs:.1f}")
PY
    { echo "transformers $2 failed:" >&2; tail -20 "$WORK/hf_$2.err" >&2; exit 1; }
  cat "$WORK/hf_$2.out"
}

summary() {  # name, then ratios
  local name=$1; shift
  python3 - "$name" "$@" <<'PY'
import statistics, sys
r = [float(x) for x in sys.argv[2:]]
print(f"{sys.argv[1]}: median {statistics.median(r):.2f}x (spread {min(r):.2f}-{max(r):.2f}) over {len(r)} repeats")
PY
}

# How close a decode step runs to the machine: each generated token costs
# about 2 x parameters FLOPs, against a measured fp32 matrix-multiply peak of
# the same threads (2048^3 products).
PEAK=$(python3 - "$THREADS" <<'PY'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
a @ b
best = min((lambda t0: (a @ b, time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(5))
print(f"{2 * 2048 ** 3 / best / 1e9:.1f}")
PY
)
PARAMS=$(python3 -c "import os; print(os.path.getsize('$WORK/m25/model.safetensors') / 4)")
echo "threads $THREADS, $NEW new tokens, $REPEATS repeats, load before: $(load)"
echo "fp32 matmul peak ${PEAK} GFLOP/s; $(python3 -c "print(f'{$PARAMS / 1e6:.1f}')")M parameters"
declare -A RATIOS
for rep in $(seq 1 "$REPEATS"); do
  for batch in 8 32; do
    make_prompts "$batch" 32 "$WORK/p$batch.jsonl"
    for mode in greedy sampled; do
      flags=(); sample=0
      if [[ $mode == sampled ]]; then flags=(--do_sample --temperature 0.9 --top_p 0.95 --seed "$rep"); sample=1; fi
      key="batch $batch $mode"
      l0=$(load)
      if ((rep % 2)); then
        t=$(run_trlx "$WORK/p$batch.jsonl" "b$batch$mode" "${flags[@]}"); h=$(run_hf "$WORK/p$batch.jsonl" "b$batch$mode" $sample 1)
      else
        h=$(run_hf "$WORK/p$batch.jsonl" "b$batch$mode" $sample 1); t=$(run_trlx "$WORK/p$batch.jsonl" "b$batch$mode" "${flags[@]}")
      fi
      r=$(python3 -c "print(f'{$t / $h:.3f}')")
      RATIOS[$key]="${RATIOS[$key]:-} $r"
      mfu=$(python3 -c "print(f'{100 * 2 * $PARAMS * $t / ($PEAK * 1e9):.0f}% / {100 * 2 * $PARAMS * $h / ($PEAK * 1e9):.0f}%')")
      echo "repeat $rep, $key: trlx $t tokens/s, transformers $h tokens/s, ratio $r, FLOPs utilisation $mfu (load $l0 -> $(load))"
    done
  done
  # Shared prefill: 8 samples of 4 prompts of ~128 tokens, 32 new tokens each.
  make_prompts 4 128 "$WORK/long.jsonl"
  python3 -c "
import sys
rows = open('$WORK/long.jsonl').read().splitlines()
open('$WORK/long8.jsonl', 'w').write(''.join((r + '\n') * 8 for r in rows))"
  l0=$(load)
  shared=$(NEW=32 run_trlx "$WORK/long.jsonl" shared --num_return_sequences 8 --do_sample --seed "$rep")
  copies=$(NEW=32 run_trlx "$WORK/long8.jsonl" copies --do_sample --seed "$rep")
  hf8=$(NEW=32 run_hf "$WORK/long.jsonl" n8 1 8)
  r=$(python3 -c "print(f'{$shared / $copies:.3f}')")
  r2=$(python3 -c "print(f'{$shared / $hf8:.3f}')")
  RATIOS["shared prefill vs copies"]="${RATIOS["shared prefill vs copies"]:-} $r"
  RATIOS["shared prefill vs transformers n=8"]="${RATIOS["shared prefill vs transformers n=8"]:-} $r2"
  echo "repeat $rep, 8 samples/prompt: shared $shared, copies $copies, transformers $hf8 tokens/s (load $l0 -> $(load))"
done
echo
echo "trlx / transformers, generated tokens per second (load after: $(load)):"
for key in "batch 8 greedy" "batch 8 sampled" "batch 32 greedy" "batch 32 sampled" "shared prefill vs copies" \
  "shared prefill vs transformers n=8"; do
  # shellcheck disable=SC2086
  summary "$key" ${RATIOS[$key]}
done

if [[ $ZERO != 0 ]]; then
  echo
  echo "ZeRO-3 on 2 ranks, one round of 4 prompts x 32 tokens per rank, 32 new tokens (load $(load)):"
  half=$(python3 -c "import os; print(os.path.getsize('$WORK/m25/model.safetensors') / 2 / 1048576)")
  for mode in all none budget; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
      mpirun --oversubscribe --bind-to none -np 2 "$BUILD_DIR/tests/unit/engine/generate_zero_bench" "$WORK/m25" \
      "$mode" "$half" 4 32 32 2
  done
fi

#!/usr/bin/env bash
# One long sequence on CPU ranks, same run: 1 process against sequence
# parallelism (sp 2, DeepSpeed-Ulysses) and context parallelism (cp 2, keys
# and values all-gathered) on 2 processes, each under DDP so that only the
# split of the rows differs. Per configuration: the step time (mean of the
# steps after the first), the largest rank's peak resident memory at SEQ
# tokens and at SHORT tokens (their difference: what the sequence's
# activations take), and the bytes each rank hands to collectives per step.
# From the activation bytes per token it prints how long a sequence fits a
# per-rank budget of LIMIT_MB (default: 1 process's peak at SEQ): the ratio
# to one process's is the longest-sequence gain.
#
# Settings: SEQ (8192), SHORT (512), STEPS (3), REPEATS (1; configurations
# alternate within each repeat), LIMIT_MB, THREADS (1 per rank; the one
# process gets twice as many, so that both sides use the same cores).
# Model: ~25M parameters (hidden 512, 8 layers, 8 heads, 4 key/value heads,
# MLP 1376, the quickstart tokenizer's 304-token vocabulary), fp32, no
# gradient checkpointing.
#
# Recorded (2026-12-07, 2 shared CPU cores, load 1.6-2.0, SEQ 8192, SHORT
# 1024, STEPS 3, one repeat, MALLOC_MMAP_THRESHOLD_=65536):
#   config step_s  vs_one  peak_mb  peak_mb_short  activation_mb  bytes/step
#   one    18.62   1.00    1250      827            423           0
#   sp     18.19   0.98    1082      884            198 (x0.47)   723339600
#   cp     30.49   1.64    1235      907            328 (x0.78)   387795280
#   longest row within 1250 MiB per rank: one 8192, sp 14274 (x1.74), cp 8520 (x1.04)
# With glibc's default heap (MALLOC_MMAP_THRESHOLD_= ): one 1481 MiB of
# activations, sp x0.63, cp x0.68, at load 1.8-2.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
SEQ=${SEQ:-8192}
SHORT=${SHORT:-512}
STEPS=${STEPS:-3}
REPEATS=${REPEATS:-1}
export OMP_NUM_THREADS=${THREADS:-1}
# Blocks of 64 KiB and more come from mmap and go back to the system when
# freed, so that the peak resident memory follows the tensors alive at once
# rather than what glibc's heap kept from earlier, differently sized ones
# (with glibc's default, the peaks here were 1.5-3x the live bytes, and
# unevenly so between the configurations). MALLOC_MMAP_THRESHOLD_= unset
# measures the default.
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_-65536}
[ -z "$MALLOC_MMAP_THRESHOLD_" ] && unset MALLOC_MMAP_THRESHOLD_
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null 2>&1
TRLX="$BUILD_DIR/apps/trlx/trlx"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1376 --num_layers 8 --num_heads 8 \
  --num_kv_heads 4 --tokenizer examples/tiny-model --out "$WORK/m" >/dev/null
# Rows of digits: the quickstart tokenizer keeps them about one token each;
# max_length cuts each row to exactly the length asked.
rows() {
  mkdir -p "$WORK/data$1"
  python3 - "$1" "$WORK/data$1/train.jsonl" <<'PY'
import json, random, sys
n = int(sys.argv[1])
random.seed(0)
with open(sys.argv[2], "w") as f:
    for _ in range(8):
        f.write(json.dumps({"text": "".join(random.choice("0123456789 +=") for _ in range(2 * n))}) + "\n")
PY
}
rows "$SEQ"
rows "$SHORT"
printf 'distributed_type: MULTI_CPU\nparallelism_config:\n  parallelism_config_sp_size: 2\n' >"$WORK/sp.yaml"
printf 'distributed_type: MULTI_CPU\nparallelism_config:\n  parallelism_config_cp_size: 2\n' >"$WORK/cp.yaml"

# run NAME LENGTH: one configuration; prints "step_s peak_mb comm_bytes_per_step".
run() {
  local name=$1 len=$2 out="$WORK/$1_$2"
  local cmd=("$TRLX" sft --model_name_or_path "$WORK/m" --dataset_name "$WORK/data$len" --max_length "$len"
    --per_device_train_batch_size 1 --max_steps "$STEPS" --logging_steps 1 --save_strategy no --eval_strategy no
    --bf16 false --learning_rate 1e-4 --dataset_text_field text --output_dir "$out")
  case $name in
    # One process gets the threads of both ranks: the same cores either way.
    one) OMP_NUM_THREADS=$((2 * OMP_NUM_THREADS)) "${cmd[@]}" >"$out.log" 2>&1 ;;
    *) "$TRLX" launch --nproc_per_node 2 -- "${cmd[@]}" --accelerate_config "$WORK/$name.yaml" >"$out.log" 2>&1 ;;
  esac
  python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
end = rows[-1]
steps = max(1, sum(1 for r in rows if "loss" in r))
# The first step pays for setup: the rest's mean.
rest = (end["train_runtime"] - end["first_step_seconds"]) / max(1, steps - 1)
print("%.3f %.0f %.0f" % (rest, end.get("peak_host_memory_mb", 0), end.get("comm_bytes_per_step", 0)))
PY
}

declare -A step peak short_peak comm
CONFIGS=${CONFIGS:-"one sp cp"}
for ((r = 0; r < REPEATS; r++)); do
  for c in $CONFIGS; do
    read -r s p b <<<"$(run "$c" "$SEQ")"
    step[$c]="${step[$c]:-} $s"
    peak[$c]="${peak[$c]:-} $p"
    comm[$c]=$b
    read -r _ sp_ _ <<<"$(run "$c" "$SHORT")"
    short_peak[$c]="${short_peak[$c]:-} $sp_"
  done
done
med() { python3 -c 'import statistics, sys; v = [float(x) for x in sys.argv[1:]]; print("%.3f %.3f %.3f" % (statistics.median(v), min(v), max(v)))' "$@"; }
echo "model: ~25M parameters (hidden 512, 8 layers), fp32, 1 row of $SEQ tokens per step, $STEPS steps," \
  "$REPEATS repeat(s); load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-4s %22s %8s %16s %16s %14s %14s\n" config "step_s (median min max)" vs_one peak_mb_at_SEQ peak_mb_at_SHORT activation_mb bytes/step
read -r one_step _ _ <<<"$(med ${step[one]})"
read -r one_peak _ _ <<<"$(med ${peak[one]})"
read -r one_short _ _ <<<"$(med ${short_peak[one]})"
LIMIT_MB=${LIMIT_MB:-$one_peak}
for c in $CONFIGS; do
  read -r sm smin smax <<<"$(med ${step[$c]})"
  read -r pm _ _ <<<"$(med ${peak[$c]})"
  read -r ps _ _ <<<"$(med ${short_peak[$c]})"
  act=$(awk -v a="$pm" -v b="$ps" 'BEGIN{print a-b}')
  printf "%-4s %8.2f (%5.2f %5.2f) %8.2f %16.0f %16.0f %14.0f %14.0f\n" "$c" "$sm" "$smin" "$smax" \
    "$(awk -v a="$sm" -v b="$one_step" 'BEGIN{print a/b}')" "$pm" "$ps" "$act" "${comm[$c]}"
done
echo "longest sequence within $LIMIT_MB MiB per rank (activations linear in length):"
for c in $CONFIGS; do
  read -r pm _ _ <<<"$(med ${peak[$c]})"
  read -r ps _ _ <<<"$(med ${short_peak[$c]})"
  awk -v c="$c" -v lim="$LIMIT_MB" -v pm="$pm" -v ps="$ps" -v seq="$SEQ" -v short="$SHORT" \
    -v one_pm="$one_peak" -v one_ps="$one_short" 'BEGIN{
      per = (pm - ps) / (seq - short); one_per = (one_pm - one_ps) / (seq - short);
      fit = short + (lim - ps) / per; one_fit = short + (lim - one_ps) / one_per;
      printf "  %-4s activations %.3f MiB per token per rank (x%.2f of one process), fits %.0f tokens (x%.2f)\n", c, per, per / one_per, fit, fit / one_fit }'
done

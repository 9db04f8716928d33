#!/usr/bin/env bash
# Host memory of ZeRO-3 setup when the checkpoint's dtype is not the run's,
# as when a bf16 checkpoint is trained in fp32 (the default `dtype`): LoRA on
# a ~85M-parameter Qwen2-shaped model (hidden 768, 12 layers, bf16 on disk),
# one step of short rows, NP (2) ranks under mpirun. With LoRA the frozen base
# is most of what a rank holds, so what loading and splitting cost shows.
# Prints each rank's peak resident memory for
#   - dtype float32 (every weight converted from bf16),
#   - dtype bfloat16 (nothing to convert; the same run otherwise),
#   - dtype float32 in one process (debug_force_distributed: ZeRO-3's code
#     with the whole model on one rank),
# and the ratio of the first to the second and to the third. OLD_TRLX=path
# runs the same with another build too (before and after a change).
# Resident memory counts the checkpoint's mapped pages that a rank read; on a
# node they are one copy in the page cache, shared by its ranks.
#
# Recorded 2026-12-04 (2 cores, load ~1), MiB per rank, NP 2:
#   see the closing note of the change that added this script.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
NP=${NP:-2}
TRLX="$BUILD_DIR/apps/trlx/trlx"
[[ -n ${NO_BUILD:-} ]] || cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
"$TRLX" init-model --hidden_size 768 --intermediate_size 2048 --num_layers 12 --num_heads 12 \
  --tokenizer examples/tiny-model --dtype bfloat16 --out "$WORK/model" >/dev/null

# run BINARY DTYPE NP: prints the ranks' peak RSS in MiB, space-separated.
run() {
  local log="$WORK/run.log"
  mpiexec --oversubscribe --bind-to none -np "$3" sh -c "/usr/bin/time -f 'peak_rss_kb %M' $1 sft \
    --config configs/sft.yaml --model_name_or_path $WORK/model --dtype $2 --use_peft true \
    --accelerate_config zero3 --debug_force_distributed true --max_steps 1 --per_device_train_batch_size 2 \
    --max_length 64 --save_strategy no --eval_strategy no --report_to none --output_dir $WORK/out" >"$log" 2>&1 ||
    { tail -20 "$log" >&2; exit 1; }
  grep -o 'peak_rss_kb [0-9]*' "$log" | awk '{printf "%.0f ", $2 / 1024}'
}
ratio() { python3 -c "import sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; print('%.2f' % (max(a) / max(b)))" "$1" "$2"; }

printf '%-10s %-28s %-28s %-22s %s\n' build "fp32 from bf16, $NP ranks" "bf16 from bf16, $NP ranks" "fp32, 1 process" "ratios (vs bf16, vs 1 process)"
for side in new ${OLD_TRLX:+old}; do
  bin=$(realpath "$TRLX")
  [[ $side == old ]] && bin=$(realpath "$OLD_TRLX")
  a=$(run "$bin" float32 "$NP")
  b=$(run "$bin" bfloat16 "$NP")
  c=$(run "$bin" float32 1)
  printf '%-10s %-28s %-28s %-22s %s, %s\n' "$side" "$a" "$b" "$c" "$(ratio "$a" "$b")" "$(ratio "$a" "$c")"
done

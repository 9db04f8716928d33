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
# Recorded 2026-12-04 (2 cores, load 1.1-1.5; a process with the quickstart
# model alone peaks at ~400 MiB; the model is 342 MB in fp32, 171 MB on disk):
#   setup peak, largest rank, NP 2: fp32 from bf16 759-894 MiB (4 runs),
#   bf16 from bf16 731-737, fp32 in one process 919. The build before the
#   change (no setup row; read from /proc when the setup table appeared):
#   883-887 with 2 ranks, 1068-1073 in one process. Whole runs, each rank:
#   775-1122 MiB after, 1033-1155 before (the step's gathers; glibc keeps
#   freed unit buffers resident, which makes these vary from run to run).
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

# run BINARY DTYPE NP: prints the largest rank's peak resident memory in MiB
# during setup (the run's setup table says it; blank for a build that does
# not), "/", then each rank's peak over the whole run.
run() {
  local log="$WORK/run.log"
  mpiexec --oversubscribe --bind-to none -np "$3" sh -c "/usr/bin/time -f 'peak_rss_kb %M' $1 sft \
    --config configs/sft.yaml --model_name_or_path $WORK/model --dtype $2 --use_peft true \
    --accelerate_config zero3 --debug_force_distributed true --max_steps 1 --per_device_train_batch_size 2 \
    --max_length 64 --save_strategy no --eval_strategy no --report_to none --output_dir $WORK/out" >"$log" 2>&1 ||
    { tail -20 "$log" >&2; exit 1; }
  echo "$(grep -o 'host memory *[0-9]*' "$log" | awk '{print $3}') / $(grep -o 'peak_rss_kb [0-9]*' "$log" | awk '{printf "%.0f ", $2 / 1024}')"
}

# ratio A B: the largest setup peak of A over B's, then the same for whole runs.
ratio() {
  python3 -c "
import sys
a, b = ([[float(x) for x in half.split()] for half in s.split('/')] for s in sys.argv[1:3])
r = lambda x, y: '%.2f' % (max(x) / max(y)) if x and y else '-'
print(r(a[0], b[0]) + ' / ' + r(a[1], b[1]))" "$1" "$2"
}

echo "peak resident MiB: the largest rank's during setup / each rank's over the whole run"
printf '%-6s %-26s %-26s %-18s %-22s %s\n' build "fp32 from bf16, $NP ranks" "bf16 from bf16, $NP ranks" "fp32, 1 process" "fp32/bf16 (setup/run)" "fp32/1 process"
for side in new ${OLD_TRLX:+old}; do
  bin=$(realpath "$TRLX")
  [[ $side == old ]] && bin=$(realpath "$OLD_TRLX")
  a=$(run "$bin" float32 "$NP")
  b=$(run "$bin" bfloat16 "$NP")
  c=$(run "$bin" float32 1)
  printf '%-6s %-26s %-26s %-18s %-22s %s\n' "$side" "$a" "$b" "$c" "$(ratio "$a" "$b")" "$(ratio "$a" "$c")"
done

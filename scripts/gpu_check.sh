#!/usr/bin/env bash
# For a machine with an NVIDIA GPU (multi-GPU code is exercised here, not in
# CI): builds trlx against the CUDA LibTorch with the CUDA toolkit, tests the
# NCCL communicator with one rank (every operation and dtype, through c10d's
# ProcessGroupNCCL and a TCPStore rendezvous), then runs a few bf16 SFT steps
# of the shipped quickstart and prints their throughput.
#
#   scripts/gpu_check.sh            # BUILD_DIR=build-gpu JOBS=$(nproc) STEPS=20 to change
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-20}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "gpu_check: no NVIDIA GPU visible (nvidia-smi); run this on a GPU machine" >&2
  exit 1
fi
if ! command -v nvcc >/dev/null && [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  echo "gpu_check: no CUDA toolkit (nvcc); without it trlx builds without its NCCL communicator" >&2
  exit 1
fi

echo "== build ($BUILD_DIR)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRLX_BUILD_TESTS=ON >"$BUILD_DIR.configure.log" 2>&1 ||
  { cat "$BUILD_DIR.configure.log"; exit 1; }
if ! grep -q USE_C10D_NCCL "$BUILD_DIR/compile_commands.json"; then
  echo "gpu_check: this LibTorch does not offer c10d NCCL (USE_C10D_NCCL); install the CUDA PyTorch wheel" >&2
  exit 1
fi
cmake --build "$BUILD_DIR" -j "$JOBS" --target trlx test_dist_nccl
TRLX="$BUILD_DIR/apps/trlx/trlx"
"$TRLX" env

echo "== NCCL communicator, world 1"
rc=0
"$BUILD_DIR/tests/unit/dist/test_dist_nccl" || rc=$?
if [ $rc != 0 ]; then
  echo "gpu_check: NCCL communicator test failed (exit $rc; 77 means it did not find the GPU)" >&2
  exit 1
fi

echo "== bf16 SFT, $STEPS steps"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
start=$(date +%s.%N)
"$TRLX" sft --config configs/sft.yaml --bf16 true --max_steps "$STEPS" --logging_steps 5 --eval_strategy no \
  --save_strategy no --output_dir "$OUT/sft" 2>&1 | tee "$OUT/sft.log"
end=$(date +%s.%N)
grep -E '"(loss|train_tokens_per_second|train_runtime)"' "$OUT/sft/metrics.jsonl" | tail -3 || true
grep -q 'precision.*bf16' "$OUT/sft.log" || echo "gpu_check: warning: the run did not report bf16 precision" >&2
echo "gpu_check: $STEPS bf16 steps in $(echo "$end - $start" | bc) s wall (startup included); all checks passed"

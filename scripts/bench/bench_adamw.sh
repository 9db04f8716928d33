#!/usr/bin/env bash
# The AdamW step alone: torch::optim::AdamW::step() against trlx's fused step
# (the one every trainer runs) on the ~25M-parameter model of bench_sft.sh,
# alternating, median and spread over REPEATS (15), THREADS (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
export OMP_NUM_THREADS=${THREADS:-2}
cmake --build "$BUILD_DIR" --target adamw_bench -j2 >/dev/null
"$BUILD_DIR/tests/unit/engine/adamw_bench"

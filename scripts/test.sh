#!/usr/bin/env bash
# Runs the whole test suite (unit, dist, e2e) with ctest. Extra arguments go to
# ctest, e.g. `scripts/test.sh -L unit` or `scripts/test.sh -R tokenizer`.
#
# Tests that use the workplace's shared fixtures (real tokenizer files) read
# them from TRLX_SHARED_DIR; without it ctest reports them as skipped
# ("Not Run"), never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
if [ ! -d "$BUILD_DIR" ]; then
  echo "No $BUILD_DIR/: run scripts/setup.sh first" >&2
  exit 2
fi
# The test executables (and anything setup.sh's binary-only build left out).
echo "Building the tests with $JOBS jobs (about 9 minutes on 2 cores the first time)"
cmake --build "$BUILD_DIR" -j "$JOBS"
if [ -n "${TRLX_SHARED_DIR:-}" ]; then
  echo "Shared fixtures: $TRLX_SHARED_DIR"
else
  echo "TRLX_SHARED_DIR not set: tests that need the shared fixtures are reported as skipped"
fi
# MPI-launched tests run as root in containers and CI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" "$@"

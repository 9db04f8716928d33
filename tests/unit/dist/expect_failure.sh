#!/usr/bin/env bash
# Runs a command that must fail: exit status non-zero, within a time limit,
# with every given text in its output (the failing rank, the operation).
# Usage: expect_failure.sh <max seconds> <text>... -- <command...>
set -u
limit=$1
shift
texts=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do texts+=("$1"); shift; done
shift
start=$(date +%s.%N)
out=$(timeout $((${limit%.*} * 3)) "$@" 2>&1)
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
failures=0
if [ "$rc" = 0 ]; then echo "FAIL: exited 0"; failures=1; fi
if [ "$rc" = 124 ]; then echo "FAIL: still running after $((${limit%.*} * 3)) s (a hang)"; failures=1; fi
if awk "BEGIN{exit !($elapsed > $limit)}"; then echo "FAIL: took ${elapsed} s, limit ${limit} s"; failures=1; fi
for t in "${texts[@]}"; do
  if ! grep -qF -- "$t" <<<"$out"; then echo "FAIL: output lacks '$t'"; failures=1; fi
done
if [ $failures != 0 ]; then echo "--- output ---"; echo "$out"; exit 1; fi
echo "ok: exit $rc after ${elapsed} s"

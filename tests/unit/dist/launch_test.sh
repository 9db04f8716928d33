#!/usr/bin/env bash
# `trlx launch` on CPU (mpirun underneath): output prefixed by rank, the first
# failing rank's exit code, num_processes from an accelerate config, SIGTERM
# passed on, usage errors.
# Usage: launch_test.sh <path to trlx> <source dir>
source "$(dirname "$0")/../../e2e/lib.sh"
# A failure shows the last command's output.
bad() { echo "FAIL: $*"; echo "$OUT" | sed 's/^/    /'; failures=$((failures + 1)); }
# run <expected exit code> <args...>
run() {
  local want=$1
  shift
  OUT=$(timeout 60 "$TRLX" "$@" 2>&1)
  RC=$?
  if [ "$RC" = "$want" ]; then ok; else bad "trlx $* exited $RC, expected $want"; fi
}
has() { if grep -qE -- "$1" <<<"$OUT"; then ok; else bad "output lacks /$1/"; fi; }
lacks() { if grep -qE -- "$1" <<<"$OUT"; then bad "output has /$1/"; else ok; fi; }

# Two ranks of `trlx env`: each line carries its rank, each rank knows its place.
run 0 launch --nproc_per_node 2 -- trlx env
has '^\[rank 0\] rank +0 of world size 2'
has '^\[rank 1\] rank +1 of world size 2'
has '^\[rank 1\] launcher'
lacks '\[rank 1\] \[rank 1\]'

# Rank 1 fails with 7 while rank 0 would run on: launch returns 7, quickly.
start=$(date +%s)
run 7 launch --nproc_per_node 2 -- sh -c \
  'r=${OMPI_COMM_WORLD_RANK:-$RANK}; echo "hello from $r"; if [ "$r" = 1 ]; then echo "bad input" >&2; exit 7; fi; sleep 30'
has '^\[rank 1\] hello from 1'
has '^\[rank 1\] bad input'
has '^\[rank 0\] hello from 0'
[ $(($(date +%s) - start)) -lt 20 ] && ok || bad "a failing rank took $(($(date +%s) - start)) s to stop the others"

# num_processes from an accelerate config.
cat >"$TMP/acc.yaml" <<'YAML'
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_processes: 3
use_cpu: true
YAML
run 0 launch --accelerate_config "$TMP/acc.yaml" -- sh -c 'echo "rank ${OMPI_COMM_WORLD_RANK:-$RANK} of ${OMPI_COMM_WORLD_SIZE:-$WORLD_SIZE}"'
has '^\[rank 2\] rank 2 of 3'
# One rank needs no MPI: torchrun-style variables.
run 0 launch -- sh -c 'echo "rank $RANK of $WORLD_SIZE"'
has '^\[rank 0\] rank 0 of 1'

# SIGTERM to launch reaches every rank; launch ends non-zero and leaves nothing running.
"$TRLX" launch --nproc_per_node 2 -- sh -c 'trap "echo got TERM; exit 5" TERM; echo ready; sleep 30 & wait' \
  >"$TMP/term.log" 2>&1 &
pid=$!
for _ in $(seq 50); do [ "$(grep -c ready "$TMP/term.log")" = 2 ] && break; sleep 0.2; done
kill -TERM $pid
start=$(date +%s)
wait $pid
rc=$?
OUT=$(cat "$TMP/term.log")
[ $rc != 0 ] && ok || bad "launch exited 0 after SIGTERM"
[ $(($(date +%s) - start)) -lt 15 ] && ok || bad "SIGTERM took $(($(date +%s) - start)) s"
has '\[rank [01]\] got TERM'

# SIGTERM to a training run under launch: every rank stops at the same step
# after saving it, and they leave together (exit 1, no MPI abort notice).
"$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft --config configs/sft.yaml --max_steps 100000 --logging_steps 20 \
  --save_strategy no --eval_strategy no --output_dir "$TMP/stop" >"$TMP/stop.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q 'step 20/' "$TMP/stop.log" && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
OUT=$(cat "$TMP/stop.log")
[ $rc = 1 ] && ok || bad "launch exited $rc after SIGTERM to a training run, expected 1"
has '\[rank 0\] .*stop requested: saving at step [0-9]+'
step0=$(grep -o '\[rank 0\] training stopped at step [0-9]*' "$TMP/stop.log" | grep -o '[0-9]*$')
step1=$(grep -o '\[rank 1\] training stopped at step [0-9]*' "$TMP/stop.log" | grep -o '[0-9]*$')
[ -n "$step0" ] && [ "$step0" = "$step1" ] && ok || bad "ranks stopped at steps '$step0' and '$step1'"
[ -d "$TMP/stop/checkpoint-$step0" ] && ok || bad "no checkpoint-$step0"
lacks 'MPI_ABORT|most likely because another rank failed'

# Usage errors.
run 2 launch --nproc_per_node 2
has 'no command'
run 2 launch --nproc_per_node 0 -- trlx env

finish

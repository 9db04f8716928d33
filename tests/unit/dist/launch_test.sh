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
# mpirun's abort notices become one line naming the rank and its code.
has '^trlx launch: rank 1 was the first to exit with an error \(code 7\)'
lacks 'Primary job|mpirun detected'

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

# SIGTERM while rank 0's reward program is still answering (it hangs from its
# third request on) and rank 1 waits for rank 0: rank 0 cuts the wait short
# after stop_grace_seconds, both ranks drop step 3 and save step 2.
cat >"$TMP/hang_third.sh" <<'SH'
n=0
while IFS= read -r line; do
  n=$((n + 1))
  if [ $n -ge 3 ] && [ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ]; then touch "$HANG_MARK"; exec sleep 1001; fi
  printf '%s\n' "$line" | bash examples/rewards/length_reward.sh
done
SH
HANG_MARK="$TMP/hang_mark" "$TRLX" launch --nproc_per_node 2 -- "$TRLX" grpo --model_name_or_path examples/tiny-model \
  --bf16 false --per_device_train_batch_size 2 --num_generations 2 --max_completion_length 8 --logging_steps 1 \
  --max_steps 4 --save_steps 100 --output_dir "$TMP/grpo_stop" --dataset_name tests/data/grpo/text \
  --reward_funcs '{"command": "bash '"$TMP"'/hang_third.sh", "name": "length", "stop_grace_seconds": 2}' \
  >"$TMP/grpo_stop.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -f "$TMP/hang_mark" ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
OUT=$(cat "$TMP/grpo_stop.log")
[ $rc = 1 ] && ok || bad "launch exited $rc after SIGTERM during a reward program's answer, expected 1"
has '\[rank 0\] .*step 3 is dropped, saving step 2'
has '\[rank 1\] training stopped at step 2'
[ -f "$TMP/grpo_stop/checkpoint-2/trainer_state.json" ] && ok || bad "no checkpoint-2"
pgrep -f "sleep 1001" >/dev/null && bad "the reward program's child is still running" || ok

# `trlx env --rendezvous`: the ranks meet where GPU ranks would and rank 0
# lists them. Under `trlx launch` on CPU (mpirun: rank 0's port over MPI):
run 0 launch --nproc_per_node 3 -- trlx env --rendezvous --timeout 30
has '^\[rank 0\] rendezvous .*: 3 rank\(s\) met in'
has '^\[rank 0\]   2 +- +2/3 '
has '^\[rank 2\] rank 2 of 3 on .*: met rank 0 at'
# Started by hand as torchrun would start them: MASTER_ADDR and MASTER_PORT.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# by_hand <world> <timeout> <rank:local_rank:local_world:group_rank>...: one process each, in
# the background; waits for all, leaves rank 0's output in OUT and its exit code in RC.
by_hand() {
  local world=$1 t=$2 spec r lr lw gr
  shift 2
  local pids=()
  for spec in "$@"; do
    IFS=: read -r r lr lw gr <<<"$spec"
    env RANK=$r WORLD_SIZE=$world LOCAL_RANK=$lr LOCAL_WORLD_SIZE=$lw GROUP_RANK=$gr MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port timeout 60 "$TRLX" env --rendezvous --timeout "$t" >"$TMP/rdzv.$r" 2>&1 &
    pids+=($!)
  done
  local rcs=()
  for p in "${pids[@]}"; do wait "$p"; rcs+=($?); done
  RC=${rcs[0]}
  OUT=$(cat "$TMP"/rdzv.*)
  rm -f "$TMP"/rdzv.*
}
by_hand 3 30 0:0:3:0 1:1:3:0 2:2:3:0
[ "$RC" = 0 ] && ok || bad "torchrun-style rendezvous: rank 0 exited $RC"
has "rendezvous 127\.0\.0\.1:$port \(torchrun\): 3 rank\(s\) met"
has '^  1 +0 +1/3 '
has "rank 2 of 3 on .*: met rank 0 at 127\.0\.0\.1:$port"
# Two ranks told they are local rank 0 of one host: they would share a GPU.
by_hand 2 30 0:0:2:0 1:0:2:0
[ "$RC" = 2 ] && ok || bad "a duplicated local rank: rank 0 exited $RC, expected 2"
has 'problem: ranks 0 and 1 on .* both have local rank 0'
# A rank that never comes: rank 0 names it after the timeout, exit 1.
by_hand 3 3 0:0:3:0 1:1:3:0
[ "$RC" = 1 ] && ok || bad "a missing rank: rank 0 exited $RC, expected 1"
has 'rank\(s\) 2 of 3 did not reach the rendezvous at 127\.0\.0\.1:'"$port"' within 3 s'
lacks '^frame #'
# Nobody at MASTER_ADDR:MASTER_PORT: the rank says where it dialled.
by_hand 2 3 1:1:2:0
[ "$RC" = 1 ] && ok || bad "no store: rank 1 exited $RC, expected 1"
has "rank 1 of 2: the rendezvous store at 127\.0\.0\.1:$port \(client\) failed"
lacks '^frame #'  # a message, not LibTorch's stack trace
run 2 env --rendezvous --timeout -3
has 'expected a positive number of seconds'

# Usage errors.
run 2 launch --nproc_per_node 2
has 'no command'
run 2 launch --nproc_per_node 0 -- trlx env

finish

#!/usr/bin/env bash
# A two-node job on one machine: two network namespaces ("nodes") joined by a
# veth pair, each with its own host name and an address only it has, two
# ranks per node. What runs there:
#
#   1. `trlx env --rendezvous` started torchrun-style by hand (RANK, WORLD_SIZE,
#      LOCAL_RANK, GROUP_RANK, MASTER_ADDR on node 0's veth address): all four
#      ranks meet at the store GPU ranks use, and rank 0 lists two hosts; then
#      the classic mistake, MASTER_ADDR=127.0.0.1 on every node, which node 1
#      cannot reach: every rank ends non-zero and rank 0 names the missing ranks;
#      and torchrun itself on each node (its agents host the store).
#   2. mpirun with a host file (its remote shell enters the other namespace):
#      4-rank DDP and ZeRO-3 SFT runs across the two nodes end with the model
#      one process trains on the same global batches, and log its losses.
#   3. The link between the nodes goes down mid-run: every rank ends non-zero
#      within ddp_timeout, naming the collective it waited in, and the last
#      checkpoint is whole: with the link back, the job resumes from it.
#
# Needs root (ip netns, veth) and Open MPI; without them it prints why and
# exits 77 (ctest: skipped).
#
#   scripts/multinode_rehearsal.sh [path to trlx] [source dir]
set -u
SRC_DIR="$(cd "${2:-$(dirname "$0")/..}" && pwd)"
TRLX_BIN="$(realpath "${1:-$SRC_DIR/build/apps/trlx/trlx}")"

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces (ip netns) and a veth pair"
command -v ip >/dev/null || skip "no ip command (iproute2)"
command -v unshare >/dev/null || skip "no unshare (util-linux)"
command -v mpirun >/dev/null || skip "no mpirun (Open MPI)"
[ -x "$TRLX_BIN" ] || { echo "no trlx binary at $TRLX_BIN"; exit 2; }

# Names unique to this run, so that two runs (ctest -j) do not meet.
tag=$(( $$ % 100000 ))
NS0=trlxmn${tag}n0
NS1=trlxmn${tag}n1
IF0=tmn${tag}a
IF1=tmn${tag}b
net=$(( $$ % 200 + 20 ))
ADDR0=10.213.$net.1
ADDR1=10.213.$net.2
HOST0=trlx-node0-$tag
HOST1=trlx-node1-$tag

source "$SRC_DIR/tests/e2e/lib.sh" "$TRLX_BIN" "$SRC_DIR"

teardown() {
  for ns in $NS0 $NS1; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap teardown EXIT

if ! ip netns add $NS0 2>"$TMP/ns.err" || ! ip netns add $NS1 2>>"$TMP/ns.err"; then
  skip "this kernel or container does not allow network namespaces: $(head -1 "$TMP/ns.err")"
fi
if ! ip link add $IF0 type veth peer name $IF1 2>"$TMP/veth.err"; then
  skip "this kernel or container does not allow a veth pair: $(head -1 "$TMP/veth.err")"
fi
ip link set $IF0 netns $NS0 && ip link set $IF1 netns $NS1 &&
  ip -n $NS0 addr add $ADDR0/24 dev $IF0 && ip -n $NS1 addr add $ADDR1/24 dev $IF1 &&
  ip -n $NS0 link set lo up && ip -n $NS1 link set lo up &&
  ip -n $NS0 link set $IF0 up && ip -n $NS1 link set $IF1 up || { echo "could not set up the veth pair"; exit 2; }
echo "nodes: $HOST0 ($ADDR0, namespace $NS0) and $HOST1 ($ADDR1, namespace $NS1)"

# on_node <0|1> <command...>: runs a command on a node (its namespace, its host name).
on_node() {
  local ns=$NS0 host=$HOST0
  [ "$1" = 1 ] && ns=$NS1 host=$HOST1
  shift
  ip netns exec "$ns" unshare --uts sh -c 'hostname "$0"; exec "$@"' "$host" "$@"
}

export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# --- 1. torchrun-style environment by hand ---------------------------------
# rendezvous <master addr> <timeout>: four `trlx env --rendezvous`, two per node;
# leaves each rank's output in $TMP/rdzv.<rank> and exit code in RC<rank>.
rendezvous() {
  local master=$1 t=$2 pids=() r
  for r in 0 1 2 3; do
    on_node $((r / 2)) env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 GROUP_RANK=$((r / 2)) \
      MASTER_ADDR="$master" MASTER_PORT=29511 timeout 90 "$TRLX" env --rendezvous --timeout "$t" \
      >"$TMP/rdzv.$r" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2 3; do wait "${pids[$r]}"; eval "RC$r=$?"; done
}
rendezvous $ADDR0 30
cat "$TMP/rdzv.0"
check "[ $RC0$RC1$RC2$RC3 = 0000 ]"
check "grep -q 'rendezvous $ADDR0:29511 (torchrun): 4 rank(s) met' '$TMP/rdzv.0'"
check "grep -Eq '^  1 +0 +1/2 .*$HOST0\$' '$TMP/rdzv.0' && grep -Eq '^  3 +1 +1/2 .*$HOST1\$' '$TMP/rdzv.0'"
check "grep -q 'rank 3 of 4 on $HOST1: met rank 0 at $ADDR0:29511' '$TMP/rdzv.3'"
# MASTER_ADDR=127.0.0.1 everywhere: node 1's ranks dial their own loopback.
start=$(date +%s)
rendezvous 127.0.0.1 5
echo "  MASTER_ADDR=127.0.0.1 on both nodes: exit codes $RC0 $RC1 $RC2 $RC3 after $(($(date +%s) - start)) s"
cat "$TMP/rdzv.0" "$TMP/rdzv.2"
check "[ $RC0 = 1 ] && [ $RC2 = 1 ] && [ $RC3 = 1 ]"
check "grep -q 'rank(s) 2, 3 of 4 did not reach the rendezvous at 127.0.0.1:29511 within 5 s' '$TMP/rdzv.0'"
check "grep -q 'rank 2 of 4: the rendezvous store at 127.0.0.1:29511 (client) failed' '$TMP/rdzv.2'"
check "[ $(($(date +%s) - start)) -lt 30 ]"
check "! grep -q '^frame #' '$TMP'/rdzv.*"  # a message, not LibTorch's stack trace

# torchrun itself on each node (static rendezvous at node 0): its agents host
# the store, and the ranks meet in it under their restart's prefix.
if command -v torchrun >/dev/null; then
  for n in 0 1; do
    on_node $n torchrun --nnodes 2 --node_rank $n --nproc_per_node 2 --master_addr $ADDR0 --master_port 29512 \
      --no-python "$TRLX" env --rendezvous --timeout 30 >"$TMP/torchrun.$n" 2>&1 &
    eval "tr$n=\$!"
  done
  wait $tr0; rc0=$?
  wait $tr1; rc1=$?
  grep -v '^W\|^\*\*\*\|^ *$' "$TMP/torchrun.0"
  check "[ $rc0$rc1 = 00 ] || { cat '$TMP/torchrun.0' '$TMP/torchrun.1'; false; }"
  check "grep -q 'rendezvous $ADDR0:29512 (torchrun): 4 rank(s) met' '$TMP/torchrun.0'"
  check "grep -Eq '^  3 +1 +1/2 .*$HOST1\$' '$TMP/torchrun.0'"
else
  echo "  (torchrun not on PATH: its part skipped)"
fi

# --- 2. mpirun with a host file -------------------------------------------
# Open MPI reaches the other node through its remote shell: this agent enters
# the namespace that has the address instead of ssh.
cat >"$TMP/agent.sh" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
  $ADDR0) ns=$NS0 name=$HOST0 ;;
  $ADDR1) ns=$NS1 name=$HOST1 ;;
  *) echo "agent: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec \$ns unshare --uts sh -c "hostname \$name; \$*"
EOF
chmod +x "$TMP/agent.sh"
printf '%s slots=2\n%s slots=2\n' $ADDR0 $ADDR1 >"$TMP/hosts"
# job <log prefix> <trlx args...>: a 4-rank job started from node 0; each
# rank writes its own log (node 1's output would otherwise travel over the
# link this script takes down) and its exit code.
job() {
  local log=$1
  shift
  on_node 0 mpirun --hostfile "$TMP/hosts" -np 4 --bind-to none --mca plm_rsh_agent "$TMP/agent.sh" \
    sh -c 'r=$OMPI_COMM_WORLD_RANK; "$0" "$@" >"'"$log"'.$r" 2>&1; rc=$?; echo $rc >"'"$log"'.rc$r"; exit $rc' \
    "$TRLX" "$@"
}

RUN="--config configs/sft.yaml --max_steps 4 --logging_steps 1 --save_strategy no --eval_strategy no --bf16 false"
"$TRLX" sft $RUN --per_device_train_batch_size 8 --output_dir "$TMP/one" >"$TMP/one.log" 2>&1
check "[ $? = 0 ] || { tail -5 '$TMP/one.log'; false; }"
for preset in ddp zero3; do
  extra=""
  [ $preset = zero3 ] && extra="--accelerate_config zero3"
  job "$TMP/$preset.log" sft $RUN --per_device_train_batch_size 2 $extra --output_dir "$TMP/$preset" \
    >"$TMP/$preset.mpirun" 2>&1
  rc=$?
  check "[ $rc = 0 ] || { tail -20 '$TMP/$preset.mpirun' '$TMP/$preset.log.0'; false; }"
  check "grep -q '2 per device x 1 accumulation x 4 process(es) = 8' '$TMP/$preset.log.0'"
  check "grep -q '$preset (mpi communicator' '$TMP/$preset.log.0'"
  check "same_scores '$TMP/one' '$TMP/$preset'"
  check "same_metric loss '$TMP/one' '$TMP/$preset'"
done

# --- 3. the link goes down mid-run ----------------------------------------
TIMEOUT=20
LONG="--config configs/sft.yaml --max_steps 100000 --logging_steps 5 --save_strategy steps --save_steps 10
      --save_total_limit 2 --eval_strategy no --bf16 false --per_device_train_batch_size 2
      --accelerate_config zero3 --ddp_timeout $TIMEOUT --output_dir $TMP/cut"
job "$TMP/cut.log" sft $LONG >"$TMP/cut.mpirun" 2>&1 &
jobpid=$!
for _ in $(seq 600); do [ -d "$TMP/cut/checkpoint-20" ] && break; sleep 0.1; done
check "[ -d '$TMP/cut/checkpoint-20' ]"
sleep 1
ip -n $NS0 link set $IF0 down
down=$(date +%s)
echo "  link down at $(date +%T)"
# Every trlx process on either node ends within ddp_timeout (and a margin for
# the step it was in).
left=1
while [ $(($(date +%s) - down)) -lt $((TIMEOUT + 30)) ]; do
  left=$( { ip netns pids $NS0; ip netns pids $NS1; } | xargs -r ps -o comm= -p 2>/dev/null | grep -c '^trlx$')
  [ "$left" = 0 ] && break
  sleep 0.5
done
took=$(($(date +%s) - down))
echo "  every rank ended $took s after the link went down (ddp_timeout $TIMEOUT s); trlx processes left: $left"
check "[ '$left' = 0 ] && [ $took -le $((TIMEOUT + 15)) ]"
for r in 0 1 2 3; do
  echo "  rank $r exit $(cat "$TMP/cut.log.rc$r" 2>/dev/null || echo '(killed)'): $(grep -h -m1 -E 'did not finish|error' "$TMP/cut.log.$r" | cut -c1-200)"
  # Non-zero: its own exit code, or killed by the launcher after another rank's abort.
  check "! grep -qx 0 '$TMP/cut.log.rc$r' 2>/dev/null"
done
# The ranks that timed out name the collective and the timeout; both nodes have one.
check "grep -lE '(all_reduce|all_gather|reduce_scatter|broadcast|barrier)[a-z_]* #[0-9]+.*did not finish within $TIMEOUT s \(ddp_timeout\)' '$TMP'/cut.log.[01] | grep -q ."
check "grep -lE '(all_reduce|all_gather|reduce_scatter|broadcast|barrier)[a-z_]* #[0-9]+.*did not finish within $TIMEOUT s \(ddp_timeout\)' '$TMP'/cut.log.[23] | grep -q ."
kill -9 $jobpid 2>/dev/null
wait $jobpid 2>/dev/null
for ns in $NS0 $NS1; do pids=$(ip netns pids $ns); [ -n "$pids" ] && kill -9 $pids 2>/dev/null; done
last=$(ls -d "$TMP"/cut/checkpoint-* 2>/dev/null | grep -o '[0-9]*$' | sort -n | tail -1)
echo "  last checkpoint: checkpoint-$last; left behind: $(ls -A "$TMP/cut" | tr '\n' ' ')"
check "[ -n '$last' ] && [ -f '$TMP/cut/checkpoint-$last/trainer_state.json' ]"
# With the link back, the job resumes from that checkpoint and trains on.
ip -n $NS0 link set $IF0 up
sleep 1
RESUME="${LONG/--max_steps 100000/--max_steps $((last + 2))} --resume_from_checkpoint true"
job "$TMP/resume.log" sft $RESUME >"$TMP/resume.mpirun" 2>&1
rc=$?
check "[ $rc = 0 ] || { tail -20 '$TMP/resume.mpirun' '$TMP/resume.log.0'; false; }"
check "grep -q 'resumed from .*checkpoint-$last at step $last' '$TMP/resume.log.0'"
check "[ -d '$TMP/cut/checkpoint-$((last + 2))' ] || [ -f '$TMP/cut/model.safetensors' ]"
finish

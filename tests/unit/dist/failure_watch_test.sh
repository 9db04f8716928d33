#!/usr/bin/env bash
# Ranks that die without a word are noticed by the others within seconds:
# three probes (failure_watch_probe.cpp) run the NCCL communicator's
# heartbeat watch over a rendezvous store on this machine; one is killed with
# SIGKILL (no destructor, no message), and the others must exit within a few
# seconds naming it. Ranks that end cleanly, or start late, raise no alarm.
# Usage: failure_watch_test.sh <failure_watch_probe>
set -u
probe=$1
export TRLX_HEARTBEAT_TIMEOUT=2   # silence before a rank counts as failed (a period of 0.4 s)
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL ($scenario): $*"; failures=$((failures + 1)); }

# start <rank> <mode> <seconds> [delay]: a probe in the background, its pid in pid[rank]
declare -a pid
start() {
  local r=$1 mode=$2 secs=$3 delay=${4:-0}
  (sleep "$delay"; exec "$probe" "$r" 3 "$work/port" "$mode" "$secs") >"$work/out$r" 2>&1 &
  pid[$r]=$!
}
wait_watching() {  # until every rank says it watches (10 s at most)
  for _ in $(seq 100); do
    [ "$(cat "$work"/out* 2>/dev/null | grep -c watching)" = 3 ] && return 0
    sleep 0.1
  done
  fail "the ranks did not all start: $(cat "$work"/out*)"
}
# expect <rank> <exit status> [text]: the rank's exit status and output
expect() {
  local r=$1 want=$2 text=${3:-} rc
  wait "${pid[$r]}"; rc=$?
  [ "$rc" = "$want" ] || fail "rank $r exited $rc, expected $want: $(cat "$work/out$r")"
  if [ -n "$text" ] && ! grep -qF -- "$text" "$work/out$r"; then fail "rank $r did not say '$text': $(cat "$work/out$r")"; fi
}
reset() { scenario=$1; rm -f "$work"/out* "$work"/port*; }
elapsed_since() { echo "$(date +%s.%N) - $1" | bc; }
within() {  # within <start> <limit>: the time since start is under limit
  local e; e=$(elapsed_since "$1")
  echo "  $scenario: the others exited ${e} s after the kill (or the start)"
  awk "BEGIN{exit !($e < $2)}" || fail "took ${e} s, limit $2 s"
}

for victim in 1 2; do
  reset "rank $victim killed"
  for r in 0 1 2; do start $r run 30; done
  wait_watching
  t=$(date +%s.%N); kill -9 "${pid[$victim]}"
  for r in 0 1 2; do
    [ $r = $victim ] && { wait "${pid[$r]}" 2>/dev/null; continue; }
    expect $r 3 "rank $victim stopped answering"
  done
  within "$t" 5
done

reset "rank 0 (the store's host) killed"
for r in 0 1 2; do start $r run 30; done
wait_watching
t=$(date +%s.%N); kill -9 "${pid[0]}"; wait "${pid[0]}" 2>/dev/null
expect 1 3 "store lost"; expect 2 3 "store lost"
within "$t" 5

reset "rank 1 announces its failure"
start 0 run 30; start 1 fail 1.5; start 2 run 30
t=$(date +%s.%N)
expect 1 1; expect 0 3 "rank 1 failed: the probe was told to fail"; expect 2 3 "rank 1 failed: the probe was told to fail"
within "$t" 6

reset "clean ends, one rank starting late"
start 0 run 8; start 1 run 3; start 2 run 4 3   # rank 2 starts 3 s late, past the 2 s silence
for r in 0 1 2; do expect $r 0 "saw no failure"; done

if [ $failures != 0 ]; then exit 1; fi
echo "ok: killed and failed ranks noticed, clean and late ranks left alone"

#!/usr/bin/env bash
# Soak: a long DPO run under ZeRO-3 on 3 CPU ranks with checkpoints, one rank
# killed with SIGKILL at a random moment, the job resumed from its last
# checkpoint, and the end compared with the same run left alone: the final
# weights must be bit-identical and the logged losses equal, with no step
# logged twice. Not part of CI (it runs for MINUTES twice over).
#
#   scripts/soak.sh [MINUTES=30] [path to trlx] [work dir]
#
# MINUTES is the length of the interrupted run; the number of steps that
# fills it is measured first. The base model is a short SFT run of the
# quickstart config. Prints the comparison; exit 0 when it holds.
set -u
MINUTES=${1:-30}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TRLX="$(realpath "${2:-$ROOT/build/apps/trlx/trlx}")"
WORK="${3:-$(mktemp -d /tmp/trlx-soak.XXXXXX)}"
mkdir -p "$WORK"
cd "$ROOT" || exit 2
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log() { echo "[soak $(date +%T)] $*"; }
die() { log "FAILED: $*"; exit 1; }

log "work dir $WORK, trlx $TRLX, $MINUTES minute(s)"
if [ ! -f "$WORK/base/model.safetensors" ]; then
  "$TRLX" sft --config configs/sft.yaml --max_steps 40 --eval_strategy no --save_strategy no \
    --output_dir "$WORK/base" >"$WORK/base.log" 2>&1 || die "SFT for the base model: see $WORK/base.log"
fi

# Small batches so that a step is short and a 30-minute run has many of them.
DPO=(dpo --config configs/dpo.yaml --model_name_or_path "$WORK/base" --accelerate_config zero3
     --per_device_train_batch_size 2 --gradient_accumulation_steps 2 --eval_strategy no --logging_steps 5
     --save_strategy steps --save_total_limit 2 --bf16 false --seed 7)
launch() { "$TRLX" launch --nproc_per_node 3 -- "$TRLX" "$@"; }

# Seconds per step on this machine: two short runs, 10 and 40 steps; the
# difference of their wall times leaves start-up out.
timed() {  # timed <steps>: wall seconds of a run of that many steps
  local t0 t1
  rm -rf "$WORK/calib$1"
  t0=$(date +%s.%N)
  launch "${DPO[@]}" --max_steps "$1" --save_steps 1000 --output_dir "$WORK/calib$1" >"$WORK/calib$1.log" 2>&1 ||
    die "calibration run: see $WORK/calib$1.log"
  t1=$(date +%s.%N)
  python3 -c "print($t1 - $t0)"
}
t10=$(timed 10) && t40=$(timed 40) || exit 1
secs=$(python3 -c "print(max(0.01, ($t40 - $t10) / 30))")
STEPS=$(python3 -c "print(max(40, int($MINUTES * 60 / $secs)))")
# Checkpoints on logging steps (every 5): a logged loss averages the steps
# since the last log, and a run resumed between two logs (like one resumed
# with Trainer) averages only the steps after its checkpoint.
SAVE=$(python3 -c "print(max(5, $STEPS // 12 // 5 * 5))")
log "$secs s per step: $STEPS steps, a checkpoint every $SAVE"

last_step() { grep -o '"step": *[0-9]*' "$1" 2>/dev/null | tail -1 | grep -o '[0-9]*$'; }

# The interrupted run: a random rank is killed between 30% and 70% of the way.
rm -rf "$WORK/cut"
launch "${DPO[@]}" --max_steps "$STEPS" --save_steps "$SAVE" --output_dir "$WORK/cut" >"$WORK/cut.log" 2>&1 &
job=$!
kill_at=$(python3 -c "import random; print(random.randint(int($STEPS*0.3), int($STEPS*0.7)))")
victim=$((RANDOM % 3))
log "rank $victim gets SIGKILL after step $kill_at"
while kill -0 $job 2>/dev/null; do
  step=$(last_step "$WORK/cut/metrics.jsonl")
  [ -n "$step" ] && [ "$step" -ge "$kill_at" ] && break
  sleep 1
done
pid=""
for p in $(pgrep -x trlx); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim" || continue
  tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- "--output_dir $WORK/cut" && tr '\0' ' ' <"/proc/$p/cmdline" |
    grep -qv ' launch ' && pid=$p
done
[ -n "$pid" ] || die "rank $victim's process not found (did the run end before step $kill_at?)"
kill -9 "$pid"
killed=$(date +%s)
wait $job
rc=$?
log "killed rank $victim (pid $pid): the job ended with exit $rc after $(($(date +%s) - killed)) s"
[ $rc != 0 ] || die "the job exited 0 after a rank was killed"
last=$(ls -d "$WORK"/cut/checkpoint-* 2>/dev/null | grep -o '[0-9]*$' | sort -n | tail -1)
[ -n "$last" ] || die "no checkpoint to resume from"
leftover=$(ls -A "$WORK/cut" | grep -c '\.tmp$')
log "resuming from checkpoint-$last ($leftover unfinished checkpoint folder(s) left by the kill)"
launch "${DPO[@]}" --max_steps "$STEPS" --save_steps "$SAVE" --output_dir "$WORK/cut" \
  --resume_from_checkpoint true >"$WORK/resume.log" 2>&1 || die "resume: see $WORK/resume.log"

log "the same run left alone"
rm -rf "$WORK/whole"
launch "${DPO[@]}" --max_steps "$STEPS" --save_steps "$SAVE" --output_dir "$WORK/whole" >"$WORK/whole.log" 2>&1 ||
  die "uninterrupted run: see $WORK/whole.log"

python3 - "$WORK/whole" "$WORK/cut" "$STEPS" <<'PY'
import json, sys, struct
from array import array

def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}

whole, cut, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
a, b = tensors(whole + "/model.safetensors"), tensors(cut + "/model.safetensors")
assert a.keys() == b.keys(), "different tensor names"
same = sum(a[k][2] == b[k][2] for k in a)
worst = max((abs(x - y) for k in a if a[k][0] == "F32" and a[k][2] != b[k][2]
             for x, y in zip(array("f", a[k][2]), array("f", b[k][2]))), default=0.0)
print(f"weights: {same}/{len(a)} tensors bit-identical, largest difference {worst:.3g}")

def losses(d):
    rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"loss"' in l]
    return [(r["step"], r["loss"]) for r in rows]
la, lb = losses(whole), losses(cut)
steps_b = [s for s, _ in lb]
print(f"logged steps: {len(la)} uninterrupted, {len(lb)} interrupted+resumed, "
      f"{len(steps_b) - len(set(steps_b))} logged twice")
print(f"losses equal at every logged step: {la == lb}; last step {la[-1][0] if la else None} of {steps}")
sys.exit(0 if same == len(a) and la == lb and len(steps_b) == len(set(steps_b)) else 1)
PY
rc=$?
[ $rc = 0 ] && log "PASSED: the interrupted and resumed run ends where the uninterrupted one does" || die "see above"

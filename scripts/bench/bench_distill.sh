#!/usr/bin/env bash
# On-policy distillation speed and memory, trlx distill vs TRL's
# DistillationTrainer (scripts/bench/distill_demo_trl.py), same run, same
# threads, CPU, fp32 (bf16 false), gradient checkpointing off on both sides:
#  - seconds per optimizer step (generation included), the first step left out
#    as warm-up: (end of the last step - end of the first) / (STEPS - 1). TRL's
#    step ends come from a TrainerCallback (on_step_end), trlx's from the time
#    each "step N/M" log line (logging_steps 1) reaches this script. Start-up
#    and model loading are never counted; the first step is printed apart
#    (from the start of training: TRL's on_train_begin, trlx's setup table)
#  - peak resident memory of each process (/usr/bin/time -v)
#  - the share of the step time spent sampling completions (trlx's
#    generation_seconds; TRL's _generate_and_score_completions, timed)
#  - the mean completion length each side logged (completions/mean_length):
#    with random weights over a 151k vocabulary the eos is almost never drawn,
#    so both run to max_completion_length and the token counts match
#  - the first step's loss on each side (same weights, different samples: a
#    sanity check, not a comparison)
# Student: Qwen3-shaped, hidden 256, 2 layers, tied head (40M parameters);
# teacher: hidden 384, 4 layers, untied head (124M); both random float32
# safetensors with Qwen3's tokenizer and its 151,936-row vocabulary, made in a
# temporary directory. Prompts: plain text, 20-40 words, in file order on
# both sides (shuffle_dataset false).
#
# Each repeat runs trlx and TRL back to back, alternating which goes first;
# the ratios are taken per repeat and summarised by median and spread.
# Needs python3 with trl >= 1.16 (dev time). Environment: THREADS (2), STEPS
# (3), REPEATS (3), BATCH (2 prompts per step, one completion each),
# COMPLETION_LEN (512 new tokens), BETA (1.0: reverse KL; 0.5: JSD), TEMPERATURE
# (1.0), SEED (42), TOKENIZER (default the Qwen3 tokenizer in
# $TRLX_SHARED_DIR/fixtures/tokenizers, /work/shared when unset), BUILD_DIR
# (build), NO_BUILD=1 to skip the build, PHASES=1 for trlx's TRLX_PHASE_TIMES
# breakdown of its last run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-3}
REPEATS=${REPEATS:-3}
BATCH=${BATCH:-2}
COMPLETION_LEN=${COMPLETION_LEN:-512}
BETA=${BETA:-1.0}
TEMPERATURE=${TEMPERATURE:-1.0}
SEED=${SEED:-42}
TOKENIZER=${TOKENIZER:-${TRLX_SHARED_DIR:-/work/shared}/fixtures/tokenizers/qwen3}
TRLX="$BUILD_DIR/apps/trlx/trlx"
[[ -f $TOKENIZER/tokenizer.json ]] || { echo "no tokenizer.json in $TOKENIZER (set TOKENIZER)" >&2; exit 1; }
((STEPS >= 2)) || { echo "STEPS must be at least 2 (the first step is warm-up)" >&2; exit 2; }
[[ -n ${NO_BUILD:-} ]] || cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$TRLX" init-model --arch qwen3 --hidden_size 256 --intermediate_size 768 --num_layers 2 --num_heads 4 \
  --num_kv_heads 2 --head_dim 64 --vocab_size 151936 --tokenizer "$TOKENIZER" --tie_word_embeddings --seed 1 \
  --out "$WORK/student" >/dev/null
"$TRLX" init-model --arch qwen3 --hidden_size 384 --intermediate_size 1152 --num_layers 4 --num_heads 6 \
  --num_kv_heads 2 --head_dim 64 --vocab_size 151936 --tokenizer "$TOKENIZER" --seed 2 --out "$WORK/teacher" >/dev/null
python3 - "$WORK/train.jsonl" $((STEPS * BATCH + 8)) <<'PY'
import json, random, sys
random.seed(0)
words = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
         "you were her all she there would their we him been has when who will more no if out so said what up its about "
         "into than them can only other new some could time these two may then do first any my now such like our over").split()
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        f.write(json.dumps({"prompt": " ".join(random.choices(words, k=random.randint(20, 40)))}) + "\n")
PY
export OMP_NUM_THREADS=$THREADS
load() { cut -d' ' -f1 /proc/loadavg; }
# Copies stdin to file $1, each line after the seconds (epoch) it arrived.
stamp() {
  python3 -c '
import sys, time
with open(sys.argv[1], "w") as f:
    for line in iter(sys.stdin.readline, ""):
        f.write(f"{time.time():.4f} {line}"); f.flush()' "$1"
}
# Prints one JSON line: s_per_step first_step_s gen_share peak_mib mean_len first_loss.
summarise() {  # summarise trlx|trl NAME
  python3 - "$1" "$WORK/$2" "$STEPS" <<'PY'
import json, re, statistics as st, sys
side, base, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
peak = [int(l.split()[-1]) for l in open(base + ".time") if "Maximum resident set size" in l][0] / 1024
if side == "trlx":
    rows = [json.loads(l) for l in open(base + "/metrics.jsonl")]
    t0, ends = None, []
    for l in open(base + ".log"):
        t, _, text = l.partition(" ")
        if "training setup:" in text and t0 is None: t0 = float(t)
        if re.search(r"\] step \d+/\d+ ", text): ends.append(float(t) - t0)
    end = rows[-1]
    gen, runtime = end["generation_seconds"], end["train_runtime"]
else:
    rows = [json.loads(l) for l in open(base + "/log_history.jsonl")]
    b = [json.loads(l[6:]) for l in open(base + ".out") if l.startswith("bench ")][0]
    ends, gen, runtime = b["step_end_s"], b["generation_s"], b["train_runtime"]
assert len(ends) == steps, f"{side}: {len(ends)} step ends logged, expected {steps}"
steady = (ends[-1] - ends[0]) / (steps - 1)
lengths = [r["completions/mean_length"] for r in rows if "completions/mean_length" in r]
first_loss = [r["loss"] for r in rows if r.get("step") == 1 and "loss" in r][0]
print(json.dumps({"s_per_step": steady, "first_step_s": ends[0], "gen_share": gen / runtime, "peak_mib": peak,
                  "mean_len": st.mean(lengths), "first_loss": first_loss}))
PY
}
run_trlx() {
  rm -rf "$WORK/trlx"
  TRLX_PHASE_TIMES=${PHASES:-} /usr/bin/time -v -o "$WORK/trlx.time" "$TRLX" distill \
    --model_name_or_path "$WORK/student" --teacher_model_name_or_path "$WORK/teacher" \
    --dataset_name "$WORK/train.jsonl" --beta "$BETA" --temperature "$TEMPERATURE" \
    --per_device_train_batch_size "$BATCH" --gradient_accumulation_steps 1 --max_completion_length "$COMPLETION_LEN" \
    --max_steps "$STEPS" --learning_rate 1e-5 --logging_steps 1 --bf16 false --gradient_checkpointing false \
    --save_strategy no --report_to none --seed "$SEED" --shuffle_dataset false --output_dir "$WORK/trlx" \
    2>&1 >"$WORK/trlx.out" | stamp "$WORK/trlx.log" ||
    { echo "trlx failed:" >&2; tail -20 "$WORK/trlx.log" "$WORK/trlx.out" >&2; exit 1; }
  summarise trlx trlx
}
run_trl() {
  rm -rf "$WORK/trl"
  /usr/bin/time -v -o "$WORK/trl.time" python3 scripts/bench/distill_demo_trl.py "$WORK/student" "$WORK/teacher" \
    "$WORK/train.jsonl" "$WORK/trl" --steps "$STEPS" --batch "$BATCH" --completion_len "$COMPLETION_LEN" \
    --beta "$BETA" --temperature "$TEMPERATURE" --threads "$THREADS" --seed "$SEED" \
    >"$WORK/trl.out" 2>"$WORK/trl.err" || { echo "TRL failed:" >&2; tail -20 "$WORK/trl.err" >&2; exit 1; }
  summarise trl trl
}
echo "student hidden 256 x 2 layers (tied), teacher hidden 384 x 4 layers, vocab 151936, fp32; threads $THREADS," \
  "$STEPS steps of $BATCH completions of up to $COMPLETION_LEN tokens, beta $BETA, temperature $TEMPERATURE," \
  "$REPEATS repeats; load $(load) at start ($(uptime | sed 's/.*load average/load average/'))"
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
for ((i = 1; i <= REPEATS; i++)); do
  l0=$(load)
  if ((i % 2)); then a=$(run_trlx); l1=$(load); b=$(run_trl); else b=$(run_trl); l1=$(load); a=$(run_trlx); fi
  l2=$(load)
  echo "{\"trlx\": $a, \"trl\": $b, \"load\": [$l0, $l1, $l2]}" >>"$RESULTS"
  python3 -c "
import json, sys
r = json.loads(sys.argv[1]); a, b = r['trlx'], r['trl']
print(f\"repeat $i: s/step trlx {a['s_per_step']:.2f}, TRL {b['s_per_step']:.2f} (TRL/trlx {b['s_per_step'] / a['s_per_step']:.2f}x); \"
      f\"peak MiB trlx {a['peak_mib']:.0f}, TRL {b['peak_mib']:.0f} (trlx/TRL {a['peak_mib'] / b['peak_mib']:.2f}); \"
      f\"mean length trlx {a['mean_len']:.0f}, TRL {b['mean_len']:.0f}; load $l0 / $l1 / $l2\"
      + (' (BUSY? load above threads + 1: something else may have run)' if max(r['load'][1:]) > $THREADS + 1 else ''))" "$(tail -1 "$RESULTS")"
done
python3 - "$RESULTS" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def spread(xs, f="{:.2f}"):
    return f"{f.format(st.median(xs))} ({f.format(min(xs))}-{f.format(max(xs))})"
print(f"{'median (min-max) over ' + str(len(rows)) + ' repeats':<34}{'trlx':>22}{'TRL':>22}")
for key, name, f in [("s_per_step", "s/step, steps 2.. (steady)", "{:.2f}"), ("first_step_s", "first step s (warm-up)", "{:.2f}"),
                     ("gen_share", "share sampling completions", "{:.2f}"), ("peak_mib", "peak RSS MiB", "{:.0f}"),
                     ("mean_len", "completions/mean_length", "{:.0f}")]:
    print(f"{name:<34}{spread([r['trlx'][key] for r in rows], f):>22}{spread([r['trl'][key] for r in rows], f):>22}")
print(f"{'first-step loss (repeat 1)':<34}{rows[0]['trlx']['first_loss']:>22.5f}{rows[0]['trl']['first_loss']:>22.5f}")
speed = [r["trl"]["s_per_step"] / r["trlx"]["s_per_step"] for r in rows]
mem = [r["trlx"]["peak_mib"] / r["trl"]["peak_mib"] for r in rows]
print(f"speed TRL s/step / trlx s/step: {spread(speed)}x (aim >= 1.5)")
print(f"peak RSS trlx / TRL: {spread(mem)} (aim <= 0.5)")
loads = [x for r in rows for x in r["load"]]
print(f"load (1-min average) {rows[0]['load'][0]:.2f} at start, {rows[-1]['load'][-1]:.2f} at end, range {min(loads):.2f}-{max(loads):.2f}")
PY
echo "load at end: $(uptime | sed 's/.*load average/load average/')"
if [[ -n ${PHASES:-} ]]; then grep -A20 "TRLX_PHASE_TIMES" "$WORK/trlx.log" | cut -d' ' -f2- || true; fi

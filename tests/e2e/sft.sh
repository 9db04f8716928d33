#!/usr/bin/env bash
# trlx sft end to end on the shipped quickstart: a short run, its outputs, a
# SIGTERM mid-run (checkpoint, non-zero exit) and the resume, bad input.
# Usage: sft.sh <path to trlx> <source dir>
source "$(dirname "$0")/lib.sh"

# A short run of the shipped config.
"$TRLX" sft --config configs/sft.yaml --max_steps 20 --logging_steps 5 --save_steps 10 --eval_steps 10 \
  --output_dir "$TMP/run" >"$TMP/run.log" 2>&1
rc=$?
check "[ $rc = 0 ]"
check "grep -q 'training setup' '$TMP/run.log'"
check "[ -f '$TMP/run/metrics.jsonl' ] && [ -f '$TMP/run/model.safetensors' ] && [ -f '$TMP/run/config.json' ]"
check "[ -f '$TMP/run/tokenizer.json' ] && [ -f '$TMP/run/checkpoint-20/trainer_state.json' ] && [ -f '$TMP/run/checkpoint-20/optimizer.pt' ]"
check "grep -q '\"eval_loss\"' '$TMP/run/metrics.jsonl'"
for k in loss grad_norm learning_rate mean_token_accuracy entropy num_tokens epoch; do
  check "grep -q '\"$k\"' '$TMP/run/metrics.jsonl'"
done
# The loss falls: first logged training loss above the last.
first=$(grep '"loss"' "$TMP/run/metrics.jsonl" | grep -v eval_ | head -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
last=$(grep '"loss"' "$TMP/run/metrics.jsonl" | grep -v eval_ | tail -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
check "awk 'BEGIN{exit !($first > $last + 0.5)}'"
# The trained model generates.
out=$("$TRLX" generate --model "$TMP/run" --prompt "What is 3 plus 4?" --max_new_tokens 4 2>/dev/null)
check "[ -n \"\$out\" ]"

# TRLX_PHASE_TIMES=1: where the steps' time went, phase by phase, the
# phases adding up to the total; without it, no table.
check "! grep -q 'TRLX_PHASE_TIMES' '$TMP/run.log'"
TRLX_PHASE_TIMES=1 "$TRLX" sft --config configs/sft.yaml --max_steps 4 --eval_strategy no --save_strategy no \
  --output_dir "$TMP/phases" >"$TMP/phases.log" 2>&1
check "[ $? = 0 ]"
for p in "forward and loss" "backward and gradient reduction" "optimizer step" "gradient norm and clipping"; do
  check "grep -q '  $p.* ms/step' '$TMP/phases.log'"
done
check "python3 - '$TMP/phases.log' <<'PY'
import re, sys
text = open(sys.argv[1]).read()
total = float(re.search(r\"where the 4 steps' ([0-9.]+) s went\", text).group(1))
parts = [float(x) for x in re.findall(r'  [a-zA-Z].*? ([0-9.]+) s +[0-9.]+ ms/step', text)]
sys.exit(0 if len(parts) >= 6 and abs(sum(parts) - total) <= 0.01 + 0.01 * total else 1)
PY"

# SIGTERM mid-run: finish the step, save, exit non-zero; then resume to the end.
"$TRLX" sft --config configs/sft.yaml --max_steps 60 --logging_steps 1 --save_steps 1000 --eval_strategy no \
  --output_dir "$TMP/term" >"$TMP/term.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ -f "$TMP/term/metrics.jsonl" ] && [ "$(wc -l <"$TMP/term/metrics.jsonl")" -ge 3 ] && break
  sleep 0.1
done
kill -TERM $pid
wait $pid
rc=$?
check "[ $rc != 0 ]"
check "grep -q 'stop requested' '$TMP/term.log'"
ckpt=$(ls -d "$TMP"/term/checkpoint-* 2>/dev/null | head -1)
check "[ -n '$ckpt' ] && [ -f '$ckpt/trainer_state.json' ]"
"$TRLX" sft --config configs/sft.yaml --max_steps 60 --logging_steps 30 --save_steps 1000 --eval_strategy no \
  --output_dir "$TMP/term" --resume_from_checkpoint latest >"$TMP/resume.log" 2>&1
rc=$?
check "[ $rc = 0 ]"
check "grep -q 'resumed from' '$TMP/resume.log'"
check "grep -q 'step 60/60' '$TMP/resume.log'"
# The stopped run's summary row is dropped on resume: one summary, the last run's.
check "[ \"\$(grep -c train_runtime '$TMP/term/metrics.jsonl')\" = 1 ]"

# A file-size limit (ulimit -f, 64 KiB) is a full disk: the checkpoint write
# fails with exit 1 and leaves no half checkpoint, instead of SIGXFSZ killing
# the process mid-write.
( ulimit -f 64; exec "$TRLX" sft --config configs/sft.yaml --max_steps 2 --save_steps 1 --eval_strategy no \
    --logging_steps 1 --output_dir "$TMP/fsize" >"$TMP/fsize.log" 2>&1 )
rc=$?
check "[ $rc = 1 ] && ! ls -d '$TMP'/fsize/.checkpoint-* >/dev/null 2>&1 && [ ! -d '$TMP/fsize/checkpoint-1' ]" ||
  { echo "rc $rc"; tail -5 "$TMP/fsize.log"; }

# Bad input: exit 2 with the file and line, nothing written.
mkdir -p "$TMP/baddata"
echo '{"question": "hi", "answer": "there"}' >"$TMP/baddata/train.jsonl"
"$TRLX" sft --config configs/sft.yaml --dataset_name "$TMP/baddata" --output_dir "$TMP/badrun" >"$TMP/bad.log" 2>&1
rc=$?
check "[ $rc = 2 ]"
check "grep -q 'train.jsonl:1' '$TMP/bad.log'"
check "[ ! -e '$TMP/badrun/model.safetensors' ]"
# A chat template that raises on one row names that row (and the template).
cp -r examples/tiny-model "$TMP/raising"
python3 - "$TMP/raising" <<'PY'
import json, sys
p = sys.argv[1] + "/tokenizer_config.json"
c = json.load(open(p))
c["chat_template"] = ("{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tool turns') }}"
                      "{% endif %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}")
json.dump(c, open(p, "w"))
with open(sys.argv[1] + "/train.jsonl", "w") as f:
    f.write(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}) + "\n")
    f.write(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"},
                                     {"role": "assistant", "content": "yo"}]}) + "\n")
PY
"$TRLX" sft --model_name_or_path "$TMP/raising" --dataset_name "$TMP/raising/train.jsonl" --max_steps 1 \
  --output_dir "$TMP/raising_run" >"$TMP/raise.log" 2>&1
rc=$?
check "[ $rc = 2 ] && grep -q 'train.jsonl:2: .*chat template raised an error at line 1: no tool turns' '$TMP/raise.log'" ||
  cat "$TMP/raise.log"
"$TRLX" sft --config configs/sft.yaml --resume_from_checkpoint "$TMP/none" --output_dir "$TMP/r2" >"$TMP/bad2.log" 2>&1
rc=$?
check "[ $rc = 2 ]"
check "grep -q 'does not exist' '$TMP/bad2.log'"

# One run per output_dir: a second run on a directory a run is writing stops
# at once (exit 2) naming the first; once the first is killed (-9), the lock
# is gone with it and the directory can be used again.
"$TRLX" sft --config configs/sft.yaml --max_steps 100000 --logging_steps 1 --save_strategy no --eval_strategy no \
  --output_dir "$TMP/shared" >"$TMP/first.log" 2>&1 &
first=$!
for _ in $(seq 1 600); do
  [ -f "$TMP/shared/metrics.jsonl" ] && break
  sleep 0.1
done
"$TRLX" sft --config configs/sft.yaml --max_steps 2 --output_dir "$TMP/shared" >"$TMP/second.log" 2>&1
rc=$?
check "[ $rc = 2 ] && grep -q 'is in use by another trlx run (pid $first on' '$TMP/second.log'" || cat "$TMP/second.log"
check "! grep -q 'step 1/' '$TMP/second.log'"
kill -9 $first
wait $first 2>/dev/null
"$TRLX" sft --config configs/sft.yaml --max_steps 2 --save_strategy no --eval_strategy no --output_dir "$TMP/shared" \
  >"$TMP/third.log" 2>&1
check "[ $? = 0 ]" || cat "$TMP/third.log"

# preview: what SFT trains on, loss tokens marked, JSON lines, warnings.
"$TRLX" preview sft --config configs/sft.yaml --num_examples 2 >"$TMP/pv.txt" 2>&1
rc=$?
check "[ $rc = 0 ]"
check "grep -q '^\\[8 plus 36 is 44.<|im_end|>\\]$' '$TMP/pv.txt'"
check "grep -q '2 of 2000 training examples shown' '$TMP/pv.txt'"
"$TRLX" preview --config configs/sft.yaml --num_examples 3 --json --max_length 12 >"$TMP/pv.jsonl" 2>/dev/null
check "[ \$(wc -l <'$TMP/pv.jsonl') = 3 ]"
check "grep -q '\"truncated\":true' '$TMP/pv.jsonl' && grep -q 'truncated to max_length 12' '$TMP/pv.jsonl'"
check "grep -q '\"loss\":true' '$TMP/pv.jsonl' && grep -q '\"loss\":false' '$TMP/pv.jsonl'"
"$TRLX" preview rloo --config configs/rloo.yaml >"$TMP/pv2.txt" 2>&1
check "[ $? = 1 ] && grep -q 'not built for the rloo trainer; it shows sft, dpo, kto, reward, cpo, orpo' '$TMP/pv2.txt'"

# save_strategy best with load_best_model_at_end, as transformers: a
# checkpoint at each evaluation that sets a new best, the final model the
# best one's, save_total_limit keeping only it at the end. greater_is_better
# on the loss makes the first evaluation the best (the loss falls).
"$TRLX" sft --config configs/sft.yaml --max_steps 6 --eval_strategy steps --eval_steps 2 --logging_steps 2 \
  --save_strategy best --load_best_model_at_end true --metric_for_best_model loss --greater_is_better true \
  --save_total_limit 1 --output_dir "$TMP/best" >"$TMP/best.log" 2>&1
check "[ $? = 0 ] && grep -q 'loading the best model from .*checkpoint-2' '$TMP/best.log'" || tail -5 "$TMP/best.log"
check "[ \"\$(ls -d '$TMP'/best/checkpoint-* | xargs -n1 basename)\" = checkpoint-2 ]"
check "python3 - '$TMP/best' <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(d + '/checkpoint-2/trainer_state.json'))
assert s['best_global_step'] == 2 and s['best_model_checkpoint'].endswith('checkpoint-2'), s
losses = [json.loads(l)['eval_loss'] for l in open(d + '/metrics.jsonl') if 'eval_loss' in l]
assert len(losses) == 3 and losses[0] == max(losses) and abs(s['best_metric'] - losses[0]) < 1e-9, losses
PY"
check "cmp -s '$TMP/best/model.safetensors' '$TMP/best/checkpoint-2/model.safetensors'"
# The same on 2 ranks under ZeRO-3: every rank saves, finds and loads the
# best checkpoint (collectives), and the final model is checkpoint-2's.
timeout 300 "$TRLX" launch --nproc_per_node 2 -- "$TRLX" sft --config configs/sft.yaml --max_steps 6 \
  --eval_strategy steps --eval_steps 2 --logging_steps 2 --save_strategy best --load_best_model_at_end true \
  --greater_is_better true --save_total_limit 1 --accelerate_config zero3 --output_dir "$TMP/best3" \
  >"$TMP/best3.log" 2>&1
check "[ $? = 0 ] && grep -q 'loading the best model from .*checkpoint-2' '$TMP/best3.log'" || tail -5 "$TMP/best3.log"
check "cmp -s '$TMP/best3/model.safetensors' '$TMP/best3/checkpoint-2/model.safetensors'"
# Without an evaluation there is no best.
"$TRLX" sft --config configs/sft.yaml --max_steps 2 --eval_strategy no --save_strategy best \
  --output_dir "$TMP/nobest" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'found by evaluating' '$TMP/o'" || cat "$TMP/o"

# Logger programs (report_to entries) receive the run as JSON lines: the
# start with the resolved config, every metrics row as metrics.jsonl has it,
# the end. One that dies is reported once and the run goes on, every row in
# metrics.jsonl.
cat >"$TMP/logger.py" <<'PY'
import sys
with open(sys.argv[1], "w") as out:
    for n, line in enumerate(sys.stdin):
        out.write(line)
        out.flush()
        if len(sys.argv) > 2 and n + 1 == int(sys.argv[2]):
            sys.stderr.write("logger: giving up\n")
            sys.exit(3)
PY
"$TRLX" sft --config configs/sft.yaml --max_steps 6 --logging_steps 2 --eval_strategy steps --eval_steps 3 \
  --save_strategy no --run_name demo --output_dir "$TMP/lg" \
  --report_to '{"command": "python3 '"$TMP"'/logger.py '"$TMP"'/lines.jsonl", "name": "file"}' >"$TMP/lg.log" 2>&1
check "[ $? = 0 ] && grep -q \"logger program 'file' exited with status 0\" '$TMP/lg.log'" || tail -5 "$TMP/lg.log"
check "python3 - '$TMP/lines.jsonl' '$TMP/lg/metrics.jsonl' <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
rows = [json.loads(l) for l in open(sys.argv[2])]
assert lines[0]['event'] == 'start' and lines[0]['trainer'] == 'sft' and lines[0]['run_name'] == 'demo', lines[0]
assert lines[0]['config']['max_steps'] == 6 and lines[0]['config']['learning_rate'] == 1e-3, lines[0]['config']
assert lines[-1] == {'event': 'end', 'step': 6, 'interrupted': False}, lines[-1]
logged = [dict(l['metrics'], step=l['step']) for l in lines[1:-1]]
assert all(l['event'] == 'log' for l in lines[1:-1])
assert logged == rows, (logged, rows)
PY"
"$TRLX" sft --config configs/sft.yaml --max_steps 6 --logging_steps 1 --eval_strategy no --save_strategy no \
  --output_dir "$TMP/lg2" --report_to '{"command": "python3 '"$TMP"'/logger.py '"$TMP"'/lines2.jsonl 2"}' \
  >"$TMP/lg2.log" 2>&1
check "[ $? = 0 ] && [ \$(grep -c 'goes on without this logger' '$TMP/lg2.log') = 1 ] && grep -q 'logger: giving up' '$TMP/lg2.log'" ||
  tail -5 "$TMP/lg2.log"
check "[ \$(grep -c '\"loss\"' '$TMP/lg2/metrics.jsonl') = 6 ]"
# report_to: wandb alone says how to reach it.
"$TRLX" sft --config configs/sft.yaml --report_to wandb --output_dir "$TMP/wb" >"$TMP/o" 2>&1
check "[ $? = 2 ] && grep -q 'examples/loggers/wandb_logger.py' '$TMP/o'" || cat "$TMP/o"

# report_to: trackio writes trackio's local database itself. Where trackio is
# installed (a development machine) its own storage reads the run back: one
# row per logged step at trackio's step counter, keys renamed as
# transformers' TrackioCallback renames them; trackio writes a run of its
# own into the database trlx created; a second run of the same name goes on
# from the last step; and trackio upgrades the database to its schema.
if python3 -c 'import trackio' 2>/dev/null; then
  for run in 1 2; do
    if [ $run = 2 ]; then  # trackio itself writes into the database trlx created
      TRACKIO_DIR="$TMP/trackio" python3 -c "
import trackio
trackio.init(project='trlx-test', name='from-python')
trackio.log({'x': 1.0})
trackio.finish()" >"$TMP/tk_py.log" 2>&1
      check "[ $? = 0 ]" || tail -5 "$TMP/tk_py.log"
    fi
    TRACKIO_DIR="$TMP/trackio" "$TRLX" sft --config configs/sft.yaml --max_steps 4 --logging_steps 2 \
      --eval_strategy no --save_strategy no --run_name tk --project trlx-test --output_dir "$TMP/tk$run" \
      --report_to trackio >"$TMP/tk.log" 2>&1
    rc=$?
    from=0
    [ $run = 2 ] && from=$(wc -l <"$TMP/tk1/metrics.jsonl")
    check "[ $rc = 0 ] && grep -q \"trackio: project 'trlx-test', run 'tk' from step $from\" '$TMP/tk.log'" ||
      tail -5 "$TMP/tk.log"
  done
  check "TRACKIO_DIR='$TMP/trackio' python3 - '$TMP/tk1/metrics.jsonl' '$TMP/tk2/metrics.jsonl' <<'PY'
import json, sys, trackio
from trackio.sqlite_storage import SQLiteStorage
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f)]
def logged():
    return SQLiteStorage.get_logs('trlx-test', 'tk')
want = [(i, r['step'], r.get('loss'), r.get('learning_rate')) for i, r in enumerate(rows)]
got = [(l['step'], l['train/global_step'], l.get('train/loss'), l.get('train/learning_rate')) for l in logged()]
assert sum(w[2] is not None for w in want) == 4 and got == want, (got, want)
assert not any('train/train_runtime' in l for l in logged())
assert sorted(SQLiteStorage.get_runs('trlx-test')) == ['from-python', 'tk'], SQLiteStorage.get_runs('trlx-test')
config = SQLiteStorage.get_run_config('trlx-test', 'tk')
assert config['max_steps'] == 4 and config['project'] == 'trlx-test', config
SQLiteStorage.init_db('trlx-test')
import sqlite3
db = sqlite3.connect(str(SQLiteStorage.get_project_db_path('trlx-test')))
assert db.execute('PRAGMA user_version').fetchone()[0] >= 2
assert [(l['step'], l.get('train/loss')) for l in logged()] == [(w[0], w[2]) for w in want]
PY"
else
  echo "SKIPPED: report_to trackio read back (pip install trackio to run it)"
fi
if python3 -c 'import wandb' 2>/dev/null; then
  ( cd "$TMP" && WANDB_MODE=offline WANDB_SILENT=true "$TRLX" sft --config "$SRC/configs/sft.yaml" \
      --model_name_or_path "$SRC/examples/tiny-model" --dataset_name "$SRC/examples/data/sft" --max_steps 2 \
      --logging_steps 1 --eval_strategy no --save_strategy no --output_dir "$TMP/wb" \
      --report_to '{"command": "python3 '"$SRC"'/examples/loggers/wandb_logger.py", "timeout_seconds": 120}' ) \
    >"$TMP/wb.log" 2>&1
  check "[ $? = 0 ] && ls -d '$TMP'/wandb/offline-run-*/run-*.wandb >/dev/null 2>&1" || tail -5 "$TMP/wb.log"
else
  echo "SKIPPED: wandb logger (pip install wandb to run it)"
fi

finish

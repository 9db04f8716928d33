#!/usr/bin/env bash
# Training speed of each offline trainer, trlx against TRL's trainer of the
# same name, same run, same threads, same ~25M-parameter Qwen2-shaped model
# and data, full fine-tune and LoRA, with model FLOPs utilisation.
#
#   TRAINERS="dpo kto reward cpo orpo sft" SEQ=short|long scripts/bench/bench_trainers.sh
#
# Speed is the ratio of TRL's training seconds to trlx's for the same steps
# over the same rows (so the same tokens); tokens/s divides trlx's count of
# trained tokens (non-pad tokens through the policy's forward and backward)
# by each side's seconds. The machine this runs on is often shared, and a
# 2-core step slows several times when another job takes a core, so each
# repeat runs both sides back to back, alternating which goes first, and the
# ratio is taken per repeat; the summary gives the median, the spread and the
# load average around every run.
#
# Model FLOPs utilisation (full fine-tune rows): 6 x parameters x trained
# tokens / seconds, against the fp32 matrix-multiply peak measured at the
# start of the same run with the same threads (scripts/bench/matmul_peak.py).
# Reference and KL forwards (DPO, KTO) are not counted, so it understates
# their work; a prompt that trlx runs once for a pair (or a KTO row and its
# KL row) counts once per row, as TRL computes it, and so does the last
# layer's work at prompt tokens, which trlx skips (only the hidden states
# that predict a target are computed there): both overstate trlx's;
# LoRA computes no weight gradients, so 6N would overstate it and it is not
# printed there.
#
# Rows: SEQ=short is the quickstart's arithmetic (8 pairs or 16 KTO rows, or
# 8 SFT rows, per step); SEQ=long puts ~1000 tokens in a row (2 pairs, 4 KTO
# rows or 2 SFT rows per step).
#
# PHASES=1 also prints where each run's time went, phase by phase: trlx's
# own clock (TRLX_PHASE_TIMES=1) and, for TRL, timers around the Trainer's
# batch, compute_loss, backward, clipping and optimizer calls.
#
# MODEL=moe trains a Qwen3-MoE-shaped model instead (~57M parameters, 16
# experts of which 4 per token, ~19M active); its MFU counts the active
# parameters only. TRL runs transformers' default experts implementation
# (grouped_mm in transformers 5, the kernel trlx calls too), or the one
# TRL_EXPERTS names (eager: transformers' loop over experts).
#
# Needs python3 with trl and peft (dev time). Environment: TRAINERS (default
# "dpo kto reward cpo orpo"), MODES (default "full lora"), THREADS (default
# 2), STEPS (default 10), REPEATS (default 3), FIRST_REPEAT (default 1: the
# number of the first repeat, whose parity says which side goes first, to
# continue an earlier run's repeats), SEQ (default short),
# BUILD_DIR (default build), NO_BUILD=1 to skip the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
STEPS=${STEPS:-10}
REPEATS=${REPEATS:-3}
SEQ=${SEQ:-short}
TRAINERS=${TRAINERS:-dpo kto reward cpo orpo}
MODES=${MODES:-full lora}
TRLX="$BUILD_DIR/apps/trlx/trlx"
[[ -n ${NO_BUILD:-} ]] || cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=$THREADS TRL_EXPERIMENTAL_SILENCE=1
if [[ ${MODEL:-dense} == moe ]]; then
  # ~57M parameters, ~19M active: 16 experts of width 256, 4 per token, in every layer.
  "$TRLX" init-model --arch qwen3_moe --hidden_size 512 --num_layers 8 --num_heads 8 --num_kv_heads 4 \
    --num_experts 16 --num_experts_per_tok 4 --moe_intermediate_size 256 --tokenizer examples/tiny-model \
    --tie_word_embeddings --out "$WORK/m25" >/dev/null
else
  "$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
    --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --out "$WORK/m25" >/dev/null
fi
# Parameters a token runs through (MFU): all, less the experts it is not routed to.
PARAMS=$(python3 - "$WORK/m25" <<'PY'
import json, math, struct, sys
with open(sys.argv[1] + "/model.safetensors", "rb") as f:
    h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
c = json.load(open(sys.argv[1] + "/config.json"))
experts = c.get("num_experts") or c.get("num_local_experts") or 1
share = c.get("num_experts_per_tok", 1) / experts
print(round(sum(math.prod(v["shape"]) * (share if ".experts." in k else 1) for k, v in h.items() if k != "__metadata__")))
PY
)
if [[ $SEQ == long ]]; then PAIRS=2 MAX_LENGTH=1024; else PAIRS=8 MAX_LENGTH=128; fi
ROWS=$((STEPS * PAIRS))
# Preference pairs; KTO gets each pair as a desirable and an undesirable row,
# SFT the prompt and the chosen answer.
python3 - examples/data/dpo/train.jsonl "$WORK" "$ROWS" "$SEQ" <<'PY'
import json, random, sys
random.seed(0)
src, work, n, seq = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(src)]
pairs = []
for i in range(n):
    r = dict(rows[i % len(rows)])
    if seq == "long":  # earlier questions and answers as context, longer answers: ~1000 tokens a row
        ctx = " ".join(rows[(i + j) % len(rows)]["prompt"].strip() + " " + rows[(i + j) % len(rows)]["chosen"]
                       for j in range(random.randint(36, 42)))
        r = {"prompt": ctx + "\n" + r["prompt"], "chosen": (r["chosen"] + " ") * random.randint(4, 6),
             "rejected": (r["rejected"] + " ") * random.randint(4, 6)}
    pairs.append(r)
with open(work + "/pairs.jsonl", "w") as f:
    for r in pairs: f.write(json.dumps(r) + "\n")
with open(work + "/kto.jsonl", "w") as f:
    for r in pairs:
        f.write(json.dumps({"prompt": r["prompt"], "completion": r["chosen"], "label": True}) + "\n")
        f.write(json.dumps({"prompt": r["prompt"], "completion": r["rejected"], "label": False}) + "\n")
with open(work + "/sft.jsonl", "w") as f:
    for r in pairs: f.write(json.dumps({"prompt": r["prompt"], "completion": r["chosen"]}) + "\n")
PY
PEAK=$(python3 scripts/bench/matmul_peak.py "$THREADS")

# Per trainer: its rows, rows per step, and the settings both sides share
# (the trlx config file's values where TRL's defaults differ).
data_of() { case $1 in kto) echo "$WORK/kto.jsonl" ;; sft) echo "$WORK/sft.jsonl" ;; *) echo "$WORK/pairs.jsonl" ;; esac; }
batch_of() { case $1 in kto) echo $((2 * PAIRS)) ;; *) echo "$PAIRS" ;; esac; }
trlx_flags() {
  case $1 in
    kto) echo "--desirable_weight 1.0 --undesirable_weight 1.0" ;;
    reward) echo "--center_rewards_coefficient null" ;;
    sft) echo "--packing false" ;;
  esac
}
load() { cut -d' ' -f1 /proc/loadavg; }

run_trlx() {  # $1 trainer, $2 mode; prints "seconds tokens"
  local out="$WORK/trlx_$1_$2" lora=()
  [[ $2 == lora ]] && lora=(--use_peft true --lora_r 16 --lora_alpha 32 --lora_dropout 0.05 --lora_target_modules q_proj v_proj)
  rm -rf "$out"
  # shellcheck disable=SC2046
  TRLX_PHASE_TIMES=${PHASES:-0} "$TRLX" "$1" --config "configs/$1.yaml" --model_name_or_path "$WORK/m25" --dataset_name "$(data_of "$1")" \
    --per_device_train_batch_size "$(batch_of "$1")" --gradient_accumulation_steps 1 --max_length "$MAX_LENGTH" \
    --learning_rate 1e-5 --lr_scheduler_type linear --max_steps "$STEPS" --num_train_epochs 1 --logging_steps 1 \
    --save_strategy no --eval_strategy no --bf16 false --gradient_checkpointing false --output_dir "$out" \
    $(trlx_flags "$1") ${lora[@]+"${lora[@]}"} >"$out.log" 2>&1 ||
    { echo "trlx $1 $2 failed:" >&2; tail -20 "$out.log" >&2; exit 1; }
  python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(rows[-1]["train_runtime"], max(r.get("num_tokens", 0) for r in rows))
PY
}

run_trl() {  # $1 trainer, $2 mode; prints seconds
  local out="$WORK/trl_$1_$2"
  python3 - "$1" "$2" "$WORK" "$(data_of "$1")" "$(batch_of "$1")" "$STEPS" "$THREADS" "$MAX_LENGTH" \
    "${PHASES:-0}" >"$out.out" 2>"$out.err" <<'PY'
import sys, time
import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
trainer, mode, work, data, batch, steps, threads, max_length, phase_times = sys.argv[1:9] + [sys.argv[9] == "1"]
torch.set_num_threads(int(threads))
if trainer == "dpo":
    from trl import DPOConfig as Config, DPOTrainer as Trainer
    extra = dict(beta=0.1)
elif trainer == "kto":
    from trl import KTOConfig as Config, KTOTrainer as Trainer
    extra = dict(beta=0.1, desirable_weight=1.0, undesirable_weight=1.0)
elif trainer == "reward":
    from trl import RewardConfig as Config, RewardTrainer as Trainer
    extra = dict(center_rewards_coefficient=None)
elif trainer == "cpo":
    from trl.experimental.cpo import CPOConfig as Config, CPOTrainer as Trainer
    extra = dict(beta=0.1, loss_type="sigmoid", cpo_alpha=1.0)
elif trainer == "orpo":
    from trl.experimental.orpo import ORPOConfig as Config, ORPOTrainer as Trainer
    extra = dict(beta=0.1)
elif trainer == "sft":
    from trl import SFTConfig as Config, SFTTrainer as Trainer
    extra = dict(packing=False)
tok = AutoTokenizer.from_pretrained(work + "/m25")
if trainer == "reward":
    model = AutoModelForSequenceClassification.from_pretrained(work + "/m25", num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id
else:
    import os  # TRL_EXPERTS: an experts_implementation for an MoE model (default: transformers')
    kw = {"experts_implementation": os.environ["TRL_EXPERTS"]} if os.environ.get("TRL_EXPERTS") else {}
    model = AutoModelForCausalLM.from_pretrained(work + "/m25", dtype=torch.float32, **kw)
peft_config = None
if mode == "lora":
    from peft import LoraConfig
    peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"],
                             task_type="SEQ_CLS" if trainer == "reward" else "CAUSAL_LM")
ds = load_dataset("json", data_files=data, split="train")
args = Config(output_dir=work + "/trl_out", per_device_train_batch_size=int(batch), gradient_accumulation_steps=1,
              learning_rate=1e-5, lr_scheduler_type="linear", max_steps=int(steps), bf16=False, use_cpu=True,
              gradient_checkpointing=False, report_to="none", save_strategy="no", eval_strategy="no", logging_steps=1,
              max_length=int(max_length), dataloader_num_workers=0, **extra)
tr = Trainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=peft_config)
phases = {}
if phase_times:  # wall seconds per phase, timed around the Trainer's own calls
    def timed(name, fn):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - t
        return run
    tr.get_batch_samples = timed("batches: collation", tr.get_batch_samples)
    tr.compute_loss = timed("forward and loss (with reference forwards)", tr.compute_loss)
    tr.accelerator.backward = timed("backward", tr.accelerator.backward)
    tr.accelerator.clip_grad_norm_ = timed("gradient norm and clipping", tr.accelerator.clip_grad_norm_)
    from transformers import TrainerCallback
    class WrapOptimizer(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kw):
            optimizer.step = timed("optimizer step", optimizer.step)
    tr.add_callback(WrapOptimizer())
t1 = time.time(); tr.train(); dt = time.time() - t1
print("train_s", dt)
if phase_times:
    phases["everything else: metrics, logging, scheduler, zero_grad"] = dt - sum(phases.values())
    print(f"TRL: where the {steps} steps' {dt:.2f} s went:")
    for k, v in phases.items():
        print(f"  {k:<56} {v:9.3f} s  {1e3 * v / int(steps):8.1f} ms/step  {100 * v / dt:5.1f}%")
PY
  grep -q '^train_s ' "$out.out" || { echo "TRL $1 $2 failed:" >&2; tail -20 "$out.err" >&2; exit 1; }
  awk '/^train_s /{print $2}' "$out.out"
}

RESULTS="$WORK/results.txt"
: >"$RESULTS"
echo "threads $THREADS, $STEPS steps, $SEQ rows (max_length $MAX_LENGTH), model ${MODEL:-dense}, $PARAMS (active) parameters, fp32 matmul peak $PEAK GFLOP/s"
FIRST_REPEAT=${FIRST_REPEAT:-1}
for ((i = FIRST_REPEAT; i < FIRST_REPEAT + REPEATS; i++)); do
  for t in $TRAINERS; do
    for mode in $MODES; do
      l0=$(load)
      if ((i % 2)); then
        read -r a tok < <(run_trlx "$t" "$mode"); l1=$(load); b=$(run_trl "$t" "$mode")
      else
        b=$(run_trl "$t" "$mode"); l1=$(load); read -r a tok < <(run_trlx "$t" "$mode")
      fi
      l2=$(load)
      echo "$t $mode $i $a $b $tok $l0 $l1 $l2" >>"$RESULTS"
      if [[ ${PHASES:-0} == 1 ]]; then
        sed -n 's/^.*\] //; /where the .* steps/,/^[^ ]/p' "$WORK/trlx_${t}_$mode.log" | grep -v '^done' | sed 's/^/trlx /'
        sed -n '/^TRL: where/,$p' "$WORK/trl_${t}_$mode.out"
      fi
      python3 -c "import sys; a,b,t=map(float,sys.argv[1:4]); print(f'$t $mode repeat $i: trlx {a:.2f} s, TRL {b:.2f} s, ratio {b/a:.2f}x, {t:.0f} tokens (load $l0 / $l1 / $l2)')" "$a" "$b" "$tok"
    done
  done
done
python3 - "$RESULTS" "$PARAMS" "$PEAK" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
params, peak = float(sys.argv[2]), float(sys.argv[3])
print(f"{'trainer':8}{'mode':6}{'trlx/TRL speed':>28}{'trlx tok/s':>12}{'TRL tok/s':>11}{'MFU trlx':>10}{'MFU TRL':>9}  load")
for t in dict.fromkeys(r[0] for r in rows):
    for mode in dict.fromkeys(r[1] for r in rows if r[0] == t):
        r = [(float(a), float(b), float(n), [float(x) for x in ls]) for tt, m, _, a, b, n, *ls in rows if (tt, m) == (t, mode)]
        ratios = [b / a for a, b, _, _ in r]
        ta, tb = [n / a for a, _, n, _ in r], [n / b for _, b, n, _ in r]
        mfu = lambda tps: f"{6 * params * tps / (peak * 1e9) * 100:.0f}%" if mode == "full" else "-"
        loads = [x for *_, ls in r for x in ls]
        print(f"{t:8}{mode:6}{st.median(ratios):>8.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
              f"{st.median(ta):>10.0f}{st.median(tb):>11.0f}{mfu(st.median(ta)):>10}{mfu(st.median(tb)):>9}  "
              f"{min(loads):.1f}-{max(loads):.1f}")
PY

#!/usr/bin/env bash
# QLoRA SFT on CPU, same run, same threads, same model and data: trlx with a
# 4-bit (nf4) base against trlx LoRA on the unquantized base and against TRL's
# SFTTrainer + PEFT + bitsandbytes QLoRA:
#  - training tokens/s (non-pad tokens through forward+backward+step)
#  - peak resident memory of each process
#  - the bytes the base's linear weights keep (trlx's QLoRA line), against
#    the same weights in 16 bits
# The model is the ~25M-parameter Qwen2-shaped model of bench_sft.sh (SIZE
# 25m) or a Qwen2.5-0.5B-shaped one (SIZE 0.5b: minutes a step on 2 cores).
# LoRA r 16, alpha 32, all-linear, gradient checkpointing on (TRL's default).
# DTYPE bf16 (default: QLoRA's usual bnb_4bit_compute_dtype, with bf16
# mixed precision; fast where the CPU has AMX or AVX512-BF16) or fp32: the
# dtype the base is loaded and computed in, on every side.
# The three sides alternate over REPEATS. Needs python3 with trl, peft and
# bitsandbytes (dev time). THREADS (default 2), STEPS, REPEATS.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
SIZE=${SIZE:-25m}
DTYPE=${DTYPE:-bf16}
case $DTYPE in
  bf16) PRECISION="--dtype bfloat16 --bf16 true" ;;
  fp32) PRECISION="--dtype float32 --bf16 false" ;;
  *) echo "DTYPE must be bf16 or fp32, got $DTYPE" >&2; exit 2 ;;
esac
TRLX="$BUILD_DIR/apps/trlx/trlx"
cmake --build "$BUILD_DIR" --target trlx -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
case $SIZE in
  25m)
    STEPS=${STEPS:-8} REPEATS=${REPEATS:-3} BATCH=8 MAXLEN=128
    "$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1536 --num_layers 8 --num_heads 8 \
      --num_kv_heads 4 --tokenizer examples/tiny-model --tie_word_embeddings --out "$WORK/model" >/dev/null ;;
  0.5b)
    STEPS=${STEPS:-2} REPEATS=${REPEATS:-1} BATCH=4 MAXLEN=256
    "$TRLX" init-model --arch qwen2 --hidden_size 896 --intermediate_size 4864 --num_layers 24 --num_heads 14 \
      --num_kv_heads 2 --vocab_size 151936 --max_position_embeddings 32768 --tokenizer examples/tiny-model \
      --tie_word_embeddings --out "$WORK/model" >/dev/null ;;
  *) echo "SIZE must be 25m or 0.5b, got $SIZE" >&2; exit 2 ;;
esac
python3 - "$WORK/train.jsonl" $((STEPS * BATCH)) <<'PY'
import json, random, sys
random.seed(0)
words = "the of and to in is was for on that with as by at from his her an which be this are were had not".split()
with open(sys.argv[1], "w") as f:
    for _ in range(int(sys.argv[2])):
        f.write(json.dumps({"text": " ".join(random.choices(words, k=120))}) + "\n")
PY
TOKENS=$(python3 - "$WORK/model" "$WORK/train.jsonl" "$MAXLEN" <<'PY' 2>/dev/null
import json, sys
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[1])
print(sum(min(int(sys.argv[3]), len(t(json.loads(l)["text"] + t.eos_token)["input_ids"])) for l in open(sys.argv[2])))
PY
)
peak_mib() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "w") as out, open(sys.argv[1] + ".err", "w") as err:
    rc = subprocess.call(sys.argv[2:], stdout=out, stderr=err)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
sys.exit(rc)
PY
}
export OMP_NUM_THREADS=$THREADS
cat >"$WORK/trl_qlora.py" <<'PY'
import sys, time
import torch
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
from trl import SFTConfig, SFTTrainer
work, steps, threads, batch, maxlen, dt = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
dtype = torch.bfloat16 if dt == "bf16" else torch.float32
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(work + "/model")
quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
model = AutoModelForCausalLM.from_pretrained(work + "/model", dtype=dtype, quantization_config=quant,
                                             device_map="cpu")
ds = load_dataset("json", data_files=work + "/train.jsonl", split="train")
args = SFTConfig(output_dir=work + "/trl_out", per_device_train_batch_size=batch, learning_rate=1e-4, max_steps=steps,
                 bf16=dt == "bf16", use_cpu=True, report_to="none", save_strategy="no", logging_steps=1, max_length=maxlen,
                 dataloader_num_workers=0)
peft = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
tr = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=peft)
t1 = time.time(); tr.train(); print("train_s", time.time() - t1)
PY
COMMON="--per_device_train_batch_size $BATCH --gradient_accumulation_steps 1 --learning_rate 1e-4 --max_steps $STEPS
  --max_length $MAXLEN --use_peft true --lora_r 16 --lora_alpha 32 --lora_target_modules all-linear
  --gradient_checkpointing true $PRECISION --logging_steps 1 --save_strategy no --eval_strategy no"
# Each prints "tokens_per_second peak_mib".
run_trlx() {  # run_trlx <name> [extra flags]
  local name=$1 peak
  shift
  rm -rf "$WORK/$name"
  peak=$(peak_mib "$WORK/$name.log" "$TRLX" sft --config configs/sft.yaml --model_name_or_path "$WORK/model" \
    --dataset_name "$WORK/train.jsonl" $COMMON --output_dir "$WORK/$name" "$@") ||
    { echo "trlx $name failed:" >&2; tail -20 "$WORK/$name.log" "$WORK/$name.log.err" >&2; exit 1; }
  python3 -c "import json,sys; m=json.loads(open(sys.argv[1]).readlines()[-1]); print(m['train_tokens_per_second'], sys.argv[2])" \
    "$WORK/$name/metrics.jsonl" "$peak"
}
run_trl() {
  local peak
  peak=$(peak_mib "$WORK/trl.out" python3 "$WORK/trl_qlora.py" "$WORK" "$STEPS" "$THREADS" "$BATCH" "$MAXLEN" "$DTYPE") ||
    { echo "TRL run failed:" >&2; tail -20 "$WORK/trl.out" "$WORK/trl.out.err" >&2; exit 1; }
  python3 -c "
import sys
v = dict(l.split() for l in open(sys.argv[1]) if l.split()[:1] == ['train_s'])
print($TOKENS / float(v['train_s']), sys.argv[2])" "$WORK/trl.out" "$peak"
}
load() { cut -d' ' -f1 /proc/loadavg; }
echo "model $SIZE, $DTYPE, threads $THREADS, $STEPS steps of $BATCH rows (max_length $MAXLEN), $TOKENS tokens, $REPEATS repeats"
: >"$WORK/results"
for r in $(seq 1 "$REPEATS"); do
  l0=$(load)
  case $((r % 3)) in
    1) q=$(run_trlx qlora --load_in_4bit true); f=$(run_trlx lora); t=$(run_trl) ;;
    2) t=$(run_trl); q=$(run_trlx qlora --load_in_4bit true); f=$(run_trlx lora) ;;
    0) f=$(run_trlx lora); t=$(run_trl); q=$(run_trlx qlora --load_in_4bit true) ;;
  esac
  l1=$(load)
  echo "$q $f $t $l0 $l1" >>"$WORK/results"
  echo "repeat $r: tokens/s and peak MiB: trlx QLoRA $q, trlx LoRA $DTYPE base $f, TRL QLoRA $t (load $l0 / $l1)"
done
grep -o 'QLoRA: .*' "$WORK/qlora.log.err" "$WORK/qlora.log" 2>/dev/null | head -1 | sed 's/^[^:]*://'
python3 - "$WORK/results" "$WORK/qlora.log.err" "$WORK/qlora.log" <<'PY'
import re, statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: st.median(r[i] for r in rows)
speed = [r[0] / r[4] for r in rows]
print(f"tokens/s: trlx QLoRA {med(0):.0f}, trlx LoRA (16/32-bit base) {med(2):.0f}, TRL QLoRA {med(4):.0f}; trlx QLoRA / TRL QLoRA "
      f"median {st.median(speed):.2f}x (min {min(speed):.2f}, max {max(speed):.2f})")
print(f"peak resident MiB: trlx QLoRA {med(1):.0f}, trlx LoRA (16/32-bit base) {med(3):.0f}, TRL QLoRA {med(5):.0f}; "
      f"trlx QLoRA / TRL QLoRA {med(1) / med(5):.2f}x, / trlx LoRA {med(1) / med(3):.2f}x")
for f in sys.argv[2:]:
    try:
        m = re.search(r"([0-9.]+) MiB instead of ([0-9.]+) MiB; computed in (\w+)", open(f).read())
    except OSError:
        continue
    if m:
        # "instead of": the bytes in the dtype the base was loaded in.
        q, full = float(m.group(1)), float(m.group(2)) / (2 if m.group(3) == "Float" else 1)
        print(f"base linear weights: {q:.1f} MiB in 4 bits, {full:.1f} MiB in 16 bits: {q / full:.2f}x")
        break
print(f"load {min(r[6] for r in rows):.1f}-{max(r[7] for r in rows):.1f}")
PY

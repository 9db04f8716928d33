#!/usr/bin/env bash
# The one prepared check for a machine with an NVIDIA GPU (CI has none): builds
# trlx against that machine's CUDA LibTorch, then
#   - the NCCL communicator with one rank (every operation and dtype, host
#     values through it, a real TCPStore rendezvous);
#   - every strategy (DDP, ZeRO-1/2/3, FSDP, ZeRO-1/2/3 with the optimizer
#     offloaded to the host) forced at world 1 over NCCL
#     (debug_force_distributed) in bf16: its losses against the single-process
#     run's within bf16 tolerance, the gradient-sync check every step, peak GPU
#     memory; then a save at step 3 and a resume that ends with the
#     uninterrupted run's model;
#   - fp16 with loss scaling, one process and ZeRO-3 at world 1;
#   - DPO with LoRA and gradient checkpointing;
#   - generation;
#   - tokens/s and model FLOPs utilisation of the quickstart model and of a
#     ~0.5B-parameter model, against this GPU's measured bf16 matmul peak;
#   - 2 ranks under `trlx launch` when the machine has 2 GPUs or more: SFT
#     (DDP, ZeRO-3) against the single process, DPO and GRPO (sampled
#     generation, ZeRO-3 with ds3_gather_for_generation false);
# and prints a table. Exits non-zero when any check fails. Every run has a time
# limit (RUN_TIMEOUT, default 120 s, and never past DEADLINE, default 540 s
# after the start, so that a runner that stops commands at 600 s still gets
# the table), the build too, and 2-rank runs a short ddp_timeout (DDP_TIMEOUT,
# 60 s), so the script cannot hang. About 6-8 minutes on one H100/H200 with
# 16 cores, most of it the build.
#
#   scripts/gpu_check.sh                 # BUILD_DIR=build-gpu JOBS=$(nproc)
#   RESULTS=dir scripts/gpu_check.sh     # the table (written as it grows) and logs in dir;
#                                        # default: $OUT where the runner sets it
#   GPU_CHECK_ON_CPU=1 TRLX=build/apps/trlx/trlx scripts/gpu_check.sh
#                                        # the script's own logic on a CPU machine:
#                                        # no build, no NCCL, no GPU figures
#
# A machine without the build's system packages (no apt, no network) can use
# Debian's packages unpacked from .gpu-deps/ (made by scripts/gpu_deps.sh on a
# machine with a package mirror, carried along with the checkout).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ON_CPU=${GPU_CHECK_ON_CPU:-0}
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
RESULTS=${RESULTS:-${OUT:-}}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The table grows in RESULTS as checks finish, so that what ran survives a
# runner that stops the script.
if [ -n "$RESULTS" ]; then
  mkdir -p "$RESULTS"
  TABLE="$RESULTS/gpu_check_table.txt"
else
  TABLE="$WORK/table.txt"
fi
: >"$TABLE"
failures=0
PY=${PYTHON:-python3}

# Every run has a time limit, so that no check can hang the script: RUN_TIMEOUT
# seconds (killed 10 s later if it ignores SIGTERM). Distributed runs also get
# a short ddp_timeout, so that a stuck collective fails in seconds, not minutes.
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
DDP_TIMEOUT=${DDP_TIMEOUT:-60}
DEADLINE=${DEADLINE:-540}
# limited SECONDS COMMAND...: COMMAND with at most SECONDS, and never past the
# deadline (125 without running it when the deadline has come).
limited() {
  local most=$1 left=$((DEADLINE - SECONDS))
  shift
  if [ "$left" -lt 15 ]; then
    echo "gpu_check: out of time (DEADLINE ${DEADLINE}s), not run: $*" >&2
    return 125
  fi
  timeout --kill-after=10 $((left < most ? left : most)) "$@"
}
trlx() { limited "$RUN_TIMEOUT" "$TRLX" "$@"; }

# record NAME STATUS DETAIL
record() {
  printf '%-38s %-5s %s\n' "$1" "$2" "$3" >>"$TABLE"
  [ "$2" = FAIL ] && failures=$((failures + 1))
  printf '== %-32s %-5s %s\n' "$1" "$2" "$3"
}
finish() {
  echo
  echo "gpu_check results ($(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)):"
  printf '%-38s %-5s %s\n' "check" "" "result"
  cat "$TABLE"
  if [ -n "$RESULTS" ]; then
    (cd "$WORK" && tar czf "$RESULTS/gpu_check_logs.tgz" --exclude='*.safetensors' --exclude='*.pt' \
       --exclude=./sysroot --exclude=./m05b . 2>/dev/null)
  fi
  echo "$(grep -c ' PASS ' "$TABLE") passed, $failures failed, $(grep -c ' SKIP ' "$TABLE") skipped"
  exit $((failures == 0 ? 0 : 1))
}

if [ "$ON_CPU" = 1 ]; then
  TRLX=$(realpath "${TRLX:?GPU_CHECK_ON_CPU needs TRLX=path/to/trlx}")
  GPUS=0
  record "mode" PASS "GPU_CHECK_ON_CPU: the checks' logic on CPU, nothing measured"
else
  # ---- the machine
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >"$WORK/gpus.txt" 2>&1; then
    echo "gpu_check: no NVIDIA GPU visible (nvidia-smi); run this on a GPU machine" >&2
    exit 1
  fi
  GPUS=$(grep -c '^GPU ' "$WORK/gpus.txt")
  record "gpus" PASS "$GPUS x $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
  record "torch" PASS "$(limited 60 "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
  # A CUDA toolkit is optional: without nvcc, NCCL comes from the wheel's own
  # headers. A toolkit without NCCL's header (NVIDIA ships it apart) would
  # build LibTorch's NCCL headers against nothing: the wheel's headers then.
  CMAKE_EXTRA=()
  NVCC=$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")
  if [ -x "$NVCC" ]; then
    PATH="$(dirname "$NVCC"):$PATH"
    export PATH
    if ls "$(dirname "$NVCC")/../include/nccl.h" /usr/include/nccl.h >/dev/null 2>&1; then
      record "cuda toolkit" PASS "$NVCC"
    else
      CMAKE_EXTRA+=(-DTRLX_FORCE_NO_CUDA_TOOLKIT=ON)
      record "cuda toolkit" PASS "$NVCC, without nccl.h: the build uses the wheel's NCCL and CUDA runtime headers"
    fi
  else
    record "cuda toolkit" PASS "none: the build uses the wheel's NCCL and CUDA runtime headers"
  fi

  # ---- system packages from .gpu-deps when the machine lacks them
  if [ -d .gpu-deps ] && ls .gpu-deps/*.deb >/dev/null 2>&1; then
    SYSROOT="$WORK/sysroot"
    mkdir -p "$SYSROOT"
    for f in .gpu-deps/*.deb; do dpkg-deb -x "$f" "$SYSROOT" 2>/dev/null || dpkg -x "$f" "$SYSROOT"; done
    # A -dev package's lib*.so names its own runtime's file, which may not be
    # unpacked here (or names it by an absolute path): point it at the
    # machine's copy of that library, or drop it (CMake then says what is missing).
    for l in "$SYSROOT"/usr/lib/x86_64-linux-gnu/lib*.so; do
      [ -L "$l" ] && [ ! -e "$l" ] || continue
      so=$(basename "$l")
      sys=$(ls /usr/lib/x86_64-linux-gnu/"$so".[0-9]* /lib/x86_64-linux-gnu/"$so".[0-9]* 2>/dev/null | head -1)
      if [ -n "$sys" ]; then ln -sf "$sys" "$l"; else rm -f "$l"; fi
    done
    export PKG_CONFIG_PATH="$SYSROOT/usr/lib/x86_64-linux-gnu/pkgconfig:$SYSROOT/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export PKG_CONFIG_SYSROOT_DIR="$SYSROOT"
    export LD_LIBRARY_PATH="$SYSROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ! command -v pkg-config >/dev/null && [ -x "$SYSROOT/usr/bin/pkg-config" ]; then export PATH="$PATH:$SYSROOT/usr/bin"; fi
    CMAKE_EXTRA+=(-DTRLX_EXTRA_PREFIX="$SYSROOT/usr")
    record "system packages" PASS "$(ls .gpu-deps/*.deb | wc -l) Debian packages unpacked from .gpu-deps"
  fi

  # ---- build
  for tool in cmake ninja; do
    if ! command -v $tool >/dev/null; then
      record "build tools" FAIL "no $tool on PATH (scripts/setup.sh installs it; or unpack .gpu-deps)"
      finish
    fi
  done
  TORCH_PREFIX=$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
  if [ -z "$TORCH_PREFIX" ]; then
    record "build" FAIL "$PY has no torch (set PYTHON to the interpreter with the CUDA PyTorch wheel)"
    finish
  fi
  t0=$(date +%s)
  if limited 120 cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
       -DPython3_EXECUTABLE="$(command -v "$PY")" -DTRLX_WITH_MPI=OFF "${CMAKE_EXTRA[@]}" \
       >"$WORK/configure.log" 2>&1 &&
     limited 360 cmake --build "$BUILD_DIR" -j "$JOBS" --target trlx test_dist_nccl test_model \
       >"$WORK/build.log" 2>&1; then
    record "build" PASS "$(( $(date +%s) - t0 )) s, torch $("$PY" -c 'import torch; print(torch.__version__)')"
  else
    tail -30 "$WORK/configure.log" "$WORK/build.log"
    record "build" FAIL "see the log above"
    finish
  fi
  if ! grep -q USE_C10D_NCCL "$BUILD_DIR/build.ninja"; then
    record "nccl in libtorch" FAIL "$(grep -o 'NCCL communicator (multi-GPU): .*' "$WORK/configure.log" || echo 'no USE_C10D_NCCL')"
    finish
  fi
  record "nccl in libtorch" PASS "$(grep -o 'NCCL communicator (multi-GPU): .*' "$WORK/configure.log" | cut -d: -f2-)"
  TRLX="$ROOT/$BUILD_DIR/apps/trlx/trlx"
  trlx env >"$WORK/env.txt" 2>&1
  cp "$WORK/configure.log" "$WORK/env.txt" "${RESULTS:-$WORK}/" 2>/dev/null

  # ---- attention: the path and kernel of each case, and the fused paths
  # against the masked one on this GPU (bf16)
  grep -A7 '^attention' "$WORK/env.txt" | sed 's/^/   /'
  record "attention kernels" PASS "$(grep '^attention' "$WORK/env.txt" | cut -c19-)"
  if limited "$RUN_TIMEOUT" "$BUILD_DIR/tests/unit/model/test_model" "[attention]" >"$WORK/attention.log" 2>&1 &&
     ! grep -q SKIPPED "$WORK/attention.log"; then
    record "fused attention = masked (bf16)" PASS "$(grep -Eo 'All tests passed.*' "$WORK/attention.log" | head -1)"
  else
    tail -30 "$WORK/attention.log"
    record "fused attention = masked (bf16)" FAIL "see the log above"
  fi

  # ---- NCCL communicator, world 1
  if limited "$RUN_TIMEOUT" "$BUILD_DIR/tests/unit/dist/test_dist_nccl" >"$WORK/nccl.log" 2>&1; then
    record "nccl communicator (world 1)" PASS "$(grep -Eo 'All tests passed.*' "$WORK/nccl.log" | head -1)"
  else
    rc=$?
    tail -20 "$WORK/nccl.log"
    record "nccl communicator (world 1)" FAIL "exit $rc (77: no GPU found)"
  fi
fi

# Python helpers: a metric of a run, runs compared, models compared.
metric() {  # metric RUN KEY [last|max]: KEY's last (or largest) value in RUN/metrics.jsonl
  "$PY" - "$1" "$2" "${3:-last}" <<'EOF'
import json, sys
vals = [json.loads(l)[sys.argv[2]] for l in open(sys.argv[1] + "/metrics.jsonl") if sys.argv[2] in json.loads(l)]
print("nan" if not vals else (max(vals) if sys.argv[3] == "max" else vals[-1]))
EOF
}
loss_gap() {  # loss_gap RUN_A RUN_B: largest |loss_a - loss_b| / max(1, |loss_b|) over logged steps
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
def losses(d): return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("nan" if not a or len(a) != len(b) else "%.3g" % max(abs(x - y) / max(1.0, abs(y)) for x, y in zip(a, b)))
EOF
}
score_gap() {  # score_gap MODEL_A MODEL_B: largest sum_logprob difference over the SFT test rows
  trlx score --model "$1" --input examples/data/sft/test.jsonl >"$WORK/.sa" 2>/dev/null
  trlx score --model "$2" --input examples/data/sft/test.jsonl >"$WORK/.sb" 2>/dev/null
  "$PY" - "$WORK/.sa" "$WORK/.sb" <<'EOF'
import json, sys
a = [json.loads(l)["sum_logprob"] for l in open(sys.argv[1]) if l.strip()]
b = [json.loads(l)["sum_logprob"] for l in open(sys.argv[2]) if l.strip()]
print("nan" if not a or len(a) != len(b) else "%.3g" % max(abs(x - y) / max(1.0, abs(y)) for x, y in zip(a, b)))
EOF
}
mib() { "$PY" -c 'import sys; v=sys.argv[1]; print(v if v == "nan" else "%.0f" % float(v))' "$(metric "$1" peak_gpu_memory_mb)"; }
below() { "$PY" -c 'import math,sys; v=float(sys.argv[1]); sys.exit(0 if math.isfinite(v) and v <= float(sys.argv[2]) else 1)' "$1" "$2"; }
# record_dpo_start NAME RUN: a DPO run's first loss is ln 2 (the policy starts as its reference).
record_dpo_start() {
  local first
  first=$("$PY" -c 'import json,sys; print(next(json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l))' \
          "$2/metrics.jsonl")
  if below "$("$PY" -c "import math; print(abs($first - math.log(2)))")" 1e-2; then status=PASS; else status=FAIL; fi
  record "$1" $status "first loss $first (ln 2 = 0.693); peak $(mib "$2") MiB"
}

# ---- every strategy at world 1 over NCCL, bf16
SFT="--config configs/sft.yaml --bf16 true --max_steps 6 --logging_steps 1 --eval_strategy no"
trlx sft $SFT --save_strategy no --output_dir "$WORK/single" >"$WORK/single.log" 2>&1 ||
  record "sft bf16 single process" FAIL "exit $?"
# ZeRO-1/2/3 with the optimizer offloaded to page-locked host memory: the
# gradients' copies to the host run on their own stream (all-reduced buckets
# under ZeRO-1, reduce-scattered slices under ZeRO-2/3).
for stage in zero1 zero2 zero3; do
  sed 's/offload_optimizer_device: none/offload_optimizer_device: cpu/' accelerate_configs/$stage.yaml \
    >"$WORK/${stage}_offload.yaml"
done
for preset in multi_gpu zero1 zero2 zero3 fsdp zero1_offload zero2_offload zero3_offload; do
  run="$WORK/$preset"
  acc=$preset
  [ -f "$WORK/$preset.yaml" ] && acc="$WORK/$preset.yaml"
  FORCED="$SFT --accelerate_config $acc --debug_force_distributed true --debug_check_grad_sync_steps 1"
  if ! trlx sft $FORCED --save_steps 3 --output_dir "$run" >"$run.log" 2>&1; then
    tail -8 "$run.log"
    record "$preset: train" FAIL "exit code; see $preset.log"
    continue
  fi
  want_comm=nccl
  [ "$ON_CPU" = 1 ] && want_comm=single
  if ! grep -q "debug_force_distributed: running .*($want_comm communicator)" "$run.log"; then
    record "$preset: train" FAIL "did not run the strategy over the $want_comm communicator"
    continue
  fi
  gap=$(loss_gap "$run" "$WORK/single")
  if below "$gap" 2e-2; then status=PASS; else status=FAIL; fi
  record "$preset: loss vs single (bf16)" $status "largest relative gap $gap; peak $(mib "$run") MiB"
  # Resume from step 3 to the end: the uninterrupted run's model.
  if trlx sft $FORCED --save_steps 3 --output_dir "$run-resumed" \
       --resume_from_checkpoint "$run/checkpoint-3" >"$run-resumed.log" 2>&1; then
    d=$(score_gap "$run" "$run-resumed")
    if below "$d" 1e-3; then status=PASS; else status=FAIL; fi
    record "$preset: resume from step 3" $status "score difference $d"
  else
    tail -8 "$run-resumed.log"
    record "$preset: resume from step 3" FAIL "exit code"
  fi
done

# ---- fp16 with dynamic loss scaling: one process against the bf16 run, and
# ZeRO-3 forced at world 1 (loss scaling on the gradient slices) against it
FP16="--config configs/sft.yaml --bf16 false --fp16 true --max_steps 6 --logging_steps 1 --eval_strategy no --save_strategy no"
if trlx sft $FP16 --output_dir "$WORK/fp16" >"$WORK/fp16.log" 2>&1; then
  gap=$(loss_gap "$WORK/fp16" "$WORK/single")
  if below "$gap" 2e-2; then status=PASS; else status=FAIL; fi
  record "sft fp16: loss vs bf16" $status "largest relative gap $gap; $(grep -c 'update skipped' "$WORK/fp16.log") updates skipped; peak $(mib "$WORK/fp16") MiB"
  if trlx sft $FP16 --accelerate_config zero3 --debug_force_distributed true --debug_check_grad_sync_steps 1 \
       --output_dir "$WORK/fp16_zero3" >"$WORK/fp16_zero3.log" 2>&1; then
    gap=$(loss_gap "$WORK/fp16_zero3" "$WORK/fp16")
    if below "$gap" 1e-2; then status=PASS; else status=FAIL; fi
    record "zero3 fp16: loss vs single fp16" $status "largest relative gap $gap; peak $(mib "$WORK/fp16_zero3") MiB"
  else
    tail -8 "$WORK/fp16_zero3.log"
    record "zero3 fp16" FAIL "exit code"
  fi
else
  tail -8 "$WORK/fp16.log"
  record "sft fp16" FAIL "exit code"
fi

# ---- DPO with LoRA and gradient checkpointing
# On the model the SFT check above trained (configs/dpo.yaml names the quickstart's runs/sft).
if trlx dpo --config configs/dpo.yaml --model_name_or_path "$WORK/single" --bf16 true --max_steps 6 \
     --logging_steps 2 --eval_strategy no \
     --save_strategy no --use_peft true --lora_r 8 --gradient_checkpointing true \
     --output_dir "$WORK/dpo" >"$WORK/dpo.log" 2>&1; then
  record_dpo_start "dpo lora + checkpointing" "$WORK/dpo"
else
  tail -8 "$WORK/dpo.log"
  record "dpo lora + checkpointing" FAIL "exit code"
fi

# ---- generation
if trlx generate --model "$WORK/single" --prompt "12+30=" --max_new_tokens 8 >"$WORK/gen.txt" 2>"$WORK/gen.log" &&
   [ -s "$WORK/gen.txt" ]; then
  record "generate" PASS "$(head -c 60 "$WORK/gen.txt" | tr '\n' ' ')"
else
  tail -5 "$WORK/gen.log"
  record "generate" FAIL "exit code or no output"
fi

# ---- decode steps captured as CUDA graphs give the same greedy tokens
GEN_ARGS=(--model "$WORK/single" --prompt "12+30=" --prompt "7+5=" --prompt "100+1=" --max_new_tokens 16 --batch_size 2)
if trlx generate "${GEN_ARGS[@]}" >"$WORK/gen_eager.txt" 2>"$WORK/gen_eager.log" &&
   TRLX_CUDA_GRAPHS=1 trlx generate "${GEN_ARGS[@]}" >"$WORK/gen_graph.txt" 2>"$WORK/gen_graph.log" &&
   cmp -s "$WORK/gen_eager.txt" "$WORK/gen_graph.txt" &&
   { [ "$ON_CPU" = 1 ] || grep -q "decode steps captured as a CUDA graph" "$WORK/gen_graph.log"; }; then
  record "generate, TRLX_CUDA_GRAPHS=1" PASS "same tokens as without, decode steps captured"
else
  tail -5 "$WORK/gen_graph.log"; diff "$WORK/gen_eager.txt" "$WORK/gen_graph.txt" | head -6
  record "generate, TRLX_CUDA_GRAPHS=1" FAIL "exit code, other tokens, or no capture logged"
fi

if [ "$ON_CPU" = 1 ]; then finish; fi

# ---- throughput and MFU against the measured matmul peak
PEAK=$(limited 60 "$PY" - <<'EOF'
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): a @ b
torch.cuda.synchronize(); print(10 * 2 * 8192**3 / (time.perf_counter() - t))
EOF
)
if [ -z "$PEAK" ]; then
  record "bf16 matmul peak" FAIL "not measured (torch on the GPU failed or timed out)"
  PEAK=nan
else
  record "bf16 matmul peak" PASS "$("$PY" -c "print('%.0f TFLOP/s' % ($PEAK / 1e12))")"
fi
# mfu RUN PARAMS: tokens/s x 6 x parameters / peak (attention's own FLOPs not counted).
mfu() { "$PY" -c "print('%.1f%%' % (100 * float('$(metric "$1" train_tokens_per_second)') * 6 * $2 / float('$PEAK')))"; }
# measured NAME RUN DETAIL: a measurement's row, FAIL where the run logged no tokens/s
measured() {
  if below "$(metric "$2" train_tokens_per_second)" 1e300; then record "$1" PASS "$3"; else record "$1" FAIL "no train_tokens_per_second logged; $3"; fi
}
params_of() { "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1]+"/config.json")); h,l,v,i=c["hidden_size"],c["num_hidden_layers"],c["vocab_size"],c["intermediate_size"]; kv=c.get("num_key_value_heads",c["num_attention_heads"]); hd=c.get("head_dim",h//c["num_attention_heads"]); print(l*(h*hd*c["num_attention_heads"]*2+2*h*hd*kv+3*h*i)+v*h*(1 if c.get("tie_word_embeddings") else 2))' "$1"; }
measured "quickstart model tokens/s" "$WORK/single" "$(printf '%.0f' "$(metric "$WORK/single" train_tokens_per_second)") tokens/s, MFU $(mfu "$WORK/single" "$(params_of examples/tiny-model)")"
# A Qwen2-0.5B-shaped model with random weights, 1024-token rows.
if trlx init-model --arch qwen2 --hidden_size 896 --intermediate_size 4864 --num_layers 24 --num_heads 14 \
     --num_kv_heads 2 --tokenizer examples/tiny-model --vocab_size 151936 --tie_word_embeddings \
     --max_position_embeddings 4096 --out "$WORK/m05b" >"$WORK/init.log" 2>&1 &&
   "$PY" - "$WORK/rows" <<'EOF'
import json, os, random, sys
os.makedirs(sys.argv[1], exist_ok=True)
random.seed(0)
with open(sys.argv[1] + "/train.jsonl", "w") as f:
    for _ in range(256):
        words = " ".join(str(random.randint(0, 99999)) for _ in range(700))
        f.write(json.dumps({"prompt": words[:200], "completion": words[200:]}) + "\n")
EOF
then
  for ck in false true; do
    if trlx sft --model_name_or_path "$WORK/m05b" --dataset_name "$WORK/rows" --bf16 true --max_length 1024 \
         --per_device_train_batch_size 8 --max_steps 12 --logging_steps 4 --eval_strategy no --save_strategy no \
         --gradient_checkpointing $ck --learning_rate 1e-4 --output_dir "$WORK/m05b_run_$ck" \
         >"$WORK/m05b_$ck.log" 2>&1; then
      measured "0.5B sft (checkpointing $ck)" "$WORK/m05b_run_$ck" "$(printf '%.0f' "$(metric "$WORK/m05b_run_$ck" train_tokens_per_second)") tokens/s, MFU $(mfu "$WORK/m05b_run_$ck" "$(params_of "$WORK/m05b")"), peak $(mib "$WORK/m05b_run_$ck") MiB"
    else
      tail -8 "$WORK/m05b_$ck.log"
      record "0.5B sft (checkpointing $ck)" FAIL "exit code"
    fi
  done
else
  record "0.5B model" FAIL "init-model or data failed"
fi

# ---- 2 ranks when there are 2 GPUs: SFT under DDP and ZeRO-3 against the
# single process (the same global batch), DPO under ZeRO-3 (its first loss is
# ln 2), GRPO with sampled generation under ZeRO-3 with the weights left
# sharded during generation (ds3_gather_for_generation false)
if [ "$GPUS" -ge 2 ]; then
  TWO=(launch --nproc_per_node 2 -- "$TRLX")
  for preset in multi_gpu zero3; do
    if trlx "${TWO[@]}" sft $SFT --per_device_train_batch_size 8 --save_strategy no --ddp_timeout "$DDP_TIMEOUT" \
         --accelerate_config $preset --debug_check_grad_sync_steps 1 --output_dir "$WORK/two_$preset" \
         >"$WORK/two_$preset.log" 2>&1; then
      gap=$(loss_gap "$WORK/two_$preset" "$WORK/single")
      if below "$gap" 2e-2; then status=PASS; else status=FAIL; fi
      record "2 GPUs sft $preset: loss vs single" $status "largest relative gap $gap; peak $(mib "$WORK/two_$preset") MiB"
    else
      tail -8 "$WORK/two_$preset.log"
      record "2 GPUs sft $preset" FAIL "exit code (124: past RUN_TIMEOUT)"
    fi
  done
  # ZeRO-3 (bf16 gathers of float32 slices) holds no more than DDP's whole
  # float32 model, gradients and Adam state per GPU (the slack: this model
  # is small, and activations and allocator rounding dominate its peaks).
  ddp_peak=$(metric "$WORK/two_multi_gpu" peak_gpu_memory_mb max)
  z3_peak=$(metric "$WORK/two_zero3" peak_gpu_memory_mb max)
  if "$PY" -c "import math,sys; a,b=float('$z3_peak'),float('$ddp_peak'); sys.exit(0 if math.isfinite(a) and math.isfinite(b) and a <= 1.1 * b + 32 else 1)"; then
    status=PASS; else status=FAIL; fi
  record "2 GPUs peak: zero3 not above ddp" $status "zero3 $z3_peak MiB, ddp $ddp_peak MiB"
  if trlx "${TWO[@]}" dpo --config configs/dpo.yaml --model_name_or_path "$WORK/single" --bf16 true --max_steps 4 \
       --logging_steps 1 --eval_strategy no --save_strategy no --accelerate_config zero3 --ddp_timeout "$DDP_TIMEOUT" \
       --output_dir "$WORK/two_dpo" >"$WORK/two_dpo.log" 2>&1; then
    record_dpo_start "2 GPUs dpo zero3" "$WORK/two_dpo"
  else
    tail -8 "$WORK/two_dpo.log"
    record "2 GPUs dpo zero3" FAIL "exit code (124: past RUN_TIMEOUT)"
  fi
  if trlx "${TWO[@]}" grpo --config configs/grpo.yaml --model_name_or_path "$WORK/single" --bf16 true --max_steps 4 \
       --logging_steps 1 --eval_strategy no --save_strategy no --per_device_train_batch_size 32 \
       --accelerate_config zero3 --ds3_gather_for_generation false --ddp_timeout "$DDP_TIMEOUT" \
       --output_dir "$WORK/two_grpo" >"$WORK/two_grpo.log" 2>&1; then
    loss=$(metric "$WORK/two_grpo" loss)
    len=$(metric "$WORK/two_grpo" completions/mean_length)
    if "$PY" -c "import math,sys; sys.exit(0 if math.isfinite(float('$loss')) and float('$len') > 0 else 1)"; then
      status=PASS; else status=FAIL; fi
    record "2 GPUs grpo zero3, weights sharded" $status "last loss $loss, mean completion length $len; peak $(mib "$WORK/two_grpo") MiB"
  else
    tail -8 "$WORK/two_grpo.log"
    record "2 GPUs grpo zero3, weights sharded" FAIL "exit code (124: past RUN_TIMEOUT)"
  fi
else
  record "2 GPUs" SKIP "one GPU on this machine (NCCL refuses two ranks on one device)"
fi
finish

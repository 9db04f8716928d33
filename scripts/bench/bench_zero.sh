#!/usr/bin/env bash
# ZeRO-1/2/3 and FSDP vs DDP on the same model and batch, same run, under
# mpirun with NP ranks (2) on CPU: the slowest rank's best step time, bytes
# each rank hands to collectives per step against what each strategy should
# send, the optimizer-state and gradient bytes a rank holds, and its peak
# resident memory (one mpirun per strategy, so one peak cannot hide another).
#
# Bytes are counted as the communicator counts them, the input of each
# collective: an all-reduce hands over 4Ψ bytes (Ψ fp32 parameters), a
# reduce-scatter 4Ψ, an all-gather 4Ψ/world. Expected per step:
#   ddp    4Ψ          (all-reduce)                   wire volume 2Ψ (ring)
#   zero1  4Ψ + 4Ψ/w   (all-reduce, then all-gather)  wire volume 3Ψ
#   zero2  4Ψ + 4Ψ/w   (reduce-scatter, all-gather)   wire volume 2Ψ
#   zero3  4Ψ + 8Ψ/w   (all-gather for forward and again for backward,
#                       reduce-scatter)                wire volume 3Ψ
#   fsdp_keep 4Ψ + 4Ψ/w (reshard_after_forward false: one all-gather per
#                       unit, kept until its backward) wire volume 2Ψ
#   zero3_autocast      as zero3, under bf16 autocast (float32 gathers)
#   zero3_bf16 4Ψ + 4Ψ/w (bf16 autocast, bf16 gathers of the float32
#                       slices: 2 bytes per element each way, float32
#                       reduce-scatter)
# Settings: NP (2), BATCH (2), SEQ (128), STEPS (3), THREADS (1 per rank).
#
# Recorded (2026-11-29, 2 shared CPU cores under load 5 from concurrent
# builds, so times are noisy; two runs, STEPS 3 and 5), Ψ = 11145472:
#   strategy   step_ms (vs ddp)           bytes/step (= expected)  adamw_state  grad_bytes  peak_rss_mb
#   ddp        1212 / 742  (1.00)         44581888  (4Ψ)           89163776     44581888    894 / 986
#   zero1       801 / 859  (0.66/1.16)    66872840  (4Ψ+4Ψ/2 +8)   44581888     66872832    944 / 821
#   zero2      1184 / 1141 (0.98/1.54)    66872840  (4Ψ+4Ψ/2 +8)   44581888     22290944    902 / 902
#   zero3      1184 / 1020 (0.98/1.38)    89163272  (4Ψ+8Ψ/2)      44581888     22290944    895 / 934
#   fsdp_keep  1138 / 996  (0.94/1.34)    66872840  (4Ψ+4Ψ/2)      44581888     22290944    841 / 918
# bf16 modes (2026-12-06, 3 runs alternating with ddp, load 0.9-1.3):
#   zero3_autocast  step 432 / 437 / 427 ms, 89163272 bytes/step, peak_rss 834 / 853 / 822
#   zero3_bf16      step 376 / 362 / 411 ms (x0.87 median, 0.83-0.96),
#                   66872840 bytes/step (4Ψ+4Ψ/2, x0.75), peak_rss 810 / 765 / 764
# (+8: the clip norm's all-reduce; ZeRO-3 sends 504 bytes less than 4Ψ+8Ψ/w
# because the final norm, kept whole, is gathered once.) Optimizer state
# halves under every stage; gradients halve from stage 2. Peak RSS is
# dominated by activations, the [tokens x 32000] logits and each rank
# loading the whole checkpoint before sharding it, so the state savings
# barely show there; tests/unit/engine/zero_test.cpp counts live tensor
# bytes instead (ZeRO-3: 3Ψ/w x 4 bytes per rank, one process 4Ψ x 4).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
NP=${NP:-2}
BATCH=${BATCH:-2}
SEQ=${SEQ:-128}
STEPS=${STEPS:-3}
export OMP_NUM_THREADS=${THREADS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmake --build "$BUILD_DIR" --target zero_bench trlx -j2 >/dev/null 2>&1
BENCH="$BUILD_DIR/tests/unit/engine/zero_bench"
TRLX="$BUILD_DIR/apps/trlx/trlx"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# A ~10M model: hidden 256, 4 layers, MLP 704, vocab 32000 (tied).
"$TRLX" init-model --arch qwen2 --hidden_size 256 --intermediate_size 704 --num_layers 4 --num_heads 4 \
  --num_kv_heads 2 --vocab_size 32000 --tie_word_embeddings --out "$WORK/m" >/dev/null

declare -A out
STRATEGIES=${STRATEGIES:-"ddp zero1 zero2 zero3 fsdp_keep zero3_autocast zero3_bf16"}
for s in $STRATEGIES; do
  out[$s]=$(mpirun --oversubscribe --bind-to none -np "$NP" "$BENCH" "$WORK/m" "$s" "$BATCH" "$SEQ" "$STEPS" 2>/dev/null)
done
field() { echo "$1" | awk -v k="$2" '{for(i=1;i<NF;i++) if($i==k) print $(i+1)}'; }
P=$(field "${out[ddp]}" params)
echo "model: qwen2 hidden 256, 4 layers, vocab 32000 tied, $P parameters (Ψ), fp32; $NP ranks x batch $BATCH x $SEQ tokens, best of $STEPS steps"
printf "%-8s %10s %8s %16s %16s %8s %16s %16s %12s\n" strategy step_ms vs_ddp bytes/step expected ratio adamw_state grad_bytes peak_rss_mb
for s in $STRATEGIES; do
  o=${out[$s]}
  case $s in
    ddp) exp=$((4 * P)) ;;
    zero3 | zero3_autocast) exp=$((4 * P + 8 * P / NP)) ;;
    *) exp=$((4 * P + 4 * P / NP)) ;;
  esac
  printf "%-8s %10.1f %8.2f %16s %16s %8.3f %16s %16s %12s\n" "$s" "$(field "$o" step_ms)" \
    "$(awk -v a="$(field "$o" step_ms)" -v b="$(field "${out[ddp]}" step_ms)" 'BEGIN{print a/b}')" \
    "$(field "$o" bytes_per_step)" "$exp" "$(awk -v a="$(field "$o" bytes_per_step)" -v b="$exp" 'BEGIN{print a/b}')" \
    "$(field "$o" adamw_state_bytes)" "$(field "$o" grad_bytes)" "$(field "$o" peak_rss_mb)"
done

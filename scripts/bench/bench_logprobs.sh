#!/usr/bin/env bash
# Peak memory and time of one log-prob forward+backward (vocab 128256,
# sequence 2048, batch 1, hidden 1024, fp32 on CPU):
#  - trlx plain path (one [tokens x vocab] logits buffer, made its own
#    gradient in place in backward)
#  - trlx chunked path (LogProbOptions::chunk_size = CHUNK)
#  - PyTorch in Python, measured in the same run: the plain path's math
#    (full logits, logsumexp, gather, backward), and the log_softmax + gather idiom.
# Each path runs in its own process so that one path's peak cannot hide another's.
# Needs python3 with torch (dev time). Env: BUILD_DIR, THREADS (2), VOCAB,
# SEQ, HIDDEN, CHUNK (256), NO_BUILD=1 to use the logprobs_bench already built.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
VOCAB=${VOCAB:-128256}
SEQ=${SEQ:-2048}
HIDDEN=${HIDDEN:-1024}
CHUNK=${CHUNK:-256}
[[ -n ${NO_BUILD:-} ]] || cmake --build "$BUILD_DIR" --target logprobs_bench -j2 >/dev/null
BENCH="$BUILD_DIR/tests/unit/losses/logprobs_bench"

py() {
  python3 - "$@" <<'PY'
import resource, sys, time, torch
mode = sys.argv[1]
vocab, seq, hidden_size, threads = map(int, sys.argv[2:6])
torch.set_num_threads(threads)
torch.manual_seed(0)
hidden = torch.randn(1, seq, hidden_size, requires_grad=True)
weight = torch.randn(vocab, hidden_size).mul_(0.02).requires_grad_()
targets = torch.randint(0, vocab, (1, seq))
mask = torch.ones(1, seq, dtype=torch.long)

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

def logps_of(hidden, weight):
    logits = torch.matmul(hidden, weight.t()).float()
    if mode == "logsumexp":
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        out = picked - logits.logsumexp(-1)
    else:
        out = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return out.masked_fill(mask == 0, 0.0)

baseline = peak_mib()
start = time.perf_counter()
logps = logps_of(hidden, weight)
logps.sum().backward()
seconds = time.perf_counter() - start
peak = peak_mib() - baseline
print("check", logps.sum().item(), weight.grad.abs().sum().item())
print("peak_delta_mib", peak)
print("seconds", seconds)
PY
}
field() { awk -v k="$1" '$1 == k {print $2}'; }
ratio() { python3 -c "print(f'{$1/$2:.3f}')"; }

echo "log-prob forward+backward: vocab $VOCAB, sequence $SEQ, batch 1, hidden $HIDDEN, fp32, CPU, $THREADS threads, chunk $CHUNK tokens"
echo "peak = the process's peak resident memory (getrusage ru_maxrss) during forward+backward minus its peak once"
echo "       the inputs exist (hidden, weight [vocab x hidden]); it includes the weight's gradient,"
echo "       $(python3 -c "print(f'{$VOCAB*$HIDDEN*4/2**20:.0f}')") MiB, that every path must hold. One process per path."
declare -A PEAK SECS
for path in plain chunked pytorch pytorch_log_softmax; do
  case $path in
    plain) out=$("$BENCH" plain "$VOCAB" "$SEQ" "$HIDDEN" "$CHUNK" "$THREADS") ;;
    chunked) out=$("$BENCH" chunked "$VOCAB" "$SEQ" "$HIDDEN" "$CHUNK" "$THREADS") ;;
    pytorch) out=$(py logsumexp "$VOCAB" "$SEQ" "$HIDDEN" "$THREADS") ;;
    pytorch_log_softmax) out=$(py log_softmax "$VOCAB" "$SEQ" "$HIDDEN" "$THREADS") ;;
  esac
  PEAK[$path]=$(field peak_delta_mib <<<"$out")
  SECS[$path]=$(field seconds <<<"$out")
  printf '%-30s peak %8.0f MiB   time %7.2f s\n' "$path" "${PEAK[$path]}" "${SECS[$path]}"
done
GRAD=$(python3 -c "print($VOCAB*$HIDDEN*4/2**20)")
echo "peak ratio chunked/plain:               $(ratio "${PEAK[chunked]}" "${PEAK[plain]}")x (aim <= 0.3x)"
echo "peak ratio chunked/pytorch:             $(ratio "${PEAK[chunked]}" "${PEAK[pytorch]}")x"
echo "peak ratio chunked/pytorch_log_softmax: $(ratio "${PEAK[chunked]}" "${PEAK[pytorch_log_softmax]}")x"
echo "beyond the weight gradient, chunked/plain: $(ratio "(${PEAK[chunked]}-$GRAD)" "(${PEAK[plain]}-$GRAD)")x"
echo "peak ratio plain/pytorch:               $(ratio "${PEAK[plain]}" "${PEAK[pytorch]}")x, plain/pytorch_log_softmax: $(ratio "${PEAK[plain]}" "${PEAK[pytorch_log_softmax]}")x"
echo "time ratio plain/pytorch:               $(ratio "${SECS[plain]}" "${SECS[pytorch]}")x, plain/pytorch_log_softmax: $(ratio "${SECS[plain]}" "${SECS[pytorch_log_softmax]}")x"
echo "time ratio chunked/plain: $(ratio "${SECS[chunked]}" "${SECS[plain]}")x, chunked/pytorch: $(ratio "${SECS[chunked]}" "${SECS[pytorch]}")x"

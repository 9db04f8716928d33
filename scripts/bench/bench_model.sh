#!/usr/bin/env bash
# Model speed, trlx vs transformers in the same run on the same threads:
#  - forward tokens/s of a ~25M-parameter Qwen2-shaped model at batch 8 x 256
#  - greedy generation tokens/s of a tiny model at batch 1
#  - checkpoint load time of the ~25M model
# Needs python3 with torch and transformers (dev time). THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
THREADS=${THREADS:-2}
cmake --build "$BUILD_DIR" --target model_bench trlx -j2 >/dev/null
BENCH="$BUILD_DIR/tests/unit/model/model_bench"
TRLX="$BUILD_DIR/apps/trlx/trlx"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# ~25M parameters: hidden 512, 8 layers, MLP 1408, vocab 32000 (tied).
"$TRLX" init-model --arch qwen2 --hidden_size 512 --intermediate_size 1408 --num_layers 8 --num_heads 8 \
  --num_kv_heads 4 --vocab_size 32000 --tie_word_embeddings --out "$WORK/m25" >/dev/null
"$TRLX" init-model --arch qwen2 --hidden_size 64 --num_layers 2 --num_heads 4 --num_kv_heads 2 \
  --vocab_size 1024 --out "$WORK/tiny" >/dev/null

py() {
  python3 - "$@" <<'PY' 2>/dev/null
import sys, time, torch
from transformers import AutoModelForCausalLM
mode, d = sys.argv[1], sys.argv[2]
torch.set_num_threads(int(sys.argv[-1]))
torch.manual_seed(0)
with torch.no_grad():
    if mode == "load":
        best = 1e9
        for _ in range(int(sys.argv[3])):
            t = time.perf_counter(); AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32); best = min(best, time.perf_counter() - t)
        print("load_s", best)
        sys.exit()
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    if mode == "forward":
        b, t, it = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        ids = torch.randint(0, m.config.vocab_size, (b, t))
        m(input_ids=ids)
        s = time.perf_counter()
        for _ in range(it): m(input_ids=ids)
        print("forward_tokens_per_s", b * t * it / (time.perf_counter() - s))
    else:
        plen, n, it = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        ids = torch.arange(3, 3 + plen).unsqueeze(0)
        kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        m.generate(ids, **kw)
        s = time.perf_counter(); total = 0
        for _ in range(it): total += m.generate(ids, **kw).shape[1] - plen
        print("generate_tokens_per_s", total / (time.perf_counter() - s))
PY
}
val() { awk '{print $2}'; }
ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }

echo "threads: $THREADS"
t=$("$BENCH" forward "$WORK/m25" 8 256 3 "$THREADS" | val); h=$(py forward "$WORK/m25" 8 256 3 "$THREADS" | val)
echo "forward 25M qwen2, batch 8x256: trlx $(printf %.0f "$t") tok/s, transformers $(printf %.0f "$h") tok/s, ratio $(ratio "$t" "$h")x"
t=$("$BENCH" generate "$WORK/tiny" 16 64 5 "$THREADS" | val); h=$(py generate "$WORK/tiny" 16 64 5 "$THREADS" | val)
echo "greedy generation tiny qwen2, batch 1: trlx $(printf %.0f "$t") tok/s, transformers $(printf %.0f "$h") tok/s, ratio $(ratio "$t" "$h")x"
t=$("$BENCH" load "$WORK/m25" 3 "$THREADS" | val); h=$(py load "$WORK/m25" 3 "$THREADS" | val)
echo "load 25M checkpoint: trlx $(printf %.3f "$t") s, transformers $(printf %.3f "$h") s, speed-up $(ratio "$h" "$t")x"

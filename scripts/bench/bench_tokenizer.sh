#!/usr/bin/env bash
# Encode throughput: trlx vs Hugging Face tokenizers, same corpus, same run,
# one thread each (HF: RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false,
# one encode() call per document, no encode_batch).
#   scripts/bench/bench_tokenizer.sh [tokenizer dirs...]
# Default dirs: $TRLX_SHARED_DIR/fixtures/tokenizers/{llama2,llama3,qwen3}.
# Needs: python3 with `tokenizers`; builds target tokenizer_bench in build-tokenizer.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-tokenizer}
SHARED=${TRLX_SHARED_DIR:-/work/shared}
DIRS=("$@")
if [ ${#DIRS[@]} -eq 0 ]; then
  DIRS=("$SHARED/fixtures/tokenizers/llama2" "$SHARED/fixtures/tokenizers/llama3" "$SHARED/fixtures/tokenizers/qwen3")
fi
[ -f "$BUILD/build.ninja" ] || cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target tokenizer_bench -j2 >/dev/null
BENCH=$(find "$BUILD" -name tokenizer_bench -type f -perm -u+x | head -1)

CORPUS=$(mktemp --suffix=.jsonl)
trap 'rm -f "$CORPUS"' EXIT
# A deterministic mixed corpus: English prose, code, numbers, CJK, emoji.
python3 - "$CORPUS" <<'PY'
import json, random, sys
rng = random.Random(7)
words = ("the of and to in is that for it as was with be by on not he I this are or his from at which but have an "
         "they you were her she there been one all we their can has more do if will would so what up out about who "
         "tokenizer model training gradient optimizer learning rate batch sequence attention transformer").split()
code = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }\n",
        "if err != nil {\n\treturn err\n}\n", "SELECT id, name FROM users WHERE age > 30;\n"]
other = ["日本語のテキストを分割します。", "中文分词测试，包括标点。", "Привет, как дела?", "emoji 😀👍🏽 ok",
         "naïve café résumé", "3.14159 2024-11-29 1,000,000"]
docs = []
for i in range(4000):
    parts = []
    for _ in range(rng.randint(5, 40)):
        r = rng.random()
        if r < 0.85:
            w = rng.choice(words)
            parts.append(w.capitalize() if rng.random() < 0.1 else w)
        elif r < 0.9:
            parts.append(rng.choice(code))
        elif r < 0.95:
            parts.append(rng.choice(other))
        else:
            parts.append(str(rng.randint(0, 10**6)) + rng.choice([".", ",", "!", "?", "\n\n"]))
    docs.append(" ".join(parts))
with open(sys.argv[1], "w") as f:
    for d in docs:
        f.write(json.dumps(d) + "\n")
PY

printf '%-10s %12s %12s %12s %8s\n' tokenizer tokens trlx_tok/s hf_tok/s ratio
for d in "${DIRS[@]}"; do
  read -r t_tokens t_secs t_rate < <("$BENCH" "$d" "$CORPUS" 3)
  read -r h_tokens h_secs h_rate < <(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 - "$d" "$CORPUS" <<'PY'
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
docs = [json.loads(l) for l in open(sys.argv[2])]
best, n = 1e30, 0
for _ in range(3):
    n = 0
    t0 = time.perf_counter()
    for d in docs:
        n += len(tok.encode(d).ids)
    best = min(best, time.perf_counter() - t0)
print(n, best, n / best)
PY
)
  ratio=$(python3 -c "print(f'{$t_rate/$h_rate:.2f}')")
  note=""
  [ "$t_tokens" = "$h_tokens" ] || note=" (token counts differ: $t_tokens vs $h_tokens)"
  printf '%-10s %12s %12.0f %12.0f %8s%s\n' "$(basename "$d")" "$t_tokens" "$t_rate" "$h_rate" "$ratio" "$note"
done

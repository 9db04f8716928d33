# What the end-to-end scripts share; sourced at their top with their own
# arguments: <path to trlx> <source dir>. Sets TRLX, SRC and a scratch TMP
# (removed on exit), runs from SRC, and counts checks; a script ends with
# `finish`, which prints the counts and fails if any check failed.
set -u
TRLX=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$SRC" || exit 2
pass=0
failures=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }
# check '<shell condition>': counts it as passed or failed (printing it).
check() { if eval "$1"; then ok; else bad "$1"; fi; }
finish() {
  echo "$pass passed, $failures failed"
  [ "$failures" = 0 ]
}

# values KEY FILE: KEY's value on each JSON line of FILE that has it, one per
# line (metrics.jsonl, `trlx score` output).
values() {
  python3 -c '
import json, sys
for line in open(sys.argv[2]):
    line = line.strip()
    if line:
        row = json.loads(line)
        if sys.argv[1] in row:
            print(repr(float(row[sys.argv[1]])))
' "$1" "$2"
}

# largest_difference A B: the largest |a - b| over two files of numbers, line
# by line, relative to max(1, |b|); "nan" when either is empty or they differ
# in length, so that any tolerance check on it fails.
largest_difference() {
  python3 -c '
import math, sys
a = [float(x) for x in open(sys.argv[1]).read().split()]
b = [float(x) for x in open(sys.argv[2]).read().split()]
if not a or len(a) != len(b):
    print("nan")
else:
    print("%.3g" % max(abs(x - y) / max(1.0, abs(y)) for x, y in zip(a, b)))
' "$1" "$2"
}

# steps_hold RUN EXPR [first]: the Python expression EXPR holds at every
# logged training step of RUN (an output dir), or only the first with
# `first`; in EXPR, m is the step's metrics by name, close(a, b) is
# |a - b| <= 1e-5 relative above 1, and math is imported. Prints each failing
# step.
steps_hold() {
  python3 -c '
import json, math, sys
def close(a, b, tol=1e-5):
    return abs(a - b) <= tol * max(1.0, abs(b))
steps = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if l.strip()]
steps = [m for m in steps if "loss" in m]
if len(sys.argv) > 3 and sys.argv[3] == "first":
    steps = steps[:1]
bad = [m for m in steps if not eval(sys.argv[2], {"math": math, "close": close, "m": m})]
for m in bad:
    print("  does not hold at step %s: %s" % (m.get("step"), m))
sys.exit(1 if bad or not steps else 0)
' "$@"
}

# within VALUE TOLERANCE: VALUE is a number no larger than TOLERANCE.
within() { python3 -c 'import math, sys; v = float(sys.argv[1]); sys.exit(0 if math.isfinite(v) and v <= float(sys.argv[2]) else 1)' "$1" "$2"; }

# same_metric KEY RUN_A RUN_B [TOLERANCE]: KEY as logged by two runs
# (output dirs) agrees at every logged step (default 1e-5, relative above 1).
same_metric() {
  values "$1" "$2/metrics.jsonl" >"$TMP/.a" 2>/dev/null
  values "$1" "$3/metrics.jsonl" >"$TMP/.b" 2>/dev/null
  local d
  d=$(largest_difference "$TMP/.a" "$TMP/.b")
  echo "  $1: $(basename "$2") vs $(basename "$3"): largest difference $d"
  within "$d" "${4:-1e-5}"
}

# same_scores MODEL_A MODEL_B [TOLERANCE]: `trlx score` of the two models on
# the SFT test rows gives the same sum_logprob per row (default 1e-5,
# relative above 1).
same_scores() {
  "$TRLX" score --model "$1" --input examples/data/sft/test.jsonl >"$TMP/.sa" 2>/dev/null
  "$TRLX" score --model "$2" --input examples/data/sft/test.jsonl >"$TMP/.sb" 2>/dev/null
  values sum_logprob "$TMP/.sa" >"$TMP/.a"
  values sum_logprob "$TMP/.sb" >"$TMP/.b"
  local d
  d=$(largest_difference "$TMP/.a" "$TMP/.b")
  echo "  score: $(basename "$1") vs $(basename "$2"): largest sum_logprob difference $d"
  within "$d" "${3:-1e-5}"
}

# refused <grep pattern> <trlx arguments...>: trlx exits 2 before training
# (no step logged), saying what matches the pattern.
refused() {
  local want=$1
  shift
  "$TRLX" "$@" >"$TMP/o" 2>&1
  local rc=$?
  check "[ $rc = 2 ] && grep -q \"$want\" '$TMP/o' && ! grep -q 'step 1/' '$TMP/o'" || cat "$TMP/o"
}

#!/usr/bin/env bash
# Builds the unit tests that need no LibTorch with AddressSanitizer and
# UndefinedBehaviorSanitizer (CMake option TRLX_SANITIZE) in their own build
# directory, runs each test executable, and prints a summary. Exits 1 when a
# test fails or a sanitizer reports anything (leaks included).
#
#   scripts/sanitize.sh [test ...]        default: all of them
#
# Tests: test_config (trlx_core), test_data (trlx_data), test_tokenizer
# (trlx_tokenizer), test_template (trlx_template), test_rewards_builtin and
# test_rewards_program (trlx_base). Extra Catch2 arguments for every test:
# CATCH_ARGS, e.g. CATCH_ARGS='[tokenizer]'.
#
# Environment: BUILD_DIR (build-asan), JOBS (parallel compiles, 2), NICE
# (niceness of the build, 15), TRLX_SHARED_DIR (the shared fixtures; default
# ../shared when it has fixtures/), TRLX_SANITIZE_ARROW=OFF to build the
# dataset readers without Apache Arrow (Parquet/Arrow tests then check the
# refusal). ccache is used when installed.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
  exit "${1:-2}"
}

all_tests=(test_config test_data test_tokenizer test_template test_rewards_builtin test_rewards_program)
tests=()
for a in "$@"; do
  case "$a" in
    -h | --help) usage 0 ;;
    test_*)
      [[ " ${all_tests[*]} " == *" $a "* ]] || { echo "sanitize.sh: unknown test '$a' (${all_tests[*]})" >&2; exit 2; }
      tests+=("$a")
      ;;
    *) echo "sanitize.sh: unknown argument '$a'" >&2; usage 2 ;;
  esac
done
[[ ${#tests[@]} -gt 0 ]] || tests=("${all_tests[@]}")

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-build-asan}"
jobs="${JOBS:-2}"
niceness="${NICE:-15}"
if [[ -z "${TRLX_SHARED_DIR:-}" && -d ../shared/fixtures ]]; then
  TRLX_SHARED_DIR="$(cd ../shared && pwd)"
fi
export TRLX_SHARED_DIR="${TRLX_SHARED_DIR:-}"

start=$(date +%s)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
mkdir -p "$build"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  # -O1 keeps the tests quick under the sanitizers; asserts stay on (no NDEBUG);
  # -g1 (line tables) is all a sanitizer report needs and compiles 30% faster.
  nice -n "$niceness" cmake -S . -B "$build" "${generator[@]}" -DTRLX_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DTRLX_WITH_MPI=OFF \
    -DTRLX_WITH_ARROW="${TRLX_SANITIZE_ARROW:-ON}" >"$build/sanitize-configure.log" 2>&1 ||
    { tail -n 30 "$build/sanitize-configure.log" >&2
      echo "sanitize.sh: cmake configure failed ($build/sanitize-configure.log)" >&2
      exit 1; }
elif [[ -n "${TRLX_SANITIZE_ARROW:-}" ]]; then
  cmake "$build" -DTRLX_WITH_ARROW="$TRLX_SANITIZE_ARROW" >/dev/null
fi
nice -n "$niceness" cmake --build "$build" -j "$jobs" --target "${tests[@]}" >"$build/sanitize-build.log" 2>&1 ||
  { tail -n 40 "$build/sanitize-build.log" >&2; echo "sanitize.sh: build failed ($build/sanitize-build.log)" >&2; exit 1; }
built=$(date +%s)

# Sanitizer settings: any report ends the test with an error.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export CUDA_VISIBLE_DEVICES=  # as ctest runs the unit tests

status=0
summary=()
for t in "${tests[@]}"; do
  exe="$(find "$build/tests/unit" -type f -name "$t" -perm -u+x | head -n 1)"
  [[ -n "$exe" ]] || { echo "sanitize.sh: $t was not built" >&2; exit 1; }
  log="$build/$t.sanitize.log"
  t0=$(date +%s)
  rc=0
  # shellcheck disable=SC2086
  (cd "$(dirname "$exe")" && exec "./$t" ${CATCH_ARGS:-}) >"$log" 2>&1 || rc=$?
  secs=$(($(date +%s) - t0))
  result="$(grep -E '^(All tests passed|test cases:)' "$log" | tail -n 1)"
  skipped="$(grep -c 'TRLX_SKIPPED:' "$log" || true)"
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$log"; then
    result="SANITIZER REPORT: $(grep -m 1 -E 'SUMMARY: |runtime error:' "$log")"
    [[ $rc -ne 0 ]] || rc=1
  fi
  [[ $rc -eq 0 ]] || { status=1; echo "---- $t failed (exit $rc); the end of $log:" >&2; tail -n 60 "$log" >&2; }
  summary+=("$(printf '%-22s %-5s %4ss  %s%s' "$t" "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "$secs" \
    "${result:-no Catch2 summary}" "$([[ $skipped -gt 0 ]] && echo " ($skipped skipped: shared fixtures absent)")")")
done
end=$(date +%s)

echo "sanitize.sh: ASan+UBSan unit tests ($build; TRLX_SHARED_DIR=${TRLX_SHARED_DIR:-unset})"
printf '%s\n' "${summary[@]}"
echo "build $((built - start)) s, tests $((end - built)) s, total $((end - start)) s"
exit "$status"

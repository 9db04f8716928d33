// libFuzzer target: the accuracy rewards' answer checker (rewards/math_answer.hpp) on untrusted text.
//
// The checker reads model completions and dataset solutions: it searches
// them with its own regex engine, normalises the LaTeX it finds, parses
// numbers with exact big integers and compares them. An input holding a NUL
// byte is a solution (before it) and a completion (after it); otherwise
// byte 0 picks one of the gold solutions below and the rest is the
// completion, which is also searched as a solution. Nothing may throw:
// math::check is called by the rewards without a try, so an exception, a
// sanitizer report or a broken invariant below is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "rewards/math_answer.hpp"

namespace math = trlx::rewards::math;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// Gold solutions of the kinds datasets hold: GSM8K's "#### n", LaTeX
// fractions, thousands, percentages, equations, decimals, lists, and
// answers the checker cannot reproduce (roots).
const char* const kGolds[] = {
    "#### 42",
    R"($\frac{3}{4}$)",
    "The answer is 1,234.",
    "50%",
    "$x = 5$",
    "0.25",
    R"(\boxed{\frac{7}{2}})",
    "-12",
    "3/4",
    R"($\boxed{3, 4}$)",
    R"($\sqrt{2}$)",
    "0.333333",
    "#### 10000000000000000000000",
    "no number here",
};
constexpr size_t kGoldCount = sizeof(kGolds) / sizeof(kGolds[0]);

void grade(const std::string& solution, const std::string& completion) {
  math::Outcome o;
  try {
    o = math::check(solution, completion);
  } catch (...) {
    require(false);
  }
  require(o.verdict == math::Verdict::correct || o.verdict == math::Verdict::wrong ||
          o.verdict == math::Verdict::no_gold || o.verdict == math::Verdict::unsupported);
  std::string gold;
  try {
    gold = math::describe_gold(solution);
    (void)math::describe_answer(completion);
  } catch (...) {
    require(false);
  }
  // No gold is what the gold search finding nothing means.
  if (o.verdict == math::Verdict::no_gold) require(gold.rfind("none | ", 0) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  if (nul != std::string_view::npos) {
    grade(std::string(in.substr(0, nul)), std::string(in.substr(nul + 1)));
    return 0;
  }
  if (size == 0) return 0;
  const std::string text(in.substr(1));
  grade(kGolds[data[0] % kGoldCount], text);
  try {
    (void)math::describe_gold(text);
  } catch (...) {
    require(false);
  }
  return 0;
}

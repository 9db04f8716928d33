#pragma once
// Answer checking for the accuracy rewards (accuracy_reward,
// reasoning_accuracy_reward, get_cosine_scaled_reward).
//
// TRL grades these with the math_verify package: it pulls the gold answer out
// of the dataset's solution and the final answer out of the completion with a
// fixed set of prioritised patterns, normalises the LaTeX, parses it with
// SymPy and compares. trlx reproduces that pipeline exactly where the answers
// are numbers: the text search and LaTeX normalisation are reproduced in
// full, and the comparison covers integers, decimals, fractions (\frac,
// \dfrac, a/b), thousands separators, signs, percentages and `x = <number>`.
// Anything outside that (roots, symbols, intervals, matrices, ...) is
// reported as unsupported, and the rewards skip the completion rather than
// guess a score.
#include <string>

namespace trlx::rewards::math {

enum class Verdict {
  correct,      // math_verify's verify(gold, answer) holds
  wrong,        // it does not (including: the completion holds no answer)
  no_gold,      // the solution holds nothing math_verify recognises (TRL's None)
  unsupported,  // trlx cannot reproduce math_verify's result here
};

struct Outcome {
  Verdict verdict = Verdict::unsupported;
  // What was compared ("gold 1/3 vs answer 0.333333"), or why the case is
  // unsupported; for logs and tests.
  std::string detail;
};

// Grades `completion` against the gold `solution`, as math_verify does with
// the configuration of TRL's accuracy rewards: the solution parsed with
// math_verify's defaults, the completion searched for LaTeX only (a \boxed{}
// answer first, then "final answer is ...", "answer: ..."), first match only.
Outcome check(const std::string& solution, const std::string& completion);

// The steps, exposed for tests: each returns "<value> | <text>" where value
// is the parsed answer ("int 5", "rat 1/3", "float 0.5", "pct int 50",
// "none", "unsupported: ...") and text the normalised LaTeX math_verify
// would fall back to comparing as a string.
std::string describe_gold(const std::string& solution);
std::string describe_answer(const std::string& completion);

}  // namespace trlx::rewards::math

// The math answer checker's entry points: a completion graded against the solution as math_verify does.
#include "rewards/math_answer.hpp"

#include "rewards/math_answer/internal.hpp"

namespace trlx::rewards::math {

using namespace detail;

namespace {

const NormConfig kGoldNorm{true, true, true, NormConfig::kAll};
const NormConfig kAnswerNorm{true, false, false, NormConfig::kAll};

// math_verify's verdict for a gold number against what the completion
// yielded. Throws
// Unsupported where the SymPy result is not reproduced.
bool values_equal(const Num& gold, const Value& answer) {
  switch (answer.kind) {
    case Value::kNone: return false;
    case Value::kNum: return numbers_equal(gold, answer.num);
    case Value::kSet: {
      // A set dedupes structurally equal elements; a one-element set
      // compares as its element, a larger one never equals one number.
      std::vector<Num> unique;
      for (const Num& n : answer.set) {
        const bool seen = std::any_of(unique.begin(), unique.end(), [&](const Num& u) {
          return u.base == n.base && u.pct == n.pct && u.value == n.value && u.quotient == n.quotient;
        });
        if (!seen) unique.push_back(n);
      }
      if (unique.size() == 1) return numbers_equal(gold, unique[0]);
      // Set membership compares numerically; only values distinct even as
      // binary floats are certainly distinct members.
      for (size_t i = 0; i < unique.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (binary_value(unique[i]) == binary_value(unique[j])) throw Unsupported("a list of equal values");
      return false;
    }
    case Value::kUnsupported: throw Unsupported(answer.why);
  }
  return false;
}

}  // namespace

Outcome check(const std::string& solution, const std::string& completion) {
  const Search gold = search(from_utf8(solution), gold_patterns(), false, kGoldNorm);
  if (gold.value.kind == Value::kNone) {
    if (!gold.matched || gold.fallback.empty()) return {Verdict::no_gold, "no answer in the solution"};
    return {Verdict::unsupported, "solution '" + to_utf8(gold.fallback) + "' does not parse"};
  }
  const Search answer = search(from_utf8(completion), answer_patterns(), true, kAnswerNorm);
  const std::string compared = "gold " + describe(gold) + " vs answer " + describe(answer);
  // math_verify also compares the two fallback strings: equal texts are
  // a match whatever the values (\sqrt{2} and \sqrt{2}).
  const U32 gold_text = strip(gold.fallback), answer_text = strip(answer.fallback);
  const bool same_text = gold.fallback_certain && answer.fallback_certain && answer.matched &&
                         !gold_text.empty() && gold_text == answer_text;
  if (gold.value.kind != Value::kNum) {
    if (same_text) return {Verdict::correct, compared};
    const std::string why = gold.value.kind == Value::kUnsupported ? gold.value.why : "a list";
    return {Verdict::unsupported, "solution: " + why + " (" + compared + ")"};
  }
  if (!answer.matched) return {Verdict::wrong, "no answer in the completion"};
  try {
    // A gold `x = 5` compares by its right-hand side with a plain answer;
    // two equations compare as equations, which is not reproduced.
    if (gold.value.assignment && (answer.value.kind == Value::kSet || answer.value.assignment))
      throw Unsupported("an equation against an equation or a list");
    const bool equal = values_equal(gold.value.num, answer.value);
    return {equal || same_text ? Verdict::correct : Verdict::wrong, compared};
  } catch (const Unsupported& e) {
    if (same_text) return {Verdict::correct, compared};
    return {Verdict::unsupported, "answer: " + std::string(e.what()) + " (" + compared + ")"};
  }
}

std::string describe_gold(const std::string& solution) {
  return describe(search(from_utf8(solution), gold_patterns(), false, kGoldNorm));
}

std::string describe_answer(const std::string& completion) {
  return describe(search(from_utf8(completion), answer_patterns(), true, kAnswerNorm));
}

}  // namespace trlx::rewards::math

// math_verify's answer search: prioritised patterns over a solution or completion, and what each match yields.
#include "rewards/math_answer/internal.hpp"

namespace trlx::rewards::math::detail {
namespace {

// ---------------------------------------------------------- extraction ----
//
// math_verify's search: every pattern carries a priority; the patterns of
// the best priority that matches at all decide. Within a priority, matches
// are tried from the one ending last (then starting first).

// One LaTeX environment ($...$, $$...$$, \[...\], \(...\), [ ... ] between
// blanks, or a bare \frac of two numbers), optionally followed by a percent
// sign; `boxed` requires a \boxed{} inside (and drops the bare \frac).
std::string latex_env(const std::string& prefix, bool boxed) {
  const std::string dollar_display = R"((?:[^$]|\$(?!\$)))";
  const std::string bracket_display = R"((?:[^\\]|\\(?!\])))";
  const std::string dollar_inline = R"((?:\\[$]|[^\n$]))";
  const std::string paren_inline = R"((?:[^\\\n]|\\(?!\))))";
  const std::string bracket_inline = R"([^\n\]\[])";
  auto content = [&](const std::string& x) {
    return boxed ? x + "*?\\\\boxed{" + x + "+?}" + x + "*?" : x + "+?";
  };
  auto named = [&](const std::string& name, const std::string& body) {
    return "(?P<" + prefix + name + ">" + body + ")";
  };
  std::vector<std::string> alts = {
      R"((?<!\\)\$\$)" + named("latexDisplayDollar", content(dollar_display)) + R"((?<!\\)\$\$)",
      R"((?<!\\)\\\[)" + named("latexDisplayBracket", content(bracket_display)) + R"((?<!\\)\\\])",
      R"((?<!\\|\d)\$)" + named("latexInlineDollar", content(dollar_inline)) + R"((?<!\\)\$)",
      R"((?<!\\)\\\()" + named("latexInlineParenthesis", content(paren_inline)) + R"((?<!\\)\\\))",
      R"(\s\[)" + named("latexInlineBracket", content(bracket_inline)) + R"(\]\s)",
  };
  if (!boxed) {
    const std::string number = R"(-?\d+(?:[.,]\d+)?)";
    alts.push_back(named("latexFraction", "-?\\\\frac{" + number + "}{" + number + "}"));
  }
  std::string joined;
  for (size_t i = 0; i < alts.size(); ++i) joined += (i ? "|" : "") + alts[i];
  return "(?:(?:" + joined + R"()\s*)" + named("percent", R"((?:\\?%|[Pp]ercent|[Pp]ercentage|[Pp]ct))") + "?)";
}

// Up to six environments joined by "," / "and" / "or".
std::string latex_envs(bool boxed) {
  std::string re = latex_env("first_", boxed);
  for (int i = 1; i <= 5; ++i)
    re += std::string(boxed ? R"(\s*)" : "") + R"((?:\s*(?:,?and|,?or|,)\s*)" +
          latex_env("next" + std::to_string(i) + "_", boxed) + ")?";
  return boxed ? re : "(?:" + re + ")";
}

void add_latex_patterns(std::vector<Pattern>& out, bool without_anchor, int boxed_priority) {
  const std::string envs = latex_envs(false);
  out.push_back({Regex(R"((?i:final answer is)\:?\s*)" + envs + R"(\.?\s?I hope)", true), 0, true});
  out.push_back({Regex(R"((?i:final answer.{0,100}?)\s+is\:?\s*)" + envs, true), 50, true});
  out.push_back({Regex("(?i:answer):.{0,50}?" + envs, true), 100, true});
  out.push_back({Regex("(?i:answer).{0,50}?" + envs, true), 200, true});
  if (without_anchor) out.push_back({Regex(envs, true), 300, true});
  out.push_back({Regex(latex_envs(true), true), boxed_priority, true});
  out.push_back({Regex(R"((?P<first_latexBoxed>\\boxed{.+}))", true), boxed_priority, true});
}

void add_expr_patterns(std::vector<Pattern>& out) {
  const std::string number =
      R"((?<!\d)(?:(?P<integer1>-?[1-9]\d{0,2}(?:[ ,]\d{3})+)(?P<decimal1>\.\d+)?|)"
      R"((?P<integer2>-?\d+)(?P<decimal2>[.,]\d+)|(?P<decimal3>\.\d+)|(?P<integer3>-?\d+)))"
      R"((?P<percent>\s*(?:%|[Pp]ercent|\s*[Pp]ercentage|\s*[Pp]ct))?)";
  const std::string ops = R"(\+\-\*\×\/\^\(\)\÷)";
  const std::string expr_chars = R"([\d\.\s)" + ops + "]";
  const std::string expr = R"((?P<expr>-?\(?-?\d)" + expr_chars + "*[" + ops + "]" + expr_chars + R"(+\)?))";
  const std::string currency = "[$\u00a3\u00a5\u0e3f\u20a1-\u20bf]";
  const std::string prefix = R"((?:^|\s|\=)(?:\*\*)?)";
  const std::string suffix = R"((?:\*\*)?(?:\.|,|:|\s|\)|\$|$))";
  const std::string expr_anchored = "(?:" + prefix + expr + suffix + ")";
  const std::string number_anchored = "(?:" + prefix + currency + "?" + number + ")";
  const std::string either = "(?:" + expr_anchored + "|" + number_anchored + ")";
  out.push_back({Regex(R"((?i:final answer is)\:?\s*)" + either + R"(\.?\s?I hope)"), 0, false});
  out.push_back({Regex(R"((?i:final answer.{0,100}?)\s+is\:?)" + either), 50, false});
  out.push_back({Regex(R"((?i:answer):(?:.{0,100}=\s*|.{0,50}?))" + either + R"((?!\s*=))"), 100, false});
  out.push_back({Regex(R"((?i:answer)(?:.{0,100}=\s*|.{0,50}?))" + either + R"((?!\s*=))"), 200, false});
  out.push_back({Regex(expr_anchored), 300, false});
  out.push_back({Regex(number_anchored), 300, false});
}

std::vector<Pattern> sorted_by_priority(std::vector<Pattern> v) {
  std::stable_sort(v.begin(), v.end(), [](const Pattern& a, const Pattern& b) { return a.priority < b.priority; });
  return v;
}

}  // namespace

// math_verify's defaults, as TRL parses the gold solution.
const std::vector<Pattern>& gold_patterns() {
  static const std::vector<Pattern> p = [] {
    std::vector<Pattern> v;
    add_latex_patterns(v, true, 50);
    add_expr_patterns(v);
    return sorted_by_priority(std::move(v));
  }();
  return p;
}

// TRL's completion search: LaTeX only, \boxed first, no anchor-less match.
const std::vector<Pattern>& answer_patterns() {
  static const std::vector<Pattern> p = [] {
    std::vector<Pattern> v;
    add_latex_patterns(v, false, 0);
    return sorted_by_priority(std::move(v));
  }();
  return p;
}

namespace {

struct Extracted {
  Value value;
  U32 text;  // the string math_verify falls back to comparing
  // False when math_verify's fallback may differ from `text` (or its whole
  // search may fail), which rules out deciding by the text alone.
  bool text_certain = true;
};

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// One LaTeX match: every environment it holds, normalised and parsed;
// several become a set.
Extracted extract_latex(const Match& m, const NormConfig& base) {
  std::vector<std::pair<U32, std::string>> parts;  // text, group name
  auto first_of = [&](const std::string& prefix) {
    for (const auto& [name, g] : m.regex().names()) {
      if (!starts_with(name, prefix)) continue;
      const std::optional<U32> v = m.group(g);
      if (v && !v->empty()) return std::optional<std::pair<U32, std::string>>({*v, name});
    }
    return std::optional<std::pair<U32, std::string>>();
  };
  if (auto f = first_of("first_latex")) parts.push_back(*f);
  for (int i = 1; i <= 5; ++i)
    if (auto f = first_of("next" + std::to_string(i) + "_latex")) parts.push_back(*f);

  std::vector<Value> values;
  std::vector<U32> texts;
  for (const auto& [latex, name] : parts) {
    const std::string prefix = name.substr(0, name.find('_'));
    const std::string kind = name.substr(name.find('_') + 1);
    const std::optional<U32> pct = m.group(prefix + "_percent");
    NormConfig cfg = base;
    if (kind == "latexBoxed") cfg.boxed = NormConfig::kLast;
    const U32 norm = normalize_latex(latex, cfg);
    texts.push_back(norm);
    Value v;
    try {
      v = parse_latex(norm);
    } catch (const Unsupported& e) {
      v = unsupported(std::string(e.what()) + " in '" + to_utf8(norm) + "'");
    }
    if (pct && !pct->empty() && v.kind == Value::kNum) {
      if (v.num.pct || v.assignment) {
        v = unsupported("a percentage of a percentage or an equation");
      } else {
        v.num.pct = true;
      }
    }
    values.push_back(std::move(v));
  }
  if (values.empty()) return {};
  if (values.size() == 1) return {values[0], texts[0]};
  const bool all_parsed =
      std::all_of(values.begin(), values.end(), [](const Value& v) { return v.kind != Value::kNone; });
  if (!all_parsed) return {values[0], texts[0]};
  U32 joined;
  for (size_t i = 0; i < texts.size(); ++i) joined += (i ? U" and " : U"") + texts[i];
  // Whether math_verify parsed every part decides which text it falls back
  // to; with a part trlx cannot parse, neither text is certain.
  for (const Value& v : values)
    if (v.kind == Value::kUnsupported) return {v, U32(), false};
  Value set;
  set.kind = Value::kSet;
  for (const Value& v : values) {
    if (v.kind == Value::kNum && v.assignment) return {unsupported("a list of equations"), joined};
    if (v.kind == Value::kNum) set.set.push_back(v.num);
    for (const Num& n : v.set) set.set.push_back(n);
  }
  return {set, joined};
}

// A plain-text number or expression (the gold solution only).
Extracted extract_expr(const Match& m) {
  auto group = [&](const char* name) { return m.group(name).value_or(U32()); };
  U32 integer, decimal;
  for (const char* g : {"integer1", "integer2", "integer3"})
    if (integer.empty()) integer = group(g);
  for (const char* g : {"decimal1", "decimal2", "decimal3"})
    if (decimal.empty()) decimal = group(g);
  const bool pct = !group("percent").empty();
  const U32 expr = group("expr");
  Extracted out;
  if (!integer.empty() || !decimal.empty()) {
    U32 digits;
    for (char32_t c : integer)
      if (c != ',' && c != ' ') digits.push_back(c);
    size_t z = 0;
    while (z < digits.size() && digits[z] == '0') ++z;
    digits = digits.substr(z);
    if (digits.empty()) digits = U"0";
    U32 frac = replace_all(decimal, U",", U".");
    out.text = digits + frac;
    const bool negative = digits[0] == '-';
    const U32 int_digits = negative ? digits.substr(1) : digits;
    // SymPy's Number() rejects "-05"; math_verify's whole parse then fails.
    if (!all_ascii_digits(int_digits) || (int_digits.size() > 1 && int_digits[0] == '0') ||
        (!frac.empty() && !all_ascii_digits(frac.substr(1)))) {
      out.value = unsupported("the number '" + to_utf8(out.text) + "'");
      out.text_certain = false;
      return out;
    }
    Value v;
    v.kind = Value::kNum;
    try {
      v.num = frac.empty() ? make_exact(Rat(BigInt::from_digits(int_digits)))
                           : make_float(decimal_value(int_digits, frac.substr(1)));
    } catch (const Unsupported& e) {
      out.value = unsupported(e.what());
      return out;
    }
    if (negative) v.num.value = Rat(-v.num.value.num(), v.num.value.den());
    v.num.pct = pct;
    out.value = v;
    return out;
  }
  out.text = expr;
  if (expr.empty()) return out;
  // "a/b" is the one expression reproduced: SymPy keeps it as an unevaluated
  // product, which compares by value.
  static const Regex quotient(R"(^\s*(-?)\s*([0-9]+)\s*/\s*([0-9]+)\s*$)");
  const std::vector<Match> q = quotient.find_all(expr);
  if (q.empty()) {
    out.value = unsupported("the expression '" + to_utf8(expr) + "'");
    return out;
  }
  const U32 a = *q[0].group(2), b = *q[0].group(3);
  const bool zero_b = std::all_of(b.begin(), b.end(), [](char32_t c) { return c == '0'; });
  if ((a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0') || zero_b) {
    out.value = unsupported("the expression '" + to_utf8(expr) + "'");
    return out;
  }
  Rat r = Rat(BigInt::from_digits(a), BigInt::from_digits(b));
  if (!q[0].group(1)->empty()) r = Rat(-r.num(), r.den());
  out.value.kind = Value::kNum;
  out.value.num = make_exact(r);
  out.value.num.quotient = true;
  return out;
}

}  // namespace

Search search(const U32& text, const std::vector<Pattern>& patterns, bool first_match, const NormConfig& norm) {
  Search out;
  bool have_fallback = false;
  for (size_t g = 0; g < patterns.size();) {
    size_t end = g;
    while (end < patterns.size() && patterns[end].priority == patterns[g].priority) ++end;
    struct Hit {
      Match m;
      bool latex;
    };
    std::vector<Hit> hits;
    for (size_t k = g; k < end; ++k)
      for (Match& m : patterns[k].re.find_all(text)) hits.push_back({std::move(m), patterns[k].latex});
    std::stable_sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) {
      if (a.m.end() != b.m.end()) return a.m.end() > b.m.end();
      return a.m.start() < b.m.start();
    });
    for (const Hit& h : hits) {
      Extracted e = h.latex ? extract_latex(h.m, norm) : extract_expr(h.m);
      out.matched = true;
      if (!have_fallback && !e.text_certain) out.fallback_certain = false;
      if (!e.text.empty() && !have_fallback) {
        out.fallback = e.text;
        have_fallback = true;
      }
      if (e.value.kind != Value::kNone) {
        out.value = std::move(e.value);
        break;
      }
      if (first_match) break;
    }
    if (out.value.kind != Value::kNone || (out.matched && first_match)) break;
    g = end;
  }
  return out;
}

std::string describe(const Search& s) {
  std::string v;
  switch (s.value.kind) {
    case Value::kNone: v = "none"; break;
    case Value::kNum: v = (s.value.assignment ? "assignment " : "") + describe(s.value.num); break;
    case Value::kSet:
      v = "set";
      for (const Num& n : s.value.set) v += " [" + describe(n) + "]";
      break;
    case Value::kUnsupported: v = "unsupported: " + s.value.why; break;
  }
  return v + " | " + to_utf8(s.fallback);
}

}  // namespace trlx::rewards::math::detail

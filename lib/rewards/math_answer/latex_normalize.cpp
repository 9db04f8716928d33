// math_verify's LaTeX clean-up (boxed answers, \left/\right, units, malformed operators) before parsing.
#include "rewards/math_answer/internal.hpp"

namespace trlx::rewards::math::detail {
namespace {

// The unit words math_verify strips from the end of an answer ("5 cm" ->
// "5"); they are regular-expression fragments, joined as alternatives.
const char* const kUnitWords[] = {
  "integerpoint", "feet", "sue", "digit", "pound", "meal", "edge", "student", "children ticket",
  "multiple", "east", "degree", "mph", "kmph", "ft", "m square", " m east", "sq m", "deg", "mile",
  "q .", "monkey", "prime", "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per",
  "dm", "lt", "gain", "ab", "way", "west", "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .",
  "t", "h", "no change", "men", "soldier", "pie", "bc", "excess", "st", "inches", "noon", "cent",
  "by", "gal", "kmh", "c", "acre", "rise", "a . m", "th", "π r 2", "sq", "mark", "l", "toy",
  "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr", "women", "am", "pm", "hr", "cu cm",
  "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm", "number",
  "kmph", "day", "hour", "minute", "min", "second", "man", "woman", "sec", "cube", "mt", "sq inch",
  "mp", "∏ cm ³", "hectare", "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs", "kg", "g",
  "month", "km", "m", "cm", "mm", "apple", "liter", "loss", "yard", "pure", "year", "increase",
  "decrease", "d", "less", "Surface", "litre", "pi sq m", "s .", "metre", "meter", "inch",
};

const Regex& units_regex() {
  static const Regex re = [] {
    std::string alts;
    for (const char* w : kUnitWords) alts += (alts.empty() ? "" : "|") + std::string(w);
    return Regex(R"((\d|\}|\s)\s*(?:(?:)" + alts + R"()(?:s|es)?)\s*$)");
  }();
  return re;
}

// Boxed contents, found from the right: with `last`, only the last box and
// the boxes chained to it by short gaps or separators; otherwise every box.
U32 extract_boxed(const U32& text, bool last) {
  static const Regex separator(R"(\b(and|or)\b|,|;)");
  static const U32 kBoxed = U"\\boxed", kFbox = U"\\fbox";
  std::vector<U32> results;
  size_t current = text.size(), max_pos = text.size();
  std::optional<size_t> last_start;
  while (true) {
    const std::ptrdiff_t bi = rfind_before(text, kBoxed, current);
    const std::ptrdiff_t fi = rfind_before(text, kFbox, current);
    if (bi < 0 && fi < 0) break;
    const auto start = static_cast<size_t>(std::max(bi, fi));
    size_t next = start + (bi > fi ? 6 : 5);
    while (next < max_pos && py_space(text[next])) ++next;
    if (next >= max_pos) break;
    if (text[next] != '{') {
      if (results.empty()) results.push_back(text.substr(next));
      break;
    }
    std::optional<size_t> close;
    int depth = 1;
    for (size_t i = next; i + 1 < max_pos;) {
      ++i;
      if (text[i] == '{') {
        ++depth;
      } else if (text[i] == '}' && --depth == 0) {
        close = i;
        break;
      }
    }
    if (!close) {
      if (results.empty()) results.push_back(text.substr(next));
      break;
    }
    U32 content = strip(text.substr(next + 1, *close - next - 1));
    if (last && last_start) {
      const U32 prev = results.empty() ? U32() : results.back();
      const U32 between = *close + 1 < *last_start ? text.substr(*close + 1, *last_start - *close - 1) : U32();
      const bool chained =
          between.size() < 10 || (prev != content && between.size() < 70 && separator.search(between));
      if (!chained) break;
    }
    if (results.empty() || results.back() != content) results.push_back(std::move(content));
    last_start = start;
    max_pos = start;
    current = start;
  }
  if (results.empty()) return text;
  U32 out;
  for (size_t i = results.size(); i-- > 0;) {
    out += results[i];
    if (i) out += U',';
  }
  return out;
}

U32 fix_sqrt(const U32& text) {
  if (!contains(text, U"\\sqrt")) return text;
  const std::vector<U32> parts = split(text, U"\\sqrt");
  U32 out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const U32 s = lstrip(parts[i]);
    if (!s.empty() && s[0] != '{' && s[0] != '[') {
      out += U"\\sqrt{" + s.substr(0, 1) + U"}" + s.substr(1);
    } else {
      out += U"\\sqrt" + s;
    }
  }
  return out;
}

U32 fix_fracs(const U32& text) {
  const std::vector<U32> parts = split(text, U"\\frac");
  U32 out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const U32 s = lstrip(parts[i]);
    out += U"\\frac";
    if (!s.empty() && s[0] == '{') {
      out += s;
    } else if (s.size() < 2) {
      return text;
    } else if (s[1] != '{') {
      out += U"{" + s.substr(0, 1) + U"}{" + s.substr(1, 1) + U"}" + s.substr(2);
    } else {
      out += U"{" + s.substr(0, 1) + U"}" + s.substr(1);
    }
  }
  return out;
}

// "a/b" with a and b written as Python prints integers becomes \frac{a}{b}.
U32 fix_a_slash_b(const U32& text) {
  const std::vector<U32> parts = split(text, U"/");
  if (parts.size() != 2) return text;
  auto canonical_int = [](const U32& s) {
    size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
    if (i >= s.size() || !std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i), s.end(), ascii_digit)) return false;
    if (s[i] == '0') return s.size() == 1;  // "0" only: not "-0", not "01"
    return true;
  };
  if (!canonical_int(parts[0]) || !canonical_int(parts[1])) return text;
  return U"\\frac{" + parts[0] + U"}{" + parts[1] + U"}";
}

}  // namespace

U32 normalize_latex(U32 text, const NormConfig& cfg) {
  static const Regex left_re(
      R"(\\m?left(\\\{|\{|\\\||\||\[|\(|\\rbracl|\\lgroup|\\lbrace|\\lbrack|\\vert|\\lvert|)"
      R"(\\lceil|\\lfloor|\\vert|\\lvert|\\langle|\\llcorner|\\ulcorner))");
  static const Regex right_re(
      R"(\\m?right(\\\}|\}|\\\||\||\]|\)|\\rbrack|\\rgroup|\\rbrace|\\rbrack|\\vert|\\rvert|)"
      R"(\\rceil|\\rfloor|\\vert|\\rvert|\\rangle|\\lrcorner|\\urcorner))");
  static const Regex permutation_re(R"(\(([a-zA-Z0-9+\-*/\\ ]+?)\)_{([a-zA-Z0-9+\-*/\\ ]+?)})");
  static const Regex remove_re(
      R"(\\mathrm\{th\}|\\!\s*|\\text\s*\{\s*\}|\\\$|\$|(?<!\\)["']|\\displaystyle)");
  // One alternation, each alternative named after its replacement.
  static const std::vector<std::pair<std::string, U32>> replacements = {
      {R"(\\math(?:rm|it|bf))", U"\\text"},
      {R"(\\text(?:normal|bf|it|rm))", U"\\text"},
      {R"(\\(?:d|t|c)frac)", U"\\frac"},
      {R"(\s\.)", U" 0."},
      {R"(\{\.)", U"{0."},
      {R"(\~\=)", U"\\approx"},
      {R"(\s*\{\s*,\s*\})", U","},
      {R"((?<![a-zA-Z])(,?\s*(?:and|or))(?![a-zA-Z]))", U","},
      {R"((,?\s*\\text{\s*(?:and|or)\s*}))", U","},
      {R"((?<!\\)\\\s)", U" "},
      {R"(infinity)", U"\\infty"},
      {R"(,?(\\ldots))", U" "},
      {R"(\s*\bpercentage\b)", U"\\%"},
      {R"(\\text{percentage})", U"%"},
      {R"(\s*\bpercent\b)", U"\\%"},
      {R"(\\text{percent})", U"%"},
      {R"(\s*\bpct\b)", U"\\%"},
      {R"(\\text{pct})", U"%"},
      {R"(((?<!\\)inf(?!inity)))", U"\\infty"},
      {R"( sqrt)", U"\\sqrt"},
  };
  static const Regex replace_re = [] {
    std::string alts;
    for (size_t i = 0; i < replacements.size(); ++i)
      alts += (i ? "|" : "") + std::string("(?P<r") + std::to_string(i) + ">" + replacements[i].first + ")";
    return Regex(alts);
  }();
  static const Regex slash_fix_re(R"(\\\\(?=[a-zA-Z]))");
  static const Regex unit_superscript_re(R"((\\(?:text|mbox){.*?})(\^\d|\{\^\d\})?$)");
  static const std::vector<std::pair<Regex, U32>> malformed = [] {
    std::vector<std::pair<Regex, U32>> v;
    // The replacement's \1 and \2 are spelled $1 and $2 here.
    v.emplace_back(Regex(R"(\^\s?\((.*?)\))"), U"^{$1}");
    v.emplace_back(Regex(R"(sqrt\s?\((.*?)\))"), U"\\sqrt{$1}");
    v.emplace_back(Regex(R"(\\frac\s?(\d)\s?(\d+))"), U"\\frac{$1}{$2}");
    v.emplace_back(Regex(R"(\\log_\s?(\d)\s?(\d+))"), U"\\log_{$1}{$2}");
    v.emplace_back(Regex(R"(\\frac\s?{(.*?)}\s?(\d))"), U"\\frac{$1}{$2}");
    v.emplace_back(Regex(R"(\\frac\s?(\d)\s?{(.*?)})"), U"\\frac{$1}{$2}");
    v.emplace_back(Regex(R"(\\sqrt\s?(\d))"), U"\\sqrt{$1}");
    return v;
  }();
  auto group_or_empty = [](const Match& m, int g) { return m.group(g).value_or(U32()); };

  text = extract_boxed(text, cfg.boxed == NormConfig::kLast);

  text = replace_all(text, U"\\mathrm{T}", U"T");
  text = replace_all(text, U"\\mathrm{d}", U"d");
  text = replace_all(text, U"{\\rm d}", U"d");
  text = replace_all(text, U"\\left[\\begin{matrix}", U"\\begin{bmatrix}");
  text = replace_all(text, U"\\end{matrix}\\right]", U"\\end{bmatrix}");
  text = left_re.sub(text, [&](const Match& m) { return group_or_empty(m, 1); });
  text = right_re.sub(text, [&](const Match& m) { return group_or_empty(m, 1); });
  text = permutation_re.sub(text, [&](const Match& m) {
    const U32 a = group_or_empty(m, 1), b = group_or_empty(m, 2);
    return U"\\frac{(" + a + U")!}{((" + a + U")-(" + b + U"))!}";
  });
  text = remove_re.sub(text, U32());
  static const std::vector<int> replace_groups = [] {
    std::vector<int> g;
    for (size_t i = 0; i < replacements.size(); ++i)
      g.push_back(replace_re.group_index(std::string("r").append(std::to_string(i))));
    return g;
  }();
  text = replace_re.sub(text, [&](const Match& m) {
    for (size_t i = 0; i < replacements.size(); ++i)
      if (m.group(replace_groups[i])) return replacements[i].second;
    return U32();
  });
  text = replace_all(text, U"\n", U" ");
  text = replace_all(text, U"\t", U" ");
  if (!contains(text, U"matrix")) text = slash_fix_re.sub(text, U"\\");

  if (cfg.units) {
    const U32 no_text_unit = strip(unit_superscript_re.sub(text, U32()));
    if (!no_text_unit.empty() && no_text_unit != text) text = no_text_unit;
    for (int round = 0; round < 2; ++round) {
      const U32 no_unit = units_regex().sub(text, [&](const Match& m) { return group_or_empty(m, 1); });
      if (!no_unit.empty() && no_unit != text) text = no_unit;
    }
  }
  if (cfg.nits) {
    if (!text.empty() && text[0] == '.') text = U"0" + text;
    if (text == U"0.5") text = U"\\frac{1}{2}";
  }
  if (cfg.malformed_operators) {
    // Named references, not a structured binding: the lambda below uses the
    // template, and clang before 16 (the fuzz build's) cannot capture bindings.
    for (const auto& rule : malformed) {
      const Regex& re = rule.first;
      const U32& templ = rule.second;
      text = re.sub(text, [&](const Match& m) {
        U32 out;
        for (size_t i = 0; i < templ.size(); ++i) {
          if (templ[i] == '$' && i + 1 < templ.size()) {
            out += group_or_empty(m, static_cast<int>(templ[++i] - '0'));
          } else {
            out.push_back(templ[i]);
          }
        }
        return out;
      });
    }
    text = replace_all(text, U" sqrt", U"\\sqrt");
    text = fix_sqrt(text);
    text = fix_fracs(text);
    text = fix_a_slash_b(text);
  }
  return strip(text);
}

}  // namespace trlx::rewards::math::detail

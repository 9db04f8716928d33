// latex2sympy's grammar for numbers: a normalised LaTeX answer to a number, a set, or `unsupported`.
#include "rewards/math_answer/internal.hpp"

namespace trlx::rewards::math::detail {
namespace {

// ------------------------------------------------------- LaTeX parser ----
//
// The part of latex2sympy's grammar that numbers use: optional signs, a
// number, a percentage (`50\%`, `50 %`), \frac{a}{b} (\dfrac, \tfrac, \cfrac)
// of integers, a/b of integers, `1,000`-style thousands, and `x = <that>`.
// Whitespace and spacing commands are skipped as its lexer does.

struct Token {
  enum Kind {
    kNumber, kPercent, kSign, kDiv, kFrac, kOpen, kClose, kComma, kAssign, kLetter,
    kPeriod,  // a '.' outside a number, which no rule of the grammar accepts
    kDegree,  // ^\circ and its spellings: a no-op after a number
  } kind;
  U32 text;  // number digits, sign, letter
};

std::vector<Token> lex_latex(const U32& s) {
  std::vector<Token> out;
  size_t i = 0;
  const size_t n = s.size();
  auto ws = [](char32_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (i < n) {
    const char32_t c = s[i];
    if (ws(c)) {
      ++i;
    } else if (ascii_digit(c) || (c == '.' && i + 1 < n && ascii_digit(s[i + 1]))) {
      size_t j = i;
      while (j < n && ascii_digit(s[j])) ++j;
      if (j + 1 < n && s[j] == '.' && ascii_digit(s[j + 1])) {
        ++j;
        while (j < n && ascii_digit(s[j])) ++j;
      }
      Token t{Token::kNumber, s.substr(i, j - i)};
      if (j < n && s[j] == 'E') throw Unsupported("E-notation");
      // A percentage is one token: the number, at most one blank, the sign.
      size_t k = j;
      if (k < n && ws(s[k])) ++k;
      if (k < n && s[k] == '%') {
        t.kind = Token::kPercent;
        j = k + 1;
      } else if (k + 1 < n && s[k] == '\\' && s[k + 1] == '%') {
        t.kind = Token::kPercent;
        j = k + 2;
      }
      out.push_back(std::move(t));
      i = j;
    } else if (c == '+' || c == '-' || c == U'\u2212') {
      out.push_back({Token::kSign, U32(1, c == '+' ? U'+' : U'-')});
      ++i;
    } else if (c == '.') {
      out.push_back({Token::kPeriod, {}});
      ++i;
    } else if (c == '^') {
      // The longest spelling wins, as in the grammar's lexer.
      static const std::vector<U32> degrees = {U"^{\\circle}", U"^{\\degree}", U"^{\\circ}", U"^{\u00b0}",
                                               U"^\\circle",   U"^\\degree",   U"^\\circ",   U"^\u00b0"};
      size_t len = 0;
      for (const U32& d : degrees)
        if (s.compare(i, d.size(), d) == 0) {
          len = d.size();
          break;
        }
      if (len == 0) throw Unsupported("a power");
      out.push_back({Token::kDegree, {}});
      i += len;
    } else if (c == '/') {
      out.push_back({Token::kDiv, {}});
      ++i;
    } else if (c == '{' || c == '}') {
      out.push_back({c == '{' ? Token::kOpen : Token::kClose, {}});
      ++i;
    } else if (c == ',') {
      out.push_back({Token::kComma, {}});
      ++i;
    } else if (c == '=') {
      out.push_back({Token::kAssign, {}});
      ++i;
    } else if (c == '\\') {
      size_t j = i + 1;
      while (j < n && ascii_alpha(s[j])) ++j;
      const U32 cmd = s.substr(i + 1, j - i - 1);
      if (cmd.empty()) {
        // Spacing commands \, \: \; \! and an escaped dollar are skipped.
        const char32_t next = i + 1 < n ? s[i + 1] : 0;
        if (next == ',' || next == ':' || next == ';' || next == '!' || next == '$') {
          i += 2;
          continue;
        }
        throw Unsupported("a LaTeX symbol");
      }
      if (cmd == U"frac" || cmd == U"dfrac" || cmd == U"tfrac" || cmd == U"cfrac") {
        out.push_back({Token::kFrac, {}});
      } else if (cmd != U"quad" && cmd != U"qquad" && cmd != U"thinspace" && cmd != U"medspace" &&
                 cmd != U"thickspace" && cmd != U"negthinspace" && cmd != U"negmedspace" && cmd != U"negthickspace") {
        throw Unsupported("the LaTeX command \\" + to_utf8(cmd));
      }
      i = j;
    } else if (ascii_alpha(c)) {
      out.push_back({Token::kLetter, U32(1, c)});
      ++i;
    } else {
      throw Unsupported("the character '" + to_utf8(U32(1, c)) + "'");
    }
  }
  return out;
}

class LatexParser {
 public:
  explicit LatexParser(std::vector<Token> t) : t_(std::move(t)) {}
  // [letter =] signed-term [/ signed-term]
  Value parse() {
    Value v;
    v.kind = Value::kNum;
    if (t_.size() >= 2 && t_[0].kind == Token::kLetter && t_[1].kind == Token::kAssign) {
      // `e` and `E` are the constant and the exponent marker, not variables.
      if (t_[0].text[0] == 'e' || t_[0].text[0] == 'E') throw Unsupported("an equation in e");
      v.assignment = true;
      i_ = 2;
    }
    Num left = signed_term();
    if (i_ < t_.size() && t_[i_].kind == Token::kDiv) {
      ++i_;
      const Num right = signed_term();
      if (left.base != Num::kInt || right.base != Num::kInt || left.pct || right.pct)
        throw Unsupported("a quotient of non-integers");
      left = make_exact(left.value / right.value);
    }
    if (i_ != t_.size()) throw Unsupported("more than one number");
    v.num = left;
    return v;
  }

 private:
  Num signed_term() {
    bool negative = false;
    while (i_ < t_.size() && t_[i_].kind == Token::kSign) negative ^= t_[i_++].text[0] == '-';
    Num n = juxtaposed();
    if (negative) {
      if (n.pct) throw Unsupported("a negative percentage");
      n.value = Rat(-n.value.num(), n.value.den());
    }
    return n;
  }
  // Terms written side by side: latex2sympy reads an integer followed by a
  // positive rational as a mixed number (2 \frac{1}{2} is 5/2, and even
  // "2 3" is 5); any other juxtaposition is a product.
  Num juxtaposed() {
    std::vector<Num> items{degrees(term())};
    while (i_ < t_.size() && (t_[i_].kind == Token::kNumber || t_[i_].kind == Token::kPercent ||
                              t_[i_].kind == Token::kFrac))
      items.push_back(degrees(term()));
    Num v = items.back();
    for (size_t k = items.size() - 1; k-- > 0;) {
      const Num& whole = items[k];
      if (whole.base != Num::kInt || whole.pct || v.pct || v.base == Num::kFloat || v.value.sign() <= 0)
        throw Unsupported("a product");
      const Rat w = whole.value * Rat(v.value.den());
      const Rat part(v.value.num());
      v = make_exact((whole.value.sign() < 0 ? w - part : w + part) / Rat(v.value.den()));
    }
    return v;
  }
  // Degree marks leave the number as it is.
  Num degrees(Num n) {
    while (i_ < t_.size() && t_[i_].kind == Token::kDegree) ++i_;
    return n;
  }
  Num term() {
    if (i_ >= t_.size()) throw Unsupported("a missing number");
    const Token& t = t_[i_++];
    if (t.kind == Token::kNumber || t.kind == Token::kPercent) {
      Num n = number(t.text);
      n.pct = t.kind == Token::kPercent;
      return n;
    }
    if (t.kind == Token::kFrac) {
      const Num top = braced_integer();
      const Num bottom = braced_integer();
      return make_exact(top.value / bottom.value);
    }
    throw Unsupported("an expression");
  }
  Num braced_integer() {
    if (i_ >= t_.size() || t_[i_].kind != Token::kOpen) throw Unsupported("a \\frac without braces");
    ++i_;
    const Num n = signed_term();
    if (n.base != Num::kInt || n.pct) throw Unsupported("a \\frac of non-integers");
    if (i_ >= t_.size() || t_[i_].kind != Token::kClose) throw Unsupported("a \\frac of an expression");
    ++i_;
    return n;
  }
  static Num number(const U32& text) {
    const size_t dot = text.find('.');
    if (dot == U32::npos) return make_exact(Rat(BigInt::from_digits(text)));
    return make_float(decimal_value(text.substr(0, dot), text.substr(dot + 1)));
  }

  std::vector<Token> t_;
  size_t i_ = 0;
};

}  // namespace

// latex2sympy on a normalised string, for the forms above.
Value parse_latex(const U32& s) {
  if (s.empty()) return {};  // nothing to parse: latex2sympy fails
  const std::vector<Token> tokens = lex_latex(s);
  // Syntax errors latex2sympy certainly raises; with an '=' it would retry
  // on the last equation, which is not reproduced.
  if (s.find('=') == U32::npos) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i].kind == Token::kPeriod) return {};
      if (tokens[i].kind == Token::kFrac && (i + 1 == tokens.size() || tokens[i + 1].kind != Token::kOpen)) return {};
    }
  }
  const bool has_comma =
      std::any_of(tokens.begin(), tokens.end(), [](const Token& t) { return t.kind == Token::kComma; });
  if (has_comma) {
    // latex2sympy reads "1,000" (the whole string) as one number, and other
    // comma-separated numbers as a set.
    static const Regex thousands(R"(^\s*-?\d{1,3}(,\d{3})+(\.\d+)?\s*$)");
    if (!thousands.search(s)) {
      Value set;
      set.kind = Value::kSet;
      std::vector<Token> part;
      for (size_t i = 0; i <= tokens.size(); ++i) {
        if (i < tokens.size() && tokens[i].kind != Token::kComma) {
          part.push_back(tokens[i]);
          continue;
        }
        const Value v = LatexParser(std::move(part)).parse();
        if (v.assignment) throw Unsupported("a list with an equation");
        set.set.push_back(v.num);
        part.clear();
      }
      return set;
    }
    U32 t = s;
    if (!t.empty() && t[0] == '0') t = replace_all(t, U",", U".");
    U32 digits;
    for (char32_t c : t)
      if (c != ',' && c != ' ') digits.push_back(c);
    size_t z = 0;
    while (z < digits.size() && digits[z] == '0') ++z;
    digits = digits.substr(z);
    if (digits.empty()) digits = U"0";
    const bool negative = digits[0] == '-';
    const U32 body = negative ? digits.substr(1) : digits;
    const size_t dot = body.find('.');
    const U32 int_part = body.substr(0, dot == U32::npos ? body.size() : dot);
    if (!int_part.empty() && (!all_ascii_digits(int_part) || (int_part[0] == '0' && int_part.size() > 1)))
      throw Unsupported("a number SymPy rejects");
    Value v;
    v.kind = Value::kNum;
    if (dot == U32::npos) {
      v.num = make_exact(Rat(BigInt::from_digits(int_part)));
    } else {
      v.num = make_float(decimal_value(int_part, body.substr(dot + 1)));
    }
    if (negative) v.num.value = Rat(-v.num.value.num(), v.num.value.den());
    return v;
  }
  return LatexParser(tokens).parse();
}

}  // namespace trlx::rewards::math::detail

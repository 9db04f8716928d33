#pragma once
// Internals of the math answer checker (rewards/math_answer.hpp), shared by
// the files of rewards/math_answer/; nothing outside them includes this.
//
// math_verify works on Python strings with Python's `re` module; to select
// the same text it selects, these files carry a small backtracking regex
// engine with Python's semantics (leftmost-first alternation, lazy and
// greedy repeats, look-around, scoped case folding, Unicode \d \s \w) over
// code points, and writes the search patterns in that syntax. Numbers are
// exact (a small big-integer type): math_verify compares with SymPy, whose
// rounding and float-equality rules are reproduced in numbers.cpp, not
// approximated with doubles.
//
// The files, in pipeline order: text.cpp (UTF-8, Python's character classes
// and str methods), numbers.cpp (exact rationals, SymPy's number types and
// equality), regex.cpp (the regex engine), latex_normalize.cpp
// (math_verify's LaTeX clean-up), latex_parse.cpp (latex2sympy's grammar for
// numbers), extract.cpp (the answer search) and compare.cpp (the verdict).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// GCC 12 reports std::basic_string copies it inlines into these files as
// memcpy calls of 2^63 bytes that may overlap: -Wrestrict false positives.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace trlx::rewards::math::detail {

using U32 = std::u32string;

// ---------------------------------------------------------------- text ----
// text.cpp

U32 from_utf8(std::string_view s);
std::string to_utf8(const U32& s);

// Python's str.isspace(), which is also what `\s` matches in a str pattern.
bool py_space(char32_t c);
// Python's \d (Unicode decimal digits) and \w (str.isalnum() and '_').
bool py_digit(char32_t c);
bool py_word(char32_t c);
inline bool ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
inline bool ascii_alpha(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

U32 strip(const U32& s);
U32 lstrip(const U32& s);
inline bool contains(const U32& s, const U32& part) { return s.find(part) != U32::npos; }

// str.replace: every non-overlapping occurrence, left to right.
U32 replace_all(const U32& s, const U32& from, const U32& to);
std::vector<U32> split(const U32& s, const U32& sep);
// str.rfind(part, 0, end): the last start whose occurrence ends by `end`.
std::ptrdiff_t rfind_before(const U32& s, const U32& part, size_t end);

// A reason the grader cannot reproduce math_verify on some input.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ------------------------------------------------------------- numbers ----

// Just enough arbitrary-precision integer arithmetic for exact rationals.
class BigInt {
 public:
  BigInt() = default;
  BigInt(long long v) {  // NOLINT: implicit on purpose, for literals
    neg_ = v < 0;
    unsigned long long m = neg_ ? 0ull - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
    while (m) {
      mag_.push_back(static_cast<uint32_t>(m));
      m >>= 32;
    }
  }
  static BigInt from_digits(const U32& digits) {
    BigInt r;
    for (char32_t c : digits) r = r * BigInt(10) + BigInt(static_cast<long long>(c - '0'));
    return r;
  }
  static BigInt pow10(int k) {
    BigInt r(1);
    for (int i = 0; i < k; ++i) r = r * BigInt(10);
    return r;
  }
  bool is_zero() const { return mag_.empty(); }
  bool negative() const { return neg_; }
  BigInt abs() const {
    BigInt r = *this;
    r.neg_ = false;
    return r;
  }
  BigInt operator-() const {
    BigInt r = *this;
    if (!r.is_zero()) r.neg_ = !r.neg_;
    return r;
  }
  bool is_odd() const { return !mag_.empty() && (mag_[0] & 1); }
  int bit_length() const {
    if (mag_.empty()) return 0;
    int bits = static_cast<int>(mag_.size() - 1) * 32;
    for (uint32_t top = mag_.back(); top; top >>= 1) ++bits;
    return bits;
  }
  BigInt shl(int bits) const {
    if (is_zero() || bits == 0) return *this;
    BigInt r;
    r.neg_ = neg_;
    const int words = bits / 32, rest = bits % 32;
    r.mag_.assign(words, 0);
    uint32_t carry = 0;
    for (uint32_t w : mag_) {
      r.mag_.push_back(rest ? (w << rest) | carry : w);
      carry = rest ? w >> (32 - rest) : 0;
    }
    if (carry) r.mag_.push_back(carry);
    return r;
  }
  // The magnitude shifted right (the sign is kept; for gcd, on values >= 0).
  BigInt shr(int bits) const {
    const size_t words = static_cast<size_t>(bits / 32);
    const int rest = bits % 32;
    if (words >= mag_.size()) return BigInt();
    std::vector<uint32_t> m(mag_.begin() + static_cast<std::ptrdiff_t>(words), mag_.end());
    if (rest) {
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = (m[i] >> rest) | (i + 1 < m.size() ? m[i + 1] << (32 - rest) : 0);
    }
    return make(neg_, std::move(m));
  }
  // The number of zero bits below the lowest one bit (0 for zero).
  int trailing_zeros() const {
    for (size_t i = 0; i < mag_.size(); ++i)
      if (mag_[i]) return static_cast<int>(i) * 32 + __builtin_ctz(mag_[i]);
    return 0;
  }

  friend int cmp(const BigInt& a, const BigInt& b) {
    if (a.neg_ != b.neg_) return a.neg_ ? -1 : 1;
    const int m = cmp_mag(a.mag_, b.mag_);
    return a.neg_ ? -m : m;
  }
  friend bool operator==(const BigInt& a, const BigInt& b) { return cmp(a, b) == 0; }
  friend bool operator<(const BigInt& a, const BigInt& b) { return cmp(a, b) < 0; }
  friend BigInt operator+(const BigInt& a, const BigInt& b) {
    if (a.neg_ == b.neg_) return make(a.neg_, add_mag(a.mag_, b.mag_));
    const int m = cmp_mag(a.mag_, b.mag_);
    if (m == 0) return BigInt();
    return m > 0 ? make(a.neg_, sub_mag(a.mag_, b.mag_)) : make(b.neg_, sub_mag(b.mag_, a.mag_));
  }
  friend BigInt operator-(const BigInt& a, const BigInt& b) { return a + (-b); }
  friend BigInt operator*(const BigInt& a, const BigInt& b) {
    std::vector<uint32_t> r(a.mag_.size() + b.mag_.size(), 0);
    for (size_t i = 0; i < a.mag_.size(); ++i) {
      uint64_t carry = 0;
      for (size_t j = 0; j < b.mag_.size(); ++j) {
        const uint64_t cur = r[i + j] + static_cast<uint64_t>(a.mag_[i]) * b.mag_[j] + carry;
        r[i + j] = static_cast<uint32_t>(cur);
        carry = cur >> 32;
      }
      size_t k = i + b.mag_.size();
      while (carry) {
        const uint64_t cur = r[k] + carry;
        r[k++] = static_cast<uint32_t>(cur);
        carry = cur >> 32;
      }
    }
    return make(a.neg_ != b.neg_, std::move(r));
  }
  // Truncating division of magnitudes: |a| = q |b| + r.
  static void divmod_abs(const BigInt& a, const BigInt& b, BigInt& q, BigInt& r) {
    if (b.is_zero()) throw std::logic_error("division by zero");
    q = BigInt();
    r = BigInt();
    const BigInt bb = b.abs();
    std::vector<uint32_t> qm(a.mag_.size(), 0);
    for (int bit = a.bit_length() - 1; bit >= 0; --bit) {
      r = r.shl(1);
      if ((a.mag_[bit / 32] >> (bit % 32)) & 1) {
        if (r.mag_.empty()) r.mag_.push_back(0);
        r.mag_[0] |= 1;
      }
      if (cmp_mag(r.mag_, bb.mag_) >= 0) {
        r = r - bb;
        qm[bit / 32] |= 1u << (bit % 32);
      }
    }
    q = make(false, std::move(qm));
  }
  std::string str() const {
    if (is_zero()) return "0";
    std::string digits;
    std::vector<uint32_t> m = mag_;
    while (!m.empty()) {
      uint64_t rem = 0;
      for (size_t i = m.size(); i-- > 0;) {
        const uint64_t cur = (rem << 32) | m[i];
        m[i] = static_cast<uint32_t>(cur / 10);
        rem = cur % 10;
      }
      digits.push_back(static_cast<char>('0' + rem));
      while (!m.empty() && m.back() == 0) m.pop_back();
    }
    if (neg_) digits.push_back('-');
    std::reverse(digits.begin(), digits.end());
    return digits;
  }

 private:
  static BigInt make(bool neg, std::vector<uint32_t> m) {
    while (!m.empty() && m.back() == 0) m.pop_back();
    BigInt r;
    r.mag_ = std::move(m);
    r.neg_ = neg && !r.mag_.empty();
    return r;
  }
  static int cmp_mag(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
    for (size_t i = a.size(); i-- > 0;)
      if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
  }
  static std::vector<uint32_t> add_mag(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    std::vector<uint32_t> r;
    uint64_t carry = 0;
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const uint64_t cur = carry + (i < a.size() ? a[i] : 0) + (i < b.size() ? b[i] : 0);
      r.push_back(static_cast<uint32_t>(cur));
      carry = cur >> 32;
    }
    if (carry) r.push_back(static_cast<uint32_t>(carry));
    return r;
  }
  // |a| >= |b|.
  static std::vector<uint32_t> sub_mag(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    std::vector<uint32_t> r;
    int64_t borrow = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      int64_t cur = static_cast<int64_t>(a[i]) - borrow - (i < b.size() ? static_cast<int64_t>(b[i]) : 0);
      borrow = cur < 0;
      if (cur < 0) cur += (int64_t{1} << 32);
      r.push_back(static_cast<uint32_t>(cur));
    }
    return r;
  }

  bool neg_ = false;
  std::vector<uint32_t> mag_;  // little-endian 32-bit words, no leading zero words
};

BigInt gcd(BigInt a, BigInt b);

// An exact rational, always reduced, denominator positive.
class Rat {
 public:
  Rat() : num_(0), den_(1) {}
  Rat(BigInt n, BigInt d = BigInt(1)) : num_(std::move(n)), den_(std::move(d)) { normalize(); }  // NOLINT
  const BigInt& num() const { return num_; }
  const BigInt& den() const { return den_; }
  bool is_zero() const { return num_.is_zero(); }
  bool is_integer() const { return den_ == BigInt(1); }
  int sign() const { return num_.is_zero() ? 0 : (num_.negative() ? -1 : 1); }
  Rat abs() const { return Rat(num_.abs(), den_); }
  friend Rat operator+(const Rat& a, const Rat& b) { return Rat(a.num_ * b.den_ + b.num_ * a.den_, a.den_ * b.den_); }
  friend Rat operator-(const Rat& a, const Rat& b) { return Rat(a.num_ * b.den_ - b.num_ * a.den_, a.den_ * b.den_); }
  friend Rat operator*(const Rat& a, const Rat& b) { return Rat(a.num_ * b.num_, a.den_ * b.den_); }
  friend Rat operator/(const Rat& a, const Rat& b) { return Rat(a.num_ * b.den_, a.den_ * b.num_); }
  friend int cmp(const Rat& a, const Rat& b) { return cmp(a.num_ * b.den_, b.num_ * a.den_); }
  friend bool operator==(const Rat& a, const Rat& b) { return a.num_ == b.num_ && a.den_ == b.den_; }
  friend bool operator!=(const Rat& a, const Rat& b) { return !(a == b); }
  std::string str() const { return is_integer() ? num_.str() : num_.str() + "/" + den_.str(); }

 private:
  void normalize() {
    if (den_.is_zero()) throw Unsupported("division by zero");
    if (den_.negative()) {
      num_ = -num_;
      den_ = -den_;
    }
    const BigInt g = gcd(num_, den_);
    if (!(g == BigInt(1)) && !g.is_zero()) {
      BigInt q, r;
      BigInt::divmod_abs(num_, g, q, r);
      num_ = num_.negative() ? -q : q;
      BigInt::divmod_abs(den_, g, q, r);
      den_ = q;
    }
  }
  BigInt num_, den_;
};

// ------------------------------------------------------------ values ----
//
// The parsed answers trlx understands, with the SymPy type each would have,
// since math_verify's comparison depends on it (an Integer never equals a
// Float under SymPy's ==, a percentage is a product 50*(1/100), a plain-text
// "1/2" stays an unevaluated quotient, ...).

struct Num {
  enum Base { kInt, kRat, kFloat } base = kInt;
  Rat value;              // as written; for a percentage, the number before /100
  bool pct = false;       // n * (1/100), unevaluated
  bool quotient = false;  // plain-text a/b: an unevaluated product a * b^-1
};

Num make_exact(const Rat& r);
Num make_float(const Rat& r);
// The value a number stands for (a percentage: what it says over 100).
Rat effective(const Num& n);
std::string describe(const Num& n);
// A decimal literal as SymPy reads it: a Float with 53-bit precision when it
// has at most 15 significant digits (more would raise SymPy's precision,
// which is not reproduced).
Rat decimal_value(const U32& int_digits, const U32& frac_digits);
bool all_ascii_digits(const U32& s);
// The value SymPy computes in floating point when a Float takes part: a
// Float holds its decimal rounded to 53 bits, and a percentage of a Float is
// that times 1/100 (itself rounded), rounded again.
Rat binary_value(const Num& n);
// math_verify's equality of two numbers (gold first): structural
// equality, then its numeric comparison, then simplify(gold - answer) == 0.
bool numbers_equal(const Num& g, const Num& p);

// What one extraction yields.
struct Value {
  enum Kind {
    kNone,         // math_verify gets no expression (its parse fails)
    kNum,          // a number (for `x = 5`, the right-hand side)
    kSet,          // several numbers (a FiniteSet)
    kUnsupported,  // something trlx does not reproduce
  } kind = kNone;
  Num num;
  bool assignment = false;  // kNum from `x = <number>`
  std::vector<Num> set;
  std::string why;  // kUnsupported
};

Value unsupported(std::string why);

// --------------------------------------------------------------- regex ----
// regex.cpp: Python `re` semantics on code points (see there); the compiled
// program is held by Regex.

struct CharClass {
  bool negate = false;
  bool digit = false, space = false, word = false;
  std::vector<std::pair<char32_t, char32_t>> ranges;
  bool matches(char32_t c) const {
    bool in = (digit && py_digit(c)) || (space && py_space(c)) || (word && py_word(c));
    for (size_t i = 0; !in && i < ranges.size(); ++i) in = c >= ranges[i].first && c <= ranges[i].second;
    return in != negate;
  }
};

enum class Op : uint8_t { Char, Any, AnyNoNL, Class, Split, Jmp, Save, Bol, Eol, WordB, Look, Match };

struct Inst {
  Op op;
  bool flag = false;  // Char: fold; WordB, Look: negate
  char32_t ch = 0;
  int x = 0, y = 0;  // Split: preferred, other; Jmp: target; Save: slot; Class/Look: index; Look y: behind
};

struct Program {
  std::vector<Inst> code;
  std::vector<CharClass> classes;
  std::vector<std::shared_ptr<const Program>> looks;
  std::vector<int> look_width;
  std::vector<int> memo_slot;  // per instruction: index among the join points, or -1
  int memo_points = 0;
};

class Regex;

class Match {
 public:
  Match(const Regex* re, const U32* text, std::vector<int> caps) : re_(re), text_(text), caps_(std::move(caps)) {}
  size_t start() const { return static_cast<size_t>(caps_[0]); }
  size_t end() const { return static_cast<size_t>(caps_[1]); }
  // The group's text; nullopt when it did not take part (Python's None).
  std::optional<U32> group(int g) const {
    if (caps_[2 * g] < 0 || caps_[2 * g + 1] < 0) return std::nullopt;
    return text_->substr(static_cast<size_t>(caps_[2 * g]), static_cast<size_t>(caps_[2 * g + 1] - caps_[2 * g]));
  }
  std::optional<U32> group(std::string_view name) const;
  const Regex& regex() const { return *re_; }

 private:
  const Regex* re_;
  const U32* text_;
  std::vector<int> caps_;
};

class Regex {
 public:
  Regex(std::string_view pattern, bool dotall = false);
  // re.finditer: non-overlapping matches, left to right.
  std::vector<Match> find_all(const U32& text) const;
  bool search(const U32& text) const { return !find_all(text).empty(); }
  // re.sub with a function computing each replacement.
  U32 sub(const U32& text, const std::function<U32(const Match&)>& repl) const {
    U32 out;
    size_t last = 0;
    for (const Match& m : find_all(text)) {
      out.append(text, last, m.start() - last);
      out += repl(m);
      last = m.end();
    }
    out.append(text, last, U32::npos);
    return out;
  }
  U32 sub(const U32& text, const U32& with) const {
    return sub(text, [&](const Match&) { return with; });
  }
  int group_index(std::string_view name) const {
    for (const auto& [n, g] : names_)
      if (n == name) return g;
    return -1;
  }
  // Named groups in the order they appear in the pattern (Python's groupdict()).
  const std::vector<std::pair<std::string, int>>& names() const { return names_; }

 private:
  Program prog_;
  int groups_ = 0;
  std::vector<std::pair<std::string, int>> names_;
};

// ------------------------------------------------------- normalisation ----
// latex_normalize.cpp:
// math_verify's LaTeX clean-up before parsing, step by step;
// the result is also the text math_verify compares as a string when
// parsing fails, so it is reproduced exactly, not just "well enough".

struct NormConfig {
  bool units = true;
  bool malformed_operators = false;
  bool nits = false;
  enum Boxed { kAll, kLast } boxed = kAll;
};

U32 normalize_latex(U32 text, const NormConfig& cfg);

// ------------------------------------------------------- LaTeX parser ----
// latex_parse.cpp

// latex2sympy on a normalised string, for the forms latex_parse.cpp lists.
Value parse_latex(const U32& s);

// ---------------------------------------------------------- extraction ----
// extract.cpp

struct Pattern {
  Regex re;
  int priority;
  bool latex;  // else a plain-text number or expression
};

// math_verify's defaults, as TRL parses the gold solution.
const std::vector<Pattern>& gold_patterns();
// TRL's completion search: LaTeX only, \boxed first, no anchor-less match.
const std::vector<Pattern>& answer_patterns();

struct Search {
  bool matched = false;  // some pattern matched
  Value value;           // kNone when nothing parsed
  U32 fallback;          // the first match's text (empty: none)
  bool fallback_certain = true;
};

// math_verify's answer search. `first_match`: only the first
// match of the first priority that matches is tried (TRL's completion
// search); otherwise matches are tried until one parses (the gold).
Search search(const U32& text, const std::vector<Pattern>& patterns, bool first_match, const NormConfig& norm);
std::string describe(const Search& s);

}  // namespace trlx::rewards::math::detail

// Exact numbers for the math answer checker: big integers, rationals, SymPy's rounding and number equality.
#include "rewards/math_answer/internal.hpp"

#include <cmath>

namespace trlx::rewards::math::detail {

// Binary GCD (Stein's): shifts and subtractions, each step at least one bit
// shorter. Euclid's remainders cost a bit-by-bit division each, which made a
// fraction of two 1,000-digit numbers in a completion take seconds to reduce.
BigInt gcd(BigInt a, BigInt b) {
  a = a.abs();
  b = b.abs();
  if (a.is_zero()) return b;
  if (b.is_zero()) return a;
  const int common = std::min(a.trailing_zeros(), b.trailing_zeros());
  a = a.shr(a.trailing_zeros());
  while (true) {  // a is odd
    b = b.shr(b.trailing_zeros());
    if (b < a) std::swap(a, b);
    b = b - a;
    if (b.is_zero()) return a.shl(common);
  }
}

namespace {

Rat pow10(int k) { return k >= 0 ? Rat(BigInt::pow10(k)) : Rat(BigInt(1), BigInt::pow10(-k)); }

// The integer nearest to x, ties to even (Python's round()).
BigInt round_half_even(const Rat& x) {
  BigInt q, r;
  BigInt::divmod_abs(x.num(), x.den(), q, r);
  const int c = cmp(r.shl(1), x.den());
  if (c > 0 || (c == 0 && q.is_odd())) q = q + BigInt(1);
  return x.sign() < 0 ? -q : q;
}

// x rounded to a binary float with a `bits`-bit mantissa, nearest with ties
// to even: what mpmath (SymPy's Float) stores.
Rat round_to_bits(const Rat& x, int bits) {
  if (x.is_zero()) return x;
  const Rat a = x.abs();
  // 2^(e) scaling such that the mantissa a / 2^e has `bits` bits.
  int e = a.num().bit_length() - a.den().bit_length() - bits;
  auto scaled = [&](int ex) { return ex >= 0 ? Rat(a.num(), a.den().shl(ex)) : Rat(a.num().shl(-ex), a.den()); };
  Rat m = scaled(e);
  const BigInt top = BigInt(1).shl(bits);
  while (cmp(m, Rat(top)) >= 0) m = scaled(++e);
  BigInt mant = round_half_even(m);
  if (mant == top) {
    mant = BigInt(1).shl(bits - 1);
    ++e;
  }
  Rat v = e >= 0 ? Rat(mant.shl(e)) : Rat(mant, BigInt(1).shl(-e));
  return x.sign() < 0 ? Rat(-v.num(), v.den()) : v;
}

// mpmath's decimal-digits-to-bits conversion.
int dps_to_prec(int dps) {
  const double bits = (dps + 1) * 3.3219280948873626;
  const double r = std::nearbyint(bits);
  return std::max(1, static_cast<int>(r));
}

}  // namespace

Num make_exact(const Rat& r) {
  Num n;
  n.base = r.is_integer() ? Num::kInt : Num::kRat;
  n.value = r;
  return n;
}

Num make_float(const Rat& r) {
  Num n;
  n.base = Num::kFloat;
  n.value = r;
  return n;
}

Rat effective(const Num& n) { return n.pct ? n.value / Rat(BigInt(100)) : n.value; }

std::string describe(const Num& n) {
  std::string s = n.base == Num::kInt ? "int " : n.base == Num::kRat ? "rat " : "float ";
  if (n.quotient) s = "quotient ";
  if (n.pct) s = "pct " + s;
  return s + n.value.str();
}

// A decimal literal as SymPy reads it: a Float with 53-bit precision when it
// has at most 15 significant digits (more would raise SymPy's precision,
// which is not reproduced).
Rat decimal_value(const U32& int_digits, const U32& frac_digits) {
  U32 all = int_digits + frac_digits;
  size_t first = 0;
  while (first + 1 < all.size() && all[first] == '0') ++first;
  if (all.size() - first > 15) throw Unsupported("a decimal with more than 15 significant digits");
  return Rat(BigInt::from_digits(all), BigInt::pow10(static_cast<int>(frac_digits.size())));
}

bool all_ascii_digits(const U32& s) { return !s.empty() && std::all_of(s.begin(), s.end(), ascii_digit); }

namespace {

// SymPy's Expr.round(6) on a number, as math_verify's numeric comparison
// applies it when either side is a Float: the value, whether it is a Float,
// and its binary precision (Floats of different precision are unequal).
struct Rounded {
  bool is_float = false;
  Rat value;
  int prec = 0;
  bool operator==(const Rounded& o) const {
    return is_float == o.is_float && value == o.value && (!is_float || prec == o.prec);
  }
};

Rounded round6(bool is_float, const Rat& x) {
  if (x.is_zero()) return {is_float, Rat(), is_float ? 53 : 0};
  if (!is_float && x.is_integer()) return {false, x, 0};
  const Rat a = x.abs();
  int mag = static_cast<int>(a.num().str().size()) - static_cast<int>(a.den().str().size());
  while (cmp(a, pow10(mag)) >= 0) ++mag;
  while (cmp(a, pow10(mag - 1)) < 0) --mag;
  int allow = mag + 6;
  int dps = 15;
  if (is_float) {
    allow = std::min(allow, dps);
  } else {
    dps = std::max(15, allow);
  }
  const int shift = dps - mag;
  const BigInt xi = round_half_even(a * pow10(shift));
  BigInt xr = xi;
  if (shift > 6) xr = round_half_even(Rat(xi) / pow10(shift - 6)) * BigInt::pow10(shift - 6);
  Rat rv = Rat(xr) / pow10(shift);
  if (x.sign() < 0) rv = Rat(-rv.num(), rv.den());
  if (rv.is_integer()) return {true, round_to_bits(rv, dps_to_prec(dps)), dps_to_prec(dps)};
  if (allow == 0 && cmp(rv, x) > 0) allow = 1;
  if (allow < 0) throw Unsupported("rounding below SymPy's precision");
  const int prec = dps_to_prec(allow);
  return {true, round_to_bits(rv, prec), prec};
}

}  // namespace

// The value SymPy computes in floating point when a Float takes part: a
// Float holds its decimal rounded to 53 bits, and a percentage of a Float is
// that times 1/100 (itself rounded), rounded again.
Rat binary_value(const Num& n) {
  if (n.base != Num::kFloat) return round_to_bits(effective(n), 53);
  const Rat v = round_to_bits(n.value, 53);
  if (!n.pct) return v;
  return round_to_bits(v * round_to_bits(Rat(BigInt(1), BigInt(100)), 53), 53);
}

// math_verify's equality of two numbers (gold first): structural
// equality, then its numeric comparison, then simplify(gold - answer) == 0.
bool numbers_equal(const Num& g, const Num& p) {
  if (!g.quotient && !p.quotient && g.base == p.base && g.pct == p.pct && g.value == p.value) return true;
  const bool any_float = g.base == Num::kFloat || p.base == Num::kFloat;
  if (any_float) {
    // Both sides evaluated, then rounded to 6 decimals.
    const bool gf = g.base == Num::kFloat, pf = p.base == Num::kFloat;
    if (round6(gf, effective(g)) == round6(pf, effective(p))) return true;
    return binary_value(g) == binary_value(p);
  }
  if (g.base == Num::kInt && p.base == Num::kInt && !g.quotient && !p.quotient) {
    // Integers and integer percentages compare by the written integer
    // (9% equals 9), and then by value (100% equals 1).
    if (g.value == p.value) return true;
  }
  return effective(g) == effective(p);
}

Value unsupported(std::string why) {
  Value v;
  v.kind = Value::kUnsupported;
  v.why = std::move(why);
  return v;
}
}  // namespace trlx::rewards::math::detail

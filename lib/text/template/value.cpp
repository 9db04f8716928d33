// Python value semantics for the template engine: printing, equality,
// ordering, len(), iteration and json.dumps, byte-for-byte as CPython does them.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cwctype>
#include <locale.h>

#include "core/utf8.hpp"
#include "text/template/internal.hpp"

namespace trlx::text::tpl {

void throw_error(std::string msg) { throw RenderError(std::move(msg)); }

// ---------------------------------------------------------------- UTF-8

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    size_t n;
    if (c < 0x80) { cp = c; n = 1; }
    else if ((c >> 5) == 6) { cp = c & 0x1f; n = 2; }
    else if ((c >> 4) == 14) { cp = c & 0x0f; n = 3; }
    else if ((c >> 3) == 30) { cp = c & 0x07; n = 4; }
    else { out.push_back(0xFFFD); ++i; continue; }
    if (i + n > s.size()) { out.push_back(0xFFFD); ++i; continue; }
    bool ok = true;
    for (size_t k = 1; k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) { ok = false; break; }
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) { out.push_back(0xFFFD); ++i; continue; }
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) { append_utf8(out, c); }

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

bool utf8_is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t utf8_length(std::string_view s) {
  if (utf8_is_ascii(s)) return s.size();
  return utf8_decode(s).size();
}

bool py_isspace(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return true;
  if (c < 0x80) return false;
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Non-ASCII case mapping comes from glibc's C.UTF-8 locale (Unicode simple
// case mapping, as Python's); where that locale is missing, built-in tables
// cover Latin-1, Latin Extended-A, Greek and Cyrillic.
static locale_t utf8_locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return loc;
}

static char32_t table_upper(char32_t c);
static char32_t table_lower(char32_t c);

char32_t py_upper1(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (locale_t loc = utf8_locale()) return static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc));
  return table_upper(c);
}

char32_t py_lower1(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (locale_t loc = utf8_locale()) return static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc));
  return table_lower(c);
}

static char32_t table_upper(char32_t c) {
  if (c == 0xb5) return 0x39c;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
  if (c == 0xff) return 0x178;
  if (c >= 0x100 && c <= 0x17f) {
    if (c == 0x131) return 'I';
    if (c == 0x17f) return 'S';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x130 || c == 0x138 || c == 0x149) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 32;
  if (c == 0x3c2) return 0x3a3;
  if (c == 0x3ac) return 0x386;
  if (c >= 0x3ad && c <= 0x3af) return c - 37;
  if (c == 0x3cc) return 0x38c;
  if (c == 0x3cd || c == 0x3ce) return c - 63;
  if (c >= 0x430 && c <= 0x44f) return c - 32;
  if (c >= 0x450 && c <= 0x45f) return c - 80;
  return c;
}

static char32_t table_lower(char32_t c) {
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
  if (c == 0x178) return 0xff;
  if (c >= 0x100 && c <= 0x17f) {
    if (c == 0x130) return 'i';
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17f) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 32;
  if (c == 0x386) return 0x3ac;
  if (c >= 0x388 && c <= 0x38a) return c + 37;
  if (c == 0x38c) return 0x3cc;
  if (c == 0x38e || c == 0x38f) return c + 63;
  if (c >= 0x410 && c <= 0x42f) return c + 32;
  if (c >= 0x400 && c <= 0x40f) return c + 80;
  return c;
}

bool py_iscased(char32_t c) { return py_upper1(c) != c || py_lower1(c) != c || c == 0xdf; }

bool py_isalpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (locale_t loc = utf8_locale()) return iswalpha_l(static_cast<wint_t>(c), loc) != 0;
  if (py_iscased(c)) return true;
  // CJK, kana, hangul and the other large letter blocks.
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3040 && c <= 0x30ff) || (c >= 0xac00 && c <= 0xd7a3) ||
         (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x0600 && c <= 0x06ff && !(c >= 0x660 && c <= 0x669)) ||
         (c >= 0x0900 && c <= 0x097f) || (c >= 0x05d0 && c <= 0x05ea) || (c >= 0x0e01 && c <= 0x0e30);
}

bool py_isdigit(char32_t c) { return (c >= '0' && c <= '9'); }

bool py_isword(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) || c == '_';
  if (locale_t loc = utf8_locale()) return iswalnum_l(static_cast<wint_t>(c), loc) != 0;
  return py_isalpha(c);
}

static std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  if (utf8_is_ascii(s)) {
    for (char c : s) {
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      else if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
      out.push_back(c);
    }
    return out;
  }
  for (char32_t c : utf8_decode(s)) {
    if (upper && c == 0xdf) { out += "SS"; continue; }
    utf8_append(out, upper ? py_upper1(c) : py_lower1(c));
  }
  return out;
}
std::string py_upper(std::string_view s) { return map_case(s, true); }
std::string py_lower(std::string_view s) { return map_case(s, false); }

// One code point at s[pos...]; sets its byte length (1 for a malformed byte).
char32_t utf8_decode_at(std::string_view s, size_t pos, size_t& len) {
  unsigned char c = static_cast<unsigned char>(s[pos]);
  len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (len == 1 || pos + len > s.size()) {
    len = 1;
    return c < 0x80 ? c : 0xFFFD;
  }
  std::u32string u = utf8_decode(s.substr(pos, len));
  if (u.size() != 1) {
    len = 1;
    return 0xFFFD;
  }
  return u[0];
}

// Strips from the ends only, decoding just the code points it looks at: chat
// messages are long and templates strip them often.
std::string py_strip(std::string_view s, const Value* chars, bool left, bool right) {
  std::u32string set;
  bool ws = !chars || chars->is_none();
  if (!ws) {
    if (!chars->is_string()) throw_error("strip arg must be None or str");
    set = utf8_decode(chars->s);
  }
  auto strip_it = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t len;
      char32_t c = utf8_decode_at(s, b, len);
      if (!strip_it(c)) break;
      b += len;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && e - start < 4) --start;
      size_t len;
      char32_t c = utf8_decode_at(s, start, len);
      if (start + len != e) {  // malformed tail byte: treat it alone
        start = e - 1;
        c = 0xFFFD;
      }
      if (!strip_it(c)) break;
      e = start;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// ---------------------------------------------------------------- Dict

static bool key_equal(const Value& a, const Value& b) {
  if (a.kind == Kind::String && b.kind == Kind::String) return a.s == b.s;
  return py_equal(a, b);
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (key_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.kind == Kind::String && k.s == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items)
    if (key_equal(k, key)) {
      v = std::move(value);
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* Args::get(size_t index, std::string_view name) const {
  if (index < pos.size()) return &pos[index];
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

// (append() rather than "x" + str: GCC 12 gives a false -Wrestrict for the latter)
std::string Object::repr() const { return std::string("<").append(type_name()).append(" object>"); }
Value Object::call(Interp&, Args&) {
  throw_error(std::string("'").append(type_name()).append("' object is not callable"));
}
std::optional<Value> Object::getattr(const std::string&) const { return std::nullopt; }

// ---------------------------------------------------------------- printing

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-1.2345e+02": split into sign, digits and exponent.
  std::string sign;
  size_t p = 0;
  if (sci[0] == '-') { sign = "-"; p = 1; }
  size_t epos = sci.find('e');
  std::string digits;
  for (size_t k = p; k < epos; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  int exp = std::stoi(sci.substr(epos + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = sign;
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) { out += '.'; out += digits.substr(1); }
    out += 'e';
    out += exp < 0 ? '-' : '+';
    int ae = std::abs(exp);
    if (ae < 10) out += '0';
    out += std::to_string(ae);
    return out;
  }
  if (exp >= 0) {
    size_t ip = static_cast<size_t>(exp) + 1;
    if (digits.size() <= ip) {
      out += digits + std::string(ip - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, ip) + "." + digits.substr(ip);
    }
  } else {
    out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  }
  return out;
}

// Python's str.isprintable(), closely enough: control, format, separator
// (other than space), private-use and the noncharacters print as escapes.
static bool py_printable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return false;
  if (c < 0x7f) return true;
  if (c >= 0x80 && c <= 0xa0) return false;
  if (c == 0xad) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
      (c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb))
    return false;
  if (c >= 0xd800 && c <= 0xf8ff) return false;  // surrogates, private use
  if (c == 0xfffe || c == 0xffff) return false;
  if (c >= 0xf0000) return false;
  return true;
}

static std::string py_str_repr(std::string_view s) {
  bool has_sq = s.find('\'') != std::string_view::npos;
  bool has_dq = s.find('"') != std::string_view::npos;
  char q = (has_sq && !has_dq) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (!py_printable(c)) {
      char buf[16];
      if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else utf8_append(out, c);
  }
  out += q;
  return out;
}

std::string py_repr(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::String: return v.b ? "Markup(" + py_str_repr(v.s) + ")" : py_str_repr(v.s);
    case Kind::List:
    case Kind::Tuple: {
      bool tuple = v.kind == Kind::Tuple;
      std::string out = tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += ", ";
        out += py_repr((*v.list)[k]);
      }
      if (tuple && v.list->size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(k) + ": " + py_repr(val);
      }
      return out + "}";
    }
    case Kind::Namespace: {
      Value d = Value::make_dict(v.dict);
      return "<Namespace " + py_repr(d) + ">";
    }
    default: return py_str(v);
  }
}

std::string py_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return py_float_repr(v.f);
    case Kind::String: return v.s;
    case Kind::Iterator: return "<generator object>";
    case Kind::Object: return v.obj->repr();
    default: return py_repr(v);
  }
}

std::string py_type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Iterator: return "generator";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Object: return v.obj->type_name();
  }
  return "object";
}

// ---------------------------------------------------------------- semantics

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0.0;
    case Kind::String: return !v.s.empty();
    case Kind::List:
    case Kind::Tuple: return !v.list->empty();
    case Kind::Dict: return !v.dict->items.empty();
    default: return true;  // generators, namespaces and callables are always true
  }
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.s == b.s;
    case Kind::List:
    case Kind::Tuple: {
      if (a.list == b.list) return true;
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!py_equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !py_equal(v, *o)) return false;
      }
      return true;
    }
    case Kind::Namespace:
    case Kind::Iterator: return a.dict == b.dict && a.list == b.list;
    case Kind::Object: return a.obj == b.obj;
    default: return false;
  }
}

bool py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.kind == Kind::String && b.kind == Kind::String) return a.s < b.s;  // UTF-8 order is code point order
  if (a.kind == b.kind && (a.kind == Kind::List || a.kind == Kind::Tuple)) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      const Value& x = (*a.list)[k];
      const Value& y = (*b.list)[k];
      if (!py_equal(x, y)) return py_less(x, y);
    }
    return a.list->size() < b.list->size();
  }
  if (a.is_undefined() || b.is_undefined())
    throw_error(a.is_undefined() && !a.s.empty() ? a.s : (b.s.empty() ? "value is undefined" : b.s));
  throw_error("'<' not supported between instances of '" + py_type_name(a) + "' and '" +
              py_type_name(b) + "'");
}

int64_t py_len(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(utf8_length(v.s));
    case Kind::List:
    case Kind::Tuple: return static_cast<int64_t>(v.list->size());
    case Kind::Dict: return static_cast<int64_t>(v.dict->items.size());
    default: throw_error("object of type '" + py_type_name(v) + "' has no len()");
  }
}

List py_iterate(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::String: {
      List out;
      if (utf8_is_ascii(v.s)) {
        out.reserve(v.s.size());
        for (char c : v.s) out.push_back(Value::string(std::string(1, c)));
      } else {
        for (char32_t c : utf8_decode(v.s)) {
          std::string one;
          utf8_append(one, c);
          out.push_back(Value::string(std::move(one)));
        }
      }
      return out;
    }
    case Kind::Iterator:
      // A generator filter whose work failed: the error surfaces when it is consumed.
      if (!v.s.empty()) throw_error(v.s);
      return *v.list;
    case Kind::List:
    case Kind::Tuple: return *v.list;
    case Kind::Dict: {
      List out;
      out.reserve(v.dict->items.size());
      for (const auto& kv : v.dict->items) out.push_back(kv.first);
      return out;
    }
    default: throw_error("'" + py_type_name(v) + "' object is not iterable");
  }
}

// ---------------------------------------------------------------- json.dumps

static void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  auto esc_unit = [&](unsigned u) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", u);
    out += buf;
  };
  auto ascii = [&](unsigned char c) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) esc_unit(c);
        else out += static_cast<char>(c);
    }
  };
  if (!ensure_ascii || utf8_is_ascii(s)) {
    for (char ch : s) ascii(static_cast<unsigned char>(ch));
  } else {
    for (char32_t c : utf8_decode(s)) {
      if (c < 0x80) ascii(static_cast<unsigned char>(c));
      else if (c < 0x10000) esc_unit(static_cast<unsigned>(c));
      else {
        char32_t v = c - 0x10000;
        esc_unit(0xd800 + static_cast<unsigned>(v >> 10));
        esc_unit(0xdc00 + static_cast<unsigned>(v & 0x3ff));
      }
    }
  }
  out += '"';
}

static std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py_float_repr(d);
}

static std::string json_key(const Value& k) {
  switch (k.kind) {
    case Kind::String: return k.s;
    case Kind::Bool: return k.b ? "true" : "false";
    case Kind::None: return "null";
    case Kind::Int: return std::to_string(k.i);
    case Kind::Float: return json_float(k.f);
    default:
      throw_error("keys must be str, int, float, bool or None, not " + py_type_name(k));
  }
}

static void json_value(std::string& out, const Value& v, const JsonOptions& opt, int level) {
  auto newline = [&](int lvl) {
    out += '\n';
    for (int k = 0; k < lvl; ++k) out += *opt.indent;
  };
  if (level > 200) throw_error("maximum recursion depth exceeded in json.dumps");
  switch (v.kind) {
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += v.b ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(v.i); return;
    case Kind::Float: out += json_float(v.f); return;
    case Kind::String: json_string(out, v.s, opt.ensure_ascii); return;
    case Kind::List:
    case Kind::Tuple: {
      if (v.list->empty()) { out += "[]"; return; }
      out += '[';
      bool first = true;
      for (const Value& x : *v.list) {
        if (!first) out += opt.item_sep;
        first = false;
        if (opt.indent) newline(level + 1);
        json_value(out, x, opt, level + 1);
      }
      if (opt.indent) newline(level);
      out += ']';
      return;
    }
    case Kind::Dict: {
      if (v.dict->items.empty()) { out += "{}"; return; }
      std::vector<std::pair<std::string, const Value*>> entries;
      std::vector<const Value*> keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(&k);
      if (opt.sort_keys) {
        std::stable_sort(keys.begin(), keys.end(),
                         [](const Value* a, const Value* b) { return py_less(*a, *b); });
      }
      for (const Value* k : keys) entries.emplace_back(json_key(*k), v.dict->find(*k));
      out += '{';
      bool first = true;
      for (const auto& [k, x] : entries) {
        if (!first) out += opt.item_sep;
        first = false;
        if (opt.indent) newline(level + 1);
        json_string(out, k, opt.ensure_ascii);
        out += opt.key_sep;
        json_value(out, *x, opt, level + 1);
      }
      if (opt.indent) newline(level);
      out += '}';
      return;
    }
    default:
      throw_error("Object of type " + py_type_name(v) + " is not JSON serializable");
  }
}

std::string py_json_dumps(const Value& v, const JsonOptions& opt) {
  std::string out;
  json_value(out, v, opt, 0);
  return out;
}

}  // namespace trlx::text::tpl

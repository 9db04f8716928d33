// jinja2's filters and tests, the Python str/list/dict methods the sandbox
// allows, and the globals transformers adds (raise_exception, strftime_now,
// namespace, dict).
#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>

#include "text/template/interp.hpp"

namespace trlx::text::tpl {
namespace {

const Value kNone = Value::none();

std::string need_str(const Value* v, const char* what) {
  if (!v) throw_error(std::string("missing argument '") + what + "'");
  if (!v->is_string()) throw_error(std::string("argument '") + what + "' must be str, not " + py_type_name(*v));
  return v->s;
}

int64_t need_int(const Value* v, const char* what, int64_t dflt) {
  if (!v || v->is_none()) return dflt;
  if (!v->is_int_like()) throw_error(std::string("argument '") + what + "' must be an integer, not " + py_type_name(*v));
  return v->as_int();
}

bool opt_bool(const Value* v, bool dflt) { return v ? truthy(*v) : dflt; }

Value str_value(std::string s) { return Value::string(std::move(s)); }

// jinja2's attribute getter for map/selectattr/sort...: "a.b" and "0" parts.
Value get_path(Interp& in, const Value& item, const std::string& path, const Value* dflt = nullptr) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits && part.size() < 18) cur = in.getitem(cur, Value::integer(std::stoll(part)));
    else cur = in.getitem(cur, Value::string(part));
    if (dflt && cur.is_undefined()) cur = *dflt;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value attr_key(Interp& in, const Value& item, const Value* attribute) {
  if (!attribute || attribute->is_none()) return item;
  if (!attribute->is_string()) return in.getitem(item, *attribute);
  return get_path(in, item, attribute->s);
}

Value fold_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.s));
  return v;
}

// str.split / rsplit with Python's rules for sep=None.
List py_split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  List out;
  if (!sep || sep->is_none()) {
    std::u32string u = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t k = 0;
    while (k < u.size()) {
      while (k < u.size() && py_isspace(u[k])) ++k;
      if (k >= u.size()) break;
      size_t b = k;
      while (k < u.size() && !py_isspace(u[k])) ++k;
      words.emplace_back(b, k);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit) {
      if (!from_right) {
        size_t rest = words[static_cast<size_t>(maxsplit)].first;
        words.resize(static_cast<size_t>(maxsplit));
        for (auto& [b, e2] : words) out.push_back(Value::string(utf8_encode(u.substr(b, e2 - b))));
        out.push_back(Value::string(utf8_encode(u.substr(rest))));
        return out;
      }
      size_t keep_from = words.size() - static_cast<size_t>(maxsplit);
      size_t head_end = words[keep_from - 1].second;
      out.push_back(Value::string(utf8_encode(u.substr(0, head_end))));
      for (size_t w = keep_from; w < words.size(); ++w)
        out.push_back(Value::string(utf8_encode(u.substr(words[w].first, words[w].second - words[w].first))));
      return out;
    }
    for (auto& [b, e] : words) out.push_back(Value::string(utf8_encode(u.substr(b, e - b))));
    return out;
  }
  std::string sp = need_str(sep, "sep");
  if (sp.empty()) throw_error("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      size_t f = s.find(sp, pos);
      if (f == std::string::npos) break;
      parts.push_back(s.substr(pos, f - pos));
      pos = f + sp.size();
      ++n;
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t n = 0;
    std::vector<std::string> rev;
    while (maxsplit < 0 || n < maxsplit) {
      if (end < sp.size()) break;
      size_t f = s.rfind(sp, end - sp.size());
      if (f == std::string::npos) break;
      rev.push_back(s.substr(f + sp.size(), end - f - sp.size()));
      end = f;
      ++n;
    }
    rev.push_back(s.substr(0, end));
    parts.assign(rev.rbegin(), rev.rend());
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& neu, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = utf8_decode(s);
    int64_t n = 0;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || n < count) {
        out += neu;
        ++n;
      }
      if (k < u.size()) utf8_append(out, u[k]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += neu;
    pos = f + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python str.title(): a cased letter after a cased letter is lowered, any
// other letter is raised.
std::string py_title_method(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    if (prev_cased) utf8_append(out, py_lower1(c));
    else if (c == 0xdf) out += "Ss";
    else utf8_append(out, py_upper1(c));
    prev_cased = py_iscased(c);
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = utf8_decode(s);
  std::string out;
  for (size_t k = 0; k < u.size(); ++k) {
    if (k == 0 && u[k] == 0xdf) out += "Ss";
    else utf8_append(out, k == 0 ? py_upper1(u[k]) : py_lower1(u[k]));
  }
  return out;
}

// jinja2's title filter: capitalize each piece split on [-\s({\[<]+.
std::string jinja_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  std::string out;
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  size_t k = 0;
  while (k < u.size()) {
    size_t b = k;
    bool sep = is_sep(u[k]);
    while (k < u.size() && is_sep(u[k]) == sep) ++k;
    if (sep) {
      out += utf8_encode(u.substr(b, k - b));
    } else {
      out += py_upper(utf8_encode(u.substr(b, 1)));
      out += py_lower(utf8_encode(u.substr(b + 1, k - b - 1)));
    }
  }
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> lines;
  std::u32string u = utf8_decode(s);
  size_t b = 0, k = 0;
  while (k < u.size()) {
    char32_t c = u[k];
    bool br = c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e ||
              c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!br) {
      ++k;
      continue;
    }
    size_t e = k;
    ++k;
    if (c == '\r' && k < u.size() && u[k] == '\n') ++k;
    lines.push_back(utf8_encode(u.substr(b, (keepends ? k : e) - b)));
    b = k;
  }
  if (b < u.size()) lines.push_back(utf8_encode(u.substr(b)));
  return lines;
}

// Python's str.format for {} / {0} / {name} fields with !r / !s; format
// specs are not supported.
std::string py_format(Interp& in, const std::string& fmt, const Args& args) {
  std::string out;
  size_t auto_idx = 0;
  int numbering = 0;  // 1: automatic {} fields, 2: manual {0} fields
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}') {
        out.push_back('}');
        ++k;
        continue;
      }
      throw_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out.push_back('{');
      ++k;
      continue;
    }
    size_t e = k + 1;
    bool in_bracket = false;
    while (e < fmt.size() && (in_bracket || fmt[e] != '}')) {
      if (fmt[e] == '[') in_bracket = true;
      else if (fmt[e] == ']') in_bracket = false;
      else if (fmt[e] == '{' && !in_bracket) throw_error("unexpected '{' in field name");
      ++e;
    }
    if (e >= fmt.size()) throw_error(in_bracket ? "expected '}' before end of string" : "Single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, e - k - 1);
    k = e;
    char conv = 0;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      if (colon + 1 < field.size()) throw_error("format specs in str.format are not supported");
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) throw_error("expected ':' after conversion specifier");
      conv = field[bang + 1];
      if (conv != 'r' && conv != 's' && conv != 'a')
        throw_error(std::string("Unknown conversion specifier ") + conv);
      field = field.substr(0, bang);
    }
    std::string head = field, rest;
    size_t dot = field.find_first_of(".[");
    if (dot != std::string::npos) {
      head = field.substr(0, dot);
      rest = field.substr(dot);
    }
    Value v;
    if (head.empty()) {
      if (numbering == 2) throw_error("cannot switch from manual field specification to automatic field numbering");
      numbering = 1;
      if (auto_idx >= args.pos.size()) throw_error("Replacement index " + std::to_string(auto_idx) + " out of range");
      v = args.pos[auto_idx++];
    } else if (std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      if (numbering == 1) throw_error("cannot switch from automatic field numbering to manual field specification");
      numbering = 2;
      size_t idx = head.size() < 9 ? std::stoul(head) : SIZE_MAX;
      if (idx >= args.pos.size()) throw_error("Replacement index " + head + " out of range");
      v = args.pos[idx];
    } else {
      const Value* found = nullptr;
      for (const auto& [name, val] : args.kw)
        if (name == head) found = &val;
      if (!found) throw_error("KeyError: '" + head + "'");
      v = *found;
    }
    while (!rest.empty()) {
      if (rest[0] == '.') {
        size_t n = rest.find_first_of(".[", 1);
        v = in.getattr(v, rest.substr(1, n == std::string::npos ? std::string::npos : n - 1));
        rest = n == std::string::npos ? "" : rest.substr(n);
      } else {
        size_t close = rest.find(']');
        if (close == std::string::npos) throw_error("Missing ']' in format string");
        std::string key = rest.substr(1, close - 1);
        bool digits = !key.empty() && key.size() < 18 &&
                      std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        v = in.getitem(v, digits ? Value::integer(std::stoll(key)) : Value::string(key));
        rest = rest.substr(close + 1);
      }
    }
    out += conv == 'r' ? py_repr(v) : py_str(v);
    in.check_size(out.size());
  }
  return out;
}

Value parse_py_float(const std::string& text, bool& ok) {
  ok = false;
  std::string raw = py_strip(text, nullptr, true, true);
  std::string t;
  for (size_t k = 0; k < raw.size(); ++k) {
    if (raw[k] != '_') {
      t.push_back(raw[k]);
      continue;
    }
    // Python accepts an underscore only between two digits.
    bool ok_us = k > 0 && k + 1 < raw.size() && std::isdigit(static_cast<unsigned char>(raw[k - 1])) &&
                 std::isdigit(static_cast<unsigned char>(raw[k + 1]));
    if (!ok_us) return {};
  }
  std::string low = py_lower(t);
  std::string body = low;
  double sign = 1;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    if (body[0] == '-') sign = -1;
    body = body.substr(1);
  }
  if (body == "inf" || body == "infinity") {
    ok = true;
    return Value::number(sign * INFINITY);
  }
  if (body == "nan") {
    ok = true;
    return Value::number(NAN);
  }
  if (t.empty() || t.find_first_not_of("0123456789+-.eE") != std::string::npos) return {};
  char* end = nullptr;
  double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return {};
  ok = true;
  return Value::number(d);
}

std::optional<int64_t> parse_py_int(const std::string& text, int64_t base) {
  std::string t = py_strip(text, nullptr, true, true);
  std::string digits;
  bool neg = false;
  size_t k = 0;
  if (k < t.size() && (t[k] == '+' || t[k] == '-')) neg = t[k++] == '-';
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (k + 1 < t.size() && t[k] == '0') {
      char p = static_cast<char>(std::tolower(static_cast<unsigned char>(t[k + 1])));
      int64_t pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (pb && (base == 0 || base == pb)) {
        base = pb;
        k += 2;
      }
    }
    if (base == 0) base = 10;
  }
  if (base < 2 || base > 36) return std::nullopt;  // ValueError: the int filter falls back to its default
  bool last_us = true;
  for (; k < t.size(); ++k) {
    if (t[k] == '_') {
      if (last_us) return std::nullopt;
      last_us = true;
      continue;
    }
    digits.push_back(t[k]);
    last_us = false;
  }
  if (digits.empty() || last_us) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
  if (end != digits.c_str() + digits.size() || digits[0] == '+' || digits[0] == '-') return std::nullopt;
  if (errno == ERANGE) throw_error("integer overflow (beyond 64 bits)");
  return neg ? -v : v;
}

Value to_py_int_filter(const Value& v, const Value& dflt, int64_t base) {
  if (v.is_string()) {
    if (auto r = parse_py_int(v.s, base)) return Value::integer(*r);
    bool ok;
    Value f = parse_py_float(v.s, ok);
    if (ok && std::isfinite(f.f) && std::fabs(f.f) < 9.2e18) return Value::integer(static_cast<int64_t>(f.f));
    if (ok && std::isinf(f.f)) throw_error("cannot convert float infinity to integer");
    return dflt;
  }
  if (v.is_int_like()) return Value::integer(v.as_int());
  if (v.kind == Kind::Float) {
    if (std::isnan(v.f)) return dflt;
    if (std::isinf(v.f)) throw_error("cannot convert float infinity to integer");
    if (std::fabs(v.f) >= 9.2e18) throw_error("integer overflow (beyond 64 bits)");
    return Value::integer(static_cast<int64_t>(v.f));
  }
  return dflt;
}

Value py_round(const Value& v, int64_t precision, const std::string& method) {
  if (method != "common" && method != "ceil" && method != "floor")
    throw_error("method must be common, ceil or floor");
  if (!v.is_number()) throw_error("type " + py_type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int_like() && precision >= 0) return Value::integer(v.as_int());
    double x = v.as_double();
    if (!std::isfinite(x)) return Value::number(x);
    if (precision > 300) return Value::number(x);
    if (precision < -308) return Value::number(std::copysign(0.0, x));
    if (precision >= 0) {
      char buf[400];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
      double r = std::strtod(buf, nullptr);
      return v.is_int_like() ? Value::integer(static_cast<int64_t>(r)) : Value::number(r);
    }
    double p = std::pow(10.0, static_cast<double>(-precision));
    double y = x / p;
    double r = std::nearbyint(y) * p;
    return v.is_int_like() ? Value::integer(static_cast<int64_t>(r)) : Value::number(r);
  }
  double p = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * p;
  double r = (method == "ceil" ? std::ceil(x) : std::floor(x)) / p;
  return Value::number(r);
}

std::string indent_filter(const std::string& s0, const Value* width, bool first, bool blank) {
  std::string ind;
  if (width && width->is_string()) ind = width->s;
  else ind = std::string(static_cast<size_t>(std::clamp<int64_t>(need_int(width, "width", 4), 0, 1 << 16)), ' ');
  std::string s = s0 + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv += "\n" + ind;
      rv += lines[k];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t k = 1; k < lines.size(); ++k) {
        if (k > 1) rv += "\n";
        rv += lines[k].empty() ? lines[k] : ind + lines[k];
      }
    }
  }
  if (first) rv = ind + rv;
  return rv;
}

int64_t wordcount(const std::string& s) {
  int64_t n = 0;
  bool in = false;
  for (char32_t c : utf8_decode(s)) {
    bool w = py_isword(c);
    if (w && !in) ++n;
    in = w;
  }
  return n;
}

List sorted_by(Interp& in, List items, const Value* attribute, bool case_sensitive, bool reverse) {
  std::vector<std::pair<Value, size_t>> keys;
  for (size_t k = 0; k < items.size(); ++k)
    keys.emplace_back(fold_case(attr_key(in, items[k], attribute), case_sensitive), k);
  std::stable_sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) {
    return reverse ? py_less(b.first, a.first) : py_less(a.first, b.first);
  });
  List out;
  for (auto& [k, idx] : keys) out.push_back(items[idx]);
  return out;
}

Value min_max(Interp& in, const Value& v, const Args& args, bool want_max) {
  bool cs = opt_bool(args.get(0, "case_sensitive"), false);
  const Value* attribute = args.get(1, "attribute");
  List items = py_iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = fold_case(attr_key(in, items[0], attribute), cs);
  for (size_t k = 1; k < items.size(); ++k) {
    Value key = fold_case(attr_key(in, items[k], attribute), cs);
    if (want_max ? py_less(best_key, key) : py_less(key, best_key)) {
      best = k;
      best_key = key;
    }
  }
  return items[best];
}

// select / reject / selectattr / rejectattr
Value select_impl(Interp& in, const Value& v, const Args& args, bool use_attr, bool keep) {
  List out;
  // jinja2 looks at the arguments only for a non-empty sequence, and at the
  // test only when it applies it.
  if (!truthy(v)) return Value::make_list(std::move(out), Kind::Iterator);
  size_t off = 0;
  Value attr_value;
  if (use_attr) {
    if (args.pos.empty()) throw_error("Missing parameter for attribute name");
    attr_value = args.pos[0];
    off = 1;
  }
  bool has_test = args.pos.size() > off;
  Args targs;
  if (has_test) {
    targs.pos.assign(args.pos.begin() + static_cast<long>(off + 1), args.pos.end());
    targs.kw = args.kw;
  }
  for (const Value& item : py_iterate(v)) {
    Value x = use_attr ? attr_key(in, item, &attr_value) : item;
    bool r;
    if (has_test) {
      const Value& t = args.pos[off];
      if (!t.is_string() || !is_known_test(t.s)) throw_error("No test named " + py_repr(t) + ".");
      r = in.apply_test(t.s, x, targs);
    } else {
      r = truthy(x);
    }
    if (r == keep) out.push_back(item);
  }
  return Value::make_list(std::move(out), Kind::Iterator);
}

JsonOptions json_options(const Args& args, size_t first) {
  JsonOptions o;
  o.ensure_ascii = opt_bool(args.get(first, "ensure_ascii"), false);
  const Value* indent = args.get(first + 1, "indent");
  if (indent && !indent->is_none()) {
    if (indent->is_string()) o.indent = indent->s;
    else if (indent->is_int_like())
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent->as_int(), 0, 1 << 12)), ' ');
    else throw_error("indent must be an int or a str");
    o.item_sep = ",";
  }
  const Value* seps = args.get(first + 2, "separators");
  if (seps && !seps->is_none()) {
    if (!seps->is_listish() || seps->list->size() != 2 || !(*seps->list)[0].is_string() ||
        !(*seps->list)[1].is_string())
      throw_error("separators must be a pair of strings");
    o.item_sep = (*seps->list)[0].s;
    o.key_sep = (*seps->list)[1].s;
  }
  o.sort_keys = opt_bool(args.get(first + 3, "sort_keys"), false);
  return o;
}

// ---------------------------------------------------------------- globals

Value g_raise_exception(Interp&, Args& args) {
  const Value* m = args.get(0, "message");
  throw_error("\x01" + (m ? py_str(*m) : std::string()));
}

Value g_strftime_now(Interp&, Args& args) {
  std::string fmt = need_str(args.get(0, "format"), "format");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::vector<char> buf(256 + fmt.size() * 8);
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  return Value::string(std::string(buf.data(), n));
}

Value g_namespace(Interp& in, Args& args) {
  auto d = std::make_shared<Dict>();
  in.track(d);
  for (const Value& p : args.pos) {
    if (p.kind == Kind::Dict) {
      for (const auto& kv : p.dict->items) d->set(kv.first, kv.second);
    } else if (p.is_listish()) {
      for (const Value& pair : *p.list) {
        List kv = py_iterate(pair);
        if (kv.size() != 2) throw_error("dictionary update sequence element has wrong length");
        d->set(kv[0], kv[1]);
      }
    } else {
      throw_error("'" + py_type_name(p) + "' object is not iterable");
    }
  }
  for (const auto& [k, v] : args.kw) d->set(Value::string(k), v);
  for (const auto& [k, v] : d->items)
    if (k.is_string() && !k.s.empty() && k.s[0] == '_')
      throw_error("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k.s + "'.");
  return Value::make_dict(d, Kind::Namespace);
}

Value g_dict(Interp& in, Args& args) {
  Value ns = g_namespace(in, args);
  ns.kind = Kind::Dict;
  return ns;
}

Value g_range(Interp&, Args& args) {
  int64_t start = 0, stop, stepv = 1;
  if (args.pos.size() == 1) stop = need_int(&args.pos[0], "stop", 0);
  else if (args.pos.size() == 2 || args.pos.size() == 3) {
    start = need_int(&args.pos[0], "start", 0);
    stop = need_int(&args.pos[1], "stop", 0);
    if (args.pos.size() == 3) stepv = need_int(&args.pos[2], "step", 1);
  } else {
    throw_error("range expected 1 to 3 arguments");
  }
  if (stepv == 0) throw_error("range() arg 3 must not be zero");
  List out;
  for (int64_t k = start; stepv > 0 ? k < stop : k > stop; k += stepv) {
    if (out.size() >= 100000)
      throw_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.push_back(Value::integer(k));
    if ((stepv > 0 && k > INT64_MAX - stepv) || (stepv < 0 && k < INT64_MIN - stepv)) break;
  }
  return Value::make_list(std::move(out));
}

struct BuiltinObj : Object {
  std::string name;
  Value (*fn)(Interp&, Args&);
  std::string type_name() const override { return "function"; }
  std::string repr() const override { return "<function " + name + ">"; }
  bool callable() const override { return true; }
  Value call(Interp& in, Args& args) override { return fn(in, args); }
};

// Parameter names after the value, for the filters with a fixed signature;
// passing others is a TypeError in jinja2, so it is an error here too.
struct Signature {
  const char* name;
  std::vector<const char*> params;
  size_t required = 0;
};
const std::vector<Signature>& signatures() {
  static const std::vector<Signature> sigs = {
      {"abs", {}}, {"attr", {"name"}, 1}, {"batch", {"linecount", "fill_with"}, 1}, {"capitalize", {}},
      {"center", {"width"}}, {"count", {}}, {"length", {}}, {"d", {"default_value", "boolean"}},
      {"default", {"default_value", "boolean"}}, {"dictsort", {"case_sensitive", "by", "reverse"}},
      {"e", {}}, {"escape", {}}, {"forceescape", {}}, {"first", {}}, {"last", {}}, {"float", {"default"}},
      {"indent", {"width", "first", "blank"}}, {"int", {"default", "base"}}, {"items", {}},
      {"join", {"d", "attribute"}}, {"list", {}}, {"lower", {}}, {"upper", {}}, {"title", {}},
      {"max", {"case_sensitive", "attribute"}}, {"min", {"case_sensitive", "attribute"}},
      {"replace", {"old", "new", "count"}, 2}, {"reverse", {}}, {"round", {"precision", "method"}},
      {"safe", {}}, {"sort", {"reverse", "case_sensitive", "attribute"}}, {"string", {}},
      {"sum", {"attribute", "start"}}, {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}},
      {"trim", {"chars"}}, {"unique", {"case_sensitive", "attribute"}}, {"wordcount", {}},
      // tests
      {"t:divisibleby", {"num"}, 1}, {"t:sameas", {"other"}, 1}, {"t:in", {"seq"}, 1},
  };
  return sigs;
}

void check_signature(const std::string& key, const Args& args, const char* what) {
  for (const auto& sig : signatures()) {
    if (key != sig.name) continue;
    std::string name = key.rfind("t:", 0) == 0 ? key.substr(2) : key;
    if (args.pos.size() > sig.params.size())
      throw_error(std::string(what) + " '" + name + "' takes at most " + std::to_string(sig.params.size()) +
                  " argument(s), got " + std::to_string(args.pos.size()));
    for (const auto& [k, v] : args.kw) {
      bool found = false;
      for (size_t i = 0; i < sig.params.size(); ++i)
        if (k == sig.params[i]) {
          if (i < args.pos.size()) throw_error(std::string(what) + " '" + name + "' got multiple values for argument '" + k + "'");
          found = true;
        }
      if (!found) throw_error(std::string(what) + " '" + name + "' got an unexpected keyword argument '" + k + "'");
    }
    for (size_t i = 0; i < sig.required; ++i)
      if (!args.get(i, sig.params[i]))
        throw_error(std::string(what) + " '" + name + "' is missing the required argument '" + sig.params[i] + "'");
    return;
  }
}

// jinja2's map/select/... are generators: their errors surface when the
// result is consumed, not when the filter is applied.
template <class F>
Value lazily(F&& f) {
  try {
    return f();
  } catch (const RenderError& e) {
    Value v = Value::make_list({}, Kind::Iterator);
    v.s = e.what();
    if (v.s.empty()) v.s = "error";
    return v;
  }
}

bool need_reverse(const Value* v) {
  if (!v) return false;
  if (!v->is_int_like()) throw_error("'" + py_type_name(*v) + "' object cannot be interpreted as an integer");
  return v->as_int() != 0;
}

const char* const kFilters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "first", "float", "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list",
    "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique", "upper", "wordcount"};

const char* const kTests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
    "float", "ge", "gt", "greaterthan", "in", "integer", "iterable", "le", "lessthan", "lower", "lt",
    "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined",
    "upper", "==", "!=", "<", "<=", ">", ">="};

// jinja2 rejects unknown filters and tests when it compiles the template,
// except inside an if statement or a conditional expression (a "soft" frame,
// reset by loops, macros and blocks): there they fail only when they run.
void check_node(const Node& n, bool soft) {
  if (!soft && n.kind == NK::Filter && !is_known_filter(n.name)) {
    throw SyntaxError("No filter named '" + n.name + "'.", n.line, 0);
  }
  if (!soft && n.kind == NK::Test && !is_known_test(n.name)) {
    throw SyntaxError("No test named '" + n.name + "'.", n.line, 0);
  }
  auto visit = [](const NodeP& p, bool s) {
    if (p) check_node(*p, s);
  };
  auto visit_all = [](const Nodes& list, bool s) {
    for (const auto& c : list)
      if (c) check_node(*c, s);
  };
  switch (n.kind) {
    case NK::If:
    case NK::CondExpr:
      visit(n.a, true);
      visit(n.b, true);
      visit(n.c, true);
      visit_all(n.body, true);
      visit_all(n.else_body, true);
      return;
    case NK::For:
      visit(n.a, soft);
      visit(n.b, false);
      visit_all(n.body, false);
      visit_all(n.else_body, soft);
      return;
    case NK::Macro:
      visit_all(n.kwitems, false);
      visit_all(n.body, false);
      return;
    case NK::CallBlock:
      visit(n.a, soft);
      visit_all(n.kwitems, false);
      visit_all(n.body, false);
      return;
    case NK::FilterBlock:
    case NK::SetBlock:
      visit(n.a, soft);
      visit_all(n.body, false);
      return;
    case NK::With:
      visit_all(n.items, soft);
      visit_all(n.body, false);
      return;
    case NK::Generation:
      visit_all(n.body, false);
      return;
    default:
      break;
  }
  for (const NodeP* p : {&n.a, &n.b, &n.c, &n.dyn_args, &n.dyn_kwargs}) visit(*p, soft);
  for (const Nodes* list : {&n.items, &n.kwitems, &n.body, &n.else_body}) visit_all(*list, soft);
}

}  // namespace

bool is_known_filter(const std::string& name) {
  for (const char* f : kFilters)
    if (name == f) return true;
  return false;
}

bool is_known_test(const std::string& name) {
  for (const char* t : kTests)
    if (name == t) return true;
  return false;
}

void check_names(const Nodes& body) {
  for (const auto& n : body) check_node(*n, false);
}

Value make_builtin(std::string name, Value (*fn)(Interp&, Args&)) {
  auto b = std::make_shared<BuiltinObj>();
  b->name = std::move(name);
  b->fn = fn;
  return Value::object(b);
}

std::shared_ptr<Scope> make_globals() {
  auto g = std::make_shared<Scope>();
  g->set("raise_exception", make_builtin("raise_exception", g_raise_exception));
  g->set("strftime_now", make_builtin("strftime_now", g_strftime_now));
  g->set("namespace", make_builtin("namespace", g_namespace));
  g->set("dict", make_builtin("dict", g_dict));
  g->set("range", make_builtin("range", g_range));
  return g;
}

// ---------------------------------------------------------------- filters

Value Interp::apply_filter(const std::string& name, const Value& v, Args& args) {
  step();
  check_signature(name, args, "filter");
  const std::string& f = name;
  if (f == "map" || f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr" || f == "unique" ||
      f == "batch" || f == "items") {
    return lazily([&] { return generator_filter(name, v, args); });
  }
  auto s_of = [&]() { return v.is_string() ? v.s : py_str(v); };
  if (f == "trim") return str_value(py_strip(s_of(), args.get(0, "chars"), true, true));
  if (f == "tojson") {
    std::string out = py_json_dumps(v, json_options(args, 0));
    check_size(out.size());
    return str_value(std::move(out));
  }
  if (f == "length" || f == "count") {
    if (v.kind == Kind::Namespace || v.kind == Kind::Object || v.kind == Kind::Iterator || !(v.is_undefined() || v.is_string() || v.is_listish() || v.is_mapping()))
      throw_error("object of type '" + py_type_name(v) + "' has no len()");
    return Value::integer(py_len(v));
  }
  if (f == "join") {
    std::string sep = args.get(0, "d") ? py_str(*args.get(0, "d")) : "";
    const Value* attribute = args.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : py_iterate(v)) {
      if (!first) out += sep;
      first = false;
      Value x = attribute ? attr_key(*this, item, attribute) : item;
      out += x.is_string() ? x.s : py_str(x);
      check_size(out.size());
    }
    return str_value(std::move(out));
  }
  if (f == "default" || f == "d") {
    const Value* dv = args.get(0, "default_value");
    bool boolean = opt_bool(args.get(1, "boolean"), false);
    if (v.is_undefined() || (boolean && !truthy(v))) return dv ? *dv : Value::string("");
    return v;
  }
  if (f == "upper") return str_value(py_upper(s_of()));
  if (f == "lower") return str_value(py_lower(s_of()));
  if (f == "title") return str_value(jinja_title(s_of()));
  if (f == "capitalize") return str_value(py_capitalize(s_of()));
  if (f == "string") return str_value(s_of());
  // Markup: |safe marks a string, |e escapes it once (escaping Markup again
  // is a no-op), |forceescape always escapes.
  auto markup = [](std::string text) {
    Value r = Value::string(std::move(text));
    r.b = true;
    return r;
  };
  if (f == "safe") return v.is_string() && v.b ? v : markup(s_of());
  if (f == "escape" || f == "e") return v.is_string() && v.b ? v : markup(html_escape(s_of()));
  if (f == "forceescape") return markup(html_escape(s_of()));
  if (f == "first") {
    if (v.kind == Kind::String || v.is_listish() || v.is_mapping() || v.is_undefined()) {
      List items = py_iterate(v);
      if (items.empty()) return Value::undefined("No first item, sequence was empty.");
      return items[0];
    }
    throw_error("'" + py_type_name(v) + "' object is not iterable");
  }
  if (f == "last") {
    if (v.kind == Kind::Iterator) throw_error("'generator' object is not reversible");
    List items = py_iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (f == "list") return Value::make_list(py_iterate(v));
  if ((f == "int" || f == "float") && v.is_undefined()) throw_error(v.s.empty() ? "value is undefined" : v.s);
  if (f == "int") {
    Value dflt = args.get(0, "default") ? *args.get(0, "default") : Value::integer(0);
    return to_py_int_filter(v, dflt, need_int(args.get(1, "base"), "base", 10));
  }
  if (f == "float") {
    Value dflt = args.get(0, "default") ? *args.get(0, "default") : Value::number(0.0);
    if (v.is_number()) return Value::number(v.as_double());
    if (v.is_string()) {
      bool ok;
      Value r = parse_py_float(v.s, ok);
      return ok ? r : dflt;
    }
    return dflt;
  }
  if (f == "abs") {
    if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
    if (v.is_int_like()) {
      if (v.as_int() == INT64_MIN) throw_error("integer overflow (beyond 64 bits)");
      return Value::integer(std::llabs(v.as_int()));
    }
    throw_error("bad operand type for abs(): '" + py_type_name(v) + "'");
  }
  if (f == "round") {
    const Value* m = args.get(1, "method");
    return py_round(v, need_int(args.get(0, "precision"), "precision", 0), m ? need_str(m, "method") : "common");
  }
  if (f == "replace") {
    std::string s = s_of();
    const Value* ov = args.get(0, "old");
    const Value* nw = args.get(1, "new");
    if (!ov || !nw) throw_error("replace() missing required arguments");
    std::string out = py_replace(s, py_str(*ov), py_str(*nw), need_int(args.get(2, "count"), "count", -1));
    check_size(out.size());
    return str_value(std::move(out));
  }
  if (f == "dictsort") {
    if (!v.is_mapping()) throw_error("dictsort: value must be a mapping");
    bool cs = opt_bool(args.get(0, "case_sensitive"), false);
    std::string by = args.get(1, "by") ? need_str(args.get(1, "by"), "by") : "key";
    bool rev = need_reverse(args.get(2, "reverse"));
    if (by != "key" && by != "value") throw_error("You can only sort by either \"key\" or \"value\"");
    List pairs;
    for (const auto& [k, x] : v.dict->items) pairs.push_back(Value::make_list({k, x}, Kind::Tuple));
    Value idx = Value::integer(by == "key" ? 0 : 1);
    return Value::make_list(sorted_by(*this, std::move(pairs), &idx, cs, rev));
  }
  if (f == "sort") {
    bool rev = need_reverse(args.get(0, "reverse"));
    bool cs = opt_bool(args.get(1, "case_sensitive"), false);
    const Value* attribute = args.get(2, "attribute");
    // Sort keys are lists of the comma-separated attributes, as in jinja2:
    // list comparison checks equality first, so equal Undefined keys sort.
    std::vector<Value> parts;
    if (attribute && attribute->is_string()) {
      for (size_t b = 0;;) {
        size_t c = attribute->s.find(',', b);
        parts.push_back(Value::string(attribute->s.substr(b, c == std::string::npos ? std::string::npos : c - b)));
        if (c == std::string::npos) break;
        b = c + 1;
      }
    } else {
      parts.push_back(attribute ? *attribute : Value::none());
    }
    List items = py_iterate(v);
    std::vector<std::pair<Value, size_t>> keys;
    for (size_t k = 0; k < items.size(); ++k) {
      List key;
      for (const Value& p : parts) key.push_back(fold_case(attr_key(*this, items[k], &p), cs));
      keys.emplace_back(Value::make_list(std::move(key)), k);
    }
    std::stable_sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) {
      return rev ? py_less(b.first, a.first) : py_less(a.first, b.first);
    });
    List out;
    for (auto& [k, idx] : keys) out.push_back(items[idx]);
    return Value::make_list(std::move(out));
  }
  if (f == "reverse") {
    if (v.is_string()) {
      std::u32string u = utf8_decode(v.s);
      std::reverse(u.begin(), u.end());
      return str_value(utf8_encode(u));
    }
    List items = py_iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items), v.kind == Kind::Iterator ? Kind::List : Kind::Iterator);
  }
  if (f == "sum") {
    const Value* attribute = args.get(0, "attribute");
    Value total = args.get(1, "start") ? *args.get(1, "start") : Value::integer(0);
    for (const Value& item : py_iterate(v)) total = binop("+", total, attr_key(*this, item, attribute));
    return total;
  }
  if (f == "min") return min_max(*this, v, args, false);
  if (f == "max") return min_max(*this, v, args, true);
  if (f == "indent") {
    if (v.is_undefined()) throw_error(v.s.empty() ? "value is undefined" : v.s);
    if (!v.is_string())
      throw_error("unsupported operand type(s) for +=: '" + py_type_name(v) + "' and 'str'");
    return str_value(indent_filter(s_of(), args.get(0, "width"), opt_bool(args.get(1, "first"), false),
                                   opt_bool(args.get(2, "blank"), false)));
  }
  if (f == "wordcount") return Value::integer(wordcount(s_of()));
  if (f == "center") {
    Args a;
    a.pos.push_back(args.get(0, "width") ? *args.get(0, "width") : Value::integer(80));
    return call_method(Value::string(s_of()), "center", a);
  }
  if (f == "format") {
    Value t = args.pos.size() == 1 ? args.pos[0] : Value::make_list(args.pos, Kind::Tuple);
    if (!args.kw.empty()) throw_error("format filter with keyword arguments is not supported");
    return binop("%", Value::string(s_of()), t);
  }
  if (f == "attr") {
    std::string n = need_str(args.get(0, "name"), "name");
    if (v.is_undefined()) throw_error(v.s.empty() ? "value is undefined" : v.s);
    if (v.kind == Kind::Dict) {
      Value m = getattr(v, n);
      if (m.kind == Kind::Object) return m;
      return Value::undefined("'dict object' has no attribute '" + n + "'");
    }
    return getattr(v, n);
  }
  throw_error("No filter named '" + name + "'.");
}

Value Interp::generator_filter(const std::string& f, const Value& v, Args& args) {
  if (f == "items") {
    if (v.is_undefined()) return Value::make_list({}, Kind::Iterator);
    if (!v.is_mapping()) throw_error("Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, x] : v.dict->items) out.push_back(Value::make_list({k, x}, Kind::Tuple));
    return Value::make_list(std::move(out), Kind::Iterator);
  }
  if (f == "map") {
    List out;
    if (!truthy(v)) return Value::make_list(std::move(out), Kind::Iterator);
    const Value* attribute = nullptr;
    const Value* dflt = nullptr;
    if (args.pos.empty()) {
      for (const auto& [k, x] : args.kw) {
        if (k == "attribute") attribute = &x;
        else if (k == "default") dflt = &x;
      }
    }
    if (attribute) {
      for (const auto& [k, x] : args.kw)
        if (k != "attribute" && k != "default") throw_error("Unexpected keyword argument '" + k + "'");
      if (dflt && dflt->is_none()) dflt = nullptr;
      for (const Value& item : py_iterate(v)) {
        if (!attribute->is_string()) out.push_back(getitem(item, *attribute));
        else out.push_back(get_path(*this, item, attribute->s, dflt));
      }
    } else {
      if (args.pos.empty()) throw_error("map requires a filter argument");
      const Value& fname = args.pos[0];
      Args fargs;
      fargs.pos.assign(args.pos.begin() + 1, args.pos.end());
      fargs.kw = args.kw;
      for (const Value& item : py_iterate(v)) {
        if (!fname.is_string() || !is_known_filter(fname.s)) throw_error("No filter named " + py_repr(fname) + ".");
        Args call = fargs;
        out.push_back(apply_filter(fname.s, item, call));
      }
    }
    return Value::make_list(std::move(out), Kind::Iterator);
  }
  if (f == "select") return select_impl(*this, v, args, false, true);
  if (f == "reject") return select_impl(*this, v, args, false, false);
  if (f == "selectattr") return select_impl(*this, v, args, true, true);
  if (f == "rejectattr") return select_impl(*this, v, args, true, false);
  if (f == "unique") {
    bool cs = opt_bool(args.get(0, "case_sensitive"), false);
    const Value* attribute = args.get(1, "attribute");
    List out, seen;
    for (const Value& item : py_iterate(v)) {
      Value key = fold_case(attr_key(*this, item, attribute), cs);
      if (key.kind == Kind::List || key.kind == Kind::Dict || key.kind == Kind::Namespace || key.kind == Kind::Iterator)
        throw_error("unhashable type: '" + py_type_name(key) + "'");
      bool dup = false;
      for (const Value& s : seen)
        if (py_equal(s, key)) {
          dup = true;
          break;
        }
      if (!dup) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::make_list(std::move(out), Kind::Iterator);
  }
  if (f == "batch") {
    int64_t count = need_int(args.get(0, "linecount"), "linecount", 1);
    const Value* fill = args.get(1, "fill_with");
    List out, cur;
    for (const Value& item : py_iterate(v)) {
      // jinja2 compares before appending, so a size of 0 yields one empty batch first
      if (static_cast<int64_t>(cur.size()) == count) {
        out.push_back(Value::make_list(std::move(cur)));
        cur.clear();
      }
      cur.push_back(item);
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none())
        while (static_cast<int64_t>(cur.size()) < count) cur.push_back(*fill);
      out.push_back(Value::make_list(std::move(cur)));
    }
    return Value::make_list(std::move(out), Kind::Iterator);
  }
  throw_error("No filter named '" + f + "'.");
}

// ---------------------------------------------------------------- tests

bool Interp::apply_test(const std::string& t, const Value& v, Args& args) {
  step();
  static const char* kOneArg[] = {"divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<",
                                  "gt", "greaterthan", ">", "le", "<=", "ge", ">=", "sameas", "in"};
  bool one = false;
  for (const char* n : kOneArg) one |= t == n;
  if (args.pos.size() + args.kw.size() > (one ? 1u : 0u))
    throw_error("test '" + t + "' takes " + (one ? "one argument" : "no arguments"));
  check_signature("t:" + t, args, "test");
  const Value* arg = !args.pos.empty() ? &args.pos[0] : (!args.kw.empty() ? &args.kw[0].second : nullptr);
  auto need_arg = [&]() -> const Value& {
    if (!arg) throw_error("test '" + t + "' needs an argument");
    return *arg;
  };
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.kind == Kind::Int;
  if (t == "float") return v.kind == Kind::Float;
  if (t == "boolean") return v.kind == Kind::Bool;
  if (t == "true") return v.kind == Kind::Bool && v.b;
  if (t == "false") return v.kind == Kind::Bool && !v.b;
  if (t == "mapping") return v.is_mapping();
  if (t == "iterable")
    return v.is_undefined() || v.is_string() || v.is_listish() || v.is_mapping();
  if (t == "sequence") return v.is_undefined() || v.is_string() || v.kind == Kind::List || v.kind == Kind::Tuple || v.is_mapping();
  if (t == "callable") return v.is_undefined() || (v.kind == Kind::Object && v.obj->callable());
  if (t == "even" || t == "odd") {  // value % 2 == 0 / == 1, so 2.5 is neither
    Value r = binop("%", v, Value::integer(2));
    return py_equal(r, Value::integer(t == "even" ? 0 : 1));
  }
  if (t == "divisibleby") return py_equal(binop("%", v, need_arg()), Value::integer(0));
  if (t == "eq" || t == "equalto" || t == "==") return py_equal(v, need_arg());
  if (t == "ne" || t == "!=") return !py_equal(v, need_arg());
  if (t == "lt" || t == "lessthan" || t == "<") return py_less(v, need_arg());
  if (t == "gt" || t == "greaterthan" || t == ">") return py_less(need_arg(), v);
  if (t == "le" || t == "<=") return py_less(v, need_arg()) || py_equal(v, need_arg());
  if (t == "ge" || t == ">=") return py_less(need_arg(), v) || py_equal(v, need_arg());
  if (t == "in") return contains(need_arg(), v);
  if (t == "lower" || t == "upper") {
    std::string s = py_str(v);
    bool cased = false, bad = false;
    for (char32_t c : utf8_decode(s)) {
      if (!py_iscased(c)) continue;
      cased = true;
      bool is_upper = py_lower1(c) != c;
      bool is_lower = py_upper1(c) != c || c == 0xdf;
      if (t == "lower" ? is_upper : is_lower) bad = true;
    }
    return cased && !bad;
  }
  if (t == "sameas") {
    const Value& o = need_arg();
    if (v.kind != o.kind) return false;
    switch (v.kind) {
      case Kind::None: return true;
      case Kind::Undefined: return false;  // every lookup makes a new Undefined
      case Kind::Bool: return v.b == o.b;
      case Kind::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;
      case Kind::String: return v.s == o.s && v.s.size() <= 1;
      case Kind::List:
      case Kind::Tuple:
      case Kind::Iterator: return v.list == o.list;
      case Kind::Dict:
      case Kind::Namespace: return v.dict == o.dict;
      case Kind::Object: return v.obj == o.obj;
      default: return false;
    }
  }
  if (t == "escaped") return v.is_string() && v.b;
  if (t == "filter") return v.is_string() && is_known_filter(v.s);
  if (t == "test") return v.is_string() && is_known_test(v.s);
  throw_error("No test named '" + t + "'.");
}

// ---------------------------------------------------------------- methods

// Positional-argument counts and keyword names of the Python methods, so a
// call Python would reject is rejected here too.
struct MethodSig {
  const char* name;
  size_t min_pos, max_pos;
  std::vector<const char*> kw;
};

void check_method_args(const Value& self, const std::string& m, const Args& args) {
  static const std::vector<MethodSig> str_sigs = {
      {"strip", 0, 1, {}}, {"lstrip", 0, 1, {}}, {"rstrip", 0, 1, {}},
      {"split", 0, 2, {"sep", "maxsplit"}}, {"rsplit", 0, 2, {"sep", "maxsplit"}},
      {"splitlines", 0, 1, {"keepends"}}, {"startswith", 1, 3, {}}, {"endswith", 1, 3, {}},
      {"replace", 2, 3, {}}, {"find", 1, 3, {}}, {"rfind", 1, 3, {}}, {"index", 1, 3, {}},
      {"rindex", 1, 3, {}}, {"count", 1, 3, {}}, {"join", 1, 1, {}}, {"zfill", 1, 1, {}},
      {"center", 1, 2, {}}, {"ljust", 1, 2, {}}, {"rjust", 1, 2, {}}, {"partition", 1, 1, {}},
      {"rpartition", 1, 1, {}}, {"removeprefix", 1, 1, {}}, {"removesuffix", 1, 1, {}},
      {"expandtabs", 0, 1, {"tabsize"}}};
  static const std::vector<MethodSig> dict_sigs = {{"get", 1, 2, {}}};
  static const std::vector<MethodSig> list_sigs = {{"index", 1, 3, {}}, {"count", 1, 1, {}}};
  const std::vector<MethodSig>* sigs = self.is_string() ? &str_sigs : self.kind == Kind::Dict ? &dict_sigs : &list_sigs;
  if (m == "format") return;
  const MethodSig* sig = nullptr;
  for (const auto& x : *sigs)
    if (m == x.name) sig = &x;
  size_t min_pos = sig ? sig->min_pos : 0, max_pos = sig ? sig->max_pos : 0;
  size_t given = args.pos.size() + args.kw.size();
  for (const auto& [k, v] : args.kw) {
    bool ok = false;
    if (sig)
      for (const char* name : sig->kw) ok |= k == name;
    if (!ok) throw_error(m + "() takes no keyword argument '" + k + "'");
  }
  if (given < min_pos || given > max_pos)
    throw_error(m + "() takes " + (min_pos == max_pos ? "exactly " + std::to_string(min_pos) :
                                   "from " + std::to_string(min_pos) + " to " + std::to_string(max_pos)) +
                " argument(s) (" + std::to_string(given) + " given)");
}

Value Interp::call_method(const Value& self, const std::string& m, Args& args) {
  step();
  check_method_args(self, m, args);
  if (self.kind == Kind::Dict) {
    if (m == "get") {
      const Value* key = args.get(0, "key");
      if (!key) throw_error("get expected at least 1 argument, got 0");
      if (const Value* v = self.dict->find(*key)) return *v;
      const Value* d = args.get(1, "default");
      return d ? *d : kNone;
    }
    List out;
    for (const auto& [k, v] : self.dict->items) {
      if (m == "items") out.push_back(Value::make_list({k, v}, Kind::Tuple));
      else if (m == "keys") out.push_back(k);
      else if (m == "values") out.push_back(v);
    }
    if (m == "copy") return self;
    return Value::make_list(std::move(out));
  }
  if (self.kind == Kind::List || self.kind == Kind::Tuple) {
    if (m == "copy") return self;
    const Value& x = args.pos.empty() ? kNone : args.pos[0];
    int64_t count = 0;
    for (size_t k = 0; k < self.list->size(); ++k)
      if (py_equal((*self.list)[k], x)) {
        if (m == "index") return Value::integer(static_cast<int64_t>(k));
        ++count;
      }
    if (m == "index") throw_error(py_repr(x) + " is not in list");
    return Value::integer(count);
  }
  if (!self.is_string()) throw_error("'" + py_type_name(self) + "' object has no method '" + m + "'");
  const std::string& s = self.s;
  if (m == "strip") return str_value(py_strip(s, args.get(0, "chars"), true, true));
  if (m == "lstrip") return str_value(py_strip(s, args.get(0, "chars"), true, false));
  if (m == "rstrip") return str_value(py_strip(s, args.get(0, "chars"), false, true));
  if (m == "split" || m == "rsplit")
    return Value::make_list(py_split(s, args.get(0, "sep"), need_int(args.get(1, "maxsplit"), "maxsplit", -1), m == "rsplit"));
  if (m == "splitlines") {
    List out;
    const Value* ke = args.get(0, "keepends");
    if (ke && !ke->is_int_like()) throw_error("'" + py_type_name(*ke) + "' object cannot be interpreted as an integer");
    for (auto& l : py_splitlines(s, ke && ke->as_int() != 0)) out.push_back(Value::string(l));
    return Value::make_list(std::move(out));
  }
  if (m == "startswith" || m == "endswith") {
    const Value* p = args.get(0, "prefix");
    if (!p) throw_error(m + "() takes at least 1 argument (0 given)");
    std::u32string u;
    std::string sub = s;
    if (args.pos.size() > 1) {
      u = utf8_decode(s);
      int64_t len = static_cast<int64_t>(u.size());
      auto adj = [&](const Value* v, int64_t d) {
        if (!v || v->is_none()) return d;
        int64_t x = need_int(v, "index", d);
        if (x < 0) x = std::max<int64_t>(0, x + len);
        return std::min(x, len);
      };
      int64_t b = adj(&args.pos[1], 0);
      int64_t e = adj(args.pos.size() > 2 ? &args.pos[2] : nullptr, len);
      if (b > len) return Value::boolean(false);
      sub = e >= b ? utf8_encode(u.substr(static_cast<size_t>(b), static_cast<size_t>(e - b))) : "";
      if (e < b) return Value::boolean(false);
    }
    List cands = p->kind == Kind::Tuple ? *p->list : List{*p};
    for (const Value& c : cands) {
      if (!c.is_string())
        throw_error(m + " first arg must be str or a tuple of str, not " + py_type_name(c));
      bool ok = m == "startswith" ? sub.compare(0, c.s.size(), c.s) == 0 && sub.size() >= c.s.size()
                                  : sub.size() >= c.s.size() && sub.compare(sub.size() - c.s.size(), c.s.size(), c.s) == 0;
      if (ok) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (m == "replace") {
    std::string old = need_str(args.get(0, "old"), "old");
    std::string neu = need_str(args.get(1, "new"), "new");
    std::string out = py_replace(s, old, neu, need_int(args.get(2, "count"), "count", -1));
    check_size(out.size());
    return str_value(std::move(out));
  }
  if (m == "upper") return str_value(py_upper(s));
  if (m == "lower" || m == "casefold") return str_value(py_lower(s));
  if (m == "title") return str_value(py_title_method(s));
  if (m == "capitalize") return str_value(py_capitalize(s));
  if (m == "swapcase") {
    std::string out;
    for (char32_t c : utf8_decode(s)) {
      char32_t u = py_upper1(c);
      utf8_append(out, u != c ? u : py_lower1(c));
    }
    return str_value(std::move(out));
  }
  if (m == "find" || m == "rfind" || m == "index" || m == "rindex" || m == "count") {
    std::string sub = need_str(args.get(0, "sub"), "sub");
    if (args.pos.size() > 1) throw_error("start/end arguments of str." + m + " are not supported");
    if (m == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t p = (m == "find" || m == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (m == "index" || m == "rindex") throw_error("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p))));
  }
  if (m == "join") {
    const Value* it = args.get(0, "iterable");
    if (!it) throw_error("join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const Value& x : py_iterate(*it)) {
      if (!x.is_string()) throw_error("sequence item: expected str instance, " + py_type_name(x) + " found");
      if (!first) out += s;
      first = false;
      out += x.s;
      check_size(out.size());
    }
    return str_value(std::move(out));
  }
  if (m == "format") return str_value(py_format(*this, s, args));
  if (m == "isdigit" || m == "isnumeric" || m == "isdecimal" || m == "isalpha" || m == "isalnum" || m == "isspace") {
    std::u32string u = utf8_decode(s);
    if (u.empty()) return Value::boolean(false);
    for (char32_t c : u) {
      bool ok = m == "isspace" ? py_isspace(c)
                : m == "isalpha" ? py_isalpha(c)
                : m == "isalnum" ? (py_isalpha(c) || py_isdigit(c))
                                 : py_isdigit(c);
      if (!ok) return Value::boolean(false);
    }
    return Value::boolean(true);
  }
  if (m == "islower" || m == "isupper") {
    Args none;
    return Value::boolean(apply_test(m == "islower" ? "lower" : "upper", self, none));
  }
  if (m == "istitle") return Value::boolean(!s.empty() && py_title_method(s) == s && py_lower(s) != s);
  if (m == "zfill" || m == "center" || m == "ljust" || m == "rjust") {
    int64_t width = need_int(args.get(0, "width"), "width", 0);
    if (width > 1 << 20) check_size(static_cast<size_t>(width) * 4);
    std::u32string u = utf8_decode(s);
    int64_t len = static_cast<int64_t>(u.size());
    if (width <= len) return self;
    std::u32string fill(1, U' ');
    if (m != "zfill" && args.get(1, "fillchar")) {
      std::u32string fc = utf8_decode(need_str(args.get(1, "fillchar"), "fillchar"));
      if (fc.size() != 1) throw_error("The fill character must be exactly one character long");
      fill = fc;
    }
    size_t pad = static_cast<size_t>(width - len);
    std::u32string out;
    if (m == "zfill") {
      size_t signpos = (!u.empty() && (u[0] == '+' || u[0] == '-')) ? 1 : 0;
      out = u.substr(0, signpos) + std::u32string(pad, U'0') + u.substr(signpos);
    } else if (m == "ljust") {
      out = u + std::u32string(pad, fill[0]);
    } else if (m == "rjust") {
      out = std::u32string(pad, fill[0]) + u;
    } else {
      size_t left = pad / 2 + (pad & static_cast<size_t>(width) & 1);
      out = std::u32string(left, fill[0]) + u + std::u32string(pad - left, fill[0]);
    }
    return str_value(utf8_encode(out));
  }
  if (m == "partition" || m == "rpartition") {
    std::string sep = need_str(args.get(0, "sep"), "sep");
    if (sep.empty()) throw_error("empty separator");
    size_t p = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      if (m == "partition") return Value::make_list({self, Value::string(""), Value::string("")}, Kind::Tuple);
      return Value::make_list({Value::string(""), Value::string(""), self}, Kind::Tuple);
    }
    return Value::make_list({Value::string(s.substr(0, p)), Value::string(sep), Value::string(s.substr(p + sep.size()))},
                            Kind::Tuple);
  }
  if (m == "removeprefix") {
    std::string p = need_str(args.get(0, "prefix"), "prefix");
    return str_value(s.compare(0, p.size(), p) == 0 && s.size() >= p.size() ? s.substr(p.size()) : s);
  }
  if (m == "removesuffix") {
    std::string p = need_str(args.get(0, "suffix"), "suffix");
    bool ok = !p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    return str_value(ok ? s.substr(0, s.size() - p.size()) : s);
  }
  if (m == "expandtabs") {
    int64_t ts = need_int(args.get(0, "tabsize"), "tabsize", 8);
    std::string out;
    int64_t col = 0;
    for (char32_t c : utf8_decode(s)) {
      if (c == '\t') {
        if (ts > 0) {
          int64_t n = ts - col % ts;
          check_size(out.size() + static_cast<size_t>(n));
          out.append(static_cast<size_t>(n), ' ');
          col += n;
        }
      } else {
        utf8_append(out, c);
        col = (c == '\n' || c == '\r') ? 0 : col + 1;
      }
    }
    return str_value(std::move(out));
  }
  throw_error("'str' object has no attribute '" + m + "'");
}

}  // namespace trlx::text::tpl

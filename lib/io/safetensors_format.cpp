// The safetensors format without LibTorch: header parsing and encoding, shard plans and index files.
#include "io/safetensors_format.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; trlx reads it in place");

namespace trlx::io {

namespace {

struct DtypeRow {
  Dtype dtype;
  const char* name;
  size_t bits;
};

constexpr DtypeRow kDtypes[] = {
    {Dtype::BOOL, "BOOL", 8},       {Dtype::F4, "F4", 4},
    {Dtype::F6_E2M3, "F6_E2M3", 6}, {Dtype::F6_E3M2, "F6_E3M2", 6},
    {Dtype::U8, "U8", 8},           {Dtype::I8, "I8", 8},
    {Dtype::F8_E5M2, "F8_E5M2", 8}, {Dtype::F8_E4M3, "F8_E4M3", 8},
    {Dtype::F8_E8M0, "F8_E8M0", 8}, {Dtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {Dtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {Dtype::I16, "I16", 16},        {Dtype::U16, "U16", 16},
    {Dtype::F16, "F16", 16},        {Dtype::BF16, "BF16", 16},
    {Dtype::I32, "I32", 32},        {Dtype::U32, "U32", 32},
    {Dtype::F32, "F32", 32},        {Dtype::C64, "C64", 64},
    {Dtype::F64, "F64", 64},        {Dtype::I64, "I64", 64},
    {Dtype::U64, "U64", 64},
};

// ---- a strict JSON reader ------------------------------------------------
// The header must be read as serde_json reads it (UTF-8, RFC 8259 grammar,
// no lone surrogates, nesting limited to 128 levels), and trlx also wants
// duplicate keys reported, which general-purpose DOM parsers silently merge.

constexpr int kMaxDepth = 128;

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not one.
size_t utf8_seq_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return n;
}

std::optional<size_t> first_invalid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_seq_len(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A streaming reader: callers walk the document and keep only what they
// need, so a hostile 100 MB header costs about what its kept values do
// (serde_json's cost), not a DOM node per value.
class JsonParser {
 public:
  JsonParser(std::string_view text, std::string_view label, std::string_view what)
      : s_(text), label_(label), what_(what) {}

  [[noreturn]] void error(std::string_view msg) {
    fail_input("{}: {} is not valid JSON: {} (at byte {})", label_, what_, msg, pos_);
  }

  // The kind of the value that starts here, for messages.
  const char* kind() {
    ws();
    if (pos_ >= s_.size()) error("unexpected end of input");
    switch (s_[pos_]) {
      case '{': return "an object";
      case '[': return "an array";
      case '"': return "a string";
      case 't': case 'f': return "a boolean";
      case 'n': return "null";
      default:
        if (at_number()) return "a number";
        error("expected a value");
    }
  }
  bool at(char c) {
    ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool at_number() {
    ws();
    return pos_ < s_.size() && (s_[pos_] == '-' || (s_[pos_] >= '0' && s_[pos_] <= '9'));
  }
  bool null() {
    ws();
    return literal("null");
  }
  void end() {
    ws();
    if (pos_ != s_.size()) error("unexpected characters after the JSON value");
  }

  // Calls on_member(key) for each member of the object that starts here; the
  // callback must read or skip the value. Keys given twice are an error.
  template <typename F>
  void object(int depth, F&& on_member) {
    ws();
    if (depth >= kMaxDepth) error("nesting deeper than 128 levels");
    ++pos_;  // {
    if (at('}')) {
      ++pos_;
      return;
    }
    std::unordered_set<std::string> seen;
    for (;;) {
      if (!at('"')) error("expected a string key");
      const size_t key_pos = pos_;
      std::string key = string();
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        error(fmt::format("key `{}` appears twice in the same object", key));
      }
      if (!at(':')) error("expected `:`");
      ++pos_;
      on_member(key);
      if (at(',')) {
        ++pos_;
        continue;
      }
      if (at('}')) {
        ++pos_;
        return;
      }
      error("expected `,` or `}`");
    }
  }

  // Calls on_item() for each element of the array that starts here.
  template <typename F>
  void array(int depth, F&& on_item) {
    ws();
    if (depth >= kMaxDepth) error("nesting deeper than 128 levels");
    ++pos_;  // [
    if (at(']')) {
      ++pos_;
      return;
    }
    for (;;) {
      on_item();
      if (at(',')) {
        ++pos_;
        continue;
      }
      if (at(']')) {
        ++pos_;
        return;
      }
      error("expected `,` or `]`");
    }
  }

  // Validates and discards any value (duplicate keys inside are not checked,
  // as serde ignores such values entirely).
  void skip(int depth) {
    ws();
    if (pos_ >= s_.size()) error("unexpected end of input");
    const char c = s_[pos_];
    if (c == '{') {
      if (depth >= kMaxDepth) error("nesting deeper than 128 levels");
      ++pos_;
      if (at('}')) {
        ++pos_;
        return;
      }
      for (;;) {
        if (!at('"')) error("expected a string key");
        string(/*keep=*/false);
        if (!at(':')) error("expected `:`");
        ++pos_;
        skip(depth + 1);
        if (at(',')) {
          ++pos_;
          continue;
        }
        if (at('}')) {
          ++pos_;
          return;
        }
        error("expected `,` or `}`");
      }
    }
    if (c == '[') {
      array(depth, [&] { skip(depth + 1); });
      return;
    }
    if (c == '"') {
      string(false);
      return;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      (void)number();
      return;
    }
    if (literal("true") || literal("false") || literal("null")) return;
    error("expected a value");
  }

  // The string that starts here (at its opening quote), unescaped.
  std::string string(bool keep = true) {
    ws();
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) error("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) error("control character in a string");
      if (c != '\\') {
        const size_t n = utf8_seq_len(s_, pos_);
        if (n == 0) error("invalid UTF-8");
        if (keep) out.append(s_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) error("unterminated string");
      const char e = s_[pos_++];
      char plain = 0;
      switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) error("lone trailing surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
              error("lone leading surrogate in \\u escape");
            pos_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("invalid surrogate pair in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          if (keep) append_utf8(out, cp);
          continue;
        }
        default: --pos_; error("invalid escape");
      }
      if (keep) out += plain;
    }
  }

  struct Number {
    bool is_uint = false;  // a non-negative integer that fits uint64
    uint64_t value = 0;
  };

  // The number that starts here.
  Number number() {
    ws();
    Number v;
    bool negative = false;
    if (pos_ < s_.size() && s_[pos_] == '-') {
      negative = true;
      ++pos_;
    }
    auto digit = [&] { return pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (!digit()) error("invalid number");
    const size_t int_start = pos_;
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (digit()) ++pos_;
    }
    const size_t int_end = pos_;
    bool integral = true;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (!digit()) error("invalid number");
      while (digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit()) error("invalid number");
      while (digit()) ++pos_;
    }
    if (integral) {
      uint64_t u = 0;
      bool fits = true;
      for (size_t i = int_start; i < int_end; ++i) {
        const uint64_t d = static_cast<uint64_t>(s_[i] - '0');
        if (u > (UINT64_MAX - d) / 10) {
          fits = false;
          break;
        }
        u = u * 10 + d;
      }
      // serde accepts "-0" where an unsigned integer is expected.
      if (fits && (!negative || u == 0)) {
        v.is_uint = true;
        v.value = u;
      }
    }
    return v;
  }

 private:
  void ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else error("invalid \\u escape");
    }
    return v;
  }

  std::string_view s_;
  std::string_view label_;
  std::string_view what_;
  size_t pos_ = 0;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Checked byte size of dtype x shape: nullopt on overflow.
std::optional<uint64_t> checked_nbytes(Dtype dtype, const std::vector<uint64_t>& dims, bool& subbyte) {
  uint64_t n = 1;
  for (uint64_t d : dims) {
    if (d != 0 && n > UINT64_MAX / d) return std::nullopt;
    n *= d;
  }
  const uint64_t bits = dtype_bits(dtype);
  if (n > UINT64_MAX / bits) return std::nullopt;
  n *= bits;
  subbyte = n % 8 != 0;
  return n / 8;
}

// One tensor's entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]},
// other fields ignored, as the reference does.
void read_tensor_entry(JsonParser& p, const std::string& name, std::string_view label, TensorInfo& info,
                       std::vector<uint64_t>& dims) {
  if (!p.at('{'))
    fail_input("{}: tensor `{}`: header entry is {}, expected an object with dtype, shape and data_offsets",
               label, name, p.kind());
  bool has_dtype = false, has_shape = false, has_offsets = false;
  p.object(1, [&](const std::string& k) {
    if (k == "dtype") {
      has_dtype = true;
      if (!p.at('"')) fail_input("{}: tensor `{}`: `dtype` is {}, expected a string", label, name, p.kind());
      const std::string d = p.string();
      const auto dt = parse_dtype(d);
      if (!dt)
        fail_input("{}: tensor `{}`: unknown dtype `{}` (the format knows BOOL, U8, I8, I16, U16, I32, U32, "
                   "I64, U64, F16, BF16, F32, F64, C64, F4, F6_*, F8_*)",
                   label, name, d);
      info.dtype = *dt;
    } else if (k == "shape") {
      has_shape = true;
      if (!p.at('['))
        fail_input("{}: tensor `{}`: `shape` is {}, expected an array of non-negative integers", label, name,
                   p.kind());
      p.array(2, [&] {
        const char* kind = p.kind();
        if (!p.at_number())
          fail_input("{}: tensor `{}`: `shape` has an element that is {}, expected a non-negative integer", label,
                     name, kind);
        const auto n = p.number();
        if (!n.is_uint)
          fail_input("{}: tensor `{}`: `shape` has a number that is not a non-negative integer (or is too large)",
                     label, name);
        dims.push_back(n.value);
      });
    } else if (k == "data_offsets") {
      has_offsets = true;
      auto bad = [&] {
        fail_input("{}: tensor `{}`: `data_offsets` must be an array of two non-negative integers [begin, end]",
                   label, name);
      };
      if (!p.at('[')) bad();
      size_t count = 0;
      p.array(2, [&] {
        if (!p.at_number() || count >= 2) bad();
        const auto n = p.number();
        if (!n.is_uint) bad();
        (count == 0 ? info.begin : info.end) = n.value;
        ++count;
      });
      if (count != 2) bad();
    } else {
      p.skip(2);
    }
  });
  if (!has_dtype) fail_input("{}: tensor `{}`: missing `dtype`", label, name);
  if (!has_shape) fail_input("{}: tensor `{}`: missing `shape`", label, name);
  if (!has_offsets) fail_input("{}: tensor `{}`: missing `data_offsets`", label, name);
}

}  // namespace

std::string_view dtype_name(Dtype d) {
  for (const auto& r : kDtypes)
    if (r.dtype == d) return r.name;
  return "?";
}

std::optional<Dtype> parse_dtype(std::string_view name) {
  for (const auto& r : kDtypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

size_t dtype_bits(Dtype d) {
  for (const auto& r : kDtypes)
    if (r.dtype == d) return r.bits;
  return 8;
}

bool dtype_supported(Dtype d) {
  switch (d) {
    case Dtype::F32: case Dtype::F16: case Dtype::BF16: case Dtype::F64: case Dtype::I64:
    case Dtype::I32: case Dtype::I16: case Dtype::I8: case Dtype::U8: case Dtype::BOOL:
      return true;
    default:
      return false;
  }
}

std::string supported_dtypes_text() { return "F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL"; }

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated not to overflow when the header was read
  return n;
}

Header parse_header(const uint8_t* data, size_t size, std::string_view label) {
  if (size < 8)
    fail_input("{}: not a safetensors file: {} bytes, too small for the 8-byte header length", label, size);
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  if (n > kMaxHeaderSize)
    fail_input("{}: header length {} exceeds the format's limit of {} bytes (not a safetensors file?)", label,
               n, kMaxHeaderSize);
  if (n > size - 8)
    fail_input("{}: header length {} runs past the end of the file ({} bytes; truncated?)", label, n, size);
  const std::string_view text(reinterpret_cast<const char*>(data + 8), n);
  if (auto bad = first_invalid_utf8(text))
    fail_input("{}: header is not valid UTF-8 (at byte {} of the header)", label, *bad);
  JsonParser p(text, label, "the header");
  if (!p.at('{')) {
    const char* kind = p.kind();
    p.skip(0);  // a syntax error is reported as such
    p.end();
    fail_input("{}: header is {}, expected a JSON object", label, kind);
  }

  Header h;
  h.header_size = n;
  h.data_size = size - 8 - n;
  std::vector<std::vector<uint64_t>> all_dims;
  p.object(0, [&](const std::string& key) {
    if (key == "__metadata__") {
      if (p.null()) return;
      if (!p.at('{'))
        fail_input("{}: `__metadata__` is {}, expected an object of strings", label, p.kind());
      h.has_metadata = true;
      p.object(1, [&](const std::string& mk) {
        if (!p.at('"'))
          fail_input("{}: `__metadata__`: value of `{}` is {}, expected a string", label, mk, p.kind());
        h.metadata[mk] = p.string();
      });
      return;
    }
    TensorInfo info;
    info.name = key;
    std::vector<uint64_t> dims;
    read_tensor_entry(p, key, label, info, dims);
    h.tensors.push_back(std::move(info));
    all_dims.push_back(std::move(dims));
  });
  p.end();

  // The reference accepts entries in any order and validates them sorted by offsets.
  std::vector<size_t> order(h.tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = h.tensors[a];
    const auto& y = h.tensors[b];
    return std::pair(x.begin, x.end) < std::pair(y.begin, y.end);
  });
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (size_t i : order) {
    const TensorInfo& t = h.tensors[i];
    if (t.end < t.begin)
      fail_input("{}: tensor `{}`: data_offsets [{}, {}] end before they begin", label, t.name, t.begin, t.end);
    if (t.begin > expected)
      fail_input("{}: tensor `{}`: data_offsets [{}, {}] leave a gap of {} bytes after {} (tensors must tile the "
                 "data section from 0)",
                 label, t.name, t.begin, t.end, t.begin - expected,
                 prev ? fmt::format("tensor `{}`", prev->name) : std::string("the start of the data"));
    if (t.begin < expected)
      fail_input("{}: tensor `{}`: data_offsets [{}, {}] overlap tensor `{}`, which ends at {}", label, t.name,
                 t.begin, t.end, prev ? prev->name : std::string("?"), expected);
    expected = t.end;
    prev = &t;
    bool subbyte = false;
    const auto nbytes = checked_nbytes(t.dtype, all_dims[i], subbyte);
    if (!nbytes)
      fail_input("{}: tensor `{}`: the size of dtype {} with this shape overflows", label, t.name,
                 dtype_name(t.dtype));
    if (subbyte)
      fail_input("{}: tensor `{}`: dtype {} with this shape does not fill a whole number of bytes", label, t.name,
                 dtype_name(t.dtype));
    std::vector<int64_t> shape;
    for (uint64_t d : all_dims[i]) {
      if (d > static_cast<uint64_t>(INT64_MAX))
        fail_input("{}: tensor `{}`: dimension {} is too large", label, t.name, d);
      shape.push_back(static_cast<int64_t>(d));
    }
    if (t.end - t.begin != *nbytes)
      fail_input("{}: tensor `{}`: data_offsets [{}, {}] hold {} bytes, but dtype {} with shape {} needs {}", label,
                 t.name, t.begin, t.end, t.end - t.begin, dtype_name(t.dtype), shape_text(shape), *nbytes);
    h.tensors[i].shape = std::move(shape);
  }
  if (expected != h.data_size) {
    if (expected > h.data_size)
      fail_input("{}: tensor `{}` ends at byte {} of the data section, past the end of the file ({} data bytes; "
                 "truncated?)",
                 label, prev ? prev->name : std::string("?"), expected, h.data_size);
    fail_input("{}: the file has {} data bytes after the header but its tensors cover only {} (trailing bytes)",
               label, h.data_size, expected);
  }
  std::vector<TensorInfo> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back(std::move(h.tensors[i]));
  h.tensors = std::move(sorted);
  return h;
}

uint64_t tensor_nbytes(Dtype dtype, const std::vector<int64_t>& shape, std::string_view label,
                       std::string_view name) {
  std::vector<uint64_t> dims;
  for (int64_t d : shape) {
    if (d < 0) fail_input("{}: tensor `{}`: negative dimension in shape {}", label, name, shape_text(shape));
    dims.push_back(static_cast<uint64_t>(d));
  }
  bool subbyte = false;
  const auto n = checked_nbytes(dtype, dims, subbyte);
  if (!n) fail_input("{}: tensor `{}`: size overflows", label, name);
  if (subbyte) fail_input("{}: tensor `{}`: does not fill a whole number of bytes", label, name);
  return *n;
}

namespace {

// serde_json's compact string form: only `"`, `\` and control characters are
// escaped; everything else, non-ASCII included, is written as is.
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// Python's json.dumps(ensure_ascii=True) string form.
void append_json_string_ascii(std::string& out, std::string_view s) {
  out += '"';
  auto u16 = [&](uint32_t v) { out += fmt::format("\\u{:04x}", v); };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || c == 0x7f) u16(c);
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    size_t n = utf8_seq_len(s, i);
    if (n == 0) {  // not reachable for validated names; keep the byte visible
      u16(c);
      ++i;
      continue;
    }
    uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      u16(0xD800 + (cp >> 10));
      u16(0xDC00 + (cp & 0x3FF));
    } else {
      u16(cp);
    }
    i += n;
  }
  out += '"';
}

}  // namespace

EncodedHeader encode_header(const std::vector<TensorSpec>& tensors,
                            const std::map<std::string, std::string>& metadata, std::string_view label) {
  EncodedHeader enc;
  std::unordered_set<std::string_view> names;
  std::vector<uint64_t> sizes(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (auto bad = first_invalid_utf8(t.name))
      fail_input("{}: tensor name is not valid UTF-8 (byte {} of `{}`)", label, *bad, t.name);
    if (t.name == "__metadata__") fail_input("{}: `__metadata__` cannot be a tensor name", label);
    if (!names.insert(t.name).second) fail_input("{}: tensor `{}` is given twice", label, t.name);
    sizes[i] = tensor_nbytes(t.dtype, t.shape, label, t.name);
  }
  for (const auto& [k, v] : metadata) {
    if (first_invalid_utf8(k) || first_invalid_utf8(v))
      fail_input("{}: metadata key or value `{}` is not valid UTF-8", label, k);
  }
  enc.order.resize(tensors.size());
  std::iota(enc.order.begin(), enc.order.end(), size_t{0});
  std::sort(enc.order.begin(), enc.order.end(), [&](size_t a, size_t b) {
    if (tensors[a].dtype != tensors[b].dtype) return tensors[a].dtype > tensors[b].dtype;
    return tensors[a].name < tensors[b].name;
  });
  enc.begin.assign(tensors.size(), 0);
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool f = true;
    for (const auto& [k, v] : metadata) {
      if (!f) json += ',';
      f = false;
      append_json_string(json, k);
      json += ':';
      append_json_string(json, v);
    }
    json += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (size_t i : enc.order) {
    const auto& t = tensors[i];
    if (!first) json += ',';
    first = false;
    append_json_string(json, t.name);
    json += ":{\"dtype\":\"";
    json += dtype_name(t.dtype);
    json += "\",\"shape\":[";
    for (size_t k = 0; k < t.shape.size(); ++k) {
      if (k) json += ',';
      json += std::to_string(t.shape[k]);
    }
    enc.begin[i] = offset;
    if (sizes[i] > UINT64_MAX - offset) fail_input("{}: total tensor size overflows", label);
    offset += sizes[i];
    json += fmt::format("],\"data_offsets\":[{},{}]}}", enc.begin[i], offset);
  }
  json += '}';
  json.resize((json.size() + 7) / 8 * 8, ' ');
  if (json.size() > kMaxHeaderSize)
    fail_input("{}: header of {} bytes exceeds the format's limit of {} bytes", label, json.size(),
               kMaxHeaderSize);
  const uint64_t n = json.size();
  enc.bytes.resize(8);
  std::memcpy(enc.bytes.data(), &n, 8);
  enc.bytes += json;
  enc.data_size = offset;
  return enc;
}

uint64_t parse_size(std::string_view text) {
  auto bad = [&](std::string_view why) -> uint64_t {
    fail_input("max_shard_size `{}`: {} (expected a byte count or a number with KB, MB, GB or TB, e.g. "
               "\"5GB\"; units are decimal)",
               text, why);
  };
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  const std::string_view s = trim(text);
  if (s.empty()) return bad("empty");
  if (std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    uint64_t v = 0;
    for (char c : s) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) return bad("too large");
      v = v * 10 + d;
    }
    return v;
  }
  if (s.size() < 3) return bad("no unit");
  std::string unit(s.substr(s.size() - 2));
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult;
  if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else return bad(fmt::format("unit `{}` is not one of KB, MB, GB, TB", s.substr(s.size() - 2)));
  const std::string num(trim(s.substr(0, s.size() - 2)));
  // A plain decimal: digits, an optional fraction, an optional exponent.
  size_t i = 0, digits = 0;
  while (i < num.size() && std::isdigit(static_cast<unsigned char>(num[i]))) ++i, ++digits;
  if (i < num.size() && num[i] == '.') {
    ++i;
    while (i < num.size() && std::isdigit(static_cast<unsigned char>(num[i]))) ++i, ++digits;
  }
  if (digits && i < num.size() && (num[i] == 'e' || num[i] == 'E')) {
    size_t j = i + 1;
    if (j < num.size() && (num[j] == '+' || num[j] == '-')) ++j;
    size_t ed = 0;
    while (j < num.size() && std::isdigit(static_cast<unsigned char>(num[j]))) ++j, ++ed;
    if (ed) i = j;
  }
  if (!digits || i != num.size()) return bad(fmt::format("`{}` is not a non-negative number", num));
  const double value = std::strtod(num.c_str(), nullptr) * mult;
  if (!std::isfinite(value) || value >= 18446744073709551616.0) return bad("too large");
  return static_cast<uint64_t>(value);  // truncation, as Python's int()
}

ShardPlan plan_shards(const std::vector<uint64_t>& sizes, uint64_t max_shard_size) {
  ShardPlan plan;
  if (max_shard_size == 0) max_shard_size = UINT64_MAX;
  std::vector<size_t> current;
  uint64_t current_size = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t size = sizes[i];
    plan.total_size += size;
    if (size > max_shard_size) {
      plan.shards.push_back({i});
      continue;
    }
    if (current_size + size > max_shard_size) {
      plan.shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += size;
  }
  if (!current.empty()) plan.shards.push_back(std::move(current));
  return plan;
}

std::string shard_file_name(size_t index, size_t count) {
  if (count <= 1) return kSingleFileName;
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

bool is_shard_file_name(std::string_view name) {
  // model-NNNNN-of-NNNNN.safetensors, as transformers' cleanup pattern.
  constexpr std::string_view prefix = "model-", mid = "-of-", suffix = ".safetensors";
  if (name.size() != prefix.size() + 5 + mid.size() + 5 + suffix.size()) return false;
  if (name.substr(0, prefix.size()) != prefix) return false;
  auto digits = [&](size_t at) {
    for (size_t i = 0; i < 5; ++i)
      if (!std::isdigit(static_cast<unsigned char>(name[at + i]))) return false;
    return true;
  };
  return digits(prefix.size()) && name.substr(prefix.size() + 5, mid.size()) == mid &&
         digits(prefix.size() + 5 + mid.size()) && name.substr(name.size() - suffix.size()) == suffix;
}

std::string encode_index(const std::vector<std::pair<std::string, std::string>>& weight_map,
                         uint64_t total_size, std::optional<uint64_t> total_parameters) {
  // sort_keys=True: Python orders str by code point, which is UTF-8 byte order.
  std::vector<const std::pair<std::string, std::string>*> sorted;
  for (const auto& e : weight_map) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->first < b->first; });
  std::string out = "{\n  \"metadata\": {\n";
  if (total_parameters) out += fmt::format("    \"total_parameters\": {},\n", *total_parameters);
  out += fmt::format("    \"total_size\": {}\n  }},\n  \"weight_map\": {{", total_size);
  if (sorted.empty()) {
    out += "}\n}\n";
    return out;
  }
  out += '\n';
  for (size_t i = 0; i < sorted.size(); ++i) {
    out += "    ";
    append_json_string_ascii(out, sorted[i]->first);
    out += ": ";
    append_json_string_ascii(out, sorted[i]->second);
    out += i + 1 < sorted.size() ? ",\n" : "\n";
  }
  out += "  }\n}\n";
  return out;
}

ShardIndex parse_index(std::string_view text, std::string_view label) {
  if (auto bad = first_invalid_utf8(text)) fail_input("{}: not valid UTF-8 (at byte {})", label, *bad);
  JsonParser p(text, label, "the index");
  if (!p.at('{')) {
    const char* kind = p.kind();
    p.skip(0);
    p.end();
    fail_input("{}: the index is {}, expected a JSON object", label, kind);
  }
  ShardIndex idx;
  bool has_map = false;
  p.object(0, [&](const std::string& k) {
    if (k == "metadata" && p.at('{')) {
      p.object(1, [&](const std::string& mk) {
        if (mk == "total_size" && p.at_number()) {
          const auto v = p.number();
          if (v.is_uint) idx.total_size = v.value;
        } else {
          p.skip(2);
        }
      });
      return;
    }
    if (k != "weight_map") {
      p.skip(1);
      return;
    }
    has_map = true;
    if (!p.at('{'))
      fail_input("{}: `weight_map` is {}, expected an object of tensor name -> file name", label, p.kind());
    p.object(1, [&](const std::string& name) {
      if (!p.at('"'))
        fail_input("{}: `weight_map`: tensor `{}` maps to {}, expected a file name", label, name, p.kind());
      std::string file = p.string();
      const std::filesystem::path fp(file);
      bool escapes = file.empty() || fp.is_absolute();
      for (const auto& part : fp)
        if (part == "..") escapes = true;
      if (escapes)
        fail_input("{}: `weight_map`: tensor `{}` maps to `{}`, which is not a file inside the checkpoint "
                   "directory",
                   label, name, file);
      idx.weight_map.emplace_back(name, std::move(file));
    });
  });
  p.end();
  if (!has_map) fail_input("{}: missing `weight_map`", label);
  std::sort(idx.weight_map.begin(), idx.weight_map.end());
  return idx;
}

// ---- files ---------------------------------------------------------------

namespace {

// Every live mapping: start address -> size (MappedFile::release).
std::map<uintptr_t, size_t>& live_mappings() {
  static std::map<uintptr_t, size_t> live;
  return live;
}
std::mutex& live_mappings_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) fail_input("{}: no such file", path.string());
    fail("{}: cannot open: {}", path.string(), std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path.string(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_input("{}: not a regular file", path.string());
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ > 0) {
    // Private and writable: tensors viewing the mapping may be modified in
    // place (copy-on-write pages) without ever touching the file.
    void* p = ::mmap(nullptr, m->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail("{}: cannot map: {}", path.string(), std::strerror(e));
    }
    m->data_ = static_cast<uint8_t*>(p);
  }
  m->fd_ = fd;
  if (m->data_) {
    std::lock_guard<std::mutex> lock(live_mappings_mutex());
    live_mappings()[reinterpret_cast<uintptr_t>(m->data_)] = m->size_;
  }
  return m;
}

MappedFile::~MappedFile() {
  if (data_) {
    {
      std::lock_guard<std::mutex> lock(live_mappings_mutex());
      live_mappings().erase(reinterpret_cast<uintptr_t>(data_));
    }
    ::munmap(data_, size_);
  }
  if (fd_ >= 0) ::close(fd_);
}

bool MappedFile::release(const void* p, size_t n) {
  const auto start = reinterpret_cast<uintptr_t>(p), end = start + n;
  std::lock_guard<std::mutex> lock(live_mappings_mutex());
  auto& live = live_mappings();
  auto it = live.upper_bound(start);
  if (it == live.begin()) return false;
  --it;
  if (end > it->first + it->second) return false;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (start + page - 1) / page * page, last = end / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  return true;
}

void MappedFile::read(void* dst, uint64_t offset, size_t n) const {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      // Only if another program truncated the file after it was validated.
      fail("{}: read failed at byte {}: {}", path_.string(), offset,
           got < 0 ? std::strerror(errno) : "unexpected end of file (was it truncated?)");
    }
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

std::pair<std::shared_ptr<MappedFile>, Header> open_safetensors(const std::filesystem::path& path) {
  auto m = MappedFile::open(path);
  Header h = parse_header(m->data(), m->size(), path.string());
  for (const auto& t : h.tensors)
    if (!dtype_supported(t.dtype))
      fail_input("{}: tensor `{}`: unsupported dtype {} (trlx reads {})", path.string(), t.name,
                 dtype_name(t.dtype), supported_dtypes_text());
  return {std::move(m), std::move(h)};
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{}: cannot open", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: read error", path.string());
  return ss.str();
}

}  // namespace trlx::io

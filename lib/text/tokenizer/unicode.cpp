// Unicode for the tokenizer: UTF-8 walking, character classes, normalization forms.
#include "text/tokenizer/unicode.hpp"

#include "core/utf8.hpp"

#include <algorithm>
#include <cstdio>

namespace trlx::text::uni {
namespace {

struct ClassRange {
  uint32_t lo, hi;
  uint8_t value;
};
struct DecompEntry {
  uint32_t cp, canon_off, canon_len, compat_off, compat_len;
};
struct CompEntry {
  uint64_t key;
  uint32_t cp;
};
struct CaseEntry {
  uint32_t cp, lower;
};
struct CaseMulti {
  uint32_t cp;
  uint32_t lower[3];
};
struct RegexClass {
  const char* name;
  uint32_t first, count;  // into kRegexRangePool
};

#include "text/tokenizer/unicode_tables.inc"

template <size_t N>
uint8_t range_lookup(const ClassRange (&table)[N], char32_t cp) {
  const ClassRange* end = table + N;
  const ClassRange* it =
      std::upper_bound(table, end, static_cast<uint32_t>(cp),
                       [](uint32_t v, const ClassRange& r) { return v < r.lo; });
  if (it == table) return 0;
  --it;
  return cp <= it->hi ? it->value : 0;
}

uint8_t ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  return range_lookup(kCccRanges, cp);
}

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

// Appends the full decomposition of cp (or cp itself); returns the count.
int decompose_one(char32_t cp, bool compat, char32_t* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = static_cast<int>(cp - kSBase);
    out[0] = kLBase + s / kNCount;
    out[1] = kVBase + (s % kNCount) / kTCount;
    const int t = s % kTCount;
    if (t == 0) return 2;
    out[2] = kTBase + t;
    return 3;
  }
  if (cp >= 0xA0) {
    const DecompEntry* end = kDecomp + std::size(kDecomp);
    const DecompEntry* it = std::lower_bound(
        kDecomp, end, static_cast<uint32_t>(cp),
        [](const DecompEntry& e, uint32_t v) { return e.cp < v; });
    if (it != end && it->cp == cp) {
      const uint32_t off = compat ? it->compat_off : it->canon_off;
      const uint32_t len = compat ? it->compat_len : it->canon_len;
      if (len > 0) {
        for (uint32_t i = 0; i < len; ++i) out[i] = kDecompPool[off + i];
        return static_cast<int>(len);
      }
    }
  }
  out[0] = cp;
  return 1;
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const uint64_t key = (static_cast<uint64_t>(a) << 21) | b;
  const CompEntry* end = kComp + std::size(kComp);
  const CompEntry* it = std::lower_bound(kComp, end, key,
                                         [](const CompEntry& e, uint64_t v) { return e.key < v; });
  if (it != end && it->key == key) return it->cp;
  return 0;
}

}  // namespace

Unit decode(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {b, 1, true};
  uint32_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1, cp = b & 0x1F;
  } else if (b == 0xE0) {
    need = 2, lo = 0xA0, cp = b & 0x0F;
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    need = 2, cp = b & 0x0F;
  } else if (b == 0xED) {
    need = 2, hi = 0x9F, cp = b & 0x0F;
  } else if (b == 0xF0) {
    need = 3, lo = 0x90, cp = b & 0x07;
  } else if (b >= 0xF1 && b <= 0xF3) {
    need = 3, cp = b & 0x07;
  } else if (b == 0xF4) {
    need = 3, hi = 0x8F, cp = b & 0x07;
  } else {
    return {0xFFFD, 1, false};
  }
  uint32_t n = 1;
  for (uint32_t k = 0; k < need; ++k) {
    if (i + n >= s.size()) return {0xFFFD, n, false};
    const auto c = static_cast<unsigned char>(s[i + n]);
    if (c < (k == 0 ? lo : 0x80) || c > (k == 0 ? hi : 0xBF)) return {0xFFFD, n, false};
    cp = (cp << 6) | (c & 0x3F);
    ++n;
  }
  return {cp, n, true};
}

char32_t decode_valid(std::string_view s, size_t i, uint32_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  const uint32_t n = seq_len(b);
  *len = n;
  char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (uint32_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

void append_utf8(std::string& out, char32_t cp) { trlx::append_utf8(out, cp); }

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Unit u = decode(s, i);
    if (!u.valid) return false;
    i += u.len;
  }
  return true;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Unit u = decode(bytes, i);
    if (u.valid) {
      out.append(bytes.substr(i, u.len));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += u.len;
  }
  return out;
}

uint8_t classes(char32_t cp) { return range_lookup(kClassRanges, cp); }

bool quick_normalized(std::string_view s, Form form) {
  const char32_t limit = form == Form::NFC ? 0x300 : form == Form::NFD ? 0xC0 : 0xA0;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    uint32_t n;
    if (decode_valid(s, i, &n) >= limit) return false;
    i += n;
  }
  return true;
}

void normalize(std::string_view s, Form form, std::vector<Change>& out) {
  const bool compat = form == Form::NFKD || form == Form::NFKC;
  const size_t base = out.size();
  char32_t buf[32];
  // Decompose; each source character's pieces: the first replaces it, the
  // rest are insertions.
  for (size_t i = 0; i < s.size();) {
    uint32_t n;
    const char32_t cp = decode_valid(s, i, &n);
    i += n;
    const int k = decompose_one(cp, compat, buf);
    for (int j = 0; j < k; ++j) out.emplace_back(buf[j], j == 0 ? 0 : 1);
  }
  // Canonical ordering: stable sort of each run of non-starters by class;
  // the change marks move with their characters.
  for (size_t i = base; i < out.size();) {
    if (ccc(out[i].first) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j].first) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i),
                       out.begin() + static_cast<std::ptrdiff_t>(j),
                       [](const Change& a, const Change& b) { return ccc(a.first) < ccc(b.first); });
    }
    i = j;
  }
  if (form == Form::NFD || form == Form::NFKD) return;
  // Canonical composition. A character absorbed into its starter removes
  // one position from the starter's account (its own mark is carried over).
  if (out.size() - base < 2) return;
  size_t starter = base;
  bool have_starter = ccc(out[base].first) == 0;
  int last_class = have_starter ? 0 : 256;
  size_t w = base + 1;
  for (size_t r = base + 1; r < out.size(); ++r) {
    const Change ch = out[r];
    const int cls = ccc(ch.first);
    char32_t comp = 0;
    if (have_starter && (last_class < cls || last_class == 0)) comp = compose(out[starter].first, ch.first);
    if (comp != 0) {
      out[starter].first = comp;
      out[starter].second += ch.second - 1;
      continue;
    }
    if (cls == 0) {
      starter = w;
      have_starter = true;
    }
    last_class = cls;
    out[w++] = ch;
  }
  out.resize(w);
}

const char* regex_unicode_version() { return kUnicodeVersion; }

namespace {

const RegexClass* find_regex_class(std::string_view name) {
  for (const RegexClass& c : kRegexClasses)
    if (name == c.name) return &c;
  return nullptr;
}

// "[...]" or "[^...]" holding the class's ranges; a nested class is valid
// inside another class in Oniguruma's Ruby syntax.
std::string ranges_class(const RegexClass& c, bool negate) {
  std::string r = negate ? "[^" : "[";
  char buf[32];
  for (uint32_t i = c.first; i < c.first + c.count; ++i) {
    const CaseEntry& e = kRegexRangePool[i];
    if (e.cp == e.lower) {
      std::snprintf(buf, sizeof buf, "\\x{%X}", static_cast<unsigned>(e.cp));
    } else {
      std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", static_cast<unsigned>(e.cp), static_cast<unsigned>(e.lower));
    }
    r += buf;
  }
  r += "]";
  return r;
}

}  // namespace

std::string expand_unicode_classes(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c != '\\' || i + 1 >= p.size()) {
      out.push_back(c);
      ++i;
      continue;
    }
    const char e = p[i + 1];
    if (e == 'd' || e == 'D' || e == 'w' || e == 'W') {
      const char lower_name[2] = {static_cast<char>(e | 0x20), 0};
      out += ranges_class(*find_regex_class(lower_name), e == 'D' || e == 'W');
      i += 2;
      continue;
    }
    if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
      const size_t close = p.find('}', i + 3);
      if (close != std::string_view::npos) {
        std::string_view name = p.substr(i + 3, close - i - 3);
        bool negate = e == 'P';
        if (!name.empty() && name[0] == '^') {
          negate = !negate;
          name.remove_prefix(1);
        }
        const RegexClass* rc = name == "d" || name == "w" ? nullptr : find_regex_class(name);
        if (rc) {
          out += ranges_class(*rc, negate);
          i = close + 1;
          continue;
        }
      }
    }
    out.append(p.substr(i, 2));  // any other escape (also \\), copied as is
    i += 2;
  }
  return out;
}

int lowercase(char32_t cp, char32_t out[3]) {
  if (cp < 0x80) {
    out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return 1;
  }
  const CaseEntry* end = kLower + std::size(kLower);
  const CaseEntry* it = std::lower_bound(kLower, end, static_cast<uint32_t>(cp),
                                         [](const CaseEntry& e, uint32_t v) { return e.cp < v; });
  if (it != end && it->cp == cp) {
    out[0] = it->lower;
    return 1;
  }
  for (const CaseMulti& m : kLowerMulti) {
    if (m.cp == cp) {
      int n = 0;
      for (uint32_t c : m.lower) {
        if (c) out[n++] = c;
      }
      return n;
    }
  }
  out[0] = cp;
  return 1;
}

}  // namespace trlx::text::uni

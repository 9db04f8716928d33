#include "text/tokenizer/tokenizer.hpp"

#include <oniguruma.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <queue>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "text/tokenizer/normalized.hpp"
#include "text/tokenizer/unicode.hpp"

namespace trlx::text {
namespace {

using detail::Align;
using detail::Behavior;
using detail::NStr;
using detail::Piece;
using json = nlohmann::json;

// ---------------------------------------------------------------- JSON access

// A JSON value with the file and path it came from, for error messages.
struct Node {
  const json& j;
  const std::string& file;
  std::string path;

  static const char* kind(const json& v) {
    switch (v.type()) {
      case json::value_t::null: return "null";
      case json::value_t::object: return "an object";
      case json::value_t::array: return "an array";
      case json::value_t::string: return "a string";
      case json::value_t::boolean: return "a boolean";
      case json::value_t::number_integer:
      case json::value_t::number_unsigned: return "an integer";
      case json::value_t::number_float: return "a number";
      default: return "an invalid value";
    }
  }
  std::string sub(std::string_view key) const { return path.empty() ? std::string(key) : path + "." + std::string(key); }
  bool has(std::string_view key) const { return j.is_object() && j.contains(key) && !j.at(std::string(key)).is_null(); }
  Node at(std::string_view key) const {
    if (!j.is_object()) fail_input("{}: key `{}`: expected an object, found {}", file, path, kind(j));
    auto it = j.find(std::string(key));
    if (it == j.end()) fail_input("{}: key `{}` is missing", file, sub(key));
    return Node{*it, file, sub(key)};
  }
  Node item(size_t i) const { return Node{j.at(i), file, path + "[" + std::to_string(i) + "]"}; }
  const json& expect(bool ok, const char* what) const {
    if (!ok) fail_input("{}: key `{}`: expected {}, found {}", file, path, what, kind(j));
    return j;
  }
  std::string str() const { return expect(j.is_string(), "a string").get<std::string>(); }
  bool boolean() const { return expect(j.is_boolean(), "a boolean").get<bool>(); }
  int64_t integer() const {
    return expect(j.is_number_integer() || j.is_number_unsigned(), "an integer").get<int64_t>();
  }
  const json& array() const { return expect(j.is_array(), "an array"); }
  const json& object() const { return expect(j.is_object(), "an object"); }
  std::string str_or(std::string_view key, std::string def) const { return has(key) ? at(key).str() : def; }
  bool bool_or(std::string_view key, bool def) const { return has(key) ? at(key).boolean() : def; }
  std::string type() const {
    object();
    return at("type").str();
  }
  [[noreturn]] void unknown_type(std::string_view family, std::string_view t) const {
    fail_input("{}: key `{}`: unknown {} type \"{}\" (trlx supports: {})", file, sub("type"), family, t,
               family == "normalizer"       ? "NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, Sequence"
               : family == "pre_tokenizer"  ? "ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, "
                                              "Punctuation, Sequence"
               : family == "post_processor" ? "TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence"
               : family == "decoder"        ? "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence"
                                            : "BPE");
  }
};

uint32_t single_char(const Node& n) {
  const std::string s = n.str();
  if (s.empty()) fail_input("{}: key `{}`: expected one character, found an empty string", n.file, n.path);
  uint32_t l;
  const char32_t c = uni::decode_valid(s, 0, &l);
  if (l != s.size() || !uni::is_valid_utf8(s)) fail_input("{}: key `{}`: expected one character, found \"{}\"", n.file, n.path, s);
  return c;
}

// ---------------------------------------------------------------- regex

std::once_flag g_onig_once;

class Regex {
 public:
  Regex(const std::string& pattern, const Node& where) {
    std::call_once(g_onig_once, [] {
      OnigEncoding encs[] = {ONIG_ENCODING_UTF8};
      onig_initialize(encs, 1);
    });
    OnigErrorInfo info;
    const std::string widened = uni::expand_unicode_classes(pattern);
    const auto* p = reinterpret_cast<const OnigUChar*>(widened.data());
    const int r = onig_new(&re_, p, p + widened.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &info);
    if (r != ONIG_NORMAL) {
      re_ = nullptr;
      OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(msg, r, &info);
      fail_input("{}: key `{}`: invalid regular expression \"{}\": {}", where.file, where.path, pattern,
                 reinterpret_cast<const char*>(msg));
    }
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() {
    if (re_) onig_free(re_);
  }
  // Matches left to right like the onig crate's find_iter: an empty match
  // right where the previous match ended is skipped by one character.
  template <typename F>
  void find_iter(std::string_view text, F&& on_match) const {
    thread_local struct RegionHolder {
      OnigRegion* r = onig_region_new();
      ~RegionHolder() { onig_region_free(r, 1); }
    } holder;
    const auto* start = reinterpret_cast<const OnigUChar*>(text.data());
    const auto* end = start + text.size();
    size_t last_end = 0;
    std::optional<size_t> last_match_end;
    while (last_end <= text.size()) {
      const int r = onig_search(re_, start, end, start + last_end, end, holder.r, ONIG_OPTION_NONE);
      if (r < 0) break;
      const auto b = static_cast<size_t>(holder.r->beg[0]);
      const auto e = static_cast<size_t>(holder.r->end[0]);
      if (b == e && last_match_end && *last_match_end == e) {
        last_end += last_end < text.size() ? uni::seq_len(static_cast<unsigned char>(text[last_end])) : 1;
        continue;
      }
      last_end = e;
      last_match_end = e;
      on_match(b, e);
    }
  }

 private:
  OnigRegex re_ = nullptr;
};

// Cover `text` with match/non-match pieces.
std::vector<Piece> regex_pieces(const Regex& re, std::string_view text, bool invert) {
  std::vector<Piece> out;
  if (text.empty()) {
    out.push_back({0, 0, invert});
    return out;
  }
  size_t prev = 0;
  re.find_iter(text, [&](size_t b, size_t e) {
    if (prev != b) out.push_back({prev, b, invert});
    out.push_back({b, e, !invert});
    prev = e;
  });
  if (prev != text.size()) out.push_back({prev, text.size(), invert});
  return out;
}

std::vector<Piece> literal_pieces(std::string_view lit, std::string_view text, bool invert) {
  std::vector<Piece> out;
  if (lit.empty()) {
    out.push_back({0, text.size(), invert});
    return out;
  }
  if (text.empty()) {
    out.push_back({0, 0, invert});
    return out;
  }
  size_t prev = 0, pos;
  while ((pos = text.find(lit, prev)) != std::string_view::npos) {
    if (prev != pos) out.push_back({prev, pos, invert});
    out.push_back({pos, pos + lit.size(), !invert});
    prev = pos + lit.size();
  }
  if (prev != text.size()) out.push_back({prev, text.size(), invert});
  return out;
}

template <typename Pred>
std::vector<Piece> char_pieces(std::string_view text, Pred pred) {
  std::vector<Piece> out;
  if (text.empty()) {
    out.push_back({0, 0, false});
    return out;
  }
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    uint32_t l;
    const char32_t c = uni::decode_valid(text, i, &l);
    if (pred(c)) {
      if (last < i) out.push_back({last, i, false});
      out.push_back({i, i + l, true});
      last = i + l;
    }
    i += l;
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
  return out;
}

// A "pattern" object of tokenizer.json: {"String": s} or {"Regex": r}.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;

  Pattern(const Node& n) {
    n.object();
    if (n.has("Regex")) {
      regex = std::make_unique<Regex>(n.at("Regex").str(), n.at("Regex"));
    } else if (n.has("String")) {
      literal = n.at("String").str();
    } else {
      fail_input("{}: key `{}`: expected {{\"String\": ...}} or {{\"Regex\": ...}}", n.file, n.path);
    }
  }
  std::vector<Piece> pieces(std::string_view text, bool invert = false) const {
    return regex ? regex_pieces(*regex, text, invert) : literal_pieces(literal, text, invert);
  }
};

// ---------------------------------------------------------------- normalizers

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual void apply(NStr& n) const = 0;
};

struct UnicodeNorm : Normalizer {
  uni::Form form;
  explicit UnicodeNorm(uni::Form f) : form(f) {}
  void apply(NStr& n) const override {
    if (uni::quick_normalized(n.s, form)) return;
    std::vector<uni::Change> dest;
    dest.reserve(n.s.size());
    uni::normalize(n.s, form, dest);
    n.transform(dest, 0);
  }
};

struct Lowercase : Normalizer {
  void apply(NStr& n) const override {
    bool ascii_lower = true;
    for (char c : n.s) {
      if ((c >= 'A' && c <= 'Z') || (static_cast<unsigned char>(c) >= 0x80)) {
        ascii_lower = false;
        break;
      }
    }
    if (ascii_lower) return;
    std::vector<uni::Change> dest;
    dest.reserve(n.s.size());
    for (size_t i = 0; i < n.s.size();) {
      uint32_t l;
      char32_t out[3];
      const int k = uni::lowercase(uni::decode_valid(n.s, i, &l), out);
      for (int j = 0; j < k; ++j) dest.emplace_back(out[j], j > 0 ? 1 : 0);
      i += l;
    }
    n.transform(dest, 0);
  }
};

struct StripNorm : Normalizer {
  bool left, right;
  StripNorm(bool l, bool r) : left(l), right(r) {}
  void apply(NStr& n) const override { n.lrstrip(left, right); }
};

struct PrependNorm : Normalizer {
  std::string text;
  explicit PrependNorm(std::string t) : text(std::move(t)) {}
  void apply(NStr& n) const override { n.prepend(text); }
};

struct ReplaceNorm : Normalizer {
  Pattern pattern;
  std::string content;
  ReplaceNorm(const Node& n) : pattern(n.at("pattern")), content(n.at("content").str()) {}
  void apply(NStr& n) const override {
    std::vector<std::pair<size_t, size_t>> m;
    for (const auto& p : pattern.pieces(n.s))
      if (p.match) m.emplace_back(p.b, p.e);
    n.replace(m, content);
  }
};

struct SeqNorm : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> items;
  void apply(NStr& n) const override {
    for (const auto& x : items) x->apply(n);
  }
};

std::unique_ptr<Normalizer> make_normalizer(const Node& n) {
  const std::string t = n.type();
  if (t == "NFC") return std::make_unique<UnicodeNorm>(uni::Form::NFC);
  if (t == "NFD") return std::make_unique<UnicodeNorm>(uni::Form::NFD);
  if (t == "NFKC") return std::make_unique<UnicodeNorm>(uni::Form::NFKC);
  if (t == "NFKD") return std::make_unique<UnicodeNorm>(uni::Form::NFKD);
  if (t == "Lowercase") return std::make_unique<Lowercase>();
  if (t == "Strip") return std::make_unique<StripNorm>(n.bool_or("strip_left", true), n.bool_or("strip_right", true));
  if (t == "Prepend") return std::make_unique<PrependNorm>(n.at("prepend").str());
  if (t == "Replace") return std::make_unique<ReplaceNorm>(n);
  if (t == "Sequence") {
    auto s = std::make_unique<SeqNorm>();
    const Node list = n.at("normalizers");
    for (size_t i = 0; i < list.array().size(); ++i) s->items.push_back(make_normalizer(list.item(i)));
    return s;
  }
  n.unknown_type("normalizer", t);
}

// ---------------------------------------------------------------- pre-tokenizers

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  // Splits one piece (appending to out); may rewrite it.
  virtual void split(NStr& n, std::vector<NStr>& out) const = 0;
};

std::array<char32_t, 256> make_bytes_char() {
  std::array<char32_t, 256> t{};
  std::vector<bool> direct(256, false);
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  int n = 0;
  for (int b = 0; b < 256; ++b) t[b] = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
  return t;
}
const std::array<char32_t, 256>& bytes_char() {
  static const auto t = make_bytes_char();
  return t;
}
// The UTF-8 of each byte's stand-in character.
const std::array<std::string, 256>& bytes_char_utf8() {
  static const auto t = [] {
    std::array<std::string, 256> r;
    for (int b = 0; b < 256; ++b) uni::append_utf8(r[b], bytes_char()[b]);
    return r;
  }();
  return t;
}

const Regex& gpt2_regex() {
  static const std::string file = "<built-in>";
  static const json dummy;
  static const Regex re(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                        Node{dummy, file, "ByteLevel"});
  return re;
}

void byte_level_map(NStr& n) {
  const auto& tab = bytes_char_utf8();
  std::string ns;
  std::vector<Align> nal;
  ns.reserve(n.s.size() * 2);
  nal.reserve(n.s.size() * 2);
  // Every byte becomes one character; all bytes of a source character keep
  // that character's origin.
  for (size_t i = 0; i < n.s.size(); ++i) {
    const std::string& c = tab[static_cast<unsigned char>(n.s[i])];
    ns.append(c);
    nal.insert(nal.end(), c.size(), n.al[i]);
  }
  n.s = std::move(ns);
  n.al = std::move(nal);
}

struct ByteLevelPre : PreTokenizer {
  bool add_prefix_space, use_regex;
  ByteLevelPre(bool a, bool u) : add_prefix_space(a), use_regex(u) {}
  void split(NStr& n, std::vector<NStr>& out) const override {
    if (add_prefix_space && (n.s.empty() || n.s[0] != ' ')) n.prepend(" ");
    const size_t first = out.size();
    if (use_regex) {
      detail::split_by(n, regex_pieces(gpt2_regex(), n.s, false), Behavior::Isolated, out);
    } else if (!n.s.empty()) {
      out.push_back(std::move(n));
    }
    for (size_t i = first; i < out.size(); ++i) byte_level_map(out[i]);
  }
};

Behavior parse_behavior(const Node& n) {
  const std::string b = n.str();
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail_input("{}: key `{}`: expected one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous, found \"{}\"",
             n.file, n.path, b);
}

struct SplitPre : PreTokenizer {
  Pattern pattern;
  Behavior behavior;
  bool invert;
  SplitPre(const Node& n)
      : pattern(n.at("pattern")), behavior(parse_behavior(n.at("behavior"))), invert(n.bool_or("invert", false)) {}
  void split(NStr& n, std::vector<NStr>& out) const override {
    detail::split_by(n, pattern.pieces(n.s, invert), behavior, out);
  }
};

struct MetaspacePre : PreTokenizer {
  std::string rep;
  char32_t rep_c;
  enum class Scheme { Always, First, Never } scheme;
  bool split_;
  MetaspacePre(const Node& n) {
    rep_c = single_char(n.at("replacement"));
    rep = n.at("replacement").str();
    std::string s = "always";
    if (n.has("prepend_scheme")) {
      s = n.at("prepend_scheme").str();
    } else if (n.has("add_prefix_space")) {
      s = n.at("add_prefix_space").boolean() ? "always" : "never";
    }
    if (s == "always") scheme = Scheme::Always;
    else if (s == "first") scheme = Scheme::First;
    else if (s == "never") scheme = Scheme::Never;
    else fail_input("{}: key `{}`: expected always, first or never, found \"{}\"", n.file, n.sub("prepend_scheme"), s);
    split_ = n.bool_or("split", true);
  }
  void split(NStr& n, std::vector<NStr>& out) const override {
    std::vector<std::pair<size_t, size_t>> spaces;
    for (size_t i = 0; i < n.s.size(); ++i)
      if (n.s[i] == ' ') spaces.emplace_back(i, i + 1);
    n.replace(spaces, rep);
    const bool starts = n.s.compare(0, rep.size(), rep) == 0;
    if ((scheme == Scheme::Always && !starts) || (scheme == Scheme::First && !starts && n.ob == 0 && (n.al.empty() || n.al[0].first == 0)))
      n.prepend(rep);
    if (split_) {
      detail::split_by(n, char_pieces(n.s, [&](char32_t c) { return c == rep_c; }), Behavior::MergedWithNext, out);
    } else if (!n.s.empty()) {
      out.push_back(std::move(n));
    }
  }
};

struct DigitsPre : PreTokenizer {
  bool individual;
  explicit DigitsPre(bool i) : individual(i) {}
  void split(NStr& n, std::vector<NStr>& out) const override {
    detail::split_by(n, char_pieces(n.s, uni::is_numeric), individual ? Behavior::Isolated : Behavior::Contiguous, out);
  }
};

struct WhitespacePre : PreTokenizer {
  // \w+|[^\w\s]+ with the gaps (whitespace) removed.
  void split(NStr& n, std::vector<NStr>& out) const override {
    const std::string& s = n.s;
    size_t i = 0;
    while (i < s.size()) {
      uint32_t l;
      const char32_t c = uni::decode_valid(s, i, &l);
      if (uni::is_word(c) || !uni::is_whitespace(c)) {
        const bool word = uni::is_word(c);
        size_t j = i + l;
        while (j < s.size()) {
          uint32_t l2;
          const char32_t d = uni::decode_valid(s, j, &l2);
          if (word ? !uni::is_word(d) : (uni::is_word(d) || uni::is_whitespace(d))) break;
          j += l2;
        }
        out.push_back(n.slice(i, j));
        i = j;
      } else {
        i += l;
      }
    }
  }
};

struct WhitespaceSplitPre : PreTokenizer {
  void split(NStr& n, std::vector<NStr>& out) const override {
    detail::split_by(n, char_pieces(n.s, uni::is_whitespace), Behavior::Removed, out);
  }
};

struct PunctuationPre : PreTokenizer {
  Behavior behavior;
  explicit PunctuationPre(Behavior b) : behavior(b) {}
  void split(NStr& n, std::vector<NStr>& out) const override {
    detail::split_by(n, char_pieces(n.s, uni::is_punctuation), behavior, out);
  }
};

struct SeqPre : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> items;
  void split(NStr& n, std::vector<NStr>& out) const override {
    std::vector<NStr> cur, next;
    cur.push_back(std::move(n));
    for (const auto& p : items) {
      next.clear();
      for (auto& x : cur) p->split(x, next);
      std::swap(cur, next);
    }
    for (auto& x : cur) out.push_back(std::move(x));
  }
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Node& n) {
  const std::string t = n.type();
  if (t == "ByteLevel") return std::make_unique<ByteLevelPre>(n.bool_or("add_prefix_space", true), n.bool_or("use_regex", true));
  if (t == "Split") return std::make_unique<SplitPre>(n);
  if (t == "Metaspace") return std::make_unique<MetaspacePre>(n);
  if (t == "Digits") return std::make_unique<DigitsPre>(n.bool_or("individual_digits", false));
  if (t == "Whitespace") return std::make_unique<WhitespacePre>();
  if (t == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  if (t == "Punctuation")
    return std::make_unique<PunctuationPre>(n.has("behavior") ? parse_behavior(n.at("behavior")) : Behavior::Isolated);
  if (t == "Sequence") {
    auto s = std::make_unique<SeqPre>();
    const Node list = n.at("pretokenizers");
    for (size_t i = 0; i < list.array().size(); ++i) s->items.push_back(make_pre_tokenizer(list.item(i)));
    return s;
  }
  n.unknown_type("pre_tokenizer", t);
}

// ---------------------------------------------------------------- BPE model

struct SvHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept {
    // FNV-1a: short keys, no allocation
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }
};
struct SvEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
};
using Vocab = std::unordered_map<std::string, int32_t, SvHash, SvEq>;

// (left id, right id) -> (rank, merged id). Open addressing with linear
// probing: the lookup in BPE's inner loop. Ids are >= 0, so a key never has
// its top bit set and all ones marks an empty slot.
class MergeTable {
 public:
  struct Value {
    uint32_t rank;
    int32_t id;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
  }
  // Later entries replace earlier ones with the same key.
  void set(uint64_t k, Value v) {
    if (2 * (count_ + 1) > slots_.size()) rehash(std::max<size_t>(16, 2 * slots_.size()));
    size_t i = slot_of(k);
    while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++count_;
    slots_[i] = {k, v};
  }
  const Value* find(uint64_t k) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = slot_of(k);; i = (i + 1) & mask_) {
      const Slot& sl = slots_[i];
      if (sl.key == k) return &sl.value;
      if (sl.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    Value value;
  };
  size_t slot_of(uint64_t k) const {
    k ^= k >> 31;
    k *= 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(k >> 17) & mask_;
  }
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{kEmpty, {0, 0}});
    mask_ = cap - 1;
    count_ = 0;
    for (const Slot& sl : old)
      if (sl.key != kEmpty) set(sl.key, sl.value);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, count_ = 0;
};

struct WordPiece {
  int32_t id;
  uint32_t len;  // bytes of the word it covers
};

class Bpe {
 public:
  Vocab vocab;
  // id -> token; dense table when ids are (nearly) dense, a map otherwise so
  // that a file with one huge id cannot make us allocate gigabytes.
  std::vector<const std::string*> vocab_r;
  std::unordered_map<int32_t, const std::string*> vocab_r_sparse;
  const std::string* token(int32_t id) const {
    if (id < 0) return nullptr;
    if (!vocab_r.empty() || vocab_r_sparse.empty()) {
      return static_cast<size_t>(id) < vocab_r.size() ? vocab_r[static_cast<size_t>(id)] : nullptr;
    }
    auto it = vocab_r_sparse.find(id);
    return it == vocab_r_sparse.end() ? nullptr : it->second;
  }
  MergeTable merges;
  std::optional<std::string> unk;
  std::optional<int32_t> unk_id;
  std::string prefix, suffix;
  bool has_prefix = false, has_suffix = false;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<int32_t, 256> byte_ids{};
  bool all_bytes = false;
  // Vocabulary id of each BMP character as a whole token (-1: none); the
  // first lookups of every word, without hashing.
  std::vector<int32_t> bmp_ids;

  void index_bmp() {
    bmp_ids.assign(0x10000, -1);
    for (const auto& [tok, id] : vocab) {
      if (tok.empty() || tok.size() > 3 || !uni::is_valid_utf8(tok)) continue;
      uint32_t len;
      const char32_t cp = uni::decode_valid(tok, 0, &len);
      if (len == tok.size()) bmp_ids[cp] = id;
    }
  }

  void tokenize(std::string_view w, std::vector<WordPiece>& out) const {
    if (w.empty()) return;
    if (ignore_merges) {
      auto it = vocab.find(w);
      if (it != vocab.end()) {
        out.push_back({it->second, static_cast<uint32_t>(w.size())});
        return;
      }
    }
    CacheShard* shard = nullptr;
    if (w.size() < 256) {
      shard = &cache_[SvHash{}(w) % kCacheShards];
      std::lock_guard<std::mutex> lock(shard->mu);
      auto it = shard->words.find(w);
      if (it != shard->words.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const size_t before = out.size();
    merge_word(w, out);
    if (shard) {
      std::lock_guard<std::mutex> lock(shard->mu);
      if (shard->words.size() < 10000 / kCacheShards)
        shard->words.emplace(std::string(w), std::vector<WordPiece>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
    }
  }

 private:
  struct Sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  // Words already merged, sharded so that threads encoding at once seldom
  // wait on each other.
  static constexpr size_t kCacheShards = 16;
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<WordPiece>, SvHash, SvEq> words;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;

  struct Cand {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };

  void merge_word(std::string_view w, std::vector<WordPiece>& res) const {
    thread_local std::vector<Sym> syms;
    thread_local std::vector<Cand> heap;
    syms.clear();
    heap.clear();
    syms.reserve(w.size());
    std::optional<std::pair<int32_t, uint32_t>> pending_unk;
    auto add = [&](int32_t id, uint32_t len) {
      const auto n = static_cast<int32_t>(syms.size());
      syms.push_back({id, n - 1, n + 1, len});
    };
    std::string buf;
    for (size_t i = 0; i < w.size();) {
      const uint32_t l = std::min<uint32_t>(uni::seq_len(static_cast<unsigned char>(w[i])), static_cast<uint32_t>(w.size() - i));
      const bool first = i == 0, last = i + l >= w.size();
      std::string_view piece = w.substr(i, l);
      const bool affixed = (!first && has_prefix) || (last && has_suffix);
      if (!affixed && l < 4 && l == uni::seq_len(static_cast<unsigned char>(piece[0])) && !bmp_ids.empty()) {
        uint32_t len;
        const char32_t cp = uni::decode_valid(piece, 0, &len);
        const int32_t id = bmp_ids[cp];
        if (id >= 0) {
          if (pending_unk) {
            add(pending_unk->first, pending_unk->second);
            pending_unk.reset();
          }
          add(id, l);
          i += l;
          continue;
        }
      }
      if (affixed) {
        buf.clear();
        if (!first && has_prefix) buf += prefix;
        buf += piece;
        if (last && has_suffix) buf += suffix;
        piece = buf;
      }
      auto it = vocab.find(piece);
      if (it != vocab.end()) {
        if (pending_unk) {
          add(pending_unk->first, pending_unk->second);
          pending_unk.reset();
        }
        add(it->second, l);
      } else {
        bool done = false;
        if (byte_fallback) {
          bool ok = true;
          for (unsigned char c : piece) ok = ok && byte_ids[c] >= 0;
          if (ok) {
            // the fallback covers the looked-up piece byte by byte
            for (unsigned char c : piece) add(byte_ids[c], 1);
            done = true;
          }
        }
        if (!done && unk_id) {
          if (pending_unk && fuse_unk) {
            pending_unk->second += l;
          } else {
            if (pending_unk) add(pending_unk->first, pending_unk->second);
            pending_unk = std::make_pair(*unk_id, l);
          }
        }
      }
      i += l;
    }
    if (pending_unk) add(pending_unk->first, pending_unk->second);
    if (!syms.empty()) syms.back().next = -1;

    auto push = [&](Cand c) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end());
    };
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const MergeTable::Value* m = merges.find(MergeTable::key(syms[i].id, syms[i + 1].id));
      if (m) heap.push_back({m->rank, static_cast<int32_t>(i), m->id});
    }
    std::make_heap(heap.begin(), heap.end());
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const Cand top = heap.back();
      heap.pop_back();
      Sym& cur = syms[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const Sym right = syms[cur.next];
      const MergeTable::Value* it = merges.find(MergeTable::key(cur.id, right.id));
      if (!it || it->id != top.new_id) continue;
      cur.id = top.new_id;
      cur.len += right.len;
      syms[cur.next].len = 0;
      cur.next = right.next;
      if (right.next >= 0 && static_cast<size_t>(right.next) < syms.size()) syms[right.next].prev = top.pos;
      if (cur.prev >= 0) {
        const MergeTable::Value* p = merges.find(MergeTable::key(syms[cur.prev].id, cur.id));
        if (p) push({p->rank, cur.prev, p->id});
      }
      if (cur.next >= 0) {
        const MergeTable::Value* p = merges.find(MergeTable::key(cur.id, syms[cur.next].id));
        if (p) push({p->rank, top.pos, p->id});
      }
    }
    for (const Sym& s : syms)
      if (s.len) res.push_back({s.id, s.len});
  }
};

std::unique_ptr<Bpe> make_bpe(const Node& n) {
  n.object();
  const std::string t = n.has("type") ? n.at("type").str() : (n.has("merges") ? "BPE" : "");
  if (t != "BPE") {
    if (t.empty()) fail_input("{}: key `{}` is missing", n.file, n.sub("type"));
    fail_input("{}: key `{}`: unsupported model type \"{}\" (trlx supports BPE)", n.file, n.sub("type"), t);
  }
  auto m = std::make_unique<Bpe>();
  const Node v = n.at("vocab");
  v.object();
  m->vocab.reserve(v.j.size());
  int32_t max_id = -1;
  for (auto it = v.j.begin(); it != v.j.end(); ++it) {
    const Node idn{it.value(), n.file, v.path + "." + it.key()};
    const int64_t id = idn.integer();
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      fail_input("{}: key `{}`: expected a token id >= 0, found {}", n.file, idn.path, id);
    m->vocab[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  if (static_cast<size_t>(max_id) <= 4 * m->vocab.size() + 65536) {
    m->vocab_r.assign(static_cast<size_t>(max_id + 1), nullptr);
    for (const auto& [tok, id] : m->vocab) m->vocab_r[static_cast<size_t>(id)] = &tok;
  } else {
    for (const auto& [tok, id] : m->vocab) m->vocab_r_sparse[id] = &tok;
  }
  if (n.has("unk_token")) {
    m->unk = n.at("unk_token").str();
    auto it = m->vocab.find(*m->unk);
    if (it != m->vocab.end()) m->unk_id = it->second;
  }
  if (n.has("continuing_subword_prefix")) {
    m->prefix = n.at("continuing_subword_prefix").str();
    m->has_prefix = true;
  }
  if (n.has("end_of_word_suffix")) {
    m->suffix = n.at("end_of_word_suffix").str();
    m->has_suffix = true;
  }
  m->fuse_unk = n.bool_or("fuse_unk", false);
  m->byte_fallback = n.bool_or("byte_fallback", false);
  m->ignore_merges = n.bool_or("ignore_merges", false);
  if (n.has("dropout") && !n.at("dropout").j.is_number())
    fail_input("{}: key `{}`: expected a number or null", n.file, n.sub("dropout"));
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = m->vocab.find(std::string_view(name));
    m->byte_ids[b] = it == m->vocab.end() ? -1 : it->second;
  }
  const Node merges = n.at("merges");
  const json& arr = merges.array();
  m->merges.reserve(arr.size());
  std::string merged;
  for (size_t i = 0; i < arr.size(); ++i) {
    std::string a, b;
    const json& e = arr[i];
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail_input("{}: key `{}[{}]`: expected \"<left> <right>\", found \"{}\"", n.file, merges.path, i, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail_input("{}: key `{}[{}]`: expected a string or a pair of strings, found {}", n.file, merges.path, i, Node::kind(e));
    }
    auto ia = m->vocab.find(a), ib = m->vocab.find(b);
    if (ia == m->vocab.end() || ib == m->vocab.end())
      fail_input("{}: key `{}[{}]`: merge token \"{}\" is not in the vocab", n.file, merges.path, i,
                 ia == m->vocab.end() ? a : b);
    const size_t pl = m->prefix.size();
    merged = a;
    merged.append(b, std::min(pl, b.size()), std::string::npos);
    auto in = m->vocab.find(merged);
    if (in == m->vocab.end())
      fail_input("{}: key `{}[{}]`: merged token \"{}\" is not in the vocab", n.file, merges.path, i, merged);
    m->merges.set(MergeTable::key(ia->second, ib->second), {static_cast<uint32_t>(i), in->second});
  }
  m->index_bmp();
  return m;
}

// ---------------------------------------------------------------- decoders

struct Decoder {
  virtual ~Decoder() = default;
  virtual void chain(std::vector<std::string>& toks) const = 0;
};


struct ByteLevelDec : Decoder {
  void chain(std::vector<std::string>& toks) const override {
    static const std::unordered_map<char32_t, unsigned char> rev = [] {
      std::unordered_map<char32_t, unsigned char> r;
      for (int b = 0; b < 256; ++b) r[bytes_char()[b]] = static_cast<unsigned char>(b);
      return r;
    }();
    std::string bytes;
    for (const auto& t : toks) {
      std::string tb;
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        const uni::Unit u = uni::decode(t, i);
        auto it = u.valid ? rev.find(u.cp) : rev.end();
        if (it == rev.end()) ok = false;
        else tb.push_back(static_cast<char>(it->second));
        i += u.len;
      }
      bytes += ok ? tb : t;
    }
    toks.assign(1, uni::lossy(bytes));
  }
};

struct MetaspaceDec : Decoder {
  char32_t rep;
  bool never;
  MetaspaceDec(const Node& n) {
    rep = single_char(n.at("replacement"));
    std::string s = "always";
    if (n.has("prepend_scheme")) s = n.at("prepend_scheme").str();
    else if (n.has("add_prefix_space")) s = n.at("add_prefix_space").boolean() ? "always" : "never";
    never = s == "never";
  }
  void chain(std::vector<std::string>& toks) const override {
    for (size_t i = 0; i < toks.size(); ++i) {
      std::string out;
      const std::string& t = toks[i];
      for (size_t k = 0; k < t.size();) {
        uint32_t l;
        const char32_t c = uni::decode_valid(t, k, &l);
        if (c == rep) {
          if (!(i == 0 && !never)) out.push_back(' ');
        } else {
          out.append(t, k, l);
        }
        k += l;
      }
      toks[i] = std::move(out);
    }
  }
};

struct ByteFallbackDec : Decoder {
  void chain(std::vector<std::string>& toks) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (uni::is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : toks) {
      int v = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        auto hex = [](char c) {
          return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        };
        const int h = hex(t[3]), l = hex(t[4]);
        if (h >= 0 && l >= 0) v = h * 16 + l;
      }
      if (v >= 0) {
        pending.push_back(static_cast<char>(v));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    toks = std::move(out);
  }
};

struct FuseDec : Decoder {
  void chain(std::vector<std::string>& toks) const override {
    std::string s;
    for (const auto& t : toks) s += t;
    toks.assign(1, std::move(s));
  }
};

struct StripDec : Decoder {
  char32_t content;
  size_t start, stop;
  StripDec(const Node& n) : content(single_char(n.at("content"))) {
    const int64_t a = n.at("start").integer(), b = n.at("stop").integer();
    if (a < 0 || b < 0) fail_input("{}: key `{}`: expected counts >= 0", n.file, n.path);
    start = static_cast<size_t>(a);
    stop = static_cast<size_t>(b);
  }
  void chain(std::vector<std::string>& toks) const override {
    for (auto& t : toks) {
      std::vector<std::pair<size_t, size_t>> chars;  // (byte pos, len)
      std::vector<char32_t> cps;
      for (size_t i = 0; i < t.size();) {
        uint32_t l;
        cps.push_back(uni::decode_valid(t, i, &l));
        chars.emplace_back(i, l);
        i += l;
      }
      size_t b = 0;
      for (size_t i = 0; i < std::min(start, cps.size()); ++i) {
        if (cps[i] != content) break;
        b = i + 1;
      }
      size_t e = cps.size();
      // the reference panics when `stop` exceeds the token; trlx clamps
      for (size_t i = 0; i < std::min(stop, cps.size()); ++i) {
        const size_t idx = cps.size() - i - 1;
        if (cps[idx] != content) break;
        e = idx;
      }
      if (e < b) e = b;
      const size_t bb = b < chars.size() ? chars[b].first : t.size();
      const size_t eb = e < chars.size() ? chars[e].first : t.size();
      t = t.substr(bb, eb - bb);
    }
  }
};

struct ReplaceDec : Decoder {
  Pattern pattern;
  std::string content;
  ReplaceDec(const Node& n) : pattern(n.at("pattern")), content(n.at("content").str()) {}
  void chain(std::vector<std::string>& toks) const override {
    for (auto& t : toks) {
      std::string out;
      for (const auto& p : pattern.pieces(t)) {
        if (p.match) out += content;
        else out.append(t, p.b, p.e - p.b);
      }
      t = std::move(out);
    }
  }
};

struct SeqDec : Decoder {
  std::vector<std::unique_ptr<Decoder>> items;
  void chain(std::vector<std::string>& toks) const override {
    for (const auto& d : items) d->chain(toks);
  }
};

std::unique_ptr<Decoder> make_decoder(const Node& n) {
  const std::string t = n.type();
  if (t == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (t == "Metaspace") return std::make_unique<MetaspaceDec>(n);
  if (t == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (t == "Fuse") return std::make_unique<FuseDec>();
  if (t == "Strip") return std::make_unique<StripDec>(n);
  if (t == "Replace") return std::make_unique<ReplaceDec>(n);
  if (t == "Sequence") {
    auto s = std::make_unique<SeqDec>();
    const Node list = n.at("decoders");
    for (size_t i = 0; i < list.array().size(); ++i) s->items.push_back(make_decoder(list.item(i)));
    return s;
  }
  n.unknown_type("decoder", t);
}

// ---------------------------------------------------------------- post-processors

struct Tok {
  int32_t id;
  size_t b, e;
  uint8_t special;
};

struct PostProcessor {
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<Tok>& toks, bool add_special, const std::function<std::string(int32_t)>& token_of, std::string_view input) const = 0;
};

struct ByteLevelPost : PostProcessor {
  bool trim_offsets, add_prefix_space;
  ByteLevelPost(bool t, bool a) : trim_offsets(t), add_prefix_space(a) {}
  void process(std::vector<Tok>& toks, bool, const std::function<std::string(int32_t)>& token_of,
               std::string_view input) const override {
    if (!trim_offsets) return;
    // The reference trims in characters of the input (its offsets are
    // character offsets by then), so step over whole UTF-8 units.
    std::vector<size_t> bounds;  // start of every unit, then the end
    for (size_t i = 0; i < input.size();) {
      bounds.push_back(i);
      i += uni::decode(input, i).len;
    }
    bounds.push_back(input.size());
    auto unit_index = [&](size_t pos) {
      return static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), pos) - bounds.begin());
    };
    for (size_t i = 0; i < toks.size(); ++i) {
      Tok& t = toks[i];
      const std::string s = token_of(t.id);
      std::vector<char32_t> cps;
      for (size_t k = 0; k < s.size();) {
        const uni::Unit u = uni::decode(s, k);
        cps.push_back(u.cp);
        k += u.len;
      }
      auto is_sp = [](char32_t c) { return c == 0x120 || uni::is_whitespace(c); };
      size_t lead = 0, trail = 0;
      while (lead < cps.size() && is_sp(cps[lead])) ++lead;
      while (trail < cps.size() && is_sp(cps[cps.size() - 1 - trail])) ++trail;
      if (lead > 0) {
        const bool is_first = i == 0 || t.b == 0;
        if (is_first && add_prefix_space && lead == 1) lead = 0;
        const size_t bi = unit_index(t.b);
        t.b = std::min(bounds[std::min(bi + lead, bounds.size() - 1)], t.e);
      }
      if (trail > 0) {
        const size_t ei = unit_index(t.e);
        if (ei >= trail) t.e = std::max(bounds[ei - trail], t.b);
      }
    }
  }
};

struct TemplatePost : PostProcessor {
  struct Item {
    bool is_seq;
    std::vector<int32_t> ids;  // for special tokens
  };
  std::vector<Item> single;
  TemplatePost() = default;
  TemplatePost(const Node& n) {
    std::unordered_map<std::string, std::vector<int32_t>> specials;
    if (n.has("special_tokens")) {
      const Node st = n.at("special_tokens");
      for (auto it = st.object().begin(); it != st.j.end(); ++it) {
        const Node e{it.value(), n.file, st.path + "." + it.key()};
        const Node ids = e.at("ids");
        std::vector<int32_t> v;
        for (size_t i = 0; i < ids.array().size(); ++i) v.push_back(static_cast<int32_t>(ids.item(i).integer()));
        specials[it.key()] = v;
      }
    }
    const Node s = n.at("single");
    for (size_t i = 0; i < s.array().size(); ++i) {
      const Node p = s.item(i);
      if (p.has("Sequence")) {
        single.push_back({true, {}});
      } else if (p.has("SpecialToken")) {
        const Node idn = p.at("SpecialToken").at("id");
        const std::string id = idn.str();
        auto it = specials.find(id);
        if (it == specials.end())
          fail_input("{}: key `{}`: special token \"{}\" is not in `{}`", n.file, idn.path, id, n.sub("special_tokens"));
        single.push_back({false, it->second});
      } else {
        fail_input("{}: key `{}`: expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}", n.file, p.path);
      }
    }
  }
  void process(std::vector<Tok>& toks, bool add_special, const std::function<std::string(int32_t)>&,
               std::string_view) const override {
    if (!add_special) return;
    std::vector<Tok> out;
    out.reserve(toks.size() + 4);
    for (const auto& it : single) {
      if (it.is_seq) out.insert(out.end(), toks.begin(), toks.end());
      else
        for (int32_t id : it.ids) out.push_back({id, 0, 0, 1});
    }
    toks = std::move(out);
  }
};

struct SeqPost : PostProcessor {
  std::vector<std::unique_ptr<PostProcessor>> items;
  void process(std::vector<Tok>& toks, bool add_special, const std::function<std::string(int32_t)>& token_of,
               std::string_view input) const override {
    for (const auto& p : items) p->process(toks, add_special, token_of, input);
  }
};

std::unique_ptr<PostProcessor> make_post(const Node& n) {
  const std::string t = n.type();
  if (t == "ByteLevel") return std::make_unique<ByteLevelPost>(n.bool_or("trim_offsets", true), n.bool_or("add_prefix_space", true));
  if (t == "TemplateProcessing") return std::make_unique<TemplatePost>(n);
  if (t == "BertProcessing" || t == "RobertaProcessing") {
    // [cls] $A [sep]; RoBERTa also trims offsets like ByteLevel first.
    auto pair_id = [&](std::string_view key) {
      const Node p = n.at(key);
      if (!p.j.is_array() || p.j.size() != 2) fail_input("{}: key `{}`: expected [token, id]", n.file, p.path);
      p.item(0).str();
      return static_cast<int32_t>(p.item(1).integer());
    };
    auto tp = std::make_unique<TemplatePost>();
    tp->single = {{false, {pair_id("cls")}}, {true, {}}, {false, {pair_id("sep")}}};
    if (t == "BertProcessing") return tp;
    auto seq = std::make_unique<SeqPost>();
    seq->items.push_back(std::make_unique<ByteLevelPost>(n.bool_or("trim_offsets", true), n.bool_or("add_prefix_space", true)));
    seq->items.push_back(std::move(tp));
    return seq;
  }
  if (t == "Sequence") {
    auto s = std::make_unique<SeqPost>();
    const Node list = n.at("processors");
    for (size_t i = 0; i < list.array().size(); ++i) s->items.push_back(make_post(list.item(i)));
    return s;
  }
  n.unknown_type("post_processor", t);
}

// ---------------------------------------------------------------- added tokens

struct AddedToken {
  std::string content;
  int32_t id;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// Leftmost-longest matching over a small set of literal strings.
class Trie {
 public:
  void add(std::string_view s, int32_t value) {
    if (s.empty()) return;
    int cur = 0;
    for (unsigned char c : s) {
      auto it = nodes_[cur].next.find(c);
      if (it == nodes_[cur].next.end()) {
        nodes_.push_back({});
        it = nodes_[cur].next.emplace(c, static_cast<int>(nodes_.size() - 1)).first;
      }
      cur = it->second;
    }
    nodes_[cur].value = value;
    first_[static_cast<unsigned char>(s[0])] = true;
    empty_ = false;
  }
  bool empty() const { return empty_; }
  // Longest match starting at i: (length, value) or length 0.
  std::pair<size_t, int32_t> longest_at(std::string_view s, size_t i) const {
    if (!first_[static_cast<unsigned char>(s[i])]) return {0, -1};
    int cur = 0;
    std::pair<size_t, int32_t> best{0, -1};
    for (size_t k = i; k < s.size(); ++k) {
      auto it = nodes_[cur].next.find(static_cast<unsigned char>(s[k]));
      if (it == nodes_[cur].next.end()) break;
      cur = it->second;
      if (nodes_[cur].value >= 0) best = {k + 1 - i, nodes_[cur].value};
    }
    return best;
  }

 private:
  struct TNode {
    std::unordered_map<unsigned char, int> next;
    int32_t value = -1;
  };
  std::vector<TNode> nodes_{TNode{}};
  std::array<bool, 256> first_{};
  bool empty_ = true;
};

size_t last_char_start(std::string_view s) {
  size_t p = s.size() - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}

}  // namespace

// ---------------------------------------------------------------- the tokenizer

struct Tokenizer::Impl {
  std::string file;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<Bpe> model;
  std::unique_ptr<PostProcessor> post;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;                  // index = position in added_by_id order
  std::unordered_map<int32_t, size_t> added_by_id;
  Vocab added_by_content;
  Trie raw_trie, norm_trie;                       // value = index into `added`
  size_t vocab_size = 0;

  std::optional<std::string> bos, eos, pad, unk;
  std::string chat_template;
  std::optional<int64_t> max_length;

  std::optional<int32_t> token_to_id(std::string_view t) const {
    auto it = added_by_content.find(t);
    if (it != added_by_content.end()) return it->second;
    auto m = model->vocab.find(t);
    if (m != model->vocab.end()) return m->second;
    return std::nullopt;
  }
  const std::string* id_to_token(int32_t id) const {
    auto it = added_by_id.find(id);
    if (it != added_by_id.end()) return &added[it->second].content;
    return model->token(id);
  }

  // Split `n` around added tokens found with `trie`; pieces with a token get it.
  void split_added(NStr& n, const Trie& trie, std::vector<std::pair<NStr, int32_t>>& out) const {
    const std::string& s = n.s;
    if (s.empty()) return;
    if (trie.empty()) {
      out.emplace_back(std::move(n), -1);
      return;
    }
    size_t start_offset = 0;
    for (size_t i = 0; i < s.size();) {
      auto [len, idx] = trie.longest_at(s, i);
      if (len == 0) {
        ++i;
        continue;
      }
      size_t start = i, stop = i + len;
      i = stop;
      const AddedToken& t = added[static_cast<size_t>(idx)];
      if (t.single_word) {
        bool start_space = true, stop_space = true;
        if (start > 0) {
          uint32_t l;
          start_space = !uni::is_word(uni::decode_valid(s, last_char_start(s.substr(0, start)), &l));
        }
        if (stop < s.size()) {
          uint32_t l;
          stop_space = !uni::is_word(uni::decode_valid(s, stop, &l));
        }
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t ns = start;
        while (ns > 0) {
          const size_t p = last_char_start(s.substr(0, ns));
          uint32_t l;
          if (!uni::is_whitespace(uni::decode_valid(s, p, &l))) break;
          ns = p;
        }
        start = std::max(ns, start_offset);
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          uint32_t l;
          if (!uni::is_whitespace(uni::decode_valid(s, stop, &l))) break;
          stop += l;
        }
      }
      if (start_offset < start) out.emplace_back(n.slice(start_offset, start), -1);
      if (start < stop) out.emplace_back(n.slice(start, stop), t.id);
      start_offset = stop;
    }
    if (start_offset < s.size()) out.emplace_back(n.slice(start_offset, s.size()), -1);
  }

  std::vector<Tok> run(std::string_view text, bool add_special) const {
    std::vector<Tok> toks;
    NStr root = NStr::from_input(text);
    std::vector<std::pair<NStr, int32_t>> first, second;
    split_added(root, raw_trie, first);
    std::vector<NStr> words;
    for (auto& [piece, id] : first) {
      if (id >= 0) {
        second.emplace_back(std::move(piece), id);
        continue;
      }
      if (normalizer) normalizer->apply(piece);
      split_added(piece, norm_trie, second);
    }
    std::vector<WordPiece> wp;
    for (auto& [piece, id] : second) {
      if (id >= 0) {
        const Align a = piece.original(0, piece.s.size());
        toks.push_back({id, a.first, a.second, 0});
        continue;
      }
      words.clear();
      if (pre) {
        pre->split(piece, words);
      } else {
        words.push_back(std::move(piece));
      }
      for (const NStr& w : words) {
        if (w.s.empty()) continue;
        wp.clear();
        model->tokenize(w.s, wp);
        size_t pos = 0;
        for (const WordPiece& p : wp) {
          const Align a = w.original(pos, pos + p.len);
          toks.push_back({p.id, a.first, a.second, 0});
          pos += p.len;
        }
      }
    }
    if (post) {
      post->process(toks, add_special, [this](int32_t id) {
        const std::string* s = id_to_token(id);
        return s ? *s : std::string();
      }, text);
    }
    return toks;
  }
};

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail_input("{}: cannot open the file", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    fail_input("{}: not valid JSON (truncated or malformed) at byte {}: {}", name, e.byte, e.what());
  }
}

// A token in tokenizer_config.json: a string, an AddedToken dict or null.
std::optional<std::string> config_token(const Node& cfg, std::string_view key) {
  if (!cfg.has(key)) return std::nullopt;
  const Node n = cfg.at(key);
  if (n.j.is_string()) return n.str();
  if (n.j.is_object()) return n.at("content").str();
  fail_input("{}: key `{}`: expected a string, an AddedToken object or null, found {}", n.file, n.path, Node::kind(n.j));
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir, Compat compat) {
  const auto tj = dir / "tokenizer.json";
  const auto tc = dir / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec))
    fail_input("{}: no such directory (expected a model directory holding tokenizer.json)", dir.string());
  if (!std::filesystem::is_directory(dir, ec))
    fail_input("{}: is a file, not a directory (give the model directory that holds it)", dir.string());
  if (!std::filesystem::exists(tj)) fail_input("{}: no tokenizer.json in this directory", dir.string());
  Tokenizer tok = from_files(tj, std::filesystem::exists(tc) ? std::optional(tc) : std::nullopt, compat);
  // A chat_template.jinja beside the tokenizer (how transformers saves
  // templates since 4.50) takes precedence over tokenizer_config.json's.
  const auto jinja = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja)) tok.impl_->chat_template = read_file(jinja);
  return tok;
}

Tokenizer Tokenizer::from_files(const std::filesystem::path& tokenizer_json,
                                const std::optional<std::filesystem::path>& tokenizer_config, Compat compat) {
  const std::string t = read_file(tokenizer_json);
  if (tokenizer_config) {
    const std::string c = read_file(*tokenizer_config);
    return from_json(t, tokenizer_json.string(), c, tokenizer_config->string(), compat);
  }
  return from_json(t, tokenizer_json.string(), std::nullopt, "tokenizer_config.json", compat);
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view name,
                               std::optional<std::string_view> tokenizer_config, std::string_view config_name,
                               Compat compat) {
  try {
    return load(tokenizer_json, name, tokenizer_config, config_name, compat);
  } catch (const nlohmann::json::exception& e) {
    // Every access is checked before; this is a safety net, not a code path.
    fail_input("{}: unexpected JSON structure: {}", name, e.what());
  }
}

Tokenizer Tokenizer::load(std::string_view tokenizer_json, std::string_view name,
                          std::optional<std::string_view> tokenizer_config, std::string_view config_name,
                          Compat compat) {
  auto impl = std::make_unique<Impl>();
  impl->file = std::string(name);
  const std::string& file = impl->file;
  const json root = parse_json(tokenizer_json, file);
  const Node r{root, file, ""};
  if (!root.is_object()) fail_input("{}: expected a JSON object at the top level, found {}", file, Node::kind(root));
  if (r.has("version") && r.at("version").str() != "1.0")
    fail_input("{}: key `version`: expected \"1.0\", found \"{}\"", file, r.at("version").str());
  impl->model = make_bpe(r.at("model"));
  if (r.has("normalizer")) impl->normalizer = make_normalizer(r.at("normalizer"));
  if (r.has("pre_tokenizer")) impl->pre = make_pre_tokenizer(r.at("pre_tokenizer"));
  if (r.has("post_processor")) impl->post = make_post(r.at("post_processor"));
  if (r.has("decoder")) impl->decoder = make_decoder(r.at("decoder"));

  const std::string cname(config_name);
  json cfg = json::object();
  if (tokenizer_config) {
    cfg = parse_json(*tokenizer_config, cname);
    if (!cfg.is_object()) fail_input("{}: expected a JSON object at the top level, found {}", cname, Node::kind(cfg));
  }
  const Node c{cfg, cname, ""};
  const std::string cls = c.has("tokenizer_class") ? c.at("tokenizer_class").str() : "";
  if (compat == Compat::kTransformersV5 && (cls == "LlamaTokenizer" || cls == "LlamaTokenizerFast")) {
    // transformers 5 LlamaTokenizer.__init__ keeps only vocab, merges,
    // added tokens and the post-processor of the file.
    const bool add_prefix_space = c.bool_or("add_prefix_space", true);
    const bool legacy = c.bool_or("legacy", false);
    static const std::string builtin = "<transformers LlamaTokenizer>";
    const json pre = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"split", false},
                      {"prepend_scheme", add_prefix_space ? (legacy ? "always" : "first") : "never"}};
    json dec = {{"type", "Sequence"},
                {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                          {{"type", "ByteFallback"}},
                                          {{"type", "Fuse"}}})}};
    if (add_prefix_space) dec["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    impl->normalizer.reset();
    impl->pre = make_pre_tokenizer(Node{pre, builtin, "pre_tokenizer"});
    impl->decoder = make_decoder(Node{dec, builtin, "decoder"});
    impl->model->unk_id.reset();
  }

  // Added tokens take the model's id when the model has the content, the
  // next free id otherwise (what the reference does on load).
  const size_t model_size = impl->model->vocab.size();
  int32_t next_id = static_cast<int32_t>(model_size);
  if (r.has("added_tokens")) {
    const Node at = r.at("added_tokens");
    for (size_t i = 0; i < at.array().size(); ++i) {
      const Node e = at.item(i);
      AddedToken t;
      t.content = e.at("content").str();
      if (e.has("id")) e.at("id").integer();  // checked; the id itself is recomputed as the reference does
      t.single_word = e.bool_or("single_word", false);
      t.lstrip = e.bool_or("lstrip", false);
      t.rstrip = e.bool_or("rstrip", false);
      t.normalized = e.bool_or("normalized", true);
      t.special = e.bool_or("special", false);
      if (t.content.empty()) continue;
      if (auto id = impl->token_to_id(t.content)) {
        t.id = *id;
      } else {
        t.id = next_id++;
      }
      auto existing = impl->added_by_id.find(t.id);
      if (existing != impl->added_by_id.end()) {
        impl->added[existing->second] = t;
      } else {
        impl->added_by_id[t.id] = impl->added.size();
        impl->added.push_back(t);
      }
      impl->added_by_content[t.content] = t.id;
    }
  }
  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    if (t.normalized) {
      NStr n = NStr::from_input(t.content);
      if (impl->normalizer) impl->normalizer->apply(n);
      impl->norm_trie.add(n.s, static_cast<int32_t>(i));
    } else {
      impl->raw_trie.add(t.content, static_cast<int32_t>(i));
    }
  }
  size_t extra = 0;
  for (const auto& t : impl->added)
    if (!impl->model->vocab.count(t.content)) ++extra;
  impl->vocab_size = model_size + extra;
  if (impl->vocab_size == 0) fail_input("{}: the vocabulary is empty (model.vocab and added_tokens have no entries)", file);

  if (tokenizer_config) {
    impl->bos = config_token(c, "bos_token");
    impl->eos = config_token(c, "eos_token");
    impl->pad = config_token(c, "pad_token");
    impl->unk = config_token(c, "unk_token");
    // A special token the vocabulary lacks would be encoded as its literal
    // text: the two files do not belong together. Without an eos nothing
    // ends a training row or a completion, so that is an error; the others
    // are said once.
    for (const auto& [key, tok] : {std::pair<const char*, const std::optional<std::string>*>{"eos_token", &impl->eos},
                                   {"bos_token", &impl->bos},
                                   {"pad_token", &impl->pad},
                                   {"unk_token", &impl->unk}}) {
      if (!*tok || impl->token_to_id(**tok)) continue;
      if (std::string(key) == "eos_token")
        fail_input("{}: key `eos_token`: token \"{}\" is not in the vocabulary of {}; the two files do not belong "
                   "together (take both from the same model)",
                   cname, **tok, file);
      log::warn("{}: key `{}`: token \"{}\" is not in the vocabulary of {}; it would be encoded as its literal text",
                cname, key, **tok, file);
    }
    if (c.has("chat_template")) {
      const Node ct = c.at("chat_template");
      if (ct.j.is_string()) {
        impl->chat_template = ct.str();
      } else if (ct.j.is_array()) {
        for (size_t i = 0; i < ct.j.size(); ++i) {
          const Node e = ct.item(i);
          if (e.at("name").str() == "default") impl->chat_template = e.at("template").str();
        }
      } else {
        fail_input("{}: key `chat_template`: expected a string or a list of {{name, template}}, found {}", cname,
                   Node::kind(ct.j));
      }
    }
    if (c.has("model_max_length")) {
      const Node m = c.at("model_max_length");
      if (!m.j.is_number()) fail_input("{}: key `model_max_length`: expected a number, found {}", cname, Node::kind(m.j));
      const double v = m.j.get<double>();
      impl->max_length = v >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(v);
    } else {
      impl->max_length = std::numeric_limits<int64_t>::max();  // transformers: "very large"
    }
    // transformers: for model-specific tokenizer classes (LlamaTokenizer,
    // Qwen2Tokenizer, ...) add_bos_token/add_eos_token in the config replace
    // the post-processor by "[bos] $A [eos]" (each only when its token is
    // set); the generic PreTrainedTokenizerFast keeps tokenizer.json's.
    const bool generic = cls.empty() || cls == "PreTrainedTokenizerFast" || cls == "TokenizersBackend";
    const bool has_bos_flag = c.has("add_bos_token"), has_eos_flag = c.has("add_eos_token");
    if ((!generic && (has_bos_flag || has_eos_flag)) || !impl->post) {
      const bool add_bos = c.bool_or("add_bos_token", false) && impl->bos.has_value();
      const bool add_eos = c.bool_or("add_eos_token", false) && impl->eos.has_value();
      auto tp = std::make_unique<TemplatePost>();
      auto special = [&](const std::optional<std::string>& tok, const char* key) {
        auto id = impl->token_to_id(*tok);
        if (!id) fail_input("{}: key `{}`: token \"{}\" is not in the vocabulary of {}", cname, key, *tok, file);
        return TemplatePost::Item{false, {*id}};
      };
      if (add_bos) tp->single.push_back(special(impl->bos, "bos_token"));
      tp->single.push_back({true, {}});
      if (add_eos) tp->single.push_back(special(impl->eos, "eos_token"));
      impl->post = std::move(tp);
    }
  }
  return Tokenizer(std::move(impl));
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const std::vector<Tok> toks = impl_->run(text, add_special_tokens);
  Encoding e;
  e.ids.reserve(toks.size());
  e.offsets.reserve(toks.size());
  e.special_mask.reserve(toks.size());
  for (const Tok& t : toks) {
    e.ids.push_back(t.id);
    e.offsets.emplace_back(t.b, t.e);
    e.special_mask.push_back(t.special);
  }
  return e;
}

std::vector<int32_t> Tokenizer::encode_ids(std::string_view text, bool add_special_tokens) const {
  const std::vector<Tok> toks = impl_->run(text, add_special_tokens);
  std::vector<int32_t> ids;
  ids.reserve(toks.size());
  for (const Tok& t : toks) ids.push_back(t.id);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* s = impl_->id_to_token(id);
    if (!s) continue;
    if (skip_special_tokens && is_special(id)) continue;
    toks.push_back(*s);
  }
  if (!impl_->decoder) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) {
      if (i) out += ' ';
      out += toks[i];
    }
    return out;
  }
  impl_->decoder->chain(toks);
  std::string out;
  for (const auto& t : toks) out += t;
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }
std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* s = impl_->id_to_token(id);
  return s ? *s : std::string();
}
bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}
size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::pair<int32_t, std::string> Tokenizer::largest_id() const {
  std::pair<int32_t, std::string> best{-1, ""};
  for (const auto& [token, id] : impl_->model->vocab)
    if (id > best.first) best = {id, token};
  for (const auto& t : impl_->added)
    if (t.id > best.first) best = {t.id, t.content};
  return best;
}
const std::optional<std::string>& Tokenizer::bos_token() const { return impl_->bos; }
const std::optional<std::string>& Tokenizer::eos_token() const { return impl_->eos; }
const std::optional<std::string>& Tokenizer::pad_token() const { return impl_->pad; }
const std::optional<std::string>& Tokenizer::unk_token() const { return impl_->unk; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos ? token_to_id(*impl_->bos) : std::nullopt; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos ? token_to_id(*impl_->eos) : std::nullopt; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return impl_->pad ? token_to_id(*impl_->pad) : std::nullopt; }
std::optional<int32_t> Tokenizer::unk_token_id() const { return impl_->unk ? token_to_id(*impl_->unk) : std::nullopt; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
std::optional<int64_t> Tokenizer::model_max_length() const { return impl_->max_length; }

}  // namespace trlx::text

#pragma once
// The parts a Tokenizer is made of (tokenizer.hpp's Tokenizer::Impl and its
// pipeline stages), shared by the files of text/tokenizer/; nothing outside
// them includes this. The files, in pipeline order: pattern.cpp (Oniguruma
// regexes and String/Regex patterns), normalizers.cpp, pre_tokenizers.cpp,
// bpe.cpp (the model), post_processors.cpp, decoders.cpp, tokenizer.cpp
// (added tokens, encoding, decoding) and load.cpp (tokenizer.json and
// tokenizer_config.json into a Tokenizer).
#include <oniguruma.h>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "text/tokenizer/normalized.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "text/tokenizer/unicode.hpp"

namespace trlx::text::pipeline {

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

// The one character a string key holds (a replacement, a Strip decoder's content).
uint32_t single_char(const Node& n);

// ---------------------------------------------------------------- regex

class Regex {
 public:
  Regex(const std::string& pattern, const Node& where);
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
std::vector<Piece> regex_pieces(const Regex& re, std::string_view text, bool invert);
std::vector<Piece> literal_pieces(std::string_view lit, std::string_view text, bool invert);

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

std::unique_ptr<Normalizer> make_normalizer(const Node& n);

// ---------------------------------------------------------------- pre-tokenizers

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  // Splits one piece (appending to out); may rewrite it.
  virtual void split(NStr& n, std::vector<NStr>& out) const = 0;
};

// Each byte's stand-in character in byte-level tokens.
const std::array<char32_t, 256>& bytes_char();
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Node& n);

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

  void index_bmp();

  void tokenize(std::string_view w, std::vector<WordPiece>& out) const;

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

  void merge_word(std::string_view w, std::vector<WordPiece>& res) const;
};

std::unique_ptr<Bpe> make_bpe(const Node& n);

// ---------------------------------------------------------------- decoders

struct Decoder {
  virtual ~Decoder() = default;
  virtual void chain(std::vector<std::string>& toks) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const Node& n);

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

struct TemplatePost : PostProcessor {
  struct Item {
    bool is_seq;
    std::vector<int32_t> ids;  // for special tokens
  };
  std::vector<Item> single;
  TemplatePost() = default;
  TemplatePost(const Node& n);
  void process(std::vector<Tok>& toks, bool add_special, const std::function<std::string(int32_t)>&,
               std::string_view) const override;
};

std::unique_ptr<PostProcessor> make_post(const Node& n);

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

}  // namespace trlx::text::pipeline

namespace trlx::text {

// The tokenizer's files name the pipeline's parts unqualified.
using namespace pipeline;

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
  void split_added(NStr& n, const Trie& trie, std::vector<std::pair<NStr, int32_t>>& out) const;

  std::vector<Tok> run(std::string_view text, bool add_special) const;
};

}  // namespace trlx::text

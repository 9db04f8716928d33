// The pre-tokenizers of tokenizer.json: ByteLevel, Split, Metaspace, Digits, Whitespace(Split), Punctuation, Sequence.
#include "text/tokenizer/pipeline.hpp"

namespace trlx::text::pipeline {
namespace {

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
}  // namespace

const std::array<char32_t, 256>& bytes_char() {
  static const auto t = make_bytes_char();
  return t;
}
// The UTF-8 of each byte's stand-in character.
namespace {

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

}  // namespace

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

}  // namespace trlx::text::pipeline

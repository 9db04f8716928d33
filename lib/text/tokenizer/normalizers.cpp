// The normalizers of tokenizer.json: NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend, Replace, Sequence.
#include "text/tokenizer/pipeline.hpp"

namespace trlx::text::pipeline {
namespace {

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

}  // namespace

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

}  // namespace trlx::text::pipeline

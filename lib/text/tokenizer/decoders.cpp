// The decoders of tokenizer.json: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence.
#include "text/tokenizer/pipeline.hpp"

namespace trlx::text::pipeline {
namespace {

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

}  // namespace

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

}  // namespace trlx::text::pipeline

// The post-processors of tokenizer.json: TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, Sequence.
#include "text/tokenizer/pipeline.hpp"

namespace trlx::text::pipeline {
namespace {

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

}  // namespace

TemplatePost::TemplatePost(const Node& n) {
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

void TemplatePost::process(std::vector<Tok>& toks, bool add_special, const std::function<std::string(int32_t)>&,
                           std::string_view) const {
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

namespace {

struct SeqPost : PostProcessor {
  std::vector<std::unique_ptr<PostProcessor>> items;
  void process(std::vector<Tok>& toks, bool add_special, const std::function<std::string(int32_t)>& token_of,
               std::string_view input) const override {
    for (const auto& p : items) p->process(toks, add_special, token_of, input);
  }
};

}  // namespace

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

}  // namespace trlx::text::pipeline

// Loading a Tokenizer: tokenizer.json and tokenizer_config.json checked key by key, as transformers reads them.
#include "text/tokenizer/pipeline.hpp"

#include <fstream>
#include <sstream>

#include "core/log.hpp"

namespace trlx::text::pipeline {

uint32_t single_char(const Node& n) {
  const std::string s = n.str();
  if (s.empty()) fail_input("{}: key `{}`: expected one character, found an empty string", n.file, n.path);
  uint32_t l;
  const char32_t c = uni::decode_valid(s, 0, &l);
  if (l != s.size() || !uni::is_valid_utf8(s)) fail_input("{}: key `{}`: expected one character, found \"{}\"", n.file, n.path, s);
  return c;
}

}  // namespace trlx::text::pipeline

namespace trlx::text {
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

}  // namespace trlx::text

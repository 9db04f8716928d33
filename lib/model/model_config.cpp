#include "model/model_config.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace trlx::model {

using nlohmann::json;

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> t = {"llama", "mistral", "qwen2", "qwen3"};
  return t;
}

namespace {

class Reader {
 public:
  Reader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  int64_t integer(const std::string& key) const {
    if (!j_.contains(key) || j_[key].is_null()) fail_input("{}: required key `{}` is missing", source_, key);
    return integer_at(j_[key], key);
  }
  std::optional<int64_t> opt_integer(const std::string& key) const {
    if (!j_.contains(key) || j_[key].is_null()) return std::nullopt;
    return integer_at(j_[key], key);
  }
  double number(const std::string& key, double def) const {
    if (!j_.contains(key) || j_[key].is_null()) return def;
    if (!j_[key].is_number()) fail_input("{}: `{}` must be a number, found {}", source_, key, j_[key].dump());
    return j_[key].get<double>();
  }
  bool boolean(const std::string& key, bool def) const {
    if (!j_.contains(key) || j_[key].is_null()) return def;
    if (!j_[key].is_boolean()) fail_input("{}: `{}` must be true or false, found {}", source_, key, j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string string(const std::string& key, const std::string& def) const {
    if (!j_.contains(key) || j_[key].is_null()) return def;
    if (!j_[key].is_string()) fail_input("{}: `{}` must be a string, found {}", source_, key, j_[key].dump());
    return j_[key].get<std::string>();
  }
  const std::string& source() const { return source_; }

 private:
  int64_t integer_at(const json& v, const std::string& key) const {
    if (!v.is_number_integer()) fail_input("{}: `{}` must be an integer, found {}", source_, key, v.dump());
    return v.get<int64_t>();
  }
  const json& j_;
  std::string source_;
};

RopeConfig read_rope(const json& j, const Reader& r) {
  RopeConfig rope;
  // Newer configs: rope_parameters {rope_type, rope_theta, ...}; older ones:
  // rope_theta at the top and rope_scaling {type|rope_type, factor, ...}.
  const json* params = nullptr;
  std::string where;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    params = &j["rope_parameters"];
    where = "rope_parameters";
  } else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    params = &j["rope_scaling"];
    where = "rope_scaling";
  } else if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    fail_input("{}: `rope_scaling` must be an object or null", r.source());
  }
  rope.theta = r.number("rope_theta", 10000.0);
  if (!params) return rope;
  Reader p(*params, r.source() + " " + where);
  if (params->contains("rope_theta")) rope.theta = p.number("rope_theta", rope.theta);
  rope.type = p.string("rope_type", p.string("type", "default"));
  if (rope.type == "default") return rope;
  rope.factor = p.number("factor", 1.0);
  if (rope.type == "linear") return rope;
  if (rope.type == "llama3") {
    rope.low_freq_factor = p.number("low_freq_factor", 1.0);
    rope.high_freq_factor = p.number("high_freq_factor", 4.0);
    rope.original_max_position_embeddings = p.opt_integer("original_max_position_embeddings").value_or(8192);
    return rope;
  }
  fail_input("{}: {}.rope_type `{}` is not supported by trlx (supported: default, linear, llama3)", r.source(), where,
             rope.type);
}

}  // namespace

ModelConfig parse_model_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail_input("{}: not valid JSON: {}", source, e.what());
  }
  if (!j.is_object()) fail_input("{}: config.json must be a JSON object", source);
  Reader r(j, source);
  ModelConfig c;
  c.raw_json = text;
  c.model_type = r.string("model_type", "");
  if (c.model_type.empty()) fail_input("{}: required key `model_type` is missing", source);
  bool known = false;
  for (const auto& t : supported_model_types()) known |= t == c.model_type;
  if (!known) {
    std::string msg = fmt::format("{}: model_type `{}` is not supported (supported: {})", source, c.model_type,
                                  join(supported_model_types(), ", "));
    const std::string near = closest_match(c.model_type, supported_model_types());
    if (!near.empty()) msg += fmt::format("; did you mean `{}`?", near);
    fail_input("{}", msg);
  }
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a.is_string()) c.architectures.push_back(a.get<std::string>());
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  c.num_key_value_heads = r.opt_integer("num_key_value_heads").value_or(c.num_attention_heads);
  for (auto [key, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads}, {"num_key_value_heads", c.num_key_value_heads}})
    if (v <= 0) fail_input("{}: `{}` must be positive, found {}", source, key, v);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail_input("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", source,
               c.num_attention_heads, c.num_key_value_heads);
  c.head_dim = r.opt_integer("head_dim").value_or(0);
  if (c.head_dim <= 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail_input("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and head_dim is not given",
                 source, c.hidden_size, c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) fail_input("{}: head_dim {} must be even for rotary embeddings", source, c.head_dim);
  c.max_position_embeddings = r.opt_integer("max_position_embeddings").value_or(2048);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.rope = read_rope(j, r);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.hidden_act = r.string("hidden_act", "silu");
  if (c.hidden_act != "silu")
    fail_input("{}: hidden_act `{}` is not supported (trlx implements silu)", source, c.hidden_act);
  c.mlp_bias = r.boolean("mlp_bias", false);
  if (c.model_type == "llama") c.attention_bias = r.boolean("attention_bias", false);
  if (c.model_type == "qwen2") c.qkv_bias = true;
  if (c.model_type == "qwen3") {
    c.qk_norm = true;
    c.attention_bias = r.boolean("attention_bias", false);
  }
  // Sliding windows: Mistral applies its window to every layer; Qwen2/3 only
  // when use_sliding_window is set, to the layers layer_types marks.
  c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  const auto window = r.opt_integer("sliding_window");
  if (c.model_type == "mistral" && window) {
    c.sliding_window = window;
    c.sliding_layers.assign(c.sliding_layers.size(), true);
  } else if ((c.model_type == "qwen2" || c.model_type == "qwen3") && r.boolean("use_sliding_window", false) && window) {
    c.sliding_window = window;
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      const auto& lt = j["layer_types"];
      if (lt.size() != c.sliding_layers.size())
        fail_input("{}: layer_types has {} entries for {} layers", source, lt.size(), c.sliding_layers.size());
      for (size_t i = 0; i < lt.size(); ++i) c.sliding_layers[i] = lt[i] == "sliding_attention";
    } else {
      const int64_t max_window_layers = r.opt_integer("max_window_layers").value_or(c.num_hidden_layers);
      for (int64_t i = max_window_layers; i < c.num_hidden_layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = true;
    }
  }
  c.bos_token_id = r.opt_integer("bos_token_id");
  c.pad_token_id = r.opt_integer("pad_token_id");
  if (j.contains("eos_token_id")) {
    const auto& e = j["eos_token_id"];
    if (e.is_number_integer()) c.eos_token_ids.push_back(e.get<int64_t>());
    else if (e.is_array())
      for (const auto& x : e) c.eos_token_ids.push_back(x.get<int64_t>());
  }
  c.torch_dtype = r.string("dtype", r.string("torch_dtype", ""));
  if (j.contains("id2label") && j["id2label"].is_object()) c.num_labels = static_cast<int64_t>(j["id2label"].size());
  c.num_labels = r.opt_integer("num_labels").value_or(c.num_labels);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  const auto file = dir / "config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(dir)) fail_input("model directory {} does not exist", dir.string());
    fail_input("{} is missing: a model directory needs config.json (Hugging Face format)", file.string());
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), file.string());
}

}  // namespace trlx::model

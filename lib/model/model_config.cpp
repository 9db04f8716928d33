// A decoder model's shape from a Hugging Face config.json, and the config.json trlx writes back.
#include "model/model_config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace trlx::model {

using nlohmann::json;

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> t = {"llama",  "mistral", "qwen2",       "qwen3",     "phi3",
                                             "gemma",  "gemma2",  "gemma3_text", "qwen3_moe", "mixtral", "gpt_oss",
                                             "deepseek_v3"};
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

// Which keys a rope type reads (besides rope_type/type, rope_theta and
// partial_rotary_factor), so that a misspelt or unsupported one is reported.
void read_rope_params(RopeConfig& rope, const json& params, const Reader& p, const std::string& where,
                      const ModelConfig& c, std::optional<int64_t> top_original) {
  rope.type = p.string("rope_type", p.string("type", "default"));
  if (c.model_type == "phi3" && (rope.type == "su" || rope.type == "yarn")) rope.type = "longrope";  // as Phi3Config
  rope.theta = p.number("rope_theta", rope.theta);
  rope.partial_rotary_factor = p.number("partial_rotary_factor", rope.partial_rotary_factor);
  static const std::vector<std::string> types = {"default", "linear", "dynamic", "yarn", "longrope", "llama3"};
  if (std::find(types.begin(), types.end(), rope.type) == types.end())
    fail_input("{}: {}.rope_type `{}` is not supported by trlx (supported: {})", p.source(), where, rope.type,
               join(types, ", "));
  if (rope.type == "default") return;
  // llama3, yarn and longrope scale from the pretraining length: the config's
  // own original_max_position_embeddings (Phi-3 keeps it at the top), else
  // max_position_embeddings, as transformers standardises it.
  if (rope.type == "llama3" || rope.type == "yarn" || rope.type == "longrope") {
    rope.original_max_position_embeddings =
        top_original.value_or(p.opt_integer("original_max_position_embeddings").value_or(c.max_position_embeddings));
    if (rope.original_max_position_embeddings <= 0)
      fail_input("{}: {}.original_max_position_embeddings must be positive", p.source(), where);
  }
  const bool has_factor = params.contains("factor") && !params["factor"].is_null();
  if (rope.type == "longrope" || (rope.type == "yarn" && !has_factor)) {
    rope.factor = static_cast<double>(c.max_position_embeddings) / rope.original_max_position_embeddings;
    if (has_factor) rope.factor = p.number("factor", rope.factor);
  } else {
    if (!has_factor) fail_input("{}: {}.factor is required for rope_type `{}`", p.source(), where, rope.type);
    rope.factor = p.number("factor", 1.0);
  }
  if (!(rope.factor > 0)) fail_input("{}: {}.factor must be positive, found {}", p.source(), where, rope.factor);
  if (rope.type == "llama3") {
    rope.low_freq_factor = p.number("low_freq_factor", 1.0);
    rope.high_freq_factor = p.number("high_freq_factor", 4.0);
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      fail_input("{}: {}.high_freq_factor must be above low_freq_factor", p.source(), where);
  }
  auto opt_number = [&](const char* key) -> std::optional<double> {
    if (!params.contains(key) || params[key].is_null()) return std::nullopt;
    return p.number(key, 0.0);
  };
  if (rope.type == "yarn" || rope.type == "longrope") rope.attention_factor = opt_number("attention_factor");
  if (rope.type == "yarn") {
    // transformers treats a 0/null beta as its default.
    if (auto b = opt_number("beta_fast"); b && *b != 0) rope.beta_fast = *b;
    if (auto b = opt_number("beta_slow"); b && *b != 0) rope.beta_slow = *b;
    rope.mscale = opt_number("mscale");
    rope.mscale_all_dim = opt_number("mscale_all_dim");
    rope.truncate = p.boolean("truncate", true);
  }
  if (rope.type == "longrope") {
    const int64_t half = rotary_dims(c, rope) / 2;
    for (auto [key, out] : {std::pair{"short_factor", &rope.short_factor}, {"long_factor", &rope.long_factor}}) {
      if (!params.contains(key) || !params[key].is_array())
        fail_input("{}: {}.{} must be a list of {} numbers for rope_type longrope", p.source(), where, key, half);
      for (const auto& v : params[key]) {
        if (!v.is_number()) fail_input("{}: {}.{} must hold numbers, found {}", p.source(), where, key, v.dump());
        out->push_back(v.get<double>());
      }
      if (static_cast<int64_t>(out->size()) != half)
        fail_input("{}: {}.{} has {} entries; the rotary dims need {} (head_dim {} x partial_rotary_factor {} / 2)",
                   p.source(), where, key, out->size(), half, c.head_dim, rope.partial_rotary_factor);
    }
  }
}

// Older configs: rope_theta at the top and rope_scaling {type|rope_type,
// factor, ...}; newer ones: rope_parameters {rope_type, rope_theta, ...},
// which Gemma 3 keys by layer type (full_attention, sliding_attention).
void read_rope(ModelConfig& c, const json& j, const Reader& r) {
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
  const bool gemma3 = c.model_type == "gemma3_text";
  // gpt-oss's config class fills in its yarn rope when the file has none.
  static const json gpt_oss_rope = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                                    {"truncate", false}, {"original_max_position_embeddings", 4096}};
  if (!params && c.model_type == "gpt_oss") {
    params = &gpt_oss_rope;
    where = "rope_parameters (gpt_oss's default)";
  }
  RopeConfig base;
  base.theta = r.number("rope_theta", gemma3                      ? 1000000.0
                                      : c.model_type == "mixtral" ? 1000000.0
                                      : c.model_type == "gpt_oss" ? 150000.0
                                                                  : 10000.0);
  base.partial_rotary_factor = r.number("partial_rotary_factor", 1.0);
  // Phi-3's config carries original_max_position_embeddings at the top,
  // which transformers copies into the rope parameters.
  std::optional<int64_t> top_original;
  if (c.model_type == "phi3") top_original = r.opt_integer("original_max_position_embeddings").value_or(4096);
  const bool nested = params && (params->contains("full_attention") || params->contains("sliding_attention"));
  if (gemma3) {
    RopeConfig local = base;
    local.theta = r.number("rope_local_base_freq", 10000.0);
    c.rope = base;
    if (nested) {
      for (auto [key, out] : {std::pair{"full_attention", &c.rope}, {"sliding_attention", &local}}) {
        if (!params->contains(key) || (*params)[key].is_null()) continue;
        if (!(*params)[key].is_object()) fail_input("{}: {}.{} must be an object", r.source(), where, key);
        Reader p((*params)[key], r.source() + " " + where + "." + key);
        read_rope_params(*out, (*params)[key], p, where + "." + key, c, top_original);
      }
    } else if (params) {  // a flat rope_scaling applies to the global layers
      Reader p(*params, r.source() + " " + where);
      read_rope_params(c.rope, *params, p, where, c, top_original);
    }
    c.sliding_rope = local;
  } else {
    if (nested) fail_input("{}: {} is keyed by layer type, which model_type `{}` does not have", r.source(), where,
                           c.model_type);
    c.rope = base;
    if (params) {
      Reader p(*params, r.source() + " " + where);
      read_rope_params(c.rope, *params, p, where, c, top_original);
    }
  }
  for (const auto* rope : {&c.rope, c.sliding_rope ? &*c.sliding_rope : nullptr}) {
    if (!rope) continue;
    const double f = rope->partial_rotary_factor;
    const auto dims = rotary_dims(c, *rope);
    if (!(f > 0 && f <= 1) || dims < 2 || dims % 2 != 0)
      fail_input("{}: partial_rotary_factor {} gives {} rotary dims of head_dim {}; they must be even and at least 2",
                 r.source(), f, dims, c.head_dim);
  }
}

// DeepSeek-V3's experts: grouped sigmoid routing with a correction bias,
// shared experts, the first first_k_dense_replace layers dense. No
// load-balancing loss.
void read_deepseek_experts(ModelConfig& c, const json& j, const Reader& r) {
  c.num_experts = r.opt_integer("n_routed_experts").value_or(256);
  c.num_experts_per_tok = r.opt_integer("num_experts_per_tok").value_or(8);
  c.moe_intermediate_size = r.opt_integer("moe_intermediate_size").value_or(2048);
  c.n_shared_experts = r.opt_integer("n_shared_experts").value_or(1);
  c.n_group = r.opt_integer("n_group").value_or(8);
  c.topk_group = r.opt_integer("topk_group").value_or(4);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = r.number("routed_scaling_factor", 2.5);
  c.router_sigmoid_groups = true;
  c.router_weights_fp32 = true;
  c.router_balance_loss = false;
  c.router_aux_loss_coef = 0.0;
  c.output_router_logits = r.boolean("output_router_logits", false);
  if (j.contains("quantization_config") && !j["quantization_config"].is_null())
    fail_input("{}: quantization_config is set (DeepSeek-V3 is published in FP8); trlx reads bf16 or fp32 weights of "
               "deepseek_v3 models: give a dequantized checkpoint",
               r.source());
  if (c.num_experts <= 0) fail_input("{}: `n_routed_experts` must be positive, found {}", r.source(), c.num_experts);
  if (c.n_group <= 0 || c.num_experts % c.n_group != 0)
    fail_input("{}: `n_group` ({}) must divide n_routed_experts ({})", r.source(), c.n_group, c.num_experts);
  if (c.n_group > 1 && c.num_experts / c.n_group < 2)
    fail_input("{}: n_group {} leaves fewer than 2 experts in a group (n_routed_experts {}); a group is scored by "
               "its two best",
               r.source(), c.n_group, c.num_experts);
  if (c.topk_group <= 0 || c.topk_group > c.n_group)
    fail_input("{}: `topk_group` is {}; it must be between 1 and n_group ({})", r.source(), c.topk_group, c.n_group);
  const int64_t reachable = c.topk_group * (c.num_experts / c.n_group);
  if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > reachable)
    fail_input("{}: `num_experts_per_tok` is {}; it must be between 1 and the {} experts of the topk_group groups kept "
               "(n_routed_experts {}, n_group {}, topk_group {})",
               r.source(), c.num_experts_per_tok, reachable, c.num_experts, c.n_group, c.topk_group);
  if (c.moe_intermediate_size <= 0 || c.n_shared_experts < 0)
    fail_input("{}: `moe_intermediate_size` must be positive and `n_shared_experts` not negative", r.source());
  const int64_t dense = r.opt_integer("first_k_dense_replace").value_or(3);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sparse_layers[static_cast<size_t>(i)] = i >= dense;
}

// DeepSeek-V3's multi-head latent attention. Its config.json's head_dim is
// the rotary width; each head's query and key are nope + rope wide, and
// the softmax scale grows with yarn's mscale_all_dim.
void read_latent_attention(ModelConfig& c, const Reader& r) {
  c.q_lora_rank = r.opt_integer("q_lora_rank").value_or(0);
  c.kv_lora_rank = r.opt_integer("kv_lora_rank").value_or(512);
  c.qk_nope_head_dim = r.opt_integer("qk_nope_head_dim").value_or(128);
  c.qk_rope_head_dim = r.opt_integer("qk_rope_head_dim").value_or(64);
  c.v_head_dim = r.opt_integer("v_head_dim").value_or(128);
  c.rope_interleave = r.boolean("rope_interleave", true);
  for (auto [key, v] : {std::pair{"kv_lora_rank", c.kv_lora_rank}, {"qk_nope_head_dim", c.qk_nope_head_dim},
                        {"qk_rope_head_dim", c.qk_rope_head_dim}, {"v_head_dim", c.v_head_dim}})
    if (v <= 0) fail_input("{}: `{}` must be positive, found {}", r.source(), key, v);
  if (c.q_lora_rank < 0) fail_input("{}: `q_lora_rank` must be positive or null, found {}", r.source(), c.q_lora_rank);
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  c.rope_head_dim = c.qk_rope_head_dim;
  if (c.v_head_dim > c.head_dim)
    fail_input("{}: v_head_dim {} is wider than qk_nope_head_dim + qk_rope_head_dim ({}); trlx pads values to the key "
               "width and does not build wider ones",
               r.source(), c.v_head_dim, c.head_dim);
  if (c.num_key_value_heads != c.num_attention_heads)
    fail_input("{}: num_key_value_heads ({}) must equal num_attention_heads ({}) for latent attention", r.source(),
               c.num_key_value_heads, c.num_attention_heads);
}

// Qwen3-MoE and Mixtral: the experts, the router and which layers route.
// Qwen3-MoE names the expert count num_experts (transformers writes
// num_local_experts, the attribute it maps to), Mixtral num_local_experts;
// Mixtral's experts have intermediate_size, Qwen3-MoE's moe_intermediate_size.
void read_experts(ModelConfig& c, const json& j, const Reader& r) {
  const bool qwen = c.model_type == "qwen3_moe", mixtral = c.model_type == "mixtral", oss = c.model_type == "gpt_oss";
  c.sparse_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (c.model_type == "deepseek_v3") {
    read_deepseek_experts(c, j, r);
    return;
  }
  if (!qwen && !mixtral && !oss) return;
  const char* count_key = j.contains("num_local_experts") && !j["num_local_experts"].is_null() ? "num_local_experts"
                          : qwen                                                                 ? "num_experts"
                                                                                                 : "num_local_experts";
  c.num_experts = r.opt_integer(count_key).value_or(qwen || oss ? 128 : 8);
  // Published gpt-oss configs also say experts_per_token.
  c.num_experts_per_tok =
      r.opt_integer("num_experts_per_tok").value_or(r.opt_integer("experts_per_token").value_or(qwen ? 8 : oss ? 4 : 2));
  if (c.num_experts < 0) fail_input("{}: `{}` must not be negative, found {}", r.source(), count_key, c.num_experts);
  c.moe_intermediate_size = qwen ? r.opt_integer("moe_intermediate_size").value_or(768) : c.intermediate_size;
  c.norm_topk_prob = qwen ? r.boolean("norm_topk_prob", false) : true;
  c.router_weights_fp32 = mixtral;
  c.router_aux_loss_coef = r.number("router_aux_loss_coef", 0.001);
  c.output_router_logits = r.boolean("output_router_logits", false);
  if (oss) {
    c.norm_topk_prob = false;  // the softmax over the chosen logits sums to 1 already
    c.router_bias = c.router_softmax_after_topk = c.expert_bias = c.experts_interleaved = true;
    c.swiglu_limit = r.number("swiglu_limit", 7.0);
    c.swiglu_alpha = r.number("swiglu_alpha", 1.702);
    if (!(*c.swiglu_limit > 0)) fail_input("{}: `swiglu_limit` must be positive, found {}", r.source(), *c.swiglu_limit);
    if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
      const auto& q = j["quantization_config"];
      const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                     ? q["quant_method"].get<std::string>()
                                     : std::string();
      if (method != "mxfp4")
        fail_input("{}: quantization_config.quant_method `{}` is not supported for gpt_oss (trlx reads the published "
                   "MXFP4 experts, dequantized on load)",
                   r.source(), method);
      c.mxfp4_experts = true;
    }
  }
  if (mixtral) {
    c.router_jitter_noise = r.number("router_jitter_noise", 0.0);
    if (c.router_jitter_noise < 0 || c.router_jitter_noise >= 1)
      fail_input("{}: `router_jitter_noise` must be in [0, 1), found {}", r.source(), c.router_jitter_noise);
  }
  if (c.num_experts == 0) return;  // every layer dense
  if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_experts)
    fail_input("{}: `num_experts_per_tok` is {}; it must be between 1 and the {} experts (`{}`)", r.source(),
               c.num_experts_per_tok, c.num_experts, count_key);
  if (c.moe_intermediate_size <= 0)
    fail_input("{}: `{}` must be positive, found {}", r.source(), qwen ? "moe_intermediate_size" : "intermediate_size",
               c.moe_intermediate_size);
  // Qwen3-MoE: layer L routes unless listed in mlp_only_layers, and only
  // every decoder_sparse_step-th layer ((L + 1) % step == 0); Mixtral: all.
  std::vector<bool> dense(c.sparse_layers.size(), false);
  int64_t step = 1;
  if (qwen) {
    step = r.opt_integer("decoder_sparse_step").value_or(1);
    if (step <= 0) fail_input("{}: `decoder_sparse_step` must be positive, found {}", r.source(), step);
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      if (!j["mlp_only_layers"].is_array()) fail_input("{}: `mlp_only_layers` must be a list of layer indices", r.source());
      for (const auto& v : j["mlp_only_layers"]) {
        if (!v.is_number_integer())
          fail_input("{}: `mlp_only_layers` must hold layer indices, found {}", r.source(), v.dump());
        const auto i = v.get<int64_t>();
        if (i >= 0 && i < c.num_hidden_layers) dense[static_cast<size_t>(i)] = true;
      }
    }
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    c.sparse_layers[static_cast<size_t>(i)] = !dense[static_cast<size_t>(i)] && (i + 1) % step == 0;
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
  if (!known && c.model_type == "gemma3")
    fail_input("{}: model_type `gemma3` is Gemma 3's image-text model; trlx trains the text models "
               "(`gemma3_text`, Gemma3ForCausalLM, such as google/gemma-3-1b-it)", source);
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
  const bool gemma = c.model_type == "gemma" || c.model_type == "gemma2" || c.model_type == "gemma3_text";
  // Gemma's classes default head_dim to 256 rather than deriving it.
  c.head_dim = r.opt_integer("head_dim").value_or(gemma ? 256 : c.model_type == "gpt_oss" ? 64 : 0);
  if (c.head_dim <= 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail_input("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and head_dim is not given",
                 source, c.hidden_size, c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.model_type == "deepseek_v3") read_latent_attention(c, r);
  if (c.head_dim % 2 != 0) fail_input("{}: head_dim {} must be even for rotary embeddings", source, c.head_dim);
  // Defaults where a key is absent are those of the model type's config class.
  const int64_t default_max_positions = c.model_type == "phi3"                                  ? 4096
                                        : c.model_type == "gemma3_text" || c.model_type == "mixtral" ||
                                                  c.model_type == "gpt_oss"
                                            ? 131072
                                        : c.model_type == "qwen3_moe"                           ? 32768
                                        : gemma                                                 ? 8192
                                                                                                : 2048;
  c.max_position_embeddings = r.opt_integer("max_position_embeddings").value_or(default_max_positions);
  if (c.max_position_embeddings <= 0)
    fail_input("{}: `max_position_embeddings` must be positive, found {}", source, c.max_position_embeddings);
  c.rms_norm_eps = r.number(
      "rms_norm_eps", c.model_type == "phi3" || c.model_type == "mixtral" || c.model_type == "gpt_oss" ? 1e-5 : 1e-6);
  read_rope(c, j, r);
  if (c.model_type == "deepseek_v3") {
    c.attention_bias = r.boolean("attention_bias", false);
    // DeepSeek scales the softmax by yarn's mscale(factor, mscale_all_dim) squared.
    double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    if (c.rope.type == "yarn" && c.rope.mscale_all_dim && *c.rope.mscale_all_dim != 0 && c.rope.factor > 1) {
      const double m = 0.1 * *c.rope.mscale_all_dim * std::log(c.rope.factor) + 1.0;
      scale *= m * m;
    }
    c.attention_scale = scale;
  }
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", gemma);
  if (gemma) {
    // Gemma names the MLP activation hidden_act (its first releases say
    // "gelu", which transformers reads as the tanh approximation); Gemma 2
    // and 3 name it hidden_activation.
    const char* key = c.model_type == "gemma" ? "hidden_act" : "hidden_activation";
    c.hidden_act = r.string(key, "gelu_pytorch_tanh");
    if (c.model_type == "gemma" && c.hidden_act == "gelu") c.hidden_act = "gelu_pytorch_tanh";
    if (c.hidden_act != "gelu_pytorch_tanh")
      fail_input("{}: {} `{}` is not supported (trlx implements gelu_pytorch_tanh for Gemma)", source, key,
                 c.hidden_act);
  } else {
    c.hidden_act = r.string("hidden_act", "silu");
    if (c.hidden_act != "silu")
      fail_input("{}: hidden_act `{}` is not supported (trlx implements silu)", source, c.hidden_act);
  }
  // Dropout inside the model (Phi-3's, Gemma's attention_dropout) would
  // change training; trlx's decoder runs without it.
  for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop"})
    if (const double d = r.number(key, 0.0); d != 0.0)
      fail_input("{}: `{}` is {}; trlx's decoder has no dropout inside the model (set it to 0.0, as the released "
                 "configs of these models do)",
                 source, key, d);
  if (r.boolean("use_bidirectional_attention", false))
    fail_input("{}: use_bidirectional_attention is set (an embedding model); trlx trains causal language models",
               source);
  c.mlp_bias = r.boolean("mlp_bias", false);
  if (c.model_type == "llama" || gemma) c.attention_bias = r.boolean("attention_bias", false);
  if (c.model_type == "gpt_oss") {
    c.attention_bias = r.boolean("attention_bias", true);
    c.attention_sinks = true;
    c.norm_weight_fp32 = true;
  }
  if (c.model_type == "phi3") c.fused_projections = true;
  if (gemma) {
    c.norm_plus_one = true;
    c.scale_embeddings = true;
    if (c.model_type != "gemma") {
      c.sandwich_norms = true;
      const double scalar = r.number("query_pre_attn_scalar", 256.0);
      if (!(scalar > 0)) fail_input("{}: `query_pre_attn_scalar` must be positive, found {}", source, scalar);
      c.attention_scale = 1.0 / std::sqrt(scalar);
      auto cap = [&](const char* key, std::optional<double> def) -> std::optional<double> {
        if (!j.contains(key)) return def;
        if (j[key].is_null()) return std::nullopt;
        const double v = r.number(key, 0.0);
        if (!(v > 0)) fail_input("{}: `{}` must be positive or null, found {}", source, key, v);
        return v;
      };
      const bool g2 = c.model_type == "gemma2";
      c.attn_logit_softcapping = cap("attn_logit_softcapping", g2 ? std::optional<double>(50.0) : std::nullopt);
      c.final_logit_softcapping = cap("final_logit_softcapping", g2 ? std::optional<double>(30.0) : std::nullopt);
    }
    if (c.model_type == "gemma3_text") c.qk_norm = true;
  }
  if (c.model_type == "qwen2") c.qkv_bias = true;
  if (c.model_type == "qwen3" || c.model_type == "qwen3_moe") {
    c.qk_norm = true;
    c.attention_bias = r.boolean("attention_bias", false);
  }
  // Sliding windows: Mistral applies its window to every layer; Qwen2/3 only
  // when use_sliding_window is set, to the layers layer_types marks.
  c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  const auto window = r.opt_integer("sliding_window");
  if ((c.model_type == "mistral" || c.model_type == "mixtral") && window) {
    c.sliding_window = window;
    c.sliding_layers.assign(c.sliding_layers.size(), true);
  } else if (c.model_type == "phi3" && window) {
    c.sliding_window = window;  // every layer, as Mistral
    c.sliding_layers.assign(c.sliding_layers.size(), true);
  } else if (c.model_type == "gemma2" || c.model_type == "gemma3_text" || c.model_type == "gpt_oss") {
    // Sliding and global layers alternate: by layer_types, else every
    // other layer (Gemma 2, gpt-oss) or five of every six (Gemma 3).
    const int64_t every = c.model_type == "gemma3_text" ? r.opt_integer("sliding_window_pattern").value_or(6) : 2;
    if (every <= 0) fail_input("{}: `sliding_window_pattern` must be positive", source);
    c.sliding_window = j.contains("sliding_window")
                           ? window
                           : std::optional<int64_t>(c.model_type == "gpt_oss" ? 128 : 4096);
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      const auto& lt = j["layer_types"];
      if (lt.size() != c.sliding_layers.size())
        fail_input("{}: layer_types has {} entries for {} layers", source, lt.size(), c.sliding_layers.size());
      for (size_t i = 0; i < lt.size(); ++i) {
        if (lt[i] != "sliding_attention" && lt[i] != "full_attention")
          fail_input("{}: layer_types[{}] is {}; expected \"sliding_attention\" or \"full_attention\"", source, i,
                     lt[i].dump());
        c.sliding_layers[i] = lt[i] == "sliding_attention";
      }
    } else {
      for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = (i + 1) % every != 0;
    }
  } else if (c.model_type == "qwen3_moe" && r.boolean("use_sliding_window", false) && window) {
    c.sliding_window = window;  // every layer
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
  read_experts(c, j, r);
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

int64_t rotary_dims(const ModelConfig& c, const RopeConfig& rope) {
  if (c.rope_head_dim > 0) return c.rope_head_dim;
  return static_cast<int64_t>(static_cast<double>(c.head_dim) * rope.partial_rotary_factor);
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

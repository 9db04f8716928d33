// Writing a LanguageModel as a Hugging Face model directory, and new random models in that format.
#include "model/saving.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <ATen/CPUGeneratorImpl.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/atomic_write.hpp"
#include "io/safetensors.hpp"

namespace trlx::model {

using nlohmann::ordered_json;

namespace {

std::string dtype_name(torch::Dtype d) {
  if (d == torch::kBFloat16) return "bfloat16";
  if (d == torch::kFloat16) return "float16";
  return "float32";
}

std::string class_prefix(const std::string& model_type) {
  if (model_type == "llama") return "Llama";
  if (model_type == "mistral") return "Mistral";
  if (model_type == "qwen2") return "Qwen2";
  if (model_type == "phi3") return "Phi3";
  if (model_type == "gemma") return "Gemma";
  if (model_type == "gemma2") return "Gemma2";
  if (model_type == "gemma3_text") return "Gemma3";
  if (model_type == "qwen3_moe") return "Qwen3Moe";
  if (model_type == "mixtral") return "Mixtral";
  if (model_type == "gpt_oss") return "GptOss";
  return "Qwen3";
}

}  // namespace

std::string config_json(const ModelConfig& c, HeadKind head, torch::Dtype dtype) {
  // Keep every key of the original file (trlx models only part of them) and
  // set the ones that describe what is saved now.
  ordered_json j = c.raw_json.empty() ? ordered_json::object() : ordered_json::parse(c.raw_json);
  // Gemma 3's text model is Gemma3ForCausalLM but Gemma3TextForSequenceClassification.
  const std::string prefix = class_prefix(c.model_type);
  j["architectures"] = {head == HeadKind::CausalLM ? prefix + "ForCausalLM"
                        : c.model_type == "gemma3_text" ? "Gemma3TextForSequenceClassification"
                                                        : prefix + "ForSequenceClassification"};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  // DeepSeek-V3's config names the rotary width head_dim.
  j["head_dim"] = c.kv_lora_rank > 0 ? c.qk_rope_head_dim : c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j[c.model_type == "gemma2" || c.model_type == "gemma3_text" ? "hidden_activation" : "hidden_act"] = c.hidden_act;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.model_type == "llama" || c.model_type == "qwen3") j["attention_bias"] = c.attention_bias;
  if (!j.contains("rope_parameters") && !j.contains("rope_theta")) {
    ordered_json rope = {{"rope_theta", c.rope.theta}, {"rope_type", c.rope.type}};
    if (c.rope.type != "default") rope["factor"] = c.rope.factor;
    if (c.rope.type == "yarn") {
      rope["beta_fast"] = c.rope.beta_fast;
      rope["beta_slow"] = c.rope.beta_slow;
      rope["truncate"] = c.rope.truncate;
      rope["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
    }
    j["rope_parameters"] = rope;
  }
  if (c.raw_json.empty() && c.sliding_window && !j.contains("sliding_window")) {  // a new model (init-model)
    j["sliding_window"] = *c.sliding_window;
    ordered_json types = ordered_json::array();
    for (bool sliding : c.sliding_layers) types.push_back(sliding ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  if (c.model_type == "gpt_oss") {
    j["attention_bias"] = c.attention_bias;
    if (!j.contains("num_local_experts")) j["num_local_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    if (!j.contains("output_router_logits")) j["output_router_logits"] = false;
    j["swiglu_limit"] = c.swiglu_limit.value_or(7.0);
    j["swiglu_alpha"] = c.swiglu_alpha;
  }
  if (c.model_type == "deepseek_v3" && c.raw_json.empty()) {  // a new model (init-model)
    j["n_routed_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["n_shared_experts"] = c.n_shared_experts;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
    j["norm_topk_prob"] = c.norm_topk_prob;
    int64_t dense = 0;
    while (dense < c.num_hidden_layers && !c.sparse_layers[static_cast<size_t>(dense)]) ++dense;
    j["first_k_dense_replace"] = dense;
    j["q_lora_rank"] = c.q_lora_rank > 0 ? ordered_json(c.q_lora_rank) : ordered_json(nullptr);
    j["kv_lora_rank"] = c.kv_lora_rank;
    j["qk_nope_head_dim"] = c.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim;
    j["v_head_dim"] = c.v_head_dim;
    j["rope_interleave"] = c.rope_interleave;
    j["attention_bias"] = c.attention_bias;
  }
  if (c.model_type == "qwen3_moe" || c.model_type == "mixtral") {
    // The experts as the model type's config class names them (a config
    // read from a file keeps its own keys, e.g. Qwen3-MoE's num_experts).
    const bool qwen = c.model_type == "qwen3_moe";
    if (!j.contains("num_experts") && !j.contains("num_local_experts"))
      j[qwen ? "num_experts" : "num_local_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    if (!j.contains("output_router_logits")) j["output_router_logits"] = false;
    if (qwen) {
      j["moe_intermediate_size"] = c.moe_intermediate_size;
      j["norm_topk_prob"] = c.norm_topk_prob;
      if (!j.contains("decoder_sparse_step") && !j.contains("mlp_only_layers")) {
        ordered_json dense = ordered_json::array();
        for (size_t i = 0; i < c.sparse_layers.size(); ++i)
          if (!c.sparse_layers[i]) dense.push_back(i);
        j["decoder_sparse_step"] = 1;
        j["mlp_only_layers"] = dense;
      }
    } else {
      j["router_jitter_noise"] = c.router_jitter_noise;
    }
  }
  // Experts read from MXFP4 are saved dequantized.
  if (c.mxfp4_experts) j.erase("quantization_config");
  j.erase("torch_dtype");
  j["dtype"] = dtype_name(dtype);
  if (head == HeadKind::SequenceClassification) {
    ordered_json id2label = ordered_json::object(), label2id = ordered_json::object();
    for (int64_t i = 0; i < c.num_labels; ++i) {
      id2label[std::to_string(i)] = "LABEL_" + std::to_string(i);
      label2id["LABEL_" + std::to_string(i)] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
  }
  return j.dump(2) + "\n";
}

void save_language_model(const std::filesystem::path& dir, LanguageModelImpl& m, const SaveModelOptions& o) {
  namespace fs = std::filesystem;
  const fs::path target = fs::absolute(dir).lexically_normal();
  const fs::path parent = target.parent_path();
  fs::create_directories(o.into_existing_dir ? target : parent);
  const fs::path tmp = o.into_existing_dir ? target / fmt::format(".model.tmp-{}", getpid())
                                           : parent / fmt::format(".{}.tmp-{}", target.filename().string(), getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    io::NamedTensors tensors;
    torch::Dtype dtype = torch::kFloat32;
    // Experts are written in the published per-expert layout: each part is
    // listed by shape (a meta tensor) and cut from its parameter as it is
    // written, after the parameter is read (gathered, under sharding).
    struct Part {
      torch::Tensor param;
      std::function<torch::Tensor(const torch::Tensor&)> take;
    };
    std::unordered_map<const c10::TensorImpl*, Part> parts;
    for (const auto& p : m.named_parameters(true)) {
      dtype = p.value().scalar_type();
      const auto published = published_parts(m.config(), p.key(), p.value().sizes().vec());
      if (published.empty()) {
        tensors.emplace_back(p.key(), p.value().detach());
        continue;
      }
      for (const auto& part : published) {
        auto meta = torch::empty(part.shape, p.value().options().device(torch::kMeta));
        parts.emplace(meta.unsafeGetTensorImpl(), Part{p.value().detach(), part.take});
        tensors.emplace_back(part.name, meta);
      }
    }
    io::SaveOptions so;
    so.max_shard_size = o.max_shard_size;
    so.before_write = [&](const torch::Tensor& t) {
      if (!o.before_write) return;
      auto it = parts.find(t.unsafeGetTensorImpl());
      o.before_write(it == parts.end() ? t : it->second.param);
    };
    so.resolve = [&](const torch::Tensor& t) {
      auto it = parts.find(t.unsafeGetTensorImpl());
      return it == parts.end() ? t : it->second.take(it->second.param);
    };
    io::save_checkpoint(tmp, tensors, so);
    io::write_file_atomic(tmp / "config.json", config_json(m.config(), m.head_kind(), dtype));
    ordered_json gen = ordered_json::object();
    const auto& c = m.config();
    if (c.bos_token_id) gen["bos_token_id"] = *c.bos_token_id;
    if (c.eos_token_ids.size() == 1) gen["eos_token_id"] = c.eos_token_ids[0];
    else if (!c.eos_token_ids.empty()) gen["eos_token_id"] = c.eos_token_ids;
    if (c.pad_token_id) gen["pad_token_id"] = *c.pad_token_id;
    io::write_file_atomic(tmp / "generation_config.json", gen.dump(2) + "\n");
    if (o.tokenizer_dir) {
      for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                            "tokenizer.model", "vocab.json", "merges.txt"}) {
        if (!fs::exists(*o.tokenizer_dir / f)) continue;
        fs::copy_file(*o.tokenizer_dir / f, tmp / f, fs::copy_options::overwrite_existing);
        // The source may be read-only; the saved model is the user's to edit.
        fs::permissions(tmp / f, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
      }
    }
    io::fsync_directory(tmp);
    if (o.into_existing_dir) {
      // Old weight files that the new save does not have (a sharded model
      // replaced by a single file, or fewer shards) go first, then the new
      // files move in, the weights' entry point last.
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(tmp)) files.push_back(e.path().filename());
      for (const auto& e : fs::directory_iterator(target)) {
        const std::string name = e.path().filename().string();
        const bool weights = name.rfind("model", 0) == 0 && (name.find(".safetensors") != std::string::npos);
        if (weights && !fs::exists(tmp / name)) fs::remove(e.path());
      }
      std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
        auto last = [](const fs::path& p) { return p == "model.safetensors" || p == "model.safetensors.index.json"; };
        return last(a) != last(b) ? last(b) : a < b;
      });
      for (const auto& f : files) fs::rename(tmp / f, target / f);
      io::fsync_directory(target);
      fs::remove_all(tmp);
      return;
    }
    io::swap_in_directory(tmp, target);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

ModelConfig new_model_config(const NewModelSpec& s) {
  ModelConfig c;
  bool known = false;
  for (const auto* t : {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3"})
    known |= s.arch == t;
  if (!known)
    fail_input("--arch `{}` is not one of llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, gpt_oss, deepseek_v3", s.arch);
  if (s.vocab_size <= 0) fail_input("a new model needs a vocab_size (or a tokenizer to take it from)");
  c.model_type = s.arch;
  c.vocab_size = s.vocab_size;
  c.hidden_size = s.hidden_size;
  c.intermediate_size = s.intermediate_size > 0 ? s.intermediate_size : 4 * s.hidden_size;
  c.num_hidden_layers = s.num_layers;
  c.num_attention_heads = s.num_heads;
  c.num_key_value_heads = s.num_kv_heads > 0 ? s.num_kv_heads : s.num_heads;
  if (s.hidden_size <= 0 || s.num_layers <= 0 || s.num_heads <= 0)
    fail_input("hidden_size, num_layers and num_heads must be positive");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail_input("num_heads ({}) must be a multiple of num_kv_heads ({})", c.num_attention_heads, c.num_key_value_heads);
  c.head_dim = s.head_dim > 0 ? s.head_dim : s.hidden_size / s.num_heads;
  if (s.head_dim <= 0 && s.hidden_size % s.num_heads != 0)
    fail_input("hidden_size ({}) must be a multiple of num_heads ({}), or give head_dim", s.hidden_size, s.num_heads);
  if (c.head_dim % 2) fail_input("head_dim {} must be even", c.head_dim);
  c.max_position_embeddings = s.max_position_embeddings;
  c.rope.theta = s.rope_theta;
  c.tie_word_embeddings = s.tie_word_embeddings;
  c.qkv_bias = s.arch == "qwen2";
  c.qk_norm = s.arch == "qwen3" || s.arch == "qwen3_moe";
  c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  c.sparse_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (s.arch == "gpt_oss") {
    // gpt-oss: biased attention with sinks, sliding and full layers in
    // turn (window 128), its yarn rope, biased router and experts.
    c.attention_bias = c.attention_sinks = c.norm_weight_fp32 = true;
    c.rms_norm_eps = 1e-5;
    c.sliding_window = 128;
    for (size_t i = 0; i < c.sliding_layers.size(); ++i) c.sliding_layers[i] = i % 2 == 0;
    c.rope.type = "yarn";
    c.rope.factor = 32.0;
    c.rope.beta_fast = 32.0;
    c.rope.beta_slow = 1.0;
    c.rope.truncate = false;
    c.rope.original_max_position_embeddings = 4096;
    c.router_bias = c.router_softmax_after_topk = c.expert_bias = c.experts_interleaved = true;
    c.swiglu_limit = 7.0;
  }
  if (s.arch == "deepseek_v3") {
    // Latent attention with a plain q_proj, keys and values through a rank
    // of hidden / 2, a rotary key half a head wide; one shared expert, one
    // group, the first layer dense.
    c.kv_lora_rank = std::max<int64_t>(2, s.hidden_size / 2);
    c.qk_nope_head_dim = c.head_dim;
    c.qk_rope_head_dim = std::max<int64_t>(2, c.head_dim / 2 / 2 * 2);
    c.v_head_dim = c.head_dim;
    c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
    c.rope_head_dim = c.qk_rope_head_dim;
    c.rope_interleave = true;
    c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    c.num_key_value_heads = c.num_attention_heads;
    c.router_sigmoid_groups = true;
    c.n_shared_experts = 1;
    c.routed_scaling_factor = 1.0;
    c.router_balance_loss = false;
  }
  if (s.arch == "qwen3_moe" || s.arch == "mixtral" || s.arch == "gpt_oss" || s.arch == "deepseek_v3") {
    if (s.num_experts <= 0) fail_input("--num_experts must be positive, found {}", s.num_experts);
    if (s.num_experts_per_tok <= 0 || s.num_experts_per_tok > s.num_experts)
      fail_input("--num_experts_per_tok is {}; it must be between 1 and the {} experts (--num_experts)",
                 s.num_experts_per_tok, s.num_experts);
    c.num_experts = s.num_experts;
    c.num_experts_per_tok = s.num_experts_per_tok;
    c.moe_intermediate_size = s.moe_intermediate_size > 0 ? s.moe_intermediate_size : c.intermediate_size;
    if (s.arch == "mixtral") c.intermediate_size = c.moe_intermediate_size;  // Mixtral's experts are its MLPs
    c.norm_topk_prob = s.arch != "gpt_oss";
    c.router_weights_fp32 = s.arch == "mixtral" || s.arch == "deepseek_v3";
    c.router_aux_loss_coef = s.arch == "deepseek_v3" ? 0.0 : 0.001;
    c.sparse_layers.assign(c.sparse_layers.size(), true);
    if (s.arch == "deepseek_v3" && c.num_hidden_layers > 1) c.sparse_layers[0] = false;
  }
  c.bos_token_id = s.bos_token_id;
  c.pad_token_id = s.pad_token_id;
  c.eos_token_ids = s.eos_token_ids;
  return c;
}

void init_weights(LanguageModelImpl& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& p : m.named_parameters(true)) {
    const std::string& n = p.key();
    auto& t = p.value();
    if (n.find("norm") != std::string::npos) {
      t.fill_(m.config().norm_plus_one ? 0.0 : 1.0);  // Gemma's norms scale by 1 + weight
    } else if (n.ends_with(".bias") || n.ends_with("_bias")) {
      t.zero_();
    } else {
      t.copy_(at::normal(0.0, 0.02, t.sizes(), gen, t.options().dtype(torch::kFloat32)));
    }
  }
  const auto pad = m.config().pad_token_id;
  if (pad && *pad >= 0 && *pad < m.config().vocab_size) m.model->embed_tokens->weight[*pad].zero_();
}

}  // namespace trlx::model

#pragma once
// A decoder-only model's shape, read from a Hugging Face config.json
// (Llama, Mistral, Qwen2, Qwen3), in both the older rope_theta/rope_scaling
// form and the newer rope_parameters form.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace trlx::model {

struct RopeConfig {
  std::string type = "default";  // default | linear | llama3
  double theta = 10000.0;
  double factor = 1.0;            // linear, llama3
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string model_type;  // llama | mistral | qwen2 | qwen3
  std::vector<std::string> architectures;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v/o bias (Llama's attention_bias)
  bool qkv_bias = false;        // q/k/v bias only (Qwen2)
  bool qk_norm = false;         // RMSNorm on q and k per head (Qwen3)
  bool mlp_bias = false;
  std::optional<int64_t> sliding_window;  // applied to the layers in sliding_layers
  std::vector<bool> sliding_layers;
  std::string hidden_act = "silu";
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype;  // as saved ("bfloat16", "float32", ...), may be empty
  int64_t num_labels = 1;   // score head rows (sequence classification)

  // The config.json as read, so that saving keeps keys trlx does not model.
  std::string raw_json;
};

// Reads and checks `dir/config.json`. Errors name the file and the key.
ModelConfig load_model_config(const std::filesystem::path& dir);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
const std::vector<std::string>& supported_model_types();

}  // namespace trlx::model

#pragma once
// Writing a LanguageModel as a Hugging Face model directory that transformers,
// PEFT and vLLM load unchanged, and making new random models in that format.
#include <filesystem>
#include <optional>
#include <string>

#include "io/safetensors.hpp"
#include "model/decoder.hpp"

namespace trlx::model {

struct SaveModelOptions {
  uint64_t max_shard_size = 0;                          // 0: one model.safetensors
  std::optional<std::filesystem::path> tokenizer_dir;  // tokenizer files copied from here
  // Write the model's files into `dir` beside what it already holds (a
  // training output_dir with checkpoints and metrics) instead of replacing
  // the whole directory. Each file still appears atomically; the weights'
  // entry point (model.safetensors or its index) is renamed in last.
  bool into_existing_dir = false;
  // Called before each parameter's bytes are read (see io::BeforeWrite).
  io::BeforeWrite before_write;
};

// Writes config.json, model.safetensors (or shards + index),
// generation_config.json and the tokenizer files into a temporary directory
// beside `dir`, then swaps it in: a failure leaves the previous `dir` intact.
void save_language_model(const std::filesystem::path& dir, LanguageModelImpl& m, const SaveModelOptions& options = {});

// config.json text for `config` as transformers writes it for its model type.
std::string config_json(const ModelConfig& config, HeadKind head, torch::Dtype dtype);

// A config for a new model of `arch` with the given sizes (defaults for the rest).
struct NewModelSpec {
  std::string arch = "qwen2";
  int64_t vocab_size = 0, hidden_size = 64, intermediate_size = 0, num_layers = 2, num_heads = 4,
          num_kv_heads = 0, head_dim = 0, max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;
  // Mixtures of experts (qwen3_moe, mixtral): every layer routes each token
  // to num_experts_per_tok of num_experts experts of width
  // moe_intermediate_size (default: intermediate_size).
  int64_t num_experts = 8, num_experts_per_tok = 2, moe_intermediate_size = 0;
};
ModelConfig new_model_config(const NewModelSpec& spec);

// Initialises weights as transformers does for these models: normal(0, 0.02)
// for linear and embedding weights, zero biases, unit norm weights.
void init_weights(LanguageModelImpl& m, uint64_t seed);

}  // namespace trlx::model

#pragma once
// A decoder-only model's shape, read from a Hugging Face config.json
// (Llama, Mistral, Qwen2, Qwen3, Phi-3/Phi-4, Gemma, Gemma 2, Gemma 3 text,
// and the mixtures of experts Qwen3-MoE, Mixtral, gpt-oss and DeepSeek-V3),
// in both the older rope_theta/rope_scaling form and the newer
// rope_parameters form.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace trlx::model {

struct RopeConfig {
  // default | linear | dynamic | yarn | longrope | llama3, as transformers
  // computes each (modeling_rope_utils).
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0;                  // linear, dynamic, yarn, llama3; longrope (derived when absent)
  double partial_rotary_factor = 1.0;   // rotary on the first head_dim * this dims
  double low_freq_factor = 1.0;         // llama3
  double high_freq_factor = 4.0;        // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn, longrope
  std::optional<double> attention_factor;        // yarn, longrope: cos/sin scale (derived when absent)
  double beta_fast = 32.0, beta_slow = 1.0;      // yarn
  std::optional<double> mscale, mscale_all_dim;  // yarn
  bool truncate = true;                          // yarn
  std::vector<double> short_factor, long_factor;  // longrope, head_dim * partial / 2 each
};

struct ModelConfig {
  std::string model_type;  // llama | mistral | qwen2 | qwen3 | phi3 | gemma | gemma2 | gemma3_text | qwen3_moe | mixtral | gpt_oss | deepseek_v3
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
  // Gemma 3: the rope of the sliding-window layers (rope above: the others).
  std::optional<RopeConfig> sliding_rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v/o bias (Llama's attention_bias)
  bool qkv_bias = false;        // q/k/v bias only (Qwen2)
  bool qk_norm = false;         // RMSNorm on q and k per head (Qwen3)
  bool mlp_bias = false;
  std::optional<int64_t> sliding_window;  // applied to the layers in sliding_layers
  std::vector<bool> sliding_layers;
  std::string hidden_act = "silu";  // silu | gelu_pytorch_tanh
  // Gemma: RMSNorm scales by (1 + weight) in fp32; embeddings are multiplied
  // by sqrt(hidden_size) in their dtype.
  bool norm_plus_one = false;
  bool scale_embeddings = false;
  // Gemma 2/3: the attention and MLP outputs are normed before their
  // residual add, and the MLP input by pre_feedforward_layernorm.
  bool sandwich_norms = false;
  // Phi-3: q/k/v in one qkv_proj, gate and up in one gate_up_proj.
  bool fused_projections = false;
  // Query scaling; 0 means 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar^-0.5).
  double attention_scale = 0.0;
  // Gemma 2: tanh soft-capping of attention scores and of the final logits.
  std::optional<double> attn_logit_softcapping, final_logit_softcapping;
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype;  // as saved ("bfloat16", "float32", ...), may be empty
  int64_t num_labels = 1;   // score head rows (sequence classification)

  // Mixture of experts (qwen3_moe, mixtral): in the layers sparse_layers
  // marks, a router sends each token to num_experts_per_tok of num_experts
  // experts of width moe_intermediate_size (model/moe.hpp); the other layers
  // keep the dense MLP of intermediate_size.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;         // the chosen experts' weights divided by their sum
  bool router_weights_fp32 = false;   // Mixtral mixes the experts in fp32, Qwen3-MoE in the model dtype
  double router_jitter_noise = 0.0;   // Mixtral: uniform multiplicative noise on the block input in training
  double router_aux_loss_coef = 0.0;  // the config's weight of the load-balancing loss
  bool output_router_logits = false;  // the config asks for the load-balancing loss (CPO and ORPO read it)
  std::vector<bool> sparse_layers;
  bool is_moe() const { return num_experts > 0; }
  // gpt-oss's experts: a bias on the router and on each expert projection,
  // the mixing weights a softmax over the chosen experts' logits only, the
  // weights stored [E, in, out] with gate and up columns interleaved, and
  // the clamped SwiGLU (up + 1) * g * sigmoid(alpha * g), g = min(gate,
  // limit), up clamped to +-limit.
  bool router_bias = false;
  bool router_softmax_after_topk = false;
  bool expert_bias = false;
  bool experts_interleaved = false;
  std::optional<double> swiglu_limit;
  double swiglu_alpha = 1.702;
  // gpt-oss: a learned logit per head beside the keys (attention sinks),
  // and RMSNorm scaling in fp32 before the cast back.
  bool attention_sinks = false;
  bool norm_weight_fp32 = false;
  // The expert weights come MXFP4-packed (*_blocks, *_scales), as published
  // gpt-oss checkpoints store them; they are dequantized on load.
  bool mxfp4_experts = false;
  // The model has a load-balancing loss (not DeepSeek-V3, which balances
  // its experts with a correction bias instead).
  bool router_balance_loss = true;
  // DeepSeek-V3's routing: sigmoid scores, chosen (with a per-expert
  // correction bias, mlp.gate.e_score_correction_bias) among the
  // topk_group best of n_group groups of experts, mixed by the unbiased
  // scores (normalized if norm_topk_prob) times routed_scaling_factor; and
  // shared experts every token runs through (an MLP of
  // n_shared_experts * moe_intermediate_size).
  bool router_sigmoid_groups = false;
  int64_t n_group = 1, topk_group = 1, n_shared_experts = 0;
  double routed_scaling_factor = 1.0;
  // DeepSeek-V3's multi-head latent attention (kv_lora_rank > 0): queries
  // through a low-rank q_a_proj/q_b_proj (q_lora_rank > 0) or q_proj, keys
  // and values through kv_a_proj_with_mqa and kv_b_proj; each head's query
  // and key are qk_nope_head_dim + qk_rope_head_dim wide (head_dim holds
  // their sum), its value v_head_dim; one rotary key per token shared by
  // every head, interleaved pairs when rope_interleave.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool rope_interleave = false;
  // Rotary dims when not head_dim * partial_rotary_factor (MLA: qk_rope_head_dim).
  int64_t rope_head_dim = 0;

  // The config.json as read, so that saving keeps keys trlx does not model.
  std::string raw_json;
};

// Reads and checks `dir/config.json`. Errors name the file and the key.
ModelConfig load_model_config(const std::filesystem::path& dir);
// The number of leading dims of each head that rotary embeddings turn.
int64_t rotary_dims(const ModelConfig& c, const RopeConfig& rope);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
const std::vector<std::string>& supported_model_types();

}  // namespace trlx::model

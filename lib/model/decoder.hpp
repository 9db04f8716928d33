#pragma once
// The Llama-family decoder (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 1-3,
// and the mixtures of experts Qwen3-MoE and Mixtral) as LibTorch modules,
// with parameter names equal to Hugging Face's, so that checkpoints load and
// save without renaming.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "model/attention_plan.hpp"
#include "model/model_config.hpp"
#include "model/moe.hpp"

namespace trlx::model {

// Keys and values of a generation round, allocated once (on the first
// write, in the dtype the attention computes in): `slots` rows of up to
// `capacity` positions per layer. Each slot holds one sequence from
// position 0, so a slot's length is also the position of its next token.
// A forward with a cache is one of two kinds, set by the caller:
//  - prefill: new sequences, right-padded, run without looking at the cache;
//    batch row `sources[i]` is written to slot `slots[i]` (one prompt may
//    fill several slots: its samples share one prefill);
//  - decode: one token for every slot, at position `positions[s]`, attending
//    to that slot's keys up to and including it.
struct KVCache {
  KVCache(int64_t num_layers, int64_t slots, int64_t capacity)
      : keys(static_cast<size_t>(num_layers)), values(static_cast<size_t>(num_layers)), slots_(slots),
        capacity_(capacity) {}
  // [slots, capacity, kv_heads, head_dim]: each slot's positions in a row,
  // so that flash reads the cache as variable-length sequences without a copy.
  std::vector<torch::Tensor> keys, values;

  enum class Mode { Prefill, Decode };
  Mode mode = Mode::Prefill;
  torch::Tensor sources, slots;  // prefill: [N] batch rows and the slots they fill (device, int64)
  torch::Tensor positions;       // decode: [slots] position of each slot's token (device, int64)
  int64_t read_length = 0;       // decode: positions [0, read_length) may hold keys

  int64_t num_slots() const { return slots_; }
  int64_t capacity() const { return capacity_; }
  // Keeps only the slots `kept` (host indices, in their new order).
  void keep_slots(const std::vector<int64_t>& kept);

 private:
  int64_t slots_, capacity_;
};

struct Quant4Weight;  // model/quant4.hpp

// Linear and embedding layers whose weights start uninitialised: every weight
// is either loaded from a checkpoint or set by init_weights, and skipping
// LibTorch's default initialisation makes loading a model several times
// faster.
//
// A LoRA adapter (lib/model/lora.hpp) may be attached: `lora_A` [r, in] and
// `lora_B` [out, r] submodules, so that their parameters are named
// `<layer>.lora_A.weight` / `<layer>.lora_B.weight`, and the output gains
// B(A(dropout(x))) * lora_scale while `lora_enabled`. Without one, forward is
// the plain linear.
//
// A frozen weight may be kept in 4 bits instead (QLoRA, model/quant4.hpp):
// `quant4` holds it and `weight` is then empty; each forward dequantizes it.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool with_bias);
  torch::Tensor forward(const torch::Tensor& x) {
    if (quant4) return forward_quantized(x);
    if (!lora_A || !lora_enabled) return torch::linear(x, weight, bias);
    return forward_with_lora(x, weight, bias);
  }
  torch::Tensor weight, bias;
  std::shared_ptr<const Quant4Weight> quant4;

  std::shared_ptr<LinearImpl> lora_A, lora_B;
  double lora_scale = 0.0;
  double lora_dropout = 0.0;  // applied only in training mode
  bool lora_enabled = true;
  // DoRA: the learned magnitude of each output row (PEFT's
  // lora_magnitude_vector); undefined for plain LoRA.
  torch::Tensor lora_magnitude;

 private:
  // The base weight and bias given: dequantized ones when quant4 holds them.
  torch::Tensor forward_with_lora(const torch::Tensor& x, const torch::Tensor& base_weight,
                                  const torch::Tensor& base_bias);
  torch::Tensor forward_quantized(const torch::Tensor& x);
};
TORCH_MODULE(Linear);

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num, int64_t dim, std::optional<int64_t> padding_idx);
  torch::Tensor forward(const torch::Tensor& ids) { return torch::embedding(weight, ids, padding_idx_); }
  torch::Tensor weight;

 private:
  int64_t padding_idx_ = -1;  // rows that get no gradient
};
TORCH_MODULE(Embedding);

// plus_one (Gemma): the weight is an offset, the scale is (1 + weight),
// applied in fp32 before the cast back.
class RMSNormImpl : public torch::nn::Module {
 public:
  // scale_fp32 (gpt-oss): the weight multiplies in fp32, before the cast back.
  RMSNormImpl(int64_t dim, double eps, bool plus_one = false, bool scale_fp32 = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
  bool plus_one_ = false, scale_fp32_ = false;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding for one RopeConfig: inverse frequencies and the
// cos/sin scale of each rope type as transformers computes them. `seq_len` is
// the length the frequencies are for (dynamic, longrope); 0: the configured one.
std::pair<torch::Tensor, double> rope_frequencies(const ModelConfig& model, const RopeConfig& rope, int64_t seq_len = 0);

// The cos/sin tables of one rope. dynamic and longrope change their
// frequencies with the longest sequence a forward holds (its largest position
// id + 1), and dynamic keeps the longest it has seen until a forward falls
// back within max_position_embeddings, as transformers' dynamic update does.
class Rotary {
 public:
  Rotary(const ModelConfig& model, const RopeConfig& rope);
  // cos and sin [B, T, rotary dims] for positions [B, T], in `dtype`.
  std::pair<torch::Tensor, torch::Tensor> tables(const torch::Tensor& positions, torch::Dtype dtype);
  int64_t rotary_dim() const { return rotary_dim_; }

 private:
  ModelConfig model_;
  RopeConfig rope_;
  int64_t rotary_dim_;
  torch::Tensor inv_freq_, original_inv_freq_, long_inv_freq_;
  torch::Tensor placed_inv_freq_, placed_from_;  // inv_freq_ on the device it was last used on
  double scale_ = 1.0;
  int64_t cached_len_;  // dynamic: the length inv_freq_ is for
};

// The attention mask as SDPA takes it: [B, 1, Tq, Tk] booleans, true where a
// query may attend. `key_mask` [B, Tk] marks real (non-pad) keys; queries sit
// at the last Tq key positions. A query that could attend to nothing (a pad
// position) attends to itself, so no row is all -inf and no NaN reaches the
// gradients.
torch::Tensor build_attention_mask(const torch::Tensor& key_mask, int64_t num_queries,
                                   std::optional<int64_t> sliding_window);

// A boolean mask (true: attend) as the additive one SDPA takes, in `dtype`
// (0 where true, -inf elsewhere), undefined for undefined. Its rows are laid
// out 16 columns apart at the least: a GPU's memory-efficient kernel takes a
// mask whose strides are multiples of 8 as it is, and copies any other (in
// every layer, each copy kept for backward).
torch::Tensor additive_mask(const torch::Tensor& mask, torch::Dtype dtype);

// Position ids that skip padding: each row counts its real tokens, so a
// left-padded prompt starts at position 0 like an unpadded one.
torch::Tensor position_ids_from_mask(const torch::Tensor& attention_mask);

// Branches of packed rows: [B, 1, T, T] booleans, true where key k may be seen
// by query q as far as branching goes (k <= q, and the positions of the same
// document have not restarted at or below k's position between k and q). A
// document whose positions go back to p > 0 at some token starts a branch
// there that shares the document's first p tokens: each branch sees the
// shared prefix and itself, not its siblings. Undefined when no real token of
// any document restarts its positions (every packed batch of independent
// documents), so that such batches keep their plain mask.
torch::Tensor branch_mask(const torch::Tensor& position_ids, const torch::Tensor& document_ids,
                          const torch::Tensor& key_mask);
// The same in two halves. branch_reach reads the rows on the host (a tensor
// elsewhere is copied there) and gives, per slot k, the first later slot
// whose position is at or below k's (T if none) as [B, T] int64 on the host,
// or an empty tensor when no row branches. branch_mask_from_reach builds the
// mask from it where `key_mask` lives, with no read back to the host.
torch::Tensor branch_reach(const torch::Tensor& position_ids, const torch::Tensor& document_ids,
                           const torch::Tensor& key_mask);
torch::Tensor branch_mask_from_reach(const torch::Tensor& reach, const torch::Tensor& key_mask);

// What sequence parallelism installs in a model: the ranks of one sequence
// group each run 1/size of every row's positions through the layers, and
// attention sees every position one of two ways:
//  - Ulysses (DeepSpeed-Ulysses, sp_size): rows split in consecutive shares;
//    around attention, all-to-all trades positions for heads, so each rank
//    attends over every position for 1/size of the heads;
//  - Context (context parallelism, cp_size): rows split in 2 x size chunks,
//    rank r holding chunks r and 2 x size - 1 - r (each rank the same causal
//    work); keys and values are all-gathered, and each rank's queries attend
//    over every key through a mask of their rows.
// Rows are padded to a whole number of shares (pad positions repeat the
// last; no real query reads them). Each call is a collective of the group
// with its own backward.
class SequenceParallel {
 public:
  enum class Kind { Ulysses, Context };
  virtual ~SequenceParallel() = default;
  virtual Kind kind() const = 0;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // [B, H, T/size, D] (this rank's positions, every head) -> [B, H/size, T,
  // D] (every position, this rank's heads: the rank-th group of H/size).
  virtual torch::Tensor to_heads(const torch::Tensor& x) = 0;
  // The inverse: [B, H/size, T, D] -> [B, H, T/size, D].
  virtual torch::Tensor to_positions(const torch::Tensor& x) = 0;
  // Every rank's share of `x` along `dim`, in rank order ([B, T/size, C] ->
  // [B, T, C] for dim 1); in backward each rank's share gets the sum of
  // every rank's gradient for it (every rank computes the same loss from
  // the gathered rows; every rank's queries read the gathered keys).
  virtual torch::Tensor gather(const torch::Tensor& x, int64_t dim) = 0;
};

// How one layer attends in one forward (see attention_plan.hpp): the path
// the plan chose and what that path reads.
struct LayerAttention {
  AttentionPath path = AttentionPath::SdpaCausal;
  torch::Tensor mask;                  // additive [B, 1, Tq, Tk], where the path needs one
  int64_t query_start = 0;             // queries for positions [query_start, T) only (no cache)
  std::optional<int64_t> window;       // flash paths: keys less than this many positions back
  torch::Tensor cu_seqlens;            // FlashDocuments: int32 [segments + 1] over the B*T flattened rows;
                                       // FlashDecode: the queries', one per slot
  int64_t max_seqlen = 0;              // FlashDocuments: longest segment
  torch::Tensor cu_seqlens_k, seqused_k;  // FlashDecode: where each slot's keys start, and how many it reads
  // Mixture of experts: a training forward whose routing the model's
  // RouterBalance collects, and each row's weight there ([B * T], the
  // attention mask; undefined: all 1).
  bool balance = false;
  torch::Tensor router_rows;
  // Sequence parallelism: x holds this rank's share of the positions; the
  // layer attends over the first `length` positions of the gathered rows.
  SequenceParallel* sp = nullptr;
  int64_t length = 0;
};

// What a flash path hands the kernel: causal with the queries aligned to the
// last keys (bottom right), optionally within a window. Dense: q [B, Tq, H,
// D], k/v [B, Tk, Hk, D], cu_* undefined. Variable length: q [total_q, H, D],
// k/v [total_k, Hk, D] with cumulative lengths cu_q/cu_k (int32), and
// seqused_k (int32, per sequence; undefined: all) keys read of each.
// Returns the output shaped as q.
struct FlashArgs {
  torch::Tensor q, k, v, cu_q, cu_k, seqused_k;
  int64_t max_q = 0, max_k = 0;
  double scale = 1.0;
  std::optional<int64_t> window;  // keys less than this many positions before the query
};
using FlashKernel = std::function<torch::Tensor(const FlashArgs&)>;
// The kernel the flash paths call: LibTorch's flash attention unless replaced
// (tests replace it, with the device's capabilities, to run the flash paths'
// plumbing on a CPU); null restores it.
void set_flash_kernel(FlashKernel kernel);

// What attention kernels `device` offers for `dtype`: probed once per device
// and dtype on a GPU (tiny calls to the kernels and to SDPA's own choice);
// a CPU offers none of the GPU kernels. set_attention_device overrides the
// answer for every device (nullopt: probe again).
AttentionDevice attention_device(const torch::Device& device, torch::Dtype dtype);
void set_attention_device(std::optional<AttentionDevice> device);

// Cumulative lengths of the runs of equal document ids along each row of
// `document_ids` [B, T] (host), flattened row after row, as int32 [runs + 1],
// and the longest run: the segments variable-length attention takes. Padding
// (its own id) forms runs of its own, which no real token reads.
std::pair<torch::Tensor, int64_t> document_segments(const torch::Tensor& document_ids);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, int64_t layer);
  // attn.query_start > 0 (no cache): queries only for positions
  // [query_start, T) of x, keys and values for all; a mask then has rows for
  // those queries.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const LayerAttention& attn, KVCache* cache);
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Linear qkv_proj{nullptr};  // fused_projections: q, k, v rows in that order
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  // Latent attention (DeepSeek-V3): q_a_proj -> q_a_layernorm -> q_b_proj
  // (or q_proj), kv_a_proj_with_mqa -> kv_a_layernorm -> kv_b_proj.
  Linear q_a_proj{nullptr}, q_b_proj{nullptr}, kv_a_proj_with_mqa{nullptr}, kv_b_proj{nullptr};
  RMSNorm q_a_layernorm{nullptr}, kv_a_layernorm{nullptr};
  torch::Tensor sinks;  // gpt-oss: [heads], each head's logit beside its keys

 private:
  int64_t layer_, heads_, kv_heads_, head_dim_;
  int64_t v_dim_, nope_dim_, rope_dim_, kv_rank_;  // latent attention's widths (v_dim_: head_dim_ otherwise)
  bool interleave_;
  double scale_;
  std::optional<double> softcap_;
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  // width: the hidden width (0: intermediate_size).
  explicit MLPImpl(const ModelConfig& c, int64_t width = 0);
  torch::Tensor forward(const torch::Tensor& x);
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  Linear gate_up_proj{nullptr};  // fused_projections: gate rows, then up rows

 private:
  bool gelu_ = false;  // gelu (tanh approximation) instead of silu
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  // `balance`: the model's, for a sparse (mixture-of-experts) layer.
  DecoderLayerImpl(const ModelConfig& c, int64_t layer, std::shared_ptr<RouterBalance> balance = nullptr);
  // Returns the layer's output at positions [attn.query_start, T) of x (all
  // when 0); see AttentionImpl::forward.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const LayerAttention& attn, KVCache* cache);
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};  // sandwich_norms
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  SparseMoe moe{nullptr};  // a sparse layer's experts, in place of mlp (named "mlp" as in transformers)
  MLP shared_experts{nullptr};  // DeepSeek-V3: mlp.shared_experts, a child of moe
  bool sliding = false;     // attends within the sliding window
  bool local_rope = false;  // a sliding layer by the config: Gemma 3 gives it sliding_rope
};
TORCH_MODULE(DecoderLayer);

// What one forward takes. attention_mask and position_ids may be undefined:
// no padding, positions 0..T-1 (after the cache, if any).
struct Batch {
  torch::Tensor input_ids;       // [B, T] int64
  torch::Tensor attention_mask;  // [B, T] 1 real / 0 pad
  torch::Tensor position_ids;    // [B, T]
  // [B, T]: packed sequences; a token attends only to earlier tokens of its
  // own document (no cache). With position_ids, a document may branch: where
  // its positions go back to p > 0, the tokens from there on continue the
  // document's first p tokens instead of the tokens just before them (see
  // branch_mask), e.g. a prompt followed by two completions that each see the
  // prompt once computed.
  torch::Tensor document_ids{};
  // Known on the host: each row's padding (if any) comes after all its real
  // tokens. Lets the model skip the attention mask (causal attention is then
  // exact for every real token) without reading the mask on the device.
  bool padding_trails = false;
  // Final hidden states are wanted only at positions [outputs_from, T)
  // (known on the host; 0: all), e.g. from just before the first token that
  // carries loss. The last layer then runs its queries, attention output,
  // MLP and the final norm only there (its keys and values still cover every
  // position), and the forward returns [B, T - outputs_from, hidden]: the
  // same values as the full forward's positions from outputs_from on. No
  // KV cache.
  int64_t outputs_from = 0;
  // branch_reach of these rows, worked out on the host before they moved
  // (empty: no row branches). Undefined: the model works it out, which reads
  // the positions back from the device.
  torch::Tensor branch_reach{};
  // document_segments of these rows, worked out on the host before they
  // moved (undefined: not known, and packed rows attend through a mask).
  torch::Tensor segments{};
  int64_t longest_segment = 0;
};

// What a strategy that splits parameters across ranks installs in a model
// (LanguageModelImpl::set_sharding_hooks): the model hands it every
// computation that reads weights, and it makes those weights whole around
// the computation and, where a backward follows, again for that backward.
// Each call runs `compute` and returns what it returns.
class ShardingHooks {
 public:
  virtual ~ShardingHooks() = default;
  // The token embedding's lookup (its backward reads no weight).
  virtual torch::Tensor embedding(const std::function<torch::Tensor()>& compute) = 0;
  // One decoder layer applied to `input`, through run_layer: gradient
  // checkpointing's recompute runs inside the backward this prepares, so it
  // finds the layer's weights whole.
  virtual torch::Tensor layer(const DecoderLayerImpl& layer, const torch::Tensor& input,
                              const std::function<torch::Tensor()>& compute) = 0;
  // Whatever reads the head weight from `input` (logits, chunked log-probs,
  // scores); `input` may be undefined when nothing flows back through it.
  virtual std::vector<torch::Tensor> head(const torch::Tensor& input,
                                          const std::function<std::vector<torch::Tensor>()>& compute) = 0;
};

// embed_tokens -> layers -> norm: the hidden states every head reads.
class DecoderModelImpl : public torch::nn::Module {
 public:
  explicit DecoderModelImpl(const ModelConfig& c);
  torch::Tensor forward(const Batch& batch, KVCache* cache = nullptr);
  const ModelConfig& config() const { return config_; }

  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  // Runs one decoder layer; the engine may replace it (gradient
  // checkpointing) without the model knowing. Under sharding it runs inside
  // ShardingHooks::layer.
  using LayerRunner = std::function<torch::Tensor(DecoderLayerImpl& layer, const torch::Tensor& x,
                                                  const torch::Tensor& cos, const torch::Tensor& sin,
                                                  const LayerAttention& attn, KVCache* cache)>;
  LayerRunner run_layer;

  // Null when the parameters are whole; see LanguageModelImpl.
  void set_sharding_hooks(std::shared_ptr<ShardingHooks> hooks) { sharding_ = std::move(hooks); }
  ShardingHooks* sharding_hooks() const { return sharding_.get(); }
  // Sequence parallelism for forwards without a KV cache (null: none).
  void set_sequence_parallel(std::shared_ptr<SequenceParallel> sp) { sp_ = std::move(sp); }
  SequenceParallel* sequence_parallel() const { return sp_.get(); }

  // Mixture of experts: the load-balancing loss of the training forwards
  // (null for a dense model). The engine begins and ends its collection.
  RouterBalance* router_balance() const { return router_balance_.get(); }

  // The attention paths the last forward took: full-attention layers, then
  // (if the model has them) sliding layers, then the same for the last layer
  // where its queries started later (outputs_from).
  const std::vector<AttentionPath>& attention_paths() const { return attention_paths_; }

 private:
  ModelConfig config_;
  std::vector<AttentionPath> attention_paths_;
  std::shared_ptr<Rotary> rope_, sliding_rope_;  // sliding_rope_: Gemma 3's sliding layers
  std::shared_ptr<RouterBalance> router_balance_;
  std::shared_ptr<ShardingHooks> sharding_;
  std::shared_ptr<SequenceParallel> sp_;
};
TORCH_MODULE(DecoderModel);

enum class HeadKind { CausalLM, SequenceClassification };

// A decoder with a head: `lm_head` [vocab, hidden] for language modelling, or
// `score` [num_labels, hidden] for reward and value models.
class LanguageModelImpl : public torch::nn::Module {
 public:
  LanguageModelImpl(const ModelConfig& c, HeadKind head);
  // Final hidden states [B, T, hidden].
  torch::Tensor hidden_states(const Batch& batch, KVCache* cache = nullptr);
  // Head applied to every position: logits [B, T, vocab] (soft-capped where
  // the config says so) or scores [B, T, labels].
  torch::Tensor head(const torch::Tensor& hidden);
  torch::Tensor forward(const Batch& batch, KVCache* cache = nullptr) { return head(hidden_states(batch, cache)); }
  // The weight the head multiplies by (the embedding when tied). Under
  // sharding it holds values only inside with_head.
  torch::Tensor head_weight() const;
  // Runs `compute`, which reads the head weight from `input` (hidden
  // states), and returns its outputs; under sharding, through
  // ShardingHooks::head.
  std::vector<torch::Tensor> with_head(const torch::Tensor& input,
                                       const std::function<std::vector<torch::Tensor>()>& compute);

  // Installs (or, with null, removes) the hooks of a strategy that splits
  // this model's parameters across ranks; the embedding, every layer and the
  // head then run through them.
  void set_sharding_hooks(std::shared_ptr<ShardingHooks> hooks) { model->set_sharding_hooks(std::move(hooks)); }
  // Installs (or removes) sequence parallelism: forwards without a KV cache
  // then split their rows over its ranks (see SequenceParallel); the hidden
  // states come back whole on every rank.
  void set_sequence_parallel(std::shared_ptr<SequenceParallel> sp) { model->set_sequence_parallel(std::move(sp)); }

  const ModelConfig& config() const { return config_; }
  HeadKind head_kind() const { return head_kind_; }

  // Casts left for placement (load_parameters with defer_casts): such a
  // parameter still views its checkpoint in the checkpoint's dtype and takes
  // `placed_dtype` when placed. A model split over ranks converts unit by
  // unit as it is split, so no rank holds the whole model converted on its
  // host; a model placed whole calls apply_deferred_casts first.
  torch::Dtype placed_dtype(const torch::Tensor& param) const;
  void defer_cast(const torch::Tensor& param, torch::Dtype dtype) { deferred_[param.unsafeGetTensorImpl()] = dtype; }
  void mark_placed(const torch::Tensor& param) { deferred_.erase(param.unsafeGetTensorImpl()); }
  void apply_deferred_casts();
  size_t deferred_casts() const { return deferred_.size(); }

  DecoderModel model{nullptr};
  Linear lm_head{nullptr};  // CausalLM, untied
  Linear score{nullptr};    // SequenceClassification

 private:
  ModelConfig config_;
  HeadKind head_kind_;
  std::unordered_map<const c10::TensorImpl*, torch::Dtype> deferred_;
};
TORCH_MODULE(LanguageModel);

// Scores of a sequence-classification head pooled at the last non-pad token
// of each row, found from input_ids != pad_token_id as transformers does (the
// rightmost such token, so left and right padding both work).
torch::Tensor pool_last_non_pad(const torch::Tensor& scores, const torch::Tensor& input_ids,
                                std::optional<int64_t> pad_token_id);

// The parameter names a checkpoint must hold for this model (tied heads omit
// lm_head.weight).
std::vector<std::string> checkpoint_names(LanguageModelImpl& m);

// Fills the model's parameters from `get` (name -> tensor or nullopt), checking
// that every tensor exists and has the right shape; converts to `dtype`, or
// with `defer_casts` leaves each conversion to placement (see
// LanguageModelImpl::placed_dtype). Errors name `source` and the tensor.
using TensorSource = std::function<std::optional<torch::Tensor>(const std::string& name)>;
void load_parameters(LanguageModelImpl& m, const TensorSource& get, const std::vector<std::string>& available,
                     const std::string& source, torch::Dtype dtype, bool defer_casts = false);

// Sets every dropout probability in `m` to 0, as TRL's disable_dropout
// does for the policy and the reference. The decoder's own layers have no
// dropout (attention runs with p = 0), so what this turns off is LoRA's; an
// adapter saved afterwards still records its lora_dropout, as PEFT's does.
void disable_dropout(torch::nn::Module& m);

}  // namespace trlx::model

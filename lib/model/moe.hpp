#pragma once
// Mixture-of-experts blocks (Qwen3-MoE, Mixtral, gpt-oss) with Hugging
// Face's parameter names as transformers 5 holds them in memory:
//   mlp.gate.weight          [E, H]      the router
//   mlp.experts.gate_up_proj [E, 2I, H]  each expert's gate rows, then its up rows
//   mlp.experts.down_proj    [E, H, I]
// and gpt-oss's: mlp.router.weight [E, H] and .bias [E];
// mlp.experts.gate_up_proj [E, H, 2I] (gate and up columns interleaved) with
// gate_up_proj_bias [E, 2I], down_proj [E, I, H] with down_proj_bias [E, H].
// The experts run by groups: tokens are sorted by their chosen experts and
// each expert multiplies its own rows once (one grouped matrix multiply for
// all experts where LibTorch has one), forward and backward; nothing is
// computed for an expert a token did not choose.
//
// Checkpoints in the published per-expert layout (Qwen3-MoE's
// mlp.experts.e.{gate,up,down}_proj.weight, Mixtral's
// block_sparse_moe.experts.e.w1/w3/w2.weight and block_sparse_moe.gate) are
// read into this layout and written back in it, so that every version of
// transformers (and vLLM) loads what trlx saves.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/model_config.hpp"

namespace trlx::model {

// The load-balancing loss of the training forwards between begin() and
// end(), as transformers' load_balancing_loss_func pools it over every
// sparse layer and real token:
//   aux = E * sum_e f_e * P_e,  f_e = C_e / D,  P_e = S_e / D
// with C_e the (mask-weighted) count of rows that chose e, S_e the sum of
// their router probabilities of e, D the rows summed over the layers. Only
// P carries a gradient, d aux / d p[r, e] = E * C_e * m_r / D^2, which is
// known once every layer has routed; so instead of keeping a graph from
// each layer's probabilities to the loss, each block passes its
// probabilities through a tap whose backward adds that gradient times the
// weight the loss gives aux (set_weight). The same tap serves a block that
// gradient checkpointing recomputes in the backward (no second count).
class RouterBalance {
 public:
  // Starts collecting the routing of the forwards with gradients that follow.
  void begin();
  // Stops collecting; returns aux (a detached scalar in the probabilities' dtype on the
  // device), undefined when no block routed.
  torch::Tensor end();
  // d(training loss)/d(aux) for the backward of the forwards collected
  // (the loss scale included); 0 until set.
  void set_weight(double weight);
  // Forgets the collection (no tap from here on).
  void clear();
  bool collecting() const { return collecting_; }
  // Whether blocks tap their probabilities (collecting, or the backward of a collection).
  bool active() const { return active_; }

  // Called by a block with its router logits [N, E], their softmax over
  // all experts (float32; float64 in an fp64 model), the chosen experts
  // [N, k] and the rows' weights [N] (undefined: all 1): counts them when
  // collecting and returns the logits through the tap, whose backward adds
  // d aux / d logits = p * (g - sum_e p_e g_e) per row (g below).
  torch::Tensor route(const torch::Tensor& logits, const torch::Tensor& probs, const torch::Tensor& chosen,
                      const torch::Tensor& rows);

  // d aux / d p per unit of row weight, times the weight: [E] (undefined: nothing).
  torch::Tensor gradient() const { return gradient_; }

 private:
  bool collecting_ = false, active_ = false;
  torch::Tensor counts_, probs_, rows_;  // C [E], S [E], D []
  torch::Tensor per_unit_;              // E * C / D^2
  torch::Tensor gradient_;              // per_unit_ * weight
};

// The rows `x` [M, in] grouped by expert (offsets: int32 [E], the end of
// each expert's rows) times each expert's weight [E, out, in] transposed:
// [M, out]. Differentiable in x and the weights.
torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& offsets);

class RouterImpl : public torch::nn::Module {
 public:
  RouterImpl(int64_t experts, int64_t hidden, bool with_bias, bool with_correction);
  torch::Tensor weight;  // [E, H]
  torch::Tensor bias;    // [E] (gpt-oss)
  // [E] (DeepSeek-V3): added to the scores for choosing only; frozen (a
  // buffer in transformers, kept in checkpoints).
  torch::Tensor e_score_correction_bias;
};
TORCH_MODULE(Router);

// A LoRA adapter on one stacked expert weight [E, out, in] (gpt-oss stores
// it [E, in, out]: the same adapter, its delta transposed there), as PEFT's
// target_parameters puts it: A [r * E, in] (expert e's rows e*r ..
// e*r + r - 1), B [out, r * E] (expert e's columns e, E + e, ...), so that
// expert e's weight is W_e + scale * B_e A_e. Its tensors are registered
// under `infix` + "lora_A.weight" / "lora_B.weight" in the experts module
// (PEFT nests one wrapper per adapted weight: all but the last of the
// experts' adapted weights sit under "base_layer.").
struct ExpertAdapter {
  torch::Tensor A, B;
  double scale = 0.0;
  std::string infix;
  bool defined() const { return A.defined(); }
  // scale * B_e A_e for every expert: [E, out, in].
  torch::Tensor delta(int64_t experts) const;
};

class ExpertsImpl : public torch::nn::Module {
 public:
  explicit ExpertsImpl(const ModelConfig& c);
  // x [N, H]; index [N, k] the chosen experts and weight [N, k] their
  // mixing weights: sum_j weight[:, j] * expert_{index[:, j]}(x), [N, H].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& index, const torch::Tensor& weight);
  torch::Tensor gate_up_proj, down_proj;
  torch::Tensor gate_up_proj_bias, down_proj_bias;  // gpt-oss
  // LoRA on the stacked weights (PEFT's target_parameters); used while
  // lora_enabled.
  ExpertAdapter gate_up_lora, down_lora;
  bool lora_enabled = true;
  int64_t num_experts() const { return experts_; }
  bool interleaved() const { return interleaved_; }

 private:
  int64_t experts_, width_;
  bool interleaved_;
  std::optional<double> limit_;
  double alpha_;
};
TORCH_MODULE(Experts);

class SparseMoeImpl : public torch::nn::Module {
 public:
  SparseMoeImpl(const ModelConfig& c, std::shared_ptr<RouterBalance> balance);
  // x [B, T, H]. `balanced`: a training forward whose routing the model's
  // balance collects (or, recomputed in the backward, taps), with `rows`
  // [B * T] the rows' weights in it (undefined: all 1).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& rows = {}, bool balanced = false);
  Router gate{nullptr};
  Experts experts{nullptr};

 private:
  // DeepSeek-V3's choice: sigmoid scores plus the correction bias, the
  // best topk_group of n_group groups (each scored by its two best), the
  // top k among them.
  torch::Tensor choose_in_groups(const torch::Tensor& scores) const;

  int64_t top_k_;
  bool renormalize_, fp32_weights_, softmax_after_topk_, sigmoid_groups_;
  int64_t groups_, groups_kept_;
  double scaling_;
  double jitter_;
  std::shared_ptr<RouterBalance> balance_;
};
TORCH_MODULE(SparseMoe);

// The checkpoint tensor for parameter `name` of an MoE model from the
// published per-expert layout: the experts stacked (gate and up rows
// concatenated), Mixtral's block_sparse_moe names read for mlp's; gpt-oss's
// MXFP4 blocks and scales dequantized. nullopt when `name` is no expert or
// router parameter. `read` gets the checkpoint
// names used. A missing expert tensor, or one of the wrong shape, is an
// InputError naming `source` and the tensor.
using ExpertTensorSource = std::function<std::optional<torch::Tensor>(const std::string& name)>;
std::optional<torch::Tensor> read_published_experts(const ModelConfig& c, const std::string& name,
                                                    const ExpertTensorSource& get, const std::string& source,
                                                    std::vector<std::string>* read);

// How parameter `name` is written in the published layout: its checkpoint
// names, each with the part of the (whole) parameter it holds and that
// part's shape. Empty: written as it is.
struct PublishedPart {
  std::string name;
  std::function<torch::Tensor(const torch::Tensor&)> take;
  std::vector<int64_t> shape;
};
std::vector<PublishedPart> published_parts(const ModelConfig& c, const std::string& name,
                                           const std::vector<int64_t>& shape);

// MXFP4 weights as published gpt-oss checkpoints pack them: `blocks` [E, R,
// G, 16] uint8, two 4-bit E2M1 codes a byte (the low nibble the even
// column), `scales` [E, R, G] uint8 exponents biased by 127, one per 32
// values; the matrix [E, G * 32, R] (transposed, as the experts use it) in
// float32, exactly.
torch::Tensor dequantize_mxfp4(const torch::Tensor& blocks, const torch::Tensor& scales);

}  // namespace trlx::model

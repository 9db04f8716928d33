#pragma once
// Kahneman-Tversky optimisation: unpaired data, each completion labelled
// desirable or not. The loss pushes desirable completions' log-ratio to the
// reference above a KL estimate and undesirable ones below it; the estimate is
// the policy-to-reference log-ratio of mismatched pairs (each prompt with the
// previous row's completion in its micro-batch), averaged over ranks. Paired
// data (prompt/chosen/rejected) is unpaired first. Data preparation follows
// TRL's KTOTrainer token for token.
#include <map>
#include <string>
#include <vector>

#include "engine/trainer.hpp"
#include "trainers/common.hpp"
#include "trainers/kto_config.hpp"

namespace trlx::trainers {

// One tokenized example. The completion starts where the tokenized prompt
// and prompt+completion diverge.
struct KTOExample {
  std::vector<int64_t> prompt_ids, completion_ids;
  bool label = false;
  size_t source_row = 0;
};

struct KTOSplit {
  std::vector<KTOExample> examples;
  size_t dropped_long_prompts = 0;  // prompt of max_length tokens or more
  size_t unpaired_from = 0;         // paired rows turned into two examples
};

KTOSplit prepare_kto_split(const KTOConfig& config, const text::Tokenizer& tokenizer,
                           const text::ChatTemplate* chat_template, const std::string& split, bool required);

// TRL's warning when desirable and undesirable examples are imbalanced and
// neither weight compensates; returns the message ("" when balanced enough).
std::string kto_class_imbalance_advice(size_t num_desirable, size_t num_undesirable, double desirable_weight,
                                       double undesirable_weight);

class KTOTrainer : public engine::Trainer {
 public:
  KTOTrainer(const KTOConfig& config, std::map<std::string, std::vector<KTOExample>> splits, int64_t pad_id);
  std::string name() const override { return "kto"; }
  RouterAuxLoss router_aux_loss() const override { return RouterAuxLoss::ForMixtures; }
  size_t num_examples(const std::string& split) const override;
  // input_ids / attention_mask / completion_mask [B, T] and label [B]; for the
  // kto loss also KL_input_ids / KL_attention_mask / KL_completion_mask: each
  // prompt with the completion of the row before it in this micro-batch (the
  // first row takes the last row's). Sequences are cut at max_length. Where
  // the split's prompts are long enough to pay (see Sharing), also joint_*:
  // each row packed with its KL row (engine/shared_prefix), and the marker
  // key joint_policy when the policy runs them too.
  engine::TensorMap collate(const std::string& split, const std::vector<size_t>& indices) const override;
  double num_items(const engine::TensorMap& batch) const override;  // examples
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;

 private:
  // Which forwards run a row packed with its KL row, decided per split from
  // its mean prompt and completion lengths, so that every rank (each with
  // its own rows) runs the same number of forwards, as strategies that
  // gather parameters per forward need. The reference packs when that saves
  // work; the policy (whose KL rows then go through the backward too) only
  // when the prompt saved outweighs that.
  struct Sharing {
    bool reference = false, policy = false;
  };
  KTOConfig config_;
  std::map<std::string, std::vector<KTOExample>> splits_;
  int64_t pad_id_;
  std::map<std::string, Sharing> sharing_;
};

// The train split of a KTO run, prepared as training sees it, with TRL's
// warning when its classes are imbalanced (also what `trlx preview kto` shows).
KTOSplit prepare_kto_train_split(const KTOConfig& config, const TextInputs& text);

int run_kto(const KTOConfig& config);

}  // namespace trlx::trainers

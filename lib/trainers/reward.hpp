#pragma once
// Reward modelling: a sequence-classification model scores the chosen and the
// rejected text of each pair (one concatenated forward, chosen rows first) at
// its last non-pad token, and learns with the Bradley-Terry loss
// -log sigmoid(r_chosen - r_rejected - margin). Data preparation follows TRL's
// RewardTrainer token for token.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/trainer.hpp"
#include "trainers/common.hpp"
#include "trainers/reward_config.hpp"

namespace trlx::trainers {

// One tokenized pair: the full chosen and rejected sequences (prompt included).
struct RewardExample {
  std::vector<int64_t> chosen_ids, rejected_ids;
  std::optional<double> margin;
  size_t source_row = 0;
};

struct RewardSplit {
  std::vector<RewardExample> examples;
  size_t dropped_long = 0;  // pairs with a side longer than max_length
};

// Reads and tokenizes one split as TRL does: EOS appended to plain-text chosen
// and rejected that lack it, the prompt (if any) prepended, conversations
// rendered through the chat template, and pairs with a side longer than
// max_length dropped and counted. Empty chosen or rejected texts are input
// errors (dropped and counted with skip_bad_rows).
RewardSplit prepare_reward_split(const RewardConfig& config, const text::Tokenizer& tokenizer,
                                 const text::ChatTemplate* chat_template, const std::string& split, bool required);

class RewardTrainer : public engine::Trainer {
 public:
  RewardTrainer(const RewardConfig& config, std::map<std::string, std::vector<RewardExample>> splits, int64_t pad_id);
  std::string name() const override { return "reward"; }
  size_t num_examples(const std::string& split) const override;
  // input_ids / attention_mask [2B, T] (chosen rows, then rejected), and
  // margin [B] when the data has one.
  engine::TensorMap collate(const std::string& split, const std::vector<size_t>& indices) const override;
  double num_items(const engine::TensorMap& batch) const override;  // pairs
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;

  // The rewards [2B] of a collated batch (chosen rows, then rejected).
  torch::Tensor rewards(engine::Engine& engine, const engine::TensorMap& batch) const;

 private:
  RewardConfig config_;
  std::map<std::string, std::vector<RewardExample>> splits_;
  int64_t pad_id_;
};

int run_reward(const RewardConfig& config);

}  // namespace trlx::trainers

#pragma once
// Reference-free preference trainers: CPO (a preference term on the policy's
// own log-probs plus an NLL term on the chosen completions) and ORPO (NLL
// plus an odds-ratio term). They read the same prompt/chosen/rejected data as
// DPO, but tokenize it the way TRL's CPOTrainer and ORPOTrainer do: each
// completion after its own prompt (the two may differ in the last prompt
// token when it merges with the completion), BOS prepended and the EOS id
// appended when missing, and completions cut to fit max_length.
#include <map>
#include <string>
#include <vector>

#include "engine/trainer.hpp"
#include "trainers/cpo_config.hpp"
#include "trainers/dpo.hpp"
#include "trainers/orpo_config.hpp"

namespace trlx::trainers {

struct SidedPair {
  std::vector<int64_t> chosen, rejected;  // prompt + completion
  size_t chosen_prompt_len = 0, rejected_prompt_len = 0;
  size_t source_row = 0;
  std::string where;
};

struct SidedSplit {
  std::vector<SidedPair> pairs;
  std::vector<std::string> files;
};

SidedSplit prepare_sided_preference_split(const PreferenceDataOptions& options, const text::Tokenizer& tokenizer,
                                          const text::ChatTemplate* chat_template, const std::string& split,
                                          bool required);

// input_ids / attention_mask / completion_mask [2B, T], chosen rows first.
// How cpo and orpo read their data (the config's dataset, max_length, threads).
PreferenceDataOptions reference_free_data_options(const config::TrainingConfig& config, const std::string& trainer);

engine::TensorMap collate_sided_pairs(const std::vector<SidedPair>& pairs, const std::vector<size_t>& indices,
                                      int64_t pad_id);

class ReferenceFreeTrainer : public engine::Trainer {
 public:
  enum class Kind { CPO, ORPO };
  ReferenceFreeTrainer(Kind kind, const CPOConfig* cpo, const ORPOConfig* orpo,
                       std::map<std::string, std::vector<SidedPair>> splits, int64_t pad_id);
  std::string name() const override { return kind_ == Kind::CPO ? "cpo" : "orpo"; }
  RouterAuxLoss router_aux_loss() const override { return RouterAuxLoss::WhenConfigAsks; }
  size_t num_examples(const std::string& split) const override;
  engine::TensorMap collate(const std::string& split, const std::vector<size_t>& indices) const override;
  double num_items(const engine::TensorMap& batch) const override;
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;
  const engine::MetricSums& last_metrics() const { return last_metrics_; }

 private:
  Kind kind_;
  CPOConfig cpo_;
  ORPOConfig orpo_;
  std::map<std::string, std::vector<SidedPair>> splits_;
  int64_t pad_id_;
  engine::MetricSums last_metrics_;
};

int run_cpo(const CPOConfig& config);
int run_orpo(const ORPOConfig& config);

}  // namespace trlx::trainers

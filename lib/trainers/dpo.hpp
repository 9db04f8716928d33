#pragma once
// Direct preference optimisation and its loss family. A pair is a prompt with
// a chosen and a rejected completion; both run through the model in one
// concatenated forward (chosen rows, then rejected rows) and the loss compares
// their log-prob sums under the policy and the reference. Data preparation
// follows TRL's DPOTrainer token for token.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/trainer.hpp"
#include "trainers/common.hpp"
#include "trainers/dpo_config.hpp"

namespace trlx::trainers {

// One tokenized pair. The prompt is where prompt and prompt+completion first
// diverge (over both completions), so a token merging across the boundary
// belongs to the completions.
struct PreferenceExample {
  std::vector<int64_t> prompt_ids, chosen_ids, rejected_ids;
  size_t source_row = 0;
  std::string where;  // file:line
};

struct PreferenceSplit {
  std::vector<PreferenceExample> examples;
  std::vector<std::string> files;  // the data files read
  size_t dropped_long_prompts = 0;
};

// What the preference trainers (dpo, cpo, orpo) share about their data.
struct PreferenceDataOptions {
  std::string trainer = "dpo";
  std::optional<std::string> dataset_name;
  bool skip_bad_rows = false;
  std::optional<int64_t> max_length;
  std::string truncation_mode = "keep_start";
  std::optional<int64_t> dataset_num_proc;  // threads that tokenize; null: one
};

// Reads and tokenizes one split as TRL does: EOS appended to plain-text
// completions that lack it, conversations rendered through the chat template
// (the prompt with the generation prompt), and with keep_start truncation
// pairs whose prompt alone reaches max_length dropped and counted.
PreferenceSplit prepare_preference_split(const PreferenceDataOptions& options, const text::Tokenizer& tokenizer,
                                         const text::ChatTemplate* chat_template, const std::string& split,
                                         bool required);

// input_ids / attention_mask / completion_mask [2B, T] (chosen rows, then
// rejected), each sequence truncated to max_length as TRL's collator does.
engine::TensorMap collate_pairs(const std::vector<PreferenceExample>& examples, const std::vector<size_t>& indices,
                                int64_t pad_id, std::optional<int64_t> max_length, const std::string& truncation_mode);

// Reference log-probs computed once (precompute_ref_log_probs), per example.
struct RefLogps {
  std::vector<double> chosen, rejected;            // sums (shared part with ld_alpha)
  std::vector<double> chosen_tail, rejected_tail;  // ld_alpha only
};

class DPOTrainer : public engine::Trainer {
 public:
  DPOTrainer(const DPOConfig& config, std::map<std::string, std::vector<PreferenceExample>> splits, int64_t pad_id);
  std::string name() const override { return "dpo"; }
  RouterAuxLoss router_aux_loss() const override { return RouterAuxLoss::ForMixtures; }
  size_t num_examples(const std::string& split) const override;
  engine::TensorMap collate(const std::string& split, const std::vector<size_t>& indices) const override;
  double num_items(const engine::TensorMap& batch) const override;
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;

  // precompute_ref_log_probs: the log-probs of `role` (the reference, or the
  // policy before training when that is the reference) for every pair of
  // `split`, through the engine's reference cache (engine/reference_cache.hpp);
  // `reference_key` says what the reference is made of.
  void precompute_reference(engine::Engine& engine, const std::string& split, const std::vector<std::string>& data_files,
                            const std::string& reference_key, engine::Role role = engine::Role::Reference);
  bool has_precomputed(const std::string& split) const { return ref_.count(split) != 0; }
  const RefLogps& precomputed(const std::string& split) const { return ref_.at(split); }

  // The metrics of the last loss() call (for tests comparing step by step).
  const engine::MetricSums& last_metrics() const { return last_metrics_; }

 private:
  // collate_pairs with the packed rows that run each pair's prompt once.
  engine::TensorMap collate_shared_pairs(const std::vector<PreferenceExample>& examples,
                                         const std::vector<size_t>& indices) const;
  DPOConfig config_;
  std::map<std::string, std::vector<PreferenceExample>> splits_;
  std::map<std::string, RefLogps> ref_;
  int64_t pad_id_;
  engine::MetricSums last_metrics_;
};

// One split of a DPO run's dataset, prepared as training sees it (also what
// `trlx preview dpo` shows).
PreferenceSplit prepare_dpo_split(const DPOConfig& config, const TextInputs& text, const std::string& split);

int run_dpo(const DPOConfig& config);

}  // namespace trlx::trainers

#pragma once
// Reward modelling: a sequence-classification model scores the chosen and the
// rejected text of each pair (one concatenated forward, chosen rows first) at
// its last non-pad token, and learns with the Bradley-Terry loss
// -log sigmoid(r_chosen - r_rejected - margin). Data preparation follows TRL's
// RewardTrainer token for token.
//
// Also home of the small text helpers the reward and KTO trainers share
// (tokenizer + chat template loading, rendering a conversation to ids).
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/registry.hpp"
#include "trainers/reward_config.hpp"

namespace trlx::trainers {

// The model directory's tokenizer and the chat template to use:
// `chat_template_path` (a Jinja file or a tokenizer directory) when set, else
// the tokenizer's own (none when it has none).
std::pair<text::Tokenizer, std::optional<text::ChatTemplate>> load_tokenizer_and_template(
    const std::filesystem::path& model_dir, const std::optional<std::string>& chat_template_path);

// A conversation rendered through the chat template and tokenized without
// special tokens (the template writes them), as transformers'
// apply_chat_template(tokenize=True) does.
std::vector<int64_t> render_conversation_ids(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template,
                                             const nlohmann::ordered_json& messages, bool add_generation_prompt);

// The padding id a trainer uses: `pad_token` when set, else the tokenizer's
// pad, else its eos.
int64_t resolve_pad_id(const text::Tokenizer& tokenizer, const std::optional<std::string>& pad_token,
                       const std::string& trainer);

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

int run_reward(const RunRequest& request);

}  // namespace trlx::trainers

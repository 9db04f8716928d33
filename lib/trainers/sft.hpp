#pragma once
// Supervised fine-tuning: next-token cross-entropy on text, prompt-completion
// or conversations, with the loss on completions or assistant turns only when
// asked. Data preparation follows TRL's SFTTrainer token for token.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/trainer.hpp"
#include "trainers/common.hpp"
#include "trainers/sft_config.hpp"

namespace trlx::trainers {

// One tokenized example: ids and which tokens are targets of the loss.
struct SFTExample {
  std::vector<int64_t> ids;
  std::vector<uint8_t> loss_mask;  // 1 where predicting this token counts
  size_t source_row = 0;
  bool truncated = false;
  // Packed examples: position and document of each token (empty otherwise).
  std::vector<int64_t> positions, documents;
};

// Best-fit-decreasing packing into sequences of at most `max_length` tokens:
// longest examples first, each into the fullest sequence it still fits.
// Positions restart at each document and the first token of each document is
// no target, so the packed loss is the unpacked loss.
std::vector<SFTExample> pack_bfd(std::vector<SFTExample> examples, int64_t max_length);

// The examples in a random order that depends only on `seed` (shuffle_dataset).
std::vector<SFTExample> shuffled(std::vector<SFTExample> examples, int64_t seed);

// Tokenizes the rows of one split as TRL does (see sft.cpp).
std::vector<SFTExample> prepare_sft_split(const SFTConfig& config, const text::Tokenizer& tokenizer,
                                          const text::ChatTemplate* chat_template, const std::string& split,
                                          bool required);

class SFTTrainer : public engine::Trainer {
 public:
  SFTTrainer(const SFTConfig& config, std::map<std::string, std::vector<SFTExample>> splits, int64_t pad_id);
  std::string name() const override { return "sft"; }
  RouterAuxLoss router_aux_loss() const override { return RouterAuxLoss::ForMixtures; }
  size_t num_examples(const std::string& split) const override;
  engine::TensorMap collate(const std::string& split, const std::vector<size_t>& indices) const override;
  double num_items(const engine::TensorMap& batch) const override;
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;

 private:
  static engine::TensorMap collate_padding_free(const std::vector<SFTExample>& examples, const std::vector<size_t>& indices);

  SFTConfig config_;
  std::map<std::string, std::vector<SFTExample>> splits_;
  int64_t pad_id_;
};

int run_sft(const SFTConfig& config);

}  // namespace trlx::trainers

#pragma once
#include "config/training.hpp"

namespace trlx::trainers {

struct SFTConfig : config::TrainingConfig {
  std::string dataset_text_field;
  bool packing = false;
  std::string packing_strategy;
  bool padding_free = false;
  std::optional<bool> completion_only_loss;
  bool assistant_only_loss = false;
  std::string loss_type;
  std::optional<std::string> eos_token, pad_token;
  std::optional<std::string> chat_template_path;
  bool shuffle_dataset = false;
  std::optional<bool> eval_packing;
  std::string truncation_mode;
  std::optional<std::string> dataset_kwargs;
};

const config::Schema& sft_schema();

}  // namespace trlx::trainers

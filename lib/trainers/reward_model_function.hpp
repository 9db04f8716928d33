#pragma once
// A reward model as a reward function: a sequence-classification model (one
// `trlx reward` saved, or any Hugging Face ...ForSequenceClassification) with
// its own tokenizer and chat template scores prompt + completion at the last
// non-pad token, as TRL's online trainers score with one.
#include <filesystem>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "rewards/reward_function.hpp"

namespace trlx::trainers {

// Loads the model (whole, on `device`, weights in `dtype`) and its tokenizer.
// InputError when the directory is not a one-label sequence classifier, or
// when the prompts are `conversational` and it has no chat template.
std::unique_ptr<rewards::RewardFunction> make_reward_model_function(const std::filesystem::path& dir,
                                                                   torch::Device device, const std::string& dtype,
                                                                   bool conversational);

}  // namespace trlx::trainers

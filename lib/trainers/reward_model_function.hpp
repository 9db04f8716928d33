#pragma once
// A reward model as a reward function: a sequence-classification model (one
// `trlx reward` saved, or any Hugging Face ...ForSequenceClassification) with
// its own tokenizer and chat template scores prompt + completion at the last
// non-pad token, as TRL's online trainers score with one.
#include <filesystem>
#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "model/decoder.hpp"
#include "rewards/reward_function.hpp"

namespace trlx::trainers {

// A score model (a reward or value model): a sequence classifier with one
// label; `field` names where its directory came from, for errors. A reward
// model never trains, so one without a score head (`score.weight`) is
// refused; a value model (`trains`) may start from a new head, drawn from
// `seed`, the same in every run, without moving the run's own random
// stream. With `defer_casts` (a model the engine places) weights stored in
// another dtype stay views of the checkpoint until placed.
model::LanguageModel load_score_model(const std::string& dir, const std::string& dtype, const std::string& field,
                                      int64_t seed, bool defer_casts, bool trains = false);

// Loads the model (whole, on `device`, weights in `dtype`) and its
// tokenizer. InputError when the directory is not a one-label sequence
// classifier with its score head, or when the prompts are `conversational`
// and it has no chat template.
std::unique_ptr<rewards::RewardFunction> make_reward_model_function(const std::filesystem::path& dir,
                                                                   c10::Device device, const std::string& dtype,
                                                                   bool conversational, int64_t seed);

}  // namespace trlx::trainers

#pragma once
// `trlx preview <trainer>`: what a trainer will train on, read through the
// trainer's own data preparation, with the tokens that carry loss marked
// (highlighted on a terminal, [bracketed] otherwise, or JSON lines).
#include <cstddef>

#include "trainers/dpo_config.hpp"
#include "trainers/cpo_config.hpp"
#include "trainers/kto_config.hpp"
#include "trainers/orpo_config.hpp"
#include "trainers/reward_config.hpp"
#include "trainers/sft_config.hpp"

namespace trlx::trainers {

// Each example's tokens with loss marked, and warnings (no EOS, truncation).
int preview_sft(const SFTConfig& config, size_t num_examples, bool json);
// The shared prompt, then chosen and rejected with the tokens that carry loss marked.
int preview_dpo(const DPOConfig& config, size_t num_examples, bool json);
// Prompt, completion with its loss tokens marked, label.
int preview_kto(const KTOConfig& config, size_t num_examples, bool json);
// Chosen and rejected, each prompt + completion with the completion (its
// loss tokens) marked.
int preview_cpo(const CPOConfig& config, size_t num_examples, bool json);
int preview_orpo(const ORPOConfig& config, size_t num_examples, bool json);
// Chosen and rejected sequences, with the token whose score the loss reads
// (the last) marked, and the margin.
int preview_reward(const RewardConfig& config, size_t num_examples, bool json);

}  // namespace trlx::trainers

// The `trlx rloo` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/rloo_config.hpp"

namespace trlx::trainers {

const config::Schema& rloo_schema() {
  static const config::Schema schema = [] {
    config::Schema s("rloo", "REINFORCE leave-one-out on prompts, rewarded online");
    config::SchemaBuilder<RLOOConfig> b(s);
    add_training_fields(b, {.learning_rate = 1e-6,
                            .gradient_checkpointing = true,
                            .disable_dropout = false,
                            .max_length = std::nullopt,
                            .remove_unused_columns = false});
    add_pad_to_multiple_of_field(b);
    add_router_aux_loss_coef_field(b);
    add_online_fields(b, {.num_generations = 2, .beta = 0.05});
    add_vllm_fields(b, true, false, 0.3);
    using C = RLOOConfig;
    b.group("rloo");
    b.field(&C::normalize_advantages, "normalize_advantages", false, "Normalise advantages to zero mean, unit variance.");
    b.field(&C::reward_clip_range, "reward_clip_range", std::nullopt, "[low, high] the summed rewards are clipped to.");
    // Names from older releases, still found in users' scripts.
    b.alias("rloo_k", "num_generations");
    b.alias("kl_coef", "beta");
    b.alias("cliprange", "epsilon");
    b.alias("num_ppo_epochs", "num_iterations");
    b.alias("num_mini_batches", "steps_per_generation");
    b.rule([](const C& c, config::Conflicts& out) {
      if (c.reward_clip_range && (c.reward_clip_range->size() != 2 || (*c.reward_clip_range)[0] > (*c.reward_clip_range)[1]))
        out.invalid("reward_clip_range", "give two values, [low, high], low <= high");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

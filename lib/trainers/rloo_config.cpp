#include "trainers/rloo_config.hpp"

namespace trlx::trainers {

const config::Schema& rloo_schema() {
  static const config::Schema schema = [] {
    config::Schema s("rloo", "REINFORCE leave-one-out on prompts, rewarded online");
    config::SchemaBuilder<RLOOConfig> b(s);
    add_training_fields(b, {.learning_rate = 1e-6, .gradient_checkpointing = true, .disable_dropout = false});
    using C = RLOOConfig;
    b.group("generation");
    b.field(&C::num_generations, "num_generations", 2, "Completions sampled per prompt.").min(2);
    b.field(&C::generation_batch_size, "generation_batch_size", std::nullopt, "Completions generated per generation round (per process).").min(1);
    b.field(&C::steps_per_generation, "steps_per_generation", std::nullopt, "Optimizer steps per generation round (default gradient_accumulation_steps).").min(1);
    b.field(&C::max_completion_length, "max_completion_length", 512, "Most tokens generated per completion.").min(1);
    b.field(&C::temperature, "temperature", 1.0, "Sampling temperature.").min(0, true);
    b.field(&C::top_p, "top_p", 1.0, "Nucleus sampling mass.").min(0, true).max(1);
    b.field(&C::top_k, "top_k", 0, "Sample among the k most likely tokens; 0 disables.").min(0);
    b.field(&C::min_p, "min_p", std::nullopt, "Drop tokens below min_p times the top probability.").min(0).max(1);
    b.field(&C::repetition_penalty, "repetition_penalty", 1.0, "Penalty on tokens already present.").min(0, true);
    b.field(&C::ds3_gather_for_generation, "ds3_gather_for_generation", true,
            "Under ZeRO-3/FSDP: gather all weights once per generation round (fast, needs the whole model per "
            "process) or each layer for each forward (fits anything, slow).");
    b.field(&C::ds3_gather_for_generation_budget_mb, "ds3_gather_for_generation_budget_mb", 0.0,
            "With ds3_gather_for_generation false: MiB of weights kept gathered for the whole generation round "
            "(the first layers that fit); the rest are gathered per forward. 0: none.")
        .min(0);
    b.group("rloo");
    b.field(&C::beta, "beta", 0.05, "KL coefficient towards the reference model.").min(0);
    b.field(&C::epsilon, "epsilon", 0.2, "Clipping range of the importance ratio.").min(0);
    b.field(&C::epsilon_high, "epsilon_high", std::nullopt, "Upper clipping range (defaults to epsilon).").min(0);
    b.field(&C::num_iterations, "num_iterations", 1, "Optimisation passes over each generated batch.").min(1);
    b.field(&C::normalize_advantages, "normalize_advantages", false, "Normalise advantages to zero mean, unit variance.");
    b.field(&C::mask_truncated_completions, "mask_truncated_completions", false, "Exclude completions cut at max_completion_length from the loss.");
    b.field(&C::reward_weights, "reward_weights", std::nullopt, "Weight of each reward function (default 1 each).");
    // Names from older releases, still found in users' scripts.
    b.alias("rloo_k", "num_generations");
    b.alias("kl_coef", "beta");
    b.alias("cliprange", "epsilon");
    b.alias("num_ppo_epochs", "num_iterations");
    b.alias("num_mini_batches", "steps_per_generation");
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

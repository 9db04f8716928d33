// The `trlx ppo` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/ppo_config.hpp"

namespace trlx::trainers {

const config::Schema& ppo_schema() {
  static const config::Schema schema = [] {
    config::Schema s("ppo", "PPO: responses scored by a reward model, trained with a value model (GAE)");
    config::SchemaBuilder<PPOConfig> b(s);
    add_training_fields(b, {.learning_rate = 5e-5,
                            .gradient_checkpointing = true,
                            .disable_dropout = true,
                            .max_length = std::nullopt});
    using C = PPOConfig;
    b.group("models");
    b.field(&C::reward_model, "reward_model_path", "",
            "The reward model directory (one `trlx reward` saved, or any ...ForSequenceClassification with one label), "
            "sharing the policy's tokenizer: it scores each response's token ids.")
        .bound_to("reward_model")
        .hub_model();
    b.field(&C::value_model_path, "value_model_path", std::nullopt,
            "The value model's starting weights (a one-label sequence-classification model); null starts it from the "
            "reward model. It trains with the policy and is saved in value_model/.")
        .hub_model();
    b.field(&C::ref_model, "ref_model", std::nullopt,
            "Reference model directory; null uses a copy of the starting policy, or the base with adapters off under "
            "use_peft.")
        .hub_model();
    b.field(&C::sft_model_path, "sft_model_path", std::nullopt, "TRL's scripts' policy path.")
        .not_built("the policy is model_name_or_path; remove sft_model_path");
    b.field(&C::model_adapter_name, "model_adapter_name", std::nullopt, "Train one of several PEFT adapters.")
        .not_built("a policy holds one adapter in trlx");
    b.field(&C::ref_adapter_name, "ref_adapter_name", std::nullopt, "Use a second PEFT adapter as the reference.")
        .not_built("the reference is ref_model, a copy, or the base with adapters off");
    b.field(&C::exp_name, "exp_name", std::nullopt, "TRL's experiment name (its tracker's run names).")
        .not_built("trlx writes metrics.jsonl and TensorBoard events under output_dir; name runs by output_dir");
    b.group("generation");
    b.field(&C::max_completion_length, "response_length", 53, "Tokens sampled per response.")
        .min(1)
        .bound_to("max_completion_length");
    b.field(&C::temperature, "temperature", 0.7, "Sampling temperature (the log-probs use it too).").min(0, true);
    b.field(&C::stop_token, "stop_token", std::nullopt,
            "\"eos\": a response ends at the tokenizer's eos token (what follows it is padding); null: responses "
            "run to response_length.")
        .one_of({"eos"});
    b.field(&C::stop_token_id, "stop_token_id", std::nullopt, "The token id a response ends at (as stop_token).")
        .min(0);
    b.field(&C::missing_eos_penalty, "missing_eos_penalty", std::nullopt,
            "Subtracted from the score of a response without the eos token.")
        .min(0);
    b.field(&C::local_rollout_forward_batch_size, "local_rollout_forward_batch_size", 64,
            "Rows per forward while a rollout batch is scored (memory, not results).")
        .min(1);
    b.field(&C::shuffle_dataset, "shuffle_dataset", true, "Visit prompts in a seeded random order (else file order).");
    add_generation_placement_fields(b);
    b.field(&C::num_sample_generations, "num_sample_generations", 0,
            "Print sample completions this many times during training.")
        .not_built("sample completions are not printed; inspect a checkpoint with `trlx generate`");
    b.group("ppo");
    b.field(&C::total_episodes, "total_episodes", std::nullopt,
            "Responses to train on over all processes; null: num_train_epochs x the prompts. A step is one "
            "rollout batch (per_device_train_batch_size x gradient_accumulation_steps x processes responses).")
        .min(1);
    b.field(&C::num_ppo_epochs, "num_ppo_epochs", 4, "Passes over each rollout batch.").min(1);
    b.field(&C::num_mini_batches, "num_mini_batches", 1,
            "Optimizer updates per pass: the rollout batch is split into this many mini-batches.")
        .min(1);
    b.field(&C::whiten_rewards, "whiten_rewards", false, "Whiten the per-token rewards (scale only, mean kept).");
    b.field(&C::kl_coef, "kl_coef", 0.05, "Weight of the per-token KL penalty in the reward.").min(0);
    b.field(&C::kl_estimator, "kl_estimator", "k1", "k1 (log-ratio) or k3 (lower variance) KL estimate.")
        .one_of({"k1", "k3"});
    b.field(&C::cliprange, "cliprange", 0.2, "Clip range of the policy's probability ratio.").min(0);
    b.field(&C::vf_coef, "vf_coef", 0.1, "Weight of the value loss.").min(0);
    b.field(&C::cliprange_value, "cliprange_value", 0.2, "Clip range of the value predictions.").min(0);
    b.field(&C::gamma, "gamma", 1.0, "Discount factor.").min(0).max(1);
    b.field(&C::lam, "lam", 0.95, "GAE lambda.").min(0).max(1);
    // Derived by TRL from the batch sizes; refused when given.
    const std::string derived =
        "it is derived from per_device_train_batch_size, gradient_accumulation_steps, num_mini_batches and the "
        "processes; set those instead";
    const std::string help = "Derived from the batch sizes and processes.";
    b.field(&C::world_size, "world_size", std::nullopt, help).not_built(derived);
    b.field(&C::num_total_batches, "num_total_batches", std::nullopt, help).not_built(derived);
    b.field(&C::micro_batch_size, "micro_batch_size", std::nullopt, help).not_built(derived);
    b.field(&C::local_batch_size, "local_batch_size", std::nullopt, help).not_built(derived);
    b.field(&C::batch_size, "batch_size", std::nullopt, help).not_built(derived);
    b.field(&C::local_mini_batch_size, "local_mini_batch_size", std::nullopt, help).not_built(derived);
    b.field(&C::mini_batch_size, "mini_batch_size", std::nullopt, help).not_built(derived);
    b.rule([](const C& c, config::Conflicts& out) {
      if (c.reward_model.empty())
        out.invalid("reward_model_path", "give the reward model directory (e.g. one `trlx reward --config "
                                         "configs/reward.yaml` saved)");
      if (c.stop_token && c.stop_token_id)
        out.conflict({"stop_token", "stop_token_id"}, "set one of them: both name the token a response ends at");
      if (c.gradient_accumulation_steps % c.num_mini_batches != 0)
        out.conflict({"gradient_accumulation_steps", "num_mini_batches"},
                     fmt::format("each mini-batch holds whole micro-batches: gradient_accumulation_steps ({}) must be "
                                 "a multiple of num_mini_batches ({})",
                                 c.gradient_accumulation_steps, c.num_mini_batches));
      if (c.whiten_rewards && c.rollout_rows() / c.num_mini_batches < 8)
        out.conflict({"whiten_rewards", "per_device_train_batch_size"},
                     fmt::format("whitening needs at least 8 responses per mini-batch on each process (now {})",
                                 c.rollout_rows() / c.num_mini_batches));
      if (c.total_episodes && c.max_steps > 0)
        out.conflict({"total_episodes", "max_steps"}, "set one of them: a step is one rollout batch");
      if (c.max_length)
        out.invalid("max_length", "ppo does not use it: a sequence is its prompt plus response_length tokens");
      if (c.eval_strategy != "no")
        out.invalid("eval_strategy", "evaluation of online trainers is not built yet; set eval_strategy: no");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

// The `trlx reward` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/reward_config.hpp"

namespace trlx::trainers {

const config::Schema& reward_schema() {
  static const config::Schema schema = [] {
    config::Schema s("reward", "Reward model (Bradley-Terry) on chosen/rejected pairs, with an optional margin");
    config::SchemaBuilder<RewardConfig> b(s);
    add_training_fields(b, {.learning_rate = 1e-4,
                            .gradient_checkpointing = true,
                            .disable_dropout = true,
                            .lora_task_type = "SEQ_CLS"});
    add_activation_offloading_field(b);
    add_pad_to_multiple_of_field(b);
    using C = RewardConfig;
    b.group("reward");
    b.field(&C::center_rewards_coefficient, "center_rewards_coefficient", std::nullopt,
            "Weight of a penalty on the squared sum of each pair's rewards, pulling rewards towards zero mean "
            "(0.01 is a usual value); null: none.")
        .min(0);
    b.field(&C::eos_token, "eos_token", std::nullopt,
            "Token appended to plain-text chosen/rejected that lack it (defaults to the tokenizer's eos).");
    b.field(&C::pad_token, "pad_token", std::nullopt,
            "Padding token, also where the score is read (the last non-pad token); defaults to the tokenizer's pad, "
            "else eos.");
    b.field(&C::chat_template_path, "chat_template_path", std::nullopt,
            "A Jinja file (or tokenizer dir) whose chat template replaces the model's.");
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

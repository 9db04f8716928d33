// The `trlx orpo` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/orpo_config.hpp"

namespace trlx::trainers {

const config::Schema& orpo_schema() {
  static const config::Schema schema = [] {
    config::Schema s("orpo", "Odds-ratio preference optimisation (reference-free) on prompt/chosen/rejected data");
    config::SchemaBuilder<ORPOConfig> b(s);
    add_training_fields(b, {.learning_rate = 1e-6, .gradient_checkpointing = true, .disable_dropout = true});
    add_pair_extra_fields(b);
    using C = ORPOConfig;
    b.group("orpo");
    b.field(&C::beta, "beta", 0.1, "Weight of the odds-ratio term (lambda in the paper).").min(0);
    b.field(&C::padding_value, "padding_value", std::nullopt, "Token id used for padding (defaults to the tokenizer's pad id).");
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

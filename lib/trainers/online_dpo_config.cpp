// The `trlx online-dpo` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/online_dpo_config.hpp"

#include <cmath>

namespace trlx::trainers {

const config::Schema& online_dpo_schema() {
  static const config::Schema schema = [] {
    config::Schema s("online-dpo", "Online DPO: two completions per prompt, ranked by rewards, trained with the DPO loss");
    config::SchemaBuilder<OnlineDPOConfig> b(s);
    add_training_fields(b, {.learning_rate = 5e-7,
                            .gradient_checkpointing = true,
                            .disable_dropout = true,
                            .max_length = 512,
                            .remove_unused_columns = false});
    add_sampling_fields(b, 0.9);
    add_vllm_fields(b, false, false, 0.55);
    using C = OnlineDPOConfig;
    b.group("rewards");
    b.field(&C::reward_model_path, "reward_model_path", std::nullopt,
            "A reward model directory (one `trlx reward` saved, or any ...ForSequenceClassification); scored before "
            "the reward_funcs entries. A hub name works too.")
        .hub_model();
    b.field(&C::judge, "judge", std::vector<std::string>{},
            "A program that says which of two completions is better ({command: \"python3 my_judge.py\"}; "
            "docs/reward_programs.md), instead of reward_model_path / reward_funcs.")
        .items_may_be_mappings();
    b.field(&C::missing_eos_penalty, "missing_eos_penalty", std::nullopt,
            "Subtracted from the score of a completion that ends without an eos token.")
        .min(0);
    b.group("generation");
    b.field(&C::max_completion_length, "max_new_tokens", 64, "Most tokens generated per completion.")
        .min(1)
        .bound_to("max_completion_length");
    b.group("online-dpo");
    auto& beta = b.field(&C::betas, "beta", std::vector<double>{0.1},
                         "Strength of the pull towards the reference: one value, or a list with one per epoch (the "
                         "last for later epochs). For ipo, the regularisation tau.")
                     .bound_to("betas");
    // OnlineConfig::beta (whether a reference is loaded, the first round's
    // value) follows the list.
    beta.assign = [](void* obj, const config::Value& v) {
      auto* c = static_cast<C*>(obj);
      c->betas = std::get<std::vector<double>>(v);
      c->beta = c->betas.empty() ? 0.0 : c->betas.front();
    };
    b.field(&C::loss_type, "loss_type", "sigmoid", "sigmoid (DPO) or ipo.").one_of({"sigmoid", "ipo"});
    b.rule([](const C& c, config::Conflicts& out) {
      if (c.betas.empty()) out.invalid("beta", "give a value > 0, or a list of them (one per epoch)");
      for (double v : c.betas)
        if (!(v > 0) || !std::isfinite(v))
          out.invalid("beta", fmt::format("{} is not a finite value > 0 (the loss divides by it or scales by it)", v));
      const bool scored = !c.reward_funcs.empty() || c.reward_model_path;
      if (!scored && c.judge.empty())
        out.conflict({"reward_model_path", "reward_funcs", "judge"},
                     "nothing ranks the completions: set reward_model_path (a reward model directory, such as one "
                     "`trlx reward --config configs/reward.yaml` saved), reward_funcs, or a judge program");
      if (scored && !c.judge.empty())
        out.conflict({"judge", c.reward_model_path ? "reward_model_path" : "reward_funcs"},
                     "a judge ranks the pairs by itself; give either the judge or scores, not both");
      if (c.judge.size() > 1) out.invalid("judge", "give one judge program");
      if (!c.judge.empty() && c.missing_eos_penalty)
        out.conflict({"judge", "missing_eos_penalty"},
                     "missing_eos_penalty lowers scores, and a judge gives none; tell the judge to prefer completions "
                     "that end");
      if (c.max_length && c.max_completion_length >= *c.max_length)
        out.conflict({"max_new_tokens", "max_length"},
                     fmt::format("max_new_tokens ({}) must be below max_length ({}): a sequence longer than max_length "
                                 "loses prompt tokens from the left, and the completion would leave none",
                                 c.max_completion_length, *c.max_length));
      if (!c.max_length) out.invalid("max_length", "give the longest prompt + completion in tokens (TRL's default: 512)");
      if (c.eval_strategy != "no")
        out.invalid("eval_strategy", "evaluation of online-dpo (generating on the test split) is not built yet; set "
                                     "eval_strategy: no (grpo and rloo evaluate)");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

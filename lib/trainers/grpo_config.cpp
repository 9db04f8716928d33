// The `trlx grpo` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/grpo_config.hpp"

namespace trlx::trainers {

const std::vector<std::string>& grpo_loss_types() {
  static const std::vector<std::string> types = {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"};
  return types;
}

const config::Schema& grpo_schema() {
  static const config::Schema schema = [] {
    config::Schema s("grpo", "Group relative policy optimisation: completions sampled online, scored by rewards");
    config::SchemaBuilder<GRPOConfig> b(s);
    add_training_fields(b, {.learning_rate = 1e-6,
                            .gradient_checkpointing = true,
                            .disable_dropout = false,
                            .max_length = std::nullopt,
                            .remove_unused_columns = false});
    add_pad_to_multiple_of_field(b);
    add_router_aux_loss_coef_field(b);
    add_online_fields(b, {.num_generations = 8, .beta = 0.0});
    add_vllm_fields(b, true, true, 0.3);
    using C = GRPOConfig;
    b.field(&C::cast_lm_head_to_fp32, "cast_lm_head_to_fp32", false,
            "Compute the head (policy and reference) in float32.")
        .not_built("the head runs in the weights' dtype and its logits are taken to float32 for the log-probs");
    b.field(&C::log_completions_hub_repo, "log_completions_hub_repo", std::nullopt,
            "Hub dataset repository the logged completions go to.")
        .not_built("log_completions writes output_dir/completions/*.parquet; upload them with `huggingface-cli "
                   "upload <repo> <output_dir>/completions --repo-type dataset`");
    b.group("grpo");
    b.field(&C::loss_type, "loss_type", "dapo",
            "How token losses are aggregated: grpo (per-sequence mean), bnpo (per-batch token mean), dr_grpo "
            "(over batch x max_completion_length), dapo (over the round's tokens), cispo (clipped IS weights), sapo "
            "(soft gate), luspo (sequence sums), vespo (gamma-weighted).")
        .one_of(grpo_loss_types());
    b.field(&C::scale_rewards, "scale_rewards", "group",
            "Divide advantages by the reward std of the group, of the whole batch, or not at all.")
        .one_of({"group", "batch", "none"});
    b.field(&C::importance_sampling_level, "importance_sampling_level", "token",
            "Importance ratios per token, or one per sequence (GSPO).")
        .one_of({"token", "sequence"});
    b.field(&C::multi_objective_aggregation, "multi_objective_aggregation", "sum_then_normalize",
            "Several reward functions: sum them then normalise per group, or normalise each per group then sum.")
        .one_of({"sum_then_normalize", "normalize_then_sum"});
    b.field(&C::delta, "delta", std::nullopt, "Upper bound of the unclipped ratio (two-sided clipping); null: none.")
        .min(1, true);
    b.field(&C::sapo_temperature_neg, "sapo_temperature_neg", 1.05, "sapo: gate temperature for negative advantages.")
        .min(0, true);
    b.field(&C::sapo_temperature_pos, "sapo_temperature_pos", 1.0, "sapo: gate temperature for positive advantages.")
        .min(0, true);
    b.field(&C::vespo_k_pos, "vespo_k_pos", 2.0, "vespo: shape k for non-negative advantages.");
    b.field(&C::vespo_lambda_pos, "vespo_lambda_pos", 3.0, "vespo: rate lambda for non-negative advantages.");
    b.field(&C::vespo_k_neg, "vespo_k_neg", 3.0, "vespo: shape k for negative advantages.");
    b.field(&C::vespo_lambda_neg, "vespo_lambda_neg", 2.0, "vespo: rate lambda for negative advantages.");
    b.field(&C::top_entropy_quantile, "top_entropy_quantile", 1.0,
            "Train only on the tokens whose entropy is in this top fraction (over all processes); 1 keeps all.")
        .min(0).max(1);
    b.field(&C::entropy_coef, "entropy_coef", 0.0, "Weight of an entropy bonus in the loss.").min(0);
    b.field(&C::use_adaptive_entropy, "use_adaptive_entropy", false,
            "Adjust entropy_coef each step towards entropy_target.");
    b.field(&C::entropy_coef_min, "entropy_coef_min", 0.0, "Adaptive entropy: lowest coefficient.").min(0);
    b.field(&C::entropy_coef_max, "entropy_coef_max", 1.0, "Adaptive entropy: highest coefficient.").min(0);
    b.field(&C::entropy_coef_delta, "entropy_coef_delta", 0.005, "Adaptive entropy: change per step.").min(0);
    b.field(&C::entropy_target, "entropy_target", 0.2, "Adaptive entropy: the entropy it steers towards.").min(0);
    b.field(&C::off_policy_mask_threshold, "off_policy_mask_threshold", std::nullopt,
            "Drop negative-advantage sequences whose mean KL from the generating policy exceeds this; null: keep all.")
        .min(0);
    b.field(&C::use_bias_correction_kl, "use_bias_correction_kl", true,
            "Weight the KL term by the importance ratio (beta > 0).");
    b.rule([](const C& c, config::Conflicts& out) {
      // Unusual pairings train as asked, with a word (they are not wrong).
      if (c.loss_type == "luspo" && c.importance_sampling_level != "sequence")
        out.warn("loss_type luspo is meant for importance_sampling_level: sequence (as in its paper)");
      if (c.loss_type == "vespo" && c.importance_sampling_level != "token")
        out.warn("vespo computes sequence weights itself; importance_sampling_level: token is its intended setting");
      if (c.importance_sampling_level == "sequence" &&
          (c.loss_type == "bnpo" || c.loss_type == "dr_grpo" || c.loss_type == "dapo" || c.loss_type == "cispo"))
        out.warn("with importance_sampling_level: sequence, loss_type " + c.loss_type +
                 " sums token terms, weighting each sequence by its length; loss_type grpo gives the per-sequence "
                 "objective");
      if (c.use_adaptive_entropy && c.entropy_coef_min > c.entropy_coef_max)
        out.conflict({"entropy_coef_min", "entropy_coef_max"}, "entropy_coef_min must not exceed entropy_coef_max");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

// The `trlx dpo` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/dpo_config.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace trlx::trainers {

const std::vector<std::string>& dpo_loss_types() {
  static const std::vector<std::string> types = {
      "sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard",
      "aot", "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm"};
  return types;
}

const config::Schema& dpo_schema() {
  static const config::Schema schema = [] {
    config::Schema s("dpo", "Direct preference optimisation on prompt/chosen/rejected data");
    config::SchemaBuilder<DPOConfig> b(s);
    add_training_fields(b, {.learning_rate = 1e-6, .gradient_checkpointing = true, .disable_dropout = true});
    add_activation_offloading_field(b);
    add_pad_to_multiple_of_field(b);
    add_router_aux_loss_coef_field(b);
    using C = DPOConfig;
    b.group("dpo");
    b.field(&C::padding_free, "padding_free", false, "Concatenate each batch into one row instead of padding.")
        .not_built("padding_free is built for sft only; dpo pads each batch to its longest row (same numbers)");
    b.field(&C::truncation_mode, "truncation_mode", "keep_start",
            "Which end of a prompt+completion longer than max_length is kept; keep_start drops pairs whose prompt alone fills it.")
        .one_of({"keep_start", "keep_end"});
    b.field(&C::pad_token, "pad_token", std::nullopt, "Padding token (defaults to the tokenizer's pad, else eos).");
    b.field(&C::beta, "beta", 0.1, "Strength of the implicit KL penalty towards the reference model.").min(0);
    b.field(&C::loss_type, "loss_type", std::vector<std::string>{"sigmoid"},
            "Loss, or a list of losses summed with loss_weights.")
        .one_of(dpo_loss_types());
    b.field(&C::loss_weights, "loss_weights", std::nullopt, "Weight of each loss in loss_type (default 1 each).");
    b.field(&C::label_smoothing, "label_smoothing", 0.0, "Assumed probability that a preference label is flipped (robust, exo_pair, aot, aot_unpaired).")
        .min(0).max(0.5);
    b.field(&C::f_divergence_type, "f_divergence_type", "reverse_kl", "Divergence in the implicit reward.")
        .one_of({"reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"});
    b.field(&C::f_alpha_divergence_coef, "f_alpha_divergence_coef", 0.5, "alpha of alpha_divergence.");
    b.field(&C::ld_alpha, "ld_alpha", std::nullopt, "LD-DPO: weight of the verbose part of longer responses.").min(0).max(1);
    b.field(&C::use_weighting, "use_weighting", false, "WPO-style weighting of pairs by their policy probability.");
    b.field(&C::discopop_tau, "discopop_tau", 0.05, "Temperature of the discopop loss.");
    b.field(&C::ref_model, "ref_model", std::nullopt,
            "Reference model directory or hub name; null uses the starting policy (or the base with adapters off under "
            "use_peft).")
        .hub_model();
    b.field(&C::precompute_ref_log_probs, "precompute_ref_log_probs", false,
            "Compute reference log-probs once before training and cache them on disk.");
    b.field(&C::precompute_ref_batch_size, "precompute_ref_batch_size", std::nullopt, "Batch size of the precompute pass.").min(1);
    b.field(&C::sync_ref_model, "sync_ref_model", false, "TR-DPO: mix the policy into the reference every ref_model_sync_steps.");
    b.field(&C::ref_model_mixup_alpha, "ref_model_mixup_alpha", 0.6, "TR-DPO mixing weight of the policy.").min(0).max(1);
    b.field(&C::ref_model_sync_steps, "ref_model_sync_steps", 512, "TR-DPO: steps between reference updates.").min(1);
    b.rule([](const DPOConfig& c, config::Conflicts& out) {
      if (c.loss_weights && c.loss_weights->size() != c.loss_type.size())
        out.conflict({"loss_type", "loss_weights"},
                     fmt::format("give one weight per loss ({} losses, {} weights)", c.loss_type.size(), c.loss_weights->size()));
      if (c.loss_type.empty()) out.invalid("loss_type", "name at least one loss");
      if (c.precompute_ref_log_probs && c.sync_ref_model)
        out.conflict({"precompute_ref_log_probs", "sync_ref_model"},
                     "a synced reference changes during training, so its log-probs cannot be precomputed; turn one off");
      // Only these losses read label_smoothing (as in TRL 1.16); exo_pair needs it.
      static const std::vector<std::string> smoothed = {"robust", "exo_pair", "aot", "aot_unpaired"};
      bool uses_smoothing = false;
      for (const auto& t : c.loss_type)
        if (std::find(smoothed.begin(), smoothed.end(), t) != smoothed.end()) uses_smoothing = true;
      if (c.label_smoothing > 0 && !uses_smoothing)
        out.warn(fmt::format("label_smoothing {} has no effect: none of the losses [{}] uses it (robust, exo_pair, aot, "
                             "aot_unpaired do)",
                             c.label_smoothing, fmt::join(c.loss_type, ", ")));
      if (std::find(c.loss_type.begin(), c.loss_type.end(), "exo_pair") != c.loss_type.end() && c.label_smoothing == 0)
        out.conflict({"loss_type", "label_smoothing"}, "the exo_pair loss needs label_smoothing > 0 (its paper suggests 1e-3)");
      if (c.use_weighting && (std::find(c.loss_type.begin(), c.loss_type.end(), "aot") != c.loss_type.end() ||
                              std::find(c.loss_type.begin(), c.loss_type.end(), "aot_unpaired") != c.loss_type.end()))
        out.conflict({"use_weighting", "loss_type"}, "aot and aot_unpaired sort the pairs, so per-pair weights cannot apply; turn one off");
      if (c.sync_ref_model && c.use_peft && !c.ref_model)
        out.conflict({"sync_ref_model", "use_peft"},
                     "with use_peft and no ref_model the reference is the base model with adapters off, which cannot be synced; set ref_model or turn sync_ref_model off");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

// The `trlx cpo` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/cpo_config.hpp"

#include <fmt/format.h>

namespace trlx::trainers {

const config::Schema& cpo_schema() {
  static const config::Schema schema = [] {
    config::Schema s("cpo", "Contrastive preference optimisation (reference-free) on prompt/chosen/rejected data");
    config::SchemaBuilder<CPOConfig> b(s);
    add_training_fields(b, {.learning_rate = 1e-6, .gradient_checkpointing = true, .disable_dropout = true});
    add_pair_extra_fields(b);
    using C = CPOConfig;
    b.group("cpo");
    b.field(&C::beta, "beta", 0.1, "Temperature of the preference term.").min(0);
    b.field(&C::label_smoothing, "label_smoothing", 0.0, "Assumed probability that a preference label is flipped (sigmoid, simpo).")
        .min(0).max(0.5);
    b.field(&C::loss_type, "loss_type", "sigmoid", "Preference term: sigmoid, hinge, ipo, simpo, or alphapo (simpo without the NLL term).")
        .one_of({"sigmoid", "hinge", "ipo", "simpo", "alphapo"});
    b.field(&C::cpo_alpha, "cpo_alpha", 1.0, "Weight of the NLL term on the chosen completions.").min(0);
    b.field(&C::simpo_gamma, "simpo_gamma", 0.5, "Target reward margin of simpo.");
    b.field(&C::alpha, "alpha", 0.0, "AlphaPO reward shape; 0 uses log-prob rewards.");
    b.rule([](const CPOConfig& c, config::Conflicts& out) {
      if (c.label_smoothing > 0 && (c.loss_type == "hinge" || c.loss_type == "ipo"))
        out.warn(fmt::format("label_smoothing has no effect on the {} loss", c.loss_type));
      if (c.loss_type == "alphapo" && c.cpo_alpha != 0)
        out.warn("loss_type alphapo trains without the NLL term: cpo_alpha is taken as 0");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

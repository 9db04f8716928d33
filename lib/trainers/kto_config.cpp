// The `trlx kto` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/kto_config.hpp"

namespace trlx::trainers {

const config::Schema& kto_schema() {
  static const config::Schema schema = [] {
    config::Schema s("kto", "Kahneman-Tversky optimisation on prompt/completion/label data (paired data is unpaired)");
    config::SchemaBuilder<KTOConfig> b(s);
    // TRL's KTO reads examples in stored order (its KL completions are paired
    // with their neighbours when the dataset is prepared). trlx pairs them
    // within each collated batch, so random order works as well.
    add_training_fields(b, {.learning_rate = 1e-6,
                            .gradient_checkpointing = true,
                            .disable_dropout = true,
                            .train_sampling_strategy = "sequential"});
    add_activation_offloading_field(b);
    add_pad_to_multiple_of_field(b);
    add_router_aux_loss_coef_field(b);
    using C = KTOConfig;
    b.group("kto");
    b.field(&C::beta, "beta", 0.1, "Strength of the implicit KL penalty towards the reference model.").min(0);
    b.field(&C::loss_type, "loss_type", "kto",
            "kto: against a KL estimate from mismatched prompt/completion pairs; apo_zero_unpaired: anchored at zero, "
            "no KL estimate.")
        .one_of({"kto", "apo_zero_unpaired"});
    b.field(&C::desirable_weight, "desirable_weight", 1.0,
            "Weight of desirable (label true) examples' losses; raise it when they are the minority.")
        .min(0);
    b.field(&C::undesirable_weight, "undesirable_weight", 1.0, "Weight of undesirable (label false) examples' losses.")
        .min(0);
    b.field(&C::ref_model, "ref_model", std::nullopt,
            "Reference model directory or hub name; null uses the starting policy (or the base with adapters off under "
            "use_peft).")
        .hub_model();
    // Accepted so that TRL's KTO configs load; refused unless left at the default.
    b.field(&C::precompute_ref_log_probs, "precompute_ref_log_probs", false,
            "Compute reference log-probs once before training.")
        .not_built("kto computes reference log-probs with each batch; set it to false");
    b.field(&C::precompute_ref_batch_size, "precompute_ref_batch_size", std::nullopt, "Batch size of the precompute pass.")
        .min(1)
        .not_built("it sizes the precompute pass, which kto does not have; leave it unset");
    b.field(&C::sync_ref_model, "sync_ref_model", false, "TR-DPO-style reference updates every ref_model_sync_steps.")
        .not_built("kto keeps its reference fixed; set it to false");
    b.field(&C::ref_model_mixup_alpha, "ref_model_mixup_alpha", 0.6, "Mixing weight of the policy when syncing.")
        .min(0)
        .max(1)
        .not_built("it only applies with sync_ref_model, which kto does not have; leave it unset");
    b.field(&C::ref_model_sync_steps, "ref_model_sync_steps", 512, "Steps between reference updates.")
        .min(1)
        .not_built("it only applies with sync_ref_model, which kto does not have; leave it unset");
    b.rule([](const KTOConfig& c, config::Conflicts& out) {
      if (c.loss_type == "kto" && c.per_device_train_batch_size <= 1)
        out.conflict({"loss_type", "per_device_train_batch_size"},
                     "the kto loss estimates its KL term from mismatched pairs inside a batch, so it needs "
                     "per_device_train_batch_size of at least 2 (or use loss_type: apo_zero_unpaired)");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

// The `trlx sft` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/sft_config.hpp"

namespace trlx::trainers {

const config::Schema& sft_schema() {
  static const config::Schema schema = [] {
    config::Schema s("sft", "Supervised fine-tuning on text, prompt-completion or conversations");
    config::SchemaBuilder<SFTConfig> b(s);
    add_training_fields(b, {.learning_rate = 2e-5, .gradient_checkpointing = true, .disable_dropout = false});
    add_activation_offloading_field(b);
    add_pad_to_multiple_of_field(b);
    add_router_aux_loss_coef_field(b);
    using C = SFTConfig;
    b.group("sft");
    b.field(&C::dataset_text_field, "dataset_text_field", "text", "Column holding plain text.");
    b.field(&C::packing, "packing", false, "Pack several examples into each max_length sequence.");
    b.field(&C::packing_strategy, "packing_strategy", "bfd", "bfd: best-fit decreasing, examples kept whole; wrapped: concatenate and cut.")
        .one_of({"bfd", "wrapped"});
    b.field(&C::padding_free, "padding_free", false, "Concatenate the batch into one row, positions restarting and attention confined to each example, "
            "instead of padding (same loss; no work on padding tokens outside attention).");
    b.field(&C::completion_only_loss, "completion_only_loss", std::nullopt,
            "Loss on the completion only (prompt-completion data); null means true for such data.");
    b.field(&C::assistant_only_loss, "assistant_only_loss", false,
            "Loss on assistant turns only (needs a chat template with {% generation %}).");
    b.field(&C::loss_type, "loss_type", "nll", "nll: token cross-entropy; dft: probability-weighted.").one_of({"nll", "dft"});
    b.field(&C::eos_token, "eos_token", std::nullopt, "Token appended to each example (defaults to the tokenizer's eos).");
    b.field(&C::pad_token, "pad_token", std::nullopt, "Padding token (defaults to the tokenizer's pad, else eos).");
    b.field(&C::chat_template_path, "chat_template_path", std::nullopt, "A Jinja file (or tokenizer dir) whose chat template replaces the model's.");
    b.field(&C::shuffle_dataset, "shuffle_dataset", false, "Shuffle the examples with `seed` once when loading (before packing too, as TRL does).");
    b.field(&C::eval_packing, "eval_packing", std::nullopt,
            "Pack the evaluation split; null: as packing. trlx shapes both splits alike, so only null or packing's "
            "value is accepted.")
        .only_describes();
    b.field(&C::truncation_mode, "truncation_mode", "keep_start", "Which end of a long example is kept.")
        .one_of({"keep_start", "keep_end"})
        .not_built("keep_end is deprecated in TRL and not built for sft: examples keep their first max_length tokens");
    b.field(&C::dataset_kwargs, "dataset_kwargs", std::nullopt, "TRL's dataset preparation options.")
        .holds_mapping()
        .not_built("trlx always prepares the dataset itself (skip_prepare_dataset is not built)");
    b.rule([](const SFTConfig& c, config::Conflicts& out) {
      if (c.eval_packing && *c.eval_packing != c.packing)
        out.conflict({"eval_packing", "packing"}, "the evaluation split is shaped as the training split: leave "
                                                  "eval_packing unset");
      if (c.packing && c.padding_free && c.packing_strategy == "wrapped")
        out.conflict({"padding_free", "packing_strategy"}, "padding_free needs whole examples: use packing_strategy: bfd");
      if (c.packing && !c.max_length)
        out.conflict({"packing", "max_length"}, "packing needs a max_length to pack up to");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

// The `trlx sft` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/sft_config.hpp"

namespace trlx::trainers {

const config::Schema& sft_schema() {
  static const config::Schema schema = [] {
    config::Schema s("sft", "Supervised fine-tuning on text, prompt-completion or conversations");
    config::SchemaBuilder<SFTConfig> b(s);
    add_training_fields(b, {.learning_rate = 2e-5, .gradient_checkpointing = true, .disable_dropout = false});
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
    b.rule([](const SFTConfig& c, config::Conflicts& out) {
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

// The `trlx distill` config table: its fields with TRL's names and defaults, and their checks.
#include "trainers/distill_config.hpp"

namespace trlx::trainers {

const config::Schema& distill_schema() {
  static const config::Schema schema = [] {
    config::Schema s("distill", "On-policy distillation: the student samples, a teacher scores every next token");
    config::SchemaBuilder<DistillConfig> b(s);
    add_training_fields(b, {.learning_rate = 1e-6,
                            .gradient_checkpointing = true,
                            .disable_dropout = false,
                            .max_length = std::nullopt,
                            .remove_unused_columns = false});
    add_pad_to_multiple_of_field(b);
    using C = DistillConfig;
    b.group("teacher");
    b.field(&C::teacher_model_name_or_path, "teacher_model_name_or_path", std::nullopt,
            "The teacher: a Hugging Face model directory or hub name with the student's vocabulary (it may be wider "
            "or deeper). Frozen, placed as a reference model is: whole on each process, or split unit by unit "
            "under ZeRO-3/FSDP.")
        .hub_model("teacher_model_revision");
    b.field(&C::teacher_model_revision, "teacher_model_revision", std::nullopt,
            "Hub revision (branch, tag or commit) of teacher_model_name_or_path when it is a hub name; null: main.");
    b.group("teacher_model_init_kwargs");
    b.field(&C::teacher_dtype, "teacher_model_init_kwargs.dtype", std::nullopt,
            "Dtype the teacher's weights are loaded in (null: dtype's).")
        .one_of({"auto", "float32", "bfloat16", "float16"})
        .bound_to("teacher_dtype");
    b.alias("teacher_model_init_kwargs.torch_dtype", "teacher_model_init_kwargs.dtype");
    b.field(&C::teacher_init_revision, "teacher_model_init_kwargs.revision", std::nullopt,
            "Another name of teacher_model_revision.")
        .same_as("teacher_model_revision")
        .bound_to("teacher_init_revision");
    b.field(&C::teacher_init_attn_implementation, "teacher_model_init_kwargs.attn_implementation", std::nullopt,
            "The teacher's attention kernel as transformers names it: the teacher runs trlx's fused attention "
            "whatever this says (an eager kernel computes the same numbers up to rounding).")
        .bound_to("teacher_init_attn_implementation")
        .only_describes();
    b.field(&C::teacher_init_trust_remote_code, "teacher_model_init_kwargs.trust_remote_code", std::nullopt,
            "Run the teacher repository's own Python code.")
        .bound_to("teacher_init_trust_remote_code")
        .not_built("trlx runs no Python: a teacher that needs its repository's code is an architecture trlx does not "
                   "know (`trlx env` lists the ones it does)");
    b.field(&C::teacher_init_device_map, "teacher_model_init_kwargs.device_map", std::nullopt,
            "auto or null: the teacher is placed as a reference model is (whole on each process, or split over "
            "the ranks under ZeRO-3/FSDP); spreading its layers over devices is not built.")
        .bound_to("teacher_init_device_map")
        .only_describes();
    add_generation_fields(b, 1.0);
    add_rollout_fields(b, "At each logging step, write the last generation round (step, prompt and completion as "
                          "text, every process's completions) to output_dir/completions/completions_<step>.parquet "
                          "and print num_completions_to_print of them.");
    add_vllm_fields(b, true, false, 0.3);
    b.group("distillation");
    b.field(&C::beta, "beta", 1.0,
            "Which divergence: 0 the forward KL(teacher || student), 1 the reverse KL(student || teacher), between "
            "them the generalized Jensen-Shannon divergence with mixture (1 - beta) student + beta teacher. "
            "temperature divides both models' logits in it too.")
        .min(0)
        .max(1);
    b.rule([](const C& c, config::Conflicts& out) {
      if (c.teacher_init_device_map && *c.teacher_init_device_map != "auto")
        out.invalid("teacher_model_init_kwargs.device_map",
                    "the teacher is placed as a reference model is (whole on each process, or split over the ranks "
                    "under ZeRO-3/FSDP); spreading its layers over devices is not built");
      if (!c.teacher_model_name_or_path)
        out.invalid("teacher_model_name_or_path", "distillation needs a teacher: name its model directory or hub name");
    });
    return s;
  }();
  return schema;
}

}  // namespace trlx::trainers

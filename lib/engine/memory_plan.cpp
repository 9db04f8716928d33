// How the memory savers combine with each other and with the strategy: one decision for every trainer.
#include "engine/memory_plan.hpp"

#include <fmt/format.h>

namespace trlx::engine {

MemoryPlan plan_memory(const config::TrainingConfig& c, const config::DistributedConfig& dist) {
  MemoryPlan p;
  p.lora = c.use_peft;
  p.logprob_chunk_size = c.use_liger_kernel ? c.logprob_chunk_size : 0;

  p.checkpointing = c.gradient_checkpointing;
  if (!p.checkpointing && dist.fsdp_activation_checkpointing) {
    p.checkpointing = true;
    p.notes.push_back(fmt::format("gradient checkpointing on: the accelerate config ({}) sets "
                                  "fsdp_activation_checkpointing",
                                  dist.source));
  }
  if (!p.checkpointing) return p;

  // Unset: recompute inside the main backward, so gradients reach every
  // gradient hook the usual way.
  p.reentrant = c.use_reentrant.value_or(false);
  // Adapters on a sharded frozen base, recomputed in the main backward, is
  // the combination that fails elsewhere; trlx re-gathers in the recompute
  // either way, but keeps the mode users of sharded LoRA runs rely on.
  if (c.use_peft && dist.shards_parameters() && !p.reentrant) {
    p.reentrant = true;
    if (c.use_reentrant.has_value())
      p.notes.push_back(fmt::format("forcing use_reentrant=true because use_peft with {} shards parameters and "
                                    "gradient checkpointing must recompute LoRA layers through a separate backward",
                                    dist.describe()));
  }
  return p;
}

}  // namespace trlx::engine

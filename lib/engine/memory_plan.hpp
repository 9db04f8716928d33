#pragma once
// The one function that decides how the memory savers combine with each other
// and with the distributed strategy, for every trainer. The engine calls it
// once; trainers never look at these switches themselves.
#include <string>
#include <vector>

#include "config/accelerate.hpp"
#include "config/training.hpp"

namespace trlx::engine {

struct MemoryPlan {
  bool lora = false;
  bool checkpointing = false;
  bool reentrant = false;         // checkpointing mode (see engine/activation_checkpointing.hpp)
  int64_t logprob_chunk_size = 0;  // 0: plain log-prob path
  std::vector<std::string> notes;  // decisions worth a log line, said once by the engine
};

MemoryPlan plan_memory(const config::TrainingConfig& config, const config::DistributedConfig& dist);

}  // namespace trlx::engine

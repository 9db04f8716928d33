#pragma once
// The trainer subcommands: one row per trainer. A row names the trainer, says
// in one line what it does, gives its config table and its entry point.
#include <functional>
#include <string>
#include <vector>

#include "config/schema.hpp"

namespace trlx::config {
class ConfigLoader;
}

namespace trlx::trainers {

struct RunRequest {
  const config::ConfigLoader* loader = nullptr;  // resolved config with origins
  const void* config = nullptr;                  // the trainer's config struct
};

struct TrainerEntry {
  std::string name;
  const config::Schema& (*schema)();
  // Builds the typed config struct and resolves it; returns it type-erased.
  std::shared_ptr<void> (*make_config)();
  // Training entry point; empty while the trainer is not built yet.
  std::function<int(const RunRequest&)> run;
  // `trlx preview <trainer>`; empty while not built.
  std::function<int(const RunRequest&, size_t num_examples, bool json)> preview;
};

const std::vector<TrainerEntry>& trainer_table();
const TrainerEntry* find_trainer(const std::string& name);

}  // namespace trlx::trainers

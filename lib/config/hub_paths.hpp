#pragma once
// Hub names in a config: every field the schema marks as naming a model or a
// dataset (FieldSpec::hub) may hold a local path or a Hugging Face hub name
// (`org/name`). Before training, each hub name that is not an existing local
// path is replaced by its snapshot directory in the Hugging Face cache
// (downloaded there when missing, io/hub), so the trainers see directories
// only.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/schema.hpp"

namespace trlx::config {

class ConfigLoader;

enum class HubMode {
  Fetch,      // resolve, downloading what is missing (training, preview)
  CacheOnly,  // resolve what is cached; note what a run would download; an error what it could not
              // (validate)
  Describe,   // change nothing, fail on nothing: say where each name is found (print-config)
};

struct HubResolution {
  std::string field;               // "model_name_or_path"
  std::string name;                // "Qwen/Qwen2-0.5B-Instruct"
  std::string revision;            // "main"
  std::filesystem::path snapshot;  // empty when not cached (CacheOnly)
  std::string note;                // what happened, for logs and validate
};

// Walks `schema`'s hub fields of `config` (the struct the schema was built
// for), assigning snapshot paths back. InputError (exit 2) naming the field
// when a name cannot be resolved, or when a revision field is set for a value
// that is a local path.
// `loader` (optional) names where each field was set in messages.
std::vector<HubResolution> resolve_hub_paths(const Schema& schema, void* config, HubMode mode,
                                             const ConfigLoader* loader = nullptr);

// The hub name and revision a snapshot directory was resolved from in this
// process (by resolve_hub_paths), or else the repo and revision its place in
// a Hugging Face cache names (models--org--name/snapshots/<commit>): what a
// saved LoRA adapter records as its base model, as PEFT records the name it
// was loaded by.
std::optional<HubResolution> hub_origin(const std::filesystem::path& snapshot);

// Records that `snapshot` was resolved from hub name `name` at `revision`
// outside resolve_hub_paths (the base an adapter names, at the revision it
// pins), so hub_origin gives that revision back even where it is the commit
// the cache's main also names today.
void remember_hub_origin(const std::string& name, const std::string& revision,
                         const std::filesystem::path& snapshot);

}  // namespace trlx::config

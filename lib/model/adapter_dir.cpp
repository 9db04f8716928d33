// A LoRA adapter directory's base model, as adapter_config.json names it (local or on the hub).
#include "model/adapter_dir.hpp"

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "config/hub_paths.hpp"
#include "core/error.hpp"
#include "io/hub.hpp"

namespace trlx::model {

namespace fs = std::filesystem;

bool is_adapter_dir(const fs::path& dir) { return fs::exists(dir / "adapter_config.json"); }

fs::path adapter_base_dir(const fs::path& adapter_dir) {
  const fs::path file = adapter_dir / "adapter_config.json";
  std::string base, revision;
  try {
    std::ifstream in(file);
    const auto j = nlohmann::json::parse(in);
    base = j.value("base_model_name_or_path", "");
    // PEFT records the base's hub revision here (null: the default branch).
    if (j.contains("revision") && j["revision"].is_string()) revision = j["revision"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON: {}", file.string(), e.what());
  }
  // A base named by its hub name (as PEFT writes it): its snapshot in the
  // Hugging Face cache, downloaded there when missing.
  if (!base.empty() && !fs::exists(base) && io::hub::looks_like_repo_id(base)) {
    const io::hub::RepoRef ref{io::hub::RepoType::Model, base, revision.empty() ? "main" : revision};
    try {
      fs::path snapshot = io::hub::snapshot(ref, io::hub::HubOptions::from_env());
      // Saving an adapter trained on from here records the same pin, even
      // when the pinned commit is also what main names in this cache.
      config::remember_hub_origin(base, ref.revision, snapshot);
      return snapshot;
    } catch (const InputError& e) {
      fail_input("{}: base_model_name_or_path `{}` is not a local directory, and {}", file.string(), base, e.what());
    }
  }
  if (base.empty() || !fs::is_directory(base))
    fail_input("{} is a LoRA adapter whose base_model_name_or_path (`{}`) is neither a local model directory nor a hub name; "
               "set it to the base model's directory or hub name (org/name)",
               file.string(), base);
  return base;
}

}  // namespace trlx::model

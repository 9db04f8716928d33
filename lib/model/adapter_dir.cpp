#include "model/adapter_dir.hpp"

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace trlx::model {

namespace fs = std::filesystem;

bool is_adapter_dir(const fs::path& dir) { return fs::exists(dir / "adapter_config.json"); }

fs::path adapter_base_dir(const fs::path& adapter_dir) {
  const fs::path file = adapter_dir / "adapter_config.json";
  std::string base;
  try {
    std::ifstream in(file);
    base = nlohmann::json::parse(in).value("base_model_name_or_path", "");
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON: {}", file.string(), e.what());
  }
  if (base.empty() || !fs::is_directory(base))
    fail_input("{} is a LoRA adapter whose base_model_name_or_path (`{}`) is not a local model directory; "
               "set it to the base model's directory",
               file.string(), base);
  return base;
}

}  // namespace trlx::model

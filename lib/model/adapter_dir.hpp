#pragma once
// A LoRA adapter directory (PEFT format) names the model it adapts in
// adapter_config.json; every place that starts from such a directory (the
// policy, its tokenizer, a reference) resolves the base here.
#include <filesystem>

namespace trlx::model {

// True when `dir` holds an adapter (adapter_config.json).
bool is_adapter_dir(const std::filesystem::path& dir);
// The base model directory an adapter names; InputError naming
// adapter_config.json when the file is not JSON or the base is not a local
// model directory.
std::filesystem::path adapter_base_dir(const std::filesystem::path& adapter_dir);

}  // namespace trlx::model

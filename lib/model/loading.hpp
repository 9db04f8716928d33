#pragma once
// Loading a Hugging Face model directory into a LanguageModel, and saving one
// back in the same format.
#include <filesystem>
#include <string>

#include "model/decoder.hpp"

namespace trlx::model {

// "float32" | "bfloat16" | "float16" | "auto" (the checkpoint's own dtype).
torch::Dtype parse_dtype(const std::string& name, const ModelConfig& config);

// Reads config.json and the safetensors weights (single file or sharded).
// Errors name the file and the tensor or key. With `defer_casts`, weights
// stored in another dtype stay views of the checkpoint until placed (see
// LanguageModelImpl::placed_dtype): for models the training engine places.
LanguageModel load_language_model(const std::filesystem::path& dir, HeadKind head, const std::string& dtype = "float32",
                                  bool defer_casts = false);

}  // namespace trlx::model

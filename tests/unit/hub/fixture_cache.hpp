#pragma once
// The hub tests' fixture cache: a Hugging Face cache directory as
// huggingface_hub lays it out (tests/data/hub_cache).
#include <filesystem>

#include "support.hpp"

namespace trlx::test {

inline std::filesystem::path fixture_cache() { return data_dir() / "hub_cache"; }

}  // namespace trlx::test

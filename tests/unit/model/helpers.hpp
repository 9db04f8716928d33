#pragma once
// What the model tests share: where the tiny reference models live and how
// their logits are compared.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "support.hpp"

namespace trlx::model_test {

// tests/data/models: tiny random models and transformers' outputs for them.
inline std::filesystem::path models() { return ::trlx::test::data_dir() / "models"; }

// A JSON file of the fixtures (or of a saved model).
inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  return nlohmann::json::parse(in);
}

// Largest absolute difference over the real (non-pad) positions.
inline double max_diff_on_real(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  auto m = mask.to(torch::kBool).unsqueeze(-1).expand_as(a);
  return (a - b).abs().masked_select(m).max().item<double>();
}

}  // namespace trlx::model_test

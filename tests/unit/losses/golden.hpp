#pragma once
// What the loss tests share: reading a fixture of TRL's numbers (fp32, written
// as exact values) and comparing within 1e-6 of TRL. Include Catch first.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support.hpp"

namespace trlx::test {

// tests/data/<dir>/<name>.json, checked to be an fp32 fixture.
inline nlohmann::json load_golden(const std::string& dir, const std::string& name) {
  std::ifstream f(data_dir() / dir / (name + ".json"));
  REQUIRE(f.good());
  nlohmann::json j = nlohmann::json::parse(f);
  REQUIRE(j.at("dtype") == "float32");
  return j;
}

// fp32, the dtype TRL computed in; the JSON numbers are exact fp32 values.
inline torch::Tensor golden_vec(const nlohmann::json& a) {
  std::vector<float> v;
  for (const auto& x : a) v.push_back(x.get<float>());
  return torch::tensor(v, torch::kFloat32);
}

// Within 1e-6 of TRL; above magnitude 1, within 1e-6 relative (an fp32 ulp at
// 30 is 2e-6, so no fp32 program can promise an absolute 1e-6 there).
inline bool near_golden(double got, double want) {
  return std::abs(got - want) <= 1e-6 * std::max(1.0, std::abs(want));
}

inline void check_golden(const std::string& what, double got, double want) {
  INFO(what << ": got " << got << ", TRL " << want);
  CHECK(near_golden(got, want));
}

}  // namespace trlx::test

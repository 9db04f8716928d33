#pragma once
// The trainers' names: the one list, LibTorch-free, that the `trainer:` field
// and `trlx validate` read. The trainer table (trainers/registry.cpp) holds a
// row for each, in this order, and checks that it does.
#include <string>
#include <vector>

namespace trlx::config {

const std::vector<std::string>& trainer_names();

}  // namespace trlx::config

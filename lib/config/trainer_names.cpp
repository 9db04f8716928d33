// The trainers' names, in the order `trlx --help` lists them (see trainer_names.hpp).
#include "config/trainer_names.hpp"

namespace trlx::config {

const std::vector<std::string>& trainer_names() {
  static const std::vector<std::string> names = {"sft",  "dpo",  "kto",        "reward", "cpo",
                                                 "orpo", "grpo", "rloo", "online-dpo", "ppo",
                                                 "distill"};
  return names;
}

}  // namespace trlx::config

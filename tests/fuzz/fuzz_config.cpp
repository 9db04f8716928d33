// libFuzzer target: trainer config YAML and accelerate config YAML.
// Byte 0 picks the schema (each trainer's, or the accelerate config reader);
// the rest is the file. Bad input must end in trlx::InputError; anything else
// (another exception, a sanitizer report, a broken invariant below) is a bug.
//
// Invariant: a config that resolves prints (print-config's YAML) to a file
// that resolves to the same values, field for field.
//
// Set TRLX_FUZZ_WRITE_DICT=<path> to append every field name of every schema
// (each part of a dotted name, as a YAML key) to a libFuzzer dictionary.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <variant>

#include "config/accelerate.hpp"
#include "config/loader.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "trainers/cpo_config.hpp"
#include "trainers/dpo_config.hpp"
#include "trainers/grpo_config.hpp"
#include "trainers/kto_config.hpp"
#include "trainers/online_dpo_config.hpp"
#include "trainers/orpo_config.hpp"
#include "trainers/ppo_config.hpp"
#include "trainers/reward_config.hpp"
#include "trainers/rloo_config.hpp"
#include "trainers/sft_config.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

bool same(const trlx::config::Value& a, const trlx::config::Value& b) {
  // Doubles print with enough digits to read back exactly.
  if (std::holds_alternative<double>(a) && std::holds_alternative<double>(b))
    return std::get<double>(a) == std::get<double>(b) ||
           (std::isnan(std::get<double>(a)) && std::isnan(std::get<double>(b)));
  return a == b;
}

template <class C>
void fuzz_trainer(const trlx::config::Schema& schema, const std::string& text) {
  trlx::config::ConfigLoader first(schema);
  C config{};
  try {
    first.load_yaml_text(text, "fuzz.yaml");
    first.resolve(&config);
  } catch (const trlx::InputError&) {
    return;
  }
  const std::string printed = first.to_yaml();
  trlx::config::ConfigLoader second(schema);
  C again{};
  try {
    second.load_yaml_text(printed, "printed.yaml");
    second.resolve(&again);
  } catch (const trlx::InputError& e) {
    __builtin_trap();  // print-config wrote a file that does not load
  }
  for (const auto& f : schema.fields()) require(same(first.value(f.name), second.value(f.name)));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  trlx::log::init(0, 1, "off");
  if (const char* p = std::getenv("TRLX_FUZZ_WRITE_DICT")) {
    std::set<std::string> keys;
    for (const trlx::config::Schema* s :
         {&trlx::trainers::sft_schema(), &trlx::trainers::dpo_schema(), &trlx::trainers::kto_schema(),
          &trlx::trainers::reward_schema(), &trlx::trainers::cpo_schema(), &trlx::trainers::orpo_schema(),
          &trlx::trainers::grpo_schema(), &trlx::trainers::rloo_schema(), &trlx::trainers::ppo_schema(),
          &trlx::trainers::online_dpo_schema()}) {
      for (const auto& f : s->fields()) {
        size_t at = 0;
        while (at <= f.name.size()) {
          const size_t dot = std::min(f.name.find('.', at), f.name.size());
          keys.insert(f.name.substr(at, dot - at));
          at = dot + 1;
        }
      }
      for (const auto& a : s->aliases()) keys.insert(a.old_name);
    }
    if (FILE* f = std::fopen(p, "a")) {
      for (const auto& k : keys)
        if (k.find_first_of("\"\\") == std::string::npos) std::fprintf(f, "\"%s: \"\n", k.c_str());
      std::fclose(f);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 11) {
      case 0: fuzz_trainer<trlx::trainers::SFTConfig>(trlx::trainers::sft_schema(), text); break;
      case 1: fuzz_trainer<trlx::trainers::DPOConfig>(trlx::trainers::dpo_schema(), text); break;
      case 2: fuzz_trainer<trlx::trainers::KTOConfig>(trlx::trainers::kto_schema(), text); break;
      case 3: fuzz_trainer<trlx::trainers::RewardConfig>(trlx::trainers::reward_schema(), text); break;
      case 4: fuzz_trainer<trlx::trainers::CPOConfig>(trlx::trainers::cpo_schema(), text); break;
      case 5: fuzz_trainer<trlx::trainers::ORPOConfig>(trlx::trainers::orpo_schema(), text); break;
      case 6: fuzz_trainer<trlx::trainers::GRPOConfig>(trlx::trainers::grpo_schema(), text); break;
      case 7: fuzz_trainer<trlx::trainers::RLOOConfig>(trlx::trainers::rloo_schema(), text); break;
      case 8: fuzz_trainer<trlx::trainers::PPOConfig>(trlx::trainers::ppo_schema(), text); break;
      case 9: fuzz_trainer<trlx::trainers::OnlineDPOConfig>(trlx::trainers::online_dpo_schema(), text); break;
      default: {
        (void)trlx::config::looks_like_accelerate_config(text);
        (void)trlx::config::parse_accelerate_config(text, "fuzz_accelerate.yaml");
      }
    }
  } catch (const trlx::InputError&) {
  }
  return 0;
}

// Which model is the frozen reference, decided once (trainers::load_reference)
// for every trainer that has one. The expected logits are PEFT's, from
// tests/data/lora/default (scripts/fixtures/lora_fixtures.py): TRL 1.16's
// DPOTrainer and KTOTrainer, given a model that already carries an adapter and
// no ref_model, copy that adapter into a frozen "ref" adapter, so their
// reference is the adapter as it starts (PEFT's logits with the adapter on).
#include "catch_torch.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "config/loader.hpp"
#include "engine/engine.hpp"
#include "io/safetensors.hpp"
#include "support.hpp"
#include "trainer_fixture.hpp"
#include "trainers/common.hpp"
#include "trainers/dpo.hpp"
#include "trainers/kto.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

// PEFT's adapter for the tiny model, its base_model_name_or_path pointed at
// this checkout's tiny model.
fs::path adapter_dir(const fs::path& root) {
  const fs::path from = test::data_dir() / "lora" / "default" / "adapter";
  const fs::path to = root / "adapter";
  fs::create_directories(to);
  fs::copy_file(from / "adapter_model.safetensors", to / "adapter_model.safetensors");
  nlohmann::json cfg;
  {
    std::ifstream in(from / "adapter_config.json");
    cfg = nlohmann::json::parse(in);
  }
  cfg["base_model_name_or_path"] = test::tiny_model().string();
  std::ofstream(to / "adapter_config.json") << cfg.dump(2);
  return to;
}

trainers::KTOConfig kto_config(const fs::path& model, const fs::path& out) {
  config::ConfigLoader loader(trainers::kto_schema());
  loader.apply_flag("model_name_or_path", {model.string()});
  loader.apply_flag("dataset_name", {(test::data_dir() / "kto" / "train.jsonl").string()});
  loader.apply_flag("use_peft", {"true"});
  loader.apply_flag("bf16", {"false"});
  loader.apply_flag("gradient_checkpointing", {"false"});
  loader.apply_flag("output_dir", {out.string()});
  trainers::KTOConfig c;
  loader.resolve(&c);
  return c;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max().item<double>();
}

// The logits the reference gives before training, through the engine as a
// run sets it up.
torch::Tensor reference_logits(const config::TrainingConfig& c, const std::optional<std::string>& ref_model,
                               bool precompute, const std::string& trainer, const torch::Tensor& ids) {
  auto policy = engine::load_policy(c, model::HeadKind::CausalLM);
  auto reference = trainers::load_reference(c, policy, ref_model, precompute, model::HeadKind::CausalLM);
  engine::Engine e(c, std::move(policy), trainer);
  if (reference.separate) e.set_reference(reference.separate);
  e.set_training(false);
  torch::NoGradGuard no_grad;
  const auto role = reference.precompute_role();
  auto hidden = e.forward(role, {ids, torch::Tensor(), torch::Tensor(), torch::Tensor()});
  return e.head(role, hidden).detach().cpu();
}

}  // namespace

TEST_CASE("reference: continuing from an adapter directory, DPO and KTO both use the adapter as it starts, as TRL does",
          "[trainers][reference][golden]") {
  const fs::path root = fs::temp_directory_path() / "trlx_reference_test";
  fs::remove_all(root);
  const fs::path adapter = adapter_dir(root);
  auto expected = io::Checkpoint::open(test::data_dir() / "lora" / "default" / "expected.safetensors");
  const auto ids = expected.get("input_ids", true);
  const auto with_adapter = expected.get("logits_lora"), base = expected.get("logits_base");
  // The fixture's adapter moves the logits, so the base model cannot pass.
  REQUIRE(max_diff(with_adapter, base) > 1e-3);

  auto dpo = test::dpo_config(test::data_dir() / "dpo" / "text", {{"model_name_or_path", adapter.string()},
                                                                 {"use_peft", "true"},
                                                                 {"output_dir", (root / "dpo").string()}});
  auto kto = kto_config(adapter, root / "kto");
  const auto dpo_ref = reference_logits(dpo, dpo.ref_model, false, "dpo", ids);
  const auto kto_ref = reference_logits(kto, kto.ref_model, false, "kto", ids);
  CHECK(max_diff(dpo_ref, with_adapter) < 1e-5);
  CHECK(max_diff(kto_ref, with_adapter) < 1e-5);
  CHECK(max_diff(dpo_ref, kto_ref) == 0.0);
  // Precomputed reference log-probs come from the same model: the policy
  // before its first step.
  const auto dpo_precomputed = reference_logits(dpo, dpo.ref_model, true, "dpo", ids);
  CHECK(max_diff(dpo_precomputed, with_adapter) < 1e-5);
  fs::remove_all(root);
}

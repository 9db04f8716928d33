// Every trainer that runs a shared start once (DPO, CPO, ORPO, reward: each
// pair's prompt; KTO: a row's prompt with its KL row) gives the loss,
// gradients and every logged metric of the same batch run as separate rows.
// The parity replays against TRL run through the packed rows where the
// fixtures' data packs; this holds the paths the fixtures do not take (KTO's
// policy packed with its KL rows on long prompts) and the logits means over
// padding that CPO and ORPO log.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/shared_prefix.hpp"
#include "model/loading.hpp"
#include "support.hpp"
#include "support/trainers.hpp"
#include "trainer_fixture.hpp"
#include "trainers/cpo.hpp"
#include "trainers/cpo_config.hpp"
#include "trainers/kto.hpp"
#include "trainers/kto_config.hpp"
#include "trainers/orpo_config.hpp"
#include "trainers/reward.hpp"
#include "trainers/reward_config.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

// `source` (JSON lines) with every prompt said `times` times: long prompts.
fs::path long_prompts(const fs::path& source, const std::string& name, int times) {
  const auto dir = fs::temp_directory_path() / ("trlx_shared_prefix_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ifstream in(source);
  std::ofstream out(dir / "train.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto row = nlohmann::json::parse(line);
    std::string p;
    for (int i = 0; i < times; ++i) p += row["prompt"].get<std::string>();
    row["prompt"] = p;
    out << row.dump() << "\n";
  }
  return dir;
}

}  // namespace

TEST_CASE("CPO and ORPO through packed pairs equal separate rows, logits means over padding included",
          "[cpo][orpo][shared_prefix]") {
  for (const bool cpo : {true, false}) {
    for (const int times : {1, 8}) {
      INFO((cpo ? "cpo" : "orpo") << ", prompts x" << times);
      const auto data = long_prompts(test::data_dir() / "dpo" / "text" / "train.jsonl", "pairs", times);
      const test::Flags flags = {{"max_length", "512"}};
      trainers::CPOConfig cc;
      trainers::ORPOConfig oc;
      if (cpo) cc = test::trainer_config<trainers::CPOConfig>(trainers::cpo_schema(), data, flags);
      else oc = test::trainer_config<trainers::ORPOConfig>(trainers::orpo_schema(), data, flags);
      const config::TrainingConfig& base = cpo ? static_cast<const config::TrainingConfig&>(cc) : oc;
      auto tok = text::Tokenizer::from_dir(test::tiny_model());
      trainers::PreferenceDataOptions o;
      o.dataset_name = base.dataset_name;
      o.max_length = base.max_length;
      std::map<std::string, std::vector<trainers::SidedPair>> splits;
      splits["train"] = trainers::prepare_sided_preference_split(o, tok, nullptr, "train", true).pairs;
      engine::Engine e(base, model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM), "cpo",
                       test::tiny_model());
      trainers::ReferenceFreeTrainer trainer(
          cpo ? trainers::ReferenceFreeTrainer::Kind::CPO : trainers::ReferenceFreeTrainer::Kind::ORPO,
          cpo ? &cc : nullptr, cpo ? nullptr : &oc, std::move(splits), *tok.pad_token_id());
      // Rows 0..3 differ in length: the batch has padding.
      auto batch = trainer.collate("train", {0, 1, 2, 3});
      REQUIRE(batch.at("attention_mask").sum().item<int64_t>() < batch.at("attention_mask").numel());
      test::check_shared_equals_separate(e, trainer, batch);
    }
  }
}

TEST_CASE("Reward through packed pairs equals separate rows", "[reward][shared_prefix]") {
  for (const int times : {1, 8}) {
    INFO("prompts x" << times);
    const auto data = long_prompts(test::data_dir() / "reward" / "train.jsonl", "reward", times);
    auto c = test::trainer_config<trainers::RewardConfig>(trainers::reward_schema(), data, {{"max_length", "512"}});
    auto tok = text::Tokenizer::from_dir(test::tiny_model());
    std::map<std::string, std::vector<trainers::RewardExample>> splits;
    splits["train"] = trainers::prepare_reward_split(c, tok, nullptr, "train", true).examples;
    auto policy = model::load_language_model(test::tiny_model(), model::HeadKind::SequenceClassification);
    {
      torch::NoGradGuard ng;
      torch::manual_seed(0);
      policy->score->weight.normal_(0, 0.5);
    }
    engine::Engine e(c, policy, "reward", test::tiny_model());
    trainers::RewardTrainer trainer(c, std::move(splits), trainers::resolve_pad_id(tok, std::nullopt, "reward"));
    test::check_shared_equals_separate(e, trainer, trainer.collate("train", {0, 1, 2, 3}));
  }
}

TEST_CASE("KTO through rows packed with their KL rows equals separate rows (reference only, and the policy too)",
          "[kto][shared_prefix]") {
  for (const int times : {1, 12}) {
    INFO("prompts x" << times);
    const auto data = long_prompts(test::data_dir() / "kto" / "train.jsonl", "kto", times);
    auto c = test::trainer_config<trainers::KTOConfig>(trainers::kto_schema(), data, {{"max_length", "512"}});
    auto tok = text::Tokenizer::from_dir(test::tiny_model());
    std::map<std::string, std::vector<trainers::KTOExample>> splits;
    splits["train"] = trainers::prepare_kto_split(c, tok, nullptr, "train", true).examples;
    engine::Engine e(c, model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM), "kto",
                     test::tiny_model());
    e.set_reference(model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM));
    // A policy that has moved from the reference, so the rewards are not 0.
    {
      torch::NoGradGuard ng;
      torch::manual_seed(1);
      for (auto& p : engine::EngineProbe::policy(e).parameters()) p.add_(torch::randn_like(p) * 0.02);
    }
    trainers::KTOTrainer trainer(c, std::move(splits), trainers::resolve_pad_id(tok, std::nullopt, "kto"));
    auto batch = trainer.collate("train", {0, 1, 2, 3});
    // With short prompts only the reference runs the packed rows, with long
    // ones the policy too (KTOTrainer::Sharing).
    CHECK(batch.count("joint_policy") == (times > 1 ? 1u : 0u));
    test::check_shared_equals_separate(e, trainer, batch, "joint_");
  }
}

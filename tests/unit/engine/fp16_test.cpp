// fp16 mixed precision: the dynamic loss scale against torch's GradScaler
// (fixtures from scripts/fixtures/loss_scale_fixtures.py), and the engine's
// handling of updates whose gradients overflow: skipped with the weights
// untouched, the learning-rate schedule held back as transformers' Trainer
// holds it, the scale kept across a resume, and a run whose gradients
// overflow even unscaled stopped. The first steps against TRL's fp16 run are
// in engine_test.cpp (steps.json, case nll_fp16).
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "engine/loss_scale.hpp"
#include "model/loading.hpp"
#include "support.hpp"
#include "support/trainers.hpp"

using namespace trlx;
using test::operator+;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::map<std::string, torch::Tensor> weights_in(const fs::path& dir) {
  auto m = model::load_language_model(dir, model::HeadKind::CausalLM, "float32");
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m->named_parameters(true)) out[p.key()] = p.value().detach().clone();
  return out;
}

size_t differing(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  size_t n = 0;
  for (const auto& [k, v] : a) n += torch::equal(v, b.at(k)) ? 0 : 1;
  return n;
}

}  // namespace

TEST_CASE("the fp16 loss scale follows torch's GradScaler update for update", "[engine][fp16][golden]") {
  const auto cases = read_json(test::data_dir() / "loss_scale" / "grad_scaler.json").at("cases");
  REQUIRE(cases.size() >= 4);
  for (const auto& c : cases) {
    engine::LossScale s(c.at("init_scale").get<double>(), c.at("growth_interval").get<int64_t>());
    int64_t skipped = 0, k = 0;
    for (const auto& step : c.at("steps")) {
      INFO("growth_interval " << c.at("growth_interval") << ", update " << ++k);
      const bool overflow = step.at("overflow").get<bool>();
      // GradScaler skips exactly the updates whose gradients overflowed.
      CHECK(step.at("skipped").get<bool>() == overflow);
      s.update(overflow);
      skipped += overflow ? 1 : 0;
      CHECK(s.scale() == step.at("scale").get<double>());
      CHECK(s.state().at("growth_tracker").get<int64_t>() == step.at("growth_tracker").get<int64_t>());
      CHECK(s.skipped() == skipped);
    }
    // What a checkpoint keeps gives the same scale back.
    engine::LossScale back(65536.0, c.at("growth_interval").get<int64_t>());
    back.load(s.state(), "trainer_state.json");
    CHECK(back.state() == s.state());
  }
}

TEST_CASE("a saved loss scale that is not one trlx wrote is a clear error naming the file", "[engine][fp16]") {
  engine::LossScale s;
  CHECK_THROWS_WITH(s.load(nlohmann::json{{"scale", 0.25}, {"growth_tracker", 0}, {"skipped_updates", 0}}, "ck/x.json"),
                    Contains("ck/x.json: loss_scale") && Contains("out of range"));
  CHECK_THROWS_WITH(s.load(nlohmann::json{{"scale", 1024.0}, {"growth_tracker", 2000}, {"skipped_updates", 0}}, "f"),
                    Contains("out of range"));
  CHECK_THROWS_WITH(s.load(nlohmann::json{{"scale", "big"}}, "ck/y.json"),
                    Contains("ck/y.json: loss_scale is not what trlx saves"));
  CHECK(s.scale() == 65536.0);  // a refused state changes nothing
}

TEST_CASE("fp16: an update whose gradients overflow is skipped, the schedule waits, and a resumed run scales on",
          "[engine][fp16][resume]") {
  test::TempDir root("trlx_fp16_skip");
  // Sequential full batches: every step trains on the same 8 rows.
  const test::Flags flags = {{"fp16", "true"},
                             {"per_device_train_batch_size", "8"},
                             {"train_sampling_strategy", "sequential"},
                             {"learning_rate", "1e-3"},
                             {"lr_scheduler_type", "linear"},
                             {"max_steps", "4"},
                             {"save_steps", "2"},
                             {"logging_steps", "1"}};
  auto full = test::make_sft(test::sft_config(flags + test::Flags{{"output_dir", (root.path / "full").string()}}));
  test::OverflowUntil overflowing(*full.trainer, 2);
  full.engine->train(overflowing);

  // Steps 1 and 2 overflowed: logged with no finite gradient norm, at the
  // schedule's first rate, as is step 3, the first update taken.
  std::vector<nlohmann::json> rows;
  std::ifstream lines(root.path / "full" / "metrics.jsonl");
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) rows.push_back(j);
  }
  REQUIRE(rows.size() == 4);
  CHECK(rows[0]["grad_norm"].is_null());  // inf, which JSON has no word for
  CHECK(rows[1]["grad_norm"].is_null());
  CHECK(std::isfinite(rows[2]["grad_norm"].get<double>()));
  CHECK(std::isfinite(rows[3]["grad_norm"].get<double>()));
  for (int k : {0, 1, 2}) CHECK(rows[static_cast<size_t>(k)]["learning_rate"].get<double>() == Approx(1e-3));
  CHECK(rows[3]["learning_rate"].get<double>() == Approx(1e-3 * 3.0 / 4.0));

  // Nothing was updated by the skipped steps; the scale halved twice.
  CHECK(differing(weights_in(root.path / "full" / "checkpoint-2"), weights_in(test::tiny_model())) == 0);
  CHECK(differing(weights_in(root.path / "full" / "checkpoint-4"), weights_in(test::tiny_model())) > 0);
  auto scale_at = [&](const std::string& ckpt) {
    return read_json(root.path / "full" / ckpt / "trainer_state.json").at("loss_scale");
  };
  CHECK(scale_at("checkpoint-2") == nlohmann::json{{"scale", 16384.0}, {"growth_tracker", 0}, {"skipped_updates", 2}});
  CHECK(scale_at("checkpoint-4") == nlohmann::json{{"scale", 16384.0}, {"growth_tracker", 2}, {"skipped_updates", 2}});

  // Resumed from step 2, the run takes the same updates at the same rates.
  auto resumed = test::make_sft(test::sft_config(flags + test::Flags{{"output_dir", (root.path / "resumed").string()},
                                                                     {"resume_from_checkpoint",
                                                                      (root.path / "full" / "checkpoint-2").string()}}));
  test::OverflowUntil resumed_overflowing(*resumed.trainer, 2);
  resumed.engine->train(resumed_overflowing);
  CHECK(differing(weights_in(root.path / "resumed"), weights_in(root.path / "full")) == 0);
}

TEST_CASE("fp16: gradients that overflow at every scale stop the run at scale 1 with no update saved",
          "[engine][fp16]") {
  test::TempDir root("trlx_fp16_nan");
  auto s = test::make_sft(test::sft_config({{"fp16", "true"},
                                            {"per_device_train_batch_size", "8"},
                                            {"max_steps", "40"},
                                            {"save_strategy", "no"},
                                            {"output_dir", root.path.string()}}));
  {
    torch::NoGradGuard ng;
    trlx::engine::EngineProbe::policy(*s.engine).named_parameters(true)["model.layers.0.mlp.up_proj.weight"][0][0] =
        std::numeric_limits<double>::quiet_NaN();
  }
  try {
    s.engine->train(*s.trainer);
    FAIL("expected the run to stop");
  } catch (const Error& e) {
    // 65536 halved 16 times is 1: the 17th overflow stops the run.
    CHECK_THAT(e.what(), Contains("step 17: the gradient norm is nan") && Contains("stopping before the update") &&
                             Contains("fp16: they overflow at a loss scale of 1"));
  }
  CHECK_FALSE(fs::exists(root.path / "model.safetensors"));
}

TEST_CASE("fp16 trains float32 LoRA adapters on a float16 base", "[engine][fp16][lora]") {
  test::TempDir root("trlx_fp16_lora");
  const auto c = test::sft_config({{"fp16", "true"},
                                   {"dtype", "float16"},
                                   {"use_peft", "true"},
                                   {"lora_r", "4"},
                                   {"lora_dropout", "0"},
                                   {"learning_rate", "1e-2"},
                                   {"output_dir", root.path.string()}});
  auto tok = text::Tokenizer::from_dir(test::tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  std::map<std::string, std::vector<trainers::SFTExample>> splits;
  splits["train"] = trainers::prepare_sft_split(c, tok, &tmpl, "train", true);
  auto policy = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM, "float16");
  engine::Engine e(c, policy, "sft", test::tiny_model(), std::nullopt, nullptr);
  trainers::SFTTrainer trainer(c, std::move(splits), *tok.pad_token_id());
  auto before = e.parameter_values(/*trainable_only=*/true);
  REQUIRE_FALSE(before.empty());
  for (const auto& [name, v] : before) CHECK(v.scalar_type() == torch::kFloat32);
  auto [loss, grad_norm] = engine::EngineProbe::step_on(e, trainer, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(std::isfinite(loss));
  CHECK(std::isfinite(grad_norm));
  CHECK(differing(before, e.parameter_values(true)) > 0);
}

TEST_CASE("fp16 refuses trained parameters that are not float32", "[engine][fp16]") {
  // dtype: auto takes the checkpoint's: a float16 checkpoint would train in
  // 16 bits, which loss scaling cannot unscale.
  auto c = test::sft_config({{"fp16", "true"}});
  c.dtype = "float16";  // past validate's check, as `auto` on a float16 checkpoint would be
  auto tok = text::Tokenizer::from_dir(test::tiny_model());
  auto policy = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM, "float16");
  CHECK_THROWS_WITH(engine::Engine(c, policy, "sft", test::tiny_model(), std::nullopt, nullptr),
                    Contains("fp16: the trained parameter") && Contains("is Half") && Contains("set dtype: float32"));
}

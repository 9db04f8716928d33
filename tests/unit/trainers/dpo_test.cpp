// The DPO trainer against TRL 1.16's DPOTrainer (fixtures from
// scripts/fixtures/dpo_fixtures.py): tokenization id for id, the first three
// optimizer steps' loss, grad norm and logged metrics, the precompute cache,
// the LoRA reference and bad input.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include "io/checksum.hpp"

#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "config/loader.hpp"
#include "core/error.hpp"
#include "engine/engine.hpp"
#include "model/loading.hpp"
#include "model/saving.hpp"
#include "support.hpp"
#include "trainer_fixture.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/dpo.hpp"

using namespace trlx;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

fs::path dpo_data() { return test::data_dir() / "dpo"; }

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("trlx_dpo_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Runs are built by the code the parity replays share (trainer_fixture.hpp).
using test::dpo_config;
using test::tiny_model;
trainers::PreferenceSplit prepare(const trainers::DPOConfig& c) { return test::prepare_dpo(c); }
test::DPOSetup make(const trainers::DPOConfig& c, bool separate_reference = true) {
  return test::make_dpo(c, separate_reference);
}
double metric(const engine::MetricSums& m, const std::string& name) { return test::mean_of(m, name); }

}  // namespace

TEST_CASE("DPO tokenization equals TRL's ids (text and conversational)", "[dpo][golden]") {
  std::ifstream in(dpo_data() / "tokens.json");
  REQUIRE(in);
  const auto golden = nlohmann::json::parse(in);
  for (const std::string form : {"text", "chat"}) {
    auto split = prepare(dpo_config(dpo_data() / form));
    const auto& want = golden.at(form);
    REQUIRE(split.examples.size() >= want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO(form << " row " << i);
      CHECK(split.examples[i].prompt_ids == want[i]["prompt_ids"].get<std::vector<int64_t>>());
      CHECK(split.examples[i].chosen_ids == want[i]["chosen_ids"].get<std::vector<int64_t>>());
      CHECK(split.examples[i].rejected_ids == want[i]["rejected_ids"].get<std::vector<int64_t>>());
    }
  }
}

TEST_CASE("DPO: first three steps equal TRL's DPOTrainer (loss, grad norm, every metric)", "[dpo][golden]") {
  const auto cases = test::read_json(dpo_data() / "steps.json");
  REQUIRE(cases.size() >= 3);
  for (const auto& cs : cases) {
    DYNAMIC_SECTION(cs["name"].get<std::string>()) {
      test::Comparison cmp;
      test::compare_steps(test::dpo_steps(cs, {}), cs["steps"], cs["name"].get<std::string>(), cmp);
      CHECK(cmp.checked > 0);
    }
  }
}

TEST_CASE("DPO precomputed reference log-probs: cached, reused, recomputed when the data changes", "[dpo]") {
  const auto out = temp_dir("cache");
  const auto data = out / "data";
  fs::create_directories(data);
  fs::copy_file(dpo_data() / "text" / "train.jsonl", data / "train.jsonl");
  auto c = dpo_config(data, {{"precompute_ref_log_probs", "true"}, {"output_dir", (out / "run").string()}});
  const fs::path cache = out / "run" / "ref_logps_train.json";
  {
    auto s = make(c);
    s.trainer->precompute_reference(*s.engine, "train", s.files, "model-key");
    REQUIRE(fs::exists(cache));
    // Precomputed values give the same first step as a live reference.
    auto live = make(dpo_config(data));
    auto [l1, g1] = trlx::engine::EngineProbe::step_on(*s.engine, *s.trainer, {{0, 1, 2, 3}});
    auto [l2, g2] = trlx::engine::EngineProbe::step_on(*live.engine, *live.trainer, {{0, 1, 2, 3}});
    CHECK(l1 == Approx(l2).margin(1e-6));
    CHECK(g1 == Approx(g2).margin(1e-6));
  }
  // Mark the cache: a later run with the same data and model reads it.
  std::ifstream in(cache);
  auto j = nlohmann::json::parse(in);
  in.close();
  j["chosen"][0] = 12345.0;
  std::ofstream(cache) << j.dump();
  {
    auto s = make(c);
    s.trainer->precompute_reference(*s.engine, "train", s.files, "model-key");
    CHECK(s.trainer->precomputed("train").chosen[0] == 12345.0);
  }
  {  // another reference model: recomputed
    auto s = make(c);
    s.trainer->precompute_reference(*s.engine, "train", s.files, "other-model-key");
    CHECK(s.trainer->precomputed("train").chosen[0] != 12345.0);
  }
  std::ofstream(cache) << j.dump();
  {  // changed data: recomputed
    std::ofstream(data / "train.jsonl", std::ios::app)
        << R"({"prompt": "What is 1 plus 1?\n", "chosen": "1 plus 1 is 2.", "rejected": "1 plus 1 is 3."})" << "\n";
    auto s = make(c);
    s.trainer->precompute_reference(*s.engine, "train", s.files, "model-key");
    CHECK(s.trainer->precomputed("train").chosen[0] != 12345.0);
    CHECK(s.trainer->precomputed("train").chosen.size() == 13);
  }
  fs::remove_all(out);
}

TEST_CASE("DPO with use_peft and no ref_model: the reference is the base with adapters disabled", "[dpo][lora]") {
  auto c = dpo_config(dpo_data() / "text", {{"use_peft", "true"}, {"learning_rate", "1e-2"}});
  auto s = make(c, /*separate_reference=*/false);
  // At the start adapters are zero: policy == reference, rewards 0.
  auto [loss, gn] = trlx::engine::EngineProbe::step_on(*s.engine, *s.trainer, {{0, 1, 2, 3}});
  CHECK(loss == Approx(std::log(2.0)).margin(1e-6));
  CHECK(metric(s.trainer->last_metrics(), "rewards/chosen") == Approx(0).margin(1e-7));
  trlx::engine::EngineProbe::step_on(*s.engine, *s.trainer, {{4, 5, 6, 7}});
  CHECK(metric(s.trainer->last_metrics(), "rewards/chosen") != Approx(0).margin(1e-7));
  // The reference role still gives the untouched base model's hidden states.
  auto base = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  auto b = s.trainer->collate("train", {0, 1});
  torch::NoGradGuard ng;
  auto ref_h = s.engine->forward(engine::Role::Reference, {b.at("input_ids"), b.at("attention_mask"), {}, {}});
  auto base_h = base->hidden_states({b.at("input_ids"), b.at("attention_mask"), {}, {}});
  // At real tokens (padding trails, so the engine runs attention unmasked,
  // and pad positions hold what no loss reads).
  const auto real = b.at("attention_mask").to(torch::kBool);
  CHECK(torch::allclose(ref_h.index({real}), base_h.index({real}), 1e-5, 1e-6));
  auto pol_h = s.engine->forward(engine::Role::Policy, {b.at("input_ids"), b.at("attention_mask"), {}, {}});
  CHECK_FALSE(torch::allclose(pol_h.index({real}), base_h.index({real}), 1e-5, 1e-6));
}

TEST_CASE("DPO shared prompts (one row per pair) give the loss, metrics and gradients of separate rows", "[dpo]") {
  for (const char* form : {"text", "chat"}) {
    INFO(form);
    auto s = make(dpo_config(dpo_data() / form));
    test::check_shared_equals_separate(*s.engine, *s.trainer, s.trainer->collate("train", {0, 1, 2, 3}));
  }
  // keep_end truncation that cuts the two rows of a pair by different
  // amounts leaves them no common start: separate rows.
  auto c = dpo_config(dpo_data() / "text", {{"max_length", "12"}, {"truncation_mode", "keep_end"}});
  auto s = make(c);
  CHECK_FALSE(s.trainer->collate("train", {0, 1, 2, 3}).count("shared_input_ids"));
}

TEST_CASE("DPO bad input: empty or missing completions, long prompts, a reference of another vocabulary", "[dpo][input]") {
  const auto dir = temp_dir("bad");
  auto write = [&](const std::string& name, const std::string& text) {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "train.jsonl") << text;
    return dir / name;
  };
  const std::string good = R"({"prompt": "What is 1 plus 2?\n", "chosen": "3.", "rejected": "4."})" "\n";
  auto empty = write("empty", good + R"({"prompt": "Hi\n", "chosen": "", "rejected": "x"})" "\n");
  auto msg = test::input_error_of([&] { prepare(dpo_config(empty)); });
  CHECK_THAT(msg, Contains("train.jsonl:2") && Contains("chosen completion is empty"));
  {  // skip_bad_rows drops it
    auto split = prepare(dpo_config(empty, {{"skip_bad_rows", "true"}}));
    CHECK(split.examples.size() == 1);
  }
  auto missing = write("missing", good + R"({"prompt": "Hi\n", "chosen": "x"})" "\n");
  msg = test::input_error_of([&] { prepare(dpo_config(missing)); });
  CHECK_THAT(msg, Contains("train.jsonl:2") && Contains("rejected"));
  // A prompt that alone reaches max_length is dropped and counted.
  auto long_prompt = write("long", good + R"({"prompt": ")" + std::string(200, 'a') + R"(\n", "chosen": "x", "rejected": "y"})" "\n");
  auto split = prepare(dpo_config(long_prompt));
  CHECK(split.examples.size() == 1);
  CHECK(split.dropped_long_prompts == 1);
  // keep_end keeps it.
  CHECK(prepare(dpo_config(long_prompt, {{"truncation_mode", "keep_end"}})).examples.size() == 2);
  // A reference model with another vocabulary.
  model::NewModelSpec spec;
  spec.vocab_size = 200;
  spec.hidden_size = 32;
  spec.num_heads = 2;
  spec.eos_token_ids = {2};
  model::LanguageModel other(model::new_model_config(spec), model::HeadKind::CausalLM);
  model::init_weights(*other, 1);
  model::save_language_model(dir / "other-model", *other);
  config::ConfigLoader loader(trainers::dpo_schema());
  loader.apply_flag("model_name_or_path", {tiny_model().string()});
  loader.apply_flag("dataset_name", {(dpo_data() / "text").string()});
  loader.apply_flag("ref_model", {(dir / "other-model").string()});
  loader.apply_flag("output_dir", {(dir / "run").string()});
  trainers::DPOConfig c;
  loader.resolve(&c);
  msg = test::input_error_of([&] { trainers::run_dpo(c); });
  CHECK_THAT(msg, Contains("vocabulary of 200 tokens"));
  // exo_pair without label_smoothing is refused by the config.
  config::ConfigLoader l2(trainers::dpo_schema());
  l2.apply_flag("loss_type", {"exo_pair"});
  trainers::DPOConfig c2;
  msg = test::input_error_of([&] { l2.resolve(&c2); });
  CHECK_THAT(msg, Contains("label_smoothing"));
  fs::remove_all(dir);
}

TEST_CASE("DPO sync_ref_model (TR-DPO): the reference moves to alpha * policy + (1 - alpha) * reference", "[dpo]") {
  auto c = dpo_config(dpo_data() / "text",
                      {{"sync_ref_model", "true"}, {"ref_model_sync_steps", "1"}, {"ref_model_mixup_alpha", "0.25"}});
  auto split = prepare(c);
  auto policy = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  auto reference = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  engine::Engine e(c, policy, "dpo", tiny_model());
  e.set_reference(reference);
  e.sync_reference_every(c.ref_model_sync_steps, c.ref_model_mixup_alpha);
  std::map<std::string, std::vector<trainers::PreferenceExample>> splits;
  splits["train"] = std::move(split.examples);
  trainers::DPOTrainer trainer(c, std::move(splits), 0);
  trlx::engine::EngineProbe::step_on(e, trainer, {{0, 1, 2, 3}});
  const auto name = "model.layers.0.self_attn.q_proj.weight";
  auto before = reference->named_parameters(true)[name].detach().clone();
  auto pol = trlx::engine::EngineProbe::policy(e).named_parameters(true)[name].detach().clone();
  CHECK_FALSE(torch::equal(before, pol));
  trlx::engine::EngineProbe::step_on(e, trainer, {{4, 5, 6, 7}});  // syncs after step 1, before its forward
  auto after = reference->named_parameters(true)[name].detach();
  CHECK(torch::allclose(after, 0.25 * pol + 0.75 * before, 1e-6, 1e-7));
}

TEST_CASE("DPO sync_ref_model: a checkpoint carries the moved reference, so a resumed run equals an uninterrupted one",
          "[dpo][resume]") {
  const fs::path out = temp_dir("trdpo_resume");
  auto flags = [&](const std::string& dir) {
    return nlohmann::json{{"sync_ref_model", "true"},     {"ref_model_sync_steps", "1"},
                          {"ref_model_mixup_alpha", "0.5"}, {"max_steps", "4"},
                          {"save_steps", "2"},              {"learning_rate", "1e-3"},
                          {"per_device_train_batch_size", "2"}, {"output_dir", (out / dir).string()}};
  };
  auto full = make(dpo_config(dpo_data() / "text", flags("full")));
  full.engine->train(*full.trainer);
  REQUIRE(fs::exists(out / "full" / "checkpoint-2" / "reference" / "model.safetensors"));
  auto resume_flags = flags("resumed");
  resume_flags["resume_from_checkpoint"] = (out / "full" / "checkpoint-2").string();
  auto resumed = make(dpo_config(dpo_data() / "text", resume_flags));
  resumed.engine->train(*resumed.trainer);
  auto a = full.engine->parameter_values(false), b = resumed.engine->parameter_values(false);
  REQUIRE(a.size() == b.size());
  size_t differ = 0;
  for (const auto& [k, v] : a) differ += torch::equal(v, b.at(k)) ? 0 : 1;
  CHECK(differ == 0);
  // The same resume from a copy without the reference: the run differs,
  // which is what the checkpoint's reference/ prevents.
  fs::copy(out / "full" / "checkpoint-2", out / "noref", fs::copy_options::recursive);
  fs::remove_all(out / "noref" / "reference");
  io::write_manifest(out / "noref");  // as a run that kept no reference would have written it
  auto noref_flags = flags("resumed_noref");
  noref_flags["resume_from_checkpoint"] = (out / "noref").string();
  auto noref = make(dpo_config(dpo_data() / "text", noref_flags));
  noref.engine->train(*noref.trainer);
  auto c = noref.engine->parameter_values(false);
  size_t differ_noref = 0;
  for (const auto& [k, v] : a) differ_noref += torch::equal(v, c.at(k)) ? 0 : 1;
  CHECK(differ_noref > 0);
  fs::remove_all(out);
}

TEST_CASE("sync_ref_model without a separate reference is refused by the engine's step hook", "[dpo]") {
  auto c = dpo_config(dpo_data() / "text", {{"sync_ref_model", "true"}});
  auto policy = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  engine::Engine e(c, policy, "dpo", tiny_model());
  const auto msg = test::input_error_of([&] { e.sync_reference_every(c.ref_model_sync_steps, c.ref_model_mixup_alpha); });
  CHECK_THAT(msg, Contains("separate reference"));
  const auto zero = test::input_error_of([&] { e.sync_reference_every(0, 0.5); });
  CHECK_THAT(zero, Contains("ref_model_sync_steps"));
}

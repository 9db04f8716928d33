// Configs that name hub repos: model_name_or_path / dataset_name / ref_model
// as `org/name` become snapshot directories of the Hugging Face cache (here
// the one huggingface_hub wrote, tests/data/hub_cache), offline.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/hub_paths.hpp"
#include "config/loader.hpp"
#include "core/error.hpp"
#include "env_guard.hpp"
#include "io/hub.hpp"
#include "model/adapter_dir.hpp"
#include "fixture_cache.hpp"
#include "support.hpp"
#include "trainers/distill_config.hpp"
#include "trainers/dpo_config.hpp"
#include "trainers/sft_config.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

using test::fixture_cache;

std::string commit_of(const std::string& repo_id) {
  std::ifstream in(fixture_cache() / "expected.json");
  return nlohmann::json::parse(in).at(repo_id).at("commit");
}

fs::path model_snapshot() {
  return fixture_cache() / "models--trlx-test--tiny-qwen2" / "snapshots" /
         commit_of("trlx-test/tiny-qwen2");
}

template <class C>
C load(const config::Schema& schema, const std::string& yaml,
       std::shared_ptr<config::ConfigLoader>* keep = nullptr) {
  auto loader = std::make_shared<config::ConfigLoader>(schema);
  loader->load_yaml_text(yaml, "hub.yaml");
  C c{};
  loader->resolve(&c);
  if (keep) *keep = loader;
  return c;
}

// Offline, with the fixture cache: nothing here may reach a network.
void offline_fixture_env(test::EnvGuard& env) {
  env.clear_hub();
  env.set("HF_HUB_CACHE", fixture_cache().string());
  env.set("HF_HUB_OFFLINE", "1");
}

}  // namespace

TEST_CASE("a config naming hub repos resolves to their snapshot directories", "[hub][config]") {
  test::EnvGuard env;
  offline_fixture_env(env);
  std::shared_ptr<config::ConfigLoader> loader;
  auto c = load<trainers::DPOConfig>(trainers::dpo_schema(),
                                     "model_name_or_path: trlx-test/tiny-qwen2\n"
                                     "ref_model: trlx-test/tiny-qwen2\n"
                                     "dataset_name: trlx-test/tiny-sft\n",
                                     &loader);
  const auto res =
      config::resolve_hub_paths(trainers::dpo_schema(), &c, config::HubMode::Fetch, loader.get());
  CHECK(res.size() == 3);
  CHECK(c.model_name_or_path == model_snapshot().string());
  CHECK(c.ref_model == model_snapshot().string());
  CHECK(c.dataset_name == (fixture_cache() / "datasets--trlx-test--tiny-sft" / "snapshots" /
                           commit_of("trlx-test/tiny-sft"))
                              .string());
  CHECK(fs::exists(fs::path(*c.model_name_or_path) / "tokenizer.json"));
  // print-config keeps the names as written.
  CHECK(loader->to_yaml().find("model_name_or_path: trlx-test/tiny-qwen2") != std::string::npos);
}

TEST_CASE("model_revision picks the snapshot, and a local path takes none", "[hub][config]") {
  test::EnvGuard env;
  offline_fixture_env(env);
  const std::string commit = commit_of("trlx-test/tiny-qwen2");
  auto c = load<trainers::SFTConfig>(
      trainers::sft_schema(),
      "model_name_or_path: trlx-test/tiny-qwen2\nmodel_revision: " + commit + "\n");
  config::resolve_hub_paths(trainers::sft_schema(), &c, config::HubMode::Fetch);
  CHECK(c.model_name_or_path == model_snapshot().string());

  auto tagged = load<trainers::SFTConfig>(
      trainers::sft_schema(), "model_name_or_path: trlx-test/tiny-qwen2\nmodel_revision: v2\n");
  {
    const std::string msg = test::input_error_of([&] {
      config::resolve_hub_paths(trainers::sft_schema(), &tagged, config::HubMode::Fetch);
    });
    INFO(msg);
    CHECK(msg.find("`model_name_or_path`: not a local path, and hub model `trlx-test/tiny-qwen2` "
                   "(revision v2)") != std::string::npos);
    CHECK(msg.find("revision v2") != std::string::npos);
    CHECK(msg.find("hf download trlx-test/tiny-qwen2 --revision v2") != std::string::npos);
  }

  const std::string local = model_snapshot().string();
  auto with_local = load<trainers::SFTConfig>(
      trainers::sft_schema(), "model_name_or_path: " + local + "\nmodel_revision: v2\n");
  CHECK_THROWS_WITH(
      config::resolve_hub_paths(trainers::sft_schema(), &with_local, config::HubMode::Fetch),
      Catch::Contains("which has no revisions"));
  auto plain_local =
      load<trainers::SFTConfig>(trainers::sft_schema(), "model_name_or_path: " + local + "\n");
  CHECK(config::resolve_hub_paths(trainers::sft_schema(), &plain_local, config::HubMode::Fetch)
            .empty());
  // A revision field whose default is null (distill's teacher_model_revision):
  // main names the default branch, which a local path has anyway; another
  // revision is refused as above.
  auto teacher_main = load<trainers::DistillConfig>(
      trainers::distill_schema(), "teacher_model_name_or_path: " + local + "\nteacher_model_revision: main\n");
  CHECK(config::resolve_hub_paths(trainers::distill_schema(), &teacher_main, config::HubMode::Fetch).empty());
  auto teacher_v2 = load<trainers::DistillConfig>(
      trainers::distill_schema(), "teacher_model_name_or_path: " + local + "\nteacher_model_revision: v2\n");
  CHECK_THROWS_WITH(config::resolve_hub_paths(trainers::distill_schema(), &teacher_v2, config::HubMode::Fetch),
                    Catch::Contains("which has no revisions"));
  CHECK(plain_local.model_name_or_path == local);
}

TEST_CASE("a hub name neither cached nor downloadable names the field and the fetch command",
          "[hub][config]") {
  test::EnvGuard env;
  offline_fixture_env(env);
  std::shared_ptr<config::ConfigLoader> loader;
  auto c = load<trainers::SFTConfig>(trainers::sft_schema(),
                                     "dataset_name: trlx-test/missing-data\n", &loader);
  {
    const std::string msg = test::input_error_of([&] {
      config::resolve_hub_paths(trainers::sft_schema(), &c, config::HubMode::Fetch, loader.get());
    });
    INFO(msg);
    CHECK(msg.find("`dataset_name: trlx-test/missing-data` (hub.yaml:1:1)") != std::string::npos);
    CHECK(msg.find("not a local path, and hub dataset `trlx-test/missing-data`") !=
          std::string::npos);
    CHECK(msg.find("hf download --repo-type dataset trlx-test/missing-data") != std::string::npos);
    CHECK(msg.find("HF_HUB_OFFLINE") != std::string::npos);
    CHECK(msg.find((fixture_cache() / "datasets--trlx-test--missing-data").string()) !=
          std::string::npos);
  }
  // print-config describes, changes nothing and fails on nothing.
  auto d = load<trainers::SFTConfig>(
      trainers::sft_schema(),
      "model_name_or_path: trlx-test/tiny-qwen2\ndataset_name: trlx-test/missing-data\n");
  const auto described =
      config::resolve_hub_paths(trainers::sft_schema(), &d, config::HubMode::Describe);
  REQUIRE(described.size() == 2);
  CHECK(described[0].note.find("(Hugging Face cache)") != std::string::npos);
  CHECK(
      described[1].note.find(
          "a run fails; fetch it with `hf download --repo-type dataset trlx-test/missing-data`") !=
      std::string::npos);
  CHECK(d.model_name_or_path == "trlx-test/tiny-qwen2");
  // validate offline: what a run could not find is an error already.
  auto offline_validate =
      load<trainers::SFTConfig>(trainers::sft_schema(), "dataset_name: trlx-test/missing-data\n");
  CHECK_THROWS_AS(config::resolve_hub_paths(trainers::sft_schema(), &offline_validate,
                                            config::HubMode::CacheOnly),
                  InputError);
  // validate online: a missing repo is a note (training downloads it), not an error.
  env.set("HF_HUB_OFFLINE", std::nullopt);
  env.set("HF_ENDPOINT", "http://127.0.0.1:1");
  auto v =
      load<trainers::SFTConfig>(trainers::sft_schema(), "dataset_name: trlx-test/missing-data\n");
  const auto notes =
      config::resolve_hub_paths(trainers::sft_schema(), &v, config::HubMode::CacheOnly);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].note.find("training downloads it") != std::string::npos);
  CHECK(v.dataset_name == "trlx-test/missing-data");
  // A relative path that does not exist and cannot be a repo is left to the reader's error.
  auto rel =
      load<trainers::SFTConfig>(trainers::sft_schema(), "dataset_name: ./data/train.jsonl\n");
  CHECK(config::resolve_hub_paths(trainers::sft_schema(), &rel, config::HubMode::Fetch).empty());
}

TEST_CASE("a name without an organisation (gpt2-style) resolves through the cache", "[hub][config]") {
  // The fixture's repo copied to the folder huggingface_hub uses for a
  // repo id without an organisation: models--tiny-qwen2.
  test::TempDir cache;
  fs::copy(fixture_cache() / "models--trlx-test--tiny-qwen2", cache.path / "models--tiny-qwen2",
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  test::EnvGuard env;
  env.clear_hub();
  env.set("HF_HUB_CACHE", cache.path.string());
  env.set("HF_HUB_OFFLINE", "1");
  auto c = load<trainers::SFTConfig>(trainers::sft_schema(), "model_name_or_path: tiny-qwen2\n");
  config::resolve_hub_paths(trainers::sft_schema(), &c, config::HubMode::Fetch);
  CHECK(c.model_name_or_path ==
        (cache.path / "models--tiny-qwen2" / "snapshots" / commit_of("trlx-test/tiny-qwen2")).string());
  CHECK(fs::exists(fs::path(*c.model_name_or_path) / "tokenizer.json"));
  // A missing file name stays a path: the reader reports it, not the hub.
  auto f = load<trainers::SFTConfig>(trainers::sft_schema(), "dataset_name: train.jsonl\n");
  CHECK(config::resolve_hub_paths(trainers::sft_schema(), &f, config::HubMode::Fetch).empty());
  CHECK(f.dataset_name == "train.jsonl");
}

TEST_CASE("an adapter whose base is a hub name finds the base in the cache", "[hub][config]") {
  test::EnvGuard env;
  offline_fixture_env(env);
  test::TempDir adapter;
  adapter.write(
      "adapter_config.json",
      R"({"base_model_name_or_path": "trlx-test/tiny-qwen2", "revision": null, "peft_type": "LORA"})");
  CHECK(model::adapter_base_dir(adapter.path) == model_snapshot());
  adapter.write("adapter_config.json",
                R"({"base_model_name_or_path": "trlx-test/not-cached", "peft_type": "LORA"})");
  CHECK_THROWS_WITH(model::adapter_base_dir(adapter.path),
                    Catch::Contains("base_model_name_or_path `trlx-test/not-cached`") &&
                        Catch::Contains("hf download trlx-test/not-cached"));
}

// The Hugging Face cache as huggingface_hub writes it: tests/data/hub_cache
// was filled by huggingface_hub's snapshot_download
// (scripts/fixtures/hub_cache_fixture.py); trlx must find its snapshots, by
// branch and by commit, and see what is missing.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "env_guard.hpp"
#include "io/hub.hpp"
#include "fixture_cache.hpp"
#include "support.hpp"

using namespace trlx;
namespace fs = std::filesystem;
namespace hub = trlx::io::hub;

namespace {

using test::fixture_cache;

nlohmann::json expected() {
  std::ifstream in(fixture_cache() / "expected.json");
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("the hub cache is HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub",
          "[hub]") {
  test::EnvGuard env;
  env.clear_hub();
  env.set("HOME", "/home/someone");
  CHECK(hub::default_cache_dir() == fs::path("/home/someone/.cache/huggingface/hub"));
  env.set("XDG_CACHE_HOME", "/xdg");
  CHECK(hub::default_cache_dir() == fs::path("/xdg/huggingface/hub"));
  env.set("HF_HOME", "/data/hf");
  CHECK(hub::default_cache_dir() == fs::path("/data/hf/hub"));
  env.set("HF_HUB_CACHE", "/fast/hub");
  CHECK(hub::default_cache_dir() == fs::path("/fast/hub"));

  auto o = hub::HubOptions::from_env();
  CHECK(o.endpoint == "https://huggingface.co");
  CHECK_FALSE(o.offline);
  CHECK(o.token.empty());
  env.set("HF_ENDPOINT", "https://mirror.example/");
  env.set("HF_HUB_OFFLINE", "1");
  env.set("HF_TOKEN", "hf_abc");
  o = hub::HubOptions::from_env();
  CHECK(o.endpoint == "https://mirror.example");
  CHECK(o.offline);
  CHECK(o.token == "hf_abc");
  env.set("HF_HUB_OFFLINE", "0");
  CHECK_FALSE(hub::HubOptions::from_env().offline);
  // The token file `hf auth login` writes, when HF_TOKEN is unset.
  test::TempDir home;
  home.write("token", "hf_from_file\n");
  env.set("HF_TOKEN", std::nullopt);
  env.set("HF_HOME", home.path.string());
  CHECK(hub::HubOptions::from_env().token == "hf_from_file");
}

TEST_CASE("repo folders and names follow huggingface_hub", "[hub]") {
  CHECK(hub::repo_folder({hub::RepoType::Model, "Qwen/Qwen2-0.5B-Instruct", "main"}) ==
        "models--Qwen--Qwen2-0.5B-Instruct");
  CHECK(hub::repo_folder({hub::RepoType::Dataset, "trl-lib/ultrafeedback_binarized", "main"}) ==
        "datasets--trl-lib--ultrafeedback_binarized");
  CHECK(hub::repo_folder({hub::RepoType::Model, "gpt2", "main"}) == "models--gpt2");
  for (const std::string ok :
       {"Qwen/Qwen2-0.5B-Instruct", "trl-lib/ultrafeedback_binarized", "a/b.c", "org_1/x", "gpt2",
        "bert-base-uncased"})
    CHECK(hub::looks_like_repo_id(ok));
  // Without an organisation, a dot makes it a file name.
  for (const std::string bad : {"train.jsonl", "model.safetensors", "-gpt2", "gpt2-", "a/b/c", "/abs/path", "a//b", "a--b/c", "a/b..c", "-a/b",
                                "a/b-", "", "a/b c", "./a/b"})
    CHECK_FALSE(hub::looks_like_repo_id(bad));
  CHECK(hub::is_commit_hash("b545adb7c5ebf637baaa4c231d47a8287a684ea6"));
  // A snapshot directory names its repo; refs/main says whether it is main.
  const std::string commit = "b545adb7c5ebf637baaa4c231d47a8287a684ea6";
  const auto of_fixture = hub::repo_of_snapshot(fixture_cache() / "models--trlx-test--tiny-qwen2" / "snapshots" / commit);
  REQUIRE(of_fixture);
  CHECK(of_fixture->repo_id == "trlx-test/tiny-qwen2");
  CHECK(of_fixture->revision == "main");
  CHECK(of_fixture->type == hub::RepoType::Model);
  const auto other = hub::repo_of_snapshot(fs::path("/c/datasets--gpt2/snapshots") / std::string(40, 'a'));
  REQUIRE(other);
  CHECK(other->repo_id == "gpt2");
  CHECK(other->revision == std::string(40, 'a'));
  CHECK(other->type == hub::RepoType::Dataset);
  for (const fs::path& bad : {fs::path("/c/models--a--b/snapshots/main"), fs::path("/c/models--a--b") / commit,
                             fs::path("/c/other--a--b/snapshots") / commit, fs::path("/c/models--a--b--c/snapshots") / commit})
    CHECK_FALSE(hub::repo_of_snapshot(bad));
  CHECK_FALSE(hub::is_commit_hash("main"));
  CHECK(hub::fetch_command({hub::RepoType::Model, "org/name", "main"}) == "hf download org/name");
  CHECK(hub::fetch_command({hub::RepoType::Dataset, "org/name", "v2"}) ==
        "hf download --repo-type dataset org/name --revision v2");
}

TEST_CASE("a cache written by huggingface_hub is found by branch and by commit", "[hub]") {
  const auto exp = expected();
  for (const auto& [repo_id, r] : exp.items()) {
    INFO(repo_id);
    const auto type = r.at("type") == "model" ? hub::RepoType::Model : hub::RepoType::Dataset;
    const std::string commit = r.at("commit");
    const fs::path snap =
        fixture_cache() / hub::repo_folder({type, repo_id, "main"}) / "snapshots" / commit;
    std::string why;
    const auto by_branch = hub::cached_snapshot({type, repo_id, "main"}, fixture_cache(), &why);
    INFO(why);
    REQUIRE(by_branch);
    CHECK(*by_branch == snap);
    const auto by_commit = hub::cached_snapshot({type, repo_id, commit}, fixture_cache());
    REQUIRE(by_commit);
    CHECK(*by_commit == snap);
    const auto other = hub::cached_snapshot({type, repo_id, "v2"}, fixture_cache(), &why);
    CHECK_FALSE(other);
    CHECK(why == "no refs/v2");
    // Files are relative symlinks into blobs/, whose names are the etags
    // the hub announced: sha256 for LFS files (checked here by trlx's sha256
    // against the values Python's hashlib gave).
    for (const auto& [rel, f] : r.at("files").items()) {
      if (!fs::exists(snap / rel)) continue;
      INFO(rel);
      CHECK(fs::is_symlink(snap / rel));
      CHECK(fs::read_symlink(snap / rel).is_relative());
      CHECK(fs::canonical(snap / rel).filename() == f.at("etag").get<std::string>());
      if (f.at("lfs")) CHECK(hub::sha256_file(snap / rel) == f.at("etag").get<std::string>());
      CHECK(fs::file_size(snap / rel) == f.at("size").get<uint64_t>());
    }
  }
  CHECK_FALSE(
      hub::cached_snapshot({hub::RepoType::Model, "trlx-test/absent", "main"}, fixture_cache()));
  // The same name as a dataset is another repo.
  CHECK_FALSE(hub::cached_snapshot({hub::RepoType::Dataset, "trlx-test/tiny-qwen2", "main"},
                                   fixture_cache()));
}

TEST_CASE("sha256 matches the standard's test vectors", "[hub]") {
  CHECK(hub::sha256_hex("", 0) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hub::sha256_hex("abc", 3) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(hub::sha256_hex(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("a snapshot missing what trlx needs is not used as is", "[hub]") {
  test::TempDir cache;
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const hub::RepoRef ref{hub::RepoType::Model, "org/partial", "main"};
  const fs::path repo = cache.path / "models--org--partial";
  cache.write("models--org--partial/refs/main", commit);
  cache.write("models--org--partial/snapshots/" + commit + "/config.json", "{}");
  std::string why;
  CHECK_FALSE(hub::cached_snapshot(ref, cache.path, &why));
  CHECK(why.find("no model.safetensors") != std::string::npos);
  // An index whose shards are not all there.
  cache.write(
      "models--org--partial/snapshots/" + commit + "/model.safetensors.index.json",
      R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  cache.write("models--org--partial/snapshots/" + commit + "/model-00001-of-00002.safetensors",
              "x");
  CHECK_FALSE(hub::cached_snapshot(ref, cache.path, &why));
  CHECK(why.find("model-00002-of-00002.safetensors") != std::string::npos);
  cache.write("models--org--partial/snapshots/" + commit + "/model-00002-of-00002.safetensors",
              "x");
  CHECK(hub::cached_snapshot(ref, cache.path, &why) == repo / "snapshots" / commit);
}

TEST_CASE("trlx takes from a repo the files it reads", "[hub]") {
  const auto exp = expected();
  std::vector<std::string> model_files, dataset_files;
  for (const auto& [rel, f] : exp.at("trlx-test/tiny-qwen2").at("files").items())
    model_files.push_back(rel);
  for (const auto& [rel, f] : exp.at("trlx-test/tiny-sft").at("files").items())
    dataset_files.push_back(rel);
  const auto m = hub::needed_files(hub::RepoType::Model, model_files);
  CHECK(std::find(m.begin(), m.end(), "README.md") == m.end());
  for (const std::string f : {"config.json", "generation_config.json", "tokenizer.json",
                              "tokenizer_config.json", "model.safetensors.index.json"})
    CHECK(std::find(m.begin(), m.end(), f) != m.end());
  CHECK(hub::needed_files(hub::RepoType::Dataset, dataset_files) ==
        std::vector<std::string>{"data/test.jsonl", "data/train.jsonl"});
  CHECK(hub::needed_files(hub::RepoType::Model, {"adapter_config.json", "adapter_model.safetensors",
                                                 ".gitattributes", "pytorch_model.bin"}) ==
        std::vector<std::string>{"adapter_config.json", "adapter_model.safetensors"});
}

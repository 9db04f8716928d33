// trlx's downloader against a local stand-in for the hub (hub_server.cpp),
// serving the repos of the cache huggingface_hub wrote
// (tests/data/hub_cache): what trlx writes into an empty cache must be that
// same cache, whatever the network does on the way.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "env_guard.hpp"
#include "hub_server.hpp"
#include "io/hub.hpp"
#include "fixture_cache.hpp"
#include "support.hpp"

extern char** environ;

using namespace trlx;
namespace fs = std::filesystem;
namespace hub = trlx::io::hub;

namespace {

const std::string kModel = "trlx-test/tiny-qwen2";
const std::string kDataset = "trlx-test/tiny-sft";

using test::fixture_cache;

hub::HubOptions options_for(const test::HubServer& server, const fs::path& cache) {
  hub::HubOptions o;
  o.cache = cache;
  o.endpoint = server.endpoint();
  o.progress = false;
  return o;
}

// A repo folder's content: each regular file with its bytes' size, each
// symlink with its target, refs with their text. The trees/ and .no_exist/
// folders are huggingface_hub's own bookkeeping, not the layout.
std::map<std::string, std::string> layout(const fs::path& repo_dir) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(repo_dir);
       it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = fs::relative(it->path(), repo_dir).generic_string();
    if (rel.rfind("trees", 0) == 0 || rel.rfind(".no_exist", 0) == 0) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_symlink()) {
      out[rel] = "-> " + fs::read_symlink(it->path()).generic_string();
    } else if (it->is_regular_file()) {
      std::ifstream in(it->path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      out[rel] = rel.rfind("refs/", 0) == 0 ? ss.str() : std::to_string(ss.str().size()) + " bytes";
    }
  }
  return out;
}

std::string lfs_shard_etag(const test::HubServer& server) {
  for (const auto& [rel, f] : server.repos().at(kModel).files)
    if (f.lfs && f.present) return f.etag;
  return "";
}

size_t leftovers(const fs::path& cache) {
  size_t n = 0;
  if (!fs::exists(cache)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(cache)) {
    const std::string name = e.path().filename().string();
    if (name.find(".incomplete") != std::string::npos || name.find(".tmp-") != std::string::npos)
      ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("trlx downloads into the cache layout huggingface_hub writes", "[hub][download]") {
  test::HubServer server(fixture_cache());
  test::TempDir cache;
  const auto o = options_for(server, cache.path);
  for (const auto& [repo_id, type] :
       {std::pair{kModel, hub::RepoType::Model}, std::pair{kDataset, hub::RepoType::Dataset}}) {
    INFO(repo_id);
    const hub::RepoRef ref{type, repo_id, "main"};
    const fs::path snap = hub::snapshot(ref, o);
    CHECK(snap ==
          cache.path / hub::repo_folder(ref) / "snapshots" / server.repos().at(repo_id).commit);
    CHECK(layout(cache.path / hub::repo_folder(ref)) ==
          layout(fixture_cache() / hub::repo_folder(ref)));
  }
  // The lock files sit where huggingface_hub keeps them.
  CHECK(fs::exists(cache.path / ".locks" / "models--trlx-test--tiny-qwen2" /
                   (lfs_shard_etag(server) + ".lock")));
  // What trlx does not read is not fetched; the CDN never sees credentials.
  for (const auto& r : server.requests()) CHECK(r.path.find("README.md") == std::string::npos);
  CHECK(leftovers(cache.path) == 0);
  // A second call finds everything cached: no request at all.
  const size_t before = server.requests().size();
  hub::snapshot({hub::RepoType::Model, kModel, "main"}, o);
  CHECK(server.requests().size() == before);
}

TEST_CASE("a revision given as a commit is fetched without a ref", "[hub][download]") {
  test::HubServer server(fixture_cache());
  test::TempDir cache;
  const std::string commit = server.repos().at(kModel).commit;
  const fs::path snap =
      hub::snapshot({hub::RepoType::Model, kModel, commit}, options_for(server, cache.path));
  CHECK(snap.filename() == commit);
  CHECK_FALSE(fs::exists(cache.path / "models--trlx-test--tiny-qwen2" / "refs"));
}

TEST_CASE("an interrupted download resumes with a Range request", "[hub][download]") {
  test::HubServer server(fixture_cache());
  server.cut_after = 5000;
  test::TempDir cache;
  const hub::RepoRef ref{hub::RepoType::Model, kModel, "main"};
  const fs::path snap = hub::snapshot(ref, options_for(server, cache.path));
  CHECK(layout(cache.path / hub::repo_folder(ref)) ==
        layout(fixture_cache() / hub::repo_folder(ref)));
  size_t resumed = 0;
  for (const auto& r : server.requests())
    if (r.path.rfind("/cdn/", 0) == 0 && r.range == "bytes=5000-") ++resumed;
  CHECK(resumed == 3);  // each of the three shards broke once
  for (const auto& [rel, f] : server.repos().at(kModel).files)
    if (f.lfs) CHECK(hub::sha256_file(snap / rel) == f.etag);
}

TEST_CASE("a part left by a killed run is resumed, not fetched again", "[hub][download]") {
  test::HubServer server(fixture_cache());
  test::TempDir cache;
  const std::string etag = lfs_shard_etag(server);
  std::string first_part;
  for (const auto& [rel, f] : server.repos().at(kModel).files)
    if (f.etag == etag) first_part = f.data.substr(0, 7000);
  cache.write("models--trlx-test--tiny-qwen2/blobs/" + etag + ".incomplete", first_part);
  hub::snapshot({hub::RepoType::Model, kModel, "main"}, options_for(server, cache.path));
  size_t ranged = 0, whole = 0;
  for (const auto& r : server.requests()) {
    if (r.path != "/cdn/" + etag) continue;
    (r.range == "bytes=7000-" ? ranged : whole)++;
  }
  CHECK(ranged == 1);
  CHECK(whole == 0);
  CHECK(hub::sha256_file(cache.path / "models--trlx-test--tiny-qwen2" / "blobs" / etag) == etag);
}

TEST_CASE("a download whose sha256 is not the etag is refused and removed", "[hub][download]") {
  test::HubServer server(fixture_cache());
  server.corrupt = true;
  test::TempDir cache;
  const hub::RepoRef ref{hub::RepoType::Model, kModel, "main"};
  try {
    hub::snapshot(ref, options_for(server, cache.path));
    FAIL("a corrupted download was accepted");
  } catch (const InputError&) {
    FAIL("a checksum mismatch is a failed download, not bad input");
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("checksum mismatch") != std::string::npos);
    CHECK(msg.find("model-0000") != std::string::npos);
  }
  // No blob with a wrong content, no half file, no snapshot that looks complete.
  for (const auto& e :
       fs::recursive_directory_iterator(cache.path / hub::repo_folder(ref) / "blobs")) {
    const std::string name = e.path().filename().string();
    if (name.size() == 64) CHECK(hub::sha256_file(e.path()) == name);
  }
  CHECK(leftovers(cache.path) == 0);
  CHECK_FALSE(hub::cached_snapshot(ref, cache.path));
}

TEST_CASE("a repo the hub does not know is one clear error, naming how to fetch it",
          "[hub][download]") {
  test::HubServer server(fixture_cache());
  test::TempDir cache;
  {
    const std::string msg = test::input_error_of([&] {
      hub::snapshot({hub::RepoType::Model, "trlx-test/absent", "main"},
                    options_for(server, cache.path));
    });
    INFO(msg);
    CHECK(msg.find("trlx-test/absent") != std::string::npos);
    CHECK(msg.find("revision main") != std::string::npos);
    CHECK(msg.find((cache.path / "models--trlx-test--absent").string()) != std::string::npos);
    CHECK(msg.find("HTTP 404") != std::string::npos);
    CHECK(msg.find("`hf download trlx-test/absent`") != std::string::npos);
  }
  // A model name asked for as a dataset is another repo.
  {
    const std::string msg = test::input_error_of([&] {
      hub::snapshot({hub::RepoType::Dataset, kModel, "main"}, options_for(server, cache.path));
    });
    CHECK(msg.find("hf download --repo-type dataset trlx-test/tiny-qwen2") != std::string::npos);
  }
}

TEST_CASE("a private repo needs HF_TOKEN, which never goes to the CDN", "[hub][download]") {
  test::HubServer server(fixture_cache());
  server.required_token = "hf_secret";
  test::TempDir cache;
  auto o = options_for(server, cache.path);
  {
    const std::string msg = test::input_error_of([&] {
      hub::snapshot({hub::RepoType::Model, kModel, "main"}, o);
    });
    INFO(msg);
    CHECK(msg.find("HTTP 401") != std::string::npos);
    CHECK(msg.find("set HF_TOKEN") != std::string::npos);
  }
  o.token = "hf_wrong";
  {
    const std::string msg = test::input_error_of([&] {
      hub::snapshot({hub::RepoType::Model, kModel, "main"}, o);
    });
    CHECK(msg.find("was refused") != std::string::npos);
  }
  o.token = "hf_secret";
  CHECK(fs::is_directory(hub::snapshot({hub::RepoType::Model, kModel, "main"}, o)));
  size_t cdn = 0;
  for (const auto& r : server.requests()) {
    if (r.path.rfind("/cdn/", 0) == 0) {
      ++cdn;
      CHECK(r.authorization.empty());
    } else if (r.path.find("/resolve/") != std::string::npos) {
      CHECK((r.authorization == "Bearer hf_secret" || r.authorization == "Bearer hf_wrong" ||
             r.authorization.empty()));
    }
  }
  CHECK(cdn == 3);
}

TEST_CASE("HF_HUB_OFFLINE uses the cache and never the network", "[hub][download]") {
  test::HubServer server(fixture_cache());
  test::TempDir cache;
  auto o = options_for(server, cache.path);
  o.offline = true;
  test::EnvGuard env;
  env.set("HF_HUB_OFFLINE", "1");
  {
    const std::string msg = test::input_error_of([&] {
      hub::snapshot({hub::RepoType::Model, kModel, "main"}, o);
    });
    INFO(msg);
    CHECK(msg.find("HF_HUB_OFFLINE") != std::string::npos);
    CHECK(msg.find("`hf download trlx-test/tiny-qwen2`") != std::string::npos);
    CHECK(msg.find(cache.path.string()) != std::string::npos);
  }
  CHECK(server.requests().empty());
  o.cache = fixture_cache();
  CHECK(hub::snapshot({hub::RepoType::Dataset, kDataset, "main"}, o).filename() ==
        server.repos().at(kDataset).commit);
  CHECK(server.requests().empty());
}

TEST_CASE("an unreachable hub is a network error in the message", "[hub][download]") {
  test::TempDir cache;
  hub::HubOptions o;
  o.cache = cache.path;
  o.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  o.progress = false;
  {
    const std::string msg = test::input_error_of([&] {
      hub::snapshot({hub::RepoType::Model, kModel, "main"}, o);
    });
    INFO(msg);
    CHECK(msg.find("network error") != std::string::npos);
    CHECK(msg.find("hf download trlx-test/tiny-qwen2") != std::string::npos);
  }
}

// Run by the test below in two processes at once (hidden from the test list).
TEST_CASE("hub download child", "[.hub_child]") {
  hub::HubOptions o = hub::HubOptions::from_env();
  o.progress = false;
  const fs::path snap = hub::snapshot({hub::RepoType::Model, kModel, "main"}, o);
  std::ofstream(std::getenv("TRLX_HUB_CHILD_OUT")) << snap.string();
}

TEST_CASE("two processes downloading at once end with one complete copy", "[hub][download]") {
  test::HubServer server(fixture_cache());
  server.blob_delay_ms = 300;  // both are in flight together
  test::TempDir cache;
  test::EnvGuard env;
  env.clear_hub();
  env.set("HF_HUB_CACHE", cache.path.string());
  env.set("HF_ENDPOINT", server.endpoint());
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    env.set("TRLX_HUB_CHILD_OUT", (cache.path / ("out" + std::to_string(i))).string());
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    std::vector<std::string> args = {self, "[.hub_child]"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) == 0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  const std::string expected_snap = (cache.path / "models--trlx-test--tiny-qwen2" / "snapshots" /
                                     server.repos().at(kModel).commit)
                                        .string();
  for (int i = 0; i < 2; ++i) {
    std::ifstream in(cache.path / ("out" + std::to_string(i)));
    std::string got;
    std::getline(in, got);
    CHECK(got == expected_snap);
  }
  // Each blob crossed the network once; the other process waited on the lock.
  for (const auto& [rel, f] : server.repos().at(kModel).files)
    if (f.lfs && f.present) CHECK(server.count("GET", "/cdn/" + f.etag) == 1);
  CHECK(layout(cache.path / "models--trlx-test--tiny-qwen2") ==
        layout(fixture_cache() / "models--trlx-test--tiny-qwen2"));
  CHECK(leftovers(cache.path) == 0);
}

#pragma once
// A local stand-in for the Hugging Face hub, for trlx's downloader tests: it
// serves the repos of the committed cache tests/data/hub_cache (written by
// huggingface_hub, scripts/fixtures/hub_cache_fixture.py) the way the hub
// does:
//   GET  /api/{models|datasets}/{org}/{name}/revision/{rev}  {"sha", "siblings"}
//   HEAD/GET /[datasets/]{org}/{name}/resolve/{rev}/{file}   X-Repo-Commit, ETag;
//        LFS files: 302 to http://localhost:{port}/cdn/{sha256} with
//        X-Linked-Etag and X-Linked-Size (another host name: credentials
//        must not follow)
//   GET  /cdn/{sha256}   the bytes; `Range: bytes=N-` answered with 206
// Knobs make it fail the ways a real network does.
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace trlx::test {

class HubServer {
 public:
  struct Request {
    std::string method, path, range, authorization;
  };
  struct File {
    std::string etag;
    bool lfs = false;
    std::string data;  // empty and `present` false for files the cache lacks (README.md)
    bool present = false;
  };
  struct Repo {
    std::string type;  // "model" / "dataset"
    std::string commit;
    std::map<std::string, File> files;
  };

  // Loads the repos of `cache_dir` (its expected.json and snapshots).
  explicit HubServer(const std::filesystem::path& cache_dir);
  ~HubServer();
  HubServer(const HubServer&) = delete;
  HubServer& operator=(const HubServer&) = delete;

  std::string endpoint() const;  // http://127.0.0.1:<port>
  std::vector<Request> requests() const;
  size_t count(const std::string& method, const std::string& path_prefix) const;

  // Knobs (set before requests).
  std::string required_token;  // non-empty: /api and /resolve answer 401 without "Bearer <token>"
  size_t cut_after = 0;   // non-zero: the first full GET of each blob stops after this many bytes
  bool corrupt = false;   // blobs are served with one byte changed
  int blob_delay_ms = 0;  // wait before serving a blob (overlapping clients)

  const std::map<std::string, Repo>& repos() const { return repos_; }

 private:
  void serve();
  void handle(int fd);

  std::map<std::string, Repo> repos_;         // by repo id
  std::map<std::string, std::string> blobs_;  // etag -> bytes
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<Request> requests_;
  std::map<std::string, bool> cut_done_;
  std::vector<std::thread> workers_;
};

}  // namespace trlx::test

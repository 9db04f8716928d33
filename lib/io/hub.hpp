#pragma once
// Hugging Face hub repos (models, datasets) in the local hub cache, laid out
// exactly as huggingface_hub lays it out, so that what `hf download` or a
// Python run fetched is used as is and what trlx fetches serves them too:
//
//   <cache>/models--org--name/refs/main                 the commit that `main` names
//   <cache>/models--org--name/snapshots/<commit>/<file> relative symlink to ../../blobs/<etag>
//   <cache>/models--org--name/blobs/<etag>              the file's bytes (sha256 for LFS files)
//   <cache>/.locks/models--org--name/<etag>.lock        held while one process downloads a blob
//
// The cache is HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub.
// Downloads (HF_ENDPOINT, default https://huggingface.co; HF_TOKEN) go
// through libcurl into `<blob>.incomplete`, resume with a Range request,
// are checked (sha256 against an LFS etag, else the size) and renamed into
// place, so a complete blob is never half written. HF_HUB_OFFLINE=1 forbids
// downloads.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace trlx::io::hub {

// HF_HOME, else XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
std::filesystem::path hf_home();

// Whether this trlx downloads (built with libcurl); without, only the cache
// and local directories serve.
bool downloads_built();

enum class RepoType { Model, Dataset };

struct RepoRef {
  RepoType type = RepoType::Model;
  std::string repo_id;            // "org/name"
  std::string revision = "main";  // branch, tag or 40-hex commit
};

// Where and how to fetch; from_env() reads the HF_* variables.
struct HubOptions {
  std::filesystem::path cache;
  std::string endpoint = "https://huggingface.co";
  std::string token;  // HF_TOKEN, else the token file huggingface_hub writes; "" for none
  bool offline = false;
  bool progress = true;  // progress lines on stderr for files over 10 MB
  static HubOptions from_env();
};

std::filesystem::path default_cache_dir();
// "models--org--name" / "datasets--org--name".
std::string repo_folder(const RepoRef& ref);
// True for `org/name` that the hub would accept as a repo id (letters,
// digits, `-`, `_`, `.`; no `--` or `..`; at most 96 characters), and for
// a name without an organisation (`gpt2`) that has no dot.
bool looks_like_repo_id(const std::string& s);
bool is_commit_hash(const std::string& s);
// The repo a snapshot directory of a Hugging Face cache holds
// (<cache>/models--org--name/snapshots/<commit>), at revision "main" when
// the cache's refs/main names that commit and at the commit otherwise;
// nullopt for any other path.
std::optional<RepoRef> repo_of_snapshot(const std::filesystem::path& dir);
// `hf download org/name` (with --repo-type dataset / --revision as needed).
std::string fetch_command(const RepoRef& ref);

// The snapshot directory of `ref` in the cache when it holds what trlx needs
// (a model: config.json and its safetensors weights, or an adapter; a
// dataset: a data file); nullopt otherwise. `why` gets what is missing.
std::optional<std::filesystem::path> cached_snapshot(const RepoRef& ref,
                                                     const std::filesystem::path& cache,
                                                     std::string* why = nullptr);

// The snapshot directory, from the cache or downloaded into it. InputError
// (exit 2) when it is neither cached nor downloadable: the name, revision,
// cache path searched, the command that fetches it, and why the download
// failed (offline, HTTP 401/404, network error). trlx::Error when a download
// breaks (checksum mismatch, disk full).
std::filesystem::path snapshot(const RepoRef& ref, const HubOptions& options);

// The files trlx needs out of a repo's file list.
std::vector<std::string> needed_files(RepoType type, const std::vector<std::string>& repo_files);

// SHA-256 of a file's bytes, lower-case hex.
std::string sha256_file(const std::filesystem::path& file);
std::string sha256_hex(const void* data, size_t size);

}  // namespace trlx::io::hub

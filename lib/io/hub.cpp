// The Hugging Face hub cache, laid out as huggingface_hub lays it out, and downloads into it over libcurl.
#include "io/hub.hpp"

#if TRLX_HAVE_CURL
#include <curl/curl.h>
#endif
#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/version.hpp"

namespace trlx::io::hub {

namespace fs = std::filesystem;

namespace {

// ---- SHA-256 (FIPS 180-4) ----------------------------------------------------

class Sha256 {
 public:
  void update(const unsigned char* p, size_t n) {
    total_ += n;
    while (n > 0) {
      const size_t take = std::min(n, size_t{64} - fill_);
      std::memcpy(buf_.data() + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ == 64) {
        block(buf_.data());
        fill_ = 0;
      }
    }
  }
  std::string hex() {
    const uint64_t bits = total_ * 8;
    const unsigned char one = 0x80, zero = 0;
    update(&one, 1);
    while (fill_ != 56) update(&zero, 1);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(len, 8);
    std::string out;
    for (uint32_t v : h_) out += fmt::format("{:08x}", v);
    return out;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void block(const unsigned char* p) {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (uint32_t{p[4 * i]} << 24) | (uint32_t{p[4 * i + 1]} << 16) |
             (uint32_t{p[4 * i + 2]} << 8) | uint32_t{p[4 * i + 3]};
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 =
          h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }
  std::array<uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> buf_{};
  size_t fill_ = 0;
  uint64_t total_ = 0;
};

// ---- environment --------------------------------------------------------------

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool env_true(const char* name) {
  std::string v = env(name);
  for (auto& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string kind_word(RepoType t) { return t == RepoType::Model ? "model" : "dataset"; }

// ---- HTTP (libcurl) -------------------------------------------------------------

struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // of the last response, names lower-cased
  std::string body;
  std::string error;  // curl's error text when the transfer failed
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

#if TRLX_HAVE_CURL
void curl_global() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    r->headers.clear();  // a new response (after a redirect)
  } else if (auto colon = line.find(':'); colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r->headers[name] = trim(line.substr(colon + 1));
  }
  return size * n;
}

size_t on_body_string(char* data, size_t size, size_t n, void* user) {
  static_cast<Response*>(user)->body.append(data, size * n);
  return size * n;
}

struct Curl {
  CURL* h;
  curl_slist* headers = nullptr;
  Curl() {
    curl_global();
    h = curl_easy_init();
    if (!h) throw Error("libcurl: cannot start a transfer");
  }
  ~Curl() {
    if (headers) curl_slist_free_all(headers);
    curl_easy_cleanup(h);
  }
  void common(const std::string& url, const HubOptions& o, Response& r) {
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    static const std::string agent = std::string("trlx/") + version();
    curl_easy_setopt(h, CURLOPT_USERAGENT, agent.c_str());
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    // A stalled transfer (under 1 byte/s for 60 s) fails and can be resumed.
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    headers = curl_slist_append(headers, "Accept-Encoding: identity");
    // libcurl sends a custom Authorization header to the first host only,
    // never to the CDN a file is redirected to.
    if (!o.token.empty())
      headers = curl_slist_append(headers, ("Authorization: Bearer " + o.token).c_str());
  }
  void add_header(const std::string& h_line) {
    headers = curl_slist_append(headers, h_line.c_str());
  }
  void perform(Response& r) {
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    char err[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    const CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    if (rc != CURLE_OK) r.error = err[0] ? std::string(err) : curl_easy_strerror(rc);
  }
};

Response http_get_text(const std::string& url, const HubOptions& o) {
  Response r;
  Curl c;
  c.common(url, o, r);
  curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_body_string);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &r);
  c.perform(r);
  return r;
}

Response http_head(const std::string& url, const HubOptions& o) {
  Response r;
  Curl c;
  c.common(url, o, r);
  curl_easy_setopt(c.h, CURLOPT_NOBODY, 1L);
  // The file's metadata is on the hub's own response, a redirect to the CDN
  // included: that redirect is not followed.
  curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 0L);
  c.perform(r);
  return r;
}
#else
// Built without libcurl (a machine without its headers): everything but
// downloading works, models and datasets already in the cache included.
[[noreturn]] void no_downloads(const std::string& url) {
  fail_input("cannot fetch {}: this trlx was built without libcurl, so it does not download from the Hugging Face "
             "hub; download there with `huggingface-cli download` (into HF_HOME's cache, which trlx reads) or give "
             "a local directory, or rebuild trlx with libcurl's headers (Debian: libcurl4-openssl-dev)",
             url);
}
Response http_get_text(const std::string& url, const HubOptions&) { no_downloads(url); }
Response http_head(const std::string& url, const HubOptions&) { no_downloads(url); }
#endif

std::string url_escape(const std::string& s, bool keep_slash) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~' ||
        (keep_slash && ch == '/'))
      out += static_cast<char>(ch);
    else
      out += fmt::format("%{:02X}", ch);
  }
  return out;
}

// ---- the not-found error ------------------------------------------------------------

[[noreturn]] void fail_unavailable(const RepoRef& ref, const fs::path& cache,
                                   const std::string& cached_why, const std::string& download_why) {
  fail_input(
      "hub {} `{}` (revision {}) is not in the Hugging Face cache ({}: {}) and could not be "
      "downloaded: {}. "
      "Fetch it with `{}`{}",
      kind_word(ref.type), ref.repo_id, ref.revision, (cache / repo_folder(ref)).string(),
      cached_why, download_why, fetch_command(ref),
      env_true("HF_HUB_OFFLINE")
          ? " on a machine with network access into this cache, or unset HF_HUB_OFFLINE"
          : " (set HF_HUB_CACHE or HF_HOME if the cache is elsewhere)");
}

std::string http_reason(const Response& r, const HubOptions& o, const std::string& url) {
  if (!r.error.empty()) return fmt::format("network error reaching {}: {}", url, r.error);
  switch (r.status) {
    case 401:
      return fmt::format("HTTP 401 from {} (no such repo, or a private or gated one: {})", url,
                         o.token.empty() ? "set HF_TOKEN to a token with access"
                                         : "the token in HF_TOKEN was refused");
    case 403:
      return fmt::format(
          "HTTP 403 from {} (a gated repo: request access on its page, with the account of "
          "HF_TOKEN)",
          url);
    case 404:
      return fmt::format("HTTP 404 from {} (no such repo, revision or file)", url);
    default:
      return fmt::format("HTTP {} from {}", r.status, url);
  }
}

// ---- cache --------------------------------------------------------------------

bool weights_complete(const fs::path& snap, std::string* why) {
  if (fs::exists(snap / "model.safetensors")) return true;
  const fs::path index = snap / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    if (why) *why = "the snapshot has no model.safetensors or model.safetensors.index.json";
    return false;
  }
  try {
    const auto j = nlohmann::json::parse(read_text(index));
    for (const auto& [name, shard] : j.at("weight_map").items()) {
      (void)name;
      if (!fs::exists(snap / shard.get<std::string>())) {
        if (why) *why = "the snapshot lacks the shard " + shard.get<std::string>();
        return false;
      }
    }
  } catch (const nlohmann::json::exception& e) {
    if (why) *why = fmt::format("{}: {}", index.string(), e.what());
    return false;
  }
  return true;
}

bool is_data_file(const std::string& name) {
  return ends_with(name, ".jsonl") || ends_with(name, ".json") || ends_with(name, ".parquet") ||
         ends_with(name, ".arrow");
}

// Holds an flock on a lock file for as long as it lives.
class FileLock {
 public:
  FileLock(const fs::path& file, const std::string& what) {
    fs::create_directories(file.parent_path());
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open the lock file {}: {}", file.string(), std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    log::info("waiting for another process downloading {} (lock {})", what, file.string());
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) fail("cannot lock {}: {}", file.string(), std::strerror(errno));
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// Points `link` at `target` (relative), replacing whatever is there in one rename.
void place_symlink(const fs::path& target, const fs::path& link) {
  fs::create_directories(link.parent_path());
  const fs::path rel = fs::relative(target, link.parent_path());
  const fs::path tmp =
      link.parent_path() / fmt::format(".{}.tmp-{}", link.filename().string(), ::getpid());
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_symlink(rel, tmp);
  fs::rename(tmp, link);
}

void write_atomically(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  const fs::path tmp =
      file.parent_path() / fmt::format(".{}.tmp-{}", file.filename().string(), ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) fail("cannot write {}", tmp.string());
  }
  fs::rename(tmp, file);
}

// ---- one file -----------------------------------------------------------------

#if TRLX_HAVE_CURL
struct Progress {
  std::string name;
  bool enabled = false;
  curl_off_t offset = 0;  // bytes already there (a resumed download)
  std::chrono::steady_clock::time_point start, last;
};

int on_progress(void* user, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* p = static_cast<Progress*>(user);
  const auto t = std::chrono::steady_clock::now();
  const curl_off_t all = total + p->offset;
  if (!p->enabled || all < 10'000'000 || t - p->last < std::chrono::seconds(2)) return 0;
  p->last = t;
  const double secs = std::chrono::duration<double>(t - p->start).count();
  std::fprintf(stderr, "  downloading %s: %.1f / %.1f MB (%.0f%%), %.1f MB/s\n", p->name.c_str(),
               (now + p->offset) / 1e6, all / 1e6, 100.0 * (now + p->offset) / all,
               secs > 0 ? now / 1e6 / secs : 0.0);
  return 0;
}

struct FileSink {
  FILE* f = nullptr;
  CURL* h = nullptr;
  bool resuming = false;
  bool checked = false;
  bool failed = false;
};

size_t on_body_file(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<FileSink*>(user);
  long status = 0;
  curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
  // A redirect's or an error's body is not the file (the status is checked after).
  if (status != 200 && status != 206) return size * n;
  if (!s->checked) {
    s->checked = true;
    if (status == 200 && s->resuming) {  // the server sent the whole file: start over
      if (::ftruncate(::fileno(s->f), 0) != 0 || std::fseek(s->f, 0, SEEK_SET) != 0) return 0;
    }
  }
  if (std::fwrite(data, 1, size * n, s->f) != size * n) {
    s->failed = true;
    return 0;
  }
  return size * n;
}

// Downloads `url` into `incomplete`, resuming what is there. True when the
// transfer ended; `why` says what broke otherwise.
bool transfer(const std::string& url, const fs::path& incomplete, const HubOptions& o,
              const std::string& name, Response& r) {
  std::error_code ec;
  const auto have = fs::exists(incomplete) ? fs::file_size(incomplete, ec) : 0;
  FILE* f = std::fopen(incomplete.c_str(), have > 0 ? "ab" : "wb");
  if (!f) fail("cannot write {}: {}", incomplete.string(), std::strerror(errno));
  Curl c;
  c.common(url, o, r);
  if (have > 0) c.add_header(fmt::format("Range: bytes={}-", have));
  FileSink sink{f, c.h, have > 0};
  Progress progress{name, o.progress, static_cast<curl_off_t>(have),
                    std::chrono::steady_clock::now(), std::chrono::steady_clock::now()};
  curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c.h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_body_file);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &progress);
  c.perform(r);
  const bool closed = std::fclose(f) == 0;
  if (sink.failed || !closed) fail("cannot write {}: disk full?", incomplete.string());
  return r.error.empty();
}
#else
bool transfer(const std::string& url, const fs::path&, const HubOptions&, const std::string&, Response&) {
  no_downloads(url);
}
#endif

struct FileMeta {
  std::string commit, etag, location;
  std::optional<uint64_t> size;
};

std::string clean_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

std::string resolve_url(const HubOptions& o, const RepoRef& ref, const std::string& commit,
                        const std::string& file) {
  return fmt::format("{}/{}{}/resolve/{}/{}", o.endpoint,
                     ref.type == RepoType::Dataset ? "datasets/" : "", ref.repo_id,
                     url_escape(commit, false), url_escape(file, true));
}

FileMeta head_file(const RepoRef& ref, const std::string& commit, const std::string& file,
                   const HubOptions& o, const fs::path& cache, const std::string& cached_why) {
  std::string url = resolve_url(o, ref, commit, file);
  for (int hop = 0; hop < 5; ++hop) {
    const Response r = http_head(url, o);
    if (!r.error.empty() || r.status >= 400)
      fail_unavailable(ref, cache, cached_why, http_reason(r, o, url));
    const bool redirect = r.status >= 300 && r.status < 400;
    FileMeta m;
    m.commit = r.header("x-repo-commit");
    m.etag = clean_etag(!r.header("x-linked-etag").empty() ? r.header("x-linked-etag")
                                                           : r.header("etag"));
    const std::string size = !r.header("x-linked-size").empty() ? r.header("x-linked-size")
                             : redirect                         ? ""
                                                                : r.header("content-length");
    if (!size.empty()) m.size = std::stoull(size);
    // A redirect without the file's metadata (a renamed repo): follow it.
    if (redirect && m.commit.empty() && !r.header("location").empty()) {
      const std::string loc = r.header("location");
      url = loc.rfind("http", 0) == 0 ? loc : o.endpoint + (loc.front() == '/' ? loc : "/" + loc);
      continue;
    }
    if (m.etag.empty())
      fail("{}: the hub's answer has no ETag; is HF_ENDPOINT ({}) a Hugging Face hub?", url,
           o.endpoint);
    return m;
  }
  fail("{}: too many redirects", url);
}

void fetch_file(const RepoRef& ref, const std::string& commit, const std::string& file,
                const HubOptions& o, const std::string& cached_why) {
  const fs::path repo_dir = o.cache / repo_folder(ref);
  const fs::path link = repo_dir / "snapshots" / commit / file;
  if (fs::exists(link)) return;
  const FileMeta meta = head_file(ref, commit, file, o, o.cache, cached_why);
  const fs::path blob = repo_dir / "blobs" / meta.etag;
  FileLock lock(o.cache / ".locks" / repo_folder(ref) / (meta.etag + ".lock"),
                ref.repo_id + "/" + file);
  if (!fs::exists(blob)) {
    fs::create_directories(blob.parent_path());
    const fs::path incomplete = blob.string() + ".incomplete";
    const std::string url = resolve_url(o, ref, commit, file);
    const bool big = meta.size && *meta.size >= 10'000'000;
    if (big && o.progress)
      log::info("downloading {}/{} ({:.1f} MB)", ref.repo_id, file,
                static_cast<double>(*meta.size) / 1e6);
    Response r;
    bool done = false;
    for (int attempt = 0; attempt < 5 && !done; ++attempt) {
      r = Response{};
      done = transfer(url, incomplete, o, file, r);
      if (!done) log::warn("download of {}/{} broke ({}); resuming", ref.repo_id, file, r.error);
      if (done && r.status == 416) {  // the part on disk does not fit the file: start over
        if (meta.size && fs::file_size(incomplete) == *meta.size) break;
        fs::remove(incomplete);
        done = false;
        continue;
      }
      if (done && r.status >= 400)
        fail_unavailable(ref, o.cache, cached_why, http_reason(r, o, url));
    }
    if (!done)
      fail(
          "download of {}/{} failed: {}; the part already fetched stays in {} and the next run "
          "resumes it",
          ref.repo_id, file, r.error, incomplete.string());
    const uint64_t got = fs::file_size(incomplete);
    if (meta.size && got != *meta.size) {
      fs::remove(incomplete);
      fail(
          "download of {}/{}: {} bytes arrived, the hub announced {}; the file was removed, run "
          "again",
          ref.repo_id, file, got, *meta.size);
    }
    if (meta.etag.size() == 64 && is_commit_hash(meta.etag.substr(0, 40))) {
      const std::string sum = sha256_file(incomplete);
      if (sum != meta.etag) {
        fs::remove(incomplete);
        fail(
            "download of {}/{}: checksum mismatch (sha256 {}, the hub announced {}); the file was "
            "removed, run "
            "again",
            ref.repo_id, file, sum, meta.etag);
      }
    }
    fs::rename(incomplete, blob);
  }
  place_symlink(blob, link);
}

struct RepoInfo {
  std::string sha;
  std::vector<std::string> files;
};

RepoInfo repo_info(const RepoRef& ref, const HubOptions& o, const std::string& cached_why) {
  const std::string url = fmt::format("{}/api/{}s/{}/revision/{}", o.endpoint, kind_word(ref.type),
                                      ref.repo_id, url_escape(ref.revision, false));
  const Response r = http_get_text(url, o);
  if (!r.error.empty() || r.status != 200)
    fail_unavailable(ref, o.cache, cached_why, http_reason(r, o, url));
  RepoInfo info;
  try {
    const auto j = nlohmann::json::parse(r.body);
    info.sha = j.at("sha").get<std::string>();
    for (const auto& s : j.value("siblings", nlohmann::json::array()))
      info.files.push_back(s.at("rfilename"));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not the hub's answer ({}); is HF_ENDPOINT ({}) a Hugging Face hub?", url, e.what(),
         o.endpoint);
  }
  if (!is_commit_hash(info.sha)) fail("{}: the hub's answer names no commit", url);
  return info;
}

}  // namespace

bool downloads_built() {
#if TRLX_HAVE_CURL
  return true;
#else
  return false;
#endif
}

fs::path hf_home() {
  if (auto h = env("HF_HOME"); !h.empty()) return h;
  if (auto x = env("XDG_CACHE_HOME"); !x.empty()) return fs::path(x) / "huggingface";
  return fs::path(env("HOME").empty() ? "/root" : env("HOME")) / ".cache" / "huggingface";
}

// ---- public -----------------------------------------------------------------------

std::string sha256_hex(const void* data, size_t size) {
  Sha256 s;
  s.update(static_cast<const unsigned char*>(data), size);
  return s.hex();
}

std::string sha256_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("cannot read {}", file.string());
  Sha256 s;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    s.update(reinterpret_cast<const unsigned char*>(buf.data()), static_cast<size_t>(in.gcount()));
  }
  return s.hex();
}

fs::path default_cache_dir() {
  if (auto c = env("HF_HUB_CACHE"); !c.empty()) return c;
  if (auto c = env("HUGGINGFACE_HUB_CACHE"); !c.empty()) return c;
  return hf_home() / "hub";
}

HubOptions HubOptions::from_env() {
  HubOptions o;
  o.cache = default_cache_dir();
  if (auto e = env("HF_ENDPOINT"); !e.empty()) o.endpoint = e;
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  o.token = env("HF_TOKEN");
  if (o.token.empty()) o.token = env("HUGGING_FACE_HUB_TOKEN");
  if (o.token.empty()) {
    const fs::path file =
        env("HF_TOKEN_PATH").empty() ? hf_home() / "token" : fs::path(env("HF_TOKEN_PATH"));
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) o.token = trim(read_text(file));
  }
  o.offline = env_true("HF_HUB_OFFLINE");
  return o;
}

std::string repo_folder(const RepoRef& ref) {
  std::string id = ref.repo_id;
  std::string out = ref.type == RepoType::Model ? "models" : "datasets";
  size_t start = 0;
  for (size_t slash = id.find('/');; slash = id.find('/', start)) {
    out += "--" + id.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

bool looks_like_repo_id(const std::string& s) {
  const size_t slash = s.find('/');
  if ((slash != std::string::npos && s.find('/', slash + 1) != std::string::npos) || s.size() > 96) return false;
  if (s.find("--") != std::string::npos || s.find("..") != std::string::npos) return false;
  // Without an organisation (`gpt2`, `bert-base-uncased`: the hub's oldest
  // repos) a dot reads as a file name (`train.jsonl`), which stays a path.
  if (slash == std::string::npos && s.find('.') != std::string::npos) return false;
  const std::vector<std::string> parts =
      slash == std::string::npos ? std::vector<std::string>{s}
                                 : std::vector<std::string>{s.substr(0, slash), s.substr(slash + 1)};
  for (const std::string& part : parts) {
    if (part.empty() || part.front() == '-' || part.front() == '.' || part.back() == '-' ||
        part.back() == '.')
      return false;
    for (unsigned char c : part)
      if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

std::optional<RepoRef> repo_of_snapshot(const std::filesystem::path& dir) {
  const std::filesystem::path d = dir.has_filename() ? dir : dir.parent_path();
  const std::string commit = d.filename().string();
  if (!is_commit_hash(commit) || d.parent_path().filename() != "snapshots") return std::nullopt;
  const std::filesystem::path repo_dir = d.parent_path().parent_path();
  const std::string folder = repo_dir.filename().string();
  RepoRef ref;
  std::string rest;
  if (folder.rfind("models--", 0) == 0) {
    ref.type = RepoType::Model;
    rest = folder.substr(8);
  } else if (folder.rfind("datasets--", 0) == 0) {
    ref.type = RepoType::Dataset;
    rest = folder.substr(10);
  } else {
    return std::nullopt;
  }
  const size_t sep = rest.find("--");
  ref.repo_id = sep == std::string::npos ? rest : rest.substr(0, sep) + "/" + rest.substr(sep + 2);
  if (!looks_like_repo_id(ref.repo_id) || repo_folder(ref) != folder) return std::nullopt;
  std::ifstream in(repo_dir / "refs" / "main");
  std::string main_commit;
  ref.revision = (in >> main_commit) && main_commit == commit ? "main" : commit;
  return ref;
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  return true;
}

std::string fetch_command(const RepoRef& ref) {
  return fmt::format("hf download {}{}{}",
                     ref.type == RepoType::Dataset ? "--repo-type dataset " : "", ref.repo_id,
                     ref.revision == "main" ? "" : " --revision " + ref.revision);
}

std::vector<std::string> needed_files(RepoType type, const std::vector<std::string>& repo_files) {
  std::vector<std::string> out;
  if (type == RepoType::Model) {
    static const std::set<std::string> wanted = {"config.json",
                                                 "tokenizer.json",
                                                 "tokenizer_config.json",
                                                 "generation_config.json",
                                                 "special_tokens_map.json",
                                                 "chat_template.jinja",
                                                 "chat_template.json",
                                                 "model.safetensors",
                                                 "model.safetensors.index.json",
                                                 "adapter_config.json",
                                                 "adapter_model.safetensors"};
    for (const auto& f : repo_files)
      if (wanted.count(f)) out.push_back(f);
  } else {
    for (const auto& f : repo_files) {
      const std::string name = fs::path(f).filename().string();
      if (!name.empty() && name[0] != '.' && is_data_file(name)) out.push_back(f);
    }
  }
  return out;
}

std::optional<fs::path> cached_snapshot(const RepoRef& ref, const fs::path& cache,
                                        std::string* why) {
  auto miss = [&](std::string w) -> std::optional<fs::path> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  const fs::path repo_dir = cache / repo_folder(ref);
  std::error_code ec;
  if (!fs::is_directory(repo_dir, ec)) return miss("not there");
  std::string commit = ref.revision;
  if (!is_commit_hash(commit)) {
    const fs::path r = repo_dir / "refs" / ref.revision;
    if (!fs::is_regular_file(r, ec)) return miss(fmt::format("no refs/{}", ref.revision));
    commit = trim(read_text(r));
  }
  const fs::path snap = repo_dir / "snapshots" / commit;
  if (!fs::is_directory(snap, ec)) return miss(fmt::format("no snapshot {}", commit));
  if (ref.type == RepoType::Model) {
    if (fs::exists(snap / "adapter_config.json") && fs::exists(snap / "adapter_model.safetensors"))
      return snap;
    if (!fs::exists(snap / "config.json"))
      return miss(fmt::format("snapshot {} has no config.json", commit));
    std::string w;
    if (!weights_complete(snap, &w)) return miss(fmt::format("snapshot {}: {}", commit, w));
    return snap;
  }
  for (auto it = fs::recursive_directory_iterator(snap, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec) && is_data_file(it->path().filename().string())) return snap;
  return miss(fmt::format("snapshot {} has no .jsonl/.json/.parquet/.arrow file", commit));
}

fs::path snapshot(const RepoRef& ref, const HubOptions& o) {
  std::string cached_why;
  if (auto snap = cached_snapshot(ref, o.cache, &cached_why)) return *snap;
  if (o.offline)
    fail_unavailable(ref, o.cache, cached_why, "HF_HUB_OFFLINE is set, so trlx does not download");
  const RepoInfo info = repo_info(ref, o, cached_why);
  std::vector<std::string> files = needed_files(ref.type, info.files);
  const fs::path snap = o.cache / repo_folder(ref) / "snapshots" / info.sha;
  if (files.empty())
    fail_input("hub {} `{}` (revision {}) has no file trlx reads ({}); its files: {}",
               kind_word(ref.type), ref.repo_id, ref.revision,
               ref.type == RepoType::Model ? "config.json + model.safetensors, or a PEFT adapter"
                                           : ".jsonl, .json, .parquet or .arrow data files",
               fmt::join(info.files, ", "));
  for (const auto& f : files) fetch_file(ref, info.sha, f, o, cached_why);
  if (ref.type == RepoType::Model && fs::exists(snap / "model.safetensors.index.json")) {
    std::set<std::string> shards;
    try {
      const auto j = nlohmann::json::parse(read_text(snap / "model.safetensors.index.json"));
      for (const auto& [name, shard] : j.at("weight_map").items()) {
        (void)name;
        shards.insert(shard.get<std::string>());
      }
    } catch (const nlohmann::json::exception& e) {
      fail_input("{}: not a safetensors index: {}",
                 (snap / "model.safetensors.index.json").string(), e.what());
    }
    for (const auto& s : shards) fetch_file(ref, info.sha, s, o, cached_why);
  }
  if (!is_commit_hash(ref.revision))
    write_atomically(o.cache / repo_folder(ref) / "refs" / ref.revision, info.sha);
  std::string why;
  if (auto done = cached_snapshot(RepoRef{ref.type, ref.repo_id, info.sha}, o.cache, &why))
    return *done;
  fail_input(
      "hub {} `{}` (revision {}) was downloaded to {} but is not usable: {} (trlx reads "
      "safetensors weights)",
      kind_word(ref.type), ref.repo_id, ref.revision, snap.string(), why);
}

}  // namespace trlx::io::hub

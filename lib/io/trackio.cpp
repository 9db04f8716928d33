// report_to: trackio, written straight into trackio's local SQLite store.
#include "io/trackio.hpp"

#include <fcntl.h>
#if TRLX_HAVE_SQLITE
#include <sqlite3.h>
#endif
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/hub.hpp"

namespace trlx::io {

namespace fs = std::filesystem;

bool trackio_built() {
#if TRLX_HAVE_SQLITE
  return true;
#else
  return false;
#endif
}

fs::path trackio_dir() {
  if (const char* d = std::getenv("TRACKIO_DIR"); d && *d) return d;
  return hub::hf_home() / "trackio";
}

std::string trackio_project_file_name(const std::string& project) {
  std::string safe;
  for (unsigned char c : project)
    if (std::isalnum(c) || c == '-' || c == '_' || c >= 0x80) safe += static_cast<char>(c);
  if (safe.empty()) safe = "default";
  if (safe.rfind("registry-", 0) == 0)
    fail_input("project `{}`: trackio keeps names starting with `registry-` for its model registry", project);
  for (const char* suffix : {"_system", "_configs", "_traces", "_artifacts", "_artifact_versions", "_artifact_aliases"}) {
    const std::string s(suffix);
    if (safe.size() > s.size() && safe.compare(safe.size() - s.size(), s.size(), s) == 0)
      fail_input("project `{}`: trackio refuses names ending in `{}` (its sidecar files use them); choose another",
                 project, s);
  }
  return safe;
}

#if TRLX_HAVE_SQLITE
struct TrackioRun::Db {
  sqlite3* handle = nullptr;
  ~Db() {
    if (handle) sqlite3_close(handle);
  }
};

namespace {

// trackio's ProcessLock: an exclusive flock on `<project>.lock`, tried for
// 10 seconds.
class ProcessLock {
 public:
  explicit ProcessLock(const fs::path& file) {
    fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("trackio: cannot open the lock file {}: {}", file.string(), std::strerror(errno));
    for (int attempt = 0; ::flock(fd_, LOCK_EX | LOCK_NB) != 0; ++attempt) {
      if (attempt >= 100) {
        ::close(fd_);
        fail("trackio: {} stayed locked by another process for 10 s", file.string());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~ProcessLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  ProcessLock(const ProcessLock&) = delete;
  ProcessLock& operator=(const ProcessLock&) = delete;

 private:
  int fd_ = -1;
};

class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const fs::path& file) : db_(db), file_(file) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) != SQLITE_OK)
      fail("trackio: {}: {} ({})", file.string(), sqlite3_errmsg(db), sql);
  }
  ~Statement() { sqlite3_finalize(s_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& integer(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  // Steps once: true while a row comes back.
  bool step() {
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("trackio: cannot write {}: {}", file_.string(), sqlite3_errmsg(db_));
    return false;
  }
  std::string column_text(int i) {
    const auto* p = sqlite3_column_text(s_, i);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  }
  bool column_null(int i) { return sqlite3_column_type(s_, i) == SQLITE_NULL; }
  int64_t column_int(int i) { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3* db_;
  const fs::path& file_;
  sqlite3_stmt* s_ = nullptr;
};

void exec(sqlite3* db, const char* sql, const fs::path& file) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    const std::string m = message ? message : sqlite3_errmsg(db);
    sqlite3_free(message);
    fail("trackio: cannot write {}: {}", file.string(), m);
  }
}

// trackio's tables at schema version 2 (run ids), created where missing.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    run_name TEXT NOT NULL,
    step INTEGER NOT NULL,
    metrics TEXT NOT NULL,
    log_id TEXT,
    space_id TEXT
);
CREATE TABLE IF NOT EXISTS configs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    run_name TEXT NOT NULL,
    config TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE(run_id)
);
)sql";

constexpr const char* kIndexes = R"sql(
CREATE INDEX IF NOT EXISTS idx_metrics_run_step ON metrics(run_id, step);
CREATE INDEX IF NOT EXISTS idx_metrics_run_timestamp ON metrics(run_id, timestamp);
CREATE UNIQUE INDEX IF NOT EXISTS idx_metrics_log_id ON metrics(log_id) WHERE log_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_metrics_pending ON metrics(space_id) WHERE space_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_configs_run_name ON configs(run_name);
)sql";

bool has_column(sqlite3* db, const std::string& table, const std::string& column, const fs::path& file) {
  Statement s(db, "PRAGMA table_info(" + table + ")", file);
  while (s.step())
    if (s.column_text(1) == column) return true;
  return false;
}

// datetime.now(timezone.utc).isoformat(): 2026-12-06T19:10:11.123456+00:00.
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:06d}+00:00", buf, micros);
}

std::string new_run_id() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd());
  return fmt::format("{:016x}{:016x}", gen(), gen());
}

// trackio's serialize_values: non-finite numbers as the strings it reads back.
nlohmann::ordered_json value_of(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

}  // namespace

TrackioRun::TrackioRun(const std::string& project, const std::string& run_name, const std::string& config_json)
    : db_(std::make_unique<Db>()), run_name_(run_name) {
  const fs::path dir = trackio_dir();
  const std::string name = trackio_project_file_name(project);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("trackio: cannot create {}: {}", dir.string(), ec.message());
  path_ = dir / (name + ".db");
  lock_path_ = dir / (name + ".lock");
  ProcessLock lock(lock_path_);
  if (sqlite3_open_v2(path_.c_str(), &db_->handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK)
    fail("trackio: cannot open {}: {}", path_.string(), sqlite3_errmsg(db_->handle));
  sqlite3_busy_timeout(db_->handle, 30000);
  auto* db = db_->handle;
  exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;", path_);
  exec(db, kSchema, path_);
  // A database from before trackio's run ids keeps its tables as they are
  // (trackio migrates them); rows then go in by run name alone.
  has_run_ids_ = has_column(db, "metrics", "run_id", path_) && has_column(db, "configs", "run_id", path_);
  if (has_run_ids_) exec(db, kIndexes, path_);
  // The run of this name goes on where it is (resume="allow"), else a new one.
  {
    Statement s(db,
                has_run_ids_ ? "SELECT run_id FROM configs WHERE run_name = ? ORDER BY id DESC LIMIT 1"
                             : "SELECT run_name FROM configs WHERE run_name = ? LIMIT 1",
                path_);
    s.text(1, run_name_);
    run_id_ = s.step() && has_run_ids_ ? s.column_text(0) : "";
  }
  if (run_id_.empty() && has_run_ids_) {
    Statement s(db, "SELECT run_id FROM metrics WHERE run_name = ? ORDER BY id DESC LIMIT 1", path_);
    s.text(1, run_name_);
    if (s.step()) run_id_ = s.column_text(0);
  }
  if (run_id_.empty()) run_id_ = new_run_id();
  {
    Statement s(db, has_run_ids_ ? "SELECT MAX(step) FROM metrics WHERE run_id = ?"
                                 : "SELECT MAX(step) FROM metrics WHERE run_name = ?",
                path_);
    s.text(1, has_run_ids_ ? run_id_ : run_name_);
    if (s.step() && !s.column_null(0)) next_step_ = s.column_int(0) + 1;
  }
  auto config = nlohmann::ordered_json::parse(config_json, nullptr, false);
  if (config.is_discarded() || !config.is_object()) config = nlohmann::ordered_json::object();
  config["_Created"] = utc_now();
  const std::string text = config.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  Statement s(db,
              has_run_ids_ ? "INSERT OR REPLACE INTO configs (run_id, run_name, config, created_at) VALUES (?, ?, ?, ?)"
                           : "INSERT OR REPLACE INTO configs (run_name, config, created_at) VALUES (?, ?, ?)",
              path_);
  const int at = has_run_ids_ ? 2 : 1;
  if (has_run_ids_) s.text(1, run_id_);
  s.text(at, run_name_);
  s.text(at + 1, text);
  s.text(at + 2, utc_now());
  s.step();
}

TrackioRun::~TrackioRun() = default;

void TrackioRun::log(const std::map<std::string, double>& metrics, int64_t global_step) {
  // transformers' TrackioCallback: eval_x -> eval/x, test_x -> test/x,
  // x -> train/x, and the step as train/global_step; the run's one-off
  // totals stay out.
  nlohmann::ordered_json row = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metrics) {
    if (k == "train_runtime" || k == "train_samples_per_second" || k == "train_steps_per_second" ||
        k == "train_loss" || k == "total_flos")
      continue;
    if (k.rfind("eval_", 0) == 0) row["eval/" + k.substr(5)] = value_of(v);
    else if (k.rfind("test_", 0) == 0) row["test/" + k.substr(5)] = value_of(v);
    else row["train/" + k] = value_of(v);
  }
  row["train/global_step"] = global_step;
  ProcessLock lock(lock_path_);
  Statement s(db_->handle,
              has_run_ids_ ? "INSERT INTO metrics (timestamp, run_id, run_name, step, metrics) VALUES (?, ?, ?, ?, ?)"
                           : "INSERT INTO metrics (timestamp, run_name, step, metrics) VALUES (?, ?, ?, ?)",
              path_);
  const int at = has_run_ids_ ? 3 : 2;
  s.text(1, utc_now());
  if (has_run_ids_) s.text(2, run_id_);
  s.text(at, run_name_);
  s.integer(at + 1, next_step_);
  s.text(at + 2, row.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  s.step();
  ++next_step_;
}

#else
// Built without SQLite's headers (a machine without them): no trackio store.
struct TrackioRun::Db {};

TrackioRun::TrackioRun(const std::string&, const std::string&, const std::string&) {
  fail_input("report_to trackio: this trlx was built without SQLite, which trackio's store is; use report_to "
             "jsonl, tensorboard or a logger program, or rebuild trlx with SQLite's headers (Debian: libsqlite3-dev)");
}
TrackioRun::~TrackioRun() = default;
void TrackioRun::log(const std::map<std::string, double>&, int64_t) {}
#endif

}  // namespace trlx::io

#pragma once
// report_to: trackio. A run written straight into trackio's local store, so
// that `trackio show` (or trackio's Python API) lists it with no Python in
// the run: one SQLite database per project, `<project>.db` in TRACKIO_DIR,
// else HF_HOME/trackio.
//
// What goes in is what trackio's own writer puts there for a transformers
// run: a `configs` row (the run's resolved config) and one `metrics` row per
// logged row, its keys renamed as transformers' TrackioCallback renames them
// (loss -> train/loss, eval_loss -> eval/loss, plus train/global_step; its
// one-off totals such as train_runtime left out), at
// trackio's step counter (0, 1, 2, ... per run; a run of the same name goes
// on from its last step, as transformers' resume="allow" does). Tables are
// created with the run_id columns of trackio's schema version 2 and the
// database left at user_version 0: trackio upgrades such a database itself
// (its version 2 migration finds the run ids already there). Writes hold
// trackio's own process lock (`<project>.lock`, flock).
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

namespace trlx::io {

// Whether this trlx writes trackio's store (built with SQLite).
bool trackio_built();

// TRACKIO_DIR, else HF_HOME/trackio.
std::filesystem::path trackio_dir();

// trackio's on-disk name of a project: its letters, digits, '-' and '_'
// ("default" when none is left). InputError for a name trackio refuses
// (a `registry-` prefix, or a suffix its sidecar files use).
std::string trackio_project_file_name(const std::string& project);

class TrackioRun {
 public:
  // Opens (creating where missing) the project's database and the run named
  // `run_name`, with `config_json` (a JSON object) as its config. Error on a
  // database that cannot be opened or written.
  TrackioRun(const std::string& project, const std::string& run_name, const std::string& config_json);
  ~TrackioRun();
  TrackioRun(const TrackioRun&) = delete;
  TrackioRun& operator=(const TrackioRun&) = delete;

  // One logged row at training step `global_step`. Error when it cannot be
  // written.
  void log(const std::map<std::string, double>& metrics, int64_t global_step);

  const std::filesystem::path& path() const { return path_; }
  const std::string& run_id() const { return run_id_; }
  int64_t next_step() const { return next_step_; }

 private:
  struct Db;
  std::unique_ptr<Db> db_;
  std::filesystem::path path_, lock_path_;
  std::string run_name_, run_id_;
  bool has_run_ids_ = true;
  int64_t next_step_ = 0;
};

}  // namespace trlx::io

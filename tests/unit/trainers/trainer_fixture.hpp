#pragma once
// TRL's first optimizer steps replayed through trlx's engine: what the
// single-process parity tests (test_trainers) and the 2-rank ones
// (test_trainers_dist) share. A fixture names global batches; the engine gives
// each rank its consecutive share (Engine::collate_local), so one replay runs
// on one process or on N ranks at a per-device batch of global / N.
// Include Catch before this header.
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/comm/communicator.hpp"
#include "engine/engine.hpp"
#include "support/trainers.hpp"
#include "trainers/dpo.hpp"

namespace trlx::test {

nlohmann::json read_json(const std::filesystem::path& path);

// How a replay runs: the communicator (null: the launcher's, i.e. one process
// in the unit tests) and flags on top of the fixture's configuration (e.g.
// accelerate_config), and where the online replays write (empty: a
// temporary directory of their own, removed after the run).
struct Run {
  std::shared_ptr<dist::Communicator> comm;
  Flags flags;
  std::filesystem::path output_dir;
  // Agent cases: the first turns replayed, every later turn sampled (to
  // hold generation in lockstep when ranks need different numbers of turns).
  bool sample_tool_turns = false;
  int world_size() const { return comm ? comm->world_size() : 1; }
};

// trlx against a reference (TRL's numbers, or another trlx run): each value
// within 1e-4 (relative above 1). Names in
// `ignored` are not compared; names in `known_divergent` are compared but not
// checked (a difference this build is known to have), their largest
// difference kept apart.
struct Comparison {
  std::set<std::string> ignored;
  std::set<std::string> known_divergent;
  double tolerance = 1e-4;     // relative to max(1, |reference|)
  double worst = 0;            // largest |trlx - reference| over the checked values
  double divergent_worst = 0;  // the same over known_divergent
  size_t checked = 0;
  void check(double got, double want, const std::string& what);
};

// What a replay gives per optimizer step: loss, grad_norm, num_tokens (all
// ranks' tokens so far) and every logged metric, by TRL's names, as rank 0
// would log them.
using StepValues = std::vector<std::map<std::string, double>>;
// Every value of a fixture's steps against trlx's; each name must be on both
// sides (but `ignored`).
void compare_steps(const StepValues& got, const nlohmann::json& want_steps, const std::string& name, Comparison& cmp);

// The mean of a metric (sum / count); fails when the metric is missing.
double mean_of(const engine::MetricSums& m, const std::string& name);
// A rank's metric sums reduced over all ranks, as the engine logs them
// (Engine::reduce_metrics). Every rank must hold the same names.
engine::MetricSums summed_over_ranks(engine::Engine& engine, const engine::MetricSums& local);
// The consecutive share of a global batch the engine gives this rank.
std::vector<size_t> local_share(const engine::Engine& engine, const std::vector<size_t>& global_batch);

// DPO on tests/data/dpo: the config the tests share, its prepared train split,
// and an engine with a separate reference (unless `separate_reference` is
// false: the policy with its LoRA adapters disabled).
trainers::DPOConfig dpo_config(const std::filesystem::path& data, const nlohmann::json& extra = nlohmann::json::object());
trainers::PreferenceSplit prepare_dpo(const trainers::DPOConfig& c);
struct DPOSetup {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<trainers::DPOTrainer> trainer;
  std::vector<std::string> files;
};
DPOSetup make_dpo(const trainers::DPOConfig& c, bool separate_reference = true,
                  std::shared_ptr<dist::Communicator> comm = nullptr);

// Three steps of one case of tests/data/dpo/steps.json (global batches in
// "batches"; "separate_reference": false for the policy with adapters
// disabled as the reference).
StepValues dpo_steps(const nlohmann::json& fixture_case, const Run& run);
// Three steps of one case of tests/data/dpo/reference_free_steps*.json (CPO, ORPO).
StepValues reference_free_steps(const nlohmann::json& fixture_case, const Run& run);
// tests/data/kto/parity*.json and tests/data/reward/parity.json: TRL's
// trl_config (per-device batch, accumulation) on the fixture's num_processes
// (1 if absent), batches in file order.
StepValues kto_steps(const nlohmann::json& fixture, const Run& run);
StepValues reward_steps(const nlohmann::json& fixture, const Run& run);

// A trainer's loss, gradients and every metric on `batch` as collated (its
// start-sharing rows packed under `key_prefix`, see engine/shared_prefix)
// equal those of the same batch without the packed rows.
void check_shared_equals_separate(engine::Engine& engine, engine::Trainer& trainer, const engine::TensorMap& batch,
                                  const std::string& key_prefix = "");

}  // namespace trlx::test

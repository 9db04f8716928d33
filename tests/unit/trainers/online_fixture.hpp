#pragma once
// TRL's GRPOTrainer, RLOOTrainer and OnlineDPOTrainer replayed through trlx's real training
// loop: the fixture's completions stand in for sampling (each rank gets its
// slots of each round, in TRL's order), and rewards come from the fixture's
// table of completion -> reward, so loss, grad norm and every logged metric
// can be compared. Shared by the single-process and the 2-rank tests.
// Include Catch before this header.
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "trainer_fixture.hpp"

namespace trlx::test {

// Runs one case of tests/data/grpo/steps*.json (trainer "grpo"),
// rloo_steps*.json ("rloo") or tests/data/online_dpo/steps*.json
// ("online-dpo") for its 3 steps; the rows each step logged.
StepValues online_steps(const nlohmann::json& fixture_case, const std::string& trainer, const Run& run);

// Runs one case of tests/data/distill/steps*.json (TRL's DistillationTrainer,
// the teacher tests/data/distill/teacher) for its 3 steps; the rows each
// step logged.
// `inspect`, when given, sees the engine after training.
StepValues distill_steps(const nlohmann::json& fixture_case, const Run& run,
                         const std::function<void(engine::Engine&)>& inspect = {});

// Runs one case of tests/data/ppo/steps*.json for its 3 updates; the rows
// each step logged. `rollouts`, when given, receives this rank's rollout
// batch of every update (PPOTrainer::last_rollout()).
StepValues ppo_steps(const nlohmann::json& fixture_case, const Run& run,
                     std::vector<engine::TensorMap>* rollouts = nullptr);
// Checks this rank's rollout batches (ppo_steps' `rollouts`) against the
// fixture's for `rank`: scores, rewards, values, advantages, returns and
// log-probs within 1e-5 (relative above 1) for the first update (the
// starting models), within 1e-4 for later ones (after trained updates).
// Returns the largest difference.
double check_ppo_rollouts(const std::vector<engine::TensorMap>& rollouts, const nlohmann::json& fixture_case, int rank);
// What TRL's PPOTrainer logs that trlx does not compare, and trlx's own
// step values TRL's PPO does not log.
Comparison ppo_comparison(const nlohmann::json& fixture_case);

// The steps of a fixture case as trlx must log them: TRL's, except that
// TRL's OnlineDPOTrainer sums the gradients of a step's micro-batches where
// trlx (and TRL's other trainers) average them, so its grad_norm is
// gradient_accumulation_steps times trlx's (the clipped update is the same).
nlohmann::json online_expected_steps(const nlohmann::json& fixture_case);

// What TRL logs that trlx does not compare: its timing, the epoch (TRL's
// counts repeated sampler batches), and values TRL logged as null.
Comparison online_comparison(const nlohmann::json& fixture_case);

// Checks the completions files a replay of a completions_log.json case
// (log_completions) left in `output_dir`: one per logging step, named by
// it, with TRL's schema and every row TRL wrote (GRPO), or the table TRL
// builds and writes nowhere (RLOO).
void check_completion_logs(const nlohmann::json& fixture_case, const std::filesystem::path& output_dir);

}  // namespace trlx::test

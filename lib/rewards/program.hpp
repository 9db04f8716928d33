#pragma once
// Reward functions that are external programs: any executable that reads one
// JSON request per line on stdin and answers each with one JSON line on
// stdout. The program is started once per process and kept running, so that
// its start-up cost (imports, loading a verifier) is paid once per run, not
// per batch. docs/reward_programs.md is the protocol's reference.
//
// Request:  {"prompts": [...], "completions": [...], "completion_ids": [[...]],
//            "columns": {"<column>": [...], ...}, "step": <int, when known>}
// Answer:   {"rewards": [<number or null>, ...]}   (one per completion)
//
// POSIX (Linux) only. Not thread-safe: one thread scores at a time.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rewards/reward_function.hpp"

namespace trlx::rewards {

// A running program and its pipes (program.cpp).
struct ProgramProcess;

struct ProgramOptions {
  // Run with /bin/sh -c, so pipes, `cd x && ...` and environment assignments
  // work as in a terminal.
  std::string command;
  // The metric name; empty: derived from the command (the file stem of its
  // first word that is not an interpreter, see program_name_from_command).
  std::string name;
  // Longest wait for one answer; the program is killed past it.
  double timeout_seconds = 600;
  // Reward and judge programs: how long an answer still pending when the run
  // is asked to stop (SIGTERM, SIGINT) may take. Past it the program is
  // killed and score() throws stop::Interrupted: the round is dropped and the
  // last finished step saved, well inside a cluster's grace before SIGKILL.
  double stop_grace_seconds = 5;
  // Where the command runs (default: trlx's working directory).
  std::optional<std::filesystem::path> working_dir;
  // How long start_reward_program watches the new program for an early exit
  // (a missing script, an import error); it returns as soon as the program
  // exits. A program that exits later but before its first request is the
  // same InputError, from check_alive() or score().
  double startup_check_seconds = 1.0;
};

class RewardProgram : public RewardFunction {
 public:
  ~RewardProgram() override;
  const std::string& name() const override;
  // Sends one request and waits for its answer. trlx::Error naming the
  // program, its command and the tail of its stderr when the program exits,
  // times out (it is then killed) or answers off-protocol; once failed, the
  // program stays failed.
  Scores score(const std::vector<Sample>& batch) override;
  // The trainer's global step, sent with every later request as "step"; a
  // program may shape its rewards by training progress.
  void set_step(int64_t step) override;
  // Throws what the next score() would if the program has already exited:
  // InputError (exit code 2) when it ended before its first request. For a
  // caller that starts programs early and wants a late start-up failure (a
  // slow import that fails) reported before the first batch is generated.
  void check_alive();
  // The process id of the running program (the shell's), or -1 once it has
  // stopped. For tests and diagnostics.
  int pid() const;

 private:
  friend std::unique_ptr<RewardProgram> start_reward_program(const ProgramOptions& options);
  explicit RewardProgram(std::unique_ptr<ProgramProcess> process);
  std::unique_ptr<ProgramProcess> process_;
};

// Starts the program now, so that a command that cannot run is caught before
// training: InputError (exit code 2) naming the command and what the shell or
// the program said (e.g. "command not found", a Python traceback) when it
// exits within options.startup_check_seconds. The returned object converts
// to std::unique_ptr<RewardFunction>.
std::unique_ptr<RewardProgram> start_reward_program(const ProgramOptions& options);

// A program entry of config field `field` ({command, name, timeout_seconds,
// working_dir, and for reward_funcs and judge stop_grace_seconds} as parsed
// JSON; `entry` its text, for messages). InputError naming the key otherwise.
ProgramOptions program_entry(const nlohmann::json& spec, const std::string& field, const std::string& entry);

// A logger: a program on rank 0 that receives the run as JSON lines on stdin
// and answers nothing (report_to: [{command: ...}]); docs/loggers.md has the
// protocol. trlx closes its stdin when the run ends.
class LoggerProgram {
 public:
  ~LoggerProgram();
  const std::string& name() const;
  // Writes one line (its newline added). trlx::Error naming the program and
  // the tail of its stderr when it has exited or has not taken the line
  // within timeout_seconds; once failed, it stays failed.
  void send(const std::string& line);
  // Closes its stdin and gives it timeout_seconds to finish (to upload, say)
  // before it is killed. Its exit status, described.
  std::string finish();

 private:
  friend std::unique_ptr<LoggerProgram> start_logger_program(const ProgramOptions& options);
  explicit LoggerProgram(std::unique_ptr<ProgramProcess> process);
  std::unique_ptr<ProgramProcess> process_;
};

// Starts a logger now (InputError, exit 2, when it cannot start).
std::unique_ptr<LoggerProgram> start_logger_program(const ProgramOptions& options);

// A judge: a program asked which of two completions of a prompt is better
// (online DPO's ranking, instead of scores). Same process rules as a reward
// program (started once, kept running, one line in and one out, the same
// failures); docs/reward_programs.md has the protocol.
//
// Request:  {"prompts": [...], "completions": [[first, second], ...],
//            "completion_ids": [[[...], [...]], ...], "columns": {...}, "step": <int>}
// Answer:   {"preferences": [0, 1, null, ...]}   (one per pair: 0 the first is
//            better, 1 the second, null no preference)
class JudgeProgram {
 public:
  ~JudgeProgram();
  const std::string& name() const;
  // One preference per pair (the first of each is what the request's prompt
  // and columns come from). trlx::Error as RewardProgram::score.
  std::vector<std::optional<int>> judge(const std::vector<std::pair<Sample, Sample>>& pairs);
  void set_step(int64_t step);

 private:
  friend std::unique_ptr<JudgeProgram> start_judge_program(const ProgramOptions& options);
  explicit JudgeProgram(std::unique_ptr<ProgramProcess> process);
  std::unique_ptr<ProgramProcess> process_;
};

// Starts a judge now (InputError, exit 2, when it cannot start), as
// start_reward_program does.
std::unique_ptr<JudgeProgram> start_judge_program(const ProgramOptions& options);

// The judge's request line for `pairs`, as reward_request_line.
std::string judge_request_line(const std::vector<std::pair<Sample, Sample>>& pairs, std::optional<int64_t> step);

// The default metric name for a command: the file stem of its first word that
// is not an environment assignment, an option or a known interpreter/launcher
// ("python3 -u scripts/my_reward.py --x 1" -> "my_reward"; "./score" ->
// "score"). "reward_program" when nothing is left.
std::string program_name_from_command(const std::string& command);

// The request line (without its newline) for a batch; `step` is left out
// when unknown. Strings are written ASCII-only (\u escapes) and invalid UTF-8
// is replaced by U+FFFD, so that programs in any locale can read the line.
std::string reward_request_line(const std::vector<Sample>& batch, std::optional<int64_t> step);

}  // namespace trlx::rewards

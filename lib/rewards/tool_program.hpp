#pragma once
// Tools the model calls during an agent rollout (grpo and rloo `tools:`), as
// programs: started once per process and kept running, speaking JSON lines
// as reward programs do. docs/tools.md is the protocol's reference.
//
// At start the program prints one line announcing its tools (the function
// schemas the chat template renders into the prompt):
//   {"tools": [{"type": "function", "function": {"name": ..., "description": ...,
//               "parameters": {...}}}, ...],
//    "async": ["get_weather"],                         (optional)
//    "environment": {"name": "CalcEnv", "reward": true}} (optional)
// Then, one request line and one answer line at a time:
//   {"call": {"name": "multiply", "arguments": {"a": 3, "b": 4}}}
//     -> {"result": <any JSON>} | {"error": "message"}
// and for an environment (state per episode, TRL's environment_factory),
// whose calls also carry "episode": <id>:
//   {"reset": {"episode": 5, "row": {<the dataset row>}}} -> {"observation": "text" | null}
//   {"reward": {"episodes": [5, 6]}}                   -> {"rewards": [1.0, null]}
//
// A tool that crashes, hangs past timeout_seconds or answers off-protocol
// fails that call (the model sees an error result); the program is started
// again for the next call. One that cannot start (or announce its tools) is
// an InputError before training. POSIX only, not thread-safe.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rewards/program.hpp"

namespace trlx::rewards {

struct ToolResult {
  bool ok = false;
  // The tool message's content: the result (a JSON string as it is, other
  // JSON as its text), or the error message.
  std::string text;
};

class ToolProgram {
 public:
  ~ToolProgram();
  const std::string& name() const;
  const std::string& command() const;
  // The function schemas it announced, in its order.
  const nlohmann::ordered_json& schemas() const { return schemas_; }
  // Whether the announcement named `tool` as async (its results follow the
  // others', in TRL's order).
  bool is_async(const std::string& tool) const;
  // An environment: state per episode, reset per rollout; its name (the
  // reward's metric name) and whether it gives rewards.
  bool is_environment() const { return environment_; }
  const std::string& environment_name() const { return environment_name_; }
  bool has_reward() const { return has_reward_; }

  // One call. Never throws for what the program does: a crash, a hang or an
  // answer off-protocol is a failed call (ok false; the first such failure is
  // logged with the program's stderr), and the program is started again for
  // the next. `episode`: an environment's episode the call acts in.
  ToolResult call(const std::string& tool, const nlohmann::ordered_json& arguments,
                  std::optional<int64_t> episode = std::nullopt);
  // Environments: a new episode for a dataset row (the same id may be used
  // again later: a new reset starts it over); the text to append to the
  // prompt's last message, if any. trlx::Error when the program fails (the
  // rollout cannot start without it).
  std::optional<std::string> reset(int64_t episode, const nlohmann::ordered_json& row);
  // Environments with a reward: one score per episode (nullopt: none).
  // trlx::Error when the program fails, as for a reward program.
  std::vector<std::optional<double>> rewards(const std::vector<int64_t>& episodes);
  // Calls that failed so far, and programs started again.
  int64_t restarts() const { return restarts_; }

 private:
  friend std::unique_ptr<ToolProgram> start_tool_program(const ProgramOptions& options);
  explicit ToolProgram(ProgramOptions options);
  void launch();  // starts the program and reads its announcement
  ProgramOptions options_;
  std::unique_ptr<ProgramProcess> process_;
  nlohmann::ordered_json schemas_ = nlohmann::ordered_json::array();
  std::vector<std::string> async_;
  bool environment_ = false, has_reward_ = false;
  std::string environment_name_;
  bool logged_failure_ = false;
  int64_t restarts_ = 0;
  std::optional<std::string> dead_;  // set when it cannot be started again
};

// Starts a tool program now and reads its announcement: InputError (exit
// code 2) when it cannot start, exits, or announces no valid tool list.
std::unique_ptr<ToolProgram> start_tool_program(const ProgramOptions& options);

}  // namespace trlx::rewards

#pragma once
// Agent rollouts (grpo and rloo with `tools:`): the tool programs of a run,
// what the model's calls are run against, and the rules of TRL 1.16's
// multi-turn loop that do not need the engine (the loop itself is
// OnlineTrainer::continue_with_tools, in tool_rollout.cpp).
#include <cstdint>
#include <climits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rewards/reward_function.hpp"
#include "rewards/tool_program.hpp"
#include "trainers/tool_calls.hpp"

namespace trlx::trainers {

struct OnlineConfig;
struct TextInputs;
struct PromptExample;

struct ToolBox {
  std::vector<std::unique_ptr<rewards::ToolProgram>> programs;
  // The environment program, if one is among them (episodes are this
  // process's rollouts of a round: episode i is its i-th).
  rewards::ToolProgram* environment = nullptr;
  std::map<std::string, size_t> program_of;  // tool name -> its program
  nlohmann::ordered_json schemas = nlohmann::ordered_json::array();  // every tool, in program order
  ToolCallFormat format;
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();  // chat_template_kwargs
  int64_t max_iterations = INT64_MAX;
  // The template prompts and tool results render through (the tokenizer's,
  // or its training variant).
  std::shared_ptr<const text::ChatTemplate> chat_template;
};

// Starts config.tools' programs (InputError, exit 2, when one cannot start
// or two announce the same tool), checks that the tokenizer's template can
// carry tool calls, and swaps in its training variant when the template is
// not prefix-preserving (as TRL's GRPO does; Qwen3's). Null without tools.
std::shared_ptr<ToolBox> start_tools(const OnlineConfig& config, const std::string& trainer, TextInputs& text);

// What running one assistant turn's tool calls gave: the tool messages in
// TRL's order (results of calls to async tools after the others), and the
// calls and failed calls (unknown tool, not a function call, an error
// answer or a failed program) counted.
struct ToolTurn {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  int64_t calls = 0, failures = 0;
};
// `episode`: the rollout's environment episode (calls to the environment's
// tools act in it).
ToolTurn run_tool_calls(ToolBox& tools, const nlohmann::ordered_json& assistant_message,
                        std::optional<int64_t> episode = std::nullopt);

// The environment's reward (named after it, weight 1 as TRL adds it): each
// sample's episode scored by the environment program.
std::unique_ptr<rewards::RewardFunction> environment_reward(std::shared_ptr<ToolBox> tools);

// An environment's episodes for this process's rollouts: each reset with
// its dataset row (the prompt and the other columns); where the environment
// answers with text, the prompt's last message gets it appended and is
// rendered again (with the tools, through the box's template). Returns the
// rollouts' prompts (rows[i] itself where nothing changed).
std::vector<PromptExample> start_episodes(ToolBox& tools, const std::vector<const PromptExample*>& rows,
                                          const text::Tokenizer& tokenizer,
                                          const std::optional<int64_t>& max_prompt_length);

// Whether a parsed assistant message asks for tools (a non-empty tool_calls).
bool has_tool_calls(const nlohmann::ordered_json& message);

}  // namespace trlx::trainers

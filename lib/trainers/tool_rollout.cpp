// Agent rollouts: tool programs started for a run, the model's tool calls run, and the multi-turn loop.
#include "trainers/tool_rollout.hpp"

#include <algorithm>
#include <chrono>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "text/template/chat_template.hpp"
#include "text/template/training_template.hpp"
#include "model/model_config.hpp"
#include "trainers/online.hpp"

namespace trlx::trainers {

std::shared_ptr<ToolBox> start_tools(const OnlineConfig& c, const std::string& trainer, TextInputs& text) {
  if (c.tools.empty()) return nullptr;
  if (!text.chat_template)
    fail_input("{}: tools need a chat template to show the model its tools and read its calls, and the tokenizer "
               "has none; give one through chat_template_path",
               trainer);
  auto box = std::make_shared<ToolBox>();
  std::string why;
  auto format = tool_call_format(text.tokenizer, text.chat_template->source(), &why);
  if (!format) fail_input("{}: tools: {} ({})", trainer, why, text.chat_template->origin());
  box->format = *format;
  if (c.chat_template_kwargs) box->variables = nlohmann::ordered_json::parse(*c.chat_template_kwargs);
  if (c.max_tool_calling_iterations) box->max_iterations = *c.max_tool_calling_iterations;
  for (const auto& entry : c.tools) {
    rewards::ProgramOptions o;
    if (!entry.empty() && entry.front() == '{') {
      const auto spec = nlohmann::json::parse(entry);
      if (!spec.contains("command"))
        fail_input("tools: {} has no command; give {{command: \"python3 examples/tools/python_tools.py "
                   "my_tools.py\"}}",
                   entry);
      o = rewards::program_entry(spec, "tools", entry);
    } else {
      o.command = entry;
    }
    auto program = rewards::start_tool_program(o);
    const size_t index = box->programs.size();
    if (program->is_environment()) {
      if (box->environment)
        fail_input("tools: two environment programs ({} and {}); trlx runs one environment per run", 
                   box->environment->command(), program->command());
      box->environment = program.get();
    }
    for (const auto& schema : program->schemas()) {
      const std::string name = schema["function"]["name"].get<std::string>();
      if (auto it = box->program_of.find(name); it != box->program_of.end())
        fail_input("tools: two tool programs announce a tool named `{}` ({} and {}); give each tool one name",
                   name, box->programs[it->second]->command(), program->command());
      box->program_of[name] = index;
      box->schemas.push_back(schema);
    }
    log::info("{}: tool program '{}' offers {}", trainer, program->name(), [&] {
      std::string names;
      for (const auto& s : program->schemas()) names += (names.empty() ? "" : ", ") + s["function"]["name"].get<std::string>();
      return names;
    }());
    box->programs.push_back(std::move(program));
  }
  // Tool results are appended to completions token by token, which needs a
  // template that renders a conversation as a prefix of its continuation.
  if (!prefix_preserving(text.tokenizer, *text.chat_template)) {
    auto variant = text::training_variant(text.chat_template->source());
    if (!variant)
      fail_input("{}: tools: the chat template ({}) does not render a conversation as a prefix of its continuation "
                 "with a tool result, so tool results cannot be appended to a completion, and trlx knows no training "
                 "variant of it (it derives one for Qwen3 templates); give a prefix-preserving template through "
                 "chat_template_path",
                 trainer, text.chat_template->origin());
    const std::string origin = text.chat_template->origin();
    text.chat_template.emplace(std::move(variant->source), origin + " (trlx's " + variant->family + " training variant)");
    if (!prefix_preserving(text.tokenizer, *text.chat_template))
      throw Error(fmt::format("{}: the {} training variant of {} is not prefix-preserving either", trainer,
                              variant->family, origin));
    log::info("{}: tools: the chat template drops earlier turns' thinking, so prompts and tool results render "
              "through its {} training variant (every turn's thinking kept), as TRL's GRPO does",
              trainer, variant->family);
  }
  box->chat_template = std::make_shared<const text::ChatTemplate>(*text.chat_template);
  return box;
}

bool has_tool_calls(const nlohmann::ordered_json& message) {
  if (!message.is_object()) return false;
  const auto it = message.find("tool_calls");
  return it != message.end() && it->is_array() && !it->empty();
}

ToolTurn run_tool_calls(ToolBox& box, const nlohmann::ordered_json& message, std::optional<int64_t> episode) {
  ToolTurn out;
  struct Result {
    std::string name, content;
  };
  std::vector<Result> now, later;  // later: async tools' results, after the others (TRL's order)
  for (const auto& call : message.at("tool_calls")) {
    ++out.calls;
    const auto& fn = call.at("function");
    const std::string name = fn.at("name").get<std::string>();
    const auto it = box.program_of.find(name);
    if (it == box.program_of.end()) {
      ++out.failures;
      now.push_back({name, tool_error_content(fmt::format("Tool {} not found.", name))});
      continue;
    }
    auto& program = *box.programs[it->second];
    const auto r = program.call(name, fn.contains("arguments") ? fn["arguments"] : nlohmann::ordered_json::object(),
                                program.is_environment() ? episode : std::nullopt);
    if (!r.ok) ++out.failures;
    (program.is_async(name) ? later : now).push_back({name, r.ok ? r.text : tool_error_content(r.text)});
  }
  now.insert(now.end(), later.begin(), later.end());
  for (auto& r : now) out.messages.push_back({{"role", "tool"}, {"name", r.name}, {"content", r.content}});
  return out;
}

namespace {

class EnvironmentReward final : public rewards::RewardFunction {
 public:
  explicit EnvironmentReward(std::shared_ptr<ToolBox> box)
      : box_(std::move(box)), name_(box_->environment->environment_name()) {}
  const std::string& name() const override { return name_; }
  std::optional<double> implied_weight() const override { return 1.0; }
  rewards::Scores score(const std::vector<rewards::Sample>& batch) override {
    std::vector<int64_t> episodes;
    for (const auto& s : batch) {
      if (!s.episode) throw Error(fmt::format("the {} environment's reward: a completion without an episode", name_));
      episodes.push_back(*s.episode);
    }
    return box_->environment->rewards(episodes);
  }

 private:
  std::shared_ptr<ToolBox> box_;
  std::string name_;
};

}  // namespace

std::unique_ptr<rewards::RewardFunction> environment_reward(std::shared_ptr<ToolBox> box) {
  return std::make_unique<EnvironmentReward>(std::move(box));
}

std::vector<PromptExample> start_episodes(ToolBox& box, const std::vector<const PromptExample*>& rows,
                                          const text::Tokenizer& tok, const std::optional<int64_t>& max_prompt_length) {
  std::vector<PromptExample> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    PromptExample ex = *rows[i];
    nlohmann::ordered_json row = nlohmann::ordered_json::object();
    row["prompt"] = ex.prompt;
    for (const auto& [k, v] : ex.columns.items()) row[k] = v;
    const auto observation = box.environment->reset(static_cast<int64_t>(i), row);
    if (observation) {
      // Appended to the last message's text, as TRL does (no separator).
      auto& last = ex.prompt.back();
      if (!last.contains("content") || !last["content"].is_string())
        fail_input("the {} environment's observation goes after the last prompt message's text, and that message "
                   "has no text content",
                   box.environment->environment_name());
      last["content"] = last["content"].get<std::string>() + *observation;
      auto inputs = template_inputs(ex.columns, box.variables);
      inputs.tools = box.schemas;
      ex.prompt_ids = render_conversation_ids(tok, *box.chat_template, ex.prompt, true, inputs);
      if (max_prompt_length && static_cast<int64_t>(ex.prompt_ids.size()) > *max_prompt_length)
        ex.prompt_ids.erase(ex.prompt_ids.begin(), ex.prompt_ids.end() - *max_prompt_length);
    }
    out.push_back(std::move(ex));
  }
  return out;
}

void OnlineTrainer::continue_with_tools(engine::Engine& engine, const std::vector<const PromptExample*>& rows,
                                        const std::vector<size_t>& slots, Scored& out) {
  auto& box = *tools_;
  const auto& tok = tokenizer_;
  const size_t n = rows.size();
  const int64_t budget = config_.max_completion_length;
  const int64_t context = engine.model_config(engine::Role::Policy).max_position_embeddings;
  const int64_t eos = eos_ids_.empty() ? pad_id_ : eos_ids_.front();
  out.tool_masks.assign(n, {});
  out.messages.assign(n, nlohmann::ordered_json::array());
  std::vector<bool> active(n, false);
  for (size_t i = 0; i < n; ++i) {
    out.tool_masks[i].assign(out.completions[i].size(), 1);
    auto msg = parse_assistant_turn(tok, box.format, rows[i]->prompt_ids, out.completions[i], box.schemas);
    active[i] = has_tool_calls(msg);
    out.messages[i].push_back(std::move(msg));
  }
  for (int64_t iteration = 0;; ++iteration) {
    // Run this rank's calls; the rows that go on get their next turn's prompt.
    std::vector<size_t> going;
    std::vector<std::vector<int64_t>> contexts;  // prompt + completion so far + tool suffix
    std::vector<int64_t> room;                   // tokens the next turn may add
    std::vector<size_t> suffix_lengths;
    for (size_t i = 0; i < n; ++i) {
      if (!active[i] || iteration >= box.max_iterations) continue;
      active[i] = false;
      auto turn = run_tool_calls(box, out.messages[i].back(),
                                 box.environment ? std::optional<int64_t>(static_cast<int64_t>(i)) : std::nullopt);
      out.tool_calls += turn.calls;
      out.tool_failures += turn.failures;
      const auto suffix = tool_suffix_ids(tok, *box.chat_template, turn.messages, box.variables, eos);
      const auto& prompt = rows[i]->prompt_ids;
      std::vector<int64_t> pct = prompt;
      pct.insert(pct.end(), out.completions[i].begin(), out.completions[i].end());
      pct.insert(pct.end(), suffix.begin(), suffix.end());
      const auto used = static_cast<int64_t>(pct.size() - prompt.size());
      // Over the budget (or the model's context) with the results: they are
      // dropped and the completion ends as it is (the calls did run).
      if (used > budget || static_cast<int64_t>(pct.size()) >= context) continue;
      for (auto& m : turn.messages) out.messages[i].push_back(std::move(m));
      going.push_back(i);
      contexts.push_back(std::move(pct));
      room.push_back(budget - used);
      suffix_lengths.push_back(suffix.size());
    }
    // Every rank generates as often as the busiest one (a sharded forward
    // is a collective).
    std::vector<double> any = {going.empty() ? 0.0 : 1.0};
    engine.max_across_ranks(any);
    if (any[0] == 0) break;
    std::vector<size_t> turn_slots;
    for (size_t g : going) turn_slots.push_back(slots[g]);
    const auto next = generate_turn(engine, contexts, room, turn_slots, static_cast<int>(iteration) + 1);
    for (size_t k = 0; k < going.size(); ++k) {
      const size_t i = going[k];
      std::vector<int64_t> post = next[k];
      if (static_cast<int64_t>(post.size()) > room[k]) post.resize(static_cast<size_t>(room[k]));
      auto& mask = out.tool_masks[i];
      mask.insert(mask.end(), suffix_lengths[k], 0);
      mask.insert(mask.end(), post.size(), 1);
      const auto& prompt = rows[i]->prompt_ids;
      out.completions[i].assign(contexts[k].begin() + static_cast<std::ptrdiff_t>(prompt.size()), contexts[k].end());
      out.completions[i].insert(out.completions[i].end(), post.begin(), post.end());
      if (post.empty()) continue;
      auto msg = parse_assistant_turn(tok, box.format, contexts[k], post, box.schemas);
      active[i] = has_tool_calls(msg);
      out.messages[i].push_back(std::move(msg));
    }
  }
}

}  // namespace trlx::trainers

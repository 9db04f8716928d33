#pragma once
// The model's side of a tool-calling turn: what it generated read back as an
// assistant message with its tool calls (as TRL's GRPO parses a completion
// with the response template of the model's family), the text a tool's
// result becomes, and the tokens that carry tool results back to the model
// (the tool suffix, rendered through the chat template and never re-tokenized
// from text). Torch-free.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace trlx::text {
class Tokenizer;
class ChatTemplate;
}  // namespace trlx::text

namespace trlx::trainers {

// How a model family writes a turn with tool calls. Known: "qwen3", the
// Hermes-style format of Qwen2.5 and Qwen3 (an optional <think>...</think>
// block, then text, then <tool_call>{"name": ..., "arguments": {...}}</tool_call>
// blocks, then <|im_end|>). Delimiters count only when generated as their
// own token id: a model that spells <tool_call> with ordinary pieces wrote
// text.
struct ToolCallFormat {
  std::string family;
  int32_t im_start = -1, im_end = -1, call_open = -1, call_close = -1;
  int32_t think_open = -1, think_close = -1;  // -1: the tokenizer has no such token
  // The template's control tokens (added tokens that are special or that
  // the template writes): these decode as delimiters only from their ids.
  std::unordered_set<int32_t> control;
};

// The format of a tokenizer and chat template, or nullopt when trlx knows
// none for them (then `why` says what is missing).
std::optional<ToolCallFormat> tool_call_format(const text::Tokenizer& tokenizer, const std::string& template_source,
                                               std::string* why = nullptr);

// A generated turn read as TRL reads it: `prefix` is everything before it
// (the prompt, earlier turns and the last tool suffix), of which the part
// after the last "<|im_start|>assistant\n" is read first (a template may
// open the turn, as Qwen3's empty think block with enable_thinking false).
// The result is {"role": "assistant", "content": "...", and when present
// "reasoning_content", "tool_calls": [{"type": "function", "function":
// {"name", "arguments"}}]}; string arguments are converted to the type the
// tool's schema in `tools` declares ("4" for an integer parameter is 4). A
// turn that cannot be read (a tool call that is not JSON, has no name, ...)
// is plain content, the completion decoded without special tokens, with no
// tool calls: nothing runs and nothing counts as a failed call, as in TRL.
nlohmann::ordered_json parse_assistant_turn(const text::Tokenizer& tokenizer, const ToolCallFormat& format,
                                            const std::vector<int64_t>& prefix, const std::vector<int64_t>& ids,
                                            const nlohmann::ordered_json& tools);

// Python's str() of the error object TRL makes of a failed call:
// {'error': '<message>'} with the message as Python's repr writes it.
std::string tool_error_content(const std::string& message);
// Python's repr() of a string.
std::string python_repr(const std::string& s);

// The ids that follow a turn with tool calls and carry `tool_messages`
// ([{"role": "tool", "name", "content"}, ...]) back to the model, up to and
// including the next assistant header: the difference between a dummy
// conversation rendered without and with them (TRL's _get_tool_suffix_ids),
// cut after the last eos of the shorter one. `variables`: the template
// variables (chat_template_kwargs).
std::vector<int64_t> tool_suffix_ids(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template,
                                     const nlohmann::ordered_json& tool_messages,
                                     const nlohmann::ordered_json& variables, int64_t eos_id);

// Whether the template renders a conversation as a prefix of its
// continuation with a tool result (what tool_suffix_ids relies on); Qwen3's
// stock template is not, since it drops earlier turns' thinking.
bool prefix_preserving(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template);

}  // namespace trlx::trainers

#pragma once
// Chat templates: a jinja2 engine that renders tokenizer_config.json's
// chat_template byte-for-byte as transformers' apply_chat_template does
// (sandboxed jinja2 with trim_blocks, lstrip_blocks, loopcontrols, its tojson
// filter, raise_exception/strftime_now, and the {% generation %} tag that marks
// assistant text for assistant-only loss).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trlx::text {

struct RenderedChat {
  std::string text;
  // Byte ranges [begin, end) of `text` rendered inside {% generation %} blocks,
  // in the order the blocks ran.
  std::vector<std::pair<size_t, size_t>> generation_spans;
};

// Bounds on one render, so a hostile or broken template fails instead of
// running away. Real chat templates stay far below the defaults.
struct TemplateLimits {
  uint64_t max_steps = 200'000'000;
  size_t max_output = size_t{1} << 30;
};

class ChatTemplate {
 public:
  // Parses now. A syntax error, an unknown filter or test -> InputError naming
  // `origin` (e.g. "tokenizer_config.json: chat_template") and the template
  // line and column.
  ChatTemplate(std::string source, std::string origin);

  // Renders with the keys of `context` (an object) as template variables.
  // Runtime errors (raise_exception, undefined calls, type errors) ->
  // InputError naming origin and template line.
  RenderedChat render(const nlohmann::ordered_json& context) const;

  const std::string& source() const;
  const std::string& origin() const;
  // Whether the template has a {% generation %} block (assistant masks).
  bool has_generation_tag() const;
  void set_limits(const TemplateLimits& limits) { limits_ = limits; }

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
  TemplateLimits limits_;
};

// What apply_chat_template passes besides the messages. The json pointers are
// borrowed for the call; null pointers mean None.
struct ChatOptions {
  bool add_generation_prompt = false;
  // The text ends inside the final message, which the model is to continue
  // (its content's end, whatever the template writes after it is cut), as
  // transformers' continue_final_message does.
  bool continue_final_message = false;
  const nlohmann::ordered_json* tools = nullptr;      // list of JSON schemas
  const nlohmann::ordered_json* documents = nullptr;  // list of {title, text}
  const nlohmann::ordered_json* extra = nullptr;      // object: more variables (enable_thinking, ...)
  // The tokenizer's named special tokens; unset ones are not defined in the
  // template, as with transformers' special_tokens_map.
  std::optional<std::string> bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token;
};

// transformers' apply_chat_template(tokenize=False): drops message keys whose
// value is null, copies reasoning under `reasoning_content` and `thinking`,
// and passes messages, tools, documents, add_generation_prompt, the special
// tokens and the extra variables (which override special tokens).
RenderedChat apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                 const ChatOptions& options);

}  // namespace trlx::text

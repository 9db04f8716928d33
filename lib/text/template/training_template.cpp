// Training variants of known chat templates: the edits that put {% generation %} around assistant turns and make them prefix-preserving.
#include "text/template/training_template.hpp"

#include <string_view>

namespace trlx::text {

namespace {

size_t count(const std::string& s, std::string_view what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// Qwen3 (and the Qwen templates that share its assistant turn): the turn
// opens with its header, then the thinking block, the content, the tool
// calls and <|im_end|>\n. The stock template writes the thinking block only
// for turns after the last user query; the variant writes it for every
// turn, inside the generation block with everything after the header.
std::optional<std::string> qwen3(const std::string& s) {
  static constexpr std::string_view kBranch = "{%- if loop.index0 > ns.last_query_index %}";
  static constexpr std::string_view kToolCalls = "{%- if message.tool_calls %}";
  static constexpr std::string_view kToolTurn = "{%- elif message.role == \"tool\" %}";
  static constexpr std::string_view kEnd = "{{- '<|im_end|>\\n' }}";
  if (count(s, kBranch) != 1 || count(s, kToolTurn) != 1 || s.find("<|im_start|>") == std::string::npos ||
      s.find("<tool_call>") == std::string::npos)
    return std::nullopt;
  const size_t branch = s.find(kBranch);
  const size_t calls = s.find(kToolCalls, branch);
  const size_t tool_turn = s.find(kToolTurn, branch);
  if (calls == std::string::npos || tool_turn == std::string::npos || calls > tool_turn) return std::nullopt;
  const size_t end = s.rfind(kEnd, tool_turn);
  if (end == std::string::npos || end < calls) return std::nullopt;
  // The branch must be the header-and-thinking one this edit replaces.
  const std::string_view replaced(s.data() + branch, calls - branch);
  if (replaced.find("reasoning_content.strip('\\n')") == std::string_view::npos) return std::nullopt;
  std::string out = s.substr(0, branch);
  out += R"({{- '<|im_start|>' + message.role + '\n' }}
        {%- generation %}
        {{- '<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        )";
  out.append(s, calls, end + kEnd.size() - calls);
  out += "\n        {%- endgeneration %}";
  out.append(s, end + kEnd.size(), std::string::npos);
  return out;
}

}  // namespace

std::optional<TrainingTemplate> training_variant(const std::string& source) {
  if (source.find("{%- generation") != std::string::npos || source.find("{% generation") != std::string::npos)
    return std::nullopt;
  if (auto v = qwen3(source)) return TrainingTemplate{"qwen3", std::move(*v)};
  return std::nullopt;
}

}  // namespace trlx::text

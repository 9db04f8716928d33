// Chat templates as transformers' apply_chat_template renders them, with the assistant mask.
#include "text/template/chat_template.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "text/template/interp.hpp"

namespace trlx::text {

using nlohmann::ordered_json;
using tpl::Kind;
using tpl::Value;

struct ChatTemplate::Impl {
  std::string source;
  std::string origin;
  tpl::Nodes body;
  bool has_generation = false;
};

namespace {

bool find_generation(const tpl::Nodes& body) {
  for (const auto& n : body) {
    if (n->kind == tpl::NK::Generation) return true;
    if (find_generation(n->body) || find_generation(n->else_body)) return true;
  }
  return false;
}

Value from_json(const ordered_json& j, int depth) {
  if (depth > 512) fail_input("JSON nested too deeply for a chat template");
  switch (j.type()) {
    case ordered_json::value_t::null: return Value::none();
    case ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case ordered_json::value_t::array: {
      tpl::List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, depth + 1));
      return Value::make_list(std::move(items));
    }
    case ordered_json::value_t::object: {
      auto d = std::make_shared<tpl::Dict>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d->items.emplace_back(Value::string(it.key()), from_json(it.value(), depth + 1));
      return Value::make_dict(d);
    }
    default: return Value::none();
  }
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string origin) {
  auto impl = std::make_shared<Impl>();
  impl->source = std::move(source);
  impl->origin = std::move(origin);
  try {
    impl->body = tpl::parse_template(impl->source);
    tpl::check_names(impl->body);
  } catch (const tpl::SyntaxError& e) {
    if (e.col > 0)
      fail_input("{}: template syntax error at line {}, column {}: {}", impl->origin, e.line, e.col, e.what());
    fail_input("{}: template syntax error at line {}: {}", impl->origin, e.line, e.what());
  }
  impl->has_generation = find_generation(impl->body);
  impl_ = std::move(impl);
}

const std::string& ChatTemplate::source() const { return impl_->source; }
const std::string& ChatTemplate::origin() const { return impl_->origin; }
bool ChatTemplate::has_generation_tag() const { return impl_->has_generation; }

RenderedChat ChatTemplate::render(const ordered_json& context) const {
  if (!context.is_object() && !context.is_null())
    fail_input("{}: the template context must be a JSON object", impl_->origin);
  auto root = std::make_shared<tpl::Scope>();
  root->parent = tpl::make_globals();
  if (context.is_object())
    for (auto it = context.begin(); it != context.end(); ++it) root->set(it.key(), from_json(it.value(), 0));
  tpl::Limits limits;
  limits.max_steps = limits_.max_steps;
  limits.max_output = limits_.max_output;
  tpl::Interp interp(limits);
  RenderedChat out;
  try {
    out.text = interp.render(impl_->body, root, &out.generation_spans);
  } catch (const tpl::RenderError& e) {
    std::string msg = e.what();
    if (!msg.empty() && msg[0] == '\x01')
      fail_input("{}: the chat template raised an error at line {}: {}", impl_->origin, interp.line(), msg.substr(1));
    fail_input("{}: template error at line {}: {}", impl_->origin, interp.line(), msg);
  }
  return out;
}

RenderedChat apply_chat_template(const ChatTemplate& tmpl, const ordered_json& messages, const ChatOptions& options) {
  if (!messages.is_array()) fail_input("{}: messages must be a list of message objects", tmpl.origin());
  ordered_json chat = ordered_json::array();
  static const char* kReasoning[] = {"reasoning_content", "thinking", "reasoning"};
  for (size_t k = 0; k < messages.size(); ++k) {
    const ordered_json& m = messages[k];
    if (!m.is_object()) fail_input("{}: message {} is not an object", tmpl.origin(), k);
    ordered_json clean = ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) clean[it.key()] = it.value();
    const ordered_json* reasoning = nullptr;
    for (const char* key : kReasoning)
      if (clean.contains(key)) {
        reasoning = &clean[key];
        break;
      }
    if (reasoning) {
      ordered_json r = *reasoning;
      ordered_json aliased = ordered_json::object();
      aliased["thinking"] = r;
      for (auto it = clean.begin(); it != clean.end(); ++it) aliased[it.key()] = it.value();
      aliased["reasoning_content"] = r;
      clean = std::move(aliased);
    }
    chat.push_back(std::move(clean));
  }
  ordered_json ctx = ordered_json::object();
  const std::pair<const char*, const std::optional<std::string>*> specials[] = {
      {"bos_token", &options.bos_token}, {"eos_token", &options.eos_token}, {"unk_token", &options.unk_token},
      {"sep_token", &options.sep_token}, {"pad_token", &options.pad_token}, {"cls_token", &options.cls_token},
      {"mask_token", &options.mask_token}};
  for (const auto& [name, tok] : specials)
    if (*tok) ctx[name] = **tok;
  if (options.extra) {
    if (!options.extra->is_object()) fail_input("{}: extra template variables must be an object", tmpl.origin());
    for (auto it = options.extra->begin(); it != options.extra->end(); ++it) ctx[it.key()] = it.value();
  }
  // continue_final_message: a tag after the final message's content (its last
  // text block when the content is a list) marks where the text is cut.
  static const std::string kTag = "CONTINUE_FINAL_MESSAGE_TAG ";
  std::string final_text;
  if (options.continue_final_message) {
    if (chat.empty()) fail_input("{}: continue_final_message is set but the conversation is empty", tmpl.origin());
    auto& last = chat.back();
    if (!last.contains("content"))
      fail_input("{}: continue_final_message is set but the final message has no \"content\" to continue",
                 tmpl.origin());
    if (tmpl.source().find("content") == std::string::npos)
      fail_input("{}: continue_final_message is set to \"content\" but the chat template does not use it",
                 tmpl.origin());
    auto& content = last["content"];
    if (content.is_string()) {
      final_text = content.get<std::string>();
      content = final_text + kTag;
    } else if (content.is_array()) {
      bool found = false;
      for (auto it = content.rbegin(); it != content.rend() && !found; ++it)
        if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
          final_text = (*it)["text"].get<std::string>();
          (*it)["text"] = final_text + kTag;
          found = true;
        }
      if (!found)
        fail_input("{}: continue_final_message is set but the final message has no text to continue", tmpl.origin());
    } else {
      fail_input("{}: continue_final_message is set but the final message's content is {}", tmpl.origin(),
                 content.type_name());
    }
  }
  ctx["messages"] = std::move(chat);
  ctx["tools"] = options.tools ? *options.tools : ordered_json(nullptr);
  ctx["documents"] = options.documents ? *options.documents : ordered_json(nullptr);
  ctx["add_generation_prompt"] = options.add_generation_prompt;
  RenderedChat out = tmpl.render(ctx);
  if (options.continue_final_message) {
    auto strip = [](const std::string& s) {
      const auto b = s.find_first_not_of(" \t\n\r\f\v");
      if (b == std::string::npos) return std::string();
      return s.substr(b, s.find_last_not_of(" \t\n\r\f\v") - b + 1);
    };
    const std::string tag = strip(kTag);
    const auto at = out.text.rfind(tag);
    if (out.text.find(strip(final_text)) == std::string::npos || at == std::string::npos)
      fail_input("{}: continue_final_message is set but the final message does not appear in the rendered chat "
                 "(the template deletes part of it)",
                 tmpl.origin());
    if (out.text.compare(at, kTag.size(), kTag) == 0) {
      out.text.resize(at);
    } else {
      // Trailing spacing the template trimmed: cut before the tag and its spaces.
      out.text.resize(at);
      const auto e = out.text.find_last_not_of(" \t\n\r\f\v");
      out.text.resize(e == std::string::npos ? 0 : e + 1);
    }
    for (auto& [b, e] : out.generation_spans) {
      b = std::min(b, out.text.size());
      e = std::min(e, out.text.size());
    }
  }
  return out;
}

}  // namespace trlx::text

// Tool-calling turns read from generated ids, tool results as text, and the tool suffix between turns.
#include "trainers/tool_calls.hpp"

#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/common.hpp"

namespace trlx::trainers {

namespace {

// The code point at s[i] (UTF-8) and its length; invalid bytes are one
// byte each.
std::pair<uint32_t, size_t> code_point(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  auto bits = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (c < 0x80) return {c, 1};
  if ((c & 0xE0) == 0xC0 && cont(1)) return {((c & 0x1Fu) << 6) | bits(1), 2};
  if ((c & 0xF0) == 0xE0 && cont(1) && cont(2)) return {((c & 0x0Fu) << 12) | (bits(1) << 6) | bits(2), 3};
  if ((c & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3))
    return {((c & 0x07u) << 18) | (bits(1) << 12) | (bits(2) << 6) | bits(3), 4};
  return {c, 1};
}

// Python's str.isspace().
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python's str.strip().
std::string py_strip(const std::string& s) {
  size_t lo = 0, hi = s.size();
  while (lo < hi) {
    const auto [c, n] = code_point(s, lo);
    if (!py_space(c)) break;
    lo += n;
  }
  // From the right: find the last non-space code point.
  size_t last_end = lo;
  for (size_t i = lo; i < hi;) {
    const auto [c, n] = code_point(s, i);
    i += n;
    if (!py_space(c)) last_end = i;
  }
  return s.substr(lo, last_end - lo);
}

// The length of the whitespace run at the start of s (the `\s*` after a
// closing delimiter).
size_t leading_space(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto [c, n] = code_point(s, i);
    if (!py_space(c) || (c >= 0x1C && c <= 0x1F)) break;
    i += n;
  }
  return i;
}

// A piece of a decoded turn: text, or a control token generated as its id.
struct Piece {
  bool control = false;
  int32_t id = -1;
  std::string text;  // the text, or the control token's spelling
};

std::vector<Piece> pieces_of(const text::Tokenizer& tok, const ToolCallFormat& f, const std::vector<int64_t>& ids) {
  std::vector<Piece> out;
  std::vector<int32_t> run;
  auto flush = [&] {
    if (run.empty()) return;
    out.push_back({false, -1, tok.decode(run, false)});
    run.clear();
  };
  for (const int64_t id64 : ids) {
    const auto id = static_cast<int32_t>(id64);
    if (f.control.count(id)) {
      flush();
      out.push_back({true, id, tok.id_to_token(id)});
    } else {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

// Python's float() of a string, or nullopt.
std::optional<double> py_float(const std::string& raw) {
  std::string s = py_strip(raw), clean;
  if (s.empty()) return std::nullopt;
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string body = lower;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body = body.substr(1);
  if (body == "inf" || body == "infinity" || body == "nan") return std::strtod(lower.c_str(), nullptr);
  // Digits, one point, an exponent; underscores only between digits.
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return std::nullopt;
    clean += c;
  }
  char* end = nullptr;
  const double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

// Python's int() of a string, or nullopt (beyond int64: nullopt).
std::optional<int64_t> py_int(const std::string& raw) {
  const std::string s = py_strip(raw);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1])))
      continue;
    if (!(std::isdigit(static_cast<unsigned char>(c)) || ((c == '+' || c == '-') && i == 0))) return std::nullopt;
    clean += c;
  }
  if (clean.empty() || clean == "+" || clean == "-") return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(clean.c_str(), &end, 10);
  if (errno == ERANGE || end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

// The types a JSON schema allows (type, type lists, anyOf/oneOf, nullable).
void schema_types(const nlohmann::ordered_json& schema, std::vector<std::string>& out) {
  if (!schema.is_object()) return;
  if (auto it = schema.find("type"); it != schema.end()) {
    if (it->is_string()) out.push_back(it->get<std::string>());
    if (it->is_array())
      for (const auto& t : *it)
        if (t.is_string()) out.push_back(t.get<std::string>());
  }
  for (const char* u : {"anyOf", "oneOf"})
    if (auto it = schema.find(u); it != schema.end() && it->is_array())
      for (const auto& choice : *it) schema_types(choice, out);
  if (schema.value("nullable", false) && std::find(out.begin(), out.end(), "null") == out.end()) out.push_back("null");
}

// A string argument as the first of `types` it reads as; unchanged when none.
nlohmann::ordered_json coerce(const std::string& raw, const std::vector<std::string>& types) {
  for (const auto& t : types) {
    if (t == "integer") {
      if (auto v = py_int(raw)) return *v;
      if (auto d = py_float(raw); d && std::isfinite(*d) && std::floor(*d) == *d && std::fabs(*d) < 9.2e18)
        return static_cast<int64_t>(*d);
    } else if (t == "number") {
      auto d = py_float(raw);
      if (!d || !std::isfinite(*d)) continue;
      if (std::floor(*d) == *d && raw.find('.') == std::string::npos && std::fabs(*d) < 9.2e18)
        return static_cast<int64_t>(*d);
      return *d;
    } else if (t == "boolean") {
      std::string l;
      for (char c : py_strip(raw)) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (l == "true" || l == "1") return true;
      if (l == "false" || l == "0") return false;
    } else if (t == "null") {
      const auto s = py_strip(raw);
      if (s == "null" || s == "None") return nullptr;
    } else if (t == "object" || t == "array") {
      const auto v = nlohmann::ordered_json::parse(raw, nullptr, false);
      if (!v.is_discarded() && (t == "object" ? v.is_object() : v.is_array())) return v;
    }
  }
  return raw;
}

// The tools' parameter properties by tool name.
std::map<std::string, nlohmann::ordered_json> tool_parameters(const nlohmann::ordered_json& tools) {
  std::map<std::string, nlohmann::ordered_json> out;
  if (!tools.is_array()) return out;
  for (const auto& tool : tools) {
    if (!tool.is_object()) continue;
    const auto& fn = tool.contains("function") ? tool["function"] : tool;
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
    nlohmann::ordered_json props = nlohmann::ordered_json::object();
    if (auto p = fn.find("parameters"); p != fn.end() && p->is_object())
      if (auto q = p->find("properties"); q != p->end() && q->is_object()) props = *q;
    out[fn["name"].get<std::string>()] = props;
  }
  return out;
}

void coerce_call(nlohmann::ordered_json& call, const std::map<std::string, nlohmann::ordered_json>& params) {
  if (!call.is_object() || !call.contains("function")) return;
  auto& fn = call["function"];
  if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string() || !fn.contains("arguments") ||
      !fn["arguments"].is_object())
    return;
  const auto it = params.find(fn["name"].get<std::string>());
  if (it == params.end() || it->second.empty()) return;
  for (auto& [key, arg] : fn["arguments"].items()) {
    if (!it->second.contains(key)) continue;
    std::vector<std::string> types;
    schema_types(it->second[key], types);
    if (types.empty()) continue;
    if (arg.is_string()) {
      arg = coerce(arg.get<std::string>(), types);
    } else if (arg.is_array() && std::find(types.begin(), types.end(), "array") == types.end()) {
      for (auto& item : arg)
        if (item.is_string()) item = coerce(item.get<std::string>(), types);
    }
  }
}

struct Unreadable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The reading of a turn (TRL's response template for the family, fed the
// prefix then the ids, then finalized); Unreadable where TRL's parse raises.
nlohmann::ordered_json read_turn(const text::Tokenizer& tok, const ToolCallFormat& f,
                                 const std::vector<int64_t>& prefix, const std::vector<int64_t>& ids,
                                 const nlohmann::ordered_json& tools) {
  // The prefix from its last assistant header on.
  std::vector<Piece> all = pieces_of(tok, f, prefix);
  const std::string header = "assistant\n";
  size_t from = 0;
  std::string first_text;
  bool anchored = false;
  for (size_t i = 0; i + 1 < all.size(); ++i)
    if (all[i].control && all[i].id == f.im_start && !all[i + 1].control &&
        all[i + 1].text.compare(0, header.size(), header) == 0) {
      from = i + 1;
      anchored = true;
    }
  std::vector<Piece> stream;
  if (anchored) {
    stream.push_back({false, -1, all[from].text.substr(header.size())});
    stream.insert(stream.end(), all.begin() + static_cast<std::ptrdiff_t>(from) + 1, all.end());
  } else {
    stream = all;
  }
  const auto generated = pieces_of(tok, f, ids);
  stream.insert(stream.end(), generated.begin(), generated.end());

  enum class Region { content, reasoning, call };
  Region cur = Region::content;
  std::string body;
  bool opened = false;
  nlohmann::ordered_json out = {{"role", "assistant"}};
  const auto params = tool_parameters(tools);
  auto close = [&] {
    if (!opened) {
      cur = Region::content, body.clear();
      return;
    }
    if (cur == Region::content) {
      out["content"] = py_strip(body);
    } else if (cur == Region::reasoning) {
      out["reasoning_content"] = py_strip(body);
    } else {
      auto parsed = nlohmann::ordered_json::parse(body, nullptr, false);
      if (parsed.is_discarded()) throw Unreadable("a tool call that is not JSON");
      nlohmann::ordered_json call = {{"type", "function"}, {"function", std::move(parsed)}};
      if (!params.empty()) coerce_call(call, params);
      if (!out.contains("tool_calls")) out["tool_calls"] = nlohmann::ordered_json::array();
      out["tool_calls"].push_back(std::move(call));
    }
    cur = Region::content;
    body.clear();
    opened = false;
  };
  bool skip_space = false;  // the `\s*` after a closing delimiter
  for (const auto& p : stream) {
    if (!p.control) {
      std::string text = p.text;
      if (skip_space) {
        text = text.substr(leading_space(text));
        if (text.empty()) continue;
        skip_space = false;
      }
      if (!text.empty()) {
        body += text;
        opened = true;
      }
      continue;
    }
    skip_space = false;
    if (cur == Region::content && (p.id == f.call_open || (f.think_open >= 0 && p.id == f.think_open))) {
      close();
      cur = p.id == f.call_open ? Region::call : Region::reasoning;
      opened = true;
    } else if ((cur == Region::content && p.id == f.im_end) || (cur == Region::call && p.id == f.call_close) ||
               (cur == Region::reasoning && p.id == f.think_close)) {
      // An empty content region closed by <|im_end|> leaves nothing behind.
      close();
      skip_space = true;
    } else {
      body += p.text;
      opened = true;
    }
  }
  close();
  // Empty fields are dropped, as the parser's finalize does.
  nlohmann::ordered_json kept = nlohmann::ordered_json::object();
  for (const auto& [k, v] : out.items()) {
    const bool empty = v.is_null() || (v.is_string() && v.get<std::string>().empty()) ||
                       ((v.is_array() || v.is_object()) && v.empty());
    if (k == "role" || !empty) kept[k] = v;
  }
  // TRL's touches: a trailing eos string off the content, content always a
  // string, tool calls checked.
  if (kept.contains("content") && kept["content"].is_string()) {
    std::string c = kept["content"].get<std::string>();
    if (const auto& eos = tok.eos_token(); eos && !eos->empty() && c.size() >= eos->size() &&
                                           c.compare(c.size() - eos->size(), eos->size(), *eos) == 0)
      c.resize(c.size() - eos->size());
    kept["content"] = c;
  }
  if (!kept.contains("content")) kept["content"] = "";
  if (kept.contains("tool_calls")) {
    for (auto& call : kept["tool_calls"]) {
      if (!call.is_object()) throw Unreadable("a tool call that is not an object");
      if (call.contains("function")) {
        auto& fn = call["function"];
        if (!fn.is_object()) throw Unreadable("a tool call whose function is not an object");
        if (!fn.contains("name") || !fn["name"].is_string()) throw Unreadable("a tool call without a name");
        if (!fn.contains("arguments") || fn["arguments"].is_null()) fn["arguments"] = nlohmann::ordered_json::object();
      }
    }
  }
  return kept;
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format(const text::Tokenizer& tok, const std::string& source,
                                               std::string* why) {
  ToolCallFormat f;
  f.family = "qwen3";
  for (const auto& t : tok.added_tokens()) {
    const bool in_template = source.find(t.content) != std::string::npos;
    bool blank = true;
    for (char c : t.content) blank = blank && std::isspace(static_cast<unsigned char>(c));
    if (t.special || (in_template && !blank)) f.control.insert(t.id);
  }
  auto id_of = [&](const char* s) -> int32_t {
    const auto id = tok.token_to_id(s);
    return id && f.control.count(*id) ? *id : -1;
  };
  f.im_start = id_of("<|im_start|>");
  f.im_end = id_of("<|im_end|>");
  f.call_open = id_of("<tool_call>");
  f.call_close = id_of("</tool_call>");
  f.think_open = id_of("<think>");
  f.think_close = id_of("</think>");
  if (f.think_open < 0 || f.think_close < 0) f.think_open = f.think_close = -1;
  std::vector<std::string> missing;
  if (source.find("<tool_call>") == std::string::npos) missing.push_back("a template that writes <tool_call>");
  for (auto [id, name] : {std::pair{f.im_start, "<|im_start|>"}, std::pair{f.im_end, "<|im_end|>"},
                          std::pair{f.call_open, "<tool_call>"}, std::pair{f.call_close, "</tool_call>"}})
    if (id < 0) missing.push_back(fmt::format("{} as an added token", name));
  if (!missing.empty()) {
    if (why) {
      *why = "trlx reads tool calls in the <tool_call>{...}</tool_call> format of Qwen2.5/Qwen3 (Hermes-style) "
             "chat templates; this tokenizer and template lack: ";
      for (size_t i = 0; i < missing.size(); ++i) *why += (i ? ", " : "") + missing[i];
    }
    return std::nullopt;
  }
  return f;
}

nlohmann::ordered_json parse_assistant_turn(const text::Tokenizer& tok, const ToolCallFormat& f,
                                            const std::vector<int64_t>& prefix, const std::vector<int64_t>& ids,
                                            const nlohmann::ordered_json& tools) {
  try {
    return read_turn(tok, f, prefix, ids, tools);
  } catch (const Unreadable&) {
    const std::vector<int32_t> ids32(ids.begin(), ids.end());
    return {{"role", "assistant"}, {"content", tok.decode(ids32, true)}};
  }
}

std::string python_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const auto [c, n] = code_point(s, i);
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<uint32_t>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) out += fmt::format("\\x{:02x}", c);
    else if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) ||
             c == 0x3000 || c == 0xFEFF || c == 0x1680)
      out += fmt::format("\\u{:04x}", c);
    else out += s.substr(i, n);
    i += n;
  }
  return out + quote;
}

std::string tool_error_content(const std::string& message) { return "{'error': " + python_repr(message) + "}"; }

std::vector<int64_t> tool_suffix_ids(const text::Tokenizer& tok, const text::ChatTemplate& tmpl,
                                     const nlohmann::ordered_json& tool_messages,
                                     const nlohmann::ordered_json& variables, int64_t eos_id) {
  const std::string name = tool_messages.at(0).value("name", "");
  nlohmann::ordered_json dummy = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", "dummy"}},
       {{"role", "assistant"},
        {"content", ""},
        {"tool_calls", {{{"type", "function"}, {"function", {{"name", name}, {"arguments", nlohmann::ordered_json::object()}}}}}}}});
  TemplateInputs in;
  in.variables = variables.is_object() ? variables : nlohmann::ordered_json::object();
  auto prefix = render_conversation_ids(tok, tmpl, dummy, false, in);
  for (const auto& m : tool_messages) dummy.push_back(m);
  const auto full = render_conversation_ids(tok, tmpl, dummy, true, in);
  for (size_t i = prefix.size(); i-- > 0;)
    if (prefix[i] == eos_id) {
      prefix.resize(i + 1);
      break;
    }
  if (full.size() < prefix.size() || !std::equal(prefix.begin(), prefix.end(), full.begin()))
    throw Error("the chat template does not render a conversation as a prefix of the same conversation with tool "
                "results after it, so tool results cannot be appended to a completion");
  return {full.begin() + static_cast<std::ptrdiff_t>(prefix.size()), full.end()};
}

bool prefix_preserving(const text::Tokenizer& tok, const text::ChatTemplate& tmpl) {
  nlohmann::ordered_json m = nlohmann::ordered_json::array(
      {{{"role", "user"}, {"content", "dummy"}},
       {{"role", "assistant"},
        {"content", ""},
        {"tool_calls", {{{"type", "function"}, {"function", {{"name", "dummy"}, {"arguments", nlohmann::ordered_json::object()}}}}}}}});
  const TemplateInputs none;
  const auto a = render_conversation_ids(tok, tmpl, m, false, none);
  m.push_back({{"role", "tool"}, {"name", "dummy"}, {"content", "dummy"}});
  const auto b = render_conversation_ids(tok, tmpl, m, true, none);
  return b.size() >= a.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace trlx::trainers

// `trlx tokenize` and `trlx render-template`: look at the data path through
// the very engines the trainers use (text/tokenizer, text/template).
//
// JSON output is one object per input, printed compactly with keys in a fixed
// order (the same bytes as Python's json.dumps(..., ensure_ascii=False,
// separators=(",", ":"))), so scripts and tests can compare lines as text.
// Offsets and generation spans are UTF-8 byte ranges; transformers reports
// characters (the two agree on ASCII text).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli.hpp"
#include "cli/jsonl.hpp"
#include "cli/parse.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/common.hpp"

namespace trlx::cli {

namespace {

using ordered_json = nlohmann::ordered_json;

// Compact, UTF-8 kept as is; invalid UTF-8 (possible in --text) becomes U+FFFD
// instead of an exception.
std::string dump(const ordered_json& j) { return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

std::string read_text_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail_input("{} {}: is a directory, expected a file", what, path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{} {}: cannot read the file", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail_input("{} {}: read error", what, path);
  return ss.str();
}

// "1,2, 3" or "[1,2,3]" -> ids.
std::vector<int32_t> parse_id_list(const std::string& s, const std::string& where) {
  std::string t = s;
  for (char& c : t)
    if (c == ',' || c == '[' || c == ']') c = ' ';
  std::istringstream in(t);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE || v < INT32_MIN || v > INT32_MAX)
      fail_input("{}: `{}` is not a token id (expected integers separated by commas)", where, word);
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) fail_input("{}: no token ids in `{}`", where, s);
  return ids;
}

std::vector<int32_t> ids_from_json(const ordered_json& v, const std::string& where) {
  if (!v.is_array()) fail_input("{}: expected a list of token ids, found {}", where, v.type_name());
  std::vector<int32_t> ids;
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < INT32_MIN || x.get<int64_t>() > INT32_MAX)
      fail_input("{}: expected a list of integer token ids, found {}", where, dump(x));
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

// Control characters shown as escapes, so one token stays on one line.
std::string visible(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

bool use_colour() { return isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr; }

// Tokens side by side: alternating background colours on a terminal,
// [brackets] otherwise.
std::string join_tokens(const std::vector<std::string>& parts, bool colour) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (colour) out += fmt::format("\033[{}m{}\033[0m", i % 2 ? "48;5;153;30" : "48;5;223;30", parts[i]);
    else out += "[" + parts[i] + "]";
  }
  return out;
}

void print_encoding(const text::Tokenizer& tok, const std::string& text, bool add_special, bool json_out,
                    size_t index, size_t count) {
  const text::Encoding enc = tok.encode(text, add_special);
  std::vector<std::string> tokens;
  tokens.reserve(enc.ids.size());
  for (int32_t id : enc.ids) tokens.push_back(tok.id_to_token(id));
  if (json_out) {
    ordered_json offsets = ordered_json::array();
    for (const auto& [b, e] : enc.offsets) offsets.push_back({b, e});
    ordered_json j;
    j["text"] = text;
    j["ids"] = enc.ids;
    j["tokens"] = tokens;
    j["offsets"] = std::move(offsets);
    std::cout << dump(j) << "\n";
    return;
  }
  const bool colour = use_colour();
  // The input bytes each token covers; tokens a post-processor added cover
  // none and are shown by name.
  std::vector<std::string> pieces, shown;
  for (size_t i = 0; i < enc.ids.size(); ++i) {
    const auto [b, e] = enc.offsets[i];
    const bool added = enc.special_mask.size() > i && enc.special_mask[i];
    pieces.push_back(visible(added || e <= b ? tokens[i] : std::string_view(text).substr(b, e - b)));
    shown.push_back(visible(tokens[i]));
  }
  if (count > 1) std::cout << (index ? "\n" : "") << fmt::format("# input {} of {}\n", index + 1, count);
  std::cout << fmt::format("{} token{}\n", enc.ids.size(), enc.ids.size() == 1 ? "" : "s");
  std::string ids;
  for (size_t i = 0; i < enc.ids.size(); ++i) ids += (i ? " " : "") + std::to_string(enc.ids[i]);
  std::cout << "ids:    " << ids << "\n";
  std::cout << "tokens: " << join_tokens(shown, colour) << "\n";
  std::cout << "text:   " << join_tokens(pieces, colour) << "\n";
}

// transformers' return_assistant_tokens_mask rule: a token is 1 when its
// offsets overlap a generation span (token_end > span_begin and token_begin <
// span_end), walking tokens and spans in order with one cursor, as the
// reference does. The reference compares character offsets; trlx compares
// byte offsets, which gives the same answer because both token and span
// boundaries fall on character boundaries.
std::vector<int> assistant_mask(const text::Encoding& enc, const std::vector<std::pair<size_t, size_t>>& spans) {
  std::vector<int> mask(enc.ids.size(), 0);
  size_t s = 0;
  for (size_t t = 0; t < enc.offsets.size(); ++t) {
    const auto [tb, te] = enc.offsets[t];
    while (s < spans.size() && tb >= spans[s].second) ++s;
    if (s == spans.size()) break;
    if (te > spans[s].first) mask[t] = 1;
  }
  return mask;
}

// One conversation from a JSON value: a list of messages, or an object with
// `messages` (and optionally `tools`).
struct Conversation {
  ordered_json messages;
  ordered_json tools;  // null: none in the row
  ordered_json chat_template_kwargs;  // null: none in the row
  std::string where;
};

Conversation conversation_from(const ordered_json& v, const std::string& where) {
  Conversation c;
  c.where = where;
  if (v.is_array()) {
    c.messages = v;
  } else if (v.is_object()) {
    if (!v.contains("messages"))
      fail_input("{}: expected a list of messages or an object with a `messages` key; keys here: {}", where,
                 [&] {
                   std::string keys;
                   for (auto it = v.begin(); it != v.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
                   return keys.empty() ? std::string("none") : keys;
                 }());
    c.messages = v.at("messages");
    if (v.contains("tools") && !v.at("tools").is_null()) c.tools = v.at("tools");
    if (v.contains("chat_template_kwargs") && !v.at("chat_template_kwargs").is_null()) {
      c.chat_template_kwargs = v.at("chat_template_kwargs");
      if (!c.chat_template_kwargs.is_object())
        fail_input("{}: `chat_template_kwargs` must be an object of template variables, found {}", where,
                   c.chat_template_kwargs.type_name());
    }
  } else {
    fail_input("{}: expected a list of messages or an object with `messages`, found {}", where, v.type_name());
  }
  if (!c.messages.is_array()) fail_input("{}: `messages` must be a list, found {}", where, c.messages.type_name());
  if (c.messages.empty()) fail_input("{}: the conversation has no messages", where);
  for (size_t i = 0; i < c.messages.size(); ++i)
    if (!c.messages[i].is_object())
      fail_input("{}: message {} must be an object like {{\"role\": ..., \"content\": ...}}, found {}", where, i,
                 c.messages[i].type_name());
  if (!c.tools.is_null() && !c.tools.is_array()) fail_input("{}: `tools` must be a list, found {}", where, c.tools.type_name());
  return c;
}

std::vector<Conversation> read_conversations(const std::string& path) {
  std::vector<Conversation> out;
  const bool jsonl = std::filesystem::path(path).extension() == ".jsonl";
  if (jsonl) {
    for_each_jsonl(path, "--messages", [&](size_t n, const ordered_json& row) {
      out.push_back(conversation_from(row, fmt::format("{}:{}", path, n)));
    });
    if (out.empty()) fail_input("--messages {}: no conversation in the file", path);
    return out;
  }
  const std::string text = read_text_file(path, "--messages");
  ordered_json v;
  try {
    v = ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_input("--messages {}: not valid JSON ({}); one conversation per line needs a .jsonl name", path, e.what());
  }
  out.push_back(conversation_from(v, path));
  return out;
}

}  // namespace

int run_tokenize(std::vector<std::string> args) {
  CLI::App app("Tokenize text exactly as the trainers do (ids, vocabulary strings, byte offsets), or decode ids",
               "trlx tokenize");
  std::string tokenizer_dir, input, field;
  std::vector<std::string> texts, id_lists;
  bool add_special = true, json_out = false, decode = false, skip_special = false;
  app.add_option("--tokenizer", tokenizer_dir, "Directory with tokenizer.json (and tokenizer_config.json)")->required();
  // One value per flag, taken literally: CLI11 would otherwise split a value
  // like "[INST] hi [/INST]" as a bracketed list.
  app.add_option("--text", texts, "Text to tokenize (repeat for several)")->allow_extra_args(false);
  app.add_option("--input", input, "JSONL file: one string, or one object with --field, per line");
  app.add_option("--field", field, "Key of the --input objects (default: text, or ids with --decode)");
  app.add_option("--add_special_tokens", add_special, "Add the post-processor's special tokens (true|false)")
      ->capture_default_str();
  app.add_flag("--json", json_out, "One JSON object per input: text, ids, tokens, offsets (UTF-8 byte ranges)");
  app.add_flag("--decode", decode, "Decode token ids to text instead (--ids or --input)");
  app.add_option("--ids", id_lists, "With --decode: token ids, 1,2,3 or [1, 2, 3] (repeat for several)")
      ->allow_extra_args(false);
  app.add_flag("--skip_special_tokens", skip_special, "With --decode: leave special tokens out");
  if (auto rc = parse_args(app, args)) return *rc;

  if (!decode && !id_lists.empty()) fail_input("--ids needs --decode (or give text with --text)");
  if (decode && !texts.empty()) fail_input("--text cannot be decoded; give --ids with --decode");
  if (!decode && skip_special) fail_input("--skip_special_tokens only applies to --decode");
  if (field.empty()) field = decode ? "ids" : "text";
  auto tok = text::Tokenizer::from_dir(tokenizer_dir);

  if (decode) {
    std::vector<std::vector<int32_t>> seqs;
    for (const auto& s : id_lists) seqs.push_back(parse_id_list(s, "--ids"));
    if (!input.empty())
      for_each_jsonl(input, "--input", [&](size_t n, const ordered_json& row) {
        const std::string where = fmt::format("{}:{}", input, n);
        if (row.is_object()) {
          if (!row.contains(field)) fail_input("{}: no field `{}` in this row", where, field);
          seqs.push_back(ids_from_json(row.at(field), fmt::format("{}: field `{}`", where, field)));
        } else {
          seqs.push_back(ids_from_json(row, where));
        }
      });
    if (seqs.empty()) fail_input("nothing to decode: give --ids 1,2,3 or --input FILE");
    // An id the tokenizer does not have would vanish from the text: refuse it.
    const auto vocab = static_cast<int64_t>(tok.vocab_size());
    for (size_t i = 0; i < seqs.size(); ++i)
      for (int32_t id : seqs[i])
        if (id < 0 || id >= vocab)
          fail_input("decode: input {} holds token id {}, outside the tokenizer's vocabulary (0..{}, {})", i + 1, id,
                     vocab - 1, tokenizer_dir);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const std::string text = tok.decode(seqs[i], skip_special);
      if (json_out) {
        ordered_json j;
        j["ids"] = seqs[i];
        j["text"] = text;
        std::cout << dump(j) << "\n";
      } else {
        if (seqs.size() > 1) std::cout << (i ? "\n" : "") << fmt::format("# input {} of {}\n", i + 1, seqs.size());
        std::cout << text << "\n";
      }
    }
    return 0;
  }

  std::vector<std::string> inputs = texts;
  if (!input.empty())
    for_each_jsonl(input, "--input", [&](size_t n, const ordered_json& row) {
      const std::string where = fmt::format("{}:{}", input, n);
      const ordered_json* v = &row;
      if (row.is_object()) {
        if (!row.contains(field)) fail_input("{}: no field `{}` in this row", where, field);
        v = &row.at(field);
      } else if (!row.is_string()) {
        fail_input("{}: expected a string or an object with `{}`, found {}", where, field, row.type_name());
      }
      if (!v->is_string()) fail_input("{}: field `{}` must be a string, found {}", where, field, v->type_name());
      inputs.push_back(v->get<std::string>());
    });
  if (inputs.empty() && input.empty()) fail_input("nothing to tokenize: give --text TEXT or --input FILE");
  for (size_t i = 0; i < inputs.size(); ++i) print_encoding(tok, inputs[i], add_special, json_out, i, inputs.size());
  return 0;
}

int run_render_template(std::vector<std::string> args) {
  CLI::App app("Render conversations through a chat template as transformers' apply_chat_template does, "
               "with token ids and the assistant mask",
               "trlx render-template");
  std::string tokenizer_dir, messages_file, template_file, tools_file, kwargs_text;
  bool add_generation_prompt = false, json_out = false;
  app.add_option("--tokenizer", tokenizer_dir, "Directory with tokenizer.json (and tokenizer_config.json)")->required();
  app.add_option("--messages", messages_file,
                 "A conversation: .json (a list of {role, content} messages or an object with `messages`), "
                 "or .jsonl with one conversation per line")
      ->required();
  app.add_flag("--add_generation_prompt", add_generation_prompt, "Append the assistant header for generation");
  app.add_option("--chat_template", template_file, "Jinja file to use instead of the tokenizer's chat template");
  app.add_option("--tools", tools_file, "JSON file with a list of tool schemas (overrides a row's `tools`)");
  app.add_option("--chat_template_kwargs", kwargs_text,
                 "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  app.add_flag("--json", json_out,
               "One JSON object per conversation: text, ids (add_special_tokens=false), assistant_masks, "
               "generation_spans (UTF-8 byte ranges)");
  if (auto rc = parse_args(app, args)) return *rc;

  auto tok = text::Tokenizer::from_dir(tokenizer_dir);
  std::string source, origin;
  if (!template_file.empty()) {
    source = read_text_file(template_file, "--chat_template");
    origin = template_file;
  } else {
    // Tokenizer::from_dir already prefers chat_template.jinja to tokenizer_config.json.
    source = tok.chat_template();
    origin = std::filesystem::exists(std::filesystem::path(tokenizer_dir) / "chat_template.jinja")
                 ? (std::filesystem::path(tokenizer_dir) / "chat_template.jinja").string()
                 : (std::filesystem::path(tokenizer_dir) / "tokenizer_config.json").string() + ": chat_template";
    if (source.empty())
      fail_input("{}: the tokenizer has no chat template (no chat_template in tokenizer_config.json, no "
                 "chat_template.jinja); pass one with --chat_template FILE",
                 tokenizer_dir);
  }
  const text::ChatTemplate tmpl(source, origin);

  ordered_json tools_json, kwargs_json;
  if (!tools_file.empty()) {
    try {
      tools_json = ordered_json::parse(read_text_file(tools_file, "--tools"));
    } catch (const nlohmann::json::exception& e) {
      fail_input("--tools {}: not valid JSON: {}", tools_file, e.what());
    }
    if (!tools_json.is_array()) fail_input("--tools {}: expected a list of tool schemas, found {}", tools_file, tools_json.type_name());
  }
  if (!kwargs_text.empty()) {
    try {
      kwargs_json = ordered_json::parse(kwargs_text);
    } catch (const nlohmann::json::exception& e) {
      fail_input("--chat_template_kwargs: not valid JSON: {}", e.what());
    }
    if (!kwargs_json.is_object()) fail_input("--chat_template_kwargs: expected a JSON object, found {}", kwargs_json.type_name());
  }

  const auto conversations = read_conversations(messages_file);
  if (json_out && !tmpl.has_generation_tag())
    log::warn("{}: the chat template has no {{% generation %}} block, so assistant_masks are all 0", origin);

  for (size_t i = 0; i < conversations.size(); ++i) {
    const auto& conv = conversations[i];
    // As a trainer renders a row: its tools and its chat_template_kwargs
    // over --chat_template_kwargs; --tools, when given, for every row.
    const ordered_json row = {{"tools", !tools_json.is_null() ? tools_json : conv.tools},
                              {"chat_template_kwargs", conv.chat_template_kwargs}};
    const auto inputs =
        trainers::template_inputs(row, kwargs_json.is_object() ? kwargs_json : ordered_json::object());
    text::ChatOptions co = trainers::chat_options(tok, add_generation_prompt, inputs);
    text::RenderedChat r;
    try {
      r = text::apply_chat_template(tmpl, conv.messages, co);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", conv.where, e.what()));
    }
    if (!json_out) {
      if (conversations.size() > 1)
        std::cout << (i ? "\n" : "") << fmt::format("# conversation {} of {} ({})\n", i + 1, conversations.size(), conv.where);
      std::cout << r.text;
      if (r.text.empty() || r.text.back() != '\n') std::cout << "\n";
      continue;
    }
    // The template writes the special tokens itself, so the text is
    // tokenized without adding more, as apply_chat_template(tokenize=True).
    const text::Encoding enc = tok.encode(r.text, false);
    ordered_json spans = ordered_json::array();
    for (const auto& [b, e] : r.generation_spans) spans.push_back({b, e});
    ordered_json j;
    j["text"] = r.text;
    j["ids"] = enc.ids;
    j["assistant_masks"] = assistant_mask(enc, r.generation_spans);
    j["generation_spans"] = std::move(spans);
    std::cout << dump(j) << "\n";
  }
  return 0;
}

}  // namespace trlx::cli

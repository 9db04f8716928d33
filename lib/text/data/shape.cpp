// Per-task validation and normalisation of dataset rows, with TRL's
// conventions for implicit prompts and unpaired preference data.
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/strings.hpp"
#include "text/data/dataset.hpp"
#include "text/data/internal.hpp"

namespace trlx::data {

using detail::describe_value;

// ---------------------------------------------------------------------------
// TRL semantics

bool py_equal(const Value& a, const Value& b) {
  const auto numeric = [](const Value& v) { return v.is_number() || v.is_boolean(); };
  if (numeric(a) && numeric(b)) {
    // Python: True == 1 == 1.0. Integers compare exactly, floats by value.
    if (a.is_number_float() || b.is_number_float()) {
      const auto as_double = [](const Value& v) {
        return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
      };
      return as_double(a) == as_double(b);
    }
    const auto sign_mag = [](const Value& v) -> std::pair<bool, uint64_t> {
      if (v.is_boolean()) return {false, v.get<bool>() ? 1u : 0u};
      if (v.is_number_unsigned()) return {false, v.get<uint64_t>()};
      const int64_t i = v.get<int64_t>();
      return {i < 0, i < 0 ? uint64_t(0) - static_cast<uint64_t>(i) : static_cast<uint64_t>(i)};
    };
    return sign_mag(a) == sign_mag(b);
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::value_t::null: return true;
    case Value::value_t::string: return a.get_ref<const std::string&>() == b.get_ref<const std::string&>();
    case Value::value_t::array:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!py_equal(a[i], b[i])) return false;
      return true;
    case Value::value_t::object:
      if (a.size() != b.size()) return false;
      for (auto it = a.begin(); it != a.end(); ++it) {
        auto jt = b.find(it.key());
        if (jt == b.end() || !py_equal(*it, *jt)) return false;
      }
      return true;
    default: return a == b;
  }
}

namespace {

const char* const kTextColumns[] = {"prompt", "chosen", "rejected", "completion", "messages"};

bool holds_messages(const Value& v) {
  return v.is_array() && !v.empty() && v.front().is_object() && v.front().contains("role");
}

// Start byte of each code point, plus the end: Python indexes str by code
// point, and the text was checked to be UTF-8 when it was read.
std::vector<size_t> code_point_starts(const std::string& s) {
  std::vector<size_t> starts;
  starts.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  starts.push_back(s.size());
  return starts;
}

}  // namespace

bool is_conversational(const Value& row) {
  if (!row.is_object()) return false;
  for (const char* key : kTextColumns) {
    auto it = row.find(key);
    if (it != row.end() && holds_messages(*it)) return true;
  }
  return false;
}

PromptSplit extract_prompt(const Value& chosen, const Value& rejected) {
  // Python's loop leaves idx at the last index it visited when nothing
  // differs, so when one side is a prefix of the other the last shared element
  // stays in the completions. TRL also steps back over a space that would end
  // the prompt. At index 0 it would read chosen[-1] (Python's last element):
  // that wraps around and tears the texts apart, so here the step back needs a
  // real previous character.
  if (chosen.is_string() && rejected.is_string()) {
    const auto& c = chosen.get_ref<const std::string&>();
    const auto& r = rejected.get_ref<const std::string&>();
    const auto cs = code_point_starts(c), rs = code_point_starts(r);
    const size_t n = std::min(cs.size(), rs.size()) - 1;
    if (n == 0) fail_input("cannot extract a prompt: \"{}\" is empty", c.empty() ? "chosen" : "rejected");
    const auto cp = [](const std::string& s, const std::vector<size_t>& st, size_t i) {
      return std::string_view(s).substr(st[i], st[i + 1] - st[i]);
    };
    size_t idx = n - 1;
    for (size_t i = 0; i < n; ++i) {
      if (cp(c, cs, i) != cp(r, rs, i)) {
        idx = (i > 0 && cp(c, cs, i - 1) == " ") ? i - 1 : i;
        break;
      }
    }
    return {c.substr(0, cs[idx]), c.substr(cs[idx]), r.substr(rs[idx])};
  }
  if (chosen.is_array() && rejected.is_array()) {
    const size_t n = std::min(chosen.size(), rejected.size());
    if (n == 0) fail_input("cannot extract a prompt: \"{}\" is empty", chosen.empty() ? "chosen" : "rejected");
    size_t idx = n - 1;
    for (size_t i = 0; i < n; ++i) {
      if (!py_equal(chosen[i], rejected[i])) {
        idx = i;  // messages are objects, never the space TRL steps back over
        break;
      }
    }
    PromptSplit out{Value::array(), Value::array(), Value::array()};
    for (size_t i = 0; i < chosen.size(); ++i) (i < idx ? out.prompt : out.chosen).push_back(chosen[i]);
    for (size_t i = idx; i < rejected.size(); ++i) out.rejected.push_back(rejected[i]);
    return out;
  }
  fail_input("cannot extract a prompt: chosen is {} and rejected is {}; both must be strings or "
             "both lists of messages",
             describe_value(chosen), describe_value(rejected));
}

// ---------------------------------------------------------------------------
// Names and help

std::string to_string(Task task) {
  switch (task) {
    case Task::sft: return "sft";
    case Task::preference: return "preference";
    case Task::unpaired_preference: return "unpaired preference";
    case Task::reward: return "reward";
    case Task::prompt_only: return "prompt-only";
  }
  return "?";
}

std::string to_string(Form form) { return form == Form::text ? "plain text" : "conversational"; }

std::string describe(Task task) {
  constexpr const char* kForms =
      " Each text column is a string or a list of messages {\"role\": ..., \"content\": ...}; "
      "every row must use the same form. Other columns are kept.";
  switch (task) {
    case Task::sft:
      return std::string("SFT data: \"text\" (string), or \"messages\" (a conversation; ShareGPT "
                         "\"conversations\" with from/value is converted), or \"prompt\" + "
                         "\"completion\" (loss on the completion only).") + kForms;
    case Task::preference:
      return std::string("Preference data (DPO, CPO, ORPO): \"prompt\", \"chosen\", \"rejected\". "
                         "Without \"prompt\", the longest common prefix of chosen and rejected is "
                         "the prompt (as TRL's extract_prompt).") + kForms;
    case Task::unpaired_preference:
      return std::string("KTO data: \"prompt\", \"completion\", \"label\" (true for a desirable "
                         "completion). Paired preference rows (\"prompt\", \"chosen\", \"rejected\") "
                         "are unpaired into one desirable and one undesirable row.") + kForms;
    case Task::reward:
      return std::string("Reward model data: \"chosen\", \"rejected\", optional \"prompt\" "
                         "(prepended to both), optional \"margin\" (a number, in every row or "
                         "none).") + kForms;
    case Task::prompt_only:
      return std::string("Prompt data (GRPO, RLOO, PPO, online DPO): \"prompt\"; other columns "
                         "are handed to reward functions.") + kForms;
  }
  return "";
}

// ---------------------------------------------------------------------------
// Row validation

namespace {

const char* const kSftHint = "SFT rows need \"text\", \"messages\", or \"prompt\" + \"completion\"";

// A row being shaped: its location prefixes every error.
struct RowCtx {
  const Row& row;  // read only by the checks; the shaper edits its value after them
  std::string where;

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    throw InputError(where + ": " + fmt::format(f, std::forward<Args>(args)...));
  }

  const Value* get(const char* key) const {
    auto it = row.value.find(key);
    return it == row.value.end() ? nullptr : &*it;
  }
  // Present and not null: JSON writers fill absent optional fields with null.
  const Value* get_set(const char* key) const {
    const Value* v = get(key);
    return v && !v->is_null() ? v : nullptr;
  }

  [[noreturn]] void missing(const char* key, const char* needs) const {
    std::vector<std::string> keys;
    for (auto it = row.value.begin(); it != row.value.end(); ++it) keys.push_back(it.key());
    std::string hint;
    if (const std::string near = closest_match(key, keys); !near.empty())
      hint = fmt::format(" (is \"{}\" a misspelling of \"{}\"?)", near, key);
    // A column that is there but null counts as missing: say so, or the
    // message would name a column the row seems to have.
    std::vector<std::string> quoted;
    for (auto it = row.value.begin(); it != row.value.end(); ++it)
      quoted.push_back('"' + it.key() + '"' + (it->is_null() ? " (null)" : ""));
    fail("missing column \"{}\"{}; {}; this row has {}", key, hint, needs,
         quoted.empty() ? std::string("no columns") : "columns " + join(quoted, ", "));
  }
  const Value& require(const char* key, const char* needs) const {
    const Value* v = get(key);
    if (!v) missing(key, needs);
    return *v;
  }
};

void check_message(const RowCtx& ctx, const char* col, size_t i, const Value& m) {
  if (!m.is_object())
    ctx.fail("\"{}\"[{}]: expected a message object {{\"role\": ..., \"content\": ...}}, found {}",
             col, i, describe_value(m));
  auto role = m.find("role");
  if (role == m.end()) ctx.fail("\"{}\"[{}]: message has no \"role\"", col, i);
  if (!role->is_string())
    ctx.fail("\"{}\"[{}].role: expected a string, found {}", col, i, describe_value(*role));
  auto content = m.find("content");
  if (content == m.end()) {
    if (m.contains("tool_calls")) return;
    ctx.fail("\"{}\"[{}]: message has no \"content\" (only a message with \"tool_calls\" may "
             "leave it out)",
             col, i);
  }
  if (content->is_string() || content->is_null()) return;
  if (!content->is_array())
    ctx.fail("\"{}\"[{}].content: expected a string, null or a list of content parts, found {}",
             col, i, describe_value(*content));
  for (size_t k = 0; k < content->size(); ++k) {
    const Value& part = (*content)[k];
    if (!part.is_object())
      ctx.fail("\"{}\"[{}].content[{}]: expected a content part object {{\"type\": ...}}, found {}",
               col, i, k, describe_value(part));
    auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      ctx.fail("\"{}\"[{}].content[{}]: a content part needs a string \"type\", found {}", col, i,
               k, type == part.end() ? std::string("none") : describe_value(*type));
  }
}

void check_messages(const RowCtx& ctx, const char* col, const Value& v) {
  if (!v.is_array())
    ctx.fail("\"{}\": expected a list of messages, found {}", col, describe_value(v));
  if (v.empty()) ctx.fail("\"{}\": expected a non-empty list of messages, found an empty list", col);
  for (size_t i = 0; i < v.size(); ++i) check_message(ctx, col, i, v[i]);
}

// A text column: a string, or a conversation.
Form check_text(const RowCtx& ctx, const char* col, const Value& v) {
  if (v.is_string()) return Form::text;
  if (v.is_array()) {
    check_messages(ctx, col, v);
    return Form::conversational;
  }
  ctx.fail("\"{}\": expected a string or a list of messages, found {}", col, describe_value(v));
}

void same_form(const RowCtx& ctx, const char* a, Form fa, const char* b, Form fb) {
  if (fa != fb)
    ctx.fail("\"{}\" is {} but \"{}\" is {}; the columns of a row must have the same form", a,
             to_string(fa), b, to_string(fb));
}

// What a shaped row tells about the dataset; the first good row sets it and
// every other row must agree.
struct Traits {
  Form form = Form::text;
  SftLayout layout = SftLayout::none;
  bool paired = false;   // kto
  bool margin = false;   // reward
};

// Rows are shaped in place: keys keep the file's order and a column that
// shaping adds goes last, as datasets.map does. Nothing is inserted before
// every check has passed, as insertion moves the values the checks refer to.
struct Shaper {
  Task task;
  const LoadOptions& options;

  // A null prompt beside chosen/rejected is refused, as the other trainers
  // refuse it (TRL fails on None there).
  static void refuse_null_prompt(const RowCtx& ctx, const char* instead) {
    if (const Value* prompt = ctx.get("prompt"); prompt && prompt->is_null())
      ctx.fail("\"prompt\": expected a string or a list of messages, found null ({})", instead);
  }

  // Preference columns with the prompt made explicit; true if extracted.
  bool preference(const RowCtx& ctx, Value& v, Form& form) const {
    constexpr const char* kNeeds = "preference rows need \"chosen\" and \"rejected\" (and "
                                   "optionally \"prompt\")";
    const Value& chosen = ctx.require("chosen", kNeeds);
    const Value& rejected = ctx.require("rejected", kNeeds);
    form = check_text(ctx, "chosen", chosen);
    same_form(ctx, "chosen", form, "rejected", check_text(ctx, "rejected", rejected));
    refuse_null_prompt(ctx, "leave the column out to take the prompt from the start that chosen and rejected share");
    if (const Value* prompt = ctx.get_set("prompt")) {
      const Form pf = check_text(ctx, "prompt", *prompt);
      if (pf == form) return false;
      // A plain prompt beside full conversations restates their first turn;
      // TRL's maybe_extract_prompt takes the prompt from the conversations then.
      if (pf == Form::conversational)
        ctx.fail("\"prompt\" is a conversation but \"chosen\"/\"rejected\" are plain text; the "
                 "columns of a row must have the same form");
    }
    PromptSplit split;
    try {
      split = extract_prompt(chosen, rejected);
    } catch (const InputError& e) {
      ctx.fail("{} (the row has no \"prompt\" of the same form as chosen/rejected)", e.what());
    }
    v["chosen"] = std::move(split.chosen);
    v["rejected"] = std::move(split.rejected);
    v["prompt"] = std::move(split.prompt);
    return true;
  }

  // Shapes one row in place; `traits` gets what this row says about the
  // dataset, `extracted` whether its prompt was implicit.
  void row(const RowCtx& ctx, Value& v, Traits& traits, bool& extracted) const {
    switch (task) {
      case Task::sft: return sft(ctx, v, traits);
      case Task::preference: extracted = preference(ctx, v, traits.form); return;
      case Task::unpaired_preference: return kto(ctx, v, traits, extracted);
      case Task::reward: return reward(ctx, v, traits);
      case Task::prompt_only:
        traits.form = check_text(
            ctx, "prompt",
            ctx.require("prompt", "prompt-only rows (GRPO, RLOO, PPO, online DPO) need \"prompt\""));
        return;
    }
  }

  void sft(const RowCtx& ctx, Value& v, Traits& traits) const {
    if (const Value* prompt = ctx.get_set("prompt")) {
      traits.layout = SftLayout::prompt_completion;
      const Value& completion =
          ctx.require("completion", "SFT prompt-completion rows need \"prompt\" and \"completion\"");
      traits.form = check_text(ctx, "prompt", *prompt);
      same_form(ctx, "prompt", traits.form, "completion", check_text(ctx, "completion", completion));
      return;
    }
    traits.layout = SftLayout::language_modeling;
    if (const Value* messages = ctx.get_set("messages")) {
      check_messages(ctx, "messages", *messages);
      traits.form = Form::conversational;
      return;
    }
    if (const Value* conv = ctx.get_set("conversations")) {
      // ShareGPT layout: {from, value} messages, renamed the way TRL's
      // maybe_convert_to_chatml does (the renamed keys move to the end).
      if (!conv->is_array())
        ctx.fail("\"conversations\": expected a list of messages, found {}", describe_value(*conv));
      Value messages = *conv;
      for (auto& m : messages) {
        if (!m.is_object()) continue;  // check_messages reports it
        for (const auto& [from, to] : {std::pair{"from", "role"}, std::pair{"value", "content"}}) {
          auto it = m.find(from);
          if (it == m.end()) continue;
          Value moved = std::move(*it);
          m.erase(from);
          m[to] = std::move(moved);
        }
      }
      check_messages(ctx, "conversations", messages);
      traits.form = Form::conversational;
      v.erase("conversations");
      v["messages"] = std::move(messages);
      return;
    }
    const std::string& field = options.text_field;
    auto it = v.find(field);
    if (it == v.end()) {
      if (field == "text") ctx.missing("text", kSftHint);
      ctx.missing(field.c_str(), "SFT rows need the text column (text_field), \"messages\", or "
                                 "\"prompt\" + \"completion\"");
    }
    if (!it->is_string()) {
      if (it->is_array())
        ctx.fail("\"{}\": expected a string, found {}; a conversation belongs in a \"messages\" "
                 "column",
                 field, describe_value(*it));
      ctx.fail("\"{}\": expected a string, found {}", field, describe_value(*it));
    }
    traits.form = Form::text;
    if (field != "text") {
      Value text = std::move(*it);
      v.erase(field);
      v["text"] = std::move(text);
    }
  }

  void kto(const RowCtx& ctx, Value& v, Traits& traits, bool& extracted) const {
    const bool paired = ctx.get("chosen") || ctx.get("rejected");
    traits.paired = paired;
    if (paired) {
      for (const char* k : {"completion", "label"})
        if (ctx.get(k))
          ctx.fail("has both paired columns (\"chosen\"/\"rejected\") and \"{}\"; a KTO row is "
                   "either prompt/chosen/rejected or prompt/completion/label",
                   k);
      extracted = preference(ctx, v, traits.form);
      return;
    }
    constexpr const char* kNeeds =
        "KTO rows need \"prompt\", \"completion\" and \"label\" (or \"chosen\" and \"rejected\")";
    const Value& prompt = ctx.require("prompt", kNeeds);
    const Value& completion = ctx.require("completion", kNeeds);
    const Value& label = ctx.require("label", kNeeds);
    traits.form = check_text(ctx, "prompt", prompt);
    same_form(ctx, "prompt", traits.form, "completion", check_text(ctx, "completion", completion));
    if (!label.is_boolean())
      ctx.fail("\"label\": expected a bool (true: desirable completion), found {}",
               describe_value(label));
  }

  void reward(const RowCtx& ctx, Value& v, Traits& traits) const {
    constexpr const char* kNeeds =
        "reward rows need \"chosen\" and \"rejected\" (optionally \"prompt\" and \"margin\")";
    const Value& chosen = ctx.require("chosen", kNeeds);
    const Value& rejected = ctx.require("rejected", kNeeds);
    traits.form = check_text(ctx, "chosen", chosen);
    same_form(ctx, "chosen", traits.form, "rejected", check_text(ctx, "rejected", rejected));
    refuse_null_prompt(ctx, "leave the column out for rows without a prompt");
    if (const Value* prompt = ctx.get_set("prompt"))
      same_form(ctx, "prompt", check_text(ctx, "prompt", *prompt), "chosen", traits.form);
    traits.margin = false;
    if (const Value* margin = ctx.get_set("margin")) {
      if (!margin->is_number())
        ctx.fail("\"margin\": expected a number, found {}", describe_value(*margin));
      if (!std::isfinite(margin->get<double>()))
        ctx.fail("\"margin\": expected a finite number, found {}", describe_value(*margin));
      traits.margin = true;
    }
    // null is how JSON writers fill an absent optional margin
    for (const char* k : {"margin"}) {
      auto it = v.find(k);
      if (it != v.end() && it->is_null()) v.erase(k);
    }
  }
};

// TRL's unpair_preference_dataset maps in batches (datasets' default of 1000
// rows): each batch's chosen rows come first, then its rejected rows.
constexpr size_t kUnpairBatch = 1000;

std::vector<Row> unpair(std::vector<Row> rows) {
  std::vector<Row> out;
  out.reserve(rows.size() * 2);
  for (size_t start = 0; start < rows.size(); start += kUnpairBatch) {
    const size_t end = std::min(rows.size(), start + kUnpairBatch);
    for (const bool chosen : {true, false}) {
      for (size_t i = start; i < end; ++i) {
        Row& r = rows[i];
        // the rejected pass is the row's last use: it may take the values
        const auto take = [&](Value& x) { return chosen ? Value(x) : std::move(x); };
        Value v = Value::object();
        v["prompt"] = take(r.value.at("prompt"));
        v["completion"] = take(r.value.at(chosen ? "chosen" : "rejected"));
        v["label"] = chosen;
        for (auto it = r.value.begin(); it != r.value.end(); ++it)
          if (it.key() != "prompt" && it.key() != "chosen" && it.key() != "rejected")
            v[it.key()] = take(*it);
        out.push_back(Row{std::move(v), r.file, r.line, r.element});
      }
    }
  }
  return out;
}

std::string form_words(Form f) {
  return f == Form::text ? "plain text (strings)" : "conversational (lists of messages)";
}

}  // namespace

namespace {

// Image columns: vision-language rows, which trlx cannot train on. Refused
// for the whole dataset (not a bad row to skip): training on their text
// alone would be a different run than asked.
void refuse_images(const RowCtx& ctx) {
  for (const char* key : {"image", "images"})
    if (ctx.get_set(key))
      throw InputError(fmt::format("{}: column \"{}\": vision-language training is not supported by trlx; use a "
                                   "text-only dataset (drop the column, and the image placeholders in the text)",
                                   ctx.where, key));
}

// What a row passes the chat template besides its messages: `tools`, a list
// of function schemas (a JSON string of one, as datasets often store it, is
// parsed here, so that later stages see the list), and
// `chat_template_kwargs`, an object of template variables. Null: none.
void check_template_columns(const RowCtx& ctx, Value& v) {
  if (auto it = v.find("tools"); it != v.end() && !it->is_null()) {
    if (it->is_string()) {
      Value parsed = Value::parse(it->get<std::string>(), nullptr, false);
      if (parsed.is_discarded())
        ctx.fail("column \"tools\" is a string that is not JSON; give a list of function schemas "
                 "([{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}]) or its JSON text");
      *it = std::move(parsed);
    }
    if (!it->is_array())
      ctx.fail("column \"tools\" holds {}, not a list of function schemas", describe_value(*it));
    for (size_t i = 0; i < it->size(); ++i)
      if (!(*it)[i].is_object())
        ctx.fail("column \"tools\": element {} is {}, not a function schema (a JSON object)", i,
                 describe_value((*it)[i]));
  }
  if (auto it = v.find("chat_template_kwargs"); it != v.end() && !it->is_null() && !it->is_object())
    ctx.fail("column \"chat_template_kwargs\" holds {}, not an object of template variables (e.g. "
             "{{\"enable_thinking\": false}})",
             describe_value(*it));
}

}  // namespace

Shaped shape_for(Task task, Dataset dataset, const LoadOptions& options) {
  Shaped out;
  out.task = task;
  out.skipped = dataset.skipped;
  out.skip_examples = std::move(dataset.skip_examples);
  out.files = std::move(dataset.files);
  out.rows.reserve(dataset.rows.size());

  const Shaper shaper{task, options};
  std::optional<Traits> first;
  std::string first_where;
  for (auto& row : dataset.rows) {
    RowCtx ctx{row, row.where()};
    refuse_images(ctx);
    try {
      check_template_columns(ctx, row.value);
      Traits t;
      bool extracted = false;
      shaper.row(ctx, row.value, t, extracted);
      if (!first) {
        first = t;
        first_where = ctx.where;
      } else {
        if (task == Task::sft && t.layout != first->layout)
          ctx.fail("{} row, but the dataset's first row ({}) is {}; every row must have the same "
                   "columns",
                   t.layout == SftLayout::prompt_completion ? "a prompt+completion" : "a language-modeling (text/messages)",
                   first_where,
                   first->layout == SftLayout::prompt_completion ? "prompt+completion" : "language modeling (text/messages)");
        if (task == Task::unpaired_preference && t.paired != first->paired)
          ctx.fail("{} row, but the dataset's first row ({}) is {}; every row must have the same "
                   "columns",
                   t.paired ? "a paired (chosen/rejected)" : "an unpaired (completion/label)",
                   first_where, first->paired ? "paired" : "unpaired");
        if (t.form != first->form)
          ctx.fail("{} data, but the dataset's first row ({}) is {}; every row must have the same "
                   "form",
                   form_words(t.form), first_where, form_words(first->form));
        if (task == Task::reward && t.margin != first->margin)
          ctx.fail("{} \"margin\", but the dataset's first row ({}) {}; give every row a margin "
                   "or none",
                   t.margin ? "has a" : "has no", first_where, first->margin ? "has one" : "has none");
      }
      out.prompts_extracted += extracted;
      out.rows.push_back(std::move(row));
    } catch (const InputError& e) {
      if (!options.skip_bad_rows) throw;
      detail::note_skip(out.skipped, out.skip_examples, e.what());
    }
  }
  if (out.rows.empty()) {
    const std::string files = out.files.empty() ? std::string("the dataset") : join(out.files, ", ");
    if (out.skipped > 0)
      fail_input("{}: no usable rows for {} data ({} bad row{} skipped); the first: {}", files,
                 to_string(task), out.skipped, out.skipped == 1 ? "" : "s", out.skip_examples.front());
    fail_input("{}: the dataset is empty", files);
  }
  out.form = first->form;
  out.sft_layout = first->layout;
  out.has_margin = first->margin;
  if (task == Task::unpaired_preference && first->paired) {
    out.unpaired_from = out.rows.size();
    out.rows = unpair(std::move(out.rows));
  }
  return out;
}

Shaped load_for(Task task, const std::filesystem::path& path, const LoadOptions& options) {
  return shape_for(task, load_dataset(path, options), options);
}

}  // namespace trlx::data

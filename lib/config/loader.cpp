// Config resolution: defaults < YAML < flags, every field checked, all problems reported at once.
#include "config/loader.hpp"

#include <charconv>
#include <cmath>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"

namespace trlx::config {

// ---------------------------------------------------------------- values

std::string kind_name(Kind kind) {
  switch (kind) {
    case Kind::Bool: return "a boolean (true or false)";
    case Kind::Int: return "an integer";
    case Kind::Float: return "a finite number";
    case Kind::String: return "a string";
    case Kind::StringList: return "a string or a list of strings";
    case Kind::FloatList: return "a number or a list of numbers";
  }
  return "?";
}

namespace {

// A YAML node as JSON: scalars become booleans, integers or numbers when
// they read as one (as YAML's core schema would), else strings.
nlohmann::json yaml_to_json(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : node) out[kv.first.Scalar()] = yaml_to_json(kv.second);
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : node) out.push_back(yaml_to_json(item));
    return out;
  }
  if (node.IsNull()) return nullptr;
  const std::string& t = node.Scalar();
  if (node.Tag() == "!") return t;  // quoted: a string whatever it reads as
  if (t == "true" || t == "True") return true;
  if (t == "false" || t == "False") return false;
  int64_t i = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), i);
  if (ec == std::errc() && p == t.data() + t.size() && !t.empty()) return i;
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (!t.empty() && end == t.c_str() + t.size() && std::isfinite(d)) return d;
  return t;
}

// A mapping given where a list of mappings is taken, as the JSON text kept for it.
std::string mapping_text(const YAML::Node& node, const std::string& at, const std::string& field) {
  try {
    return yaml_to_json(node).dump();
  } catch (const nlohmann::json::type_error&) {  // 316: a string that is not UTF-8
    fail_input("{}: `{}` holds text that is not valid UTF-8; config files are UTF-8", at, field);
  }
}

std::string format_double(double d) {
  if (std::isinf(d)) return d > 0 ? ".inf" : "-.inf";
  if (std::isnan(d)) return ".nan";
  // Shortest text that reads back to the same double, with a dot or exponent
  // so that YAML reads it as a float again.
  // YAML 1.1 readers (PyYAML) need a dot in the mantissa: 1.0e-06, not 1e-06.
  std::string s = fmt::format("{}", d);
  const auto e = s.find_first_of("eE");
  if (s.find('.') == std::string::npos) {
    if (e == std::string::npos) s += ".0";
    else s.insert(e, ".0");
  }
  return s;
}

bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  std::string expected;
  if (parse_text(Kind::Bool, s, &expected) || parse_text(Kind::Float, s, &expected)) return true;
  const std::string l = to_lower(s);
  if (l == "null" || l == "~") return true;
  if (std::isspace(static_cast<unsigned char>(s.front())) || std::isspace(static_cast<unsigned char>(s.back())))
    return true;
  if (std::string("-?:,[]{}#&*!|>'\"%@`").find(s.front()) != std::string::npos) return true;
  return s.find(": ") != std::string::npos || s.find(" #") != std::string::npos ||
         s.find('\n') != std::string::npos;
}

std::string quote(const std::string& s) {
  if (!needs_quotes(s)) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string format_value(const Value& v) {
  struct V {
    std::string operator()(std::monostate) const { return "null"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return format_double(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const std::vector<std::string>& l) const {
      std::vector<std::string> parts;
      for (const auto& s : l) parts.push_back(quote(s));
      return "[" + join(parts, ", ") + "]";
    }
    std::string operator()(const std::vector<double>& l) const {
      std::vector<std::string> parts;
      for (double d : l) parts.push_back(format_double(d));
      return "[" + join(parts, ", ") + "]";
    }
  };
  return std::visit(V{}, v);
}

std::optional<Value> parse_text(Kind kind, const std::string& raw, std::string* expected) {
  const std::string text = trim(raw);
  *expected = kind_name(kind);
  switch (kind) {
    case Kind::Bool: {
      const std::string l = to_lower(text);
      if (l == "true" || l == "yes" || l == "on" || l == "y" || l == "t" || l == "1") return Value(true);
      if (l == "false" || l == "no" || l == "off" || l == "n" || l == "f" || l == "0") return Value(false);
      return std::nullopt;
    }
    case Kind::Int: {
      int64_t i = 0;
      const char* b = text.data();
      const char* e = b + text.size();
      if (!text.empty() && *b == '+') ++b;
      auto [p, ec] = std::from_chars(b, e, i);
      if (ec == std::errc() && p == e && b != e) return Value(i);
      return std::nullopt;
    }
    case Kind::Float: {
      // Finite only: an infinite learning rate or beta trains to a NaN model
      // (no TRL field has an infinite default or meaning).
      const std::string l = to_lower(text);
      if (text.empty()) return std::nullopt;
      char* end = nullptr;
      const double d = std::strtod(text.c_str(), &end);
      // Not NaN, and not beyond a double's range (1e400 reads as infinity).
      if (end != text.c_str() + text.size() || !std::isfinite(d)) return std::nullopt;
      // strtod accepts hex floats and "infinity"; configs do not.
      if (l.find('x') != std::string::npos || l.find("in") != std::string::npos) return std::nullopt;
      return Value(d);
    }
    case Kind::String: return Value(raw);
    case Kind::StringList: {
      std::vector<std::string> out;
      for (const auto& part : split(text, ',')) {
        const std::string t = trim(part);
        if (!t.empty()) out.push_back(t);
      }
      return Value(out);
    }
    case Kind::FloatList: {
      std::vector<double> out;
      for (const auto& part : split(text, ',')) {
        std::string e;
        auto v = parse_text(Kind::Float, part, &e);
        if (!v) return std::nullopt;
        out.push_back(std::get<double>(*v));
      }
      return Value(out);
    }
  }
  return std::nullopt;
}

std::string FieldSpec::constraint_text() const {
  if (not_built_reason) return fmt::format("only the default (not built in trlx: {})", *not_built_reason);
  std::vector<std::string> parts;
  if (min_value) parts.push_back(fmt::format("{} {}", min_exclusive ? ">" : ">=", format_double(*min_value)));
  if (max_value) parts.push_back(fmt::format("{} {}", max_exclusive ? "<" : "<=", format_double(*max_value)));
  if (!choices.empty()) parts.push_back("one of " + join(choices, ", "));
  return join(parts, " and ");
}

std::string Origin::describe() const {
  std::string s;
  switch (source) {
    case Source::Default: return "default";
    case Source::File: s = fmt::format("{}:{}:{}", file, line, column); break;
    case Source::Flag: s = flag; break;
  }
  if (!alias.empty()) s += fmt::format(" as `{}`", alias);
  return s;
}

// ---------------------------------------------------------------- schema

FieldSpec& Schema::add(FieldSpec spec) {
  if (find(spec.name)) throw Error(fmt::format("internal: field `{}` declared twice in {}", spec.name, name_));
  fields_.push_back(std::move(spec));
  return fields_.back();
}

void Schema::add_alias(std::string old_name, std::string new_name) {
  aliases_.push_back({std::move(old_name), std::move(new_name)});
}

const FieldSpec* Schema::find(std::string_view name) const {
  for (const auto& f : fields_)
    if (f.name == name) return &f;
  return nullptr;
}

const Alias* Schema::find_alias(std::string_view old_name) const {
  for (const auto& a : aliases_)
    if (a.old_name == old_name) return &a;
  return nullptr;
}

std::vector<std::string> Schema::names() const {
  std::vector<std::string> out;
  for (const auto& f : fields_) out.push_back(f.name);
  for (const auto& a : aliases_) out.push_back(a.old_name);
  return out;
}

bool Schema::has_section(std::string_view prefix) const {
  const std::string p = std::string(prefix) + ".";
  for (const auto& f : fields_)
    if (starts_with(f.name, p)) return true;
  return false;
}

// ---------------------------------------------------------------- conflicts

void Conflicts::conflict(const std::vector<std::string>& fields, const std::string& advice) {
  std::vector<std::string> parts;
  for (const auto& f : fields) parts.push_back(loader_.where(f));
  errors_.push_back(fmt::format("conflicting settings: {}: {}", join(parts, " and "), advice));
}

void Conflicts::invalid(const std::string& field, const std::string& message) {
  errors_.push_back(fmt::format("{}: {}", loader_.where(field), message));
}

void Conflicts::warn(const std::string& message) { warnings_.push_back(message); }

// ---------------------------------------------------------------- loader

ConfigLoader::ConfigLoader(const Schema& schema) : schema_(schema) {
  for (const auto& f : schema_.fields()) {
    values_[f.name] = f.default_value;
    origins_[f.name] = Origin{};
  }
}

const Value& ConfigLoader::value(std::string_view field) const {
  auto it = values_.find(field);
  if (it == values_.end()) throw Error(fmt::format("internal: no field `{}` in {}", field, schema_.name()));
  return it->second;
}

const Origin& ConfigLoader::origin(std::string_view field) const {
  auto it = origins_.find(field);
  if (it == origins_.end()) throw Error(fmt::format("internal: no field `{}` in {}", field, schema_.name()));
  return it->second;
}

std::string ConfigLoader::where(std::string_view field) const {
  const Origin& o = origin(field);
  const std::string v = format_value(value(field));
  if (o.source == Origin::Source::Default) return fmt::format("`{}: {}` (the default)", field, v);
  return fmt::format("`{}: {}` ({})", field, v, o.describe());
}

void ConfigLoader::load_yaml_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    fail_input("config file {} does not exist or is not a file", file.string());
  YAML::Node root;
  try {
    root = YAML::LoadFile(file.string());
  } catch (const YAML::ParserException& e) {
    fail_input("{}:{}:{}: YAML syntax error: {}", file.string(), e.mark.line + 1, e.mark.column + 1, e.msg);
  } catch (const YAML::BadFile&) {
    fail_input("cannot read config file {}", file.string());
  }
  if (root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap())
    fail_input("{}:{}:{}: a config file must be a mapping of `key: value` lines", file.string(),
               root.Mark().line + 1, root.Mark().column + 1);
  walk(root, "", file.string());
}

void ConfigLoader::load_yaml_text(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail_input("{}:{}:{}: YAML syntax error: {}", name, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) fail_input("{}: a config must be a mapping of `key: value` lines", name);
  walk(root, "", name);
}

std::string ConfigLoader::unknown_key_message(const std::string& key, bool is_flag) const {
  const std::string dashes = is_flag ? "--" : "";
  // A section given a plain value (`gradient_checkpointing_kwargs: true`):
  // the key is known, as a mapping of its own keys.
  std::vector<std::string> inside;
  for (const auto& name : schema_.names())
    if (name.size() > key.size() && name.compare(0, key.size(), key) == 0 && name[key.size()] == '.')
      inside.push_back(name.substr(key.size() + 1));
  if (!inside.empty())
    return fmt::format("`{}{}` is a section, not a value: give its keys ({}), e.g. {}", dashes, key,
                       fmt::join(inside, ", "),
                       is_flag ? fmt::format("--{}.{} VALUE", key, inside.front())
                               : fmt::format("`{}: {{{}: ...}}`", key, inside.front()));
  std::string msg = is_flag ? fmt::format("unknown flag `--{}` for trlx {}", key, schema_.name())
                            : fmt::format("unknown key `{}` in the {} config", key, schema_.name());
  // Compare against full names and, for nested keys, against the leaf names of
  // the same section.
  std::vector<std::string> candidates = schema_.names();
  std::string best = closest_match(key, candidates);
  if (best.empty()) {
    const auto dot = key.rfind('.');
    const std::string leaf = dot == std::string::npos ? key : key.substr(dot + 1);
    std::vector<std::string> leaves;
    for (const auto& c : candidates) {
      const auto d = c.rfind('.');
      leaves.push_back(d == std::string::npos ? c : c.substr(d + 1));
    }
    const std::string l = closest_match(leaf, leaves);
    if (!l.empty())
      for (const auto& c : candidates)
        if (ends_with(c, l) && (c.size() == l.size() || c[c.size() - l.size() - 1] == '.')) {
          best = c;
          break;
        }
  }
  if (!best.empty()) msg += fmt::format(" (did you mean `{}{}`?)", dashes, best);
  else msg += fmt::format("; `trlx {} --help` lists the fields", schema_.name());
  return msg;
}

namespace {

bool json_object_text(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  return !j.is_discarded() && j.is_object();
}

}  // namespace

void ConfigLoader::walk(const YAML::Node& map, const std::string& prefix, const std::string& file) {
  std::map<std::string, int> seen;  // key -> line, to catch duplicates
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node k = it->first;  // a copy: `it->` returns a temporary proxy
    const YAML::Node v = it->second;
    const int line = k.Mark().line + 1, col = k.Mark().column + 1;
    if (!k.IsScalar()) {
      errors_.push_back(fmt::format("{}:{}:{}: keys must be plain names", file, line, col));
      continue;
    }
    const std::string key = k.Scalar();
    const std::string full = prefix.empty() ? key : prefix + "." + key;
    if (auto [pos, inserted] = seen.emplace(key, line); !inserted) {
      errors_.push_back(fmt::format("{}:{}:{}: key `{}` appears twice (first on line {}); keep one",
                                    file, line, col, full, pos->second));
      continue;
    }
    Origin origin{Origin::Source::File, file, line, col, "", ""};
    if (const FieldSpec* f = schema_.find(full)) {
      set_from_yaml(*f, v, origin);
    } else if (const Alias* a = schema_.find_alias(full)) {
      const FieldSpec* f = schema_.find(a->new_name);
      origin.alias = full;
      warnings_.push_back(fmt::format("{}:{}:{}: `{}` is the old name of `{}`; using it as `{}` (rename it to silence this warning)",
                                      file, line, col, full, a->new_name, a->new_name));
      log::warn("{}", warnings_.back());
      set_from_yaml(*f, v, origin);
    } else if (schema_.has_section(full) && v.IsMap()) {
      walk(v, full, file);
    } else if (schema_.has_section(full) && v.IsScalar() && json_object_text(v.Scalar())) {
      // A section as a string of a JSON object, as TRL takes its `dict | str`
      // fields (model_init_kwargs: '{"dtype": "bfloat16"}'): JSON is YAML.
      walk(YAML::Load(v.Scalar()), full, file);
    } else if (schema_.has_section(full) && v.IsNull()) {
      // An empty section sets nothing.
    } else {
      errors_.push_back(fmt::format("{}:{}:{}: {}", file, line, col, unknown_key_message(full, false)));
    }
  }
}

void ConfigLoader::set_from_yaml(const FieldSpec& f, const YAML::Node& node, Origin origin) {
  const std::string at = fmt::format("{}:{}:{}", origin.file, node.Mark().line + 1, node.Mark().column + 1);
  auto bad = [&](const std::string& found) {
    errors_.push_back(fmt::format("{}: `{}` expects {}, found {}", at, f.name, kind_name(f.kind), found));
  };
  if (node.IsNull()) {
    if (f.nullable) return set_value(f, std::monostate{}, origin);
    if (f.kind == Kind::String) return set_value(f, std::string(), origin);
    return bad("null");
  }
  // One mapping where a list of mappings is taken: that list of one.
  if (node.IsMap() && f.kind == Kind::StringList && f.mapping_items)
    return set_value(f, std::vector<std::string>{mapping_text(node, at, f.name)}, origin);
  if (f.mapping) {
    // A mapping, or a string of a JSON object (TRL parses a str with json.loads).
    if (node.IsMap()) return set_value(f, mapping_text(node, at, f.name), origin);
    if (node.IsScalar()) {
      const auto j = nlohmann::json::parse(node.Scalar(), nullptr, false);
      if (!j.is_discarded() && j.is_object()) return set_value(f, j.dump(), origin);
    }
    errors_.push_back(fmt::format("{}: `{}` expects a mapping (or a string of a JSON object), found {}", at, f.name,
                                  node.IsSequence() ? std::string("a list") : fmt::format("`{}`", node.Scalar())));
    return;
  }
  if (node.IsMap()) return bad("a mapping");
  const bool is_list = f.kind == Kind::StringList || f.kind == Kind::FloatList;
  if (node.IsSequence()) {
    if (!is_list) return bad("a list");
    if (f.kind == Kind::StringList) {
      std::vector<std::string> out;
      for (const auto& item : node) {
        if (item.IsMap() && f.mapping_items) {
          out.push_back(mapping_text(item, at, f.name));
          continue;
        }
        if (!item.IsScalar()) return bad(f.mapping_items ? "a list with an item that is neither a string nor a mapping"
                                                          : "a list with a non-string item");
        out.push_back(item.Scalar());
      }
      return set_value(f, out, origin);
    }
    std::vector<double> out;
    for (const auto& item : node) {
      std::string expected;
      auto v = item.IsScalar() ? parse_text(Kind::Float, item.Scalar(), &expected) : std::nullopt;
      if (!v) return bad(fmt::format("a list with the item `{}`", item.IsScalar() ? item.Scalar() : "?"));
      out.push_back(std::get<double>(*v));
    }
    return set_value(f, out, origin);
  }
  // A scalar.
  std::string expected;
  if (f.kind == Kind::StringList) return set_value(f, std::vector<std::string>{node.Scalar()}, origin);
  auto v = parse_text(f.kind, node.Scalar(), &expected);
  if (!v) return bad(fmt::format("`{}`", node.Scalar()));
  set_value(f, *v, origin);
}

void ConfigLoader::apply_flag(const std::string& name, const std::vector<std::string>& values) {
  const FieldSpec* f = schema_.find(name);
  Origin origin{Origin::Source::Flag, "", 0, 0, "--" + name, ""};
  if (!f) {
    if (const Alias* a = schema_.find_alias(name)) {
      f = schema_.find(a->new_name);
      origin.flag = "--" + name;
      origin.alias = "";
      warnings_.push_back(fmt::format("--{} is the old name of --{}; using it as --{}", name, a->new_name, a->new_name));
      log::warn("{}", warnings_.back());
    } else if (values.size() == 1 && schema_.has_section(name) && json_object_text(values[0])) {
      // --model_init_kwargs '{"dtype": "bfloat16"}': each key as its flag.
      const auto j = nlohmann::json::parse(values[0]);
      for (const auto& [k, v] : j.items()) apply_flag(name + "." + k, {v.is_string() ? v.get<std::string>() : v.dump()});
      return;
    } else {
      errors_.push_back(unknown_key_message(name, true));
      return;
    }
  }
  auto bad = [&](const std::string& found) {
    errors_.push_back(fmt::format("{}: expects {}, found {}", origin.flag, kind_name(f->kind), found));
  };
  if (values.empty()) {
    if (f->kind == Kind::Bool) return set_value(*f, true, origin);
    return bad("no value");
  }
  if (values.size() == 1 && f->nullable && (values[0] == "null" || values[0] == "None" || values[0] == "none"))
    return set_value(*f, std::monostate{}, origin);
  // An empty list (`--tools null` clears a config file's list; the command
  // line takes `[]` for no value at all).
  const auto empty_word = [](const std::string& v) {
    const auto t = trim(v);
    return t == "[]" || t == "null" || t == "None" || t == "none";
  };
  if (values.size() == 1 && empty_word(values[0]) && (f->kind == Kind::StringList || f->kind == Kind::FloatList))
    return set_value(*f, f->kind == Kind::StringList ? Value(std::vector<std::string>{}) : Value(std::vector<double>{}),
                     origin);
  if (f->mapping) {
    // The mapping as JSON text: '{"enable_thinking": false}'.
    const std::string text = values.size() == 1 ? values[0] : join(values, " ");
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return errors_.push_back(fmt::format("{}: expects a JSON object (e.g. '{{\"enable_thinking\": false}}'), found `{}`",
                                           origin.flag, text));
    return set_value(*f, j.dump(), origin);
  }
  if (f->kind == Kind::StringList && f->mapping_items) {
    // A mapping item is given as JSON ('{"command": "..."}'), which has commas.
    std::vector<std::string> strs;
    for (const auto& raw : values) {
      const std::string t = trim(raw);
      if (!t.empty() && t.front() == '{') {
        if (!nlohmann::json::accept(t)) return bad(fmt::format("`{}` (not valid JSON)", raw));
        strs.push_back(nlohmann::json::parse(t).dump());
        continue;
      }
      std::string expected;
      auto v = parse_text(f->kind, raw, &expected);
      const auto& l = std::get<std::vector<std::string>>(*v);
      strs.insert(strs.end(), l.begin(), l.end());
    }
    return set_value(*f, strs, origin);
  }
  if (f->kind == Kind::StringList || f->kind == Kind::FloatList) {
    std::vector<std::string> strs;
    std::vector<double> nums;
    for (const auto& raw : values) {
      std::string expected;
      auto v = parse_text(f->kind, raw, &expected);
      if (!v) return bad(fmt::format("`{}`", raw));
      if (f->kind == Kind::StringList) {
        const auto& l = std::get<std::vector<std::string>>(*v);
        strs.insert(strs.end(), l.begin(), l.end());
      } else {
        const auto& l = std::get<std::vector<double>>(*v);
        nums.insert(nums.end(), l.begin(), l.end());
      }
    }
    if (f->kind == Kind::StringList) return set_value(*f, strs, origin);
    return set_value(*f, nums, origin);
  }
  if (values.size() > 1) return bad(fmt::format("{} values ({})", values.size(), join(values, " ")));
  std::string expected;
  auto v = parse_text(f->kind, values[0], &expected);
  if (!v) return bad(fmt::format("`{}`", values[0]));
  set_value(*f, *v, origin);
}

void ConfigLoader::set_value(const FieldSpec& f, Value v, Origin origin) {
  // Integers are valid numbers.
  if (f.kind == Kind::Float && std::holds_alternative<int64_t>(v)) v = static_cast<double>(std::get<int64_t>(v));
  values_[f.name] = std::move(v);
  origins_[f.name] = std::move(origin);
}

void ConfigLoader::check_constraints(const FieldSpec& f) {
  const Value& v = values_[f.name];
  const Origin& o = origins_[f.name];
  const std::string at = o.source == Origin::Source::Default ? "default" : o.describe();
  auto check_num = [&](double d) {
    const bool low = f.min_value && (f.min_exclusive ? d <= *f.min_value : d < *f.min_value);
    const bool high = f.max_value && (f.max_exclusive ? d >= *f.max_value : d > *f.max_value);
    if (low || high)
      errors_.push_back(fmt::format("{}: `{}` must be {}, found {}", at, f.name, f.constraint_text(),
                                    format_double(d)));
  };
  auto check_choice = [&](const std::string& s) {
    if (f.choices.empty()) return;
    if (f.mapping_items && !s.empty() && s.front() == '{') return;  // a mapping item (a program entry)
    for (const auto& c : f.choices)
      if (c == s) return;
    std::string msg = fmt::format("{}: `{}` must be one of {}, found `{}`", at, f.name, join(f.choices, ", "), s);
    const std::string near = closest_match(s, f.choices);
    if (!near.empty()) msg += fmt::format(" (did you mean `{}`?)", near);
    errors_.push_back(msg);
  };
  if (f.not_built_reason && v != f.default_value) {
    errors_.push_back(fmt::format("{}: `{}: {}`: not built in trlx: {}", at, f.name, format_value(v), *f.not_built_reason));
    return;
  }
  if (auto* i = std::get_if<int64_t>(&v)) check_num(static_cast<double>(*i));
  if (auto* d = std::get_if<double>(&v)) check_num(*d);
  if (auto* l = std::get_if<std::vector<double>>(&v))
    for (double d : *l) check_num(d);
  if (auto* s = std::get_if<std::string>(&v)) check_choice(*s);
  if (auto* l = std::get_if<std::vector<std::string>>(&v))
    for (const auto& s : *l) check_choice(s);
}

void ConfigLoader::fold_same_fields() {
  for (const auto& f : schema_.fields()) {
    // Unset, or set to null (as print-config writes an unset one): nothing to fold.
    if (f.folds_into.empty() || origins_[f.name].source == Origin::Source::Default ||
        std::holds_alternative<std::monostate>(values_[f.name]))
      continue;
    if (!schema_.find(f.folds_into))
      throw Error(fmt::format("internal: `{}` folds into `{}`, which {} lacks", f.name, f.folds_into, schema_.name()));
    if (origins_[f.folds_into].source != Origin::Source::Default && values_[f.folds_into] != values_[f.name]) {
      errors_.push_back(fmt::format("conflicting settings: {} and {}: these are one setting; give it once",
                                    where(f.folds_into), where(f.name)));
      continue;
    }
    values_[f.folds_into] = values_[f.name];
    Origin o = origins_[f.name];
    o.alias = f.name;
    origins_[f.folds_into] = o;
  }
}

void ConfigLoader::resolve(void* obj) {
  fold_same_fields();
  for (const auto& f : schema_.fields()) check_constraints(f);
  if (errors_.empty()) {
    for (const auto& f : schema_.fields()) f.assign(obj, values_[f.name]);
    Conflicts conflicts(*this);
    for (const auto& rule : schema_.rules()) rule(obj, conflicts);
    for (const auto& w : conflicts.warnings()) {
      warnings_.push_back(w);
      log::warn("{}", w);
    }
    errors_.insert(errors_.end(), conflicts.errors().begin(), conflicts.errors().end());
  }
  if (!errors_.empty()) {
    std::string msg = errors_.size() == 1 ? "invalid config: " + errors_[0]
                                          : fmt::format("invalid config ({} problems):", errors_.size());
    if (errors_.size() > 1)
      for (const auto& e : errors_) msg += "\n  " + e;
    throw InputError(msg);
  }
}

std::string ConfigLoader::to_yaml() const {
  // Fields in schema order; dotted names become nested mappings under the
  // first field of their section.
  std::string out;
  std::set<std::string> done_sections;
  const auto& fields = schema_.fields();
  auto line = [&](const std::string& indent, const std::string& key, const FieldSpec& f) {
    const std::string text = fmt::format("{}{}: {}", indent, key, format_value(value(f.name)));
    const Origin& o = origin(f.name);
    const std::string note = o.source == Origin::Source::Default ? "default" : "from " + o.describe();
    out += fmt::format("{:<60} # {}\n", text, note);
  };
  for (const auto& f : fields) {
    const auto dot = f.name.find('.');
    if (dot == std::string::npos) {
      line("", f.name, f);
      continue;
    }
    const std::string section = f.name.substr(0, dot);
    if (!done_sections.insert(section).second) continue;
    out += section + ":\n";
    for (const auto& g : fields)
      if (starts_with(g.name, section + ".")) line("  ", g.name.substr(dot + 1), g);
  }
  return out;
}

std::string ConfigLoader::to_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& f : schema_.fields()) {
    nlohmann::ordered_json* at = &out;
    std::string name = f.name;
    for (size_t dot; (dot = name.find('.')) != std::string::npos; name = name.substr(dot + 1))
      at = &(*at)[name.substr(0, dot)];
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::monostate>) (*at)[name] = nullptr;
          else (*at)[name] = v;
        },
        value(f.name));
  }
  return out.dump();
}

namespace {
std::string& run_config_text() {
  static std::string text = "{}";
  return text;
}
}  // namespace

void set_run_config_json(std::string json) { run_config_text() = std::move(json); }
const std::string& run_config_json() { return run_config_text(); }

}  // namespace trlx::config

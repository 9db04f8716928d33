#pragma once
// Resolves a config: defaults < YAML file < command-line flags, then checks
// every field and the fields together. All problems are reported at once, each
// with where it came from (file:line:column or the flag), what was expected
// and what was found.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/schema.hpp"

namespace YAML {
class Node;
}

namespace trlx::config {

// Cross-field checks report through this. Messages name every field involved
// and where each was set.
class Conflicts {
 public:
  Conflicts(const class ConfigLoader& loader) : loader_(loader) {}
  // `fields` cannot be combined as set; `advice` says what to change.
  void conflict(const std::vector<std::string>& fields, const std::string& advice);
  // One field's value is wrong given the others.
  void invalid(const std::string& field, const std::string& message);
  // Accepted, but the user should know.
  void warn(const std::string& message);
  const std::vector<std::string>& errors() const { return errors_; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  const class ConfigLoader& loader_;
  std::vector<std::string> errors_, warnings_;
};

class ConfigLoader {
 public:
  explicit ConfigLoader(const Schema& schema);

  const Schema& schema() const { return schema_; }
  void load_yaml_file(const std::filesystem::path& file);
  void load_yaml_text(const std::string& text, const std::string& name);
  // A flag by field name (no dashes). `values` holds what followed the flag;
  // empty for a bare boolean flag (`--bf16`). List fields take several values
  // or one comma-separated value.
  void apply_flag(const std::string& name, const std::vector<std::string>& values);

  // Checks all fields and rules and fills `obj`, which must be the struct the
  // schema was built for. Throws InputError listing every problem.
  void resolve(void* obj);

  const Value& value(std::string_view field) const;
  const Origin& origin(std::string_view field) const;
  // "`beta` (dpo.yaml:3:7)" - a field and where it was set, for messages.
  std::string where(std::string_view field) const;
  // Warnings raised while loading (renamed keys, rule warnings); also logged.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The resolved config as YAML, each value commented with its origin.
  std::string to_yaml() const;
  // The resolved values as a JSON object, dotted names nested (for loggers).
  std::string to_json() const;

 private:
  void walk(const YAML::Node& map, const std::string& prefix, const std::string& file);
  void set_from_yaml(const FieldSpec& f, const YAML::Node& node, Origin origin);
  void set_value(const FieldSpec& f, Value v, Origin origin);
  std::string unknown_key_message(const std::string& key, bool is_flag) const;
  void check_constraints(const FieldSpec& f);
  // Moves values given under another name (FieldSpec::folds_into) to their field.
  void fold_same_fields();

  const Schema& schema_;
  std::map<std::string, Value, std::less<>> values_;
  std::map<std::string, Origin, std::less<>> origins_;
  std::vector<std::string> errors_, warnings_;
};

// Parses a text value for a field of kind `kind`. Returns nullopt and fills
// `expected` when the text does not fit.
std::optional<Value> parse_text(Kind kind, const std::string& text, std::string* expected);

// The resolved config of the run this process makes (ConfigLoader::to_json),
// set by the command line once it is resolved; "{}" until then.
void set_run_config_json(std::string json);
const std::string& run_config_json();

// Convenience: a typed, resolved config and the loader that knows its origins.
template <class C>
struct Loaded {
  C config{};
  std::shared_ptr<ConfigLoader> loader;
};

struct Sources {
  std::optional<std::filesystem::path> yaml_file;
  std::vector<std::pair<std::string, std::vector<std::string>>> flags;
};

template <class C>
Loaded<C> load(const Schema& schema, const Sources& sources) {
  Loaded<C> out;
  out.loader = std::make_shared<ConfigLoader>(schema);
  if (sources.yaml_file) out.loader->load_yaml_file(*sources.yaml_file);
  for (const auto& [name, values] : sources.flags) out.loader->apply_flag(name, values);
  out.loader->resolve(&out.config);
  return out;
}

}  // namespace trlx::config

#pragma once
// A config is declared once, as a table of fields bound to the members of a
// plain struct. The same table drives YAML parsing, command-line flags,
// --help, validation, print-config and the generated reference page.
//
//   struct DPOConfig : TrainingConfig { double beta; ... };
//   SchemaBuilder<DPOConfig> b(schema);
//   b.field(&DPOConfig::beta, "beta", 0.1, "Temperature of the DPO loss.").min(0.0, true);
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace trlx::config {

enum class Kind { Bool, Int, Float, String, StringList, FloatList };

// A field's value. monostate is YAML's null (Python's None).
using Value = std::variant<std::monostate, bool, int64_t, double, std::string,
                           std::vector<std::string>, std::vector<double>>;

std::string kind_name(Kind kind);      // "a boolean", "an integer", ...
std::string format_value(const Value& v);  // as YAML would show it

struct FieldSpec {
  std::string name;   // dotted for nested keys: "gradient_checkpointing_kwargs.use_reentrant"
  Kind kind = Kind::String;
  bool nullable = false;  // bound to a std::optional<>: null/absent allowed
  Value default_value;
  std::string help;
  std::string group;  // section in help and docs
  std::optional<double> min_value, max_value;
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> choices;  // for strings and string lists
  std::function<void(void*, const Value&)> assign;
  // The config struct's member this field is bound to. Defaults to the last
  // part of the name; a test scans lib/ for code that reads it, so that no
  // field is accepted and ignored.
  std::string member;
  // Set when code reads the member only through this accessor of the config
  // struct (e.g. "use_bf16" for bf16).
  std::string read_through;
  // Set when trlx accepts the field (for TRL configs to load) but does not
  // build what it does: any value other than the default is refused.
  std::optional<std::string> not_built_reason;
  // A string list whose items may also be mappings ({command: ...}); such an
  // item is kept as its JSON text (it starts with '{').
  bool mapping_items = false;
  // A string field that holds a mapping (TRL's `dict | str` fields such as
  // chat_template_kwargs): a YAML mapping, or a string of a JSON object, kept
  // as the object's JSON text; anything else is refused.
  bool mapping = false;
  // A string field that names a model or a dataset: a local path, or a
  // Hugging Face hub name (`org/name`) resolved through the hub cache before
  // training (config/hub_paths). Model names may carry the revision field
  // named in `hub_revision_field`.
  enum class HubRef { None, Model, Dataset } hub = HubRef::None;
  std::string hub_revision_field;
  // Another name of field `folds_into` (TRL's `model_init_kwargs.dtype` for
  // `dtype`): a value given here becomes that field's, from where it was
  // given; both given with different values is a conflict. Code reads the
  // other field only.
  std::string folds_into;
  // A field whose accepted values all describe what trlx does anyway (TRL's
  // model_init_kwargs.device_map: auto): a rule refuses the others, and no
  // other code needs to read it.
  bool describes_only = false;
  // Reads the bound member as a Value (null for an empty optional).
  std::function<Value(const void*)> read;

  // Chainable constraints.
  FieldSpec& min(double v, bool exclusive = false) { min_value = v; min_exclusive = exclusive; return *this; }
  FieldSpec& max(double v, bool exclusive = false) { max_value = v; max_exclusive = exclusive; return *this; }
  FieldSpec& one_of(std::vector<std::string> c) { choices = std::move(c); return *this; }
  // The bound member's name when it differs from the last part of the field name.
  FieldSpec& bound_to(std::string m) { member = std::move(m); return *this; }
  FieldSpec& read_via(std::string accessor) { read_through = std::move(accessor); return *this; }
  // Refuse any value other than the default, giving `reason`.
  FieldSpec& not_built(std::string reason) { not_built_reason = std::move(reason); return *this; }
  FieldSpec& items_may_be_mappings() { mapping_items = true; return *this; }
  FieldSpec& holds_mapping() { mapping = true; return *this; }
  FieldSpec& same_as(std::string field) { folds_into = std::move(field); return *this; }
  FieldSpec& only_describes() { describes_only = true; return *this; }
  FieldSpec& hub_model(std::string revision_field = "") {
    hub = HubRef::Model;
    hub_revision_field = std::move(revision_field);
    return *this;
  }
  FieldSpec& hub_dataset() { hub = HubRef::Dataset; return *this; }
  std::string constraint_text() const;  // "> 0", "one of a, b", ""
};

// An old field name still found in users' configs.
struct Alias {
  std::string old_name;
  std::string new_name;
};

// Where a resolved value came from.
struct Origin {
  enum class Source { Default, File, Flag } source = Source::Default;
  std::string file;    // File
  int line = 0, column = 0;  // File, 1-based
  std::string flag;    // Flag: "--beta"
  std::string alias;   // set when the value was given under an old name
  std::string describe() const;  // "default", "dpo.yaml:3:7", "--beta"
};

class Conflicts;

class Schema {
 public:
  Schema(std::string name, std::string summary) : name_(std::move(name)), summary_(std::move(summary)) {}
  const std::string& name() const { return name_; }
  const std::string& summary() const { return summary_; }

  FieldSpec& add(FieldSpec spec);
  void add_alias(std::string old_name, std::string new_name);
  void add_rule(std::function<void(const void*, Conflicts&)> rule) { rules_.push_back(std::move(rule)); }

  const FieldSpec* find(std::string_view name) const;
  const Alias* find_alias(std::string_view old_name) const;
  const std::vector<FieldSpec>& fields() const { return fields_; }
  const std::vector<Alias>& aliases() const { return aliases_; }
  const std::vector<std::function<void(const void*, Conflicts&)>>& rules() const { return rules_; }
  std::vector<std::string> names() const;
  // True when some field is nested under `prefix.`
  bool has_section(std::string_view prefix) const;

 private:
  std::string name_, summary_;
  std::vector<FieldSpec> fields_;
  std::vector<Alias> aliases_;
  std::vector<std::function<void(const void*, Conflicts&)>> rules_;
};

namespace detail {
template <class T> struct FieldTraits;
template <> struct FieldTraits<bool> { static constexpr Kind kind = Kind::Bool; using V = bool; };
template <> struct FieldTraits<int64_t> { static constexpr Kind kind = Kind::Int; using V = int64_t; };
template <> struct FieldTraits<double> { static constexpr Kind kind = Kind::Float; using V = double; };
template <> struct FieldTraits<std::string> { static constexpr Kind kind = Kind::String; using V = std::string; };
template <> struct FieldTraits<std::vector<std::string>> { static constexpr Kind kind = Kind::StringList; using V = std::vector<std::string>; };
template <> struct FieldTraits<std::vector<double>> { static constexpr Kind kind = Kind::FloatList; using V = std::vector<double>; };
template <class T> struct Unwrap { using type = T; static constexpr bool nullable = false; };
template <class T> struct Unwrap<std::optional<T>> { using type = T; static constexpr bool nullable = true; };
}  // namespace detail

// Binds fields of struct C (or of a base of C) to a schema.
template <class C>
class SchemaBuilder {
 public:
  explicit SchemaBuilder(Schema& schema) : schema_(schema) {}

  // `def` is the default; for std::optional members pass std::nullopt or a value.
  template <class T, class B, class D>
  FieldSpec& field(T B::*member, std::string name, D def, std::string help) {
    static_assert(std::is_base_of_v<B, C>, "member must belong to the config struct or a base");
    using U = detail::Unwrap<T>;
    using Inner = typename U::type;
    FieldSpec spec;
    spec.member = name.substr(name.rfind('.') + 1);  // npos + 1 == 0: the whole name
    spec.name = std::move(name);
    spec.kind = detail::FieldTraits<Inner>::kind;
    spec.nullable = U::nullable;
    spec.help = std::move(help);
    spec.group = group_;
    if constexpr (std::is_same_v<D, std::nullopt_t>) {
      static_assert(U::nullable, "only optional fields default to null");
      spec.default_value = std::monostate{};
    } else if constexpr (detail::Unwrap<D>::nullable) {
      if (def) spec.default_value = static_cast<Inner>(*def);
      else spec.default_value = std::monostate{};
    } else if constexpr (std::is_same_v<Inner, int64_t>) {
      spec.default_value = static_cast<int64_t>(def);
    } else if constexpr (std::is_same_v<Inner, double>) {
      spec.default_value = static_cast<double>(def);
    } else if constexpr (std::is_same_v<Inner, std::string>) {
      spec.default_value = std::string(def);
    } else {
      spec.default_value = Inner(def);
    }
    spec.assign = [member](void* obj, const Value& v) {
      C* c = static_cast<C*>(obj);
      if constexpr (U::nullable) {
        if (std::holds_alternative<std::monostate>(v)) {
          c->*member = std::nullopt;
          return;
        }
      }
      c->*member = std::get<typename detail::FieldTraits<Inner>::V>(v);
    };
    spec.read = [member](const void* obj) -> Value {
      const C* c = static_cast<const C*>(obj);
      if constexpr (U::nullable) {
        if (!(c->*member)) return std::monostate{};
        return Value(*(c->*member));
      } else {
        return Value(c->*member);
      }
    };
    return schema_.add(std::move(spec));
  }

  // Fields declared after this call are listed under `group` in help and docs.
  SchemaBuilder& group(std::string g) { group_ = std::move(g); return *this; }
  SchemaBuilder& alias(std::string old_name, std::string new_name) {
    schema_.add_alias(std::move(old_name), std::move(new_name));
    return *this;
  }
  // A check across fields; report problems through Conflicts.
  SchemaBuilder& rule(std::function<void(const C&, Conflicts&)> check) {
    schema_.add_rule([check](const void* obj, Conflicts& out) { check(*static_cast<const C*>(obj), out); });
    return *this;
  }

 private:
  Schema& schema_;
  std::string group_ = "general";
};

}  // namespace trlx::config

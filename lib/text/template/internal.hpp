#pragma once
// Internals of the chat-template engine: values, syntax tree, parser and
// interpreter. Only lib/text/template/*.cpp include this; users include
// chat_template.hpp.
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trlx::text::tpl {

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Object;

// The Python types a chat template can see. Tuple and Iterator are lists that
// print, compare and measure differently (Python tuples and generators).
enum class Kind : uint8_t {
  Undefined, None, Bool, Int, Float, String, List, Tuple, Iterator, Dict, Namespace, Object
};

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;                      // Bool; for String, whether it is Markup (|safe, |e)
  int64_t i = 0;
  double f = 0;
  std::string s;                       // String; for Undefined, why it is undefined
  std::shared_ptr<const List> list;    // List, Tuple, Iterator (immutable, as in the sandbox)
  std::shared_ptr<Dict> dict;          // Dict (never mutated once built), Namespace (mutable)
  std::shared_ptr<Object> obj;         // callables, loop objects

  Value() = default;
  static Value undefined(std::string hint = {}) {
    Value v;
    v.s = std::move(hint);
    return v;
  }
  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }
  static Value make_list(List items, Kind k = Kind::List) {
    Value v;
    v.kind = k;
    v.list = std::make_shared<const List>(std::move(items));
    return v;
  }
  static Value make_dict(std::shared_ptr<Dict> d, Kind k = Kind::Dict) {
    Value v;
    v.kind = k;
    v.dict = std::move(d);
    return v;
  }
  static Value object(std::shared_ptr<Object> o) {
    Value v;
    v.kind = Kind::Object;
    v.obj = std::move(o);
    return v;
  }

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_int_like() const { return kind == Kind::Int || kind == Kind::Bool; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Bool || kind == Kind::Float; }
  bool is_listish() const { return kind == Kind::List || kind == Kind::Tuple || kind == Kind::Iterator; }
  bool is_mapping() const { return kind == Kind::Dict; }
  int64_t as_int() const { return kind == Kind::Bool ? (b ? 1 : 0) : i; }
  double as_double() const {
    return kind == Kind::Float ? f : static_cast<double>(as_int());
  }
};

// Insertion-ordered mapping with Python key equality (1 == 1.0 == True).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

// A runtime error inside the template; the interpreter adds the line.
class RenderError : public std::runtime_error {
 public:
  explicit RenderError(std::string msg) : std::runtime_error(std::move(msg)) {}
};
[[noreturn]] void throw_error(std::string msg);

class Interp;
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // The argument at `index` or named `name`, or nullptr.
  const Value* get(size_t index, std::string_view name) const;
};

struct Object {
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual std::string repr() const;
  virtual bool callable() const { return false; }
  virtual Value call(Interp& in, Args& args);
  // Attribute lookup; nullopt when the object has no such attribute.
  virtual std::optional<Value> getattr(const std::string& name) const;
  // Drops references to other values; called when a render ends so that
  // reference cycles (a macro stored in the scope it closes over, a namespace
  // holding itself) do not leak.
  virtual void release() {}
};

// ---- Python semantics shared by the interpreter and the filters ----
bool truthy(const Value& v);
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_float_repr(double d);
std::string py_type_name(const Value& v);
bool py_equal(const Value& a, const Value& b);
// a < b, Python ordering; throws for unorderable types.
bool py_less(const Value& a, const Value& b);
// Python's len(); throws for types without one.
int64_t py_len(const Value& v);
// The items a for loop visits; throws for non-iterables.
List py_iterate(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string py_json_dumps(const Value& v, const JsonOptions& opt);

// ---- UTF-8 helpers (Python strings index by code point) ----
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
bool utf8_is_ascii(std::string_view s);
size_t utf8_length(std::string_view s);
bool py_isspace(char32_t c);
char32_t py_upper1(char32_t c);
char32_t py_lower1(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdigit(char32_t c);
// Python's \w for one code point (letters, digits, underscore).
bool py_isword(char32_t c);
// One code point at s[pos...]; sets its byte length (1 for a malformed byte).
char32_t utf8_decode_at(std::string_view s, size_t pos, size_t& len);
bool py_iscased(char32_t c);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_strip(std::string_view s, const Value* chars, bool left, bool right);
std::string html_escape(std::string_view s);

// ---- Syntax tree ----
enum class NK : uint8_t {
  // expressions
  Const, Name, Getattr, Getitem, Slice, Call, Filter, Test, Not, Neg, Pos, BinOp, Concat,
  Compare, And, Or, CondExpr, ListLit, TupleLit, DictLit,
  // statements
  Text, Print, If, For, Set, SetAttr, SetBlock, Macro, CallBlock, FilterBlock, With, Break,
  Continue, Generation
};

struct Node;
using NodeP = std::unique_ptr<Node>;
using Nodes = std::vector<NodeP>;

struct Node {
  NK kind;
  int line = 0;
  std::string name;                // name, attribute, filter/test name, operator, macro name, text
  Value value;                     // Const
  NodeP a, b, c;                   // operands (see parser for each kind)
  Nodes items;                     // positional args, elements, compare operands, with values
  std::vector<std::string> strs;   // kwarg names, compare ops, target names, macro params
  Nodes kwitems;                   // kwarg values / macro defaults, parallel to strs
  NodeP dyn_args, dyn_kwargs;
  Nodes body, else_body;
  bool flag = false;               // For: unpack a tuple target; Set: tuple target
  Node(NK k, int l) : kind(k), line(l) {}
};

class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(std::string msg, int line, int col)
      : std::runtime_error(std::move(msg)), line(line), col(col) {}
  int line, col;
};

// Parses a whole template (jinja2 with trim_blocks, lstrip_blocks, loopcontrols
// and the generation tag). Throws SyntaxError.
Nodes parse_template(std::string_view source);

}  // namespace trlx::text::tpl

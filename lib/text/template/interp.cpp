// Statement execution and expression evaluation with jinja2's semantics
// (scoping of for loops and macros, Undefined, the immutable sandbox).
#include <cmath>

#include "text/template/interp.hpp"

namespace trlx::text::tpl {

namespace {
constexpr int kMaxDepth = 400;

struct DepthGuard {
  int& d;
  explicit DepthGuard(int& dd) : d(dd) {
    if (++d > kMaxDepth) throw_error("template evaluation nested too deeply");
  }
  ~DepthGuard() { --d; }
};

[[noreturn]] void fail_undefined(const Value& v) {
  throw_error(v.s.empty() ? "value is undefined" : v.s);
}

std::string type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return py_type_name(v) + " object";
}

// The loop variable of a for loop; one object per loop, updated as it runs.
struct LoopObj : Object, std::enable_shared_from_this<LoopObj> {
  std::shared_ptr<const List> items;
  int64_t index0 = 0;
  std::optional<Value> last_changed;
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items->size()) + ">";
  }
  std::optional<Value> getattr(const std::string& name) const override;
  void release() override {
    items.reset();
    last_changed.reset();
  }
};

struct LoopMethod : Object {
  std::shared_ptr<LoopObj> loop;
  std::string name;
  std::string type_name() const override { return "method"; }
  bool callable() const override { return true; }
  Value call(Interp&, Args& args) override {
    if (name == "cycle") {
      if (args.pos.empty()) throw_error("no items for cycling given");
      return args.pos[static_cast<size_t>(loop->index0) % args.pos.size()];
    }
    Value cur = Value::make_list(args.pos);
    if (!loop->last_changed || !py_equal(*loop->last_changed, cur)) {
      loop->last_changed = cur;
      return Value::boolean(true);
    }
    return Value::boolean(false);
  }
};

std::optional<Value> LoopObj::getattr(const std::string& name) const {
  int64_t len = static_cast<int64_t>(items->size());
  if (name == "index") return Value::integer(index0 + 1);
  if (name == "index0") return Value::integer(index0);
  if (name == "revindex") return Value::integer(len - index0);
  if (name == "revindex0") return Value::integer(len - index0 - 1);
  if (name == "first") return Value::boolean(index0 == 0);
  if (name == "last") return Value::boolean(index0 == len - 1);
  if (name == "length") return Value::integer(len);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") {
    if (index0 == 0) return Value::undefined("there is no previous item");
    return (*items)[static_cast<size_t>(index0 - 1)];
  }
  if (name == "nextitem") {
    if (index0 + 1 >= len) return Value::undefined("there is no next item");
    return (*items)[static_cast<size_t>(index0 + 1)];
  }
  if (name == "cycle" || name == "changed") {
    auto m = std::make_shared<LoopMethod>();
    m->loop = std::const_pointer_cast<LoopObj>(shared_from_this());
    m->name = name;
    return Value::object(m);
  }
  return std::nullopt;
}

// A macro, or the body of a {% call %} block passed to it as `caller`.
struct MacroObj : Object {
  const Node* node;
  std::shared_ptr<Scope> closure;
  std::string name;
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro '" + name + "'>"; }
  bool callable() const override { return true; }
  void release() override { closure.reset(); }
  Value call(Interp& in, Args& args) override {
    if (in.call_depth_ >= 64) throw_error("macro calls nested too deeply (recursion?)");
    if (!closure) throw_error("macro '" + name + "' called after its template finished rendering");
    auto scope = std::make_shared<Scope>();
    scope->parent = closure;
    const auto& params = node->strs;
    size_t np = params.size();
    // Which of varargs / kwargs / caller the body uses decides, as in jinja2,
    // whether extra arguments are accepted.
    int64_t uses = node->value.i;
    bool catch_varargs = uses & 1, catch_kwargs = uses & 2, uses_caller = uses & 4;
    std::vector<bool> bound(np, false);
    for (size_t k = 0; k < args.pos.size() && k < np; ++k) {
      scope->set(params[k], args.pos[k]);
      bound[k] = true;
    }
    std::vector<std::pair<std::string, Value>> rest;
    for (auto& [key, v] : args.kw) {
      bool used = false;
      for (size_t k = args.pos.size(); k < np; ++k)
        if (params[k] == key && !bound[k]) {
          scope->set(key, v);
          bound[k] = used = true;
          break;
        }
      if (!used) rest.emplace_back(key, v);
    }
    bool caller_is_param = false;
    for (const auto& p : params) caller_is_param |= p == "caller";
    if (uses_caller && !caller_is_param) {
      Value caller = Value::undefined("No caller defined");
      for (auto it = rest.begin(); it != rest.end(); ++it)
        if (it->first == "caller") {
          caller = it->second;
          rest.erase(it);
          break;
        }
      scope->set("caller", caller);
    }
    auto kwargs = std::make_shared<Dict>();
    if (catch_kwargs) {
      for (auto& [k, v] : rest) kwargs->set(Value::string(k), v);
    } else if (!rest.empty()) {
      if (rest[0].first == "caller")
        throw_error("macro '" + name + "' was invoked with two values for the special caller argument");
      throw_error("macro '" + name + "' takes no keyword argument '" + rest[0].first + "'");
    }
    List varargs;
    if (args.pos.size() > np) {
      if (!catch_varargs)
        throw_error("macro '" + name + "' takes not more than " + std::to_string(np) + " argument(s)");
      varargs.assign(args.pos.begin() + static_cast<long>(np), args.pos.end());
    }
    auto saved = in.scope_;
    in.scope_ = scope;
    ++in.call_depth_;
    struct Restore {
      Interp& in;
      std::shared_ptr<Scope> s;
      ~Restore() {
        in.scope_ = s;
        --in.call_depth_;
      }
    } restore{in, saved};
    for (size_t k = 0; k < np; ++k) {
      if (bound[k]) continue;
      if (node->kwitems[k]) scope->set(params[k], in.eval(*node->kwitems[k]));
      else scope->set(params[k], Value::undefined("parameter '" + params[k] + "' was not provided"));
    }
    if (catch_varargs) scope->set("varargs", Value::make_list(std::move(varargs), Kind::Tuple));
    if (catch_kwargs) scope->set("kwargs", Value::make_dict(kwargs));
    return Value::string(in.capture(node->body));
  }
};

// A bound method of a str, list or dict (`message.content.strip`).
struct MethodObj : Object {
  Value self;
  std::string name;
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override {
    return "<built-in method " + name + " of " + py_type_name(self) + " object>";
  }
  bool callable() const override { return true; }
  Value call(Interp& in, Args& args) override { return in.call_method(self, name, args); }
};

bool is_str_method(const std::string& n) {
  static const char* kNames[] = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace",
      "upper", "lower", "title", "capitalize", "swapcase", "casefold", "find", "rfind", "index", "rindex",
      "count", "join", "format", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
      "isnumeric", "isdecimal", "istitle", "zfill", "center", "ljust", "rjust", "partition", "rpartition",
      "removeprefix", "removesuffix", "expandtabs"};
  for (const char* k : kNames)
    if (n == k) return true;
  return false;
}

Value method_value(const Value& self, const std::string& name) {
  auto m = std::make_shared<MethodObj>();
  m->self = self;
  m->name = name;
  return Value::object(m);
}

// A method the immutable sandbox refuses: an Undefined that names the
// refusal, so it prints as nothing and fails when called (as in jinja2).
Value unsafe_value(const Value& self, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + py_type_name(self) + "' object is unsafe.");
}

// Attribute lookup without the item fallback; nullopt if there is none.
std::optional<Value> python_attr(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') return std::nullopt;
  switch (obj.kind) {
    case Kind::String:
      if (is_str_method(name)) return method_value(obj, name);
      return std::nullopt;
    case Kind::List:
      if (name == "index" || name == "count" || name == "copy") return method_value(obj, name);
      if (name == "append" || name == "clear" || name == "pop" || name == "reverse" || name == "insert" ||
          name == "sort" || name == "extend" || name == "remove")
        return unsafe_value(obj, name);
      return std::nullopt;
    case Kind::Tuple:
      if (name == "index" || name == "count") return method_value(obj, name);
      return std::nullopt;
    case Kind::Dict:
      if (name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy")
        return method_value(obj, name);
      if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
        return unsafe_value(obj, name);
      return std::nullopt;
    case Kind::Namespace:
      if (const Value* v = obj.dict->find(name)) return *v;
      return std::nullopt;
    case Kind::Object:
      return obj.obj->getattr(name);
    default:
      return std::nullopt;
  }
}

}  // namespace

// ---------------------------------------------------------------- scopes

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    for (const auto& [k, v] : s->vars)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars)
    if (k == name) {
      old = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

// ---------------------------------------------------------------- driver

Interp::~Interp() {
  for (auto& o : objects_) o->release();
  for (auto& d : namespaces_) d->items.clear();
}

std::string Interp::render(const Nodes& body, std::shared_ptr<Scope> root,
                           std::vector<std::pair<size_t, size_t>>* spans) {
  scope_ = std::move(root);
  spans_ = spans;
  root_out_.clear();
  out_ = &root_out_;
  exec(body);
  return std::move(root_out_);
}

void Interp::step() {
  if (++steps_ > limits_.max_steps)
    throw_error("template rendering took too many steps (more than " + std::to_string(limits_.max_steps) + ")");
}

void Interp::check_size(size_t n) const {
  if (n > limits_.max_output)
    throw_error("template output too large (more than " + std::to_string(limits_.max_output) + " bytes)");
}

void Interp::append(std::string_view s) {
  check_size(out_->size() + s.size());
  out_->append(s);
}

std::string Interp::capture(const Nodes& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  struct Restore {
    Interp& in;
    std::string* s;
    ~Restore() { in.out_ = s; }
  } restore{*this, saved};
  exec(body);
  return buf;
}

void Interp::exec(const Nodes& body) {
  for (const auto& n : body) {
    exec_one(*n);
    if (flow_ != Flow::Normal) return;
  }
}

void Interp::exec_one(const Node& n) {
  DepthGuard g(depth_);
  step();
  line_ = n.line;
  switch (n.kind) {
    case NK::Text: append(n.name); return;
    case NK::Print: {
      Value v = eval(*n.a);
      line_ = n.line;
      if (v.kind == Kind::String) append(v.s);
      else append(py_str(v));
      return;
    }
    case NK::If: {
      if (truthy(eval(*n.a))) exec(n.body);
      else exec(n.else_body);
      return;
    }
    case NK::For: exec_for(n); return;
    case NK::Set:
    case NK::SetAttr:
    case NK::SetBlock: exec_set(n); return;
    case NK::Macro: {
      auto m = std::make_shared<MacroObj>();
      m->node = &n;
      m->closure = scope_;
      m->name = n.name;
      track(m);
      scope_->set(n.name, Value::object(m));
      return;
    }
    case NK::CallBlock: {
      auto caller = std::make_shared<MacroObj>();
      caller->node = &n;
      caller->closure = scope_;
      caller->name = "caller";
      track(caller);
      const Node& call = *n.a;
      Value callee = eval(*call.a);
      Args args = eval_args(call);
      args.kw.emplace_back("caller", Value::object(caller));
      Value r = call_value(callee, args);
      append(py_str(r));
      return;
    }
    case NK::FilterBlock: {
      std::string text = capture(n.body);
      Value r = apply_block_filter(n.a.get(), std::move(text));
      append(py_str(r));
      return;
    }
    case NK::With: {
      auto scope = std::make_shared<Scope>();
      scope->parent = scope_;
      for (size_t k = 0; k < n.strs.size(); ++k) scope->set(n.strs[k], eval(*n.items[k]));
      auto saved = scope_;
      scope_ = scope;
      struct Restore {
        Interp& in;
        std::shared_ptr<Scope> s;
        ~Restore() { in.scope_ = s; }
      } restore{*this, saved};
      exec(n.body);
      return;
    }
    case NK::Break: flow_ = Flow::Break; return;
    case NK::Continue: flow_ = Flow::Continue; return;
    case NK::Generation: {
      std::string text = capture(n.body);
      // Like transformers' AssistantTracker: the span starts at the length of
      // what the template has emitted at top level so far.
      size_t start = root_out_.size();
      if (spans_) spans_->emplace_back(start, start + text.size());
      append(text);
      return;
    }
    default: throw_error("internal error: expression used as a statement");
  }
}

Value Interp::apply_block_filter(const Node* filter, std::string text) {
  Value input = Value::string(std::move(text));
  if (!filter) return input;
  const Value* saved = block_input_;
  block_input_ = &input;
  struct Restore {
    Interp& in;
    const Value* s;
    ~Restore() { in.block_input_ = s; }
  } restore{*this, saved};
  return eval(*filter);
}

void Interp::assign(const std::vector<std::string>& names, bool unpack, const Value& v) {
  if (!unpack) {
    scope_->set(names[0], v);
    return;
  }
  List items = py_iterate(v);
  if (items.size() < names.size())
    throw_error("not enough values to unpack (expected " + std::to_string(names.size()) + ", got " +
                std::to_string(items.size()) + ")");
  if (items.size() > names.size())
    throw_error("too many values to unpack (expected " + std::to_string(names.size()) + ")");
  for (size_t k = 0; k < names.size(); ++k) scope_->set(names[k], items[k]);
}

void Interp::exec_set(const Node& n) {
  if (n.kind == NK::SetAttr) {
    Value v = eval(*n.a);
    const Value* ns = scope_->find(n.name);
    if (!ns || ns->kind != Kind::Namespace)
      throw_error("cannot assign attribute on non-namespace object");
    const std::string& attr = n.strs[0];
    if (!attr.empty() && attr[0] == '_')
      throw_error("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                  attr + "'.");
    ns->dict->set(Value::string(attr), std::move(v));
    return;
  }
  if (n.kind == NK::SetBlock) {
    std::string text = capture(n.body);
    Value v = apply_block_filter(n.a.get(), std::move(text));
    assign(n.strs, false, v);
    return;
  }
  assign(n.strs, n.flag, eval(*n.a));
}

void Interp::exec_for(const Node& n) {
  Value iter = eval(*n.a);
  List all = py_iterate(iter);
  auto outer = scope_;
  struct Restore {
    Interp& in;
    std::shared_ptr<Scope> s;
    ~Restore() { in.scope_ = s; }
  } restore{*this, outer};
  List items;
  if (n.b) {
    // The loop filter sees the loop target but no `loop`.
    for (const Value& item : all) {
      step();
      auto scope = std::make_shared<Scope>();
      scope->parent = outer;
      scope_ = scope;
      assign(n.strs, n.flag, item);
      if (truthy(eval(*n.b))) items.push_back(item);
    }
    scope_ = outer;
  } else {
    items = std::move(all);
  }
  if (items.empty()) {
    exec(n.else_body);
    return;
  }
  // jinja2 clears its "run the else block" flag at the end of each body run,
  // so else also runs when every iteration ended in break or continue.
  bool run_else = true;
  auto loop = std::make_shared<LoopObj>();
  track(loop);
  loop->items = std::make_shared<const List>(std::move(items));
  Value loop_value = Value::object(loop);
  for (size_t k = 0; k < loop->items->size(); ++k) {
    step();
    loop->index0 = static_cast<int64_t>(k);
    // Each iteration starts from the enclosing scope: a {% set %} in the body
    // does not survive into the next iteration or after the loop.
    auto scope = std::make_shared<Scope>();
    scope->parent = outer;
    scope->vars.reserve(n.strs.size() + 1);
    scope_ = scope;
    scope->set("loop", loop_value);
    assign(n.strs, n.flag, (*loop->items)[k]);
    exec(n.body);
    if (flow_ == Flow::Normal) run_else = false;
    if (flow_ == Flow::Break) {
      flow_ = Flow::Normal;
      break;
    }
    flow_ = Flow::Normal;
  }
  if (run_else && !n.else_body.empty()) {
    scope_ = outer;
    exec(n.else_body);
  }
}

// ---------------------------------------------------------------- expressions

Args Interp::eval_args(const Node& n) {
  Args args;
  args.pos.reserve(n.items.size());
  for (const auto& a : n.items) args.pos.push_back(eval(*a));
  for (size_t k = 0; k < n.strs.size(); ++k) args.kw.emplace_back(n.strs[k], eval(*n.kwitems[k]));
  if (n.dyn_args) {
    for (Value& v : py_iterate(eval(*n.dyn_args))) args.pos.push_back(std::move(v));
  }
  if (n.dyn_kwargs) {
    Value d = eval(*n.dyn_kwargs);
    if (d.kind != Kind::Dict) throw_error("argument after ** must be a mapping, not " + py_type_name(d));
    for (const auto& [k, v] : d.dict->items) {
      if (k.kind != Kind::String) throw_error("keywords must be strings");
      args.kw.emplace_back(k.s, v);
    }
  }
  return args;
}

Value Interp::eval(const Node& n) {
  DepthGuard g(depth_);
  step();
  switch (n.kind) {
    case NK::Const: return n.value;
    case NK::Name: {
      if (const Value* v = scope_->find(n.name)) return *v;
      return Value::undefined("'" + n.name + "' is undefined");
    }
    case NK::Getattr: {
      Value obj = eval(*n.a);
      line_ = n.line;
      return getattr(obj, n.name);
    }
    case NK::Getitem: {
      Value obj = eval(*n.a);
      if (n.b->kind == NK::Slice) return slice(obj, *n.b);
      Value key = eval(*n.b);
      line_ = n.line;
      return getitem(obj, key);
    }
    case NK::Call: return eval_call(n);
    case NK::Filter: return eval_filter(n);
    case NK::Test: return eval_test(n);
    case NK::Not: return Value::boolean(!truthy(eval(*n.a)));
    case NK::Neg:
    case NK::Pos: {
      Value v = eval(*n.a);
      line_ = n.line;
      if (v.is_undefined()) fail_undefined(v);
      bool neg = n.kind == NK::Neg;
      if (v.kind == Kind::Float) return Value::number(neg ? -v.f : v.f);
      if (v.is_int_like()) {
        int64_t x = v.as_int();
        if (neg && x == INT64_MIN) throw_error("integer overflow (beyond 64 bits)");
        return Value::integer(neg ? -x : x);
      }
      throw_error(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + py_type_name(v) + "'");
    }
    case NK::BinOp: {
      Value a = eval(*n.a);
      Value b = eval(*n.b);
      line_ = n.line;
      return binop(n.name, a, b);
    }
    case NK::Concat: {
      std::string out;
      for (const auto& item : n.items) {
        Value v = eval(*item);
        out += v.kind == Kind::String ? v.s : py_str(v);
        check_size(out.size());
      }
      return Value::string(std::move(out));
    }
    case NK::Compare: return eval_compare(n);
    case NK::And: {
      Value a = eval(*n.a);
      if (!truthy(a)) return a;
      return eval(*n.b);
    }
    case NK::Or: {
      Value a = eval(*n.a);
      if (truthy(a)) return a;
      return eval(*n.b);
    }
    case NK::CondExpr: {
      if (truthy(eval(*n.a))) return eval(*n.b);
      if (n.c) return eval(*n.c);
      return Value::undefined("the inline if-expression on line " + std::to_string(n.line) +
                              " evaluated to false and no else section was defined.");
    }
    case NK::ListLit:
    case NK::TupleLit:
    case NK::DictLit: return eval_literal(n);
    default: throw_error("internal error: statement used as an expression");
  }
}

Value Interp::eval_literal(const Node& n) {
  if (n.kind == NK::DictLit) {
    auto d = std::make_shared<Dict>();
    for (size_t k = 0; k + 1 < n.items.size(); k += 2) {
      Value key = eval(*n.items[k]);
      if (key.is_listish() && key.kind != Kind::Tuple) throw_error("unhashable type: '" + py_type_name(key) + "'");
      if (key.kind == Kind::Dict || key.kind == Kind::Namespace)
        throw_error("unhashable type: '" + py_type_name(key) + "'");
      d->set(std::move(key), eval(*n.items[k + 1]));
    }
    return Value::make_dict(d);
  }
  List items;
  items.reserve(n.items.size());
  for (const auto& item : n.items) items.push_back(eval(*item));
  return Value::make_list(std::move(items), n.kind == NK::TupleLit ? Kind::Tuple : Kind::List);
}

Value Interp::eval_call(const Node& n) {
  Value callee = eval(*n.a);
  Args args = eval_args(n);
  line_ = n.line;
  return call_value(callee, args);
}

Value Interp::eval_filter(const Node& n) {
  Value input;
  if (n.a) input = eval(*n.a);
  else if (block_input_) input = *block_input_;
  Args args = eval_args(n);
  line_ = n.line;
  return apply_filter(n.name, input, args);
}

Value Interp::eval_test(const Node& n) {
  Value v = eval(*n.a);
  Args args = eval_args(n);
  line_ = n.line;
  return Value::boolean(apply_test(n.name, v, args));
}

Value Interp::eval_compare(const Node& n) {
  Value left = eval(*n.a);
  for (size_t k = 0; k < n.strs.size(); ++k) {
    Value right = eval(*n.items[k]);
    line_ = n.line;
    const std::string& op = n.strs[k];
    bool r;
    if (op == "==") r = py_equal(left, right);
    else if (op == "!=") r = !py_equal(left, right);
    else if (op == "<") r = py_less(left, right);
    else if (op == ">") r = py_less(right, left);
    else if (op == "<=") r = py_less(left, right) || py_equal(left, right);
    else if (op == ">=") r = py_less(right, left) || py_equal(left, right);
    else if (op == "in") r = contains(right, left);
    else r = !contains(right, left);
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

bool Interp::contains(const Value& c, const Value& item) {
  switch (c.kind) {
    case Kind::Undefined: return false;
    case Kind::String:
      if (!item.is_string())
        throw_error("'in <string>' requires string as left operand, not " + py_type_name(item));
      return c.s.find(item.s) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
    case Kind::Iterator:
      for (const Value& v : py_iterate(c))
        if (py_equal(v, item)) return true;
      return false;
    case Kind::Dict:
      if (item.kind == Kind::List || item.kind == Kind::Dict || item.kind == Kind::Namespace ||
          item.kind == Kind::Iterator)
        throw_error("unhashable type: '" + py_type_name(item) + "'");
      return c.dict->find(item) != nullptr;
    default: throw_error("argument of type '" + py_type_name(c) + "' is not iterable");
  }
}

Value Interp::call_value(const Value& callee, Args& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (callee.kind == Kind::Object && callee.obj->callable()) return callee.obj->call(*this, args);
  throw_error("'" + py_type_name(callee) + "' object is not callable");
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (auto v = python_attr(obj, name)) return *v;
  if (obj.kind == Kind::Dict) {
    if (const Value* v = obj.dict->find(name)) return *v;
  }
  return Value::undefined("'" + type_repr(obj) + "' has no attribute '" + name + "'");
}

Value Interp::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind) {
    case Kind::Dict:
      if (const Value* v = obj.dict->find(key)) return *v;
      break;
    case Kind::List:
    case Kind::Tuple:
    case Kind::String:
      if (key.is_int_like()) {
        int64_t idx = key.as_int();
        int64_t len = obj.kind == Kind::String ? static_cast<int64_t>(utf8_length(obj.s))
                                               : static_cast<int64_t>(obj.list->size());
        if (idx < 0) idx += len;
        if (idx >= 0 && idx < len) {
          if (obj.kind != Kind::String) return (*obj.list)[static_cast<size_t>(idx)];
          if (utf8_is_ascii(obj.s)) return Value::string(std::string(1, obj.s[static_cast<size_t>(idx)]));
          std::string one;
          utf8_append(one, utf8_decode(obj.s)[static_cast<size_t>(idx)]);
          return Value::string(std::move(one));
        }
      }
      break;
    default: break;
  }
  if (key.is_string()) {
    if (auto v = python_attr(obj, key.s)) return *v;
    return Value::undefined("'" + type_repr(obj) + "' has no attribute '" + key.s + "'");
  }
  return Value::undefined("'" + type_repr(obj) + "' has no attribute " + py_repr(key));
}

Value Interp::slice(const Value& obj, const Node& sl) {
  auto index = [&](const NodeP& p) -> std::optional<int64_t> {
    if (!p) return std::nullopt;
    Value v = eval(*p);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int_like()) throw_error("slice indices must be integers or None");
    return v.as_int();
  };
  auto start = index(sl.a);
  auto stop = index(sl.b);
  auto stepv = index(sl.c);
  line_ = sl.line;
  if (obj.is_undefined()) fail_undefined(obj);
  // jinja2 compiles slices to a plain Python subscript (no sandbox getitem
  // fallback), so slicing anything but a str, list or tuple is an error.
  if (obj.kind == Kind::Dict) throw_error("unhashable type: 'slice'");
  if (obj.kind != Kind::String && obj.kind != Kind::List && obj.kind != Kind::Tuple)
    throw_error("'" + py_type_name(obj) + "' object is not subscriptable");
  int64_t st = stepv.value_or(1);
  if (st == 0) throw_error("slice step cannot be zero");
  std::u32string u;
  bool str = obj.kind == Kind::String;
  bool ascii = str && utf8_is_ascii(obj.s);
  if (str && !ascii) u = utf8_decode(obj.s);
  int64_t len = str ? (ascii ? static_cast<int64_t>(obj.s.size()) : static_cast<int64_t>(u.size()))
                    : static_cast<int64_t>(obj.list->size());
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += len;
      if (x < 0) x = lo;
    } else if (x > hi) {
      x = hi;
    }
    return x;
  };
  int64_t b, e;
  if (st > 0) {
    b = adjust(start, 0, 0, len);
    e = adjust(stop, len, 0, len);
  } else {
    b = adjust(start, len - 1, -1, len - 1);
    e = adjust(stop, -1, -1, len - 1);
  }
  std::vector<int64_t> idx;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) idx.push_back(k);
  if (str) {
    std::string out;
    for (int64_t k : idx) {
      if (ascii) out.push_back(obj.s[static_cast<size_t>(k)]);
      else utf8_append(out, u[static_cast<size_t>(k)]);
    }
    return Value::string(std::move(out));
  }
  List out;
  out.reserve(idx.size());
  for (int64_t k : idx) out.push_back((*obj.list)[static_cast<size_t>(k)]);
  return Value::make_list(std::move(out), obj.kind);
}

// ---------------------------------------------------------------- arithmetic

namespace {
[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  throw_error("unsupported operand type(s) for " + op + ": '" + py_type_name(a) + "' and '" +
              py_type_name(b) + "'");
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0) {
    if ((b < 0) != (m < 0)) m += b;
  } else {
    m = std::copysign(0.0, b);
  }
  return m;
}

double py_floordiv(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div != 0) {
    double fl = std::floor(div);
    if (div - fl > 0.5) fl += 1.0;
    return fl;
  }
  return std::copysign(0.0, a / b);
}

std::string repeat(Interp& in, const std::string& s, int64_t n) {
  if (n <= 0 || s.empty()) return {};
  in.check_size(s.size() * static_cast<size_t>(std::min<int64_t>(n, INT64_C(1) << 40)));
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) out += s;
  return out;
}

// Python's printf-style `str % args`, for the conversions templates use.
std::string percent_format(const std::string& fmt, const Value& args) {
  // A mapping-like argument (dict, Undefined) is used whole by %s and never
  // counts as "not all arguments converted".
  bool mapping = args.kind == Kind::Dict || args.is_undefined();
  List vals = args.kind == Kind::Tuple ? *args.list : List{args};
  size_t ai = 0;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out.push_back(fmt[k]);
      continue;
    }
    if (++k >= fmt.size()) throw_error("incomplete format");
    std::string spec;
    while (k < fmt.size() && std::string("0123456789.-+ #").find(fmt[k]) != std::string::npos) spec += fmt[k++];
    if (k >= fmt.size()) throw_error("incomplete format");
    char c = fmt[k];
    if (c == '%') {
      out.push_back('%');
      continue;
    }
    if (ai >= vals.size() && !mapping) throw_error("not enough arguments for format string");
    const Value& v = mapping ? vals[0] : vals[ai++];
    char buf[512];
    if (c == 's' || c == 'r') {
      std::string s = c == 's' ? py_str(v) : py_repr(v);
      if (spec.empty()) out += s;
      else {
        std::snprintf(buf, sizeof buf, ("%" + spec + "s").c_str(), s.c_str());
        out += buf;
      }
    } else if (c == 'd' || c == 'i' || c == 'x' || c == 'X' || c == 'o') {
      if (!v.is_number()) throw_error("%" + std::string(1, c) + " format: a real number is required, not " + py_type_name(v));
      long long x = v.kind == Kind::Float ? static_cast<long long>(v.f) : v.as_int();
      std::snprintf(buf, sizeof buf, ("%" + spec + "ll" + std::string(1, c == 'i' ? 'd' : c)).c_str(), x);
      out += buf;
    } else if (c == 'f' || c == 'F' || c == 'e' || c == 'E' || c == 'g' || c == 'G') {
      if (!v.is_number()) throw_error("must be real number, not " + py_type_name(v));
      if (spec.size() > 8) throw_error("format spec too long");
      std::snprintf(buf, sizeof buf, ("%" + spec + std::string(1, c)).c_str(), v.as_double());
      out += buf;
    } else {
      throw_error(std::string("unsupported format character '") + c + "'");
    }
  }
  if (ai < vals.size() && !mapping) throw_error("not all arguments converted during string formatting");
  return out;
}
}  // namespace

Value Interp::binop(const std::string& op, const Value& a, const Value& b) {
  // str % Undefined: Python treats the Undefined as a mapping argument.
  if (op == "%" && a.is_string() && b.is_undefined()) return Value::string(percent_format(a.s, b));
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  char c = op[0];
  bool num = a.is_number() && b.is_number();
  bool flt = num && (a.kind == Kind::Float || b.kind == Kind::Float);
  if (op == "+") {
    if (flt) return Value::number(a.as_double() + b.as_double());
    if (num) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) throw_error("integer overflow (beyond 64 bits)");
      return Value::integer(r);
    }
    if (a.is_string() && b.is_string()) {
      check_size(a.s.size() + b.s.size());
      if (a.b || b.b) {  // Markup with str (either side) escapes the str and stays Markup
        Value r = Value::string((a.b ? a.s : html_escape(a.s)) + (b.b ? b.s : html_escape(b.s)));
        r.b = true;
        return r;
      }
      return Value::string(a.s + b.s);
    }
    if ((a.kind == Kind::List || a.kind == Kind::Tuple) && a.kind == b.kind) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(out), a.kind);
    }
    if (a.is_string()) throw_error("can only concatenate str (not \"" + py_type_name(b) + "\") to str");
    bad_operands(op, a, b);
  }
  if (op == "-") {
    if (flt) return Value::number(a.as_double() - b.as_double());
    if (num) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) throw_error("integer overflow (beyond 64 bits)");
      return Value::integer(r);
    }
    bad_operands(op, a, b);
  }
  if (op == "*") {
    if (flt) return Value::number(a.as_double() * b.as_double());
    if (num) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) throw_error("integer overflow (beyond 64 bits)");
      return Value::integer(r);
    }
    const Value* seq = a.is_int_like() ? &b : &a;
    const Value* cnt = a.is_int_like() ? &a : &b;
    if (cnt->is_int_like()) {
      int64_t n = cnt->as_int();
      if (seq->is_string()) return Value::string(repeat(*this, seq->s, n));
      if (seq->kind == Kind::List || seq->kind == Kind::Tuple) {
        List out;
        if (n > 0) {
          check_size(seq->list->size() * static_cast<size_t>(std::min<int64_t>(n, INT64_C(1) << 30)) * 16);
          for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq->list->begin(), seq->list->end());
        }
        return Value::make_list(std::move(out), seq->kind);
      }
    }
    bad_operands(op, a, b);
  }
  if (op == "/") {
    if (!num) bad_operands(op, a, b);
    if (b.as_double() == 0) throw_error("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (c == '%' && a.is_string()) return Value::string(percent_format(a.s, b));
    if (!num) bad_operands(op, a, b);
    bool fl = op == "//";
    if (flt) {
      if (b.as_double() == 0) throw_error(fl ? "float floor division by zero" : "float modulo");
      return Value::number(fl ? py_floordiv(a.as_double(), b.as_double()) : py_fmod(a.as_double(), b.as_double()));
    }
    int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) throw_error(fl ? "integer division or modulo by zero" : "integer modulo by zero");
    if (x == INT64_MIN && y == -1) {
      if (fl) throw_error("integer overflow (beyond 64 bits)");
      return Value::integer(0);
    }
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      q -= 1;
      r += y;
    }
    return Value::integer(fl ? q : r);
  }
  if (op == "**") {
    if (!num) bad_operands(op, a, b);
    if (!flt && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(r, base, &r)) throw_error("integer overflow (beyond 64 bits)");
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) throw_error("integer overflow (beyond 64 bits)");
      }
      return Value::integer(r);
    }
    double x = a.as_double(), y = b.as_double();
    if (x == 0 && y < 0) throw_error("0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) throw_error("negative number cannot be raised to a fractional power");
    double r = std::pow(x, y);
    if (std::isinf(r) && !std::isinf(x) && !std::isinf(y)) throw_error("(34, 'Numerical result out of range')");
    return Value::number(r);
  }
  throw_error("unknown operator " + op);
}

}  // namespace trlx::text::tpl

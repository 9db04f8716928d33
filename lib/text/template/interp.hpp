#pragma once
// The tree-walking interpreter behind ChatTemplate::render.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "text/template/internal.hpp"

namespace trlx::text::tpl {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value v);
};

struct Limits {
  uint64_t max_steps = 200'000'000;       // evaluation steps in one render
  size_t max_output = size_t{1} << 30;    // bytes in any one output buffer or string
  int max_call_depth = 64;                // nested macro calls
};

class Interp {
 public:
  explicit Interp(const Limits& limits) : limits_(limits) {}
  ~Interp();
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;
  // Objects and namespaces that may be part of a reference cycle; released
  // when the render ends.
  void track(std::shared_ptr<Object> o) { objects_.push_back(std::move(o)); }
  void track(std::shared_ptr<Dict> d) { namespaces_.push_back(std::move(d)); }

  // Renders `body` with `root` as the outermost scope. Throws RenderError
  // (line() tells where).
  std::string render(const Nodes& body, std::shared_ptr<Scope> root,
                     std::vector<std::pair<size_t, size_t>>* spans);
  int line() const { return line_; }

  Value eval(const Node& n);
  void exec(const Nodes& body);
  // Renders `body` into a string of its own (macro bodies, set blocks, ...).
  std::string capture(const Nodes& body);

  Value call_value(const Value& callee, Args& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& input, Args& args);
  Value generator_filter(const std::string& name, const Value& input, Args& args);
  bool apply_test(const std::string& name, const Value& v, Args& args);
  Value call_method(const Value& self, const std::string& name, Args& args);
  Value binop(const std::string& op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);
  void check_size(size_t n) const;
  void step();

  std::shared_ptr<Scope> scope_;
  int call_depth_ = 0;

 private:
  Limits limits_;
  std::string root_out_;
  std::string* out_ = nullptr;
  std::vector<std::pair<size_t, size_t>>* spans_ = nullptr;
  int line_ = 0;
  uint64_t steps_ = 0;
  int depth_ = 0;
  enum class Flow { Normal, Break, Continue } flow_ = Flow::Normal;
  const Value* block_input_ = nullptr;
  std::vector<std::shared_ptr<Object>> objects_;
  std::vector<std::shared_ptr<Dict>> namespaces_;

  void exec_one(const Node& n);
  void exec_for(const Node& n);
  void exec_set(const Node& n);
  void assign(const std::vector<std::string>& names, bool unpack, const Value& v);
  void append(std::string_view s);
  Value eval_call(const Node& n);
  Value eval_filter(const Node& n);
  Value eval_test(const Node& n);
  Value eval_compare(const Node& n);
  Value eval_literal(const Node& n);
  Value slice(const Value& obj, const Node& sl);
  Args eval_args(const Node& n);
  Value apply_block_filter(const Node* filter, std::string text);
};

// Checks every filter and test name a template uses; throws SyntaxError.
void check_names(const Nodes& body);
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
// A callable object wrapping a builtin.
Value make_builtin(std::string name, Value (*fn)(Interp&, Args&));
std::shared_ptr<Scope> make_globals();

}  // namespace trlx::text::tpl

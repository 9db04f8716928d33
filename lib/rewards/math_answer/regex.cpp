// A backtracking regex engine with Python `re` semantics on code points, for math_verify's search patterns.
#include "rewards/math_answer/internal.hpp"

namespace trlx::rewards::math::detail {
namespace {

// --------------------------------------------------------------- regex ----
//
// Python `re` semantics on code points, for the checker's patterns:
// literals and escapes, classes with ranges and \d \s \w, `.` (with or
// without DOTALL), ^ and $ (no MULTILINE: $ also matches before a final
// newline), \b, (?:...), (...), (?P<name>...), (?i:...), look-ahead and
// fixed-width look-behind, greedy and lazy *, +, ?, {m,n}. A pattern that
// uses anything else fails to compile (a bug here, not bad input).

// Case-insensitive comparison of a text character with an ASCII letter of
// the pattern, including the four non-ASCII letters Python's Unicode case
// folding pairs with ASCII ones.
bool fold_equal(char32_t text, char32_t pattern) {
  const char32_t p = ascii_lower(pattern);
  if (ascii_lower(text) == p && text < 0x80) return true;
  switch (p) {
    case 'i': return text == 0x130 || text == 0x131;
    case 's': return text == 0x17f;
    case 'k': return text == 0x212a;
    default: return false;
  }
}

struct Node {
  enum Kind { kCat, kAlt, kChar, kAny, kClass, kRepeat, kGroup, kLook, kBol, kEol, kWordB } kind = kCat;
  char32_t ch = 0;
  bool fold = false;    // kChar
  bool dotall = false;  // kAny
  bool negate = false;  // kLook, kWordB (\B)
  bool behind = false;  // kLook
  CharClass cls;
  std::vector<Node> kids;
  int min = 0, max = 0;  // kRepeat; max < 0: unbounded
  bool greedy = true;
  int group = -1;  // kGroup: capture number
};

class PatternParser {
 public:
  PatternParser(const U32& p, bool dotall) : p_(p), dotall_(dotall) {}
  Node parse() {
    Node n = alternation(false);
    if (i_ != p_.size()) bad("unbalanced parenthesis");
    return n;
  }
  int groups() const { return groups_; }
  std::vector<std::pair<std::string, int>> names() const { return names_; }

 private:
  [[noreturn]] void bad(const char* what) const {
    throw std::logic_error(std::string("bad pattern (") + what + ") at " + std::to_string(i_) + ": " + to_utf8(p_));
  }
  bool at(const char* s) const {
    size_t k = 0;
    for (; s[k]; ++k)
      if (i_ + k >= p_.size() || p_[i_ + k] != static_cast<char32_t>(s[k])) return false;
    return true;
  }
  Node alternation(bool fold) {
    Node first = sequence(fold);
    if (i_ >= p_.size() || p_[i_] != '|') return first;
    Node alt;
    alt.kind = Node::kAlt;
    alt.kids.push_back(std::move(first));
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      alt.kids.push_back(sequence(fold));
    }
    return alt;
  }
  Node sequence(bool fold) {
    Node n;
    n.kind = Node::kCat;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') n.kids.push_back(repeat(fold));
    return n;
  }
  Node repeat(bool fold) {
    Node a = atom(fold);
    int mn = 0, mx = 0;
    if (!quantifier(mn, mx)) return a;
    Node r;
    r.kind = Node::kRepeat;
    r.min = mn;
    r.max = mx;
    if (i_ < p_.size() && p_[i_] == '?') {
      r.greedy = false;
      ++i_;
    }
    r.kids.push_back(std::move(a));
    return r;
  }
  bool quantifier(int& mn, int& mx) {
    if (i_ >= p_.size()) return false;
    const char32_t c = p_[i_];
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      mn = c == '+' ? 1 : 0;
      mx = c == '?' ? 1 : -1;
      return true;
    }
    if (c != '{') return false;
    // `{` that does not start a valid {m}, {m,}, {,n} or {m,n} is a literal.
    size_t j = i_ + 1;
    auto number = [&](int& v) {
      const size_t s = j;
      v = 0;
      while (j < p_.size() && ascii_digit(p_[j])) v = v * 10 + static_cast<int>(p_[j++] - '0');
      return j > s;
    };
    int a = 0, b = 0;
    const bool has_a = number(a);
    if (j < p_.size() && p_[j] == '}' && has_a) {
      mn = mx = a;
      i_ = j + 1;
      return true;
    }
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      const bool has_b = number(b);
      if (j < p_.size() && p_[j] == '}') {
        mn = has_a ? a : 0;
        mx = has_b ? b : -1;
        i_ = j + 1;
        return true;
      }
    }
    return false;
  }
  Node atom(bool fold) {
    const char32_t c = p_[i_++];
    Node n;
    switch (c) {
      case '(': return group(fold);
      case '[': n.kind = Node::kClass; n.cls = char_class(); return n;
      case '.': n.kind = Node::kAny; n.dotall = dotall_; return n;
      case '^': n.kind = Node::kBol; return n;
      case '$': n.kind = Node::kEol; return n;
      case '\\': return escape(fold);
      case '*': case '+': case '?': case ')': bad("misplaced operator");
      default: n.kind = Node::kChar; n.ch = c; n.fold = fold && ascii_alpha(c); return n;
    }
  }
  Node group(bool fold) {
    Node n;
    if (at("?:")) {
      i_ += 2;
      n = alternation(fold);
    } else if (at("?i:")) {
      i_ += 3;
      n = alternation(true);
    } else if (at("?P<")) {
      i_ += 3;
      std::string name;
      while (i_ < p_.size() && p_[i_] != '>') name.push_back(static_cast<char>(p_[i_++]));
      ++i_;
      n.kind = Node::kGroup;
      n.group = ++groups_;
      names_.emplace_back(name, n.group);
      n.kids.push_back(alternation(fold));
    } else if (at("?=") || at("?!") || at("?<=") || at("?<!")) {
      n.kind = Node::kLook;
      n.behind = p_[i_ + 1] == '<';
      i_ += n.behind ? 2 : 1;
      n.negate = p_[i_] == '!';
      ++i_;
      n.kids.push_back(alternation(fold));
    } else if (at("?")) {
      bad("unsupported group");
    } else {
      n.kind = Node::kGroup;
      n.group = ++groups_;
      n.kids.push_back(alternation(fold));
    }
    if (i_ >= p_.size() || p_[i_] != ')') bad("missing )");
    ++i_;
    return n;
  }
  char32_t escaped_char(char32_t e) {
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      default:
        if (ascii_alpha(e) || ascii_digit(e)) bad("unsupported escape");
        return e;
    }
  }
  Node escape(bool fold) {
    if (i_ >= p_.size()) bad("trailing backslash");
    const char32_t e = p_[i_++];
    Node n;
    switch (e) {
      case 'd': case 's': case 'w': case 'D': case 'S': case 'W':
        n.kind = Node::kClass;
        n.cls.digit = e == 'd' || e == 'D';
        n.cls.space = e == 's' || e == 'S';
        n.cls.word = e == 'w' || e == 'W';
        n.cls.negate = e == 'D' || e == 'S' || e == 'W';
        return n;
      case 'b': case 'B':
        n.kind = Node::kWordB;
        n.negate = e == 'B';
        return n;
      default:
        n.kind = Node::kChar;
        n.ch = escaped_char(e);
        n.fold = fold && ascii_alpha(n.ch);
        return n;
    }
  }
  CharClass char_class() {
    CharClass cc;
    if (i_ < p_.size() && p_[i_] == '^') {
      cc.negate = true;
      ++i_;
    }
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) bad("unterminated class");
      char32_t c = p_[i_++];
      if (c == ']' && !first) break;
      first = false;
      if (c == '\\') {
        const char32_t e = p_[i_++];
        if (e == 'd') { cc.digit = true; continue; }
        if (e == 's') { cc.space = true; continue; }
        if (e == 'w') { cc.word = true; continue; }
        c = escaped_char(e);
      }
      char32_t hi = c;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        hi = p_[i_++];
        if (hi == '\\') hi = escaped_char(p_[i_++]);
      }
      cc.ranges.emplace_back(c, hi);
    }
    return cc;
  }

  const U32& p_;
  bool dotall_;
  size_t i_ = 0;
  int groups_ = 0;
  std::vector<std::pair<std::string, int>> names_;
};

int fixed_width(const Node& n) {
  switch (n.kind) {
    case Node::kChar: case Node::kAny: case Node::kClass: return 1;
    case Node::kBol: case Node::kEol: case Node::kWordB: case Node::kLook: return 0;
    case Node::kGroup: return fixed_width(n.kids[0]);
    case Node::kCat: {
      int w = 0;
      for (const Node& k : n.kids) w += fixed_width(k);
      return w;
    }
    case Node::kAlt: {
      const int w = fixed_width(n.kids[0]);
      for (const Node& k : n.kids)
        if (fixed_width(k) != w) throw std::logic_error("look-behind of varying width");
      return w;
    }
    case Node::kRepeat:
      if (n.min != n.max) throw std::logic_error("look-behind of varying width");
      return n.min * fixed_width(n.kids[0]);
  }
  return 0;
}

class Compiler {
 public:
  explicit Compiler(Program& p) : p_(p) {}
  void finish() {
    emit({Op::Match});
    // Backtracking revisits a (instruction, position) state only through a
    // jump or a split; remembering failed states there keeps every search
    // linear in the text.
    p_.memo_slot.assign(p_.code.size(), -1);
    auto mark = [&](int pc) {
      if (p_.memo_slot[pc] < 0) p_.memo_slot[pc] = p_.memo_points++;
    };
    for (const Inst& in : p_.code) {
      if (in.op == Op::Split) {
        mark(in.x);
        mark(in.y);
      } else if (in.op == Op::Jmp) {
        mark(in.x);
      }
    }
    mark(0);
  }
  void compile(const Node& n) {
    switch (n.kind) {
      case Node::kCat:
        for (const Node& k : n.kids) compile(k);
        break;
      case Node::kChar: emit({Op::Char, n.fold, n.ch}); break;
      case Node::kAny: emit({n.dotall ? Op::Any : Op::AnyNoNL}); break;
      case Node::kClass:
        p_.classes.push_back(n.cls);
        emit({Op::Class, false, 0, static_cast<int>(p_.classes.size() - 1)});
        break;
      case Node::kBol: emit({Op::Bol}); break;
      case Node::kEol: emit({Op::Eol}); break;
      case Node::kWordB: emit({Op::WordB, n.negate}); break;
      case Node::kAlt: {
        std::vector<int> exits;
        for (size_t k = 0; k + 1 < n.kids.size(); ++k) {
          const int split = emit({Op::Split});
          p_.code[split].x = split + 1;
          compile(n.kids[k]);
          exits.push_back(emit({Op::Jmp}));
          p_.code[split].y = here();
        }
        compile(n.kids.back());
        for (int j : exits) p_.code[j].x = here();
        break;
      }
      case Node::kRepeat: {
        const Node& body = n.kids[0];
        for (int i = 0; i < n.min; ++i) compile(body);
        if (n.max < 0) {
          const int split = emit({Op::Split});
          compile(body);
          emit({Op::Jmp, false, 0, split});
          prefer(split, split + 1, here(), n.greedy);
        } else {
          std::vector<int> splits;
          for (int i = n.min; i < n.max; ++i) {
            splits.push_back(emit({Op::Split}));
            compile(body);
          }
          for (int s : splits) prefer(s, s + 1, here(), n.greedy);
        }
        break;
      }
      case Node::kGroup:
        emit({Op::Save, false, 0, 2 * n.group});
        compile(n.kids[0]);
        emit({Op::Save, false, 0, 2 * n.group + 1});
        break;
      case Node::kLook: {
        auto sub = std::make_shared<Program>();
        Compiler c(*sub);
        c.compile(n.kids[0]);
        c.finish();
        p_.looks.push_back(sub);
        p_.look_width.push_back(n.behind ? fixed_width(n.kids[0]) : 0);
        emit({Op::Look, n.negate, 0, static_cast<int>(p_.looks.size() - 1), n.behind ? 1 : 0});
        break;
      }
    }
  }

 private:
  int here() const { return static_cast<int>(p_.code.size()); }
  int emit(Inst in) {
    p_.code.push_back(in);
    return here() - 1;
  }
  void prefer(int split, int body, int out, bool greedy) {
    p_.code[split].x = greedy ? body : out;
    p_.code[split].y = greedy ? out : body;
  }
  Program& p_;
};

// Runs a program at one position by backtracking, in the priority order of
// Python's engine, so the first match found is the one Python reports.
class Runner {
 public:
  Runner(const Program& p, const U32& text, bool memo) : p_(p), t_(text), memo_(memo) {
    if (memo_) bits_.assign((static_cast<size_t>(p_.memo_points) * (t_.size() + 1) + 63) / 64, 0);
  }
  // caps[0] must hold `start`; on success caps[1] is the end.
  bool run(size_t start, std::vector<int>& caps) {
    struct Job {
      int pc;
      size_t sp;
      int slot;  // >= 0: restore caps[slot] = old
      int old;
    };
    std::vector<Job> stack{{0, start, -1, 0}};
    const size_t n = t_.size();
    while (!stack.empty()) {
      const Job job = stack.back();
      stack.pop_back();
      if (job.slot >= 0) {
        caps[job.slot] = job.old;
        continue;
      }
      int pc = job.pc;
      size_t sp = job.sp;
      while (true) {
        if (memo_ && p_.memo_slot[pc] >= 0) {
          const size_t k = static_cast<size_t>(p_.memo_slot[pc]) * (n + 1) + sp;
          const uint64_t bit = uint64_t{1} << (k & 63);
          if (bits_[k >> 6] & bit) break;
          bits_[k >> 6] |= bit;
          touched_.push_back(k);
        }
        const Inst& in = p_.code[pc];
        bool ok = true;
        switch (in.op) {
          case Op::Char:
            ok = sp < n && (t_[sp] == in.ch || (in.flag && fold_equal(t_[sp], in.ch)));
            if (ok) ++sp;
            break;
          case Op::Any: ok = sp < n; if (ok) ++sp; break;
          case Op::AnyNoNL: ok = sp < n && t_[sp] != '\n'; if (ok) ++sp; break;
          case Op::Class: ok = sp < n && p_.classes[in.x].matches(t_[sp]); if (ok) ++sp; break;
          case Op::Split:
            stack.push_back({in.y, sp, -1, 0});
            pc = in.x;
            continue;
          case Op::Jmp: pc = in.x; continue;
          case Op::Save:
            stack.push_back({0, 0, in.x, caps[in.x]});
            caps[in.x] = static_cast<int>(sp);
            break;
          case Op::Bol: ok = sp == 0; break;
          case Op::Eol: ok = sp == n || (sp + 1 == n && t_[sp] == '\n'); break;
          case Op::WordB: {
            const bool before = sp > 0 && py_word(t_[sp - 1]);
            const bool after = sp < n && py_word(t_[sp]);
            ok = (before != after) != in.flag;
            break;
          }
          case Op::Look: {
            const Program& sub = *p_.looks[in.x];
            const auto w = static_cast<size_t>(p_.look_width[in.x]);
            bool found = false;
            if (!in.y || sp >= w) {
              Runner r(sub, t_, false);
              std::vector<int> sub_caps(2, -1);
              const size_t from = in.y ? sp - w : sp;
              sub_caps[0] = static_cast<int>(from);
              found = r.run(from, sub_caps);
            }
            ok = found != in.flag;
            break;
          }
          case Op::Match: caps[1] = static_cast<int>(sp); return true;
        }
        if (!ok) break;
        ++pc;
      }
    }
    return false;
  }
  // A match ends the search that states were remembered for.
  void forget() {
    for (size_t k : touched_) bits_[k >> 6] &= ~(uint64_t{1} << (k & 63));
    touched_.clear();
  }

 private:
  const Program& p_;
  const U32& t_;
  bool memo_;
  std::vector<uint64_t> bits_;
  std::vector<size_t> touched_;
};

}  // namespace

Regex::Regex(std::string_view pattern, bool dotall) {
  const U32 p = from_utf8(pattern);
  PatternParser parser(p, dotall);
  const Node root = parser.parse();
  groups_ = parser.groups();
  names_ = parser.names();
  Compiler c(prog_);
  c.compile(root);
  c.finish();
}

std::vector<Match> Regex::find_all(const U32& text) const {
  std::vector<Match> out;
  Runner runner(prog_, text, true);
  size_t pos = 0;
  while (pos <= text.size()) {
    std::optional<std::vector<int>> hit;
    for (size_t s = pos; s <= text.size() && !hit; ++s) {
      std::vector<int> caps(2 * (groups_ + 1), -1);
      caps[0] = static_cast<int>(s);
      if (runner.run(s, caps)) hit = std::move(caps);
    }
    if (!hit) break;
    runner.forget();
    const size_t b = static_cast<size_t>((*hit)[0]), e = static_cast<size_t>((*hit)[1]);
    out.emplace_back(this, &text, std::move(*hit));
    pos = e > b ? e : e + 1;
  }
  return out;
}

std::optional<U32> Match::group(std::string_view name) const {
  const int g = re_->group_index(name);
  if (g < 0) return std::nullopt;
  return group(g);
}

}  // namespace trlx::rewards::math::detail

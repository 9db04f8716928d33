// Lexer and parser for the jinja2 dialect chat templates are written in,
// configured as transformers configures it: trim_blocks, lstrip_blocks, the
// loopcontrols extension and the {% generation %} tag.
#include <cstdio>
#include <cstdlib>

#include "text/template/internal.hpp"

namespace trlx::text::tpl {
namespace {

constexpr int kMaxNesting = 100;

enum class TT { Data, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  TT type;
  std::string value;
  int line = 1;
  int col = 1;
  int64_t ival = 0;
  double fval = 0;
};

// Length in bytes of the whitespace character (Python's \s) at pos, or 0.
size_t ws_at(std::string_view s, size_t pos) {
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return py_isspace(c) ? 1 : 0;
  size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (pos + n > s.size()) return 0;
  std::u32string u = utf8_decode(s.substr(pos, n));
  return (u.size() == 1 && py_isspace(u[0])) ? n : 0;
}

std::string rstrip_ws(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    if (ws_at(s, start) != end - start) break;
    end = start;
  }
  return std::string(s.substr(0, end));
}

bool all_ws(std::string_view s) {
  if (s.empty()) return false;
  size_t p = 0;
  while (p < s.size()) {
    size_t n = ws_at(s, p);
    if (!n) return false;
    p += n;
  }
  return true;
}

// Length of the identifier character at pos (Python identifiers: letters,
// digits after the first, underscore), or 0.
size_t name_char_at(std::string_view s, size_t pos, bool first) {
  size_t len;
  char32_t c = utf8_decode_at(s, pos, len);
  if (c == '_' || (c < 0x80 ? std::isalpha(static_cast<int>(c)) != 0 : py_isalpha(c))) return len;
  if (!first && py_isword(c)) return len;
  return 0;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) {
    // jinja2 normalizes every newline to \n and drops one trailing newline.
    src_.reserve(src.size());
    for (size_t k = 0; k < src.size(); ++k) {
      if (src[k] == '\r') {
        src_.push_back('\n');
        if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
      } else {
        src_.push_back(src[k]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    size_t n = src_.size();
    while (pos_ < n) {
      size_t p = pos_;
      size_t found = std::string::npos;
      while ((p = src_.find('{', p)) != std::string::npos) {
        if (p + 1 < n && (src_[p + 1] == '%' || src_[p + 1] == '{' || src_[p + 1] == '#')) {
          found = p;
          break;
        }
        ++p;
      }
      if (found == std::string::npos) {
        emit_data(src_.substr(pos_));
        advance_to(n);
        break;
      }
      std::string text = src_.substr(pos_, found - pos_);
      char kind = src_[found + 1];
      char sign = (found + 2 < n && (src_[found + 2] == '-' || src_[found + 2] == '+')) ? src_[found + 2] : 0;
      size_t raw_end = 0;
      bool raw = kind == '%' && match_raw_begin(found + 2 + (sign ? 1 : 0), raw_end);
      text = strip_before(text, sign, kind != '{', line_starting);
      emit_data(text);
      advance_to(found);
      if (raw) {
        advance_to(raw_end);
        line_starting = lex_raw();
        continue;
      }
      int tline = line_, tcol = col();
      advance_to(found + 2 + (sign ? 1 : 0));
      if (kind == '#') {
        line_starting = lex_comment(tline, tcol);
        continue;
      }
      push(kind == '%' ? TT::BlockBegin : TT::VarBegin, "", tline, tcol);
      line_starting = lex_tag(kind == '%');
    }
    push(TT::Eof, "", line_, col());
    return std::move(toks_);
  }

 private:
  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  std::vector<Token> toks_;
  std::vector<char> balance_;

  int col() const { return static_cast<int>(pos_ - line_start_) + 1; }

  void advance_to(size_t p) {
    for (; pos_ < p; ++pos_)
      if (src_[pos_] == '\n') {
        ++line_;
        line_start_ = pos_ + 1;
      }
  }

  [[noreturn]] void fail(const std::string& msg) { throw SyntaxError(msg, line_, col()); }

  void push(TT t, std::string v, int line, int c) {
    Token tok;
    tok.type = t;
    tok.value = std::move(v);
    tok.line = line;
    tok.col = c;
    toks_.push_back(std::move(tok));
  }

  void emit_data(const std::string& text) {
    if (!text.empty()) push(TT::Data, text, line_, col());
  }

  // Whitespace control for the text before a tag: `-` strips all trailing
  // whitespace; lstrip_blocks removes the indentation before a block or
  // comment tag that starts its line.
  static std::string strip_before(const std::string& text, char sign, bool lstrip_kind, bool line_starting) {
    if (sign == '-') return rstrip_ws(text);
    if (sign != '+' && lstrip_kind) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && all_ws(std::string_view(text).substr(l_pos)))
        return text.substr(0, l_pos);
    }
    return text;
  }

  size_t skip_ws(size_t p) const {
    while (p < src_.size()) {
      size_t w = ws_at(src_, p);
      if (!w) break;
      p += w;
    }
    return p;
  }

  // `{%[-+]? raw [-]?%}` starting after the sign; sets end past the tag.
  bool match_raw_begin(size_t p, size_t& end) const {
    p = skip_ws(p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_ws(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      end = skip_ws(p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      end = p + 2;
      return true;
    }
    return false;
  }

  bool lex_raw() {
    if (pos_ >= src_.size()) return false;  // jinja2 accepts a raw block cut off at the very end
    size_t p = pos_;
    while ((p = src_.find("{%", p)) != std::string::npos) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = skip_ws(q);
      if (src_.compare(q, 6, "endraw") == 0) {
        q = skip_ws(q + 6);
        size_t end = 0;
        if (src_.compare(q, 3, "+%}") == 0) end = q + 3;
        else if (src_.compare(q, 3, "-%}") == 0) end = skip_ws(q + 3);
        else if (src_.compare(q, 2, "%}") == 0) {
          end = q + 2;
          if (end < src_.size() && src_[end] == '\n') ++end;
        }
        if (end) {
          std::string text = strip_before(src_.substr(pos_, p - pos_), sign, true, false);
          emit_data(text);
          advance_to(end);
          return src_[end - 1] == '\n';
        }
      }
      p += 2;
    }
    fail("Missing end of raw directive");
  }

  bool lex_comment(int tline, int tcol) {
    if (pos_ >= src_.size()) return false;  // jinja2 accepts "{#" as the very last thing
    size_t content = pos_;
    size_t q = src_.find("#}", pos_);
    if (q == std::string::npos) throw SyntaxError("Missing end of comment tag", tline, tcol);
    size_t end;
    if (q > content && src_[q - 1] == '-') end = skip_ws(q + 2);
    else if (q > content && src_[q - 1] == '+') end = q + 2;
    else {
      end = q + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;
    }
    advance_to(end);
    return src_[end - 1] == '\n';
  }

  // Tokens of one {% %} or {{ }} tag, through its end delimiter.
  bool lex_tag(bool block) {
    size_t n = src_.size();
    while (true) {
      if (pos_ >= n) return false;  // the parser reports the missing end
      int tline = line_, tc = col();
      if (balance_.empty()) {
        size_t end = 0;
        if (block) {
          if (src_.compare(pos_, 3, "-%}") == 0) end = skip_ws(pos_ + 3);
          else if (src_.compare(pos_, 3, "+%}") == 0) end = pos_ + 3;
          else if (src_.compare(pos_, 2, "%}") == 0) {
            end = pos_ + 2;
            if (end < n && src_[end] == '\n') ++end;
          }
        } else {
          if (src_.compare(pos_, 3, "-}}") == 0) end = skip_ws(pos_ + 3);
          else if (src_.compare(pos_, 2, "}}") == 0) end = pos_ + 2;
        }
        if (end) {
          push(block ? TT::BlockEnd : TT::VarEnd, "", tline, tc);
          advance_to(end);
          return src_[end - 1] == '\n';
        }
      }
      if (size_t w = ws_at(src_, pos_)) {
        advance_to(pos_ + w);
        continue;
      }
      unsigned char c = static_cast<unsigned char>(src_[pos_]);
      if (std::isdigit(c)) {
        lex_number(tline, tc);
        continue;
      }
      if (size_t first = name_char_at(src_, pos_, true)) {
        size_t e = pos_ + first;
        while (e < n) {
          size_t l = name_char_at(src_, e, false);
          if (!l) break;
          e += l;
        }
        push(TT::Name, src_.substr(pos_, e - pos_), tline, tc);
        advance_to(e);
        continue;
      }
      if (c == '\'' || c == '"') {
        lex_string(tline, tc);
        continue;
      }
      lex_operator(tline, tc);
    }
  }

  void lex_number(int tline, int tc) {
    size_t n = src_.size();
    size_t p = pos_;
    auto digits = [&](size_t q, auto pred) {
      // (\d+_)*\d+ style runs: digits separated by single underscores.
      size_t start = q;
      while (q < n && pred(src_[q])) {
        ++q;
        if (q + 1 < n && src_[q] == '_' && pred(src_[q + 1])) ++q;
      }
      return q == start ? std::string::npos : q;
    };
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    size_t int_end = digits(p, dec);
    // float: int part, then a fraction and/or an exponent
    bool prev_dot = p > 0 && src_[p - 1] == '.';
    size_t fe = std::string::npos;
    if (!prev_dot) {
      size_t q = int_end;
      size_t frac_end = std::string::npos;
      if (q < n && src_[q] == '.' && q + 1 < n && dec(src_[q + 1])) frac_end = digits(q + 1, dec);
      size_t after = frac_end != std::string::npos ? frac_end : q;
      size_t exp_end = std::string::npos;
      if (after < n && (src_[after] == 'e' || src_[after] == 'E')) {
        size_t r = after + 1;
        if (r < n && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < n && dec(src_[r])) exp_end = digits(r, dec);
      }
      if (exp_end != std::string::npos) fe = exp_end;
      else if (frac_end != std::string::npos) fe = frac_end;
    }
    if (fe != std::string::npos) {
      std::string text;
      for (size_t k = p; k < fe; ++k)
        if (src_[k] != '_') text.push_back(src_[k]);
      Token tok;
      tok.type = TT::Float;
      tok.value = text;
      tok.fval = std::strtod(text.c_str(), nullptr);
      tok.line = tline;
      tok.col = tc;
      toks_.push_back(tok);
      advance_to(fe);
      return;
    }
    // integer: 0b / 0o / 0x prefixes, [1-9](_?\d)*, or 0(_?0)*
    int base = 10;
    size_t start = p, end;
    char c1 = p + 1 < n ? static_cast<char>(std::tolower(static_cast<unsigned char>(src_[p + 1]))) : 0;
    auto hex = [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)) != 0; };
    auto oct = [](char ch) { return ch >= '0' && ch <= '7'; };
    auto bin = [](char ch) { return ch == '0' || ch == '1'; };
    auto prefixed = [&](auto pred) {
      size_t q = p + 2;
      size_t last = std::string::npos;
      while (q < n) {
        if (src_[q] == '_' && q + 1 < n && pred(src_[q + 1])) q += 2;
        else if (pred(src_[q])) ++q;
        else break;
        last = q;
      }
      return last;
    };
    if (src_[p] == '0' && (c1 == 'x' || c1 == 'o' || c1 == 'b')) {
      base = c1 == 'x' ? 16 : c1 == 'o' ? 8 : 2;
      end = base == 16 ? prefixed(hex) : base == 8 ? prefixed(oct) : prefixed(bin);
      if (end == std::string::npos) {
        end = p + 1;  // just "0"; the letter lexes as a name
        base = 10;
      } else {
        start = p + 2;
      }
    } else if (src_[p] == '0') {
      end = p + 1;
      while (end < n && (src_[end] == '0' || (src_[end] == '_' && end + 1 < n && src_[end + 1] == '0')))
        end += src_[end] == '_' ? 2 : 1;
    } else {
      end = int_end;
    }
    std::string text;
    for (size_t k = start; k < end; ++k)
      if (src_[k] != '_') text.push_back(src_[k]);
    errno = 0;
    char* stop = nullptr;
    unsigned long long v = std::strtoull(text.c_str(), &stop, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      throw SyntaxError("integer literal too large (beyond 64 bits)", tline, tc);
    Token tok;
    tok.type = TT::Int;
    tok.value = src_.substr(p, end - p);
    tok.ival = static_cast<int64_t>(v);
    tok.line = tline;
    tok.col = tc;
    toks_.push_back(tok);
    advance_to(end);
  }

  static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  void lex_string(int tline, int tc) {
    char q = src_[pos_];
    size_t p = pos_ + 1;
    size_t n = src_.size();
    while (p < n && src_[p] != q) {
      if (src_[p] == '\\') ++p;
      ++p;
    }
    if (p >= n) throw SyntaxError(std::string("unexpected char '") + q + "' (unterminated string)", tline, tc);
    std::string_view body(src_.data() + pos_ + 1, p - pos_ - 1);
    // Python's unicode-escape decoding, which jinja2 applies to literals.
    std::string out;
    for (size_t k = 0; k < body.size(); ++k) {
      char c = body[k];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      char e = body[++k];
      auto read_hex = [&](int count) -> char32_t {
        char32_t v = 0;
        for (int j = 0; j < count; ++j) {
          if (k + 1 >= body.size() || hexval(body[k + 1]) < 0)
            throw SyntaxError("truncated \\" + std::string(1, e) + " escape in string literal", tline, tc);
          v = v * 16 + static_cast<char32_t>(hexval(body[++k]));
        }
        return v;
      };
      auto put = [&](char32_t cp) {
        if (cp > 0x10ffff) throw SyntaxError("illegal Unicode character in string literal", tline, tc);
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;
        utf8_append(out, cp);
      };
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': put(read_hex(2)); break;
        case 'u': put(read_hex(4)); break;
        case 'U': put(read_hex(8)); break;
        case 'N': throw SyntaxError("\\N{...} escapes are not supported", tline, tc);
        default:
          if (static_cast<unsigned char>(e) >= 0x80) {
            // jinja2 escapes non-ASCII as \xNN / \uNNNN / \UNNNNNNNN before
            // decoding, so a backslash in front of one keeps that text.
            size_t len;
            char32_t cp = utf8_decode_at(body, k, len);
            k += len - 1;
            char buf[16];
            if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
            else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
            else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
            out += buf;
          } else if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int j = 0; j < 2 && k + 1 < body.size() && body[k + 1] >= '0' && body[k + 1] <= '7'; ++j)
              v = v * 8 + static_cast<char32_t>(body[++k] - '0');
            put(v);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    push(TT::String, out, tline, tc);
    advance_to(p + 1);
  }

  void lex_operator(int tline, int tc) {
    static const char* kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kOps2)
      if (src_.compare(pos_, 2, op) == 0) {
        push(TT::Op, op, tline, tc);
        advance_to(pos_ + 2);
        return;
      }
    char c = src_[pos_];
    static const std::string kOps1 = "+-/*%~[](){}><=.:|,;";
    if (kOps1.find(c) == std::string::npos) {
      std::string shown(1, c);
      if (static_cast<unsigned char>(c) < 0x20) shown = "\\x" + std::to_string(static_cast<int>(c));
      fail("unexpected char '" + shown + "'");
    }
    if (c == '(' || c == '[' || c == '{') balance_.push_back(c);
    else if (c == ')' || c == ']' || c == '}') {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (balance_.empty()) fail(std::string("unexpected '") + c + "'");
      if (balance_.back() != want) {
        char exp = balance_.back() == '(' ? ')' : balance_.back() == '[' ? ']' : '}';
        fail(std::string("unexpected '") + c + "', expected '" + exp + "'");
      }
      balance_.pop_back();
    }
    push(TT::Op, std::string(1, c), tline, tc);
    advance_to(pos_ + 1);
  }
};

// ------------------------------------------------------------------ parser

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Nodes parse_all() {
    Nodes body = subparse({});
    if (cur().type != TT::Eof) fail_here("unexpected " + describe(cur()));
    return body;
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> open_blocks_;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& pp) : p(pp) {
      if (++p.depth_ > kMaxNesting) p.fail_here("template nested too deeply (more than 100 levels)");
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[i_ + 1 < t_.size() ? i_ + 1 : i_]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == TT::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == TT::Name && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  static std::string describe_type(TT t) {
    switch (t) {
      case TT::Data: return "template data";
      case TT::BlockBegin: return "begin of statement block";
      case TT::BlockEnd: return "end of statement block";
      case TT::VarBegin: return "begin of print statement";
      case TT::VarEnd: return "end of print statement";
      case TT::Name: return "name";
      case TT::String: return "string";
      case TT::Int: return "integer";
      case TT::Float: return "float";
      case TT::Op: return "operator";
      case TT::Eof: return "end of template";
    }
    return "token";
  }
  static std::string describe(const Token& t) {
    if (t.type == TT::Name || t.type == TT::Op) return "'" + t.value + "'";
    return "'" + describe_type(t.type) + "'";
  }

  [[noreturn]] void fail_here(const std::string& msg) const { throw SyntaxError(msg, cur().line, cur().col); }
  [[noreturn]] void fail_at(const std::string& msg, int line) const { throw SyntaxError(msg, line, 0); }

  void expect_type(TT t) {
    if (cur().type != t) {
      if (cur().type == TT::Eof) fail_eof();
      fail_here("expected token '" + describe_type(t) + "', got " + describe(cur()));
    }
    next();
  }
  void expect_op(const char* op) {
    if (!is_op(op)) {
      if (cur().type == TT::Eof) fail_eof();
      fail_here(std::string("expected token '") + op + "', got " + describe(cur()));
    }
    next();
  }
  std::string expect_name() {
    if (cur().type != TT::Name) {
      if (cur().type == TT::Eof) fail_eof();
      fail_here("expected token 'name', got " + describe(cur()));
    }
    return next().value;
  }
  void expect_name(const char* n) {
    if (!is_name(n)) {
      if (cur().type == TT::Eof) fail_eof();
      fail_here(std::string("expected token '") + n + "', got " + describe(cur()));
    }
    next();
  }

  [[noreturn]] void fail_eof() const {
    std::string msg = "unexpected end of template";
    if (!open_blocks_.empty())
      msg += "; the innermost block that needs to be closed is '" + open_blocks_.back() + "'";
    fail_here(msg);
  }

  NodeP mk(NK k, int line) { return std::make_unique<Node>(k, line); }

  // ---- statements

  // Template data and tags until a block whose first name is in `ends`.
  Nodes subparse(const std::vector<std::string>& ends) {
    DepthGuard g(*this);
    Nodes body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == TT::Eof) return body;
      if (tok.type == TT::Data) {
        auto n = mk(NK::Text, tok.line);
        n->name = tok.value;
        body.push_back(std::move(n));
        next();
      } else if (tok.type == TT::VarBegin) {
        next();
        auto n = mk(NK::Print, cur().line);
        n->a = parse_tuple(true, {}, false);
        expect_type(TT::VarEnd);
        body.push_back(std::move(n));
      } else if (tok.type == TT::BlockBegin) {
        next();
        if (cur().type == TT::Name)
          for (const auto& e : ends)
            if (cur().value == e) return body;
        body.push_back(parse_statement());
        expect_type(TT::BlockEnd);
      } else {
        fail_here("unexpected " + describe(tok));
      }
    }
  }

  Nodes parse_statements(const std::vector<std::string>& ends, bool drop_needle) {
    skip_op(":");
    expect_type(TT::BlockEnd);
    Nodes body = subparse(ends);
    if (cur().type == TT::Eof) fail_eof();
    if (drop_needle) next();
    return body;
  }

  NodeP parse_statement() {
    const Token& tok = cur();
    if (tok.type != TT::Name) {
      if (tok.type == TT::Eof) fail_eof();
      fail_here("tag name expected");
    }
    const std::string& w = tok.value;
    int line = tok.line;
    if (w == "if") return parse_if();
    if (w == "for") return parse_for();
    if (w == "set") return parse_set();
    if (w == "macro") return parse_macro();
    if (w == "call") return parse_call_block();
    if (w == "filter") return parse_filter_block();
    if (w == "with") return parse_with();
    if (w == "generation") {
      next();
      auto n = mk(NK::Generation, line);
      open_blocks_.push_back("generation");
      n->body = parse_statements({"endgeneration"}, true);
      open_blocks_.pop_back();
      return n;
    }
    if (w == "print") {
      next();
      auto n = mk(NK::Print, line);
      // {% print a, b %} prints each expression; {% print %} prints nothing
      if (cur().type == TT::BlockEnd) {
        n->a = mk(NK::Const, line);
        n->a->value = Value::string("");
        return n;
      }
      n->a = parse_expression(true);
      while (skip_op(",")) {
        auto cat = mk(NK::Concat, line);
        cat->items.push_back(std::move(n->a));
        cat->items.push_back(parse_expression(true));
        n->a = std::move(cat);
      }
      return n;
    }
    if (w == "break" || w == "continue") {
      next();
      if (loop_depth_ == 0) fail_at("'" + w + "' can only be used inside a for loop", line);
      return mk(w == "break" ? NK::Break : NK::Continue, line);
    }
    if (w == "include" || w == "extends" || w == "import" || w == "from" || w == "block" ||
        w == "autoescape" || w == "do")
      fail_here("the '" + w + "' tag is not supported in chat templates");
    std::string msg = "Encountered unknown tag '" + w + "'.";
    if (!open_blocks_.empty())
      msg += " The innermost block that needs to be closed is '" + open_blocks_.back() + "'.";
    fail_here(msg);
  }

  NodeP parse_if() {
    int line = next().line;
    auto root = mk(NK::If, line);
    Node* node = root.get();
    open_blocks_.push_back("if");
    while (true) {
      node->a = parse_tuple(false, {}, false);
      node->body = parse_statements({"elif", "else", "endif"}, false);
      const Token& t = next();
      if (t.value == "elif") {
        auto elif = mk(NK::If, t.line);
        Node* raw = elif.get();
        node->else_body.push_back(std::move(elif));
        node = raw;
        continue;
      }
      if (t.value == "else") node->else_body = parse_statements({"endif"}, true);
      break;
    }
    open_blocks_.pop_back();
    return root;
  }

  // Assignment target: a name, a tuple of names, or (for set) ns.attr.
  void parse_target(Node& n, bool with_namespace, const std::vector<std::string>& extra_end) {
    if (with_namespace && cur().type == TT::Name && look().type == TT::Op && look().value == ".") {
      n.kind = NK::SetAttr;
      n.name = next().value;
      next();
      n.strs.push_back(expect_name());
      return;
    }
    auto t = parse_tuple_simplified(extra_end);
    if (t->kind == NK::Name) {
      n.strs.push_back(t->name);
      return;
    }
    if (t->kind == NK::TupleLit) {
      for (auto& item : t->items) {
        if (item->kind != NK::Name) fail_at("can't assign to a nested or non-name target", t->line);
        n.strs.push_back(item->name);
      }
      n.flag = true;
      return;
    }
    fail_at("can't assign to this expression", t->line);
  }

  NodeP parse_tuple_simplified(const std::vector<std::string>& extra_end) {
    int line = cur().line;
    Nodes args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      const Token& t = cur();
      if (t.type == TT::Name && t.value != "true" && t.value != "false" && t.value != "True" &&
          t.value != "False" && t.value != "none" && t.value != "None") {
        auto nm = mk(NK::Name, t.line);
        nm->name = t.value;
        next();
        args.push_back(std::move(nm));
      } else if (is_op("(")) {
        next();
        args.push_back(parse_tuple_simplified({}));
        expect_op(")");
      } else {
        args.push_back(parse_primary());
      }
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (args.empty()) fail_here("Expected an expression, got " + describe(cur()));
      return std::move(args[0]);
    }
    auto tup = mk(NK::TupleLit, line);
    tup->items = std::move(args);
    return tup;
  }

  NodeP parse_for() {
    int line = next().line;
    auto n = mk(NK::For, line);
    parse_target(*n, false, {"in"});
    expect_name("in");
    n->a = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) n->b = parse_expression(true);
    if (is_name("recursive")) fail_here("recursive for loops are not supported");
    open_blocks_.push_back("for");
    ++loop_depth_;
    n->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().value != "endfor") n->else_body = parse_statements({"endfor"}, true);
    open_blocks_.pop_back();
    return n;
  }

  NodeP parse_set() {
    int line = next().line;
    auto n = mk(NK::Set, line);
    parse_target(*n, true, {});
    if (skip_op("=")) {
      n->a = parse_tuple(true, {}, false);
      return n;
    }
    if (n->kind == NK::SetAttr) fail_here("expected '=' after a namespace attribute target");
    n->kind = NK::SetBlock;
    n->a = parse_filter(nullptr, false);
    open_blocks_.push_back("set");
    n->body = parse_statements({"endset"}, true);
    open_blocks_.pop_back();
    return n;
  }

  void parse_signature(Node& n) {
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      if (!n.strs.empty()) expect_op(",");
      if (is_op(")")) break;
      n.strs.push_back(expect_name());
      if (skip_op("=")) {
        n.kwitems.push_back(parse_expression(true));
        defaults = true;
      } else {
        if (defaults) fail_here("non-default argument follows default argument");
        n.kwitems.push_back(nullptr);
      }
    }
    expect_op(")");
  }

  // Bit 0: the body reads varargs, bit 1: kwargs, bit 2: caller.
  static void scan_special_names(const Node& n, int64_t& bits) {
    if (n.kind == NK::Name) {
      if (n.name == "varargs") bits |= 1;
      else if (n.name == "kwargs") bits |= 2;
      else if (n.name == "caller") bits |= 4;
    }
    for (const NodeP* p : {&n.a, &n.b, &n.c, &n.dyn_args, &n.dyn_kwargs})
      if (*p) scan_special_names(**p, bits);
    for (const Nodes* list : {&n.items, &n.kwitems, &n.body, &n.else_body})
      for (const auto& c : *list)
        if (c) scan_special_names(*c, bits);
  }
  static Value special_names(const Nodes& body) {
    int64_t bits = 0;
    for (const auto& n : body) scan_special_names(*n, bits);
    return Value::integer(bits);
  }

  NodeP parse_macro() {
    int line = next().line;
    auto n = mk(NK::Macro, line);
    n->name = expect_name();
    parse_signature(*n);
    int saved = loop_depth_;
    loop_depth_ = 0;
    open_blocks_.push_back("macro");
    n->body = parse_statements({"endmacro"}, true);
    n->value = special_names(n->body);
    open_blocks_.pop_back();
    loop_depth_ = saved;
    return n;
  }

  NodeP parse_call_block() {
    int line = next().line;
    auto n = mk(NK::CallBlock, line);
    if (is_op("(")) parse_signature(*n);
    n->a = parse_expression(true);
    if (n->a->kind != NK::Call) fail_at("expected call", line);
    int saved = loop_depth_;
    loop_depth_ = 0;
    open_blocks_.push_back("call");
    n->body = parse_statements({"endcall"}, true);
    n->value = special_names(n->body);
    open_blocks_.pop_back();
    loop_depth_ = saved;
    return n;
  }

  NodeP parse_filter_block() {
    int line = next().line;
    auto n = mk(NK::FilterBlock, line);
    n->a = parse_filter(nullptr, true);
    open_blocks_.push_back("filter");
    n->body = parse_statements({"endfilter"}, true);
    open_blocks_.pop_back();
    return n;
  }

  NodeP parse_with() {
    int line = next().line;
    auto n = mk(NK::With, line);
    while (cur().type != TT::BlockEnd) {
      if (!n->strs.empty()) expect_op(",");
      n->strs.push_back(expect_name());
      expect_op("=");
      n->items.push_back(parse_expression(true));
    }
    open_blocks_.push_back("with");
    n->body = parse_statements({"endwith"}, true);
    open_blocks_.pop_back();
    return n;
  }

  // ---- expressions

  bool tuple_end(const std::vector<std::string>& extra_end) const {
    const Token& t = cur();
    if (t.type == TT::VarEnd || t.type == TT::BlockEnd || t.type == TT::Eof) return true;
    if (t.type == TT::Op && t.value == ")") return true;
    if (t.type == TT::Name)
      for (const auto& e : extra_end)
        if (t.value == e) return true;
    return false;
  }

  NodeP parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parens) {
    int line = cur().line;
    Nodes args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) {
        if (cur().type == TT::Eof) fail_eof();
        fail_here("Expected an expression, got " + describe(cur()));
      }
    }
    auto tup = mk(NK::TupleLit, line);
    tup->items = std::move(args);
    return tup;
  }

  NodeP parse_expression(bool with_condexpr) {
    DepthGuard g(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  NodeP parse_condexpr() {
    int line = cur().line;
    NodeP expr1 = parse_or();
    while (skip_name("if")) {
      auto n = mk(NK::CondExpr, line);
      n->a = parse_or();
      if (skip_name("else")) n->c = parse_condexpr();
      n->b = std::move(expr1);
      expr1 = std::move(n);
    }
    return expr1;
  }

  NodeP parse_or() {
    int line = cur().line;
    NodeP left = parse_and();
    while (skip_name("or")) {
      auto n = mk(NK::Or, line);
      n->a = std::move(left);
      n->b = parse_and();
      left = std::move(n);
    }
    return left;
  }

  NodeP parse_and() {
    int line = cur().line;
    NodeP left = parse_not();
    while (skip_name("and")) {
      auto n = mk(NK::And, line);
      n->a = std::move(left);
      n->b = parse_not();
      left = std::move(n);
    }
    return left;
  }

  NodeP parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      int line = next().line;
      auto n = mk(NK::Not, line);
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  NodeP parse_compare() {
    int line = cur().line;
    NodeP expr = parse_math1();
    Nodes operands;
    std::vector<std::string> ops;
    while (true) {
      const Token& t = cur();
      if (t.type == TT::Op && (t.value == "==" || t.value == "!=" || t.value == "<" || t.value == "<=" ||
                               t.value == ">" || t.value == ">=")) {
        ops.push_back(next().value);
        operands.push_back(parse_math1());
      } else if (skip_name("in")) {
        ops.push_back("in");
        operands.push_back(parse_math1());
      } else if (is_name("not") && look().type == TT::Name && look().value == "in") {
        next();
        next();
        ops.push_back("notin");
        operands.push_back(parse_math1());
      } else {
        break;
      }
    }
    if (ops.empty()) return expr;
    auto n = mk(NK::Compare, line);
    n->a = std::move(expr);
    n->strs = std::move(ops);
    n->items = std::move(operands);
    return n;
  }

  NodeP binop(const std::string& op, NodeP l, NodeP r, int line) {
    auto n = mk(NK::BinOp, line);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  NodeP parse_math1() {
    int line = cur().line;
    NodeP left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().value;
      left = binop(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  NodeP parse_concat() {
    int line = cur().line;
    Nodes args;
    args.push_back(parse_math2());
    while (skip_op("~")) args.push_back(parse_math2());
    if (args.size() == 1) return std::move(args[0]);
    auto n = mk(NK::Concat, line);
    n->items = std::move(args);
    return n;
  }

  NodeP parse_math2() {
    int line = cur().line;
    NodeP left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().value;
      left = binop(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  NodeP parse_pow() {
    int line = cur().line;
    NodeP left = parse_unary(true);
    while (skip_op("**")) left = binop("**", std::move(left), parse_unary(true), line);
    return left;
  }

  NodeP parse_unary(bool with_filter) {
    DepthGuard g(*this);
    int line = cur().line;
    NodeP node;
    if (is_op("-") || is_op("+")) {
      bool neg = next().value == "-";
      node = mk(neg ? NK::Neg : NK::Pos, line);
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  NodeP parse_primary() {
    DepthGuard g(*this);
    const Token& t = cur();
    int line = t.line;
    if (t.type == TT::Name) {
      auto n = mk(NK::Const, line);
      if (t.value == "true" || t.value == "True") n->value = Value::boolean(true);
      else if (t.value == "false" || t.value == "False") n->value = Value::boolean(false);
      else if (t.value == "none" || t.value == "None") n->value = Value::none();
      else {
        n->kind = NK::Name;
        n->name = t.value;
      }
      next();
      return n;
    }
    if (t.type == TT::String) {
      std::string buf;
      while (cur().type == TT::String) buf += next().value;
      auto n = mk(NK::Const, line);
      n->value = Value::string(std::move(buf));
      return n;
    }
    if (t.type == TT::Int || t.type == TT::Float) {
      auto n = mk(NK::Const, line);
      n->value = t.type == TT::Int ? Value::integer(t.ival) : Value::number(t.fval);
      next();
      return n;
    }
    if (is_op("(")) {
      next();
      NodeP n = parse_tuple(true, {}, true);
      expect_op(")");
      return n;
    }
    if (is_op("[")) return parse_list();
    if (is_op("{")) return parse_dict();
    if (t.type == TT::Eof) fail_eof();
    fail_here("unexpected " + describe(t));
  }

  NodeP parse_list() {
    auto n = mk(NK::ListLit, next().line);
    while (!is_op("]")) {
      if (!n->items.empty()) expect_op(",");
      if (is_op("]")) break;
      n->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return n;
  }

  NodeP parse_dict() {
    auto n = mk(NK::DictLit, next().line);
    while (!is_op("}")) {
      if (!n->items.empty()) expect_op(",");
      if (is_op("}")) break;
      n->items.push_back(parse_expression(true));
      expect_op(":");
      n->items.push_back(parse_expression(true));
    }
    expect_op("}");
    return n;
  }

  NodeP parse_postfix(NodeP node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  NodeP parse_filter_expr(NodeP node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  NodeP parse_subscript(NodeP node) {
    const Token& t = next();
    int line = t.line;
    if (t.value == ".") {
      const Token& attr = cur();
      if (attr.type == TT::Name) {
        auto n = mk(NK::Getattr, line);
        n->a = std::move(node);
        n->name = next().value;
        return n;
      }
      if (attr.type != TT::Int) fail_here("expected name or number");
      auto n = mk(NK::Getitem, line);
      n->a = std::move(node);
      n->b = mk(NK::Const, line);
      n->b->value = Value::integer(next().ival);
      return n;
    }
    Nodes args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto n = mk(NK::Getitem, line);
    n->a = std::move(node);
    if (args.size() == 1) {
      n->b = std::move(args[0]);
    } else {
      n->b = mk(NK::TupleLit, line);
      n->b->items = std::move(args);
    }
    return n;
  }

  NodeP parse_subscribed() {
    int line = cur().line;
    auto slice = mk(NK::Slice, line);
    if (is_op(":")) {
      next();
    } else {
      NodeP e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      slice->a = std::move(e);
    }
    if (!is_op(":") && !is_op("]") && !is_op(",")) slice->b = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) slice->c = parse_expression(true);
    }
    return slice;
  }

  void parse_call_args(Node& n) {
    int line = cur().line;
    expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail_at("invalid syntax for function call expression", line);
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        ensure(!n.dyn_args && !n.dyn_kwargs);
        next();
        n.dyn_args = parse_expression(true);
      } else if (is_op("**")) {
        ensure(!n.dyn_kwargs);
        next();
        n.dyn_kwargs = parse_expression(true);
      } else if (cur().type == TT::Name && look().type == TT::Op && look().value == "=") {
        ensure(!n.dyn_kwargs);
        std::string key = next().value;
        next();
        n.strs.push_back(key);
        n.kwitems.push_back(parse_expression(true));
      } else {
        ensure(!n.dyn_args && !n.dyn_kwargs && n.strs.empty());
        n.items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  NodeP parse_call(NodeP node) {
    auto n = mk(NK::Call, cur().line);
    n->a = std::move(node);
    parse_call_args(*n);
    return n;
  }

  // `start_inline`: the filter name comes first ({% filter upper %}).
  NodeP parse_filter(NodeP node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) name.append(".").append(expect_name());
      auto n = mk(NK::Filter, line);
      n->name = name;
      n->a = std::move(node);
      if (is_op("(")) parse_call_args(*n);
      node = std::move(n);
      start_inline = false;
    }
    return node;
  }

  NodeP parse_test(NodeP node) {
    int line = next().line;
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) name.append(".").append(expect_name());
    auto n = mk(NK::Test, line);
    n->name = name;
    n->a = std::move(node);
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*n);
    } else if ((t.type == TT::Name || t.type == TT::String || t.type == TT::Int || t.type == TT::Float ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !(t.type == TT::Name && (t.value == "else" || t.value == "or" || t.value == "and"))) {
      if (is_name("is")) fail_here("You cannot chain multiple tests with is");
      NodeP arg = parse_postfix(parse_primary());
      n->items.push_back(std::move(arg));
    }
    if (!negated) return n;
    auto neg = mk(NK::Not, line);
    neg->a = std::move(n);
    return neg;
  }
};

}  // namespace

Nodes parse_template(std::string_view source) {
  Lexer lexer(source);
  Parser parser(lexer.run());
  return parser.parse_all();
}

}  // namespace trlx::text::tpl

// No config field is accepted and ignored. Every field of every trainer that
// trains is either declared not built (then any value but the default is
// refused) or read by code in lib/ outside the files that declare config
// structs and their tables (whose only reads are validation rules).
//
// C++ member reads cannot be observed at run time, so this scans the
// sources: a read is `.member` or `->member` that is neither a call nor the
// left side of an assignment, outside comments and string literals, in a
// file outside lib/trainers/ or in a trainer file that names the trainer's
// config struct (so DPO's reads do not vouch for KTO's fields of the same
// name). A same-named member of another struct read in shared code still
// counts: the scan is a net, not a proof.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/loader.hpp"
#include "config/schema.hpp"
#include "core/error.hpp"
#include "support.hpp"
#include "trainers/registry.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

struct Source {
  std::string path;  // relative to the source dir
  std::string text;
};

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The code of a C++ file with comments removed and string and character
// literals emptied, so that a message naming `c.packing` reads nothing.
std::string code_only(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (s.compare(i, 2, "/*") == 0) {
      const size_t e = s.find("*/", i + 2);
      i = e == std::string::npos ? s.size() : e + 2;
    } else if (s.compare(i, 2, "R\"") == 0 && (i == 0 || !is_ident(s[i - 1]))) {
      const size_t open = s.find('(', i + 2);
      if (open == std::string::npos) break;
      std::string close(1, ')');
      close.append(s, i + 2, open - i - 2);
      close.push_back('"');
      const size_t e = s.find(close, open);
      out += "\"\"";
      i = e == std::string::npos ? s.size() : e + close.size();
    } else if (s[i] == '"' || (s[i] == '\'' && (i == 0 || !std::isxdigit(static_cast<unsigned char>(s[i - 1]))))) {
      const char q = s[i++];
      while (i < s.size() && s[i] != q) i += s[i] == '\\' ? 2 : 1;
      ++i;
      out += q;
      out += q;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// Names read as members: after `.` or `->`, not followed by `(` (a call)
// or by a lone `=` (an assignment).
std::set<std::string> member_reads(const std::string& code) {
  std::set<std::string> out;
  for (size_t i = 0; i < code.size(); ++i) {
    size_t start;
    if (code[i] == '.' && i + 1 < code.size() && !std::isdigit(static_cast<unsigned char>(code[i + 1])))
      start = i + 1;
    else if (code.compare(i, 2, "->") == 0)
      start = i + 2;
    else
      continue;
    size_t e = start;
    while (e < code.size() && is_ident(code[e])) ++e;
    if (e == start || std::isdigit(static_cast<unsigned char>(code[start]))) continue;
    size_t k = e;
    while (k < code.size() && std::isspace(static_cast<unsigned char>(code[k]))) ++k;
    if (k < code.size() && code[k] == '(') {
      out.insert(code.substr(start, e - start) + "()");  // an accessor call
      continue;
    }
    if (k + 1 < code.size() && code[k] == '=' && code[k + 1] != '=') continue;
    out.insert(code.substr(start, e - start));
  }
  return out;
}

// Where config structs and their field tables are declared.
bool declares_config(const std::string& rel) {
  if (rel == "lib/config/training.hpp" || rel == "lib/config/schema.hpp") return true;
  const fs::path p(rel);
  const std::string stem = p.stem().string();
  return p.parent_path() == "lib/trainers" && stem.size() > 7 && stem.compare(stem.size() - 7, 7, "_config") == 0;
}

std::vector<Source> lib_sources(bool declarations) {
  const fs::path root = test::source_dir();
  std::vector<Source> out;
  for (const auto& e : fs::recursive_directory_iterator(root / "lib")) {
    const auto ext = e.path().extension();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
    const std::string rel = fs::relative(e.path(), root).generic_string();
    if (declares_config(rel) != declarations) continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    out.push_back({rel, ss.str()});
  }
  return out;
}

bool names_word(const std::string& code, const std::string& word) {
  for (size_t i = code.find(word); i != std::string::npos; i = code.find(word, i + 1)) {
    const size_t e = i + word.size();
    if ((i == 0 || !is_ident(code[i - 1])) && (e == code.size() || !is_ident(code[e]))) return true;
  }
  return false;
}

// Members read by code that can see a `config_struct`: shared code (outside
// lib/trainers/) and the trainer files that name the struct or `base` (the
// struct it derives from, e.g. the online trainers' OnlineConfig).
std::set<std::string> reads_for(const std::string& config_struct, const std::vector<Source>& sources,
                                const std::string& base = "") {
  std::set<std::string> out;
  for (const auto& s : sources) {
    const std::string code = code_only(s.text);
    // A trainer file reads for its own trainer only; the shared trainer
    // module (trainers/common) reads the shared fields for every trainer.
    const bool shared = s.path.rfind("lib/trainers/common.", 0) == 0;
    const bool names = names_word(code, config_struct) || (!base.empty() && names_word(code, base));
    if (s.path.rfind("lib/trainers/", 0) == 0 && !shared && !names) continue;
    auto r = member_reads(code);
    out.insert(r.begin(), r.end());
  }
  return out;
}

// The struct a trainer's table is built for: `Schema s("<trainer>", ...)`
// followed by `SchemaBuilder<Struct>` in the table sources.
std::string config_struct_of(const std::string& trainer, const std::vector<Source>& tables) {
  for (const auto& s : tables) {
    const size_t at = s.text.find("Schema s(\"" + trainer + "\"");
    if (at == std::string::npos) continue;
    const size_t b = s.text.find("SchemaBuilder<", at) + 14;
    return s.text.substr(b, s.text.find('>', b) - b);
  }
  return "";
}

// The struct `config_struct` derives from in the table sources
// (`struct X : Base {`), unless that is the shared TrainingConfig; "" if none.
std::string base_of(const std::string& config_struct, const std::vector<Source>& tables) {
  for (const auto& s : tables) {
    const size_t at = s.text.find("struct " + config_struct + " : ");
    if (at == std::string::npos) continue;
    const size_t b = at + 10 + config_struct.size();
    const std::string base = s.text.substr(b, s.text.find_first_of(" {", b) - b);
    return base == "config::TrainingConfig" ? "" : base;
  }
  return "";
}

// The fields of `schema` that are neither declared not built nor read.
std::vector<std::string> unread_fields(const config::Schema& schema, const std::set<std::string>& reads) {
  std::vector<std::string> out;
  for (const auto& f : schema.fields()) {
    if (f.not_built_reason || !f.folds_into.empty() || f.describes_only) continue;
    const std::string name = f.read_through.empty() ? f.member : f.read_through + "()";
    if (!reads.count(name)) out.push_back(f.name + " (member " + name + ")");
  }
  return out;
}

// `field(&Struct::member, "name"` in the table sources: name -> members.
std::map<std::string, std::set<std::string>> declared_bindings(const std::vector<Source>& sources) {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& s : sources) {
    const std::string& t = s.text;
    for (size_t i = t.find("field(&"); i != std::string::npos; i = t.find("field(&", i + 1)) {
      const size_t colons = t.find("::", i);
      size_t e = colons + 2;
      while (e < t.size() && is_ident(t[e])) ++e;
      const std::string member = t.substr(colons + 2, e - colons - 2);
      const size_t q1 = t.find('"', e), q2 = t.find('"', q1 + 1);
      out[t.substr(q1 + 1, q2 - q1 - 1)].insert(member);
    }
  }
  return out;
}

struct Probe {
  bool never_read_by_anyone = false;
  bool packing = false;
};

}  // namespace

TEST_CASE("every field of every trainer is read by code or declared not built", "[config][fields]") {
  const auto code = lib_sources(false), tables = lib_sources(true);
  const auto bindings = declared_bindings(tables);
  size_t trainers = 0;
  for (const auto& t : trainers::trainer_table()) {
    ++trainers;
    INFO("trainer " << t.name);
    const std::string config_struct = config_struct_of(t.name, tables);
    REQUIRE(!config_struct.empty());
    const auto reads = reads_for(config_struct, code, base_of(config_struct, tables));
    REQUIRE(reads.count("learning_rate"));  // the scan sees the engine
    for (const auto& f : t.schema().fields()) {
      INFO("field " << f.name);
      // The member the table says it binds is the one the source binds.
      REQUIRE(bindings.count(f.name));
      CHECK(bindings.at(f.name).count(f.member));
    }
    CHECK(unread_fields(t.schema(), reads) == std::vector<std::string>{});
  }
  CHECK(trainers == config::trainer_names().size());
}

TEST_CASE("the field scan fails on a field nobody reads and passes it once declared not built", "[config][fields]") {
  const auto reads = reads_for("SFTConfig", lib_sources(false));
  config::Schema s("probe", "a table with a field no code reads");
  config::SchemaBuilder<Probe> b(s);
  b.field(&Probe::packing, "packing", false, "read by SFT");
  auto& dummy = b.field(&Probe::never_read_by_anyone, "never_read_by_anyone", false, "read by nobody");
  CHECK(unread_fields(s, reads) == std::vector<std::string>{"never_read_by_anyone (member never_read_by_anyone)"});
  dummy.not_built("only a probe");
  CHECK(unread_fields(s, reads).empty());
}

TEST_CASE("the scan reads code, not comments, strings or assignments", "[config][fields]") {
  const auto r = member_reads(code_only(
      "// c.in_comment\n/* c.in_block */ x = \"c.in_string\"; y = R\"(c.in_raw)\";\n"
      "c.assigned = 1; c.called(); p->pointed; if (c.compared == 2) {} z = c.plain; 1.5e3;\n"));
  CHECK(r == std::set<std::string>{"called()", "pointed", "compared", "plain"});
}

TEST_CASE("a field declared not built refuses any value but its default, naming where it was set", "[config][fields]") {
  struct C {
    bool thing = false;
  };
  config::Schema s("probe", "");
  config::SchemaBuilder<C> b(s);
  b.field(&C::thing, "thing", false, "").not_built("it needs something trlx lacks; leave it false");
  config::ConfigLoader ok(s);
  ok.load_yaml_text("thing: false\n", "probe.yaml");
  C c;
  ok.resolve(&c);  // the default, even written out, is accepted
  config::ConfigLoader bad(s);
  bad.load_yaml_text("thing: true\n", "probe.yaml");
  try {
    bad.resolve(&c);
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "invalid config: probe.yaml:1:1: `thing: true`: not built in trlx: it needs something trlx lacks; leave it false");
  }
  config::ConfigLoader flag(s);
  flag.apply_flag("thing", {});
  CHECK_THROWS_WITH(flag.resolve(&c), Catch::Matchers::Contains("--thing: `thing: true`: not built in trlx"));
}

TEST_CASE("fp16 is read by every trainer, alone and over float32 weights", "[config][fields]") {
  size_t resolved = 0;
  for (const auto& t : trainers::trainer_table()) {
    INFO(t.name);
    {
      config::ConfigLoader l(t.schema());
      l.apply_flag("fp16", {"true"});
      try {
        const auto r = t.resolve(l);
        CHECK(r->config().fp16);
        CHECK_FALSE(r->config().use_bf16());  // bf16 left unset follows fp16, as in TRL
        ++resolved;
      } catch (const InputError& e) {
        // A trainer that needs more than this to resolve (online DPO: something
        // to rank with) refuses for that, not for fp16.
        CHECK_THAT(e.what(), !Catch::Matchers::Contains("fp16"));
      }
    }
    {
      config::ConfigLoader l(t.schema());
      l.apply_flag("fp16", {"true"});
      l.apply_flag("bf16", {"true"});
      CHECK_THROWS_WITH(t.resolve(l), Catch::Matchers::Contains("fp16") && Catch::Matchers::Contains("bf16") &&
                                          Catch::Matchers::Contains("choose one mixed precision"));
    }
    {
      config::ConfigLoader l(t.schema());
      l.apply_flag("fp16", {"true"});
      l.apply_flag("dtype", {"bfloat16"});
      CHECK_THROWS_WITH(t.resolve(l), Catch::Matchers::Contains("dtype") &&
                                          Catch::Matchers::Contains("fp16 mixed precision trains float32 weights"));
    }
  }
  CHECK(resolved >= 6);
}

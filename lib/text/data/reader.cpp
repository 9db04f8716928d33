// Reading JSON / JSON Lines files and dataset directories into rows.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/strings.hpp"
#include "text/data/columnar.hpp"
#include "text/data/dataset.hpp"
#include "text/data/internal.hpp"

namespace fs = std::filesystem;

namespace trlx::data {

std::string Row::where() const {
  if (line == 0 && element) return fmt::format("{} (row {})", file, *element);  // Parquet, Arrow
  if (element) return fmt::format("{}:{} (element {})", file, line, *element);
  return fmt::format("{}:{}", file, line);
}

namespace detail {

std::optional<size_t> first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::nullopt;
}

size_t json_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  return deepest;
}

std::string describe_value(const Value& v) {
  auto clip = [](std::string s) {
    constexpr size_t kMax = 40;
    if (s.size() <= kMax) return s;
    size_t cut = kMax;  // do not split a UTF-8 sequence
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    return s.substr(0, cut) + "...";
  };
  switch (v.type()) {
    case Value::value_t::null: return "null";
    case Value::value_t::boolean: return fmt::format("a bool ({})", v.get<bool>());
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned:
    case Value::value_t::number_float: return fmt::format("a number ({})", clip(v.dump()));
    case Value::value_t::string:
      return fmt::format("a string {}",
                         clip(v.dump(-1, ' ', false, Value::error_handler_t::replace)));
    case Value::value_t::array:
      if (v.empty()) return "an empty list";
      return fmt::format("a list of {} item{}", v.size(), v.size() == 1 ? "" : "s");
    case Value::value_t::object: {
      if (v.empty()) return "an empty object";
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end() && keys.size() < 6; ++it)
        keys.push_back('"' + clip(it.key()) + '"');
      if (v.size() > keys.size()) keys.push_back("...");
      return "an object with keys " + join(keys, ", ");
    }
    default: return "a binary value";
  }
}

void note_skip(size_t& skipped, std::vector<std::string>& examples, const std::string& why) {
  ++skipped;
  if (examples.size() < kSkipExamples) examples.push_back(why);
}

}  // namespace detail

namespace {

using detail::describe_value;

constexpr std::string_view kBom = "\xEF\xBB\xBF";

// 1-based line of a byte offset, by binary search over line starts.
class LineIndex {
 public:
  explicit LineIndex(std::string_view text) {
    starts_.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n') starts_.push_back(i + 1);
  }
  size_t line(size_t offset) const {
    return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) -
                               starts_.begin());
  }
  size_t column(size_t offset) const { return offset - starts_[line(offset) - 1] + 1; }

 private:
  std::vector<size_t> starts_;
};

void check_utf8(std::string_view text, const std::string& file) {
  if (auto bad = detail::first_invalid_utf8(text)) {
    LineIndex lines(text);
    fail_input("{}:{}: not valid UTF-8 (byte 0x{:02X} at column {}); trlx reads UTF-8 data files "
               "only: convert the file, e.g. `iconv -f latin1 -t utf-8`",
               file, lines.line(*bad), static_cast<unsigned char>(text[*bad]),
               lines.column(*bad));
  }
}

// nlohmann's message without its "[json.exception...] " tag and, for parse
// errors, the "parse error at line L, column C: " prefix, which would point
// into our substring, not the file.
std::string parse_reason(const std::exception& e) {
  std::string what = e.what();
  if (!what.empty() && what[0] == '[') {
    const size_t end = what.find("] ");
    if (end != std::string::npos) what.erase(0, end + 2);
  }
  if (starts_with(what, "parse error")) {
    const size_t at = what.find("column ");
    const size_t colon = at == std::string::npos ? at : what.find(": ", at);
    if (colon != std::string::npos) what.erase(0, colon + 2);
  }
  // nlohmann quotes everything it read of the bad token ("last read: '...'"):
  // for an unterminated 50 MB string that is the whole line. Keep its ends.
  constexpr size_t kHead = 120, kTail = 60;
  if (what.size() > kHead + kTail + 40)
    what = fmt::format("{} [... {} characters ...] {}", what.substr(0, kHead), what.size() - kHead - kTail,
                       what.substr(what.size() - kTail));
  return what;
}

void bad_row(Dataset& out, const LoadOptions& options, const std::string& why) {
  if (!options.skip_bad_rows) throw InputError(why);
  detail::note_skip(out.skipped, out.skip_examples, why);
}

// Parses one row's JSON text; nullopt (after reporting) when it is bad.
std::optional<Value> parse_row(std::string_view text, const std::string& where, Dataset& out,
                               const LoadOptions& options) {
  if (detail::json_depth(text) > detail::kMaxDepth) {
    bad_row(out, options,
            fmt::format("{}: row nested deeper than {} levels", where, detail::kMaxDepth));
    return std::nullopt;
  }
  Value v;
  try {
    v = Value::parse(text.begin(), text.end());
  } catch (const Value::parse_error& e) {
    bad_row(out, options,
            fmt::format("{}: invalid JSON at column {}: {}", where, e.byte, parse_reason(e)));
    return std::nullopt;
  } catch (const Value::exception& e) {  // e.g. a number too large for a double
    bad_row(out, options, fmt::format("{}: invalid JSON: {}", where, parse_reason(e)));
    return std::nullopt;
  }
  if (!v.is_object()) {
    bad_row(out, options,
            fmt::format("{}: expected a JSON object (one row), found {}", where, describe_value(v)));
    return std::nullopt;
  }
  return v;
}

std::string_view strip_bom(std::string_view text) {
  if (text.substr(0, kBom.size()) == kBom) text.remove_prefix(kBom.size());
  return text;
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// Byte offsets where the elements of an array start: the top-level array, or
// the array value of `key` in the top-level object (its last occurrence, as the
// parser keeps the last duplicate). The text is valid JSON: the parser said so.
std::vector<size_t> element_offsets(std::string_view text, const std::string* key) {
  std::vector<size_t> offsets;
  size_t depth = 0;
  size_t target_depth = 0;  // depth inside the target array while `active`
  bool active = false, expect_element = false;
  std::string last_key;
  size_t string_start = 0;
  bool in_string = false, after_key = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        if (key && depth == 1 && !after_key) {
          try {
            last_key = Value::parse(text.substr(string_start, i + 1 - string_start)).get<std::string>();
          } catch (const std::exception&) {
            last_key.clear();
          }
        }
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    if (active && expect_element && depth == target_depth && c != ']') {
      offsets.push_back(i);
      expect_element = false;
    }
    if (c == '"') {
      in_string = true;
      string_start = i;
    } else if (c == ':') {
      if (depth == 1) after_key = true;
    } else if (c == '[' || c == '{') {
      ++depth;
      const bool target = key ? (c == '[' && depth == 2 && after_key && last_key == *key)
                              : (c == '[' && depth == 1);
      if (target) {
        offsets.clear();
        active = expect_element = true;
        target_depth = depth;
      }
      if (depth == 2) after_key = false;
    } else if (c == ']' || c == '}') {
      if (active && depth == target_depth) active = false;
      if (depth > 0) --depth;
      if (depth == 1) after_key = false;
    } else if (c == ',') {
      if (active && depth == target_depth) expect_element = true;
      if (depth == 1) after_key = false;
    }
  }
  return offsets;
}

const std::vector<std::vector<std::string>>& split_groups() {
  static const std::vector<std::vector<std::string>> groups = {
      {"train", "training"},
      {"test", "testing", "eval", "evaluation"},
      {"validation", "valid", "val", "dev"},
  };
  return groups;
}

// The path words that name `split`: its alias group, or just itself.
std::vector<std::string> split_aliases(const std::string& split) {
  const std::string s = to_lower(split);
  for (const auto& g : split_groups())
    if (std::find(g.begin(), g.end(), s) != g.end()) return g;
  return {s};
}

std::string canonical_split(const std::string& word) {
  for (const auto& g : split_groups())
    if (std::find(g.begin(), g.end(), word) != g.end()) return g.front();
  return "";
}

// A relative path's words: split at - _ . / space and digits, lower-cased.
std::vector<std::string> path_words(const fs::path& rel) {
  std::vector<std::string> words;
  std::string cur;
  for (char c : to_lower(rel.generic_string())) {
    if (c == '-' || c == '_' || c == '.' || c == '/' || c == ' ' || (c >= '0' && c <= '9')) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

enum class Kind { jsonl, json, jsonl_compressed, json_compressed, parquet, arrow, unsupported, other };

Kind kind_of(const fs::path& p) {
  const std::string name = to_lower(p.filename().string());
  if (ends_with(name, ".jsonl") || ends_with(name, ".ndjson")) return Kind::jsonl;
  if (ends_with(name, ".json")) return Kind::json;
  if (ends_with(name, ".parquet")) return Kind::parquet;
  if (ends_with(name, ".arrow")) return Kind::arrow;
  for (const char* ext : {".gz", ".zst"}) {
    if (!ends_with(name, ext)) continue;
    const std::string inner = name.substr(0, name.size() - std::string_view(ext).size());
    if (ends_with(inner, ".jsonl") || ends_with(inner, ".ndjson")) return Kind::jsonl_compressed;
    if (ends_with(inner, ".json")) return Kind::json_compressed;
  }
  for (const char* ext : {".csv", ".tsv", ".gz", ".zst", ".bz2", ".xz", ".zip"})
    if (ends_with(name, ext)) return Kind::unsupported;
  return Kind::other;
}

// Files of one format family are never mixed in a split (see the README).
const char* family_of(Kind k) {
  switch (k) {
    case Kind::parquet: return "Parquet";
    case Kind::arrow: return "Arrow";
    default: return "JSON";
  }
}

// How to turn an unsupported file into JSON Lines.
[[noreturn]] void fail_unsupported(const fs::path& p) {
  const std::string f = p.string();
  const std::string name = to_lower(p.filename().string());
  for (const char* ext : {".gz", ".zst", ".bz2", ".xz", ".zip"}) {
    if (ends_with(name, ext))
      fail_input("{}: trlx reads compressed JSON Lines and JSON (.jsonl.gz, .jsonl.zst, .json.gz, .json.zst) but "
                 "not this file; decompress it first (e.g. `gunzip -k`, `unxz -k`, `unzip`) and point trlx at the "
                 "data file",
                 f);
  }
  const bool tsv = ends_with(name, ".tsv");
  fail_input("{}: {} files are not supported yet; trlx reads JSON Lines (.jsonl), JSON (.json), Parquet and Arrow. "
             "Convert it once with Python's datasets library:\n  python3 -c \"from datasets import "
             "load_dataset; load_dataset('csv', data_files='{}'{}, split='train').to_parquet('{}.parquet')\"",
             f, tsv ? "tsv" : "csv", f, tsv ? ", delimiter='\\t'" : "", (p.parent_path() / p.stem()).string());
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail_input("{}: cannot open data file", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail_input("{}: error while reading data file", p.string());
  return std::move(ss).str();
}

// A datasets save_to_disk directory (one Dataset: state.json and
// dataset_info.json beside its data-*.arrow files): the data files state.json
// lists, in its order; nullopt when `dir` is not one. A state.json without
// dataset_info.json counts only if it lists data files (another tool's
// state.json is then just a metadata file).
std::optional<std::vector<fs::path>> saved_dataset_files(const fs::path& dir) {
  const fs::path state = dir / "state.json";
  std::error_code ec;
  if (!fs::is_regular_file(state, ec)) return std::nullopt;
  const bool has_info = fs::is_regular_file(dir / "dataset_info.json", ec);
  Value doc;
  try {
    doc = Value::parse(read_file(state));
  } catch (const Value::exception& e) {
    if (!has_info) return std::nullopt;
    fail_input("{}: invalid JSON: {}", state.string(), parse_reason(e));
  }
  const auto files = doc.is_object() ? doc.find("_data_files") : doc.end();
  if (!has_info && (!doc.is_object() || files == doc.end())) return std::nullopt;
  if (!doc.is_object() || files == doc.end() || !files->is_array())
    fail_input("{}: expected an object with a \"_data_files\" list (the state.json datasets' save_to_disk writes)",
               state.string());
  std::vector<fs::path> out;
  for (size_t i = 0; i < files->size(); ++i) {
    const Value& entry = (*files)[i];
    const auto name = entry.is_object() ? entry.find("filename") : entry.end();
    if (!entry.is_object() || name == entry.end() || !name->is_string())
      fail_input("{}: \"_data_files\"[{}]: expected {{\"filename\": ...}}, found {}", state.string(), i,
                 describe_value(entry));
    const fs::path rel = name->get<std::string>();
    if (rel.empty() || rel.is_absolute() || rel.filename() != rel)
      fail_input("{}: \"_data_files\"[{}]: \"{}\" is not a file name in this directory", state.string(), i,
                 rel.string());
    const fs::path file = dir / rel;
    if (!fs::is_regular_file(file, ec))
      fail_input("{}: lists data file {}, which is not there", state.string(), file.string());
    out.push_back(file);
  }
  if (out.empty()) fail_input("{}: lists no data files", state.string());
  return out;
}

// Files of one split below a directory (see the README for the rules).
std::vector<fs::path> split_files(const fs::path& dir, const LoadOptions& options) {
  static const std::set<std::string> kMetadata = {"dataset_info.json", "dataset_infos.json",
                                                  "dataset_dict.json", "state.json"};
  // (sort key, file): a save_to_disk directory's files keep state.json's order.
  std::vector<std::pair<fs::path, fs::path>> found;
  std::set<fs::path> saved;  // files listed by some state.json
  auto add_saved = [&](const fs::path& d, const std::vector<fs::path>& files) {
    for (size_t i = 0; i < files.size(); ++i) {
      found.emplace_back(d / fmt::format("{:08}", i), files[i]);
      saved.insert(files[i]);
    }
  };
  std::error_code ec;
  if (auto files = saved_dataset_files(dir)) {
    add_saved(dir, *files);
  } else {
    fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
    if (ec) fail_input("{}: cannot list directory: {}", dir.string(), ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) fail_input("{}: cannot list directory: {}", dir.string(), ec.message());
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_directory(ec)) {
        if (auto files = saved_dataset_files(it->path())) {
          it.disable_recursion_pending();
          add_saved(it->path(), *files);
        }
        continue;
      }
      if (!it->is_regular_file(ec)) continue;
      const Kind k = kind_of(it->path());
      if (k == Kind::other || kMetadata.count(to_lower(name))) continue;
      found.emplace_back(it->path(), it->path());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> candidates;
  for (auto& [key, file] : found) candidates.push_back(std::move(file));
  if (candidates.empty())
    fail_input("{}: no data files in this directory (looked for .jsonl, .json, .parquet and save_to_disk "
               "directories)",
               dir.string());

  const auto aliases = split_aliases(options.split);
  std::vector<fs::path> chosen;
  std::set<std::string> known_splits;  // splits that some file names
  for (const auto& p : candidates) {
    const auto words = path_words(p.lexically_relative(dir));
    bool mine = false;
    for (const auto& w : words) {
      if (std::find(aliases.begin(), aliases.end(), w) != aliases.end()) mine = true;
      if (auto s = canonical_split(w); !s.empty()) known_splits.insert(s);
    }
    if (mine) chosen.push_back(p);
  }
  if (chosen.empty()) {
    if (known_splits.empty() && aliases.front() == "train") {
      chosen = candidates;  // nothing is named: it is all training data
    } else if (known_splits.empty()) {
      throw MissingSplitError(fmt::format("{}: no file names split \"{}\" (no file names any split, so they "
                                          "all form the \"train\" split)",
                                          dir.string(), options.split));
    } else {
      throw MissingSplitError(fmt::format("{}: no file names split \"{}\"; splits found: {}", dir.string(),
                                          options.split,
                                          join(std::vector<std::string>(known_splits.begin(), known_splits.end()), ", ")));
    }
  }
  const fs::path* first_of_family = nullptr;
  for (const auto& p : chosen) {
    const Kind k = kind_of(p);
    if (k == Kind::unsupported) fail_unsupported(p);
    if (k == Kind::arrow && !saved.count(p))
      fail_input("{}: an Arrow file in a directory without state.json; trlx reads .arrow files of a directory "
                 "only from a datasets save_to_disk directory, whose state.json lists its data files (a "
                 "directory of .arrow files may also hold other datasets' cache-*.arrow files). Save the "
                 "dataset again with save_to_disk, or name one .arrow file as the dataset",
                 p.string());
    if (!first_of_family) {
      first_of_family = &p;
    } else if (std::string_view(family_of(kind_of(*first_of_family))) != family_of(k)) {
      fail_input("{}: split \"{}\" mixes {} files ({}) and {} files ({}); trlx reads one format per split, as "
                 "the same rows are often kept in both (a converted copy beside its source) and would be read "
                 "twice. Keep one format in the directory or name the files to read",
                 dir.string(), options.split, family_of(kind_of(*first_of_family)), first_of_family->string(),
                 family_of(k), p.string());
    }
  }
  return chosen;
}

// A datasets DatasetDict directory (dataset_dict.json, one save_to_disk
// directory per split): the directory of the split asked for; nullopt when
// `dir` is not one.
std::optional<fs::path> saved_dict_split(const fs::path& dir, const LoadOptions& options) {
  const fs::path index = dir / "dataset_dict.json";
  std::error_code ec;
  if (!fs::is_regular_file(index, ec)) return std::nullopt;
  Value doc;
  try {
    doc = Value::parse(read_file(index));
  } catch (const Value::exception& e) {
    fail_input("{}: invalid JSON: {}", index.string(), parse_reason(e));
  }
  const auto splits = doc.is_object() ? doc.find("splits") : doc.end();
  if (!doc.is_object() || splits == doc.end() || !splits->is_array())
    fail_input("{}: expected an object with a \"splits\" list (the dataset_dict.json datasets' save_to_disk "
               "writes)",
               index.string());
  std::vector<std::string> names;
  for (const auto& s : *splits) {
    if (!s.is_string() || s.get<std::string>().empty() || fs::path(s.get<std::string>()).filename() != s.get<std::string>())
      fail_input("{}: \"splits\": expected split names, found {}", index.string(), describe_value(s));
    names.push_back(s.get<std::string>());
  }
  // The split by its exact name; else the one split of its alias group
  // ("test" finds a DatasetDict's "eval").
  std::vector<std::string> matches;
  for (const auto& n : names)
    if (n == options.split) matches = {n};
  if (matches.empty()) {
    const auto aliases = split_aliases(options.split);
    for (const auto& n : names)
      if (std::find(aliases.begin(), aliases.end(), to_lower(n)) != aliases.end()) matches.push_back(n);
  }
  if (matches.size() != 1)
    throw MissingSplitError(fmt::format("{}: this DatasetDict has no split \"{}\"; its splits: {} (choose one with "
                                        "dataset_train_split / dataset_test_split)",
                                        dir.string(), options.split, join(names, ", ")));
  const fs::path split_dir = dir / matches.front();
  if (!fs::is_directory(split_dir, ec))
    fail_input("{}: lists split \"{}\" but {} is not a directory", index.string(), matches.front(),
               split_dir.string());
  return split_dir;
}

void read_file_into(const fs::path& p, const LoadOptions& options, Dataset& out) {
  const Kind k = kind_of(p);
  if (k == Kind::unsupported) fail_unsupported(p);
  if (k == Kind::other)
    fail_input("{}: unsupported data file type; trlx reads JSON Lines (.jsonl), JSON (.json), their .gz/.zst "
               "compressed forms, Parquet (.parquet) and Arrow (.arrow)",
               p.string());
  out.files.push_back(p.string());
  if (k == Kind::parquet || k == Kind::arrow) {
    auto sink = [&](Row&& row) { out.rows.push_back(std::move(row)); };
    if (k == Kind::parquet) detail::read_parquet(p, sink);
    else detail::read_arrow_ipc(p, sink);
    return;
  }
  const std::string text =
      (k == Kind::jsonl_compressed || k == Kind::json_compressed) ? detail::read_compressed(p) : read_file(p);
  if (k == Kind::jsonl || k == Kind::jsonl_compressed) read_jsonl_text(text, p.string(), options, out);
  else read_json_text(text, p.string(), options, out);
}

}  // namespace

void read_jsonl_text(std::string_view text, const std::string& file, const LoadOptions& options,
                     Dataset& out) {
  check_utf8(text, file);
  text = strip_bom(text);
  size_t line_no = 0, pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    ++line_no;
    pos = nl + 1;
    if (is_blank(line)) continue;
    const std::string where = fmt::format("{}:{}", file, line_no);
    if (auto v = parse_row(line, where, out, options))
      out.rows.push_back(Row{std::move(*v), file, line_no, std::nullopt});
  }
}

void read_json_text(std::string_view text, const std::string& file, const LoadOptions& options,
                    Dataset& out) {
  check_utf8(text, file);
  text = strip_bom(text);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return;  // an empty file holds no rows

  LineIndex lines(text);
  if (detail::json_depth(text) > detail::kMaxDepth + 2)
    fail_input("{}: JSON nested deeper than {} levels", file, detail::kMaxDepth + 2);
  Value doc;
  try {
    doc = Value::parse(text.begin(), text.end());
  } catch (const Value::parse_error& e) {
    // Many .json files on the hub are JSON Lines; a first line that is a JSON
    // value by itself says this is one of them.
    const size_t eol = std::min(text.find('\n', first), text.size());
    const std::string_view first_line = text.substr(first, eol - first);
    if (text[first] != '[' && Value::accept(first_line.begin(), first_line.end())) {
      read_jsonl_text(text, file, options, out);
      return;
    }
    const size_t at = e.byte > 0 ? std::min(e.byte - 1, text.size() ? text.size() - 1 : 0) : 0;
    fail_input("{}:{}: invalid JSON at column {}: {} (a .json file holds a JSON array of row "
               "objects, an object with such an array under \"{}\" or \"data\", or JSON Lines)",
               file, lines.line(at), lines.column(at), parse_reason(e), options.split);
  } catch (const Value::exception& e) {
    fail_input("{}: invalid JSON: {}", file, parse_reason(e));
  }

  Value* rows = nullptr;
  std::string key;
  if (doc.is_array()) {
    rows = &doc;
  } else if (doc.is_object()) {
    for (const std::string& k : {options.split, std::string("data")}) {
      auto it = doc.find(k);
      if (it != doc.end() && it->is_array()) {
        rows = &*it;
        key = k;
        break;
      }
    }
    if (!rows) {
      std::vector<std::string> split_lists;
      for (auto it = doc.begin(); it != doc.end(); ++it)
        if (it->is_array() && !canonical_split(to_lower(it.key())).empty())
          split_lists.push_back('"' + it.key() + '"');
      if (!split_lists.empty())
        throw MissingSplitError(fmt::format("{}: no \"{}\" list in this JSON object; it holds lists for: {}",
                                            file, options.split, join(split_lists, ", ")));
      // Any other object is a single row (as a one-line JSON Lines file is).
      out.rows.push_back(Row{std::move(doc), file, lines.line(first), std::nullopt});
      return;
    }
  } else {
    fail_input("{}:{}: expected a JSON array of row objects, an object, or JSON Lines; found {}",
               file, lines.line(first), describe_value(doc));
  }

  const auto offsets = element_offsets(text, key.empty() ? nullptr : &key);
  for (size_t i = 0; i < rows->size(); ++i) {
    const size_t line = i < offsets.size() ? lines.line(offsets[i]) : lines.line(first);
    Value& v = (*rows)[i];
    if (!v.is_object()) {
      bad_row(out, options,
              fmt::format("{}:{} (element {}): expected a JSON object (one row), found {}", file,
                          line, i, describe_value(v)));
      continue;
    }
    out.rows.push_back(Row{std::move(v), file, line, i});
  }
}

Dataset load_dataset(const fs::path& path, const LoadOptions& options) {
  Dataset out;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) fail_input("{}: no such data file or directory", path.string());
  if (fs::is_directory(st)) {
    std::vector<fs::path> files;
    if (const auto split_dir = saved_dict_split(path, options)) {
      auto saved = saved_dataset_files(*split_dir);
      if (!saved)
        fail_input("{}: split directory without state.json; trlx reads a DatasetDict's splits as datasets' "
                   "save_to_disk writes them (state.json lists each split's data files)",
                   split_dir->string());
      files = std::move(*saved);
    } else {
      files = split_files(path, options);
    }
    for (const auto& p : files) read_file_into(p, options, out);
  } else {
    read_file_into(path, options, out);
  }
  if (out.rows.empty()) {
    if (out.skipped > 0)
      fail_input("{}: every row was bad ({} skipped); the first: {}", path.string(), out.skipped,
                 out.skip_examples.front());
    fail_input("{}: the dataset is empty (no rows in {})", path.string(), join(out.files, ", "));
  }
  return out;
}

}  // namespace trlx::data

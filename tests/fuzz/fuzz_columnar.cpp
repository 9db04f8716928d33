// libFuzzer target: the Parquet, Arrow IPC and compressed JSON readers
// (lib/text/data/columnar.cpp through load_dataset) and shaping of their rows.
// Byte 0 picks the file type (low 3 bits: .parquet, .arrow, .jsonl.gz,
// .jsonl.zst, .json.gz), skip_bad_rows (bit 3) and the task (bits 4-6); the
// rest is written to a temporary file of that type, which load_dataset reads.
// Bad input must end in trlx::InputError; anything else (another exception,
// a sanitizer report, a broken invariant below) is a bug.
//
// Invariants: every row is a JSON object whose strings are valid UTF-8 and
// which serialises to JSON text; Parquet/Arrow rows are numbered 0, 1, 2, ...
// in file order (line 0, element = index), JSON rows have a line >= 1.
//
// Arrow's default memory pool is set to the system allocator (unless
// ARROW_DEFAULT_MEMORY_POOL is set already), so that AddressSanitizer sees
// the buffers Arrow reads into.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/error.hpp"
#include "text/data/dataset.hpp"
#include "text/data/internal.hpp"

using namespace trlx::data;
namespace fs = std::filesystem;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void check_value(const Value& v) {
  if (v.is_string()) require(!detail::first_invalid_utf8(v.get_ref<const std::string&>()));
  if (v.is_structured())
    for (const auto& x : v) check_value(x);
}

fs::path g_dir;

void remove_dir() {
  std::error_code ec;
  fs::remove_all(g_dir, ec);
}

struct Format {
  const char* file;
  bool columnar;  // rows carry a row index rather than a line
};
constexpr Format kFormats[] = {
    {"data.parquet", true},   {"data.arrow", true},    {"data.jsonl.gz", false},
    {"data.jsonl.zst", false}, {"data.json.gz", false},
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("ARROW_DEFAULT_MEMORY_POOL", "system", 0);
  // The file is rewritten for every input: in memory (/dev/shm) unless TMPDIR says where.
  const char* tmpdir = std::getenv("TMPDIR");
  const fs::path base = tmpdir && *tmpdir         ? fs::path(tmpdir)
                        : fs::exists("/dev/shm") ? fs::path("/dev/shm")
                                                 : fs::temp_directory_path();
  std::string tmpl = (base / "trlx-fuzz-columnar-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    std::abort();
  }
  g_dir = tmpl;
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const Format& format = kFormats[(mode & 7) % (sizeof(kFormats) / sizeof(kFormats[0]))];
  LoadOptions opt;
  opt.skip_bad_rows = mode & 8;
  const Task task = static_cast<Task>(((mode >> 4) & 7) % 5);

  const fs::path file = g_dir / format.file;
  {
    FILE* f = std::fopen(file.c_str(), "wb");
    require(f != nullptr);
    require(std::fwrite(data + 1, 1, size - 1, f) == size - 1);
    std::fclose(f);
  }

  Dataset ds;
  try {
    ds = load_dataset(file, opt);
  } catch (const trlx::InputError&) {
    return 0;
  }
  require(!ds.rows.empty());
  for (size_t i = 0; i < ds.rows.size(); ++i) {
    const Row& r = ds.rows[i];
    require(r.value.is_object());
    if (format.columnar) require(r.line == 0 && r.element == i);
    else require(r.line >= 1);
    check_value(r.value);
    (void)r.value.dump();  // throws (and so fails here) on invalid UTF-8
    (void)r.where();
    (void)detail::describe_value(r.value);
    (void)is_conversational(r.value);
  }
  try {
    const Shaped s = shape_for(task, std::move(ds), opt);
    require(!s.rows.empty());
    for (const auto& r : s.rows) {
      require(r.value.is_object());
      check_value(r.value);
    }
  } catch (const trlx::InputError&) {
  }
  return 0;
}

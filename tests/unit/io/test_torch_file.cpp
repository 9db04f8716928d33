// LibTorch archives written through io::write_torch_file: a write that fails
// midway (a full disk) is an error naming the file, never an abort, and
// leaves neither a temporary nor a torn target.
#include "catch_torch.hpp"

#include "core/error.hpp"
#include "io/torch_file.hpp"
#include "support.hpp"
#include "support/file_size_limit.hpp"

using namespace trlx;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

TEST_CASE("torch archives: written whole, or an error naming the file with nothing left behind", "[io]") {
  trlx::test::TempDir dir("trlx_torch_file");
  const auto target = dir.path / "state.pt";
  const auto big = torch::arange(1 << 18, torch::kFloat32);  // 1 MiB
  io::write_torch_file(target, [&](std::ostream& o) { torch::save(big, o); });
  torch::Tensor back;
  torch::load(back, target.string());
  CHECK(torch::equal(back, big));
  const auto before = fs::file_size(target);

  // The same file again, on a "disk" with 64 KiB left: the old one stays.
  std::string msg;
  {
    trlx::test::FileSizeLimit full(64 * 1024);
    try {
      io::write_torch_file(target, [&](std::ostream& o) { torch::save(big * 2, o); });
      FAIL("expected the write to fail");
    } catch (const Error& e) {
      msg = e.what();
    }
  }
  CHECK_THAT(msg, Contains(target.string()) && Contains("File too large"));
  CHECK(fs::file_size(target) == before);
  torch::load(back, target.string());
  CHECK(torch::equal(back, big));
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++entries;
  CHECK(entries == 1);  // no temporary left
}

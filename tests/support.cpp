// The one test unit that knows where the checkout is (see tests/CMakeLists.txt);
// tests reach it through trlx::test::source_dir() in support.hpp, which needs
// Catch and the skip marker, so this unit does not include it.
#include <filesystem>

namespace trlx::test {

std::filesystem::path source_dir() { return TRLX_SOURCE_DIR; }

}  // namespace trlx::test

// The project version, from the one compile definition that carries it (lib/CMakeLists.txt).
#include "core/version.hpp"

namespace trlx {

const char* version() { return TRLX_VERSION; }

}  // namespace trlx

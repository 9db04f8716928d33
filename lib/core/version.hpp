#pragma once
// The version trlx reports (--version, the environment report, the hub's user
// agent). It lives in one unit so that a version bump recompiles that unit only.

namespace trlx {

// "0.1.0": the project version CMake was configured with.
const char* version();

}  // namespace trlx

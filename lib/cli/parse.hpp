#pragma once
// Shared by the commands: CLI11 parsing with trlx's exit codes (help: 0,
// usage errors: an InputError, exit code 2).
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace trlx::cli {

// Returns an exit code when the command should stop (help printed), nullopt to go on.
std::optional<int> parse_args(CLI::App& app, std::vector<std::string> args);

}  // namespace trlx::cli

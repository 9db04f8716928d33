#pragma once
#include <string>
#include <vector>

namespace trlx::cli {

// The whole `trlx` command line; returns the process exit code.
int run_cli(int argc, char** argv);
int run_env(const std::vector<std::string>& args);
int run_init_model(std::vector<std::string> args);
int run_generate(std::vector<std::string> args);
int run_score(std::vector<std::string> args);
// lib/cli/text_commands.cpp
int run_tokenize(std::vector<std::string> args);
int run_render_template(std::vector<std::string> args);
std::string config_reference_markdown();

}  // namespace trlx::cli

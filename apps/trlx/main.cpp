#include "cli/cli.hpp"

int main(int argc, char** argv) { return trlx::cli::run_cli(argc, argv); }

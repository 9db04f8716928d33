// The `trlx` executable: everything it does is behind cli::run_cli (lib/cli).
#include "cli/cli.hpp"

int main(int argc, char** argv) { return trlx::cli::run_cli(argc, argv); }

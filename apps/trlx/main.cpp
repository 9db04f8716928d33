// The `trlx` executable: everything it does is behind cli::run_cli (lib/cli).
#include <csignal>

#include "cli/cli.hpp"

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then fails a write with EFBIG, which the
  // writers report as they report a full disk (exit 1, the checkpoint being
  // written removed), instead of killing the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  return trlx::cli::run_cli(argc, argv);
}

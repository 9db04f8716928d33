#pragma once
// A full disk, simulated: while alive, files this process writes cannot grow
// past `bytes` (RLIMIT_FSIZE; writes past it fail with EFBIG, SIGXFSZ
// ignored), as writes fail with ENOSPC on a full disk.
#include <sys/resource.h>

#include <csignal>

namespace trlx::test {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    prev_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit l = saved_;
    l.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &l);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, prev_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*prev_handler_)(int) = SIG_DFL;
};

}  // namespace trlx::test

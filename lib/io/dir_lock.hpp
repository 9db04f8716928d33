#pragma once
// One run per output directory: a lock file (`.trlx-run.lock`) held with a
// POSIX record lock for as long as the run writes there. A second run on the
// same directory learns at once who holds it, instead of both runs renaming
// each other's checkpoints. The operating system drops the lock when the
// holder exits, however it exits (kill -9 included), so a crashed run never
// leaves the directory locked; the file itself stays, harmless.
#include <filesystem>
#include <optional>
#include <string>

namespace trlx::io {

class DirectoryLock {
 public:
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock();  // releases the lock

  // Takes the lock of `dir` (which must exist), writing who holds it: this
  // process id, host, start time and `what`. Held elsewhere: nullopt, and
  // `holder` (when given) gets what the holder wrote. trlx::Error when the
  // lock file cannot be opened or locked for another reason.
  static std::optional<DirectoryLock> try_lock(const std::filesystem::path& dir, const std::string& what,
                                               std::string* holder = nullptr);

 private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace trlx::io

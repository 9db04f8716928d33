// One run per output directory: the `.trlx-run.lock` file held with a POSIX record lock.
#include "io/dir_lock.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"

namespace trlx::io {

namespace {

constexpr const char* kLockName = ".trlx-run.lock";

std::string read_all(int fd) {
  std::string out;
  char buf[512];
  ::lseek(fd, 0, SEEK_SET);
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\0')) out.pop_back();
  return out;
}

}  // namespace

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the record lock
}

std::optional<DirectoryLock> DirectoryLock::try_lock(const std::filesystem::path& dir, const std::string& what,
                                                     std::string* holder) {
  const auto path = dir / kLockName;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("{}: cannot open the run lock: {}", path.string(), std::strerror(errno)));
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &l) != 0) {
    const int err = errno;
    if (err == EACCES || err == EAGAIN) {
      if (holder) *holder = read_all(fd);
      ::close(fd);
      return std::nullopt;
    }
    ::close(fd);
    throw Error(fmt::format("{}: cannot lock: {}", path.string(), std::strerror(err)));
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[64] = {0};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  const std::string text = fmt::format("pid {} on {}, started {}: {}\n", ::getpid(), host, when, what);
  if (::ftruncate(fd, 0) == 0) {
    ::lseek(fd, 0, SEEK_SET);
    [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
  }
  return DirectoryLock(fd);
}

}  // namespace trlx::io

// Crash-safe replacement of files and directories (see atomic_write.hpp).
#include "io/atomic_write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

namespace trlx::io {

namespace {

constexpr size_t kBufferSize = 1 << 20;

std::filesystem::path parent_of(const std::filesystem::path& p) {
  auto dir = p.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

void write_all(int fd, const char* data, size_t size, const std::filesystem::path& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed: {}", path.string(), std::strerror(errno));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  static std::atomic<unsigned> counter{0};
  const auto dir = parent_of(target_);
  for (int attempt = 0;; ++attempt) {
    temp_ = dir / fmt::format(".{}.tmp-{}-{}", target_.filename().string(), ::getpid(), counter++);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    if (errno != EEXIST || attempt > 100)
      fail("{}: cannot create a temporary file in {}: {}", target_.string(), dir.string(), std::strerror(errno));
  }
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : target_(std::move(o.target_)),
      temp_(std::move(o.temp_)),
      fd_(o.fd_),
      finished_(o.finished_),
      committed_(o.committed_),
      buffer_(std::move(o.buffer_)) {
  o.fd_ = -1;
  o.committed_ = true;  // the moved-from object owns nothing
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::flush_buffer() {
  if (!buffer_.empty()) {
    write_all(fd_, buffer_.data(), buffer_.size(), temp_);
    buffer_.clear();
  }
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) fail("{}: write after the file was finished", target_.string());
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + size <= kBufferSize) {
    buffer_.append(p, size);
    return;
  }
  flush_buffer();
  if (size >= kBufferSize) {
    write_all(fd_, p, size, temp_);
  } else {
    buffer_.append(p, size);
  }
}

void AtomicFile::finish() {
  if (finished_) return;
  flush_buffer();
  if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", temp_.string(), std::strerror(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("{}: close failed: {}", temp_.string(), std::strerror(errno));
  }
  fd_ = -1;
  finished_ = true;
}

void AtomicFile::commit() {
  finish();
  rename_file(temp_, target_);
  committed_ = true;
  fsync_directory(parent_of(target_));
}

void write_file_atomic(const std::filesystem::path& target, std::string_view contents) {
  AtomicFile f(target);
  f.write(contents);
  f.commit();
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open directory to sync it: {}", dir.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory; the rename itself was done.
  if (rc != 0 && e != EINVAL && e != EROFS)
    fail("{}: directory fsync failed: {}", dir.string(), std::strerror(e));
}

void rename_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail("cannot rename {} to {}: {}", from.string(), to.string(), std::strerror(errno));
}

void remove_file(const std::filesystem::path& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    fail("cannot remove {}: {}", path.string(), std::strerror(errno));
}

void swap_in_directory(const std::filesystem::path& tmp, const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const fs::path parent = target.parent_path();
  const fs::path old = parent / fmt::format(".{}.old-{}", target.filename().string(), ::getpid());
  const bool had_old = fs::exists(target);
  if (had_old) fs::rename(target, old);
  try {
    fs::rename(tmp, target);
  } catch (...) {
    std::error_code ec;
    if (had_old && !fs::exists(target, ec)) fs::rename(old, target, ec);
    throw;
  }
  fsync_directory(parent);
  if (had_old) fs::remove_all(old);
}

}  // namespace trlx::io

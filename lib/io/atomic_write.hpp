#pragma once
// Crash-safe file replacement: write under a temporary name in the target's
// directory, fsync, rename over the target, fsync the directory. A reader (or
// a crash) sees either the old file or the complete new one, never a torn
// one; an existing file that someone has memory-mapped keeps its old inode.
//
// I/O failures (disk full, permissions) throw trlx::Error (exit code 1).
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace trlx::io {

class AtomicFile {
 public:
  // Creates "<dir>/.<name>.tmp-<pid>-<n>" next to `target` (exclusively).
  explicit AtomicFile(std::filesystem::path target);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // An uncommitted file is closed and its temporary removed.
  ~AtomicFile();

  void write(const void* data, size_t size);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Flushes, fsyncs and closes the temporary; the target is untouched. For
  // writers that rename several files together (sharded checkpoints).
  void finish();
  // Renames the (finished) temporary over the target and fsyncs the directory.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temp_path() const { return temp_; }

 private:
  void flush_buffer();

  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool finished_ = false;
  bool committed_ = false;
  std::string buffer_;
};

// Writes `contents` to `target` through an AtomicFile.
void write_file_atomic(const std::filesystem::path& target, std::string_view contents);

// Makes renames and unlinks in `dir` durable.
void fsync_directory(const std::filesystem::path& dir);

// Renames without a directory fsync (callers batch them and fsync once).
void rename_file(const std::filesystem::path& from, const std::filesystem::path& to);

// Removes `path` if it exists (no error when absent).
void remove_file(const std::filesystem::path& path);

// Puts the complete directory `tmp` (beside `target`, in the same parent) in
// place of `target`. An existing `target` is moved aside first and removed
// only once the new one has its name, and moved back if that rename fails, so
// a crash leaves the old directory or the new one in place (between the two
// renames, the old one under ".<name>.old-<pid>"). Fsyncs the parent.
void swap_in_directory(const std::filesystem::path& tmp, const std::filesystem::path& target);

}  // namespace trlx::io

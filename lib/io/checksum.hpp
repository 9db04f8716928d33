#pragma once
// Checksums of a checkpoint's files: a manifest written last, checked
// before a resume reads anything, so that a damaged file is named at load
// instead of training on (or failing steps later with) what it holds.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace trlx::io {

// zlib's CRC-32 of a file's bytes (what Python's zlib.crc32 gives).
uint32_t file_crc32(const std::filesystem::path& file);

inline constexpr const char* kManifestName = "checkpoint_manifest.json";

// Writes dir/checkpoint_manifest.json (atomically): every regular file under
// `dir`, recursively, but the manifest itself, with its size and CRC-32.
void write_manifest(const std::filesystem::path& dir);

struct ManifestCheck {
  enum class Status { Ok, NoManifest, Damaged } status = Status::Ok;
  std::filesystem::path file;  // Damaged: the first file that differs
  std::string why;             // Damaged: in words (missing, size, checksum)
};
// Checks the files under `dir` the manifest lists and `wanted` (given the
// path relative to `dir`) picks; files the manifest does not list are not
// read. A manifest that cannot be parsed is Damaged.
ManifestCheck check_manifest(const std::filesystem::path& dir,
                             const std::function<bool(const std::string& relative)>& wanted);

}  // namespace trlx::io

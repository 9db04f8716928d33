// A checkpoint's manifest: file sizes and CRC-32s, written last, checked before resume.
#include "io/checksum.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/atomic_write.hpp"

namespace trlx::io {

namespace fs = std::filesystem;

uint32_t file_crc32(const fs::path& file) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(file.c_str(), "rb"), &std::fclose);
  if (!f) throw Error(fmt::format("{}: cannot be read for its checksum", file.string()));
  std::vector<unsigned char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    if (n > 0) crc = crc32_z(crc, buf.data(), n);
    if (n < buf.size()) break;
  }
  if (std::ferror(f.get())) throw Error(fmt::format("{}: read error while computing its checksum", file.string()));
  return static_cast<uint32_t>(crc);
}

void write_manifest(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    if (rel != kManifestName) files.push_back(rel);
  }
  std::sort(files.begin(), files.end());
  nlohmann::ordered_json listed = nlohmann::ordered_json::object();
  for (const auto& rel : files)
    listed[rel] = {{"bytes", fs::file_size(dir / rel)}, {"crc32", fmt::format("{:08x}", file_crc32(dir / rel))}};
  const nlohmann::ordered_json manifest = {{"algorithm", "crc32 (zlib)"}, {"files", listed}};
  write_file_atomic(dir / kManifestName, manifest.dump(1) + "\n");
}

ManifestCheck check_manifest(const fs::path& dir, const std::function<bool(const std::string&)>& wanted) {
  ManifestCheck out;
  const fs::path path = dir / kManifestName;
  std::ifstream in(path);
  if (!in) {
    out.status = ManifestCheck::Status::NoManifest;
    return out;
  }
  auto damaged = [&](const fs::path& file, std::string why) {
    out.status = ManifestCheck::Status::Damaged;
    out.file = file;
    out.why = std::move(why);
    return out;
  };
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
    for (const auto& [rel, entry] : manifest.at("files").items()) {
      if (!wanted(rel)) continue;
      const fs::path file = dir / rel;
      std::error_code ec;
      if (!fs::is_regular_file(file, ec)) return damaged(file, "it is missing");
      const auto bytes = entry.at("bytes").get<uint64_t>();
      const auto size = fs::file_size(file, ec);
      if (ec || size != bytes)
        return damaged(file, fmt::format("it has {} bytes where the manifest written with it says {}", size, bytes));
      const std::string crc = fmt::format("{:08x}", file_crc32(file));
      if (crc != entry.at("crc32").get<std::string>())
        return damaged(file, fmt::format("its CRC-32 is {} where the manifest written with it says {}", crc,
                                         entry.at("crc32").get<std::string>()));
    }
  } catch (const nlohmann::json::exception& e) {
    return damaged(path, fmt::format("the manifest cannot be read: {}", e.what()));
  }
  return out;
}

}  // namespace trlx::io

// Reference log-probs computed once before training (precompute_ref_log_probs) and cached on disk.
#include "engine/reference_cache.hpp"

#include <algorithm>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/training.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "io/atomic_write.hpp"

namespace trlx::engine {

namespace fs = std::filesystem;

void CacheKey::bytes(const void* data, size_t size) {
  const auto* c = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h_ ^= c[i];
    h_ *= 1099511628211ULL;
  }
}

void CacheKey::text(const std::string& s) {
  const uint64_t n = s.size();
  bytes(&n, sizeof n);
  bytes(s.data(), s.size());
}

void CacheKey::ids(const std::vector<int64_t>& v) {
  const uint64_t n = v.size();
  bytes(&n, sizeof n);
  bytes(v.data(), v.size() * sizeof(int64_t));
}

void CacheKey::file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail_input("{}: cannot be read", p.string());
  text(p.filename().string());
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    bytes(buf.data(), static_cast<size_t>(in.gcount()));
  }
}

std::string CacheKey::hex() const { return fmt::format("{:016x}", h_); }

const std::vector<double>& CachedValues::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return values[i];
  throw Error(fmt::format("reference values have no column `{}`", name));
}

namespace {

// The cached values when the file holds this key and every column in full.
std::optional<CachedValues> read_cache(const fs::path& path, const std::string& split, const std::string& key,
                                       size_t n, const std::vector<std::string>& columns) {
  if (!fs::exists(path)) return std::nullopt;
  try {
    std::ifstream in(path);
    auto j = nlohmann::json::parse(in);
    if (j.value("key", "") != key) {
      log::info("{} split: {} was made for other data or another reference model; recomputing", split, path.string());
      return std::nullopt;
    }
    CachedValues out{columns, {}};
    for (const auto& c : columns) {
      out.values.push_back(j.at(c).get<std::vector<double>>());
      if (out.values.back().size() != n) return std::nullopt;
    }
    return out;
  } catch (const std::exception& e) {
    log::warn("{}: unreadable reference cache ({}); recomputing", path.string(), e.what());
    return std::nullopt;
  }
}

CachedValues compute(Engine& engine, size_t n, const std::vector<std::string>& columns, size_t batch_size,
                     const BatchValues& batch_values) {
  const size_t width = columns.size();
  // Data rank r computes batches r, r + data_size, ... and the ranks' values,
  // gathered, are put back in example order. Every rank runs the same number
  // of forwards (a sharded model gathers in each): one without a batch in the
  // last round recomputes the first and keeps nothing. The ranks of a
  // sequence-parallel group compute the same batches together; the first of
  // them sends the values.
  const size_t w = static_cast<size_t>(engine.data_size());
  const size_t seq = static_cast<size_t>(engine.world_size()) / w;
  const bool sends = static_cast<size_t>(engine.rank()) % seq == 0;
  const size_t num_batches = (n + batch_size - 1) / batch_size, rounds = (num_batches + w - 1) / w;
  auto rows_of = [&](size_t batch_no) {
    const size_t first = batch_no * batch_size;
    return std::make_pair(first, std::min(n, first + batch_size));
  };
  std::vector<double> mine;
  for (size_t round = 0; round < rounds; ++round) {
    const size_t batch_no = round * w + static_cast<size_t>(engine.data_rank());
    const bool stand_in = batch_no >= num_batches;
    const auto [first, end] = rows_of(stand_in ? 0 : batch_no);
    std::vector<size_t> idx;
    for (size_t i = first; i < end; ++i) idx.push_back(i);
    const auto v = batch_values(idx);
    if (v.size() != idx.size() * width)
      throw Error(fmt::format("reference values: {} values for a batch of {} examples x {} columns", v.size(),
                              idx.size(), width));
    if (!stand_in && sends) mine.insert(mine.end(), v.begin(), v.end());
  }
  const auto each = engine.gather_across_ranks(mine);
  CachedValues out{columns, std::vector<std::vector<double>>(width, std::vector<double>(n))};
  for (size_t r = 0; r < w; ++r) {
    const auto& theirs = each[r * seq];
    size_t at = 0;
    for (size_t batch_no = r; batch_no < num_batches; batch_no += w) {
      const auto [first, end] = rows_of(batch_no);
      if (theirs.size() < at + (end - first) * width)
        throw Error(fmt::format("reference values: rank {} sent {} values, fewer than its batches hold", r,
                                theirs.size()));
      for (size_t i = first; i < end; ++i)
        for (size_t c = 0; c < width; ++c) out.values[c][i] = theirs[at++];
    }
  }
  return out;
}

}  // namespace

CachedValues cached_reference_values(Engine& engine, const std::string& name, const std::string& split,
                                     const std::string& key, size_t num_examples,
                                     const std::vector<std::string>& columns, size_t batch_size,
                                     const BatchValues& batch_values) {
  const fs::path path =
      fs::path(engine.config().output_dir.value_or("trainer_output")) / fmt::format("{}_{}.json", name, split);
  auto cached = read_cache(path, split, key, num_examples, columns);
  // Every rank must take the same road: computing runs collectives.
  std::vector<double> found = {cached ? 1.0 : 0.0};
  engine.sum_across_ranks(found);
  if (found[0] == static_cast<double>(engine.world_size())) {
    log::info("{} split: reference log-probs read from {} (cache key {})", split, path.string(), key);
    return std::move(*cached);
  }
  log::info("{} split: computing reference log-probs of {} examples", split, num_examples);
  const bool was_training = engine.training();
  engine.set_training(false);
  CachedValues out;
  {
    torch::NoGradGuard no_grad;
    out = compute(engine, num_examples, columns, std::max<size_t>(1, batch_size), batch_values);
  }
  engine.set_training(was_training);
  if (engine.rank() == 0) {
    nlohmann::json j = {{"key", key}};
    for (size_t c = 0; c < columns.size(); ++c) j[columns[c]] = out.values[c];
    fs::create_directories(path.parent_path());
    io::write_file_atomic(path, j.dump());
    log::info("{} split: reference log-probs cached in {}", split, path.string());
  }
  return out;
}

}  // namespace trlx::engine

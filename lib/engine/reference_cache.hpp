#pragma once
// Reference numbers computed once, before training (TRL's
// precompute_ref_log_probs): a few values per example of a split, from
// forwards of the frozen reference, kept beside the run's outputs so that a
// rerun or a resumed run with the same data and reference reads them instead
// of running the reference again. Any trainer with a reference can use it;
// the trainer says what one batch's values are and what they depend on.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace trlx::engine {

class Engine;

// What cached values depend on (data, reference weights, settings), hashed
// (FNV-1a, 64 bits: enough to tell a stale cache from a current one).
class CacheKey {
 public:
  void bytes(const void* data, size_t size);
  void text(const std::string& s);
  void ids(const std::vector<int64_t>& v);
  // A file's name and contents.
  void file(const std::filesystem::path& path);
  std::string hex() const;

 private:
  uint64_t h_ = 1469598103934665603ULL;
};

struct CachedValues {
  std::vector<std::string> columns;
  std::vector<std::vector<double>> values;  // [column][example]
  const std::vector<double>& column(const std::string& name) const;
};

// The values of one batch: for each example of `indices` (in order), one
// value per column, example after example.
using BatchValues = std::function<std::vector<double>(const std::vector<size_t>& indices)>;

// The `columns` of every one of the split's `num_examples` examples: read from
// <output_dir>/<name>_<split>.json when every rank finds it there with this
// `key`, else computed (in evaluation mode, without a graph, each rank taking
// every world_size-th batch of `batch_size` examples) and written there
// atomically by rank 0. Every rank calls it.
CachedValues cached_reference_values(Engine& engine, const std::string& name, const std::string& split,
                                     const std::string& key, size_t num_examples,
                                     const std::vector<std::string>& columns, size_t batch_size,
                                     const BatchValues& compute);

}  // namespace trlx::engine

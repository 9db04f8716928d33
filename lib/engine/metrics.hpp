#pragma once
// Metrics of micro-batches as sums and counts, so that a logging window's
// average is taken the way the reference trainer takes it, over ranks and
// accumulation alike.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace trlx::engine {

struct MetricSums {
  // Pooled: name -> (sum, count) over the whole window, so the mean weighs
  // every token (or row) equally.
  std::map<std::string, std::pair<double, double>> values;
  // Per micro-batch: name -> micro-batch index in the window -> (sum, count)
  // summed over ranks; the mean is the average of the micro-batches' ratios
  // (SFT's mean_token_accuracy and entropy, which TRL appends once per
  // micro-batch and averages at logging).
  std::map<std::string, std::map<int64_t, std::pair<double, double>>> per_batch;
  // How many micro-batches were merged in (a loss's own sums count as one).
  int64_t batches = 0;

  void add(const std::string& name, double sum, double count) {
    auto& v = values[name];
    v.first += sum;
    v.second += count;
  }
  // In a loss's own sums: this micro-batch's value of a per-batch metric.
  void add_per_batch(const std::string& name, double sum, double count) {
    auto& v = per_batch[name][0];
    v.first += sum;
    v.second += count;
  }
  // Adds `o` (one micro-batch's sums, or a window's) after what is here.
  void merge(const MetricSums& o) {
    for (const auto& [k, v] : o.values) add(k, v.first, v.second);
    for (const auto& [k, entries] : o.per_batch)
      for (const auto& [i, v] : entries) {
        auto& mine = per_batch[k][batches + i];
        mine.first += v.first;
        mine.second += v.second;
      }
    batches += o.batches > 0 ? o.batches : 1;
  }
  // A micro-batch this rank computed no metrics for (a stand-in), so that
  // the indices of later micro-batches stay the same on every rank.
  void skip_batch() { ++batches; }

  std::optional<double> mean(const std::string& name) const {
    if (auto it = values.find(name); it != values.end()) return it->second.first / std::max(1.0, it->second.second);
    auto it = per_batch.find(name);
    if (it == per_batch.end() || it->second.empty()) return std::nullopt;
    double total = 0;
    for (const auto& [i, v] : it->second) total += v.second > 0 ? v.first / v.second : 0.0;
    return total / static_cast<double>(it->second.size());
  }
  std::map<std::string, double> means() const {
    std::map<std::string, double> out;
    for (const auto& [k, v] : values) out[k] = *mean(k);
    for (const auto& [k, v] : per_batch)
      if (auto m = mean(k)) out[k] = *m;
    return out;
  }
};

}  // namespace trlx::engine

#pragma once
// Metrics of micro-batches as sums and counts, so that a logging window's
// average is taken the way the reference trainer takes it, over ranks and
// accumulation alike. Sums may stay tensors on the device until they are
// read (at a logging step), so that a micro-batch's metrics cost no device
// synchronisation; every pending tensor is then read in one transfer.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace trlx::dist {
class Communicator;
}

namespace trlx::engine {

// How an entry (see MetricSums::entries) combines over ranks.
enum class EntryReduce {
  Same,  // computed from values gathered over ranks: the same on every rank
  Max,   // this rank's largest; the largest over ranks
  Min,   // this rank's smallest; the smallest over ranks
};

struct MetricSums {
  // Pooled: name -> (sum, count) over the whole window, so the mean weighs
  // every token (or row) equally.
  std::map<std::string, std::pair<double, double>> values;
  // Per micro-batch: name -> micro-batch index in the window -> (sum, count)
  // summed over ranks; the mean is the average of the micro-batches' ratios
  // (SFT's mean_token_accuracy and entropy, which TRL appends once per
  // micro-batch and averages at logging).
  std::map<std::string, std::map<int64_t, std::pair<double, double>>> per_batch;
  // Per-batch metrics whose micro-batches without items (count 0 over all
  // ranks) are left out of the mean instead of counting as 0: the reference
  // appends a value only when there is one (KTO's rewards/chosen when a
  // micro-batch holds no desirable row).
  std::set<std::string> skip_empty;
  // name -> (a, b): over the micro-batches where per-batch metrics a and b
  // both have items, the mean of a's ratio minus b's (KTO's rewards/margins).
  std::map<std::string, std::pair<std::string, std::string>> differences;
  // Entries: one value per event (a generation round, a micro-batch), the
  // mean over the window's entries that are not NaN (the online trainers'
  // reward, completion-length and min/max metrics, which TRL appends once
  // per event and averages, NaN left out, at logging).
  struct Entry {
    double value;
    EntryReduce reduce;
  };
  std::map<std::string, std::map<int64_t, Entry>> entries;
  // How many micro-batches were merged in (a loss's own sums count as one).
  int64_t batches = 0;
  // Device sums and counts not read yet, kept as `values` and `per_batch`
  // are (read() moves them there).
  using Pending = std::pair<torch::Tensor, torch::Tensor>;
  mutable std::map<std::string, Pending> pending;
  mutable std::map<std::string, std::map<int64_t, Pending>> pending_per_batch;
  mutable std::map<std::string, std::map<int64_t, std::pair<torch::Tensor, EntryReduce>>> pending_entries;

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
  // The same with device tensors (0-d), read later.
  void add(const std::string& name, const torch::Tensor& sum, const torch::Tensor& count) {
    accumulate(pending[name], sum, count);
  }
  // A device sum over `count` items known on the host.
  void add(const std::string& name, const torch::Tensor& sum, double count) {
    add(name, sum, torch::full({}, count, sum.options().dtype(torch::kFloat64)));
  }
  void add_per_batch(const std::string& name, const torch::Tensor& sum, const torch::Tensor& count) {
    accumulate(pending_per_batch[name][0], sum, count);
  }
  // The same, leaving micro-batches without items out of the mean.
  void add_per_batch_nonempty(const std::string& name, const torch::Tensor& sum, const torch::Tensor& count) {
    skip_empty.insert(name);
    add_per_batch(name, sum, count);
  }
  // Logs `name` as the mean difference of two per-batch metrics (see differences).
  void add_difference(const std::string& name, const std::string& a, const std::string& b) { differences[name] = {a, b}; }
  // In a loss's (or a round's) own sums: this event's value of an entry metric.
  void add_entry(const std::string& name, double value, EntryReduce reduce = EntryReduce::Same) {
    entries[name][0] = {value, reduce};
  }
  void add_entry(const std::string& name, const torch::Tensor& value, EntryReduce reduce) {
    pending_entries[name][0] = {value.detach(), reduce};
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
    for (const auto& [k, v] : o.pending) accumulate(pending[k], v.first, v.second);
    for (const auto& [k, entries] : o.pending_per_batch)
      for (const auto& [i, v] : entries) accumulate(pending_per_batch[k][batches + i], v.first, v.second);
    for (const auto& [k, e] : o.entries)
      for (const auto& [i, v] : e) entries[k][batches + i] = v;
    for (const auto& [k, e] : o.pending_entries)
      for (const auto& [i, v] : e) pending_entries[k][batches + i] = v;
    skip_empty.insert(o.skip_empty.begin(), o.skip_empty.end());
    differences.insert(o.differences.begin(), o.differences.end());
    batches += o.batches > 0 ? o.batches : 1;
  }
  // Moves every pending device sum into `values` and `per_batch`, reading
  // them all in one transfer.
  void read() const {
    if (pending.empty() && pending_per_batch.empty() && pending_entries.empty()) return;
    std::vector<torch::Tensor> parts;
    for (const auto& [k, v] : pending) parts.insert(parts.end(), {v.first, v.second});
    for (const auto& [k, entries] : pending_per_batch)
      for (const auto& [i, v] : entries) parts.insert(parts.end(), {v.first, v.second});
    for (const auto& [k, e] : pending_entries)
      for (const auto& [i, v] : e) parts.push_back(v.first);
    const auto device = parts.front().device();
    for (auto& t : parts) t = t.detach().reshape({}).to(device, torch::kFloat64);
    const auto host = torch::stack(parts).cpu();
    const double* h = host.data_ptr<double>();
    auto& self = const_cast<MetricSums&>(*this);
    size_t n = 0;
    for (const auto& [k, v] : pending) {
      self.add(k, h[n], h[n + 1]);
      n += 2;
    }
    for (const auto& [k, entries] : pending_per_batch)
      for (const auto& [i, v] : entries) {
        auto& mine = self.per_batch[k][i];
        mine.first += h[n];
        mine.second += h[n + 1];
        n += 2;
      }
    for (const auto& [k, e] : pending_entries)
      for (const auto& [i, v] : e) self.entries[k][i] = {h[n++], v.second};
    pending.clear();
    pending_per_batch.clear();
    pending_entries.clear();
  }
  // A micro-batch this rank computed no metrics for (a stand-in), so that
  // the indices of later micro-batches stay the same on every rank.
  void skip_batch() { ++batches; }

  std::optional<double> mean(const std::string& name) const {
    read();
    if (auto it = values.find(name); it != values.end()) return it->second.first / std::max(1.0, it->second.second);
    if (auto e = entries.find(name); e != entries.end()) {
      double total = 0, n = 0;
      for (const auto& [i, v] : e->second)
        if (!std::isnan(v.value)) total += v.value, n += 1;
      if (n == 0) return std::nullopt;  // every entry NaN: not logged
      return total / n;
    }
    if (auto d = differences.find(name); d != differences.end()) {
      auto a = per_batch.find(d->second.first), b = per_batch.find(d->second.second);
      if (a == per_batch.end() || b == per_batch.end()) return std::nullopt;
      double total = 0, n = 0;
      for (const auto& [i, va] : a->second) {
        auto vb = b->second.find(i);
        if (va.second > 0 && vb != b->second.end() && vb->second.second > 0)
          total += va.first / va.second - vb->second.first / vb->second.second, n += 1;
      }
      if (n == 0) return std::nullopt;
      return total / n;
    }
    auto it = per_batch.find(name);
    if (it == per_batch.end() || it->second.empty()) return std::nullopt;
    const bool skip = skip_empty.count(name) > 0;
    double total = 0, n = 0;
    for (const auto& [i, v] : it->second) {
      if (skip && v.second <= 0) continue;
      total += v.second > 0 ? v.first / v.second : 0.0;
      n += 1;
    }
    if (n == 0) return std::nullopt;
    return total / n;
  }
  std::map<std::string, double> means() const {
    read();
    std::map<std::string, double> out;
    for (const auto& [k, v] : values) out[k] = *mean(k);
    for (const auto& [k, v] : per_batch)
      if (auto m = mean(k)) out[k] = *m;
    for (const auto& [k, v] : entries)
      if (auto m = mean(k)) out[k] = *m;
    for (const auto& [k, v] : differences)
      if (auto m = mean(k)) out[k] = *m;
    return out;
  }

 private:
  static void accumulate(Pending& into, const torch::Tensor& sum, const torch::Tensor& count) {
    auto s = sum.detach(), c = count.detach();
    into.first = into.first.defined() ? into.first + s : s;
    into.second = into.second.defined() ? into.second + c : c;
  }
};

// Sums `m`'s values and per-batch sums over the ranks of `comm` and takes
// its extreme entries' extremes, so that every rank holds the window's
// global metrics. Ranks may hold different names and micro-batch indices (a
// rank that stood in for a micro-batch has none of its metrics): the union
// is reduced, a missing value counting as nothing.
void reduce_over_ranks(dist::Communicator& comm, MetricSums& m);

}  // namespace trlx::engine

#include "engine/shared_prefix.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace trlx::engine {

double forward_cost(double rows, double length) { return rows * length * (1.0 + length / 2048.0); }

TensorMap share_prefixes(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                         const std::vector<std::vector<int64_t>>& groups, int64_t pad_id, const ShareOptions& options) {
  TORCH_CHECK(input_ids.dim() == 2 && attention_mask.sizes() == input_ids.sizes(),
              "share_prefixes: input_ids and attention_mask must be [N, T] alike");
  const auto ids_t = input_ids.to(torch::kCPU, torch::kInt64).contiguous();
  const auto attn_t = attention_mask.to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t n = ids_t.size(0), t = ids_t.size(1);
  const auto* ids = ids_t.data_ptr<int64_t>();
  const auto* attn = attn_t.data_ptr<int64_t>();

  // Each row's real length; a row whose padding does not trail its tokens
  // (left padding) is not shared.
  std::vector<int64_t> len(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t* a = attn + r * t;
    int64_t l = 0;
    while (l < t && a[l] != 0) ++l;
    for (int64_t s = l; s < t; ++s)
      if (a[s] != 0) return {};
    len[static_cast<size_t>(r)] = l;
  }
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (const auto& g : groups) {
    TORCH_CHECK(!g.empty(), "share_prefixes: an empty group");
    for (int64_t r : g) {
      TORCH_CHECK(r >= 0 && r < n, "share_prefixes: row ", r, " out of ", n);
      TORCH_CHECK(!seen[static_cast<size_t>(r)]++, "share_prefixes: row ", r, " in two groups");
    }
  }
  TORCH_CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }),
              "share_prefixes: every row must be in a group");

  // Each group's common start and packed length.
  const auto kept = [&](int64_t r) { return options.keep_padding ? t : len[static_cast<size_t>(r)]; };
  std::vector<int64_t> prefix(groups.size(), 0);
  int64_t width = 1;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& g = groups[gi];
    int64_t p = len[static_cast<size_t>(g[0])];
    for (size_t m = 1; m < g.size(); ++m) {
      const int64_t r = g[m];
      p = std::min(p, len[static_cast<size_t>(r)]);
      int64_t s = 0;
      while (s < p && ids[r * t + s] == ids[g[0] * t + s]) ++s;
      p = s;
    }
    prefix[gi] = p;
    int64_t l = p;
    for (int64_t r : g) l += kept(r) - p;
    width = std::max(width, l);
  }
  const double rows = static_cast<double>(groups.size());
  const double bound = options.max_cost.value_or(0.9 * forward_cost(static_cast<double>(n), static_cast<double>(t)));
  if (forward_cost(rows, static_cast<double>(width)) > bound) return {};

  const int64_t g_rows = static_cast<int64_t>(groups.size());
  auto out_ids = torch::full({g_rows, width}, pad_id, torch::kInt64);
  auto out_attn = torch::zeros({g_rows, width}, torch::kInt64);
  auto out_pos = torch::zeros({g_rows, width}, torch::kInt64);
  auto index = torch::empty({n, t}, torch::kInt64);
  auto* oi = out_ids.data_ptr<int64_t>();
  auto* oa = out_attn.data_ptr<int64_t>();
  auto* op = out_pos.data_ptr<int64_t>();
  auto* ox = index.data_ptr<int64_t>();
  for (int64_t gi = 0; gi < g_rows; ++gi) {
    const auto& g = groups[static_cast<size_t>(gi)];
    const int64_t base = gi * width, p = prefix[static_cast<size_t>(gi)];
    for (int64_t s = 0; s < p; ++s) {
      oi[base + s] = ids[g[0] * t + s];
      oa[base + s] = 1;
      op[base + s] = s;
    }
    int64_t cursor = p;
    for (int64_t r : g) {
      // The member's remainder (and kept padding) at its own positions.
      const int64_t start = cursor, end = kept(r);
      for (int64_t s = p; s < end; ++s, ++cursor) {
        oi[base + cursor] = ids[r * t + s];
        oa[base + cursor] = attn[r * t + s];
        op[base + cursor] = s;
      }
      int64_t* row_index = ox + r * t;
      for (int64_t s = 0; s < t; ++s)
        row_index[s] = base + (s < p ? s : s < end ? start + (s - p) : 0);
    }
  }
  const auto& k = options.key_prefix;
  return {{k + "shared_input_ids", out_ids},
          {k + "shared_attention_mask", out_attn},
          {k + "shared_position_ids", out_pos},
          {k + "shared_document_ids", torch::zeros({g_rows, width}, torch::kInt64)},
          {k + "shared_index", index.view({-1})}};
}

std::vector<std::vector<int64_t>> pair_groups(int64_t pairs) {
  std::vector<std::vector<int64_t>> g;
  for (int64_t r = 0; r < pairs; ++r) g.push_back({r, pairs + r});
  return g;
}

torch::Tensor forward_shared(Engine& engine, Role role, const TensorMap& batch, const std::string& key_prefix,
                             int64_t rows, int64_t width) {
  const auto& k = key_prefix;
  auto hs = engine.forward(role, {batch.at(k + "shared_input_ids"), batch.at(k + "shared_attention_mask"),
                                  batch.at(k + "shared_position_ids"), batch.at(k + "shared_document_ids")});
  const int64_t h = hs.size(-1);
  return hs.reshape({-1, h}).index_select(0, batch.at(k + "shared_index").to(hs.device())).view({rows, width, h});
}

torch::Tensor forward_rows(Engine& engine, Role role, const TensorMap& batch, const std::string& key_prefix) {
  const auto& ids = batch.at(key_prefix + "input_ids");
  if (batch.count(key_prefix + "shared_input_ids"))
    return forward_shared(engine, role, batch, key_prefix, ids.size(0), ids.size(1));
  return engine.forward(role, {ids, batch.at(key_prefix + "attention_mask"), torch::Tensor(), torch::Tensor()});
}

}  // namespace trlx::engine

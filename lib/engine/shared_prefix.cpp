// Rows that start with the same tokens run those tokens through the model once.
#include "engine/shared_prefix.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "engine/engine.hpp"

namespace trlx::engine {

double forward_cost(double rows, double length) { return rows * length * (1.0 + length / 2048.0); }

std::vector<int64_t> first_predicting(const torch::Tensor& target_mask) {
  TORCH_CHECK(target_mask.dim() == 2, "first_predicting: a [N, T] mask");
  const auto m = target_mask.to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t n = m.size(0), t = m.size(1);
  const auto* p = m.data_ptr<int64_t>();
  std::vector<int64_t> out(static_cast<size_t>(n), t);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < t; ++j)
      if (p[r * t + j]) {
        out[static_cast<size_t>(r)] = std::max<int64_t>(j - 1, 0);
        break;
      }
  return out;
}

TensorMap rows_outputs_from(const std::vector<int64_t>& wanted_from, int64_t length, const std::string& key_prefix) {
  if (wanted_from.empty()) return {};
  // A row that wants nothing (length) leaves the others to decide; all of them: no cut.
  const int64_t from = *std::min_element(wanted_from.begin(), wanted_from.end());
  if (from <= 0 || from >= length) return {};
  return {{key_prefix + "outputs_from", host_count(from)}};
}

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
      if (a[s] != 0) return rows_outputs_from(options.wanted_from, t, options.key_prefix);
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
  const auto& wanted = options.wanted_from;
  TORCH_CHECK(wanted.empty() || static_cast<int64_t>(wanted.size()) == n, "share_prefixes: wanted_from needs one entry per row");
  for (int64_t w : wanted) TORCH_CHECK(w >= 0 && w <= t, "share_prefixes: wanted_from ", w, " outside [0, ", t, "]");

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
  if (forward_cost(rows, static_cast<double>(width)) > bound) return rows_outputs_from(wanted, t, options.key_prefix);

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
  TensorMap out = {{k + "shared_input_ids", out_ids},
                   {k + "shared_attention_mask", out_attn},
                   {k + "shared_position_ids", out_pos},
                   {k + "shared_document_ids", torch::zeros({g_rows, width}, torch::kInt64)}};
  // The first packed slot any row reads; slots are counted from there, and
  // what no row reads maps to a zero row after the packed ones.
  int64_t from = width;
  std::vector<int64_t> group_of(static_cast<size_t>(n));
  for (int64_t gi = 0; gi < g_rows; ++gi)
    for (int64_t r : groups[static_cast<size_t>(gi)]) group_of[static_cast<size_t>(r)] = gi;
  for (int64_t r = 0; r < n && !wanted.empty(); ++r) {
    const int64_t w = wanted[static_cast<size_t>(r)];
    if (w < len[static_cast<size_t>(r)] || (options.keep_padding && w < t))
      from = std::min(from, ox[r * t + w] - group_of[static_cast<size_t>(r)] * width);
  }
  if (from > 0 && from < width) {
    const int64_t kept_width = width - from, zero_row = g_rows * kept_width;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t gi = group_of[static_cast<size_t>(r)], w = wanted[static_cast<size_t>(r)];
      for (int64_t s = 0; s < t; ++s) {
        const int64_t slot = ox[r * t + s] - gi * width;
        ox[r * t + s] = s < w || slot < from ? zero_row : gi * kept_width + slot - from;
      }
    }
    out[k + "shared_outputs_from"] = host_count(from);
  }
  out[k + "shared_index"] = index.view({-1});
  return out;
}

std::vector<std::vector<int64_t>> pair_groups(int64_t pairs) {
  std::vector<std::vector<int64_t>> g;
  for (int64_t r = 0; r < pairs; ++r) g.push_back({r, pairs + r});
  return g;
}

torch::Tensor forward_shared(Engine& engine, Role role, const TensorMap& batch, const std::string& key_prefix,
                             int64_t rows, int64_t width) {
  const auto& k = key_prefix;
  model::Batch in{batch.at(k + "shared_input_ids"), batch.at(k + "shared_attention_mask"),
                  batch.at(k + "shared_position_ids"), batch.at(k + "shared_document_ids")};
  in.outputs_from = host_count(batch, k + "shared_outputs_from");
  auto hs = engine.forward(role, in);
  const int64_t h = hs.size(-1);
  auto flat = hs.reshape({-1, h});
  if (in.outputs_from > 0) flat = torch::cat({flat, torch::zeros({1, h}, flat.options())});
  return flat.index_select(0, batch.at(k + "shared_index").to(hs.device())).view({rows, width, h});
}

torch::Tensor forward_rows(Engine& engine, Role role, const TensorMap& batch, const std::string& key_prefix) {
  const auto& ids = batch.at(key_prefix + "input_ids");
  if (batch.count(key_prefix + "shared_input_ids"))
    return forward_shared(engine, role, batch, key_prefix, ids.size(0), ids.size(1));
  model::Batch in{ids, batch.at(key_prefix + "attention_mask"), torch::Tensor(), torch::Tensor()};
  in.outputs_from = host_count(batch, key_prefix + "outputs_from");
  auto hs = engine.forward(role, in);
  if (in.outputs_from == 0) return hs;
  // Positions before the first one read: zeros.
  return torch::cat({torch::zeros({hs.size(0), in.outputs_from, hs.size(2)}, hs.options()), hs}, 1);
}

}  // namespace trlx::engine

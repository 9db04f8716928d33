#pragma once

// Rows that start with the same tokens run those tokens through the model
// once. A trainer collates its rows as usual ([N, T], right-padded) and names
// the rows that may share a start (a DPO pair's two answers to one prompt, a
// KTO row and its KL row); share_prefixes packs each group into one row: the
// group's longest common start, then every member's own remainder as a branch
// whose positions go back to where the remainders start (a branch of the
// row's document, see model::Batch::document_ids), so that no remainder sees
// another. forward_rows runs the packed rows and hands back hidden states in
// the collated [N, T] layout, equal to those of a forward over the separate
// rows at every real token (and, with keep_padding, at every padding slot).

#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "engine/trainer.hpp"

namespace trlx::engine {

// Work of a forward over rows x length: the linear layers per token, plus
// attention per token growing with the row (a conservative 1/2048 of the
// linear work per key; real models' ratio is smaller).
double forward_cost(double rows, double length);

struct ShareOptions {
  // Also lay out every member's padding slots (pad id, attention 0, the
  // positions a separate right-padded row gives them: its slot index), so
  // that the hidden states at padding equal a separate row's too. For losses
  // and metrics that read padding (TRL's CPO/ORPO logits means).
  bool keep_padding = false;
  // Share only when the packed rows' forward_cost is at most this; by default
  // 0.9 of the separate rows' cost. Callers that weigh a backward too pass
  // their own bound.
  std::optional<double> max_cost;
  std::string key_prefix;  // the keys' prefix (KTO's "joint_")
  // Per row: the first position whose hidden state the caller reads (T:
  // none), e.g. from first_predicting. Empty: all. The forward then skips the
  // last layer's work before the first such position of the packed rows
  // (model::Batch::outputs_from), and the hidden states handed back are zero
  // before each row's own.
  std::vector<int64_t> wanted_from;
};

// Per row of a [N, T] host mask of target tokens: the position that predicts
// the first target (one before it, at least 0), or T for a row without one.
std::vector<int64_t> first_predicting(const torch::Tensor& target_mask);

// For rows of `length` positions that run as they are: the key
// <prefix>outputs_from (a host_count) holding the first position any row's
// hidden state is read at, when that is inside the rows and past 0 (nothing
// otherwise). forward_rows reads it.
TensorMap rows_outputs_from(const std::vector<int64_t>& wanted_from, int64_t length, const std::string& key_prefix = "");

// input_ids / attention_mask [N, T] on the host, each row's real tokens first.
// Every row appears in at most one group; rows in no group are not allowed
// (a group of one is). Returns the keys <prefix>shared_input_ids,
// shared_attention_mask, shared_position_ids, shared_document_ids [G, L] and
// shared_index [N * T] (for every slot of the collated layout, the flat index
// row * L + slot of the same token in the packed rows; padding not kept
// reads its row's first slot), and with wanted_from, <prefix>shared_outputs_from
// (the index then counts the packed rows' slots from there, and positions not
// wanted read a zero row after them). When sharing would not save work:
// nothing, or with wanted_from, rows_outputs_from's key.
TensorMap share_prefixes(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                         const std::vector<std::vector<int64_t>>& groups, int64_t pad_id, const ShareOptions& options = {});

// Groups {r, pairs + r}: the two rows of each pair in the [2B, T] layout of
// paired trainers (chosen rows, then rejected).
std::vector<std::vector<int64_t>> pair_groups(int64_t pairs);

// Hidden states [N, T, H] of batch's <prefix>input_ids rows: through the packed
// rows when the batch has them, else a forward over the rows themselves.
torch::Tensor forward_rows(Engine& engine, Role role, const TensorMap& batch, const std::string& key_prefix = "");

// The same through the packed rows only: hidden states [N, T, H] for the
// collated layout of `rows` x `width` the packing was made from.
torch::Tensor forward_shared(Engine& engine, Role role, const TensorMap& batch, const std::string& key_prefix,
                             int64_t rows, int64_t width);

}  // namespace trlx::engine

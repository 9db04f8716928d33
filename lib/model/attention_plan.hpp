#pragma once
// Which attention kernel each case of a forward takes: one decision, made
// from what the case needs (its mask) and what the device offers, so that
// no real workload falls back to the unfused path on a GPU by accident.
//
// On a GPU, SDPA picks its kernel from its inputs: flash (or cuDNN) only
// without a mask, the memory-efficient kernel with a mask (in some builds not
// with grouped K/V heads), else the unfused math kernel, which materialises
// every [Tq x Tk] score. So each case gets the form that a fused kernel takes:
//  - causal over the same positions: no mask at all (SDPA's causal flag);
//  - queries that are the last Tq of Tk keys (the last layer of a loss
//    forward), or a sliding window the rows cross: flash's own causal
//    alignment (bottom right) and window, no mask;
//  - packed documents: variable-length flash over cumulative lengths
//    worked out on the host, no mask;
//  - decode steps: variable-length flash reading each slot's own keys
//    (seqused_k), no mask;
//  - anything else (padding before tokens, branching documents): a mask,
//    with K/V expanded where the fused masked kernel refuses grouped heads.
// Without flash (CPU, fp32, head_dim over 256 or not a multiple of 8) the
// masked form runs, as SDPA takes it; on a GPU whose memory-efficient kernel
// refuses grouped heads, plain causal rows repeat K/V for it too.
#include <cstdint>
#include <string>
#include <vector>

namespace trlx::model {

enum class AttentionShape {
  Causal,     // Tq == Tk, each query sees the keys up to its own position (padding, if any, trails)
  Tail,       // the queries are the last Tq of Tk positions, causal from there (padding, if any, trails)
  Documents,  // packed documents, each causal within itself; lengths known on the host
  Decode,     // one query per cache slot, over that slot's keys up to its position
  Masked,     // any other pattern: only an explicit mask says it
};

struct AttentionCall {
  AttentionShape shape = AttentionShape::Causal;
  bool window = false;   // a sliding window that some query's keys extend past
  bool grouped = false;  // fewer K/V heads than query heads
  bool half = false;     // fp16 or bf16
  int64_t head_dim = 64;
  bool softcap = false;  // tanh soft-capped scores (Gemma 2): no fused kernel takes them
  bool sinks = false;    // a learned logit per head beside the keys (gpt-oss): none takes them either
};

// What the device offers, found once per device and dtype (attention_device
// in decoder.hpp).
struct AttentionDevice {
  bool cuda = false;
  bool flash = false;                 // the flash kernels run here (sm80+, built in)
  bool flash_fp32 = false;            // ... in fp32 too (a replaced kernel that takes it; tests)
  bool fused_masked = false;          // SDPA runs a mask with a fused kernel
  bool fused_masked_grouped = false;  // ... also with grouped K/V heads as they are
};

enum class AttentionPath {
  SdpaCausal,          // SDPA, no mask, causal flag when Tq == Tk
  SdpaCausalExpanded,  // SDPA, no mask, causal flag, K/V heads repeated to the query heads
  SdpaMasked,          // SDPA with the mask
  SdpaMaskedExpanded,  // SDPA with the mask, K/V heads repeated to the query heads
  FlashTail,           // flash, bottom-right causal (and window), dense rows
  FlashDocuments,      // flash over cumulative document lengths
  FlashDecode,         // flash over each cache slot's used keys
  Unfused,             // scores made in full: soft-capping, attention sinks
};

struct AttentionPlan {
  AttentionPath path = AttentionPath::SdpaCausal;
  bool needs_mask = false;  // the path reads the explicit mask
};

AttentionPlan plan_attention(const AttentionCall& call, const AttentionDevice& device);

const char* attention_path_name(AttentionPath path);
// The kernel a path runs on a device, in words (startup table, gpu_check).
std::string attention_kernel_name(const AttentionPlan& plan, const AttentionCall& call, const AttentionDevice& device);

// Each case a training or generation forward meets, with the path and
// kernel it takes on `device` (bf16, grouped heads of `head_dim`): what
// `trlx env` prints.
struct AttentionCaseRow {
  std::string name, path, kernel;
};
std::vector<AttentionCaseRow> attention_table(const AttentionDevice& device, int64_t head_dim = 128);

}  // namespace trlx::model

// The one decision of which attention form (and so which kernel) each case takes.
#include "model/attention_plan.hpp"

namespace trlx::model {

namespace {

// The flash kernels take fp16/bf16 with head sizes up to 256 in steps of 8.
bool flash_takes(const AttentionCall& c, const AttentionDevice& d) {
  return d.flash && (c.half || d.flash_fp32) && c.head_dim > 0 && c.head_dim <= 256 && c.head_dim % 8 == 0;
}

AttentionPlan masked(const AttentionCall& c, const AttentionDevice& d) {
  // On a GPU whose fused masked kernel refuses grouped heads, repeating K/V
  // (bytes of the size of K and V per layer) beats the math kernel's
  // [Tq x Tk] scores.
  if (d.cuda && c.grouped && !d.fused_masked_grouped && d.fused_masked) return {AttentionPath::SdpaMaskedExpanded, true};
  return {AttentionPath::SdpaMasked, true};
}

// Causal rows without flash go to SDPA's memory-efficient kernel, which
// some builds refuse grouped heads: repeated K/V beat the math kernel there.
AttentionPlan causal(const AttentionCall& c, const AttentionDevice& d) {
  if (d.cuda && c.grouped && !flash_takes(c, d) && d.fused_masked && !d.fused_masked_grouped)
    return {AttentionPath::SdpaCausalExpanded, false};
  return {AttentionPath::SdpaCausal, false};
}

}  // namespace

AttentionPlan plan_attention(const AttentionCall& c, const AttentionDevice& d) {
  if (c.softcap || c.sinks) return {AttentionPath::Unfused, c.shape != AttentionShape::Causal || c.window};
  const bool flash = flash_takes(c, d);
  switch (c.shape) {
    case AttentionShape::Causal:
      if (!c.window) return causal(c, d);
      return flash ? AttentionPlan{AttentionPath::FlashTail, false} : masked(c, d);
    case AttentionShape::Tail:
      return flash ? AttentionPlan{AttentionPath::FlashTail, false} : masked(c, d);
    case AttentionShape::Documents:
      return flash ? AttentionPlan{AttentionPath::FlashDocuments, false} : masked(c, d);
    case AttentionShape::Decode:
      return flash ? AttentionPlan{AttentionPath::FlashDecode, false} : masked(c, d);
    case AttentionShape::Masked:
      return masked(c, d);
  }
  return masked(c, d);
}

const char* attention_path_name(AttentionPath p) {
  switch (p) {
    case AttentionPath::SdpaCausal: return "sdpa-causal";
    case AttentionPath::SdpaCausalExpanded: return "sdpa-causal-expanded-kv";
    case AttentionPath::SdpaMasked: return "sdpa-masked";
    case AttentionPath::SdpaMaskedExpanded: return "sdpa-masked-expanded-kv";
    case AttentionPath::FlashTail: return "flash-causal-bottom-right";
    case AttentionPath::FlashDocuments: return "flash-varlen-documents";
    case AttentionPath::FlashDecode: return "flash-varlen-decode";
    case AttentionPath::Unfused: return "unfused";
  }
  return "?";
}

std::string attention_kernel_name(const AttentionPlan& plan, const AttentionCall& call, const AttentionDevice& d) {
  if (!d.cuda) return plan.path == AttentionPath::Unfused ? "unfused (CPU)" : "SDPA (CPU)";
  switch (plan.path) {
    case AttentionPath::SdpaCausal:
      if (flash_takes(call, d)) return "flash or cuDNN (SDPA's choice)";
      return d.fused_masked && (!call.grouped || d.fused_masked_grouped) ? "memory-efficient" : "math (unfused)";
    case AttentionPath::SdpaCausalExpanded: return "memory-efficient (K/V repeated)";
    case AttentionPath::SdpaMasked:
      return d.fused_masked && (!call.grouped || d.fused_masked_grouped) ? "memory-efficient (masked)" : "math (unfused)";
    case AttentionPath::SdpaMaskedExpanded: return "memory-efficient (masked, K/V repeated)";
    case AttentionPath::FlashTail:
    case AttentionPath::FlashDocuments:
    case AttentionPath::FlashDecode: return "flash";
    case AttentionPath::Unfused: return "unfused (soft-capping or sinks)";
  }
  return "?";
}

std::vector<AttentionCaseRow> attention_table(const AttentionDevice& device, int64_t head_dim) {
  struct Case {
    const char* name;
    AttentionShape shape;
    bool window;
  };
  const Case cases[] = {
      {"rows, padding after tokens", AttentionShape::Causal, false},
      {"sliding window crossed", AttentionShape::Causal, true},
      {"loss forward, last layer", AttentionShape::Tail, false},
      {"packed documents", AttentionShape::Documents, false},
      {"decode step", AttentionShape::Decode, false},
      {"branching packs, left padding", AttentionShape::Masked, false},
  };
  std::vector<AttentionCaseRow> rows;
  for (const auto& c : cases) {
    AttentionCall call;
    call.shape = c.shape;
    call.window = c.window;
    call.grouped = true;
    call.half = true;
    call.head_dim = head_dim;
    const auto plan = plan_attention(call, device);
    rows.push_back({c.name, attention_path_name(plan.path), attention_kernel_name(plan, call, device)});
  }
  return rows;
}

}  // namespace trlx::model

// Which attention path each case takes (one decision, checked case by case
// for each kind of device), and that the fused paths compute what the masked
// path computes: on a CPU through a reference of the flash kernel's
// semantics, on a GPU through the kernel itself.
#include "catch_torch.hpp"

#include <limits>

#include "engine/autocast.hpp"
#include "model/attention_plan.hpp"
#include "model/decoder.hpp"
#include "model/generate.hpp"
#include "model/loading.hpp"
#include "helpers.hpp"
#include "support.hpp"

using namespace trlx;
using model::AttentionCall;
using model::AttentionDevice;
using model::AttentionPath;
using model::AttentionShape;
using model_test::models;

namespace {

AttentionDevice cpu() { return {}; }
AttentionDevice gpu(bool masked_grouped) {
  AttentionDevice d;
  d.cuda = true;
  d.flash = true;
  d.fused_masked = true;
  d.fused_masked_grouped = masked_grouped;
  return d;
}
AttentionDevice old_gpu() {  // no flash (before sm80): the memory-efficient kernel only
  AttentionDevice d;
  d.cuda = true;
  d.fused_masked = true;
  return d;
}

AttentionPath path(AttentionShape shape, const AttentionDevice& d, bool window = false, bool grouped = true,
                   bool half = true, int64_t head_dim = 128, bool softcap = false) {
  AttentionCall c;
  c.shape = shape;
  c.window = window;
  c.grouped = grouped;
  c.half = half;
  c.head_dim = head_dim;
  c.softcap = softcap;
  return model::plan_attention(c, d).path;
}

// The flash kernel's semantics written out with plain operations: each
// sequence's queries aligned to its last keys, causal, within the window.
torch::Tensor reference_flash(const model::FlashArgs& a) {
  // The kernel takes one dtype for all three (16-bit on a GPU).
  REQUIRE(a.q.scalar_type() == a.k.scalar_type());
  REQUIRE(a.k.scalar_type() == a.v.scalar_type());
  auto one = [&](torch::Tensor q, torch::Tensor k, torch::Tensor v) {  // [T, H, D]
    const int64_t tq = q.size(0), tk = k.size(0), groups = q.size(1) / k.size(1);
    k = k.repeat_interleave(groups, 1);
    v = v.repeat_interleave(groups, 1);
    auto scores = torch::einsum("qhd,khd->hqk", {q.to(torch::kFloat32), k.to(torch::kFloat32)}) * a.scale;
    auto i = torch::arange(tq, torch::kInt64).view({-1, 1}) + (tk - tq);
    auto j = torch::arange(tk, torch::kInt64).view({1, -1});
    auto allowed = j.le(i);
    if (a.window) allowed = allowed.logical_and((i - j).lt(*a.window));
    scores = scores.masked_fill(allowed.logical_not().unsqueeze(0), -std::numeric_limits<double>::infinity());
    return torch::einsum("hqk,khd->qhd", {scores.softmax(-1), v.to(torch::kFloat32)}).to(q.scalar_type());
  };
  std::vector<torch::Tensor> outs;
  if (!a.cu_q.defined()) {
    for (int64_t b = 0; b < a.q.size(0); ++b) outs.push_back(one(a.q[b], a.k[b], a.v[b]).unsqueeze(0));
    return torch::cat(outs, 0);
  }
  auto cq = a.cu_q.to(torch::kInt64), ck = a.cu_k.to(torch::kInt64);
  for (int64_t s = 0; s + 1 < cq.size(0); ++s) {
    const int64_t q0 = cq[s].item<int64_t>(), q1 = cq[s + 1].item<int64_t>(), k0 = ck[s].item<int64_t>();
    const int64_t kn = a.seqused_k.defined() ? a.seqused_k[s].item<int64_t>() : ck[s + 1].item<int64_t>() - k0;
    REQUIRE(kn <= a.max_k);
    REQUIRE(q1 - q0 <= a.max_q);
    if (q1 == q0) continue;
    outs.push_back(one(a.q.narrow(0, q0, q1 - q0), a.k.narrow(0, k0, kn), a.v.narrow(0, k0, kn)));
  }
  return torch::cat(outs, 0);
}

// Runs the body with the device's capabilities replaced and the reference
// kernel standing in for flash; both restored afterwards.
struct EmulatedFlash {
  explicit EmulatedFlash(AttentionDevice d) {
    d.flash_fp32 = true;
    model::set_attention_device(d);
    model::set_flash_kernel(reference_flash);
  }
  ~EmulatedFlash() {
    model::set_attention_device(std::nullopt);
    model::set_flash_kernel(nullptr);
  }
};

std::vector<torch::Tensor> grads(model::LanguageModelImpl& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return out;
}

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-12, b.abs().max().item<double>());
}

}  // namespace

TEST_CASE("each attention case takes its fused form on a GPU and the masked form where no fused kernel takes it",
          "[model][attention]") {
  using S = AttentionShape;
  using P = AttentionPath;
  // A GPU with flash (sm80+), bf16, head_dim 128, grouped heads.
  const auto g = gpu(/*masked_grouped=*/false);
  CHECK(path(S::Causal, g) == P::SdpaCausal);                          // unpadded or right-padded rows
  CHECK(path(S::Causal, g, /*window=*/true) == P::FlashTail);         // sliding window crossed
  CHECK(path(S::Tail, g) == P::FlashTail);                            // last layer of a loss forward
  CHECK(path(S::Tail, g, true) == P::FlashTail);                      // ... in a sliding layer
  CHECK(path(S::Documents, g) == P::FlashDocuments);                  // packed SFT rows
  CHECK(path(S::Documents, g, true) == P::FlashDocuments);
  CHECK(path(S::Decode, g) == P::FlashDecode);                        // every decode step
  CHECK(path(S::Decode, g, true) == P::FlashDecode);
  CHECK(path(S::Masked, g) == P::SdpaMaskedExpanded);                 // branching DPO/KTO packing, left padding
  CHECK(path(S::Masked, gpu(true)) == P::SdpaMasked);                 // a build whose masked kernel takes GQA
  CHECK(path(S::Masked, g, false, /*grouped=*/false) == P::SdpaMasked);
  // What flash does not take: fp32, head sizes over 256 or not in steps of 8.
  CHECK(path(S::Documents, g, false, true, /*half=*/false) == P::SdpaMaskedExpanded);
  CHECK(path(S::Decode, g, false, true, true, /*head_dim=*/512) == P::SdpaMaskedExpanded);
  CHECK(path(S::Tail, g, false, true, true, /*head_dim=*/100) == P::SdpaMaskedExpanded);
  // fp32 causal rows: no flash, and the memory-efficient kernel refuses
  // grouped heads, so K/V are repeated for it rather than left to the math
  // kernel; where it takes them, or flash runs, they stay as they are.
  CHECK(path(S::Causal, g, false, true, /*half=*/false) == P::SdpaCausalExpanded);
  CHECK(path(S::Causal, gpu(true), false, true, /*half=*/false) == P::SdpaCausal);
  CHECK(path(S::Causal, g, false, /*grouped=*/false, /*half=*/false) == P::SdpaCausal);
  CHECK(path(S::Causal, old_gpu()) == P::SdpaCausalExpanded);
  CHECK(model::attention_kernel_name({P::SdpaCausal, false}, {S::Causal, false, true, false, 128, false}, gpu(true)) ==
        "memory-efficient");
  CHECK(model::attention_kernel_name({P::SdpaCausal, false}, {S::Causal, false, true, true, 128, false}, g) ==
        "flash or cuDNN (SDPA's choice)");
  // A GPU without flash: the memory-efficient kernel with a mask (K/V
  // repeated for grouped heads), never the math kernel while a fused one runs.
  CHECK(path(S::Decode, old_gpu()) == P::SdpaMaskedExpanded);
  CHECK(path(S::Documents, old_gpu(), false, false) == P::SdpaMasked);
  // A CPU: SDPA with the mask where one is needed (no K/V copies).
  for (auto s : {S::Tail, S::Documents, S::Decode, S::Masked}) CHECK(path(s, cpu()) == P::SdpaMasked);
  CHECK(path(S::Causal, cpu()) == P::SdpaCausal);
  CHECK(path(S::Causal, cpu(), true) == P::SdpaMasked);
  // Soft-capped scores (Gemma 2) have no fused kernel anywhere; they read a
  // mask for every case but plain causal.
  CHECK(path(S::Causal, g, false, true, true, 128, /*softcap=*/true) == P::Unfused);
  // So do attention sinks (gpt-oss).
  CHECK(model::plan_attention({S::Documents, false, true, true, 64, false, /*sinks=*/true}, g).path == P::Unfused);
  CHECK(model::plan_attention({S::Documents, false, true, true, 64, false, true}, g).needs_mask);
  CHECK_FALSE(model::plan_attention({S::Causal, false, true, true, 128, true}, g).needs_mask);
  CHECK(model::plan_attention({S::Decode, false, true, true, 128, true}, g).needs_mask);
  // Only the masked paths read a mask.
  for (auto s : {S::Causal, S::Tail, S::Documents, S::Decode, S::Masked}) {
    const auto plan = model::plan_attention({s, false, true, true, 128, false}, g);
    CHECK(plan.needs_mask == (plan.path == P::SdpaMasked || plan.path == P::SdpaMaskedExpanded));
  }
  CHECK(model::attention_kernel_name(model::plan_attention({S::Masked, false, true, true, 128, false}, old_gpu()),
                                     {S::Masked, false, true, true, 128, false}, old_gpu()) ==
        "memory-efficient (masked, K/V repeated)");
}

TEST_CASE("document segments are the runs of equal ids along each row, padding its own run", "[model][attention]") {
  auto docs = torch::tensor({{0, 0, 0, 1, 1, -1}, {4, 5, 5, 5, 5, 5}}, torch::kInt64);
  auto [cu, longest] = model::document_segments(docs);
  CHECK(torch::equal(cu, torch::tensor({0, 3, 5, 6, 7, 12}, torch::kInt32)));
  CHECK(longest == 5);
}

TEST_CASE("the flash paths' inputs give the masked path's values and gradients (reference kernel on the CPU)",
          "[model][attention]") {
  // Packed rows with padding, the last layer's late queries, a crossed
  // sliding window (mistral_window: window 4), and grouped heads throughout.
  for (const char* name : {"qwen2", "mistral_window", "gemma3_text"}) {
    INFO(name);
    auto m = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    const int64_t vocab = m->config().vocab_size;
    torch::manual_seed(3);
    auto ids = torch::randint(1, vocab, {2, 11});
    auto docs = torch::tensor({{0, 0, 0, 0, 1, 1, 1, 1, 1, -1, -1}, {2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3}}, torch::kInt64);
    auto real = docs.ge(0).to(torch::kInt64);
    auto pos = torch::tensor({{0, 1, 2, 3, 0, 1, 2, 3, 4, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3}}, torch::kInt64);
    model::Batch packed{ids, real, pos, docs};
    packed.branch_reach = model::branch_reach(pos, docs, real);
    std::tie(packed.segments, packed.longest_segment) = model::document_segments(docs);
    model::Batch tail{ids, torch::ones_like(ids), {}};
    tail.padding_trails = true;
    tail.outputs_from = 6;

    for (const auto* batch : {&packed, &tail}) {
      // Compared at real tokens only: what padding computes feeds nothing.
      auto keep = batch == &packed ? real.to(torch::kBool) : torch::ones({2, 5}, torch::kBool);
      auto sel = [&](const torch::Tensor& h) { return h.masked_select(keep.unsqueeze(-1).expand_as(h)); };
      m->zero_grad();
      auto want = m->hidden_states(*batch);
      const auto masked_paths = m->model->attention_paths();
      sel(want).pow(2).sum().backward();
      const auto want_g = grads(*m);
      torch::Tensor got;
      std::vector<AttentionPath> fused_paths;
      {
        EmulatedFlash flash(gpu(false));
        m->zero_grad();
        got = m->hidden_states(*batch);
        fused_paths = m->model->attention_paths();
        sel(got).pow(2).sum().backward();
      }
      const auto got_g = grads(*m);
      // The fused run took flash where the masked one took a mask.
      if (batch == &packed) {
        CHECK(masked_paths.front() == AttentionPath::SdpaMasked);
        CHECK(fused_paths.front() == AttentionPath::FlashDocuments);
      } else {
        CHECK(masked_paths.back() == AttentionPath::SdpaMasked);
        CHECK(fused_paths.back() == AttentionPath::FlashTail);
        if (m->config().sliding_window) CHECK(fused_paths.at(1) == AttentionPath::FlashTail);
      }
      CHECK(max_rel(sel(got), sel(want)) < 1e-5);
      for (size_t i = 0; i < want_g.size(); ++i) {
        REQUIRE(want_g[i].defined() == got_g[i].defined());
        if (want_g[i].defined()) CHECK(max_rel(got_g[i], want_g[i]) < 1e-4);
      }
    }
  }
}

TEST_CASE("causal rows with K/V repeated for the memory-efficient kernel give SDPA's grouped values and gradients",
          "[model][attention]") {
  auto m = model::load_language_model(models() / "qwen2", model::HeadKind::CausalLM);
  REQUIRE(m->config().num_key_value_heads < m->config().num_attention_heads);
  torch::manual_seed(4);
  auto ids = torch::randint(1, m->config().vocab_size, {2, 9});
  model::Batch rows{ids, torch::ones_like(ids), {}};
  rows.padding_trails = true;
  m->zero_grad();
  auto want = m->hidden_states(rows);
  CHECK(m->model->attention_paths().front() == AttentionPath::SdpaCausal);
  want.pow(2).sum().backward();
  const auto want_g = grads(*m);
  m->zero_grad();
  model::set_attention_device(old_gpu());
  auto got = m->hidden_states(rows);
  const auto taken = m->model->attention_paths();
  got.pow(2).sum().backward();
  model::set_attention_device(std::nullopt);
  CHECK(taken.front() == AttentionPath::SdpaCausalExpanded);
  CHECK(max_rel(got, want) < 1e-6);
  const auto got_g = grads(*m);
  for (size_t i = 0; i < want_g.size(); ++i)
    if (want_g[i].defined()) CHECK(max_rel(got_g[i], want_g[i]) < 1e-5);
}

TEST_CASE("the additive mask: 0 where a key is seen, -inf elsewhere, rows 16 columns apart", "[model][attention]") {
  for (int64_t cols : {1, 7, 16, 17, 33}) {
    INFO(cols);
    auto keep = torch::rand({2, 1, 5, cols}).gt(0.4);
    const auto m = model::additive_mask(keep, torch::kBFloat16);
    CHECK(m.sizes() == keep.sizes());
    CHECK(m.scalar_type() == torch::kBFloat16);
    CHECK(m.stride(-1) == 1);
    for (int64_t d = 0; d + 1 < m.dim(); ++d) CHECK(m.stride(d) % 16 == 0);
    CHECK(torch::equal(m.eq(0), keep));
    CHECK(torch::equal(m.isneginf(), keep.logical_not()));
  }
  CHECK_FALSE(model::additive_mask(torch::Tensor(), torch::kFloat32).defined());
}

TEST_CASE("generation through the flash decode path equals the masked path token for token (reference kernel)",
          "[model][attention][generate]") {
  for (const char* name : {"qwen2", "mistral_window"}) {
    INFO(name);
    auto m = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    m->eval();
    std::vector<std::vector<int64_t>> prompts = {{5, 9, 2}, {7, 1, 3, 3, 8, 4}, {11}};
    model::GenerationOptions o;
    o.max_new_tokens = 9;
    o.num_return_sequences = 2;
    o.max_batch = 4;  // slots freed and refilled mid-round
    o.do_sample = true;
    o.seed = 5;
    auto want = model::generate(*m, prompts, o);
    model::Generation got;
    {
      EmulatedFlash flash(gpu(false));
      got = model::generate(*m, prompts, o);
      CHECK(m->model->attention_paths().front() == AttentionPath::FlashDecode);
    }
    CHECK(got.completions == want.completions);
  }
}

TEST_CASE("under bf16 autocast with float32 weights the flash paths get bf16 q, k and v, as SDPA would compute",
          "[model][attention]") {
  // The rotary tables are float32 here, so q and k come out of them float32
  // while v is bf16; the flash paths call the kernel outside autocast.
  auto m = model::load_language_model(models() / "mistral_window", model::HeadKind::CausalLM);
  m->eval();
  torch::manual_seed(3);
  auto ids = torch::randint(1, m->config().vocab_size, {2, 11});
  model::Batch tail{ids, torch::ones_like(ids), {}};
  tail.padding_trails = true;
  tail.outputs_from = 6;
  torch::NoGradGuard ng;
  engine::Autocast ac(at::kBFloat16, torch::kCPU);
  const auto want = m->hidden_states(tail).to(torch::kFloat32);
  torch::Tensor got;
  std::vector<AttentionPath> paths;
  model::Generation masked_gen, flash_gen;
  model::GenerationOptions o;
  o.max_new_tokens = 6;
  masked_gen = model::generate(*m, {{5, 9, 2}, {7, 1, 3, 3, 8, 4}}, o);
  {
    EmulatedFlash flash(gpu(false));
    model::set_attention_device(gpu(false));  // no fp32 allowance: only bf16 may reach the kernel
    got = m->hidden_states(tail).to(torch::kFloat32);
    paths = m->model->attention_paths();
    // Decoding reads a bf16 cache (the kernel's REQUIREs check the dtypes).
    flash_gen = model::generate(*m, {{5, 9, 2}, {7, 1, 3, 3, 8, 4}}, o);
    CHECK(m->model->attention_paths().front() == AttentionPath::FlashDecode);
  }
  CHECK(paths.back() == AttentionPath::FlashTail);
  CHECK(max_rel(got, want) < 2e-2);
  REQUIRE(flash_gen.completions.size() == masked_gen.completions.size());
  for (size_t r = 0; r < flash_gen.completions.size(); ++r)
    CHECK(flash_gen.completions[r].size() == masked_gen.completions[r].size());
}

TEST_CASE("a GPU's fused attention paths equal the math kernel (bf16)", "[model][attention][cuda]") {
  if (!torch::cuda::is_available()) TRLX_SKIP("no CUDA device (scripts/gpu_check.sh runs this on a GPU)");
  const torch::Device dev(torch::kCUDA);
  auto m = model::load_language_model(models() / "mistral_window", model::HeadKind::CausalLM);
  // head_dim 8: flash takes it. bf16 weights.
  m->to(dev, torch::kBFloat16);
  const auto caps = model::attention_device(dev, torch::kBFloat16);
  INFO("flash " << caps.flash << " fused_masked " << caps.fused_masked << " grouped " << caps.fused_masked_grouped);
  torch::manual_seed(3);
  auto ids = torch::randint(1, m->config().vocab_size, {2, 11}).to(dev);
  auto docs = torch::tensor({{0, 0, 0, 0, 1, 1, 1, 1, 1, -1, -1}, {2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3}}, torch::kInt64);
  auto pos = torch::tensor({{0, 1, 2, 3, 0, 1, 2, 3, 4, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3}}, torch::kInt64);
  auto real = docs.ge(0).to(torch::kInt64);
  model::Batch packed{ids, real.to(dev), pos.to(dev), docs.to(dev)};
  packed.branch_reach = model::branch_reach(pos, docs, real).to(dev);
  std::tie(packed.segments, packed.longest_segment) = model::document_segments(docs);
  packed.segments = packed.segments.to(dev);
  model::Batch tail{ids, torch::ones_like(ids), {}};
  tail.padding_trails = true;
  tail.outputs_from = 6;
  for (const auto* batch : {&packed, &tail}) {
    auto fused = m->hidden_states(*batch).to(torch::kFloat32);
    model::AttentionDevice none;  // the masked path, as on a CPU
    model::set_attention_device(none);
    auto masked = m->hidden_states(*batch).to(torch::kFloat32);
    model::set_attention_device(std::nullopt);
    auto keep = batch == &packed ? real.to(dev).to(torch::kBool) : torch::ones({2, 5}, torch::kBool).to(dev);
    auto sel = [&](const torch::Tensor& h) { return h.masked_select(keep.unsqueeze(-1).expand_as(h)); };
    CHECK(max_rel(sel(fused), sel(masked)) < 2e-2);
  }
}

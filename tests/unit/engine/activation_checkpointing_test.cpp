// Gradient checkpointing: both modes give the gradients of an ordinary
// backward (fp32, 1e-6), including a frozen base where nothing entering a
// layer requires grad, dropout inside the block, and whole SFT steps.
#include "catch_torch.hpp"

#include "config/loader.hpp"
#include "engine/activation_checkpointing.hpp"
#include "engine/memory_plan.hpp"
#include "losses/logprobs.hpp"
#include "model/loading.hpp"
#include "model/lora.hpp"
#include "model/model_config.hpp"
#include "model/quant4.hpp"
#include "support.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

using test::tiny_model;

// A loss touching every position: random weights on per-token log-probs.
torch::Tensor loss_of(model::LanguageModelImpl& m, const model::Batch& b, const torch::Tensor& w) {
  auto h = m.hidden_states(b);
  auto targets = b.input_ids.roll(-1, 1);
  auto lp = losses::token_logprobs(h, m.head_weight(), targets, b.attention_mask);
  return (lp.logps * w).sum();
}

std::map<std::string, torch::Tensor> grads_of(model::LanguageModelImpl& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters(true))
    if (p.value().grad().defined()) out[p.key()] = p.value().grad().clone();
  return out;
}

std::map<std::string, torch::Tensor> run(bool checkpoint, bool reentrant, bool frozen_base) {
  auto m = model::load_language_model(tiny_model(), model::HeadKind::CausalLM, "float32");
  if (frozen_base) {
    // Only weights inside the layers train: the embedding output entering
    // layer 0 requires no grad, as with adapters on a frozen base.
    for (auto& p : m->named_parameters(true))
      p.value().requires_grad_(p.key().find("mlp.down_proj.weight") != std::string::npos ||
                               p.key().find("self_attn.q_proj.weight") != std::string::npos);
  }
  if (checkpoint) engine::checkpoint_layers(*m, reentrant);
  torch::manual_seed(7);
  const int64_t vocab = m->config().vocab_size;
  model::Batch b;
  b.input_ids = torch::randint(0, vocab, {3, 11}, torch::kInt64);
  b.attention_mask = torch::ones({3, 11}, torch::kInt64);
  b.attention_mask.index_put_({1, torch::indexing::Slice(8)}, 0);
  auto w = torch::rand({3, 11});
  m->train();
  loss_of(*m, b, w).backward();
  return grads_of(*m);
}

void require_equal(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  double worst = 0;
  for (const auto& [k, v] : a) {
    REQUIRE(b.count(k));
    worst = std::max(worst, (v - b.at(k)).abs().max().item<double>());
  }
  INFO("largest gradient difference " << worst);
  CHECK(worst < 1e-6);
}

}  // namespace

TEST_CASE("checkpointed layers give the gradients of an ordinary backward, both modes", "[engine][checkpoint]") {
  auto plain = run(false, false, false);
  SECTION("non-reentrant") { require_equal(plain, run(true, false, false)); }
  SECTION("reentrant") { require_equal(plain, run(true, true, false)); }
}

TEST_CASE("checkpointing a frozen base: parameters inside layers still get gradients", "[engine][checkpoint]") {
  auto plain = run(false, false, true);
  // Every layer's q_proj and down_proj, and nothing else.
  const auto layers = model::load_model_config(tiny_model()).num_hidden_layers;
  REQUIRE(plain.size() == static_cast<size_t>(2 * layers));
  SECTION("non-reentrant") { require_equal(plain, run(true, false, true)); }
  SECTION("reentrant") { require_equal(plain, run(true, true, true)); }
}

TEST_CASE("the recompute repeats the forward's dropout and leaves the random stream alone", "[engine][checkpoint]") {
  for (bool reentrant : {false, true}) {
    auto W = torch::randn({16, 16}, torch::requires_grad());
    auto x = torch::randn({4, 16});
    auto fn = [&](const torch::Tensor& in) { return torch::dropout(torch::tanh(in.matmul(W)), 0.5, true); };
    torch::manual_seed(3);
    fn(x).pow(2).sum().backward();
    auto want = W.grad().clone();
    auto after_plain = torch::rand({4});
    W.mutable_grad().reset();
    torch::manual_seed(3);
    engine::checkpoint_block(fn, x, {W}, reentrant).pow(2).sum().backward();
    auto after_ckpt = torch::rand({4});
    INFO("reentrant " << reentrant);
    CHECK((W.grad() - want).abs().max().item<double>() < 1e-6);
    CHECK(torch::equal(after_plain, after_ckpt));
  }
}

TEST_CASE("a checkpointed 4-bit base keeps the recompute's weights for the backward: same gradients, a third "
          "fewer dequantizations",
          "[engine][checkpoint][qlora]") {
  // QLoRA with adapter dropout: the recompute must redraw the masks and
  // the kept weights must be the ones the backward would have dequantized.
  auto grads = [](int mode, int64_t* dequantized) {  // 0: plain, 1: non-reentrant, 2: reentrant
    auto m = model::load_language_model(tiny_model(), model::HeadKind::CausalLM, "float32");
    model::quantize_linears_4bit(*m, {});
    model::LoraConfig c;
    c.r = 4;
    c.dropout = 0.1;
    c.target_modules = std::vector<std::string>{"all-linear"};
    torch::manual_seed(3);
    model::apply_lora(*m, c);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : m->named_parameters(true))
        if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.05);
    }
    if (mode > 0) engine::checkpoint_layers(*m, mode == 2);
    torch::manual_seed(7);
    model::Batch b;
    b.input_ids = torch::randint(0, m->config().vocab_size, {3, 11}, torch::kInt64);
    b.attention_mask = torch::ones({3, 11}, torch::kInt64);
    auto w = torch::rand({3, 11});
    m->train();
    const auto before = model::dequantizations();
    loss_of(*m, b, w).backward();
    *dequantized = model::dequantizations() - before;
    return grads_of(*m);
  };
  int64_t plain_n = 0, nonreentrant_n = 0, reentrant_n = 0;
  const auto plain = grads(0, &plain_n);
  require_equal(plain, grads(1, &nonreentrant_n));
  require_equal(plain, grads(2, &reentrant_n));
  // 14 4-bit layers. Without checkpointing: 14 forwards and 11 backwards
  // (layer 0's q/k/v take the embeddings, which want no gradient). With
  // it: 14 forwards and 14 recomputes, and no backward dequantizes again
  // (it would be 11 more).
  CHECK(plain_n == 14 + 11);
  CHECK(nonreentrant_n == 14 + 14);
  CHECK(reentrant_n == 14 + 14);
}

TEST_CASE("no-grad forwards through checkpointed layers keep no graph and match", "[engine][checkpoint]") {
  auto m = model::load_language_model(tiny_model(), model::HeadKind::CausalLM, "float32");
  model::Batch b;
  b.input_ids = torch::randint(0, m->config().vocab_size, {2, 9}, torch::kInt64);
  torch::Tensor want;
  {
    torch::NoGradGuard ng;
    want = m->forward(b);
  }
  engine::checkpoint_layers(*m, false);
  torch::NoGradGuard ng;
  auto got = m->forward(b);
  CHECK(!got.requires_grad());
  CHECK(torch::equal(want, got));
}

TEST_CASE("the memory plan combines the switches in one place", "[engine][checkpoint]") {
  config::TrainingConfig c;
  config::DistributedConfig single, zero3;
  zero3.strategy = config::Strategy::Zero;
  zero3.zero_stage = 3;
  zero3.source = "preset zero3";
  c.gradient_checkpointing = true;
  CHECK_FALSE(engine::plan_memory(c, single).reentrant);  // unset: non-reentrant
  c.use_reentrant = true;
  CHECK(engine::plan_memory(c, single).reentrant);
  c.use_peft = true;
  c.use_reentrant = false;
  CHECK_FALSE(engine::plan_memory(c, single).reentrant);  // user's choice kept without sharding
  auto p = engine::plan_memory(c, zero3);
  CHECK(p.reentrant);
  REQUIRE(p.notes.size() == 1);
  CHECK_THAT(p.notes[0], Catch::Matchers::Contains("forcing use_reentrant=true because"));
  c.use_reentrant.reset();
  p = engine::plan_memory(c, zero3);
  CHECK(p.reentrant);
  CHECK(p.notes.empty());  // nothing overridden: no line
  c.gradient_checkpointing = false;
  CHECK_FALSE(engine::plan_memory(c, zero3).checkpointing);
  c.use_liger_kernel = true;
  c.logprob_chunk_size = 256;
  CHECK(engine::plan_memory(c, single).logprob_chunk_size == 256);
}

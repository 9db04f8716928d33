// 4-bit weights against bitsandbytes: the packed codes and block scales bit
// for bit, the dequantized values, double quantization and its dynamic map
// (scripts/fixtures/qlora_fixtures.py).
#include "catch_torch.hpp"

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "engine/adamw8bit.hpp"
#include "helpers.hpp"
#include "io/safetensors.hpp"
#include "model/loading.hpp"
#include "model/kernels.hpp"
#include "model/lora.hpp"
#include "model/quant4.hpp"
#include "support.hpp"

using namespace trlx;
using Catch::Matchers::Contains;

namespace {
std::filesystem::path qlora_data() { return test::data_dir() / "qlora"; }
}  // namespace

TEST_CASE("bitsandbytes' dynamic 8-bit map is rebuilt exactly", "[model][qlora][golden]") {
  auto f = io::Checkpoint::open(qlora_data() / "quant4.safetensors");
  CHECK(torch::equal(model::dynamic_map_8bit(), f.get("dynamic_map", true)));
}

TEST_CASE("4-bit quantization equals bitsandbytes': codes bit for bit, scales and dequantized values",
          "[model][qlora][golden]") {
  auto f = io::Checkpoint::open(qlora_data() / "quant4.safetensors");
  const auto cases = model_test::read_json(qlora_data() / "quant4.json");
  REQUIRE(cases.size() >= 5);
  for (const auto& c : cases) {
    const std::string n = c["name"];
    INFO(n);
    model::Quant4Options o;
    o.quant_type = c["quant_type"];
    o.blocksize = c["blocksize"];
    o.double_quant = c["double_quant"];
    const auto input = f.get(n + ".input", true);
    const auto q = model::quantize_4bit(input, o);
    CHECK(q.shape == input.sizes().vec());
    CHECK(torch::equal(q.packed, f.get(n + ".packed", true)));
    CHECK(torch::equal(q.absmax, f.get(n + ".absmax", true)));
    if (o.double_quant) {
      CHECK(torch::equal(q.absmax_scale, f.get(n + ".absmax_scale", true)));
      CHECK(q.offset == static_cast<float>(c["offset"].get<double>()));
    }
    const auto d = model::dequantize_4bit(q, torch::kFloat32);
    CHECK((d - f.get(n + ".dequantized", true)).abs().max().item<double>() <= 1e-6);
    // Half the bytes of a 16-bit weight and then some: codes plus scales.
    CHECK(q.bytes() < input.numel() / 2 + input.numel() / o.blocksize * 4 + 64);
    CHECK(model::dequantize_4bit(q, torch::kBFloat16).scalar_type() == torch::kBFloat16);
  }
}

TEST_CASE("the CPU's one-pass 4-bit dequantization equals the tensor-operation path in every dtype",
          "[model][qlora]") {
  // Odd sizes (a short last block, a lone high nibble), both code books,
  // double-quantized scales over more than one 256-block group.
  torch::manual_seed(0);
  struct Shape {
    std::vector<int64_t> sizes;
    int64_t blocksize;
  };
  for (const auto& s : {Shape{{7, 9}, 64}, Shape{{300, 129}, 64}, Shape{{33, 65}, 128}, Shape{{1, 1}, 64},
                        Shape{{512, 96}, 256}}) {
    for (const char* type : {"nf4", "fp4"})
      for (bool dq : {false, true}) {
        model::Quant4Options o;
        o.quant_type = type;
        o.blocksize = s.blocksize;
        o.double_quant = dq;
        const auto q = model::quantize_4bit(torch::randn(s.sizes) * 0.02, o);
        for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf}) {
          INFO(type << " double_quant " << dq << " blocksize " << s.blocksize << " numel "
                    << s.sizes[0] * s.sizes[1] << " " << c10::toString(dtype));
          const auto ops = model::dequantize_4bit_ops(q, dtype);
          // The AVX-512 loop where the CPU has it, then the portable one.
          for (bool portable : {false, true}) {
            model::kernels_scalar_only(portable);
            const auto fast = model::dequantize_4bit(q, dtype);
            model::kernels_scalar_only(false);
            CHECK(fast.scalar_type() == dtype);
            CHECK(fast.sizes() == ops.sizes());
            CHECK(torch::equal(fast, ops));
          }
        }
      }
  }
}

TEST_CASE("4-bit settings bitsandbytes does not take are refused naming them", "[model][qlora][errors]") {
  const auto w = torch::randn({4, 64});
  model::Quant4Options o;
  o.quant_type = "int4";
  CHECK_THAT(test::input_error_of([&] { model::quantize_4bit(w, o); }), Contains("nf4 or fp4"));
  o.quant_type = "nf4";
  o.blocksize = 96;
  CHECK_THAT(test::input_error_of([&] { model::quantize_4bit(w, o); }), Contains("blocksize 96"));
}

TEST_CASE("a QLoRA model (4-bit base, PEFT adapter) gives transformers + bitsandbytes + PEFT's logits",
          "[model][qlora][golden]") {
  // scripts/fixtures/qlora_fixtures.py: tiny-model loaded in 4 bits by
  // transformers (compute in float32), a PEFT adapter on top.
  struct Case {
    const char* name;
    const char* quant_type;
    bool double_quant;
  };
  for (const auto& c : {Case{"nf4_lora", "nf4", false}, Case{"nf4_dora", "nf4", false}}) {
    INFO(c.name);
    auto expected = io::Checkpoint::open(qlora_data() / c.name / "expected.safetensors");
    const auto ids = expected.get("input_ids", true);
    auto m = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM);
    model::Quant4Options o;
    o.quant_type = c.quant_type;
    o.double_quant = c.double_quant;
    const auto q = model::quantize_linears_4bit(*m, o);
    CHECK(q.layers == 14);  // 7 linear layers in each of 2 decoder layers; the head stays
    CHECK(static_cast<double>(q.bytes) < 0.15 * static_cast<double>(q.float_bytes));
    model::load_adapter(qlora_data() / c.name / "adapter", *m);
    m->eval();
    torch::NoGradGuard no_grad;
    CHECK((m->forward({ids, {}, {}}) - expected.get("logits_lora")).abs().max().item<double>() < 1e-5);
    model::AdaptersDisabled off(*m);
    CHECK((m->forward({ids, {}, {}}) - expected.get("logits_base")).abs().max().item<double>() < 1e-5);
  }
}

TEST_CASE("QLoRA trains the adapters only, and a 4-bit base refuses to be merged into", "[model][qlora]") {
  auto expected = io::Checkpoint::open(qlora_data() / "nf4_lora" / "expected.safetensors");
  const auto ids = expected.get("input_ids", true);
  auto m = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM);
  model::quantize_linears_4bit(*m, {});
  model::LoraConfig c;
  c.r = 4;
  auto info = model::apply_lora(*m, c);
  m->train();
  auto logits = m->forward({ids, {}, {}});
  logits.sum().backward();
  int with_grad = 0;
  for (const auto& p : m->named_parameters(true)) {
    const bool adapter = p.key().find("lora_") != std::string::npos;
    CHECK(p.value().grad().defined() == adapter);
    with_grad += adapter ? 1 : 0;
  }
  CHECK(with_grad == 2 * static_cast<int>(info.adapted.size()));
  CHECK_THAT(test::input_error_of([&] { model::merge_lora(*m); }), Contains("4-bit"));
}

TEST_CASE("a 4-bit layer's backward equals the dequantized float layer's, for LoRA and DoRA",
          "[model][qlora]") {
  // The 4-bit product dequantizes again in backward instead of keeping the
  // weight: the gradients must equal those of a float model holding the
  // dequantized values.
  auto expected = io::Checkpoint::open(qlora_data() / "nf4_lora" / "expected.safetensors");
  const auto ids = expected.get("input_ids", true);
  for (bool dora : {false, true}) {
    INFO("use_dora " << dora);
    auto quantized = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM);
    auto plain = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM);
    model::quantize_linears_4bit(*quantized, {});
    {
      torch::NoGradGuard no_grad;
      auto q = quantized->named_modules("", false);
      for (const auto& item : plain->named_modules("", false))
        if (auto* l = dynamic_cast<model::LinearImpl*>(item.value().get()))
          if (auto* ql = dynamic_cast<model::LinearImpl*>(q[item.key()].get()); ql && ql->quant4)
            l->weight.copy_(model::dequantize_4bit(*ql->quant4, torch::kFloat32));
    }
    model::LoraConfig c;
    c.r = 4;
    c.dropout = 0.1;  // the dropped-out base product under DoRA
    c.use_dora = dora;
    c.target_modules = std::vector<std::string>{"all-linear"};
    torch::manual_seed(3);
    auto qi = model::apply_lora(*quantized, c);
    torch::manual_seed(3);
    model::apply_lora(*plain, c);
    std::map<std::string, torch::Tensor> grads;
    for (auto* m : {&quantized, &plain}) {
      {
        torch::NoGradGuard no_grad;
        torch::manual_seed(5);
        for (auto& p : (*m)->named_parameters(true))
          if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.05);
      }
      (*m)->train();
      torch::manual_seed(11);  // the same dropout masks
      (*m)->forward({ids, {}, {}}).pow(2).mean().backward();
    }
    const auto qp = quantized->named_parameters(true), pp = plain->named_parameters(true);
    int compared = 0;
    for (const auto& p : qp) {
      if (!p.value().grad().defined()) continue;
      INFO(p.key());
      CHECK((p.value().grad() - pp[p.key()].grad()).abs().max().item<double>() < 1e-5);
      ++compared;
    }
    CHECK(compared == (dora ? 3 : 2) * static_cast<int>(qi.adapted.size()));
  }
}

namespace {

// The fixture's two parameters (one with 8-bit state, one under the
// threshold) in an AdamW with bitsandbytes' settings.
struct EightBitRun {
  torch::Tensor big, small;
  std::unique_ptr<torch::optim::AdamW> opt;
  explicit EightBitRun(io::Checkpoint& f) {
    big = f.get("big.start", true).clone().requires_grad_(true);
    small = f.get("small.start", true).clone().requires_grad_(true);
    opt = std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{big, small},
        torch::optim::AdamWOptions(1e-2).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
  }
  void step(io::Checkpoint& f, int k) {
    big.mutable_grad() = f.get("big.grad." + std::to_string(k), true).clone();
    small.mutable_grad() = f.get("small.grad." + std::to_string(k), true).clone();
    engine::adamw_8bit_step(*opt);
  }
};

}  // namespace

TEST_CASE("8-bit AdamW follows bitsandbytes' AdamW8bit over 20 steps, its state a quarter of fp32's",
          "[optim][qlora][golden]") {
  auto f = io::Checkpoint::open(qlora_data() / "adamw8bit.safetensors");
  CHECK(torch::equal(model::dynamic_map_8bit(false), f.get("unsigned_map", true)));
  EightBitRun run(f);
  double worst_big = 0, worst_small = 0;
  for (int k = 1; k <= 20; ++k) {
    run.step(f, k);
    const auto moved = (f.get("big.after." + std::to_string(k), true) - f.get("big.start", true)).abs().max();
    worst_big = std::max(worst_big, (run.big.detach() - f.get("big.after." + std::to_string(k), true)).abs().max().item<double>() /
                                        moved.item<double>());
    worst_small = std::max(worst_small,
                           (run.small.detach() - f.get("small.after." + std::to_string(k), true)).abs().max().item<double>());
  }
  INFO("largest difference: 8-bit " << worst_big << " of the distance moved, 32-bit " << worst_small);
  // Both paths are bitsandbytes' update; the fixture's 8-bit state is
  // requantized with its reference (nearest-code) rule, as its CUDA kernel
  // does, not its CPU kernel's approximate search.
  CHECK(worst_small < 1e-6);
  CHECK(worst_big < 1e-6);
  auto& state = static_cast<torch::optim::AdamWParamState&>(*run.opt->state()[run.big.unsafeGetTensorImpl()]);
  CHECK(state.exp_avg().scalar_type() == torch::kUInt8);
  CHECK(state.exp_avg_sq().scalar_type() == torch::kUInt8);
  const double bytes = static_cast<double>(state.exp_avg().numel() + state.exp_avg_sq().numel() +
                                           state.max_exp_avg_sq().numel() * 4);
  CHECK(bytes / (8.0 * static_cast<double>(run.big.numel())) < 0.26);
  // bitsandbytes' block scales after the 20 steps, from its own state.
  CHECK(torch::allclose(state.max_exp_avg_sq()[0], f.get("big.absmax1", true), 1e-6, 0));
  CHECK(torch::allclose(state.max_exp_avg_sq()[1], f.get("big.absmax2", true), 1e-6, 0));
}

TEST_CASE("8-bit AdamW state saves and resumes exactly", "[optim][qlora]") {
  auto f = io::Checkpoint::open(qlora_data() / "adamw8bit.safetensors");
  EightBitRun straight(f), resumed(f);
  for (int k = 1; k <= 20; ++k) straight.step(f, k);
  for (int k = 1; k <= 10; ++k) resumed.step(f, k);
  std::stringstream saved;
  {
    torch::serialize::OutputArchive out;
    resumed.opt->save(out);
    out.save_to(saved);
  }
  EightBitRun fresh(f);
  {
    torch::NoGradGuard no_grad;
    fresh.big.copy_(resumed.big);
    fresh.small.copy_(resumed.small);
  }
  torch::serialize::InputArchive in;
  in.load_from(saved);
  fresh.opt->load(in);
  for (int k = 11; k <= 20; ++k) fresh.step(f, k);
  CHECK(torch::equal(fresh.big.detach(), straight.big.detach()));
  CHECK(torch::equal(fresh.small.detach(), straight.small.detach()));
}

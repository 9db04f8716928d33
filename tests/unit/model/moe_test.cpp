// Mixtures of experts (Qwen3-MoE, Mixtral, gpt-oss) against transformers:
// tiny random models, their logits, routing, load-balancing loss and greedy
// continuations from scripts/fixtures/moe_fixtures.py (in the published
// per-expert layout and transformers 5's fused one) and
// scripts/fixtures/gpt_oss_fixtures.py (with its MXFP4-packed twin).
#include "catch_torch.hpp"

#include <filesystem>
#include <map>

#include "core/error.hpp"
#include "engine/activation_checkpointing.hpp"
#include "io/safetensors.hpp"
#include "model/generate.hpp"
#include "model/loading.hpp"
#include "model/lora.hpp"
#include "model/moe.hpp"
#include "model/saving.hpp"
#include "helpers.hpp"
#include "support.hpp"

using namespace trlx;
using model_test::max_diff_on_real;
using model_test::models;
using model_test::read_json;
using Catch::Matchers::Contains;

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kMain = {"qwen3_moe", "qwen3_moe_sparse_step", "mixtral", "mixtral_top1", "gpt_oss",
                                        "gpt_oss_top3", "deepseek_v3", "deepseek_v3_noqlora"};

struct Fixture {
  io::Checkpoint expected;
  torch::Tensor ids, mask, pos;
  explicit Fixture(const std::string& name)
      : expected(io::Checkpoint::open(models() / name / "expected.safetensors")),
        ids(expected.get("input_ids", true)),
        mask(expected.get("attention_mask", true)),
        pos(expected.get("position_ids", true)) {}
  model::Batch batch() const { return {ids, mask, pos}; }
};

// The causal LM loss of transformers: mean over the labelled positions of
// -log p(label | the tokens before).
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  auto lp = torch::log_softmax(logits.narrow(1, 0, logits.size(1) - 1), -1);
  auto target = labels.narrow(1, 1, labels.size(1) - 1);
  auto keep = target.ne(-100);
  auto picked = lp.gather(-1, target.clamp_min(0).unsqueeze(-1)).squeeze(-1);
  return -(picked.masked_select(keep)).mean();
}

// The load-balancing loss of one training forward of `m` on the fixture batch.
torch::Tensor balance_loss(model::LanguageModelImpl& m, const Fixture& f) {
  auto* balance = m.model->router_balance();
  balance->begin();
  m.forward(f.batch());
  auto aux = balance->end();
  balance->clear();
  return aux;
}

std::vector<std::string> sorted_names_of(const fs::path& file) {
  std::vector<std::string> names;
  const auto opened = io::SafetensorsFile::open(file);  // tensors() refers into it
  for (const auto& t : opened.tensors()) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> sorted_names(const fs::path& dir) {
  auto names = io::Checkpoint::open_dir(dir).names();
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("MoE configs read as transformers reads them", "[model][moe]") {
  auto q = model::load_model_config(models() / "qwen3_moe");
  CHECK(q.is_moe());
  CHECK(q.num_experts == 6);  // written as num_local_experts
  CHECK(q.num_experts_per_tok == 3);
  CHECK(q.moe_intermediate_size == 16);
  CHECK(q.norm_topk_prob);
  CHECK_FALSE(q.router_weights_fp32);
  CHECK(q.router_aux_loss_coef == 0.05);
  CHECK(q.sparse_layers == std::vector<bool>{true, false, true});  // mlp_only_layers [1]
  CHECK(model::load_model_config(models() / "qwen3_moe_sparse_step").sparse_layers ==
        std::vector<bool>{false, true, false});
  auto x = model::load_model_config(models() / "mixtral");
  CHECK(x.num_experts == 5);
  CHECK(x.moe_intermediate_size == 24);  // Mixtral's experts are intermediate_size wide
  CHECK(x.norm_topk_prob);
  CHECK(x.router_weights_fp32);
  CHECK(x.sliding_window == 4);
  CHECK(x.sliding_layers == std::vector<bool>{true, true});
  CHECK(x.sparse_layers == std::vector<bool>{true, true});
  CHECK(x.head_dim == 8);  // head_dim null: hidden / heads
  // Published Qwen3-MoE configs say num_experts.
  auto published = model::parse_model_config(
      R"({"model_type": "qwen3_moe", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
          "num_hidden_layers": 2, "num_attention_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
          "moe_intermediate_size": 4, "decoder_sparse_step": 1})",
      "c.json");
  CHECK(published.num_experts == 4);
  CHECK_FALSE(published.norm_topk_prob);  // Qwen3MoeConfig's default
  CHECK(published.router_aux_loss_coef == 0.001);
}

TEST_CASE("MoE logits and load-balancing loss equal transformers' in both checkpoint layouts", "[model][moe][golden]") {
  for (const std::string name : {"qwen3_moe", "qwen3_moe_sparse_step", "mixtral", "mixtral_top1", "qwen3_moe_fused",
                                 "mixtral_fused", "gpt_oss", "gpt_oss_top3", "deepseek_v3", "deepseek_v3_noqlora"}) {
    INFO(name);
    auto m = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    Fixture f(name);
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = m->forward(f.batch());
    }
    CHECK(max_diff_on_real(logits, f.expected.get("logits"), f.mask) < 1e-4);
    const auto labels = f.expected.get("labels", true);
    CHECK(std::abs(lm_loss(logits, labels).item<double>() - f.expected.get("loss").item<double>()) < 1e-5);
    if (!m->model->router_balance()) {
      // DeepSeek-V3 has none (transformers computes no aux_loss for it).
      CHECK(name.rfind("deepseek", 0) == 0);
      continue;
    }
    // The router loss over the sparse layers and the real tokens, pooled.
    auto aux = balance_loss(*m, f);
    REQUIRE(aux.defined());
    CHECK(std::abs(aux.item<double>() - f.expected.get("aux_loss").item<double>()) < 1e-5);
    const double total = lm_loss(logits, labels).item<double>() + m->config().router_aux_loss_coef * aux.item<double>();
    CHECK(std::abs(total - f.expected.get("total_loss").item<double>()) < 1e-5);
  }
}

TEST_CASE("MoE greedy continuations equal transformers' generate", "[model][moe][golden][generate]") {
  for (const auto& name : kMain) {
    INFO(name);
    const auto j = read_json(models() / name / "generate.json");
    auto m = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    std::vector<std::vector<int64_t>> prompts, expected;
    for (const auto& p : j["prompts"]) prompts.push_back(p.get<std::vector<int64_t>>());
    for (const auto& g : j["greedy"]) expected.push_back(g.get<std::vector<int64_t>>());
    model::GenerationOptions o;
    o.max_new_tokens = j["max_new_tokens"];
    o.eos_token_ids = {j["eos_token_id"].get<int64_t>()};
    for (int64_t slots : {0, 2}) {
      INFO(slots << " slots");
      o.max_batch = slots;
      CHECK(model::generate(*m, prompts, o).completions == expected);
    }
  }
}

TEST_CASE("the load-balancing gradient reaches the routers as the loss's derivative, with and without recompute",
          "[model][moe]") {
  // float64 (the router's softmax too) so that a central difference is
  // exact to many digits and no top-k choice moves.
  auto m = model::load_language_model(models() / "qwen3_moe", model::HeadKind::CausalLM);
  m->to(torch::kFloat64);
  Fixture f("qwen3_moe");
  auto& router = m->model->layers[2]->as<model::DecoderLayerImpl>()->moe->gate->weight;
  // The last sparse layer's experts act after its router: nothing of the balance reaches them.
  auto& expert = m->model->layers[2]->as<model::DecoderLayerImpl>()->moe->experts->down_proj;
  const double weight = 0.7;
  auto tapped_grads = [&] {
    m->zero_grad();
    auto* balance = m->model->router_balance();
    balance->begin();
    auto logits = m->forward(f.batch());
    auto aux = balance->end();
    balance->set_weight(weight);
    // Nothing but the taps reaches the routers: the logits count 0.
    (logits.sum() * 0.0).backward();
    balance->clear();
    return std::make_pair(router.grad().clone(), aux.item<double>());
  };
  auto [grad, aux] = tapped_grads();
  CHECK(std::abs(aux - f.expected.get("aux_loss").item<double>()) < 1e-6);
  // Central differences of weight * aux along a few router entries.
  const double eps = 1e-6;
  for (auto [r, c] : {std::pair<int64_t, int64_t>{0, 0}, {3, 17}, {5, 31}}) {
    INFO("router entry " << r << ", " << c);
    auto at = [&](double delta) {
      torch::NoGradGuard no_grad;
      router[r][c] += delta;
      torch::GradMode::set_enabled(true);
      auto a = balance_loss(*m, f).item<double>();
      torch::GradMode::set_enabled(false);
      router[r][c] -= delta;
      return a;
    };
    const double numeric = weight * (at(eps) - at(-eps)) / (2 * eps);
    UNSCOPED_INFO("tap " << grad[r][c].item<double>() << " numeric " << numeric);
    CHECK(std::abs(grad[r][c].item<double>() - numeric) < 1e-7 * std::max(1.0, std::abs(numeric)));
  }
  CHECK(expert.grad().abs().max().item<double>() == 0.0);
  // Recomputed layers (gradient checkpointing) tap the same gradient, counted once.
  engine::checkpoint_layers(*m, /*reentrant=*/false);
  auto [again, aux_again] = tapped_grads();
  CHECK(aux_again == aux);
  CHECK(torch::allclose(again, grad, 1e-12, 1e-12));
}

TEST_CASE("grouped expert products equal one product per expert, forward and backward", "[model][moe]") {
  // float64, which LibTorch's grouped product does not take: this runs the
  // per-group fallback (the fp32 models elsewhere run the grouped product).
  torch::manual_seed(3);
  const int64_t experts = 5, in = 12, out = 7;
  // Rows per expert, one expert without any.
  const std::vector<int64_t> counts = {3, 0, 4, 1, 6};
  auto offsets = torch::tensor(counts, torch::kInt64).cumsum(0).to(torch::kInt32);
  auto x = torch::randn({14, in}, torch::kFloat64).requires_grad_();
  auto w = torch::randn({experts, out, in}, torch::kFloat64).requires_grad_();
  auto y = model::grouped_linear(x, w, offsets);
  auto g = torch::randn_like(y);
  y.backward(g);
  auto x2 = x.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
  std::vector<torch::Tensor> parts;
  int64_t start = 0;
  for (int64_t e = 0; e < experts; ++e) {
    parts.push_back(torch::matmul(x2.narrow(0, start, counts[e]), w2[e].t()));
    start += counts[e];
  }
  auto y2 = torch::cat(parts);
  y2.backward(g);
  CHECK(torch::allclose(y, y2, 1e-12, 1e-12));
  CHECK(torch::allclose(x.grad(), x2.grad(), 1e-12, 1e-12));
  CHECK(torch::allclose(w.grad(), w2.grad(), 1e-12, 1e-12));
  CHECK(w.grad()[1].abs().max().item<double>() == 0.0);
}

TEST_CASE("MoE models save in the published per-expert layout and load back to the same numbers", "[model][moe][save]") {
  torch::NoGradGuard no_grad;
  const auto tmp = fs::temp_directory_path() / "trlx_moe_save_test";
  for (const auto& [name, published] : std::vector<std::pair<std::string, std::string>>{
           {"qwen3_moe", "qwen3_moe"}, {"mixtral", "mixtral"}, {"qwen3_moe_fused", "qwen3_moe"},
           {"mixtral_fused", "mixtral"}, {"gpt_oss", "gpt_oss"}, {"deepseek_v3", "deepseek_v3"}}) {
    INFO(name);
    fs::remove_all(tmp);
    auto src = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    model::save_language_model(tmp, *src);
    CHECK(sorted_names(tmp) == sorted_names(models() / published));
    auto back = model::load_language_model(tmp, model::HeadKind::CausalLM);
    Fixture f(name);
    CHECK(torch::equal(src->forward(f.batch()), back->forward(f.batch())));
    auto config = model::load_model_config(tmp);
    CHECK(config.num_experts == src->config().num_experts);
    CHECK(config.sparse_layers == src->config().sparse_layers);
  }
  fs::remove_all(tmp);
}

TEST_CASE("bad MoE checkpoints and configs name the tensor or the key", "[model][moe][errors]") {
  const auto tmp = fs::temp_directory_path() / "trlx_moe_bad_test";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  auto copy_config = [&](const std::string& from) {
    fs::copy_file(models() / from / "config.json", tmp / "config.json", fs::copy_options::overwrite_existing);
  };
  auto rewrite = [&](const std::string& from, const std::function<void(io::NamedTensors&)>& edit) {
    auto ckpt = io::Checkpoint::open_dir(models() / from);
    io::NamedTensors tensors;
    for (const auto& n : ckpt.names()) tensors.emplace_back(n, ckpt.get(n, true));
    edit(tensors);
    io::save_checkpoint(tmp, tensors);
    copy_config(from);
  };
  auto load_error = [&] {
    return test::input_error_of([&] { model::load_language_model(tmp, model::HeadKind::CausalLM); });
  };
  rewrite("qwen3_moe", [](io::NamedTensors& t) {
    t.erase(std::remove_if(t.begin(), t.end(),
                           [](const auto& p) { return p.first == "model.layers.2.mlp.experts.4.up_proj.weight"; }),
            t.end());
  });
  CHECK_THAT(load_error(), Contains("tensor `model.layers.2.mlp.experts.4.up_proj.weight` is missing"));
  rewrite("mixtral", [](io::NamedTensors& t) {
    for (auto& [n, v] : t)
      if (n == "model.layers.1.block_sparse_moe.gate.weight") v = v.narrow(0, 0, 4).contiguous();
  });
  CHECK_THAT(load_error(), Contains("tensor `model.layers.1.block_sparse_moe.gate.weight` has shape 4x32"));
  rewrite("mixtral", [](io::NamedTensors& t) {
    for (auto& [n, v] : t)
      if (n == "model.layers.0.block_sparse_moe.experts.2.w2.weight") v = v.t().contiguous();
  });
  CHECK_THAT(load_error(), Contains("`model.layers.0.block_sparse_moe.experts.2.w2.weight` has shape 24x32"));
  rewrite("qwen3_moe_fused", [](io::NamedTensors& t) {
    for (auto& [n, v] : t)
      if (n == "model.layers.0.mlp.experts.down_proj") v = v.narrow(0, 0, 5).contiguous();
  });
  CHECK_THAT(load_error(), Contains("`model.layers.0.mlp.experts.down_proj` has shape 5x32x16"));
  const std::string shape =
      R"("vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2)";
  CHECK_THAT(test::input_error_of([&] {
               model::parse_model_config(R"({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 5, )" +
                                             shape + "}",
                                         "c.json");
             }),
             Contains("c.json: `num_experts_per_tok` is 5; it must be between 1 and the 4 experts (`num_local_experts`)"));
  CHECK_THAT(test::input_error_of([&] {
               model::parse_model_config(R"({"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2,
                                             "decoder_sparse_step": 0, )" + shape + "}",
                                         "c.json");
             }),
             Contains("`decoder_sparse_step` must be positive"));
  fs::remove_all(tmp);
}

TEST_CASE("gpt-oss configs read as transformers reads them", "[model][moe]") {
  auto c = model::load_model_config(models() / "gpt_oss");
  CHECK(c.attention_sinks);
  CHECK(c.attention_bias);
  CHECK(c.router_bias);
  CHECK(c.router_softmax_after_topk);
  CHECK(c.experts_interleaved);
  CHECK(c.swiglu_limit == 1.5);
  CHECK(c.swiglu_alpha == 1.702);
  CHECK(c.sliding_layers == std::vector<bool>{true, false});
  CHECK(c.sliding_window == 4);
  CHECK(c.rope.type == "yarn");
  CHECK(c.rope.factor == 32.0);
  CHECK_FALSE(c.rope.truncate);
  auto top3 = model::load_model_config(models() / "gpt_oss_top3");
  CHECK(top3.swiglu_alpha == 1.2);
  CHECK(top3.sliding_layers == std::vector<bool>{false, true, true});
  CHECK(top3.rope.truncate);  // no key: transformers' default
  // The published layout: experts_per_token, rope_scaling, MXFP4 experts.
  auto packed = model::load_model_config(models() / "gpt_oss_mxfp4");
  CHECK(packed.mxfp4_experts);
  CHECK(packed.num_experts_per_tok == 2);
  CHECK(packed.rope.theta == 150000.0);
  CHECK(packed.swiglu_alpha == 1.702);
}

TEST_CASE("MXFP4 experts dequantize to transformers' values bit for bit, and the packed model gives its logits",
          "[model][moe][golden]") {
  auto expected = io::Checkpoint::open(models() / "gpt_oss_mxfp4" / "expected_dequantized.safetensors");
  // Several blocks per row, signed zeros included: compared as bits.
  auto probe = model::dequantize_mxfp4(expected.get("probe.blocks", true), expected.get("probe.scales", true));
  CHECK(torch::equal(probe.view(torch::kInt32), expected.get("probe.float32", true).view(torch::kInt32)));
  CHECK(torch::equal(probe.to(torch::kBFloat16).view(torch::kInt16),
                     expected.get("probe.bfloat16", true).view(torch::kInt16)));
  auto m = model::load_language_model(models() / "gpt_oss_mxfp4", model::HeadKind::CausalLM, "bfloat16");
  for (const std::string layer : {"0", "1"})
    for (const std::string w : {"gate_up_proj", "down_proj"}) {
      const std::string name = "model.layers." + layer + ".mlp.experts." + w;
      INFO(name);
      torch::Tensor got;
      for (const auto& p : m->named_parameters(true))
        if (p.key() == name) got = p.value();
      REQUIRE(got.defined());
      CHECK(torch::equal(got.view(torch::kInt16), expected.get(name, true).view(torch::kInt16)));
    }
  torch::NoGradGuard no_grad;
  auto fp32 = model::load_language_model(models() / "gpt_oss_mxfp4", model::HeadKind::CausalLM, "float32");
  auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
  auto logits = fp32->forward({ids, mask, expected.get("position_ids", true)});
  CHECK(max_diff_on_real(logits, expected.get("logits"), mask) < 1e-4);
  // Saved dequantized, without the quantization config: loads as a plain gpt_oss.
  const auto tmp = fs::temp_directory_path() / "trlx_mxfp4_save_test";
  fs::remove_all(tmp);
  model::save_language_model(tmp, *fp32);
  CHECK_FALSE(model::load_model_config(tmp).mxfp4_experts);
  CHECK(sorted_names(tmp) == sorted_names(models() / "gpt_oss"));
  auto back = model::load_language_model(tmp, model::HeadKind::CausalLM);
  CHECK(torch::equal(back->forward({ids, mask, {}}), fp32->forward({ids, mask, {}})));
  fs::remove_all(tmp);
}

TEST_CASE("DeepSeek-V3 configs read as transformers reads them", "[model][moe]") {
  auto c = model::load_model_config(models() / "deepseek_v3");
  CHECK(c.head_dim == 20);  // qk_nope 12 + qk_rope 8 (config.json's head_dim is the rotary width)
  CHECK(c.rope_head_dim == 8);
  CHECK(c.q_lora_rank == 24);
  CHECK(c.kv_lora_rank == 16);
  CHECK(c.v_head_dim == 10);
  CHECK(c.rope_interleave);
  CHECK(c.num_experts == 9);
  CHECK(c.n_group == 3);
  CHECK(c.topk_group == 2);
  CHECK(c.n_shared_experts == 1);
  CHECK(c.routed_scaling_factor == 2.5);
  CHECK_FALSE(c.router_balance_loss);
  CHECK(c.sparse_layers == std::vector<bool>{false, true, true});  // first_k_dense_replace 1
  // The softmax scale: 20^-0.5 times mscale(4, 0.8)^2.
  const double m = 0.1 * 0.8 * std::log(4.0) + 1.0;
  CHECK(std::abs(c.attention_scale - m * m / std::sqrt(20.0)) < 1e-12);
  auto plain = model::load_model_config(models() / "deepseek_v3_noqlora");
  CHECK(plain.q_lora_rank == 0);
  CHECK(plain.attention_scale == 1.0 / std::sqrt(24.0));
  const std::string shape =
      R"("vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2)";
  CHECK_THAT(test::input_error_of([&] {
               model::parse_model_config(R"({"model_type": "deepseek_v3", "n_routed_experts": 8, "n_group": 4,
                                             "topk_group": 1, "num_experts_per_tok": 3, )" + shape + "}",
                                         "c.json");
             }),
             Contains("`num_experts_per_tok` is 3; it must be between 1 and the 2 experts of the topk_group groups kept"));
  CHECK_THAT(test::input_error_of([&] {
               model::parse_model_config(R"({"model_type": "deepseek_v3", "quantization_config": {"quant_method": "fp8"},
                                             )" + shape + "}",
                                         "c.json");
             }),
             Contains("give a dequantized checkpoint"));
}

TEST_CASE("PEFT's adapters on stacked expert weights (target_parameters): logits on, off and merged, deltas, gradients",
          "[model][moe][lora][golden]") {
  // scripts/fixtures/moe_lora_fixtures.py: r 4, alpha 8 on q_proj, v_proj and
  // both expert weights, B random so that the deltas matter.
  for (const std::string name : {"qwen3_moe", "mixtral", "gpt_oss"}) {
    INFO(name);
    const auto dir = test::data_dir() / "moe_lora";
    auto expected = io::Checkpoint::open(dir / (name + "_expected.safetensors"));
    auto m = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    const auto info = model::load_adapter(dir / (name + "_adapter"), *m, std::nullopt);
    CHECK(info.adapted_parameters.size() == 2 * static_cast<size_t>(std::count(
                                                    m->config().sparse_layers.begin(), m->config().sparse_layers.end(), true)));
    auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
    auto pos = expected.get("position_ids", true);
    model::Batch batch{ids, mask, pos};
    {
      torch::NoGradGuard no_grad;
      CHECK(max_diff_on_real(m->forward(batch), expected.get("logits_lora"), mask) < 1e-4);
      {
        model::AdaptersDisabled off(*m);
        CHECK(max_diff_on_real(m->forward(batch), expected.get("logits_base"), mask) < 1e-4);
      }
      // Deltas in each parameter's own layout (gpt-oss: [E, in, out]).
      auto& e = *m->model->layers[0]->as<model::DecoderLayerImpl>()->moe->experts;
      auto own = [&](const model::ExpertAdapter& a) {
        auto d = a.delta(e.num_experts());
        return e.interleaved() ? d.transpose(1, 2) : d;
      };
      CHECK((own(e.gate_up_lora) - expected.get("delta.model.layers.0.mlp.experts.gate_up_proj")).abs().max().item<double>() <
            1e-6);
      CHECK((own(e.down_lora) - expected.get("delta.model.layers.0.mlp.experts.down_proj")).abs().max().item<double>() <
            1e-6);
    }
    // One step's loss and every adapter tensor's gradient (no balance loss).
    auto logits = m->forward(batch);
    auto loss = lm_loss(logits, expected.get("labels", true));
    CHECK(std::abs(loss.item<double>() - expected.get("loss").item<double>()) < 1e-5);
    loss.backward();
    auto file = io::SafetensorsFile::open(dir / (name + "_adapter") / "adapter_model.safetensors");
    std::map<std::string, torch::Tensor> by_saved_name;
    for (const auto& p : m->named_parameters(true)) {
      if (!p.value().requires_grad()) continue;
      by_saved_name["base_model.model." + p.key()] = p.value();
    }
    size_t compared = 0;
    for (const auto& t : file.tensors()) {
      INFO(t.name);
      REQUIRE(by_saved_name.count(t.name));
      const auto want = expected.get("grad." + t.name);
      CHECK((by_saved_name[t.name].grad() - want).abs().max().item<double>() < 1e-5 * std::max(1.0, want.abs().max().item<double>()));
      ++compared;
    }
    CHECK(compared == file.tensors().size());
    // Saved again: PEFT's names, shapes and target_parameters.
    const auto tmp = fs::temp_directory_path() / "trlx_moe_lora_test";
    fs::remove_all(tmp);
    model::save_adapter(tmp, *m, info, {});
    const auto saved_names = sorted_names_of(tmp / "adapter_model.safetensors");
    CHECK(saved_names == sorted_names_of(dir / (name + "_adapter") / "adapter_model.safetensors"));
    CHECK(read_json(tmp / "adapter_config.json")["target_parameters"].size() == 2);
    // Merged: the deltas folded into the experts, PEFT's merged logits.
    torch::NoGradGuard no_grad;
    model::merge_lora(*m);
    CHECK_FALSE(model::has_lora(*m));
    CHECK(max_diff_on_real(m->forward(batch), expected.get("logits_merged"), mask) < 1e-4);
    fs::remove_all(tmp);
  }
}

TEST_CASE("adapters on expert weights refuse what PEFT refuses, naming the field", "[model][moe][lora][errors]") {
  auto m = model::load_language_model(models() / "qwen3_moe", model::HeadKind::CausalLM);
  model::LoraConfig c;
  c.r = 2;
  c.target_modules = std::vector<std::string>{"q_proj"};
  c.target_parameters = std::vector<std::string>{"mlp.experts.gate_up_proj"};
  c.dropout = 0.1;
  CHECK_THAT(test::input_error_of([&] { model::apply_lora(*m, c); }), Contains("needs lora_dropout 0"));
  c.dropout = 0.0;
  c.target_parameters = std::vector<std::string>{"mlp.experts.w1"};
  CHECK_THAT(test::input_error_of([&] { model::apply_lora(*m, c); }),
             Contains("`mlp.experts.w1` matches no expert weight of this qwen3_moe model; expert weights: "
                      "mlp.experts.down_proj, mlp.experts.gate_up_proj"));
  c.target_parameters = std::vector<std::string>{"mlp.experts.down_proj"};
  // Only the expert weights: no target_modules needed (Qwen3-MoE has no default).
  c.target_modules.reset();
  auto info = model::apply_lora(*m, c);
  CHECK(info.adapted.empty());
  CHECK(info.adapted_parameters.size() == 2);
}

// Phi-3, Gemma, Gemma 2, Gemma 3 text and the dynamic, yarn and longrope
// rotary embeddings against transformers: tiny random models and their
// logits from scripts/fixtures/model_family_fixtures.py. (The padded-batch
// logits of these models are checked with the others in model_test.cpp.)
#include "catch_torch.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "losses/logprobs.hpp"
#include "model/loading.hpp"
#include "model/lora.hpp"
#include "model/saving.hpp"
#include "helpers.hpp"
#include "support.hpp"

using namespace trlx;
using model_test::max_diff_on_real;
using model_test::models;
using Catch::Matchers::Contains;

namespace {

std::string config_error(const std::string& json) {
  return test::input_error_of([&] { model::parse_model_config(json, "c.json"); });
}

}  // namespace

TEST_CASE("dynamic rope grows with a long batch and resets for a short one, as transformers", "[model][golden][rope]") {
  torch::NoGradGuard no_grad;
  auto dir = models() / "llama_dynamic";
  auto model = model::load_language_model(dir, model::HeadKind::CausalLM);
  auto expected = io::Checkpoint::open(dir / "expected.safetensors");
  auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
  auto pos = expected.get("position_ids", true);
  // 12 positions beyond max_position_embeddings 8: the base is scaled.
  CHECK(max_diff_on_real(model->forward({ids, mask, pos}), expected.get("logits"), mask) < 1e-4);
  // Then 6 positions: back to the unscaled frequencies.
  auto short_mask = mask.slice(1, 0, 6);
  auto got = model->forward({ids.slice(1, 0, 6), short_mask, pos.slice(1, 0, 6)});
  CHECK(max_diff_on_real(got, expected.get("short_logits"), short_mask) < 1e-4);
}

TEST_CASE("the families' configs read as transformers reads them", "[model][rope]") {
  auto phi = model::load_model_config(models() / "phi3_longrope");
  CHECK(phi.fused_projections);
  CHECK(phi.rope.type == "longrope");
  CHECK(phi.rope.partial_rotary_factor == 0.5);
  CHECK(phi.rope.original_max_position_embeddings == 8);
  CHECK(phi.rope.factor == 8.0);  // max_position_embeddings / original
  CHECK(phi.sliding_window == 5);
  auto g2 = model::load_model_config(models() / "gemma2_softcap");
  CHECK(g2.norm_plus_one);
  CHECK(g2.sandwich_norms);
  CHECK(g2.attn_logit_softcapping == 2.0);
  CHECK(g2.final_logit_softcapping == 3.0);
  CHECK(g2.sliding_layers == std::vector<bool>{true, false});
  auto g3 = model::load_model_config(models() / "gemma3_text");
  REQUIRE(g3.sliding_rope);
  CHECK(g3.rope.type == "linear");
  CHECK(g3.rope.theta == 1000000.0);
  CHECK(g3.sliding_rope->type == "default");
  CHECK(g3.sliding_rope->theta == 10000.0);
  CHECK(g3.qk_norm);
  CHECK_FALSE(g3.attn_logit_softcapping);

  // The older Gemma 3 layout: rope_theta / rope_local_base_freq at the top,
  // a rope_scaling for the global layers, the sliding pattern by default.
  auto old = model::parse_model_config(
      R"({"model_type": "gemma3_text", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
          "num_hidden_layers": 7, "num_attention_heads": 2, "head_dim": 4, "rope_theta": 1000000.0,
          "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})",
      "c.json");
  CHECK(old.rope.type == "linear");
  CHECK(old.rope.factor == 8.0);
  CHECK(old.sliding_rope->theta == 10000.0);
  CHECK(old.sliding_window == 4096);
  CHECK(old.sliding_layers == std::vector<bool>{true, true, true, true, true, false, true});
}

TEST_CASE("bad family and rope configs name the file and the key", "[model][rope]") {
  const std::string shape =
      R"("vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2)";
  CHECK_THAT(config_error(R"({"model_type": "gemma3", )" + shape + "}"), Contains("image-text model"));
  CHECK_THAT(config_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "su", "factor": 2.0}, )" + shape + "}"),
             Contains("rope_type `su` is not supported"));
  CHECK_THAT(config_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0],
             "long_factor": [1.0, 2.0]}, )" + shape + "}"),
             Contains("c.json rope_scaling: rope_scaling.short_factor has 1 entries; the rotary dims need 2"));
  CHECK_THAT(config_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "dynamic"}, )" + shape + "}"),
             Contains("factor is required for rope_type `dynamic`"));
  CHECK_THAT(config_error(R"({"model_type": "phi3", "resid_pdrop": 0.1, )" + shape + "}"),
             Contains("`resid_pdrop` is 0.1"));
  CHECK_THAT(config_error(R"({"model_type": "gemma2", "hidden_activation": "relu", )" + shape + "}"),
             Contains("hidden_activation `relu` is not supported"));
  CHECK_THAT(config_error(R"({"model_type": "gemma2", "layer_types": ["sliding_attention", "local"], )" + shape + "}"),
             Contains("layer_types has 2 entries for 1 layers"));
  CHECK_THAT(config_error(R"({"model_type": "phi3", "partial_rotary_factor": 0.1, )" + shape + "}"),
             Contains("partial_rotary_factor 0.1"));
}

TEST_CASE("save then load keeps each family's numbers and config", "[model][save]") {
  torch::NoGradGuard no_grad;
  namespace fs = std::filesystem;
  const auto tmp = fs::temp_directory_path() / "trlx_family_save_test";
  for (const char* name : {"phi3_longrope", "gemma2_softcap", "gemma3_text"}) {
    INFO(name);
    fs::remove_all(tmp);
    auto src = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    model::save_language_model(tmp, *src);
    auto back = model::load_language_model(tmp, model::HeadKind::CausalLM);
    auto expected = io::Checkpoint::open(models() / name / "expected.safetensors");
    auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
    CHECK(torch::equal(src->forward({ids, mask, {}}), back->forward({ids, mask, {}})));
    auto names = io::Checkpoint::open_dir(tmp).names();
    auto original = io::Checkpoint::open_dir(models() / name).names();
    std::sort(names.begin(), names.end());
    std::sort(original.begin(), original.end());
    CHECK(names == original);  // transformers' tensor names, nothing added or lost
  }
  fs::remove_all(tmp);
}

TEST_CASE("LoRA targets the families' own module names", "[model][lora]") {
  auto phi = model::load_language_model(models() / "phi3", model::HeadKind::CausalLM);
  // No default for Phi-3's fused projections (as PEFT): the message says what to set.
  CHECK_THAT(test::input_error_of([&] { model::apply_lora(*phi, {}); }), Contains("qkv_proj"));
  model::LoraConfig c;
  c.r = 2;
  c.target_modules = std::vector<std::string>{"qkv_proj", "gate_up_proj"};
  auto info = model::apply_lora(*phi, c);
  CHECK(info.adapted == std::vector<std::string>{"model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj",
                                                 "model.layers.1.self_attn.qkv_proj", "model.layers.1.mlp.gate_up_proj"});
  auto gemma = model::load_language_model(models() / "gemma2_softcap", model::HeadKind::CausalLM);
  CHECK(model::apply_lora(*gemma, {}).target_modules == std::vector<std::string>{"q_proj", "v_proj"});
}

TEST_CASE("soft-capped log-probs: the chunked path equals the plain one, values and gradients", "[model][losses]") {
  auto m = model::load_language_model(models() / "gemma2_softcap", model::HeadKind::CausalLM);
  const double cap = *m->config().final_logit_softcapping;
  auto expected = io::Checkpoint::open(models() / "gemma2_softcap" / "expected.safetensors");
  auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
  const int64_t t = ids.size(1);
  auto targets = ids.slice(1, 1), tmask = mask.slice(1, 1) * mask.slice(1, 0, t - 1);
  // The plain path equals log_softmax of transformers' (soft-capped) logits.
  {
    torch::NoGradGuard no_grad;
    losses::LogProbOptions o;
    o.logit_softcap = cap;
    auto h = m->hidden_states({ids, mask, {}}).slice(1, 0, t - 1);
    auto lp = losses::token_logprobs(h, m->head_weight(), targets, tmask, o).logps;
    auto want = expected.get("logits").slice(1, 0, t - 1).log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
    CHECK(((lp - want) * tmask).abs().max().item<double>() < 1e-4);
  }
  auto run = [&](int64_t chunk) {
    auto h = m->hidden_states({ids, mask, {}}).slice(1, 0, t - 1).detach().requires_grad_(true);
    auto w = m->head_weight().detach().clone().requires_grad_(true);
    losses::LogProbOptions o;
    o.logit_softcap = cap;
    o.temperature = 0.7;
    o.chunk_size = chunk;
    o.vocab_tile = 40;  // several tiles over the vocabulary of 96
    auto lp = losses::token_logprobs(h, w, targets, tmask, o).logps;
    (lp * torch::arange(lp.numel(), torch::kFloat32).view_as(lp)).sum().backward();
    return std::tuple{lp.detach(), h.grad(), w.grad()};
  };
  auto [lp0, gh0, gw0] = run(0);
  auto [lp1, gh1, gw1] = run(5);
  CHECK((lp0 - lp1).abs().max().item<double>() < 1e-5);
  CHECK((gh0 - gh1).abs().max().item<double>() < 1e-4);
  CHECK((gw0 - gw1).abs().max().item<double>() < 1e-4);
}

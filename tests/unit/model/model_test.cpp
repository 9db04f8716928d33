// The decoder against transformers: tiny random models of each architecture
// and their logits on a padded batch come from scripts/fixtures/model_fixtures.py.
#include "catch_torch.hpp"

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include <random>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/generate.hpp"
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

// The same rows with their real tokens first and the padding after.
std::pair<torch::Tensor, torch::Tensor> with_trailing_padding(const torch::Tensor& ids, const torch::Tensor& mask) {
  auto rids = torch::zeros_like(ids), rmask = torch::zeros_like(mask);
  for (int64_t r = 0; r < ids.size(0); ++r) {
    auto real = mask[r].nonzero().view({-1});
    rids[r].slice(0, 0, real.size(0)).copy_(ids[r].index_select(0, real));
    rmask[r].slice(0, 0, real.size(0)).fill_(1);
  }
  return {rids, rmask};
}

// One packed row, seeded: a prompt (5 tokens), branch A (4), branch B (3,
// positions back to 5), then 2 padding slots; one document.
struct BranchedRow {
  torch::Tensor prompt, a, b;
  model::Batch batch;
};
BranchedRow branched_row(int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  BranchedRow r;
  r.prompt = torch::randint(1, vocab, {5});
  r.a = torch::randint(1, vocab, {4});
  r.b = torch::randint(1, vocab, {3});
  auto row = torch::cat({r.prompt, r.a, r.b, torch::zeros({2}, torch::kInt64)}).unsqueeze(0);
  auto attn = torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, torch::kInt64).unsqueeze(0);
  auto pos = torch::tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 0, 0}, torch::kInt64).unsqueeze(0);
  r.batch = {row, attn, pos, torch::zeros_like(row)};
  return r;
}

}  // namespace


TEST_CASE("causal LM logits equal transformers' on a padded batch (fp32)", "[model][golden]") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"llama", "llama3_rope_tied", "mistral_window", "qwen2", "qwen3", "llama_legacy_rope",
                           "llama_yarn", "qwen2_yarn_mscale", "llama_longrope", "llama_dynamic", "phi3", "phi3_longrope",
                           "gemma", "gemma2_softcap", "gemma3_text"}) {
    INFO(name);
    auto dir = models() / name;
    auto model = model::load_language_model(dir, model::HeadKind::CausalLM);
    auto expected = io::Checkpoint::open(dir / "expected.safetensors");
    auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
    // trlx derives positions from the mask; they must be the ones transformers was given.
    CHECK(torch::equal(model::position_ids_from_mask(mask), expected.get("position_ids")));
    auto logits = model->forward({ids, mask, {}});
    auto want = expected.get("logits");
    REQUIRE(logits.sizes() == want.sizes());
    const double diff = max_diff_on_real(logits, want, mask);
    INFO("max |diff| " << diff);
    CHECK(diff < 1e-4);
    CHECK(std::isfinite(logits.sum().item<double>()));  // pad positions too: no NaN
  }
}

TEST_CASE("right padding known on the host runs attention unmasked, with transformers' logits at real tokens",
          "[model][golden]") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"llama", "llama3_rope_tied", "mistral_window", "qwen2", "qwen3", "llama_yarn",
                           "llama_longrope", "phi3_longrope", "gemma", "gemma2_softcap", "gemma3_text"}) {
    INFO(name);
    auto dir = models() / name;
    auto model = model::load_language_model(dir, model::HeadKind::CausalLM);
    auto expected = io::Checkpoint::open(dir / "expected.safetensors");
    auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
    auto want = expected.get("logits");
    // The same rows with their real tokens first and the padding after.
    auto [rids, rmask] = with_trailing_padding(ids, mask);
    auto rwant = torch::zeros_like(want);
    for (int64_t r = 0; r < ids.size(0); ++r) {
      auto real = mask[r].nonzero().view({-1});
      rwant[r].slice(0, 0, real.size(0)).copy_(want[r].index_select(0, real));
    }
    REQUIRE_FALSE(rmask.all().item<bool>());  // some row is padded
    model::Batch b{rids, rmask, {}};
    b.padding_trails = true;
    auto logits = model->forward(b);
    const double diff = max_diff_on_real(logits, rwant, rmask);
    INFO("max |diff| " << diff);
    CHECK(diff < 1e-4);
    // The masked path on the same rows agrees.
    auto masked = model->forward({rids, rmask, {}});
    CHECK(max_diff_on_real(logits, masked, rmask) < 1e-5);
  }
}

TEST_CASE("an unpadded row gives the same logits alone and in a padded batch", "[model]") {
  torch::NoGradGuard no_grad;
  auto model = model::load_language_model(models() / "qwen2", model::HeadKind::CausalLM);
  auto expected = io::Checkpoint::open(models() / "qwen2" / "expected.safetensors");
  auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
  auto batch = model->forward({ids, mask, {}});
  // Row 1 is left-padded by 3: alone and unpadded it must give the same logits.
  auto alone = model->forward({ids.slice(0, 1, 2).slice(1, 3), {}, {}});
  CHECK((alone[0] - batch[1].slice(0, 3)).abs().max().item<double>() < 1e-5);
}

TEST_CASE("score head pooled at the last non-pad token equals AutoModelForSequenceClassification", "[model][golden]") {
  torch::NoGradGuard no_grad;
  auto dir = models() / "qwen2_reward";
  auto model = model::load_language_model(dir, model::HeadKind::SequenceClassification);
  auto expected = io::Checkpoint::open(dir / "expected.safetensors");
  auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
  auto scores = model->forward({ids, mask, {}});
  auto pooled = model::pool_last_non_pad(scores, ids, model->config().pad_token_id);
  auto want = expected.get("scores");
  REQUIRE(pooled.sizes() == want.sizes());
  CHECK((pooled - want).abs().max().item<double>() < 1e-4);
}

TEST_CASE("bf16 forward stays close to fp32", "[model]") {
  torch::NoGradGuard no_grad;
  auto dir = models() / "llama";
  auto f32 = model::load_language_model(dir, model::HeadKind::CausalLM, "float32");
  auto b16 = model::load_language_model(dir, model::HeadKind::CausalLM, "bfloat16");
  auto expected = io::Checkpoint::open(dir / "expected.safetensors");
  auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
  auto a = f32->forward({ids, mask, {}});
  auto b = b16->forward({ids, mask, {}});
  CHECK(b.scalar_type() == torch::kBFloat16);
  CHECK(max_diff_on_real(a, b.to(torch::kFloat32), mask) < 0.05);
}

TEST_CASE("bad model directories name the file and key or tensor", "[model]") {
  auto msg = test::input_error_of([] { model::parse_model_config(R"({"model_type": "gpt2", "vocab_size": 8})", "c.json"); });
  CHECK_THAT(msg, Contains("c.json: model_type `gpt2` is not supported"));
  msg = test::input_error_of([] { model::parse_model_config(R"({"model_type": "llama", "vocab_size": 8})", "c.json"); });
  CHECK_THAT(msg, Contains("c.json: required key `hidden_size` is missing"));
  msg = test::input_error_of([] {
    model::parse_model_config(
        R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "rope_scaling": {"rope_type": "ntk", "factor": 4.0}})",
        "c.json");
  });
  CHECK_THAT(msg, Contains("rope_type `ntk` is not supported"));
  msg = test::input_error_of([] { model::parse_model_config("{not json", "c.json"); });
  CHECK_THAT(msg, Contains("c.json: not valid JSON"));
  msg = test::input_error_of([] { model::load_language_model("/nonexistent/model", model::HeadKind::CausalLM); });
  CHECK_THAT(msg, Contains("does not exist"));

  // A checkpoint whose tensor shape does not match its config.
  auto tmp = std::filesystem::temp_directory_path() / "trlx_model_test_bad";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  std::filesystem::copy_file(models() / "qwen2" / "config.json", tmp / "config.json");
  auto good = io::Checkpoint::open_dir(models() / "qwen2");
  io::NamedTensors tensors;
  for (const auto& n : good.names()) {
    auto t = good.get(n, true);
    if (n == "model.norm.weight") t = torch::ones({7});
    if (n == "model.layers.1.mlp.up_proj.weight") continue;
    tensors.emplace_back(n, t);
  }
  io::save_checkpoint(tmp, tensors);
  msg = test::input_error_of([&] { model::load_language_model(tmp, model::HeadKind::CausalLM); });
  CHECK_THAT(msg, Contains("model.safetensors"));
  CHECK((msg.find("`model.layers.1.mlp.up_proj.weight` is missing") != std::string::npos ||
         msg.find("`model.norm.weight` has shape 7") != std::string::npos));
  std::filesystem::remove_all(tmp);
}

TEST_CASE("models written by trlx give transformers' numbers when transformers loads them", "[model][golden][save]") {
  torch::NoGradGuard no_grad;
  // Written by `trlx init-model`, loaded by transformers in scripts/fixtures/trlx_saved_fixtures.py.
  auto dir = models() / "trlx_init_qwen3";
  auto lm = model::load_language_model(dir, model::HeadKind::CausalLM);
  CHECK(lm->config().tie_word_embeddings);
  auto expected = io::Checkpoint::open(dir / "expected.safetensors");
  auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
  CHECK(max_diff_on_real(lm->forward({ids, mask, {}}), expected.get("logits"), mask) < 1e-4);

  dir = models() / "trlx_init_llama_score";
  auto rm = model::load_language_model(dir, model::HeadKind::SequenceClassification);
  expected = io::Checkpoint::open(dir / "expected.safetensors");
  auto pooled = model::pool_last_non_pad(rm->forward({ids, mask, {}}), ids, 0);
  CHECK((pooled - expected.get("scores")).abs().max().item<double>() < 1e-4);
}

TEST_CASE("save then load gives the same model, and a failed save keeps the old directory", "[model][save]") {
  torch::NoGradGuard no_grad;
  namespace fs = std::filesystem;
  auto tmp = fs::temp_directory_path() / "trlx_model_save_test";
  fs::remove_all(tmp);
  auto src = model::load_language_model(models() / "qwen3", model::HeadKind::CausalLM);
  model::SaveModelOptions sharded;
  sharded.max_shard_size = 40000;
  model::save_language_model(tmp / "out", *src, sharded);
  CHECK(fs::exists(tmp / "out" / "model.safetensors.index.json"));  // sharded by the small limit
  CHECK(fs::exists(tmp / "out" / "generation_config.json"));
  auto back = model::load_language_model(tmp / "out", model::HeadKind::CausalLM);
  auto expected = io::Checkpoint::open(models() / "qwen3" / "expected.safetensors");
  auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
  CHECK(torch::equal(src->forward({ids, mask, {}}), back->forward({ids, mask, {}})));
  // Saving over it as one file replaces the shards.
  model::save_language_model(tmp / "out", *back);
  CHECK(fs::exists(tmp / "out" / "model.safetensors"));
  CHECK_FALSE(fs::exists(tmp / "out" / "model.safetensors.index.json"));

  // A save that fails part-way (a tensor that cannot be stored) leaves the
  // previous model as it was.
  auto bad = model::load_language_model(models() / "qwen3", model::HeadKind::CausalLM);
  bad->model->norm->weight.set_data(torch::ones({bad->config().hidden_size}, torch::kFloat64).to(torch::kComplexFloat));
  CHECK_THROWS(model::save_language_model(tmp / "out", *bad));
  auto still = model::load_language_model(tmp / "out", model::HeadKind::CausalLM);
  CHECK(torch::equal(still->forward({ids, mask, {}}), back->forward({ids, mask, {}})));
  size_t leftovers = 0;
  for (const auto& e : fs::directory_iterator(tmp))
    if (e.path().filename().string().rfind(".out.", 0) == 0) ++leftovers;
  CHECK(leftovers == 0);
  fs::remove_all(tmp);
}

TEST_CASE("generation stops at eos and when the stop callback says so", "[model][generate]") {
  auto model = model::load_language_model(models() / "qwen2", model::HeadKind::CausalLM);
  std::ifstream in(models() / "qwen2" / "generate.json");
  const auto j = nlohmann::json::parse(in);
  const auto prompts = j["prompts"].get<std::vector<std::vector<int64_t>>>();
  const auto greedy = j["greedy"].get<std::vector<std::vector<int64_t>>>();
  model::GenerationOptions o;
  o.max_new_tokens = 10;
  // The third token of row 0's greedy continuation as eos: row 0 ends there.
  o.eos_token_ids = {greedy[0][2]};
  auto g = model::generate(*model, {prompts[0]}, o);
  CHECK(g.finished(0));
  CHECK(g.completions[0] == std::vector<int64_t>(greedy[0].begin(), greedy[0].begin() + 3));
  // A stop rule (as stop strings are checked on decoded text) ends a row early.
  o.eos_token_ids = {};
  o.stop = [](const std::vector<int64_t>& c) { return c.size() >= 4; };
  g = model::generate(*model, prompts, o);
  for (size_t r = 0; r < prompts.size(); ++r) {
    CHECK(g.finished(r));
    CHECK(g.completions[r] == std::vector<int64_t>(greedy[r].begin(), greedy[r].begin() + 4));
  }
}

TEST_CASE("a packed row whose positions branch equals the branches run as separate rows", "[model][packing]") {
  // Row: prompt (5 tokens), branch A (4), branch B (3, positions back to 5),
  // then padding. A and B must see the prompt and themselves only, in values
  // and in gradients; mistral_window (window 4) also checks that the sliding
  // window counts positions, not slots.
  for (const char* name : {"qwen2", "mistral_window"}) {
    INFO(name);
    auto model = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    const auto br = branched_row(model->config().vocab_size, 0);
    const auto &prompt = br.prompt, &a = br.a, &b = br.b;
    auto packed = model->hidden_states(br.batch);
    auto sep_a = model->hidden_states({torch::cat({prompt, a}).unsqueeze(0), {}, {}});
    auto sep_b = model->hidden_states({torch::cat({prompt, b}).unsqueeze(0), {}, {}});
    CHECK((packed[0].slice(0, 0, 9) - sep_a[0]).abs().max().item<double>() < 1e-5);
    CHECK((packed[0].slice(0, 9, 12) - sep_b[0].slice(0, 5)).abs().max().item<double>() < 1e-5);
    // Gradients: the same loss over both layouts (summed in another order).
    model->zero_grad();
    (packed[0].slice(0, 0, 9).pow(2).sum() + packed[0].slice(0, 9, 12).pow(2).sum()).backward();
    std::vector<torch::Tensor> g_packed;
    for (auto& p : model->parameters()) g_packed.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    model->zero_grad();
    (sep_a[0].pow(2).sum() + sep_b[0].slice(0, 5).pow(2).sum()).backward();
    size_t i = 0;
    for (auto& p : model->parameters()) {
      const auto& g = g_packed[i++];
      REQUIRE(g.defined() == p.grad().defined());
      if (g.defined())
        CHECK((p.grad() - g).abs().max().item<double>() < 1e-5 * std::max(1.0, g.abs().max().item<double>()));
    }
  }
  // Independent documents (positions only restart at 0 with a new document id)
  // have no branches: their mask stays the plain block-diagonal one.
  auto pos = torch::tensor({{0, 1, 2, 0, 1, 1}}, torch::kInt64);
  auto docs = torch::tensor({{0, 0, 0, 1, 1, -1}}, torch::kInt64);
  auto real = torch::tensor({{1, 1, 1, 1, 1, 0}}, torch::kInt64);
  CHECK_FALSE(model::branch_mask(pos, docs, real).defined());
  auto m = model::branch_mask(torch::tensor({{0, 1, 2, 1, 2}}, torch::kInt64), torch::zeros({1, 5}, torch::kInt64),
                              torch::ones({1, 5}, torch::kInt64));
  REQUIRE(m.defined());
  // Token 3 (position 1, a branch after the first token) sees token 0 and itself.
  CHECK(torch::equal(m[0][0][3], torch::tensor({true, false, false, true, false})));
  CHECK(torch::equal(m[0][0][4], torch::tensor({true, false, false, true, true})));

  // Random branched rows with padding inside and after branches, against the
  // definition walked out pair by pair: q sees itself, and a real key k < q
  // while every position in (k, q] is above k's.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t b = 2, t = 3 + static_cast<int64_t>(rng() % 14);
    std::vector<int64_t> pv, rv;
    for (int64_t r = 0; r < b; ++r) {
      int64_t p = 0;
      for (int64_t i = 0; i < t; ++i) {
        if (i > 0) p = rng() % 4 == 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(p + 1)) : p + 1;
        pv.push_back(p);
        rv.push_back(rng() % 5 == 0 ? 0 : 1);
      }
      rv[static_cast<size_t>(r * t)] = 1;
    }
    // One restart of a real token at the start of the second row makes it branch.
    pv[static_cast<size_t>(t)] = 0, pv[static_cast<size_t>(t + 1)] = 1, pv[static_cast<size_t>(t + 2)] = 0;
    rv[static_cast<size_t>(t + 1)] = 1, rv[static_cast<size_t>(t + 2)] = 1;
    const auto pos_r = torch::tensor(pv, torch::kInt64).view({b, t});
    const auto real_r = torch::tensor(rv, torch::kInt64).view({b, t});
    const auto got = model::branch_mask(pos_r, torch::zeros({b, t}, torch::kInt64), real_r);
    REQUIRE(got.defined());
    auto want = torch::zeros({b, 1, t, t}, torch::kBool);
    for (int64_t r = 0; r < b; ++r)
      for (int64_t q = 0; q < t; ++q)
        for (int64_t k = 0; k <= q; ++k) {
          bool seen = k == q || rv[static_cast<size_t>(r * t + k)] == 1;
          for (int64_t j = k + 1; j <= q && seen; ++j) seen = pv[static_cast<size_t>(r * t + j)] > pv[static_cast<size_t>(r * t + k)];
          want[r][0][q][k] = k == q || seen;
        }
    INFO("trial " << trial << " positions " << pos_r << " real " << real_r);
    CHECK(torch::equal(got, want));
  }
}

TEST_CASE("outputs_from runs the last layer only where hidden states are wanted, with the full forward's values and gradients",
          "[model][outputs_from]") {
  // Each family (fused projections, sliding windows, soft-capped attention,
  // local rope, sandwich norms) on three layouts: the golden padded batch
  // (masked attention), the same rows with trailing padding (no mask, so the
  // last layer builds its own causal rows), and a packed row with branches.
  // The loss is a fixed weighting of the wanted positions: its gradient
  // through the shortened last layer must equal the full forward's.
  auto grads_of = [](model::LanguageModelImpl& m) {
    std::vector<torch::Tensor> out;
    for (auto& p : m.parameters()) out.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    m.zero_grad();
    return out;
  };
  for (const char* name : {"llama", "mistral_window", "qwen2", "qwen3", "phi3", "gemma", "gemma2_softcap", "gemma3_text"}) {
    INFO(name);
    auto dir = models() / name;
    auto model = model::load_language_model(dir, model::HeadKind::CausalLM);
    auto expected = io::Checkpoint::open(dir / "expected.safetensors");
    auto ids = expected.get("input_ids", true), mask = expected.get("attention_mask", true);
    const int64_t t = ids.size(1);
    auto [rids, rmask] = with_trailing_padding(ids, mask);
    struct Case {
      const char* what;
      model::Batch batch;
      int64_t from;
    };
    model::Batch trailing{rids, rmask, {}};
    trailing.padding_trails = true;
    const std::vector<Case> cases = {{"padded", {ids, mask, {}}, t / 2},
                                     {"trailing padding", trailing, t - 3},
                                     {"trailing padding, one position", trailing, t - 1},
                                     {"packed branches", branched_row(model->config().vocab_size, 1).batch, 4}};
    for (const auto& c : cases) {
      INFO(c.what << ", outputs_from " << c.from);
      auto full = model->hidden_states(c.batch);
      auto weights = torch::rand({full.size(0), full.size(1) - c.from, full.size(2)});
      (full.slice(1, c.from) * weights).sum().backward();
      const auto want = grads_of(*model);
      model::Batch shortened = c.batch;
      shortened.outputs_from = c.from;
      auto part = model->hidden_states(shortened);
      REQUIRE(part.sizes() == full.slice(1, c.from).sizes());
      CHECK((part - full.slice(1, c.from)).abs().max().item<double>() < 1e-5);
      (part * weights).sum().backward();
      const auto got = grads_of(*model);
      for (size_t i = 0; i < got.size(); ++i) {
        REQUIRE(got[i].defined() == want[i].defined());
        if (got[i].defined())
          CHECK((got[i] - want[i]).abs().max().item<double>() < 1e-5 * std::max(1.0, want[i].abs().max().item<double>()));
      }
    }
  }
  // Outside the rows, or with a KV cache: refused.
  auto model = model::load_language_model(models() / "qwen2", model::HeadKind::CausalLM);
  model::Batch bad{torch::ones({1, 4}, torch::kInt64), {}, {}};
  bad.outputs_from = 4;
  CHECK_THROWS(model->hidden_states(bad));
}

TEST_CASE("weights loaded with their casts deferred view the checkpoint until placed, then equal an eager load",
          "[model]") {
  // The quickstart model written in bf16, loaded in fp32 (the default dtype).
  test::TempDir dir;
  {
    auto m = model::load_language_model(test::tiny_model(), model::HeadKind::CausalLM);
    m->to(torch::kBFloat16);
    model::save_language_model(dir.path / "bf16", *m);
  }
  auto eager = model::load_language_model(dir.path / "bf16", model::HeadKind::CausalLM, "float32");
  auto lazy = model::load_language_model(dir.path / "bf16", model::HeadKind::CausalLM, "float32", /*defer_casts=*/true);
  const auto params = lazy->parameters();
  CHECK(eager->deferred_casts() == 0);
  CHECK(lazy->deferred_casts() == params.size());
  for (const auto& p : params) {
    CHECK(p.scalar_type() == torch::kBFloat16);
    CHECK(lazy->placed_dtype(p) == torch::kFloat32);
  }
  // Adapters take the dtype their base weights are placed in, and a module
  // trained in full keeps a frozen original that is placed alike.
  model::LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  lc.target_modules = std::vector<std::string>{"q_proj", "v_proj"};
  lc.modules_to_save = std::vector<std::string>{"embed_tokens"};
  for (auto* m : {eager.get(), lazy.get()}) {
    torch::manual_seed(3);
    model::apply_lora(*m, lc);
  }
  lazy->apply_deferred_casts();
  CHECK(lazy->deferred_casts() == 0);
  const auto want = eager->named_parameters(true);
  const auto got = lazy->named_parameters(true);
  REQUIRE(got.size() == want.size());
  for (const auto& p : want) {
    INFO(p.key());
    const auto& g = got[p.key()];
    CHECK(g.scalar_type() == torch::kFloat32);
    CHECK(g.scalar_type() == p.value().scalar_type());
    CHECK(g.requires_grad() == p.value().requires_grad());
    CHECK(torch::equal(g, p.value()));
  }
}

// The reference role: with LoRA and no separate reference model, every
// Engine method that takes Role::Reference computes with the base model,
// whatever trains (adapters, modules_to_save copies of the embedding or the
// head, tied or untied), also when the run continues from a saved adapter.
// The expected values come from the base checkpoint loaded on its own and
// the log-softmax written out here, not from the engine.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include <unistd.h>

#include "config/loader.hpp"
#include "engine/engine.hpp"
#include "model/loading.hpp"
#include "model/lora.hpp"
#include "support.hpp"
#include "trainers/sft_config.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("trlx_roles_test") {}
};

trainers::SFTConfig config_for(const fs::path& model, const std::vector<std::pair<std::string, std::vector<std::string>>>& flags) {
  config::ConfigLoader loader(trainers::sft_schema());
  loader.apply_flag("model_name_or_path", {model.string()});
  loader.apply_flag("bf16", {"false"});
  loader.apply_flag("gradient_checkpointing", {"false"});
  loader.apply_flag("use_peft", {"true"});
  loader.apply_flag("lora_dropout", {"0"});
  for (const auto& [k, v] : flags) loader.apply_flag(k, v);
  trainers::SFTConfig c;
  loader.resolve(&c);
  return c;
}

// Moves every trained tensor away from its initial value, so the policy
// (adapters on, trained copies in place) differs from the base everywhere.
void perturb_trainable(engine::Engine& e) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  for (auto& p : trlx::engine::EngineProbe::policy(e).parameters())
    if (p.requires_grad()) p.add_(torch::randn_like(p) * 0.5);
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

struct Inputs {
  model::Batch batch;
  torch::Tensor targets, mask;
};

Inputs inputs_for(int64_t vocab) {
  auto gen = torch::make_generator<at::CPUGeneratorImpl>(3);
  Inputs in;
  auto ids = torch::randint(vocab, {2, 9}, gen, torch::kInt64);
  in.batch.input_ids = ids.slice(1, 0, 8);
  in.batch.attention_mask = torch::ones({2, 8}, torch::kInt64);
  in.targets = ids.slice(1, 1, 9);
  in.mask = torch::ones({2, 8}, torch::kFloat32);
  in.mask.index_put_({0, 0}, 0.0);
  return in;
}

// Everything the reference role answers, from the engine.
struct RoleView {
  torch::Tensor hidden, logps, head, mean_logits, head_weight;
};

RoleView view(engine::Engine& e, engine::Role role, const Inputs& in) {
  RoleView v;
  v.hidden = e.forward(role, in.batch).detach();
  v.logps = e.logprobs(role, v.hidden, in.targets, in.mask).logps.detach();
  v.head = e.head(role, v.hidden).detach();
  v.mean_logits = e.mean_logits(role, v.hidden);
  v.head_weight = e.head_weight(role);
  return v;
}

// The same quantities from the base checkpoint, computed directly.
RoleView base_view(const fs::path& dir, const Inputs& in) {
  torch::NoGradGuard no_grad;
  auto m = model::load_language_model(dir, model::HeadKind::CausalLM);
  m->eval();
  RoleView v;
  v.hidden = m->hidden_states(in.batch);
  v.head_weight = m->head_weight().detach();
  v.head = torch::matmul(v.hidden, v.head_weight.t());
  v.logps = torch::log_softmax(v.head, -1).gather(-1, in.targets.unsqueeze(-1)).squeeze(-1) * in.mask;
  v.mean_logits = torch::matmul(v.hidden, v.head_weight.mean(0));
  return v;
}

void check_equal(const RoleView& got, const RoleView& want, double tol) {
  CHECK(max_diff(got.hidden, want.hidden) < tol);
  CHECK(max_diff(got.logps, want.logps) < tol);
  CHECK(max_diff(got.head, want.head) < tol);
  CHECK(max_diff(got.mean_logits, want.mean_logits) < tol);
  CHECK(max_diff(got.head_weight, want.head_weight) < tol);
}

}  // namespace

TEST_CASE("reference role with LoRA is the base model in every Engine method", "[engine][roles]") {
  struct Case {
    const char* name;
    fs::path model;
    std::vector<std::string> to_save;
  };
  const fs::path tied = test::data_dir() / "models" / "llama3_rope_tied";
  const fs::path untied = test::data_dir() / "models" / "llama";
  const std::vector<Case> cases = {
      {"tied head, adapters only", tied, {}},
      {"tied head, embedding trained in full (modules_to_save)", tied, {"embed_tokens"}},
      {"untied head, head trained in full (modules_to_save)", untied, {"lm_head"}},
      {"untied head, embedding and head trained in full", untied, {"embed_tokens", "lm_head"}},
  };
  for (const bool chunked : {false, true}) {
    for (const auto& c : cases) {
      INFO(c.name << (chunked ? ", chunked log-probs" : ", plain log-probs"));
      std::vector<std::pair<std::string, std::vector<std::string>>> flags = {
          {"lora_target_modules", {"all-linear"}},
          {"use_liger_kernel", {chunked ? "true" : "false"}},
          {"logprob_chunk_size", {"5"}}};
      if (!c.to_save.empty()) flags.push_back({"lora_modules_to_save", c.to_save});
      const auto cfg = config_for(c.model, flags);
      engine::Engine e(cfg, engine::load_policy(cfg, model::HeadKind::CausalLM), "dpo");
      perturb_trainable(e);
      const auto base = model::load_language_model(c.model, model::HeadKind::CausalLM);
      const Inputs in = inputs_for(base->config().vocab_size);
      const RoleView want = base_view(c.model, in);
      check_equal(view(e, engine::Role::Reference, in), want, 1e-5);
      // The policy does differ from the base (else the checks above prove nothing).
      const RoleView policy = view(e, engine::Role::Policy, in);
      CHECK(max_diff(policy.logps, want.logps) > 1e-3);
      if (!c.to_save.empty()) CHECK(max_diff(policy.head_weight, want.head_weight) > 1e-3);
    }
  }
}

TEST_CASE("reference role without a separate reference, on a policy loaded from a saved adapter, is the base model", "[engine][roles]") {
  const fs::path base_dir = test::data_dir() / "models" / "llama3_rope_tied";
  TempDir tmp;
  const fs::path adapter = tmp.path / "adapter";
  {
    // A first run's adapter, embedding copy included, saved as PEFT does.
    const auto cfg = config_for(base_dir, {{"lora_target_modules", {"all-linear"}},
                                           {"lora_modules_to_save", {"embed_tokens"}}});
    engine::Engine e(cfg, engine::load_policy(cfg, model::HeadKind::CausalLM), "dpo");
    perturb_trainable(e);
    auto m = model::load_language_model(base_dir, model::HeadKind::CausalLM);
    model::LoraConfig lc;
    lc.r = cfg.lora_r;
    lc.alpha = static_cast<double>(cfg.lora_alpha);
    lc.target_modules = std::vector<std::string>{"all-linear"};
    lc.modules_to_save = std::vector<std::string>{"embed_tokens"};
    auto info = model::apply_lora(*m, lc);
    {
      torch::NoGradGuard no_grad;
      auto src = trlx::engine::EngineProbe::policy(e).named_parameters(true);
      for (auto& p : m->named_parameters(true)) p.value().copy_(src[p.key()]);
    }
    model::AdapterSaveOptions o;
    o.base_model_name_or_path = base_dir.string();
    model::save_adapter(adapter, *m, info, o);
  }
  const auto cfg = config_for(adapter, {});
  auto loaded = engine::load_policy(cfg, model::HeadKind::CausalLM);
  REQUIRE(loaded.lora);
  engine::Engine e(cfg, std::move(loaded), "kto");
  const Inputs in = inputs_for(model::load_language_model(base_dir, model::HeadKind::CausalLM)->config().vocab_size);
  const RoleView want = base_view(base_dir, in);
  check_equal(view(e, engine::Role::Reference, in), want, 1e-5);
  CHECK(max_diff(view(e, engine::Role::Policy, in).logps, want.logps) > 1e-3);
}

// Runs a trainer on a fixture's config and data, for the golden tests against TRL.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include "trainer_fixture.hpp"

#include <fstream>

#include "config/loader.hpp"
#include "io/safetensors.hpp"
#include "model/loading.hpp"
#include "support.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/cpo.hpp"
#include "trainers/kto.hpp"
#include "trainers/reward.hpp"

namespace trlx::test {

namespace fs = std::filesystem;

namespace {

// Config flags with their values, in the order they are applied.
using FlagList = std::vector<std::pair<std::string, std::vector<std::string>>>;

std::vector<std::string> values_of(const nlohmann::json& v) {
  std::vector<std::string> out;
  auto one = [](const nlohmann::json& x) { return x.is_string() ? x.get<std::string>() : x.dump(); };
  if (v.is_array())
    for (const auto& x : v) out.push_back(one(x));
  else
    out.push_back(one(v));
  return out;
}

// A fixture's global batch (per-device batch x its processes) as trlx's
// per-device batch on this run's ranks.
std::string per_device_for(const Run& run, int64_t fixture_per_device, int64_t fixture_processes) {
  const int64_t global = fixture_per_device * fixture_processes;
  INFO("the fixture's global batch " << global << " on " << run.world_size() << " ranks");
  REQUIRE(global % run.world_size() == 0);
  return std::to_string(global / run.world_size());
}

// Step k's micro-batches: `accumulation` consecutive slices of its global batch.
std::vector<std::vector<size_t>> micro_batches(const std::vector<size_t>& step_batch, int64_t accumulation,
                                               int world_size) {
  const size_t per = step_batch.size() / static_cast<size_t>(accumulation);
  REQUIRE(per * static_cast<size_t>(accumulation) == step_batch.size());
  REQUIRE(per >= static_cast<size_t>(world_size));  // every rank gets examples
  std::vector<std::vector<size_t>> out;
  for (size_t i = 0; i < step_batch.size(); i += per)
    out.emplace_back(step_batch.begin() + static_cast<std::ptrdiff_t>(i),
                     step_batch.begin() + static_cast<std::ptrdiff_t>(i + per));
  return out;
}

// The batches of steps 0..n-1 in file order: per-device x processes x accumulation rows each.
std::vector<std::vector<size_t>> file_order_steps(size_t n, size_t rows_per_step) {
  std::vector<std::vector<size_t>> out(n);
  for (size_t s = 0; s < n; ++s)
    for (size_t j = 0; j < rows_per_step; ++j) out[s].push_back(s * rows_per_step + j);
  return out;
}

template <class C>
C load_config(const config::Schema& schema, const FlagList& flags) {
  config::ConfigLoader loader(schema);
  for (const auto& [k, v] : flags) loader.apply_flag(k, v);
  C c;
  loader.resolve(&c);
  return c;
}

// The fixture's config as flags (but what only TRL's loop reads), then `run`'s.
FlagList flags_of(const nlohmann::json& config, const Run& run, const std::string& per_device) {
  FlagList out;
  for (const auto& [k, v] : config.items()) {
    if (k == "max_steps" || k == "seed" || k == "per_device_train_batch_size") continue;
    out.emplace_back(k, values_of(v));
  }
  out.emplace_back("per_device_train_batch_size", std::vector<std::string>{per_device});
  for (const auto& [k, v] : run.flags) out.emplace_back(k, std::vector<std::string>{v});
  return out;
}

FlagList base_flags(const fs::path& data) {
  return {{"model_name_or_path", {tiny_model().string()}},
          {"dataset_name", {data.string()}},
          {"bf16", {"false"}},
          {"gradient_checkpointing", {"false"}}};
}

// Tokens the step saw on all ranks (TRL's num_tokens, cumulative).
double tokens_of(engine::Engine& e, const engine::Trainer& trainer, const std::vector<std::vector<size_t>>& micro) {
  std::vector<double> t = {0.0};
  for (const auto& mb : micro)
    t[0] += trainer.collate("train", local_share(e, mb)).at("attention_mask").sum().item<double>();
  e.sum_across_ranks(t);
  return t[0];
}

}  // namespace

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  INFO(path.string());
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

void Comparison::check(double got, double want, const std::string& what) {
  const double d = std::abs(got - want);
  if (known_divergent.count(what.substr(what.rfind(' ') + 1))) {
    divergent_worst = std::max(divergent_worst, d);
    return;
  }
  worst = std::max(worst, d);
  ++checked;
  INFO(what << ": trlx " << got << ", reference " << want);
  CHECK(d <= tolerance * std::max(1.0, std::abs(want)));
}

double mean_of(const engine::MetricSums& m, const std::string& name) {
  const auto v = m.mean(name);
  INFO(name);
  REQUIRE(v.has_value());
  return *v;
}

engine::MetricSums summed_over_ranks(engine::Engine& engine, const engine::MetricSums& local) {
  engine::MetricSums out = local;
  out.read();
  // The same names on every rank (a trainer's metrics must not depend on
  // its rank's data), then the engine's own reduction.
  std::vector<double> n = {static_cast<double>(out.values.size() + out.per_batch.size() + out.entries.size())};
  const double mine = n[0];
  engine.sum_across_ranks(n);
  REQUIRE(n[0] == mine * engine.world_size());
  trlx::engine::EngineProbe::reduce_metrics(engine, out);
  return out;
}

std::vector<size_t> local_share(const engine::Engine& engine, const std::vector<size_t>& global_batch) {
  // As Engine::collate_local splits: ceil(n / world) per rank, in rank order
  // (the replays give every rank at least one row).
  const size_t w = static_cast<size_t>(engine.world_size()), r = static_cast<size_t>(engine.rank());
  const size_t per = (global_batch.size() + w - 1) / w;
  const size_t lo = std::min(global_batch.size(), r * per), hi = std::min(global_batch.size(), lo + per);
  return {global_batch.begin() + static_cast<std::ptrdiff_t>(lo), global_batch.begin() + static_cast<std::ptrdiff_t>(hi)};
}

trainers::DPOConfig dpo_config(const fs::path& data, const nlohmann::json& extra) {
  auto flags = base_flags(data);
  flags.push_back({"max_length", {"64"}});
  flags.push_back({"per_device_train_batch_size", {"4"}});
  flags.push_back({"learning_rate", {"1e-3"}});
  flags.push_back({"lr_scheduler_type", {"constant"}});
  for (const auto& [k, v] : extra.items()) flags.emplace_back(k, values_of(v));
  return load_config<trainers::DPOConfig>(trainers::dpo_schema(), flags);
}

trainers::PreferenceSplit prepare_dpo(const trainers::DPOConfig& c) {
  auto tok = text::Tokenizer::from_dir(tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  trainers::PreferenceDataOptions o;
  o.dataset_name = c.dataset_name;
  o.skip_bad_rows = c.skip_bad_rows;
  o.max_length = c.max_length;
  o.truncation_mode = c.truncation_mode;
  return trainers::prepare_preference_split(o, tok, &tmpl, "train", true);
}

DPOSetup make_dpo(const trainers::DPOConfig& c, bool separate_reference, std::shared_ptr<dist::Communicator> comm) {
  auto split = prepare_dpo(c);
  DPOSetup s;
  s.files = split.files;
  auto policy = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  s.engine = std::make_unique<engine::Engine>(c, policy, "dpo", tiny_model(), std::nullopt, std::move(comm));
  if (separate_reference) s.engine->set_reference(model::load_language_model(tiny_model(), model::HeadKind::CausalLM));
  if (c.sync_ref_model) s.engine->sync_reference_every(c.ref_model_sync_steps, c.ref_model_mixup_alpha);
  std::map<std::string, std::vector<trainers::PreferenceExample>> splits;
  splits["train"] = std::move(split.examples);
  s.trainer = std::make_unique<trainers::DPOTrainer>(c, std::move(splits), 0);
  return s;
}

void compare_steps(const StepValues& got, const nlohmann::json& want_steps, const std::string& name, Comparison& cmp) {
  REQUIRE(got.size() == want_steps.size());
  for (size_t k = 0; k < got.size(); ++k) {
    const std::string at = name + " step " + std::to_string(k + 1) + " ";
    const auto& want = want_steps[k];
    for (const auto& [key, v] : want.items()) {
      if (key == "step" || cmp.ignored.count(key)) continue;
      {
        INFO(at << key << ": the reference logs it, trlx does not");
        REQUIRE(got[k].count(key));
      }
      cmp.check(got[k].at(key), v.get<double>(), at + key);
    }
    // trlx's own additions, which TRL does not log: each reward function's
    // share of null answers.
    auto trlx_only = [](const std::string& key) {
      const std::string suffix = "/null_frac";
      return (key.rfind("rewards/", 0) == 0 || key.rfind("eval_rewards/", 0) == 0) && key.size() > suffix.size() &&
             key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    for (const auto& [key, v] : got[k]) {
      INFO(at << key << ": trlx logs it, the reference does not");
      CHECK((want.contains(key) || cmp.ignored.count(key) || trlx_only(key)));
    }
  }
}

namespace {

// One step's values: the engine's loss and grad norm, the tokens so far, and
// the means of the metrics summed over ranks.
std::map<std::string, double> values_of_step(std::pair<double, double> loss_and_norm, double tokens,
                                             const engine::MetricSums& metrics) {
  std::map<std::string, double> out = {
      {"loss", loss_and_norm.first}, {"grad_norm", loss_and_norm.second}, {"num_tokens", tokens}};
  for (const auto& [k, v] : metrics.means()) out[k] = v;
  return out;
}

}  // namespace

StepValues dpo_steps(const nlohmann::json& cs, const Run& run) {
  const auto& config = cs.at("config");
  nlohmann::json extra = nlohmann::json::object();
  for (const auto& [k, v] : config.items())
    if (k != "max_steps" && k != "seed") extra[k] = v;
  extra["per_device_train_batch_size"] =
      per_device_for(run, config.at("per_device_train_batch_size").get<int64_t>(), cs.value("num_processes", 1));
  for (const auto& [k, v] : run.flags) extra[k] = v;
  auto s = make_dpo(dpo_config(data_dir() / "dpo" / cs.at("data").get<std::string>(), extra),
                    cs.value("separate_reference", true), run.comm);
  StepValues out;
  double tokens = 0;
  for (const auto& batch : cs.at("batches")) {
    const auto micro = micro_batches(batch.get<std::vector<size_t>>(), config.value("gradient_accumulation_steps", 1),
                                     run.world_size());
    tokens += tokens_of(*s.engine, *s.trainer, micro);
    auto ln = trlx::engine::EngineProbe::step_on(*s.engine, *s.trainer, micro);
    // One micro-batch per step in the fixtures: its metrics are the step's.
    REQUIRE(micro.size() == 1);
    out.push_back(values_of_step(ln, tokens, summed_over_ranks(*s.engine, s.trainer->last_metrics())));
  }
  return out;
}

StepValues reference_free_steps(const nlohmann::json& cs, const Run& run) {
  const bool cpo = cs.at("trainer") == "cpo";
  const auto& config = cs.at("config");
  auto flags = base_flags(data_dir() / "dpo" / cs.value("data", std::string("text")));
  for (auto& f : flags_of(config, run,
                          per_device_for(run, config.at("per_device_train_batch_size").get<int64_t>(),
                                         cs.value("num_processes", 1))))
    flags.push_back(std::move(f));
  trainers::CPOConfig cc;
  trainers::ORPOConfig oc;
  if (cpo) cc = load_config<trainers::CPOConfig>(trainers::cpo_schema(), flags);
  else oc = load_config<trainers::ORPOConfig>(trainers::orpo_schema(), flags);
  const config::TrainingConfig& base = cpo ? static_cast<const config::TrainingConfig&>(cc) : oc;
  auto tok = text::Tokenizer::from_dir(tiny_model());
  trainers::PreferenceDataOptions o;
  o.dataset_name = base.dataset_name;
  o.max_length = base.max_length;
  std::map<std::string, std::vector<trainers::SidedPair>> splits;
  splits["train"] = trainers::prepare_sided_preference_split(o, tok, nullptr, "train", true).pairs;
  auto policy = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  engine::Engine engine(base, policy, cs.at("name").get<std::string>(), tiny_model(), std::nullopt, run.comm);
  trainers::ReferenceFreeTrainer trainer(cpo ? trainers::ReferenceFreeTrainer::Kind::CPO : trainers::ReferenceFreeTrainer::Kind::ORPO,
                                         cpo ? &cc : nullptr, cpo ? nullptr : &oc, std::move(splits), *tok.pad_token_id());
  StepValues out;
  for (const auto& batch : cs.at("batches")) {
    const auto micro = micro_batches(batch.get<std::vector<size_t>>(), config.value("gradient_accumulation_steps", 1),
                                     run.world_size());
    auto ln = trlx::engine::EngineProbe::step_on(engine, trainer, micro);
    REQUIRE(micro.size() == 1);
    auto v = values_of_step(ln, 0, summed_over_ranks(engine, trainer.last_metrics()));
    v.erase("num_tokens");  // TRL's CPO/ORPO do not log it
    out.push_back(std::move(v));
  }
  return out;
}

namespace {

// What KTO and reward replays share: TRL's trl_config as trlx flags and the
// file-order steps it trained on.
struct PlainReplay {
  FlagList flags;
  std::vector<std::vector<std::vector<size_t>>> steps;  // per step, its micro-batches
};

PlainReplay plain_replay(const nlohmann::json& fixture, const Run& run, const fs::path& data) {
  const auto& tc = fixture.at("trl_config");
  const int64_t per_device = tc.at("per_device_train_batch_size").get<int64_t>();
  const int64_t processes = fixture.value("num_processes", 1);
  const int64_t accumulation = tc.at("gradient_accumulation_steps").get<int64_t>();
  PlainReplay r;
  r.flags = base_flags(data);
  for (const char* k : {"gradient_accumulation_steps", "learning_rate", "lr_scheduler_type", "weight_decay", "max_length"})
    r.flags.emplace_back(k, values_of(tc.at(k)));
  r.flags.emplace_back("per_device_train_batch_size", std::vector<std::string>{per_device_for(run, per_device, processes)});
  for (const auto& [k, v] : run.flags) r.flags.emplace_back(k, std::vector<std::string>{v});
  for (const auto& step : file_order_steps(fixture.at("steps").size(), static_cast<size_t>(per_device * processes * accumulation)))
    r.steps.push_back(micro_batches(step, accumulation, run.world_size()));
  return r;
}

// One step whose metrics TRL logs from its starting weights: the trainer's
// loss on this rank's share of each micro-batch, without gradients, over all
// ranks; then the step.
std::map<std::string, double> plain_step(engine::Engine& e, engine::Trainer& trainer,
                                         const std::vector<std::vector<size_t>>& micro, double* tokens) {
  engine::MetricSums m;
  {
    torch::NoGradGuard ng;
    for (const auto& mb : micro) m.merge(trainer.loss(e, trainer.collate("train", local_share(e, mb))).metrics);
  }
  m = summed_over_ranks(e, m);
  *tokens += tokens_of(e, trainer, micro);
  auto ln = trlx::engine::EngineProbe::step_on(e, trainer, micro);
  return values_of_step(ln, *tokens, m);
}

}  // namespace

StepValues kto_steps(const nlohmann::json& fixture, const Run& run) {
  auto r = plain_replay(fixture, run, data_dir() / "kto" / "train.jsonl");
  const auto& tc = fixture.at("trl_config");
  for (const char* k : {"beta", "desirable_weight", "undesirable_weight"}) r.flags.emplace_back(k, values_of(tc.at(k)));
  auto c = load_config<trainers::KTOConfig>(trainers::kto_schema(), r.flags);
  auto [tok, tmpl] = trainers::load_tokenizer_and_template(tiny_model(), std::nullopt);
  std::map<std::string, std::vector<trainers::KTOExample>> splits;
  splits["train"] = trainers::prepare_kto_split(c, tok, nullptr, "train", true).examples;
  REQUIRE(splits["train"].size() == 12);
  engine::Engine e(c, model::load_language_model(tiny_model(), model::HeadKind::CausalLM), "kto", tiny_model(),
                   std::nullopt, run.comm);
  e.set_reference(model::load_language_model(tiny_model(), model::HeadKind::CausalLM));
  // KL pairs are formed inside each rank's share of a micro-batch, as TRL
  // forms them inside each per-device batch.
  trainers::KTOTrainer trainer(c, std::move(splits), trainers::resolve_pad_id(tok, std::nullopt, "kto"));
  StepValues out;
  double tokens = 0;
  for (const auto& micro : r.steps) out.push_back(plain_step(e, trainer, micro, &tokens));
  return out;
}

StepValues reward_steps(const nlohmann::json& fixture, const Run& run) {
  const fs::path data = data_dir() / "reward";
  auto r = plain_replay(fixture, run, data / "train.jsonl");
  r.flags.emplace_back("center_rewards_coefficient", values_of(fixture.at("trl_config").at("center_rewards_coefficient")));
  auto c = load_config<trainers::RewardConfig>(trainers::reward_schema(), r.flags);
  auto tok = text::Tokenizer::from_dir(tiny_model());
  std::map<std::string, std::vector<trainers::RewardExample>> splits;
  splits["train"] = trainers::prepare_reward_split(c, tok, nullptr, "train", true).examples;
  REQUIRE(splits["train"].size() == 12);
  auto policy = model::load_language_model(tiny_model(), model::HeadKind::SequenceClassification);
  {
    torch::NoGradGuard ng;
    auto init = io::Checkpoint::open(data / "score_init.safetensors");
    policy->score->weight.copy_(init.get("score.weight", true));
  }
  engine::Engine e(c, policy, "reward", tiny_model(), std::nullopt, run.comm);
  trainers::RewardTrainer trainer(c, std::move(splits), trainers::resolve_pad_id(tok, std::nullopt, "reward"));
  StepValues out;
  double tokens = 0;
  for (const auto& micro : r.steps) out.push_back(plain_step(e, trainer, micro, &tokens));
  return out;
}

namespace {

struct Result {
  double loss = 0;
  std::vector<torch::Tensor> grads;
  std::map<std::string, double> metrics;
};

Result run_loss(engine::Engine& e, engine::Trainer& trainer, const engine::TensorMap& batch) {
  auto& policy = engine::EngineProbe::policy(e);
  for (auto& p : policy.parameters()) p.mutable_grad() = torch::Tensor();
  auto out = trainer.loss(e, batch);
  out.loss_sum.backward();
  Result r;
  r.loss = out.loss_sum.item<double>();
  for (auto& p : policy.parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  r.metrics = out.metrics.means();
  return r;
}

}  // namespace

void check_shared_equals_separate(engine::Engine& e, engine::Trainer& trainer, const engine::TensorMap& batch,
                                  const std::string& key_prefix) {
  REQUIRE(batch.count(key_prefix + "shared_input_ids"));
  auto separate = batch;
  for (auto it = separate.begin(); it != separate.end();)
    it = it->first.rfind(key_prefix + "shared_", 0) == 0 ? separate.erase(it) : std::next(it);
  // The packed rows' five keys, and where the packed forward is cut, the first slot it computes.
  REQUIRE(separate.size() + 5 + batch.count(key_prefix + "shared_outputs_from") == batch.size());
  const auto s = run_loss(e, trainer, batch), p = run_loss(e, trainer, separate);
  CHECK(s.loss == Approx(p.loss).margin(1e-5));
  REQUIRE(s.metrics.size() == p.metrics.size());
  for (const auto& [k, v] : p.metrics) {
    INFO(k);
    REQUIRE(s.metrics.count(k));
    CHECK(s.metrics.at(k) == Approx(v).margin(1e-4));
  }
  double worst = 0, largest = 0;
  for (size_t i = 0; i < s.grads.size(); ++i) {
    worst = std::max(worst, (s.grads[i] - p.grads[i]).abs().max().item<double>());
    largest = std::max(largest, p.grads[i].abs().max().item<double>());
  }
  CHECK(largest > 0);
  // fp32 sums in another order (other row shapes): a wrong mask or index
  // moves gradients by far more.
  CHECK(worst < 1e-4 * std::max(1.0, largest));
}

}  // namespace trlx::test

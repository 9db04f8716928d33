#include "engine/engine.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <regex>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "dist/comm/make_communicator.hpp"
#include "dist/strategy/make_strategy.hpp"
#include "dist/env/launcher_env.hpp"
#include "model/lora.hpp"
#include "engine/autocast.hpp"
#include "engine/checkpoint.hpp"
#include "io/atomic_write.hpp"
#include "model/adapter_dir.hpp"
#include "model/loading.hpp"
#include "model/saving.hpp"

namespace trlx::engine {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<bool> g_stop{false};
// Set when the program starts (static initialisation), for the
// time-to-first-step figure users compare launchers and tools by.
const Clock::time_point g_process_start = Clock::now();

void on_signal(int) { g_stop = true; }

// Parameters that get no weight decay: biases and norm weights, by the same
// name rules as the reference Trainer.
bool no_decay(const std::string& name) {
  static const std::regex re(R"(bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.))");
  return std::regex_search(name, re);
}

int64_t every(double steps_or_fraction, int64_t total) {
  if (steps_or_fraction >= 1) return static_cast<int64_t>(steps_or_fraction);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(steps_or_fraction * static_cast<double>(total))));
}

std::string human(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

std::string duration(double s) {
  const int64_t t = static_cast<int64_t>(s);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  return fmt::format("{}m{:02d}s", t / 60, t % 60);
}

model::LoraConfig lora_config(const config::TrainingConfig& c) {
  model::LoraConfig l;
  l.r = c.lora_r;
  l.alpha = static_cast<double>(c.lora_alpha);
  l.dropout = c.lora_dropout;
  l.target_modules = c.lora_target_modules;
  l.modules_to_save = c.lora_modules_to_save;
  l.use_rslora = c.use_rslora;
  return l;
}

}  // namespace

void Engine::request_stop() { g_stop = true; }

LoadedPolicy load_policy(const config::TrainingConfig& c, model::HeadKind head) {
  if (!c.model_name_or_path) fail_input("{}: set model_name_or_path (a Hugging Face model directory)", c.trainer);
  const fs::path dir = *c.model_name_or_path;
  // A head the checkpoint lacks (a new reward or value head) is drawn from
  // the run's seed, so a run is reproducible whatever ran before it.
  torch::manual_seed(static_cast<uint64_t>(c.seed));
  LoadedPolicy out;
  out.tokenizer_dir = dir;
  if (!model::is_adapter_dir(dir)) {
    out.base_dir = dir;
    out.model = model::load_language_model(dir, head, c.dtype);
    return out;
  }
  const fs::path base = model::adapter_base_dir(dir);
  out.base_dir = base;
  if (!fs::exists(dir / "tokenizer.json")) out.tokenizer_dir = base;
  out.model = model::load_language_model(base, head, c.dtype);
  out.lora = model::load_adapter(dir, *out.model);
  log::info("continuing from the LoRA adapter in {} (base {})", dir.string(), base.string());
  return out;
}

Engine::Engine(const config::TrainingConfig& config, LoadedPolicy policy, std::string trainer_name)
    : Engine(config, policy.model, std::move(trainer_name), policy.tokenizer_dir, std::move(policy.lora)) {
  base_dir_ = policy.base_dir;
}

Engine::Engine(const config::TrainingConfig& config, model::LanguageModel policy, std::string trainer_name,
               std::optional<fs::path> tokenizer_dir, std::optional<model::LoraInfo> lora,
               std::shared_ptr<dist::Communicator> comm)
    : config_(config), policy_(std::move(policy)), lora_(std::move(lora)), comm_(std::move(comm)),
      trainer_name_(std::move(trainer_name)), tokenizer_dir_(std::move(tokenizer_dir)) {
  output_dir_ = config_.output_dir.value_or("trainer_output");
  dist_ = config_.accelerate_config ? config::read_accelerate_config(*config_.accelerate_config)
                                    : config::DistributedConfig{};
  plan_ = plan_memory(config_, dist_);
  for (const auto& n : plan_.notes) log::info("{}", n);
  const auto env = dist::detect_launcher();
  device_ = torch::Device(torch::kCPU);
  if (!dist_.use_cpu && torch::cuda::is_available())
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % torch::cuda::device_count()));
  if (!comm_) comm_ = dist::make_communicator(env, device_, std::chrono::seconds(config_.ddp_timeout));
  // One seed for everything: weights drawn by the trainer or for adapters,
  // dropout, sampling.
  torch::manual_seed(static_cast<uint64_t>(config_.seed));
  if (plan_.lora && !lora_) lora_ = model::apply_lora(*policy_, lora_config(config_));
  // TRL's disable_dropout: adapters attached above or loaded with the policy.
  if (config_.disable_dropout) model::disable_dropout(*policy_);
  if (!plan_.lora && lora_)
    fail_input("{} holds a LoRA adapter; set use_peft: true to train it",
               config_.model_name_or_path.value_or("the model"));
  policy_->to(device_);
  strategy_ = dist::make_strategy(dist_, config_, comm_, device_);
  // The strategy's sharding hooks run around each layer's runner, so a
  // checkpoint recompute runs inside the gather for that layer's backward.
  strategy_->wrap_model(*policy_);
  if (plan_.checkpointing) checkpoint_layers(*policy_, plan_.reentrant);
  std::vector<dist::NamedParam> trainable;
  for (auto& p : policy_->named_parameters(true))
    if (p.value().requires_grad()) trainable.push_back({p.key(), p.value()});
  strategy_->setup(trainable);
  std::vector<size_t> decay_idx, plain_idx;
  for (size_t i = 0; i < trainable.size(); ++i) (no_decay(trainable[i].name) ? plain_idx : decay_idx).push_back(i);
  // What the optimizer updates: the parameters, or this rank's shards of them.
  auto opt_groups = strategy_->optimizer_groups({decay_idx, plain_idx});
  const auto& decay = opt_groups.at(0);
  const auto& plain = opt_groups.at(1);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(config_.learning_rate)
                                                            .betas({config_.adam_beta1, config_.adam_beta2})
                                                            .eps(config_.adam_epsilon)
                                                            .weight_decay(wd));
  };
  groups.emplace_back(decay, opts(config_.weight_decay));
  groups.emplace_back(plain, opts(0.0));
  optimizer_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(config_.learning_rate));
}

model::LanguageModelImpl& Engine::model_for(Role role) {
  if (role == Role::Policy) return *policy_;
  if (reference_) return *reference_;
  if (lora_) return *policy_;  // with adapters disabled, see RoleScope
  throw Error("this trainer asked for a reference model, but the engine was given none");
}

// Sets the model up for one role while alive, for every Engine method that
// takes a Role: the reference runs without gradients and, when it is the
// policy itself, with its adapters off and the original modules in place of
// the modules_to_save copies (a trained embedding copy tied to the head
// included). Precision is the caller's: forwards and heads add autocast.
class Engine::RoleScope {
 public:
  RoleScope(Engine& e, Role role) : model(e.model_for(role)) {
    if (role != Role::Reference) return;
    no_grad_.emplace();
    if (!e.reference_) base_only_.emplace(*e.policy_);
  }
  model::LanguageModelImpl& model;

 private:
  std::optional<torch::NoGradGuard> no_grad_;
  std::optional<model::AdaptersDisabled> base_only_;
};

torch::Tensor Engine::forward(Role role, const model::Batch& batch) {
  RoleScope scope(*this, role);
  Autocast ac(config_.use_bf16(), device_.type());
  return scope.model.hidden_states(to_device(batch));
}

losses::TokenLogProbs Engine::logprobs(Role role, const torch::Tensor& hidden, const torch::Tensor& targets,
                                       const torch::Tensor& mask, const losses::LogProbOptions& options) {
  RoleScope scope(*this, role);
  Autocast ac(config_.use_bf16(), device_.type());
  auto& m = scope.model;
  auto o = options;
  o.chunk_size = plan_.logprob_chunk_size;
  losses::TokenLogProbs out;
  m.with_head(hidden, [&] {
    out = losses::token_logprobs(hidden, m.head_weight(), targets.to(device_), mask.to(device_), o);
    return std::vector<torch::Tensor>{out.logps, out.entropy};
  });
  return out;
}

torch::Tensor Engine::head(Role role, const torch::Tensor& hidden) {
  RoleScope scope(*this, role);
  Autocast ac(config_.use_bf16(), device_.type());
  return scope.model.head(hidden);
}

torch::Tensor Engine::mean_logits(Role role, const torch::Tensor& hidden) {
  // A metric: fp32 and no gradient whatever the role.
  RoleScope scope(*this, role);
  torch::NoGradGuard no_grad;
  auto& m = scope.model;
  torch::Tensor w;
  m.with_head(torch::Tensor(), [&] {
    w = m.head_weight().detach().to(torch::kFloat32).mean(0);
    return std::vector<torch::Tensor>{};
  });
  return torch::matmul(hidden.detach().to(torch::kFloat32), w);
}

torch::Tensor Engine::head_weight(Role role) {
  RoleScope scope(*this, role);
  torch::NoGradGuard no_grad;
  auto& m = scope.model;
  torch::Tensor w;
  // A copy under sharding: the gathered weight is released after.
  m.with_head(torch::Tensor(), [&] {
    w = m.head_weight().detach();
    if (strategy_->shards_parameters()) w = w.clone();
    return std::vector<torch::Tensor>{};
  });
  return w;
}

void Engine::sync_reference(double alpha) {
  if (!reference_)
    fail_input("sync_ref_model needs a separate reference model (ref_model, or training without use_peft)");
  strategy_->lerp_parameters(*reference_, *policy_, alpha);
  reference_moved_ = true;
}

model::Batch Engine::to_device(const model::Batch& b) const {
  auto mv = [&](const torch::Tensor& t) { return t.defined() ? t.to(device_) : t; };
  return {mv(b.input_ids), mv(b.attention_mask), mv(b.position_ids), mv(b.document_ids)};
}

void Engine::set_reference(model::LanguageModel reference) {
  reference_ = std::move(reference);
  for (auto& p : reference_->parameters()) p.requires_grad_(false);
  if (config_.disable_dropout) model::disable_dropout(*reference_);
  reference_->to(device_);
  reference_->eval();
  // Sharded like the policy under ZeRO-3/FSDP, whole on every rank otherwise.
  strategy_->wrap_frozen_model(*reference_);
}

std::vector<std::vector<size_t>> Engine::epoch_batches(size_t n, int64_t epoch) const {
  // The order of an epoch depends only on the seed and the epoch, so a
  // resumed run sees the same batches as an uninterrupted one.
  const uint64_t seed = static_cast<uint64_t>(config_.data_seed.value_or(config_.seed)) * 1000003ULL +
                        static_cast<uint64_t>(epoch);
  auto gen = at::detail::createCPUGenerator(seed);
  auto perm = torch::randperm(static_cast<int64_t>(n), gen, torch::kInt64);
  const auto* p = perm.data_ptr<int64_t>();
  // Global batches: every rank's examples of a step together, so that N
  // ranks x batch B see the examples 1 rank x batch N*B sees.
  const size_t bs = static_cast<size_t>(config_.per_device_train_batch_size * world_size());
  std::vector<std::vector<size_t>> out;
  for (size_t i = 0; i < n; i += bs) {
    if (config_.dataloader_drop_last && i + bs > n) break;
    std::vector<size_t> b;
    for (size_t j = i; j < std::min(n, i + bs); ++j) b.push_back(static_cast<size_t>(p[j]));
    out.push_back(std::move(b));
  }
  return out;
}

void Engine::setup(Trainer& trainer) {
  const size_t n = trainer.num_examples("train");
  if (n == 0) fail_input("the training split has no examples");
  batches_per_epoch_ = epoch_batches(n, 0).size();
  if (batches_per_epoch_ == 0)
    fail_input("per_device_train_batch_size ({}) x {} process(es) is larger than the {} training examples and "
               "dataloader_drop_last is set: no batch to train on",
               config_.per_device_train_batch_size, world_size(), n);
  micro_per_step_ = config_.gradient_accumulation_steps;
  const int64_t steps_per_epoch =
      std::max<int64_t>(1, (static_cast<int64_t>(batches_per_epoch_) + micro_per_step_ - 1) / micro_per_step_);
  schedule_.type = config_.lr_scheduler_type;
  schedule_.base_lr = config_.learning_rate;
  schedule_.total_steps = config_.max_steps > 0
                              ? config_.max_steps
                              : static_cast<int64_t>(std::ceil(config_.num_train_epochs * static_cast<double>(steps_per_epoch)));
  schedule_.warmup_steps = warmup_steps_for(config_.warmup_steps, config_.warmup_ratio, schedule_.total_steps);
  if (config_.lr_scheduler_num_cycles) schedule_.num_cycles = *config_.lr_scheduler_num_cycles;
  if (config_.lr_scheduler_min_lr_rate) schedule_.min_lr_rate = *config_.lr_scheduler_min_lr_rate;
  if (config_.lr_scheduler_min_lr)
    schedule_.min_lr_rate = config_.learning_rate > 0 ? *config_.lr_scheduler_min_lr / config_.learning_rate : 0;
}

TensorMap Engine::collate_local(Trainer& trainer, const std::string& split, const std::vector<size_t>& global_batch,
                                bool* stand_in) const {
  // This rank's consecutive share of a global batch; an uneven last batch
  // leaves later ranks fewer examples, possibly none: those compute on the
  // batch's first example, whose loss the caller discards.
  const size_t w = static_cast<size_t>(world_size()), r = static_cast<size_t>(rank());
  const size_t per = (global_batch.size() + w - 1) / w;
  size_t lo = std::min(global_batch.size(), r * per), hi = std::min(global_batch.size(), lo + per);
  *stand_in = lo == hi;
  if (*stand_in) lo = 0, hi = 1;
  TensorMap b = trainer.collate(split, std::vector<size_t>(global_batch.begin() + static_cast<std::ptrdiff_t>(lo),
                                                           global_batch.begin() + static_cast<std::ptrdiff_t>(hi)));
  for (auto& [k, v] : b)
    if (v.defined()) v = v.to(device_);
  return b;
}

std::pair<double, double> Engine::optimizer_step(Trainer& trainer, const std::vector<std::vector<size_t>>& micro,
                                                 MetricSums& metrics) {
  policy_->train();
  // The loss is normalised by the items (target tokens) of the whole
  // accumulated step on all ranks, so 1 x 8 and 8 x 1 and 2 ranks x 4 give
  // the same gradients; the strategy then sums the ranks' gradients.
  std::vector<TensorMap> batches;
  std::vector<char> stand_ins;
  double local_items = 0;
  for (const auto& idx : micro) {
    bool stand_in = false;
    batches.push_back(collate_local(trainer, "train", idx, &stand_in));
    stand_ins.push_back(stand_in);
    if (!stand_in) local_items += trainer.num_items(batches.back());
  }
  std::vector<double> counts = {local_items};
  strategy_->sum_across_ranks(counts);
  const double denom = std::max(1.0, config_.average_tokens_across_devices ? counts[0] : local_items);
  for (auto& lr_group : optimizer_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(lr_group.options()).lr(schedule_.lr(step_));
  optimizer_->zero_grad(true);
  double loss_total = 0, tokens = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    auto& b = batches[i];
    strategy_->begin_backward(/*sync=*/i + 1 == batches.size(), /*has_data=*/true);
    standing_in_ = stand_ins[i];
    LossOutput out = trainer.loss(*this, b);
    auto loss = out.loss_sum / denom;
    // A stand-in's backward runs (so every rank joins the same gathers and
    // reductions) with zero gradients.
    if (standing_in_) loss = loss * 0.0;
    loss.backward();
    if (!standing_in_) {
      loss_total += loss.item<double>();
      metrics.merge(out.metrics);
      if (b.count("attention_mask")) tokens += b.at("attention_mask").sum().item<double>();
    }
    standing_in_ = false;
    strategy_->end_backward();
  }
  if (config_.debug_check_grad_sync_steps > 0 && (step_ + 1) % config_.debug_check_grad_sync_steps == 0)
    strategy_->check_grads_in_sync();
  const double max_norm = config_.max_grad_norm > 0 ? config_.max_grad_norm : std::numeric_limits<double>::infinity();
  const double grad_norm = strategy_->clip_grad_norm(max_norm);
  optimizer_->step();
  strategy_->after_optimizer_step();
  ++step_;
  // Rank sums: the loss (already a share of the global mean when gradients
  // are summed), tokens, and whether any rank was asked to stop.
  std::vector<double> sums = {loss_total, tokens, g_stop ? 1.0 : 0.0};
  strategy_->sum_across_ranks(sums);
  if (sums[2] > 0) g_stop = true;
  tokens_seen_ += sums[1];
  const double loss = config_.average_tokens_across_devices ? sums[0] : sums[0] / world_size();
  return {loss, grad_norm};
}

std::pair<double, double> Engine::step_on(Trainer& trainer, const std::vector<std::vector<size_t>>& micro_batches) {
  setup(trainer);
  MetricSums m;
  return optimizer_step(trainer, micro_batches, m);
}

MetricSums Engine::evaluate(Trainer& trainer) {
  torch::NoGradGuard no_grad;
  policy_->eval();
  MetricSums m;
  const size_t n = trainer.num_examples("test");
  // Each rank evaluates a consecutive share of every global batch.
  const size_t bs = static_cast<size_t>(config_.per_device_eval_batch_size * world_size());
  double loss_sum = 0, items = 0;
  for (size_t i = 0; i < n; i += bs) {
    std::vector<size_t> idx;
    for (size_t j = i; j < std::min(n, i + bs); ++j) idx.push_back(j);
    bool stand_in = false;
    auto b = collate_local(trainer, "test", idx, &stand_in);
    standing_in_ = stand_in;
    auto out = trainer.loss(*this, b);
    standing_in_ = false;
    if (stand_in) continue;
    loss_sum += out.loss_sum.item<double>();
    items += trainer.num_items(b);
    m.merge(out.metrics);
  }
  m.add("loss", loss_sum, std::max(1.0, items));
  reduce_metrics(m);
  policy_->train();
  return m;
}

void Engine::reduce_metrics(MetricSums& m) {
  if (world_size() == 1) return;
  // Ranks normally log the same names; if one has a name another lacks (a
  // rank that saw no data in the window), the window is summed by name over
  // the union of names.
  std::string names;
  for (const auto& [k, v] : m.values) names += k + '\n';
  std::vector<double> lens(static_cast<size_t>(world_size()), 0);
  lens[static_cast<size_t>(rank())] = static_cast<double>(names.size());
  strategy_->sum_across_ranks(lens);
  const size_t maxlen = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
  auto mine = torch::zeros({static_cast<int64_t>(maxlen)}, torch::kInt64);
  for (size_t i = 0; i < names.size(); ++i) mine[static_cast<int64_t>(i)] = static_cast<int64_t>(names[i]);
  auto all = torch::zeros({static_cast<int64_t>(maxlen) * world_size()}, torch::kInt64);
  comm_->all_gather(mine, all)->wait();
  std::set<std::string> keys;
  auto* a = all.data_ptr<int64_t>();
  for (int r = 0; r < world_size(); ++r) {
    std::string cur;
    for (size_t i = 0; i < maxlen; ++i) {
      const char c = static_cast<char>(a[static_cast<size_t>(r) * maxlen + i]);
      if (c == '\n') {
        keys.insert(cur);
        cur.clear();
      } else if (c) {
        cur += c;
      }
    }
  }
  std::vector<double> flat;
  for (const auto& k : keys) {
    auto it = m.values.find(k);
    flat.push_back(it == m.values.end() ? 0.0 : it->second.first);
    flat.push_back(it == m.values.end() ? 0.0 : it->second.second);
  }
  strategy_->sum_across_ranks(flat);
  m.values.clear();
  size_t i = 0;
  for (const auto& k : keys) {
    m.values[k] = {flat[i], flat[i + 1]};
    i += 2;
  }
}

void Engine::log_metrics(const std::map<std::string, double>& m) {
  nlohmann::ordered_json j;
  for (const auto& [k, v] : m) j[k] = v;
  j["step"] = step_;
  log_history_.push_back(j.dump());
  if (rank() != 0) return;
  std::ofstream out(output_dir_ / "metrics.jsonl", std::ios::app);
  out << j.dump() << "\n";
  if (tensorboard_) {
    // transformers' TensorBoardCallback tags: eval_x -> eval/x, test_x -> test/x, x -> train/x.
    for (const auto& [k, v] : m) {
      if (k.rfind("eval_", 0) == 0) tensorboard_->scalar("eval/" + k.substr(5), v, step_);
      else if (k.rfind("test_", 0) == 0) tensorboard_->scalar("test/" + k.substr(5), v, step_);
      else tensorboard_->scalar("train/" + k, v, step_);
    }
    tensorboard_->flush();
  }
}

std::map<std::string, torch::Tensor> Engine::parameter_values(bool trainable_only) {
  // Every rank makes the same reads, so each joins the same gathers.
  struct EndReads {
    dist::Strategy& s;
    ~EndReads() { s.end_parameter_reads(); }
  } end_reads{*strategy_};
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : policy_->named_parameters(true)) {
    if (trainable_only && !p.value().requires_grad()) continue;
    strategy_->read_parameter(p.value());
    out[p.key()] = p.value().detach().clone();
  }
  return out;
}

void Engine::write_on_rank0(const std::function<void(const io::BeforeWrite&)>& write) {
  // Rank 0 writes; under parameter sharding it gathers one unit at a time
  // as the writer reaches it, and the other ranks join those gathers.
  if (rank() != 0) {
    strategy_->serve_parameter_reads();
    return;
  }
  struct EndReads {
    dist::Strategy& s;
    ~EndReads() { s.end_parameter_reads(); }
  } end_reads{*strategy_};
  write([this](const torch::Tensor& t) { strategy_->read_parameter(t); });
}

void Engine::save_full_model(model::LanguageModelImpl& m, const fs::path& dir, bool into_existing_dir) {
  write_on_rank0([&](const io::BeforeWrite& before_write) {
    model::SaveModelOptions so;
    so.tokenizer_dir = tokenizer_dir_;
    so.into_existing_dir = into_existing_dir;
    so.before_write = before_write;
    model::save_language_model(dir, m, so);
  });
}

void Engine::save_model(const fs::path& dir, bool into_existing_dir) {
  if (!lora_) return save_full_model(*policy_, dir, into_existing_dir);
  write_on_rank0([&](const io::BeforeWrite& before_write) {
    model::AdapterSaveOptions ao;
    ao.base_model_name_or_path = base_dir_ ? base_dir_->string() : config_.model_name_or_path.value_or("");
    ao.tokenizer_dir = tokenizer_dir_;
    ao.into_existing_dir = into_existing_dir;
    ao.before_write = before_write;
    model::save_adapter(dir, *policy_, *lora_, ao);
  });
}

std::string Engine::optimizer_file() const {
  return strategy_->shards_optimizer_state() ? fmt::format("optimizer-rank{}-of-{}.pt", rank(), world_size())
                                             : "optimizer.pt";
}

void Engine::save_checkpoint(int64_t epoch, size_t batch_in_epoch) {
  // Rank 0 writes what every rank holds alike; with sharded optimizer state
  // each rank adds its own shard first. The others wait so that no rank runs
  // ahead of a checkpoint.
  struct Barrier {
    dist::Communicator& c;
    ~Barrier() noexcept(false) {
      if (std::uncaught_exceptions() == 0) c.barrier();
    }
  } barrier{*comm_};
  const fs::path final_dir = output_dir_ / fmt::format("checkpoint-{}", step_);
  const fs::path tmp = output_dir_ / fmt::format(".checkpoint-{}.tmp", step_);
  if (rank() == 0) fs::remove_all(tmp);
  if (strategy_->shards_optimizer_state()) {
    comm_->barrier();
    fs::create_directories(tmp);
    torch::save(*optimizer_, (tmp / optimizer_file()).string());
    comm_->barrier();
  }
  // A reference TR-DPO moved is part of the state: saved beside the model.
  const fs::path reference_dir = tmp / "reference";
  if (rank() != 0) {
    save_model(tmp, true);  // joins rank 0's gathers under parameter sharding
    if (reference_moved_) save_full_model(*reference_, reference_dir, false);
    return;
  }
  try {
    // Into the existing temp dir: under sharded optimizer state it already
    // holds every rank's optimizer file, which a fresh directory would drop.
    save_model(tmp, true);
    if (reference_moved_) save_full_model(*reference_, reference_dir, false);
    if (!strategy_->shards_optimizer_state()) torch::save(*optimizer_, (tmp / optimizer_file()).string());
    auto rng = at::detail::getDefaultCPUGenerator().get_state();
    torch::save(rng, (tmp / "rng_state.pt").string());
    nlohmann::ordered_json state = {{"global_step", step_},
                                    {"epoch", epoch},
                                    {"batch_in_epoch", batch_in_epoch},
                                    {"max_steps", schedule_.total_steps},
                                    {"num_tokens", tokens_seen_},
                                    {"trainer", trainer_name_},
                                    {"log_history", nlohmann::ordered_json::array()}};
    for (const auto& l : log_history_) state["log_history"].push_back(nlohmann::ordered_json::parse(l));
    io::write_file_atomic(tmp / "trainer_state.json", state.dump(2) + "\n");
    io::fsync_directory(tmp);
    // Only a complete checkpoint gets its final name; one already there under
    // that name (saved again after a resume) is moved aside until then.
    const fs::path old = output_dir_ / fmt::format(".checkpoint-{}.old-{}", step_, getpid());
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    io::fsync_directory(output_dir_);
    fs::remove_all(old);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  log::info("saved {}", final_dir.string());
  if (config_.save_total_limit) {
    std::vector<std::pair<int64_t, fs::path>> ckpts;
    for (const auto& e : fs::directory_iterator(output_dir_)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("checkpoint-", 0) == 0) {
        try {
          ckpts.emplace_back(std::stoll(name.substr(11)), e.path());
        } catch (const std::exception&) {
        }
      }
    }
    std::sort(ckpts.begin(), ckpts.end());
    while (static_cast<int64_t>(ckpts.size()) > *config_.save_total_limit) {
      fs::remove_all(ckpts.front().second);
      ckpts.erase(ckpts.begin());
    }
  }
}

void Engine::load_full_weights(model::LanguageModelImpl& m, const fs::path& dir) {
  auto loaded = model::load_language_model(dir, m.head_kind(), "auto");
  auto src = loaded->named_parameters(true);
  strategy_->write_parameters(m, [&](const std::string& name, torch::Tensor& p) {
    if (!src.contains(name)) fail_input("resume_from_checkpoint: {} has no tensor {}", dir.string(), name);
    p.copy_(src[name]);
  });
}

void Engine::resume(const fs::path& dir, int64_t* epoch, size_t* batch_in_epoch) {
  const fs::path state_file = dir / "trainer_state.json";
  std::ifstream in(state_file);
  if (!in) fail_input("resume_from_checkpoint: {} is not a checkpoint (no trainer_state.json)", dir.string());
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
    step_ = state.at("global_step").get<int64_t>();
    *epoch = state.at("epoch").get<int64_t>();
    *batch_in_epoch = state.at("batch_in_epoch").get<size_t>();
    tokens_seen_ = state.value("num_tokens", 0.0);
    for (const auto& l : state.value("log_history", nlohmann::json::array())) log_history_.push_back(l.dump());
  } catch (const nlohmann::json::exception& e) {
    fail_input("resume_from_checkpoint: {} is corrupt: {}", state_file.string(), e.what());
  }
  for (const std::string& f : {optimizer_file(), std::string("rng_state.pt")})
    if (!fs::exists(dir / f))
      fail_input("resume_from_checkpoint: {} is missing {}{}", dir.string(), f,
                 strategy_->shards_optimizer_state()
                     ? fmt::format(" (optimizer state is saved per rank; resume with the same number of processes, {}, "
                                   "and the same strategy)",
                                   world_size())
                     : "");
  if (lora_) {
    // The checkpoint holds the adapter: attach it to a fresh base and take
    // the trained tensors from there.
    const auto base = base_dir_ ? *base_dir_ : fs::path(config_.model_name_or_path.value_or(""));
    auto fresh = model::load_language_model(base, policy_->head_kind(), "auto");
    model::load_adapter(dir, *fresh);
    auto src = fresh->named_parameters(true);
    // Frozen base tensors keep their values; under sharding write_parameters
    // hands out every tensor whole, so those are copied back from the base.
    strategy_->write_parameters(*policy_, [&](const std::string& name, torch::Tensor& p) {
      if (!src.contains(name))
        fail_input("resume_from_checkpoint: {} has no adapter tensor for {}", dir.string(), name);
      p.copy_(src[name]);
    });
  } else {
    load_full_weights(*policy_, dir);
  }
  strategy_->on_weights_loaded();  // ZeRO: master shards from the loaded weights
  if (fs::exists(dir / "reference" / "config.json")) {
    if (!reference_) {
      log::warn("{} holds a reference model moved by sync_ref_model, but this run has no separate reference; "
                "it is not used", (dir / "reference").string());
    } else {
      load_full_weights(*reference_, dir / "reference");
      reference_moved_ = true;
    }
  }
  torch::load(*optimizer_, (dir / optimizer_file()).string());
  torch::Tensor rng;
  torch::load(rng, (dir / "rng_state.pt").string());
  at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default generator's state
  gen.set_state(rng);
  log::info("resumed from {} at step {}", dir.string(), step_);
}

std::string Engine::memory_savers() const {
  std::vector<std::string> on;
  if (lora_)
    on.push_back(fmt::format("LoRA r={} on {} layers", lora_->config.r, lora_->adapted.size()));
  if (plan_.checkpointing)
    on.push_back(fmt::format("gradient checkpointing ({})", plan_.reentrant ? "reentrant" : "non-reentrant"));
  if (plan_.logprob_chunk_size > 0)
    on.push_back(fmt::format("chunked log-probs ({} tokens per chunk)", plan_.logprob_chunk_size));
  return on.empty() ? "none" : fmt::format("{}", fmt::join(on, ", "));
}

void Engine::print_startup(Trainer& trainer) {
  int64_t total = 0, trainable = 0;
  for (const auto& p : policy_->parameters()) {
    total += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  const int64_t world = world_size();
  const int64_t total_batch = config_.per_device_train_batch_size * config_.gradient_accumulation_steps * world;
  // Weights, gradients and two Adam moments in fp32 for what trains.
  const double mem = static_cast<double>(total) * 4 + static_cast<double>(trainable) * 12;
  std::vector<std::pair<std::string, std::string>> rows = {
      {"trainer", trainer_name_},
      {"model", config_.model_name_or_path.value_or("?")},
      {"parameters", fmt::format("{} total, {} trainable", human(static_cast<double>(total)), human(static_cast<double>(trainable)))},
      {"train examples", std::to_string(trainer.num_examples("train"))},
      {"eval examples", std::to_string(trainer.num_examples("test"))},
      {"batch", fmt::format("{} per device x {} accumulation x {} process(es) = {}", config_.per_device_train_batch_size,
                            config_.gradient_accumulation_steps, world, total_batch)},
      {"steps", fmt::format("{} ({} batches per epoch)", schedule_.total_steps, batches_per_epoch_)},
      {"schedule", fmt::format("{}, peak lr {:g}, warmup {} steps", schedule_.type, schedule_.base_lr, schedule_.warmup_steps)},
      // adamw_torch and adamw_torch_fused name the same update; trlx has one AdamW.
      {"optimizer", fmt::format("AdamW ({})", config_.optim)},
      {"precision", config_.use_bf16() ? "bf16 mixed" : "fp32"},
      {"device", fmt::format("{} x {}", world, device_.is_cuda() ? "cuda" : "cpu")},
      {"distributed", fmt::format("{} ({} communicator{})", strategy_->name(), comm_->backend(),
                                  dist_.source.empty() ? "" : ", " + dist_.source)},
      {"memory savers", memory_savers()},
      {"memory estimate", fmt::format("{:.1f} MB (weights + grads + Adam state, no activations)", mem / 1e6)},
      {"output_dir", output_dir_.string()},
  };
  std::string table = "\n";
  for (const auto& [k, v] : rows) table += fmt::format("  {:<18}{}\n", k, v);
  log::info("training setup:{}", table);
}

RunSummary Engine::train(Trainer& trainer) {
  setup(trainer);
  {
    std::error_code ec;
    fs::create_directories(output_dir_, ec);
    if (ec) fail_input("output_dir {} cannot be created: {}", output_dir_.string(), ec.message());
    // Fail before training, not at the first save, when output_dir is not writable.
    const fs::path probe = output_dir_ / fmt::format(".write-test-{}", getpid());
    std::ofstream t(probe);
    if (!t) fail_input("output_dir {} is not writable", output_dir_.string());
    t.close();
    fs::remove(probe);
  }
  int64_t epoch = 0;
  size_t batch_in_epoch = 0;
  if (config_.resume_from_checkpoint) {
    fs::path dir = *config_.resume_from_checkpoint;
    if (*config_.resume_from_checkpoint == "latest" || *config_.resume_from_checkpoint == "true") {
      int64_t best = -1;
      for (const auto& e : fs::directory_iterator(output_dir_)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("checkpoint-", 0) == 0) {
          try {
            const int64_t s = std::stoll(name.substr(11));
            if (s > best) best = s, dir = e.path();
          } catch (const std::exception&) {
          }
        }
      }
      if (best < 0) fail_input("resume_from_checkpoint: no checkpoint-N in {}", output_dir_.string());
    } else if (!fs::is_directory(dir)) {
      fail_input("resume_from_checkpoint: {} does not exist", dir.string());
    }
    resume(dir, &epoch, &batch_in_epoch);
  } else {
    if (rank() == 0) fs::remove(output_dir_ / "metrics.jsonl");
  }
  const bool to_tensorboard = std::any_of(config_.report_to.begin(), config_.report_to.end(),
                                          [](const std::string& s) { return s == "tensorboard" || s == "all"; });
  if (to_tensorboard && rank() == 0) {
    // TENSORBOARD_LOGGING_DIR overrides the directory, as in transformers.
    const char* dir = std::getenv("TENSORBOARD_LOGGING_DIR");
    tensorboard_ = std::make_unique<io::EventWriter>(dir && *dir ? fs::path(dir) : io::default_tensorboard_dir(output_dir_));
    log::info("TensorBoard event file: {}", tensorboard_->path().string());
  }
  print_startup(trainer);
  auto prev_term = std::signal(SIGTERM, on_signal);
  auto prev_int = std::signal(SIGINT, on_signal);
  g_stop = false;

  const int64_t log_every = every(config_.logging_steps, schedule_.total_steps);
  const int64_t save_every = every(config_.save_steps, schedule_.total_steps);
  const int64_t eval_every = every(config_.eval_steps.value_or(config_.logging_steps), schedule_.total_steps);
  const bool tty = isatty(STDERR_FILENO);
  MetricSums window;
  double window_loss = 0;
  int64_t window_steps = 0;
  double last_grad_norm = 0, last_loss = 0;
  const auto start = Clock::now();
  const int64_t start_step = step_;
  const double start_tokens = tokens_seen_;
  double first_step_seconds = 0;
  RunSummary summary;
  summary.output_dir = output_dir_;
  bool saved_at_step = false;
  auto batches = epoch_batches(trainer.num_examples("train"), epoch);
  while (step_ < schedule_.total_steps) {
    if (batch_in_epoch >= batches.size()) {
      ++epoch;
      batch_in_epoch = 0;
      batches = epoch_batches(trainer.num_examples("train"), epoch);
    }
    std::vector<std::vector<size_t>> micro;
    for (int64_t i = 0; i < micro_per_step_ && batch_in_epoch < batches.size(); ++i) micro.push_back(batches[batch_in_epoch++]);
    auto [loss, grad_norm] = optimizer_step(trainer, micro, window);
    if (step_ == start_step + 1)
      first_step_seconds = std::chrono::duration<double>(Clock::now() - g_process_start).count();
    saved_at_step = false;
    window_loss += loss;
    ++window_steps;
    last_grad_norm = grad_norm;
    last_loss = loss;
    if (!std::isfinite(loss)) log::warn("step {}: the loss is {}", step_, loss);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double rate = static_cast<double>(step_ - start_step) / std::max(1e-9, elapsed);
    const double eta = static_cast<double>(schedule_.total_steps - step_) / std::max(1e-9, rate);
    const double epoch_f = static_cast<double>(epoch) +
                           static_cast<double>(batch_in_epoch) / static_cast<double>(std::max<size_t>(1, batches.size()));
    // As transformers: an epoch ends after its last batch, or at the last
    // step when max_steps stops training inside it; the epoch strategies
    // log, evaluate and save then, in that order.
    const bool epoch_end = batch_in_epoch >= batches.size() || step_ == schedule_.total_steps;
    const bool log_now = (config_.logging_strategy == "steps" && (step_ % log_every == 0 ||
                                                                  (config_.logging_first_step && step_ == 1) ||
                                                                  step_ == schedule_.total_steps)) ||
                         (config_.logging_strategy == "epoch" && epoch_end);
    if (log_now) {
      reduce_metrics(window);
      std::map<std::string, double> m;
      m["loss"] = window_loss / std::max<int64_t>(1, window_steps);
      m["grad_norm"] = last_grad_norm;
      m["learning_rate"] = schedule_.lr(step_ - 1);  // the rate the step just used, as TRL logs it
      m["epoch"] = epoch_f;
      m["num_tokens"] = tokens_seen_;
      for (const auto& [k, v] : window.values) m[k] = v.first / std::max(1.0, v.second);
      log_metrics(m);
      std::string line;
      for (const auto& k : {"loss", "grad_norm", "learning_rate", "mean_token_accuracy", "entropy"})
        if (m.count(k)) line += fmt::format("{}={:.4g}  ", k, m[k]);
      if (tty) std::cerr << "\r\033[K";
      log::info("step {}/{}  {}epoch={:.2f}  {:.2f} it/s  ETA {}", step_, schedule_.total_steps, line, epoch_f, rate,
                duration(eta));
      window = {};
      window_loss = 0;
      window_steps = 0;
    } else if (tty && log::rank() == 0) {
      const int width = 30;
      const int filled = static_cast<int>(width * static_cast<double>(step_) / static_cast<double>(schedule_.total_steps));
      std::cerr << fmt::format("\r\033[K[{}{}] {}/{}  {:.2f} it/s  ETA {}  loss {:.4g}", std::string(static_cast<size_t>(filled), '#'),
                               std::string(static_cast<size_t>(width - filled), '.'), step_, schedule_.total_steps, rate,
                               duration(eta), loss)
                << std::flush;
    }
    if (trainer.num_examples("test") > 0 && ((config_.eval_strategy == "steps" && step_ % eval_every == 0) ||
                                             (config_.eval_strategy == "epoch" && epoch_end))) {
      auto e = evaluate(trainer);
      std::map<std::string, double> m;
      for (const auto& [k, v] : e.values) m["eval_" + k] = v.first / std::max(1.0, v.second);
      log_metrics(m);
      log::info("step {}: eval_loss={:.4g}", step_, m["eval_loss"]);
    }
    if ((config_.save_strategy == "steps" && step_ % save_every == 0) || (config_.save_strategy == "epoch" && epoch_end)) {
      save_checkpoint(epoch, batch_in_epoch);
      saved_at_step = true;
    }
    if (g_stop) {
      if (tty) std::cerr << "\n";
      log::warn("stop requested: saving at step {} and exiting", step_);
      if (!saved_at_step) save_checkpoint(epoch, batch_in_epoch);
      summary.interrupted = true;
      break;
    }
  }
  if (tty) std::cerr << "\r\033[K";
  std::signal(SIGTERM, prev_term);
  std::signal(SIGINT, prev_int);
  summary.steps = step_;
  summary.final_loss = last_loss;
  {
    const double runtime = std::chrono::duration<double>(Clock::now() - start).count();
    log_metrics({{"train_runtime", runtime},
                 {"train_steps_per_second", static_cast<double>(step_ - start_step) / std::max(1e-9, runtime)},
                 {"train_tokens_per_second", (tokens_seen_ - start_tokens) / std::max(1e-9, runtime)},
                 {"first_step_seconds", first_step_seconds}});
  }
  if (!summary.interrupted) {
    save_model(output_dir_, true);
    comm_->barrier();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    log::info("done: {} steps in {}, final loss {:.4g}, model saved to {}", step_, duration(elapsed), last_loss,
              output_dir_.string());
  }
  return summary;
}

}  // namespace trlx::engine

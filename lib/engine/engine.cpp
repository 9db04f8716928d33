#include "engine/engine.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/atomic_write.hpp"
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

// bf16 autocast for the duration of a forward/backward, as mixed precision
// does: matmuls in bf16, reductions and the weights in fp32.
class Autocast {
 public:
  Autocast(bool on, c10::DeviceType device) : on_(on), device_(device) {
    if (!on_) return;
    prev_ = at::autocast::is_autocast_enabled(device_);
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, prev_);
  }

 private:
  bool on_;
  c10::DeviceType device_;
  bool prev_ = false;
};

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

}  // namespace

void Engine::request_stop() { g_stop = true; }

Engine::Engine(const config::TrainingConfig& config, model::LanguageModel policy, std::string trainer_name,
               std::optional<fs::path> tokenizer_dir)
    : config_(config), policy_(std::move(policy)), trainer_name_(std::move(trainer_name)),
      tokenizer_dir_(std::move(tokenizer_dir)) {
  output_dir_ = config_.output_dir.value_or("trainer_output");
  // Switches every trainer shares that this version does not have yet: said
  // once here rather than in each trainer.
  if (config_.use_peft) fail_input("use_peft (LoRA) is not built yet in this version of trlx; set use_peft: false");
  if (config_.use_liger_kernel)
    log::warn("use_liger_kernel (chunked log-probs) is not built yet in this version of trlx: using the plain path");
  if (config_.gradient_checkpointing)
    log::warn("gradient_checkpointing is not built yet in this version of trlx: training without it (more memory)");
  // One seed for everything: weights drawn by the trainer, dropout, sampling.
  torch::manual_seed(static_cast<uint64_t>(config_.seed));
  std::vector<torch::Tensor> decay, plain;
  for (auto& p : policy_->named_parameters(true)) {
    if (!p.value().requires_grad()) continue;
    (no_decay(p.key()) ? plain : decay).push_back(p.value());
  }
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

torch::Tensor Engine::forward(model::LanguageModelImpl& model, const model::Batch& batch) {
  Autocast ac(config_.use_bf16(), model.head_weight().device().type());
  return model.hidden_states(batch);
}

losses::TokenLogProbs Engine::logprobs(model::LanguageModelImpl& model, const torch::Tensor& hidden,
                                       const torch::Tensor& targets, const torch::Tensor& mask,
                                       const losses::LogProbOptions& options) {
  Autocast ac(config_.use_bf16(), hidden.device().type());
  return losses::token_logprobs(hidden, model.head_weight(), targets, mask, options);
}

std::vector<std::vector<size_t>> Engine::epoch_batches(size_t n, int64_t epoch) const {
  // The order of an epoch depends only on the seed and the epoch, so a
  // resumed run sees the same batches as an uninterrupted one.
  const uint64_t seed = static_cast<uint64_t>(config_.data_seed.value_or(config_.seed)) * 1000003ULL +
                        static_cast<uint64_t>(epoch);
  auto gen = at::detail::createCPUGenerator(seed);
  auto perm = torch::randperm(static_cast<int64_t>(n), gen, torch::kInt64);
  const auto* p = perm.data_ptr<int64_t>();
  const size_t bs = static_cast<size_t>(config_.per_device_train_batch_size);
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
    fail_input("per_device_train_batch_size ({}) is larger than the {} training examples and dataloader_drop_last "
               "is set: no batch to train on",
               config_.per_device_train_batch_size, n);
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

std::pair<double, double> Engine::optimizer_step(Trainer& trainer, const std::vector<std::vector<size_t>>& micro,
                                                 MetricSums& metrics) {
  policy_->train();
  // The loss is normalised by the items (target tokens) of the whole
  // accumulated step, so 1 x 8 and 8 x 1 give the same gradients.
  std::vector<TensorMap> batches;
  double items = 0;
  for (const auto& idx : micro) {
    batches.push_back(trainer.collate("train", idx));
    items += trainer.num_items(batches.back());
  }
  const double denom = std::max(1.0, items);
  for (auto& lr_group : optimizer_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(lr_group.options()).lr(schedule_.lr(step_));
  optimizer_->zero_grad(true);
  double loss_total = 0;
  for (auto& b : batches) {
    LossOutput out = trainer.loss(*this, b);
    auto loss = out.loss_sum / denom;
    loss.backward();
    loss_total += loss.item<double>();
    metrics.merge(out.metrics);
    if (b.count("attention_mask")) tokens_seen_ += b.at("attention_mask").sum().item<double>();
  }
  std::vector<torch::Tensor> params;
  for (auto& g : optimizer_->param_groups())
    for (auto& p : g.params())
      if (p.grad().defined()) params.push_back(p);
  const double max_norm = config_.max_grad_norm > 0 ? config_.max_grad_norm : std::numeric_limits<double>::infinity();
  const double grad_norm = torch::nn::utils::clip_grad_norm_(params, max_norm);
  optimizer_->step();
  ++step_;
  return {loss_total, grad_norm};
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
  const size_t bs = static_cast<size_t>(config_.per_device_eval_batch_size);
  double loss_sum = 0, items = 0;
  for (size_t i = 0; i < n; i += bs) {
    std::vector<size_t> idx;
    for (size_t j = i; j < std::min(n, i + bs); ++j) idx.push_back(j);
    auto b = trainer.collate("test", idx);
    auto out = trainer.loss(*this, b);
    loss_sum += out.loss_sum.item<double>();
    items += trainer.num_items(b);
    m.merge(out.metrics);
  }
  m.add("loss", loss_sum, std::max(1.0, items));
  policy_->train();
  return m;
}

void Engine::log_metrics(const std::map<std::string, double>& m) {
  nlohmann::ordered_json j;
  for (const auto& [k, v] : m) j[k] = v;
  j["step"] = step_;
  log_history_.push_back(j.dump());
  std::ofstream out(output_dir_ / "metrics.jsonl", std::ios::app);
  out << j.dump() << "\n";
}

void Engine::save_checkpoint(int64_t epoch, size_t batch_in_epoch) {
  const fs::path final_dir = output_dir_ / fmt::format("checkpoint-{}", step_);
  const fs::path tmp = output_dir_ / fmt::format(".checkpoint-{}.tmp-{}", step_, getpid());
  fs::remove_all(tmp);
  try {
    model::SaveModelOptions so;
    so.tokenizer_dir = tokenizer_dir_;
    model::save_language_model(tmp, *policy_, so);
    torch::save(*optimizer_, (tmp / "optimizer.pt").string());
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
  for (const char* f : {"optimizer.pt", "rng_state.pt"})
    if (!fs::exists(dir / f)) fail_input("resume_from_checkpoint: {} is missing {}", dir.string(), f);
  auto loaded = model::load_language_model(dir, policy_->head_kind(), "auto");
  {
    torch::NoGradGuard no_grad;
    auto src = loaded->named_parameters(true);
    for (auto& p : policy_->named_parameters(true)) p.value().copy_(src[p.key()]);
  }
  torch::load(*optimizer_, (dir / "optimizer.pt").string());
  torch::Tensor rng;
  torch::load(rng, (dir / "rng_state.pt").string());
  at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default generator's state
  gen.set_state(rng);
  log::info("resumed from {} at step {}", dir.string(), step_);
}

void Engine::print_startup(Trainer& trainer) {
  int64_t total = 0, trainable = 0;
  for (const auto& p : policy_->parameters()) {
    total += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  const int64_t world = 1;
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
      {"precision", config_.use_bf16() ? "bf16 mixed" : "fp32"},
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
    fs::remove(output_dir_ / "metrics.jsonl");
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
      if (config_.eval_strategy == "epoch" && trainer.num_examples("test") > 0) {
        auto e = evaluate(trainer);
        std::map<std::string, double> m;
        for (const auto& [k, v] : e.values) m["eval_" + k] = v.first / std::max(1.0, v.second);
        log_metrics(m);
      }
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
    const bool log_now = config_.logging_strategy == "steps" &&
                         (step_ % log_every == 0 || (config_.logging_first_step && step_ == 1) || step_ == schedule_.total_steps);
    if (log_now) {
      std::map<std::string, double> m;
      m["loss"] = window_loss / std::max<int64_t>(1, window_steps);
      m["grad_norm"] = last_grad_norm;
      m["learning_rate"] = schedule_.lr(step_);  // the rate of the next step, as the reference logs it
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
    if (config_.eval_strategy == "steps" && trainer.num_examples("test") > 0 && step_ % eval_every == 0) {
      auto e = evaluate(trainer);
      std::map<std::string, double> m;
      for (const auto& [k, v] : e.values) m["eval_" + k] = v.first / std::max(1.0, v.second);
      log_metrics(m);
      log::info("step {}: eval_loss={:.4g}", step_, m["eval_loss"]);
    }
    if (config_.save_strategy == "steps" && step_ % save_every == 0) {
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
    model::SaveModelOptions so;
    so.tokenizer_dir = tokenizer_dir_;
    so.into_existing_dir = true;
    model::save_language_model(output_dir_, *policy_, so);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    log::info("done: {} steps in {}, final loss {:.4g}, model saved to {}", step_, duration(elapsed), last_loss,
              output_dir_.string());
  }
  return summary;
}

}  // namespace trlx::engine

// The training loop: batches of an epoch, one optimizer step over
// micro-batches, evaluation, and the run from start (or resume) to the end.
#include "engine/engine.hpp"
#include "engine/engine_impl.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <iostream>

#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "engine/device_memory.hpp"
#include "engine/adamw8bit.hpp"
#include "engine/fused_adamw.hpp"
#include "dist/comm/comm_common.hpp"
#include "core/stop.hpp"
#include "io/dir_lock.hpp"

namespace trlx::engine {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// Whether the ranks, summing their stop requests (core/stop.hpp) with the
// step's other sums, agreed to stop after this step. The loop reads this, not
// the request: a signal landing
// between that sum and the check reaches one rank only, and is agreed on
// after the next step.
bool g_stop_agreed = false;
// Set when the program starts (static initialisation), for the
// time-to-first-step figure users compare launchers and tools by.
const Clock::time_point g_process_start = Clock::now();

// Updates the current step has made (a step of several updates can start a
// round after its first): a step cut short before any is the last finished
// step's state.
int64_t g_updates_in_step = 0;

void on_signal(int) { stop::request(); }

int64_t every(double steps_or_fraction, int64_t total) {
  if (steps_or_fraction >= 1) return static_cast<int64_t>(steps_or_fraction);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(steps_or_fraction * static_cast<double>(total))));
}

std::string duration(double s) {
  const int64_t t = static_cast<int64_t>(s);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  return fmt::format("{}m{:02d}s", t / 60, t % 60);
}

// Where training time goes, when TRLX_PHASE_TIMES=1 is set: wall seconds
// per phase of the optimizer steps, printed by rank 0 at the end of the run.
// Off by default: on a GPU each phase then ends with a device
// synchronisation, so that its kernels are charged to it.
class PhaseClock {
 public:
  static PhaseClock& get() {
    static PhaseClock clock;
    return clock;
  }
  bool on() const { return on_; }
  // Starts timing (the first phase begins now).
  void begin() {
    if (on_) last_ = Clock::now();
  }
  // Charges the time since the last mark to `phase`.
  void mark(const char* phase, const torch::Device& device) {
    if (!on_ || !last_) return;
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
    const auto now = Clock::now();
    auto it = std::find_if(totals_.begin(), totals_.end(), [&](const auto& t) { return t.first == phase; });
    if (it == totals_.end()) it = totals_.insert(totals_.end(), {phase, 0.0});
    it->second += std::chrono::duration<double>(now - *last_).count();
    last_ = now;
  }
  void report(int64_t steps) const {
    if (!on_ || totals_.empty()) return;
    double total = 0;
    for (const auto& [name, s] : totals_) total += s;
    log::info("where the {} steps' {:.2f} s went (TRLX_PHASE_TIMES):", steps, total);
    for (const auto& [name, s] : totals_)
      log::info("  {:<48} {:9.3f} s  {:8.1f} ms/step  {:5.1f}%", name, s, 1e3 * s / std::max<int64_t>(1, steps),
                100.0 * s / std::max(1e-12, total));
  }

 private:
  PhaseClock() {
    const char* v = std::getenv("TRLX_PHASE_TIMES");
    on_ = v && *v && std::string(v) != "0";
  }
  bool on_ = false;
  std::optional<Clock::time_point> last_;
  std::vector<std::pair<std::string, double>> totals_;
};

}  // namespace

void Engine::request_stop() { stop::request(); }

std::vector<std::vector<size_t>> Engine::Impl::epoch_batches(size_t n, int64_t epoch) const {
  // The order of an epoch depends only on the seed and the epoch, so a
  // resumed run sees the same batches as an uninterrupted one.
  const uint64_t seed = static_cast<uint64_t>(config_.data_seed.value_or(config_.seed)) * 1000003ULL +
                        static_cast<uint64_t>(epoch);
  auto gen = at::detail::createCPUGenerator(seed);
  auto perm = config_.train_sampling_strategy == "sequential" ? torch::arange(static_cast<int64_t>(n), torch::kInt64)
                                                              : torch::randperm(static_cast<int64_t>(n), gen, torch::kInt64);
  const auto* p = perm.data_ptr<int64_t>();
  // Global batches: every rank's examples of a step together, so that N
  // ranks x batch B see the examples 1 rank x batch N*B sees.
  // An online trainer's batches are its rounds, whole ones only.
  const bool online = online_prompts_per_round_ > 0;
  const size_t bs = online ? static_cast<size_t>(online_prompts_per_round_)
                           : static_cast<size_t>(config_.per_device_train_batch_size * data_size());
  std::vector<std::vector<size_t>> out;
  for (size_t i = 0; i < n; i += bs) {
    if ((online || config_.dataloader_drop_last) && i + bs > n) break;
    std::vector<size_t> b;
    for (size_t j = i; j < std::min(n, i + bs); ++j) b.push_back(static_cast<size_t>(p[j]));
    out.push_back(std::move(b));
  }
  return out;
}

namespace {

// router_aux_loss_coef as the reference trainers resolve it: the field, else
// the model config's; a field set for a model without experts is refused.
double router_aux_coefficient(const Trainer& trainer, const model::ModelConfig& model,
                              const std::optional<double>& field) {
  if (field && *field != 0 && !model.is_moe())
    fail_input("router_aux_loss_coef is {} but the model (model_type `{}`) is not a mixture of experts, so there is "
               "no load-balancing loss to weight: remove the field (or set it to 0)",
               *field, model.model_type);
  if (field && *field != 0 && !model.router_balance_loss)
    fail_input("router_aux_loss_coef is {} but a {} model has no load-balancing loss (its router balances the experts "
               "with a correction bias instead): remove the field (or set it to 0)",
               *field, model.model_type);
  if (!model.is_moe() || !model.router_balance_loss) return 0.0;
  switch (trainer.router_aux_loss()) {
    case Trainer::RouterAuxLoss::ForMixtures:
      return field.value_or(model.router_aux_loss_coef);
    case Trainer::RouterAuxLoss::WhenConfigAsks:
      return model.output_router_logits ? model.router_aux_loss_coef : 0.0;
    case Trainer::RouterAuxLoss::Never:
      break;
  }
  return 0.0;
}

}  // namespace

void Engine::Impl::setup(Trainer& trainer) {
  const size_t n = trainer.num_examples("train");
  if (n == 0) fail_input("the training split has no examples");
  online_prompts_per_round_ = trainer.prompts_per_round();
  batches_per_epoch_ = epoch_batches(n, 0).size();
  if (batches_per_epoch_ == 0 && online_prompts_per_round_ > 0)
    fail_input("a generation round takes {} prompts, more than the {} of the training split: lower "
               "generation_batch_size (or per_device_train_batch_size) or add prompts",
               online_prompts_per_round_, n);
  if (batches_per_epoch_ == 0)
    fail_input("per_device_train_batch_size ({}) x {} process(es) is larger than the {} training examples and "
               "dataloader_drop_last is set: no batch to train on",
               config_.per_device_train_batch_size, data_size(), n);
  if (seq_size() > 1 && online_prompts_per_round_ > 0)
    fail_input("{}: this trainer does not support sequence parallelism (sp_size {}): it builds its model inputs after "
               "generation, and the sequence sharding cannot be applied to the generation batch (as TRL refuses "
               "it); set sp_size to 1",
               dist_.parallelism.source, seq_size());
  micro_per_step_ = config_.gradient_accumulation_steps;
  router_aux_coef_ = router_aux_coefficient(trainer, policy_->config(), config_.router_aux_loss_coef);
  if (seq_size() > 1 && router_aux_coef_ != 0)
    fail_input("{}: splitting sequences over ranks (sp_size or cp_size {}) with a mixture of experts' "
               "load-balancing loss is not built in trlx; set router_aux_loss_coef: 0 or train without it",
               dist_.parallelism.source, seq_size());
  // An online epoch trains on each round's micro-batches, passes times over.
  const int64_t micro_per_epoch =
      online_prompts_per_round_ > 0
          ? static_cast<int64_t>(batches_per_epoch_) * trainer.passes_per_round() * trainer.micro_batches_per_round()
          : static_cast<int64_t>(batches_per_epoch_);
  const int64_t updates = updates_per_step_ = std::max<int64_t>(1, trainer.updates_per_step());
  const int64_t steps_per_epoch =
      online_prompts_per_round_ > 0 ? std::max<int64_t>(1, micro_per_epoch / (micro_per_step_ * updates))
                                    : std::max<int64_t>(1, (micro_per_epoch + micro_per_step_ - 1) / micro_per_step_);
  schedule_.type = config_.lr_scheduler_type;
  schedule_.base_lr = config_.learning_rate;
  const int64_t trainer_steps = trainer.total_steps(world_size());
  schedule_.total_steps =
      config_.max_steps > 0 ? config_.max_steps
      : trainer_steps > 0   ? trainer_steps
                            : static_cast<int64_t>(std::ceil(config_.num_train_epochs * static_cast<double>(steps_per_epoch)));
  schedule_.warmup_steps = warmup_steps_for(config_.warmup_steps, config_.warmup_ratio, schedule_.total_steps);
  if (config_.lr_scheduler_num_cycles) schedule_.num_cycles = *config_.lr_scheduler_num_cycles;
  if (config_.lr_scheduler_min_lr_rate) schedule_.min_lr_rate = *config_.lr_scheduler_min_lr_rate;
  if (config_.lr_scheduler_min_lr)
    schedule_.min_lr_rate = config_.learning_rate > 0 ? *config_.lr_scheduler_min_lr / config_.learning_rate : 0;
}

Engine::Impl::Collated Engine::Impl::collate_local(Trainer& trainer, const std::string& split,
                                             const std::vector<size_t>& global_batch) {
  // This rank's consecutive share of a global batch; an uneven last batch
  // leaves later ranks fewer examples, possibly none: those compute on the
  // batch's first example, whose loss the caller discards.
  const size_t w = static_cast<size_t>(data_size()), r = static_cast<size_t>(data_rank());
  const size_t per = (global_batch.size() + w - 1) / w;
  size_t lo = std::min(global_batch.size(), r * per), hi = std::min(global_batch.size(), lo + per);
  Collated out;
  out.stand_in = lo == hi;
  if (out.stand_in) lo = 0, hi = 1;
  out.batch = trainer.collate(split, std::vector<size_t>(global_batch.begin() + static_cast<std::ptrdiff_t>(lo),
                                                         global_batch.begin() + static_cast<std::ptrdiff_t>(hi)));
  // Counted on the host, before the batch moves: no device read per micro-batch.
  if (!out.stand_in) {
    out.items = trainer.num_items(out.batch);
    auto it = out.batch.find("attention_mask");
    // Each rank of a sequence group reads the same batch: its share of the tokens.
    if (it != out.batch.end() && it->second.defined()) out.tokens = it->second.sum().item<double>() / seq_size();
  }
  move_collated(out.batch);
  return out;
}

void Engine::Impl::move_collated(TensorMap& batch) {
  auto defined = [&](const std::string& k) { return batch.count(k) && batch.at(k).defined(); };
  // Read on the host first: a batch's keys share prefixes ("chosen_", ...).
  std::set<std::string> trails;
  std::map<std::string, torch::Tensor> reaches;  // position key -> reach
  std::map<std::string, std::pair<torch::Tensor, int64_t>> segments;  // document key -> segments
  for (const auto& [k, v] : batch) {
    if (!v.defined() || !v.device().is_cpu()) continue;
    if (ends_with(k, "attention_mask") && padding_trails(v)) trails.insert(k);
    if (ends_with(k, "document_ids") && v.dim() == 2) segments[k] = model::document_segments(v);
    if (ends_with(k, "position_ids")) {
      const std::string prefix = k.substr(0, k.size() - 12);
      if (defined(prefix + "document_ids") && defined(prefix + "attention_mask"))
        reaches[k] = model::branch_reach(v, batch.at(prefix + "document_ids"), batch.at(prefix + "attention_mask"));
    }
  }
  for (auto& [k, v] : batch) {
    if (!v.defined()) continue;
    // dataloader_pin_memory: from page-locked memory, without blocking the
    // host (the host allocator keeps the pinned copy until the copy is done).
    v = pin_batches_ && v.device().is_cpu() ? v.pin_memory().to(device_, /*non_blocking=*/true) : v.to(device_);
    if (trails.count(k)) trailing_masks_.push_back(v);
    if (auto it = reaches.find(k); it != reaches.end()) branch_reaches_.emplace_back(v, it->second.to(device_));
    if (auto it = segments.find(k); it != segments.end())
      segments_.push_back({v, it->second.first.to(device_), it->second.second});
  }
}

LossOutput Engine::Impl::run_loss(Trainer& trainer, TensorMap batch) {
  forget_host_facts();
  move_collated(batch);
  return trainer.loss(owner(), batch);
}

std::pair<double, double> Engine::Impl::optimizer_step(Trainer& trainer, const std::vector<std::vector<size_t>>& micro,
                                                       MetricSums& metrics) {
  return optimizer_step(
      trainer,
      [&] {
        std::vector<Collated> batches;
        for (const auto& idx : micro) batches.push_back(collate_local(trainer, "train", idx));
        return batches;
      },
      metrics);
}

std::vector<Engine::Impl::Collated> Engine::Impl::next_online_micro_batches(Trainer& trainer, int64_t* epoch,
                                                                       size_t* batch_in_epoch,
                                                                       std::vector<std::vector<size_t>>* batches,
                                                                       MetricSums& metrics) {
  std::vector<Collated> out;
  for (int64_t i = 0; i < micro_per_step_; ++i) {
    if (round_left_ == 0) {
      if (*batch_in_epoch >= batches->size()) {
        ++*epoch;
        *batch_in_epoch = 0;
        *batches = epoch_batches(trainer.num_examples("train"), *epoch);
      }
      Trainer::Rollout r = trainer.rollout(owner(), (*batches)[(*batch_in_epoch)++]);
      if (r.micro_batches.empty()) throw Error(fmt::format("the {} trainer's round gave no micro-batches", trainer.name()));
      round_batches_ = std::move(r.micro_batches);
      round_next_ = 0;
      round_left_ = round_batches_.size() * static_cast<size_t>(trainer.passes_per_round());
      metrics.merge(r.metrics);
      round_tokens_ += r.tokens;
    }
    Collated c;
    c.batch = round_batches_[round_next_];
    round_next_ = (round_next_ + 1) % round_batches_.size();
    --round_left_;
    c.items = trainer.num_items(c.batch);
    move_collated(c.batch);
    out.push_back(std::move(c));
  }
  return out;
}

std::pair<double, double> Engine::Impl::optimizer_step(Trainer& trainer, const std::function<std::vector<Collated>()>& collect,
                                                       MetricSums& metrics) {
  auto& phases = PhaseClock::get();
  phases.mark("between steps: logging, evaluation, saving", device_);
  before_step();
  forget_host_facts();
  round_tokens_ = 0;
  // One learning rate for the whole step, whatever its number of updates.
  step_lr_ = learning_rate();
  for (auto& lr_group : optimizer_->param_groups())
    static_cast<torch::optim::AdamWOptions&>(lr_group.options()).lr(step_lr_);
  const int64_t updates = updates_per_step_;
  // The step's loss stays on the device until the step ends (one read).
  torch::Tensor loss_total;
  double tokens = 0, norm_sum = 0, padded_tokens = 0;
  g_updates_in_step = 0;
  for (int64_t u = 0; u < updates; ++u) {
    g_updates_in_step = u;
    // The loss is normalised by the items (target tokens) of the whole
    // accumulated update on all ranks, so 1 x 8 and 8 x 1 and 2 ranks x 4
    // give the same gradients; the strategy then sums the ranks' gradients.
    std::vector<Collated> batches = collect();
    phases.mark("batches: collation (online: generation, scoring)", device_);
    set_training(true);
    double local_items = 0;
    for (const auto& b : batches) {
      local_items += b.items;
      tokens += b.tokens;
      // include_num_input_tokens_seen: all: every token id fed in, padding too.
      for (const auto& [k, v] : b.batch)
        if (v.defined() && ends_with(k, "input_ids")) padded_tokens += static_cast<double>(v.numel()) / seq_size();
    }
    std::vector<double> counts = {local_items};
    strategy_->sum_across_ranks(counts);
    const double denom = std::max(1.0, config_.average_tokens_across_devices ? counts[0] : local_items);
    optimizer_->zero_grad(true);
    // fp16: backward runs on the loss times the scale, and the gradients are
    // unscaled (and checked for overflow) before clipping.
    const double scale = loss_scale_ ? loss_scale_->scale() : 1.0;
    phases.mark("token counts over ranks, zero_grad", device_);
    for (size_t i = 0; i < batches.size(); ++i) {
      auto& b = batches[i];
      strategy_->begin_backward(/*sync=*/i + 1 == batches.size(), /*has_data=*/true);
      standing_in_ = b.stand_in;
      model::RouterBalance* balance = router_aux_coef_ != 0 ? policy_->model->router_balance() : nullptr;
      if (balance) balance->begin();
      LossOutput out = trainer.loss(owner(), b.batch);
      const torch::Tensor aux = balance ? balance->end() : torch::Tensor();
      phases.mark("forward and loss (with reference forwards)", device_);
      auto loss = out.loss_sum / denom;
      if (aux.defined()) {
        // As the reference adds it: coef * aux per micro-batch, averaged over
        // the update's micro-batches and over the ranks (here, where the
        // strategy sums the ranks' gradients; it averages them itself
        // without average_tokens_across_devices). Its gradient reaches the
        // routers through their taps (model/moe.hpp) with the same weight
        // and the loss scale.
        const double ranks = config_.average_tokens_across_devices ? static_cast<double>(world_size()) : 1.0;
        const double weight = router_aux_coef_ / (static_cast<double>(batches.size()) * ranks);
        balance->set_weight(standing_in_ ? 0.0 : weight * scale);
        loss = loss + aux * weight;
        out.metrics.add_per_batch("aux_loss", aux.to(torch::kFloat64),
                                  torch::ones({}, aux.options().dtype(torch::kFloat64)));
      }
      // A stand-in's backward runs (so every rank joins the same gathers and
      // reductions) with zero gradients.
      if (standing_in_) loss = loss * 0.0;
      (scale == 1.0 ? loss : loss * scale).backward();
      if (balance) balance->clear();
      if (standing_in_) {
        metrics.skip_batch();
      } else {
        loss_total = loss_total.defined() ? loss_total + loss.detach() : loss.detach();
        metrics.merge(out.metrics);
      }
      standing_in_ = false;
      strategy_->end_backward();
      phases.mark("backward and gradient reduction", device_);
    }
    if (config_.debug_check_grad_sync_steps > 0 && (step_ + 1) % config_.debug_check_grad_sync_steps == 0)
      strategy_->check_grads_in_sync();
    const double max_norm = config_.max_grad_norm > 0 ? config_.max_grad_norm : std::numeric_limits<double>::infinity();
    const double grad_norm = strategy_->clip_grad_norm(max_norm, 1.0 / scale);
    norm_sum += grad_norm;
    // The global norm (and the scale) are the same on every rank, so all skip
    // or stop together, before the update: no non-finite weight is ever saved.
    // Under fp16 an overflow skips the update and halves the scale, down to 1.
    if (!std::isfinite(grad_norm) && loss_scale_ && scale > LossScale::kMinScale) {
      // Nothing of the overflowed gradients may reach the next step.
      strategy_->discard_gradients();
      loss_scale_->update(/*overflow=*/true);
      log::info("step {}: the gradients overflowed fp16 at loss scale {}: update skipped, loss scale now {}",
                step_ + 1, scale, loss_scale_->scale());
      phases.mark("gradient norm and clipping", device_);
      continue;
    }
    if (!std::isfinite(grad_norm)) {
      // A NaN's sign bit depends on the operations that made it: printed without it.
      auto shown = [](double v) { return std::isnan(v) ? std::string("nan") : fmt::format("{}", v); };
      throw Error(fmt::format("step {}: the gradient norm is {} (this rank's loss {}): stopping before the update, so "
                              "no non-finite weights are saved{}{}. Lower learning_rate (or beta), check the data and the "
                              "model for NaN or infinite values, or resume from the last checkpoint",
                              step_ + 1, shown(grad_norm), shown(loss_total.defined() ? loss_total.item<double>() : 0.0),
                              config_.save_strategy == "no" ? "" : "; the last checkpoint is intact",
                              loss_scale_ ? " (fp16: they overflow at a loss scale of 1, that is unscaled)" : ""));
    }
    phases.mark("gradient norm and clipping", device_);
    if (is_adamw_8bit(config_.optim)) adamw_8bit_step(*optimizer_);
    else fused_adamw_step(*optimizer_);
    strategy_->after_optimizer_step();
    if (loss_scale_) loss_scale_->update(/*overflow=*/false);
    phases.mark("optimizer step (and ZeRO/FSDP parameter updates)", device_);
  }
  tokens += round_tokens_;
  ++step_;
  // Rank sums: the loss (already a share of the global mean when gradients
  // are summed), tokens, and whether any rank was asked to stop.
  std::vector<double> sums = {loss_total.defined() ? loss_total.item<double>() : 0.0, tokens,
                              stop::requested() ? 1.0 : 0.0, padded_tokens};
  strategy_->sum_across_ranks(sums);
  g_stop_agreed = sums[2] > 0;
  tokens_seen_ += sums[1];
  input_tokens_seen_ += sums[3];
  if (config_.torch_empty_cache_steps && (step_ % *config_.torch_empty_cache_steps) == 0) empty_device_cache(device_);
  phases.mark("step-end sums over ranks (loss, tokens)", device_);
  // A step of several updates reports their mean loss and gradient norm.
  const double loss = (config_.average_tokens_across_devices ? sums[0] : sums[0] / world_size()) / updates;
  return {loss, norm_sum / updates};
}

std::pair<double, double> Engine::Impl::step_on(Trainer& trainer, const std::vector<std::vector<size_t>>& micro_batches) {
  setup(trainer);
  MetricSums m;
  return optimizer_step(trainer, micro_batches, m);
}

MetricSums Engine::Impl::evaluate(Trainer& trainer) {
  torch::NoGradGuard no_grad;
  MetricSums m;
  set_training(false);
  if (online_prompts_per_round_ > 0) {
    evaluating_ = true;
    eval_generation_rounds_ = 0;
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done{evaluating_};
    m = trainer.evaluate_rounds(owner());
    reduce_metrics(m);
    set_training(true);
    return m;
  }
  const size_t n = trainer.num_examples("test");
  // Each rank evaluates a consecutive share of every global batch.
  const size_t bs = static_cast<size_t>(config_.per_device_eval_batch_size * data_size());
  torch::Tensor loss_sum;
  double items = 0;
  for (size_t i = 0; i < n; i += bs) {
    std::vector<size_t> idx;
    for (size_t j = i; j < std::min(n, i + bs); ++j) idx.push_back(j);
    forget_host_facts();
    auto b = collate_local(trainer, "test", idx);
    standing_in_ = b.stand_in;
    auto out = trainer.loss(owner(), b.batch);
    standing_in_ = false;
    if (b.stand_in) {
      m.skip_batch();
      continue;
    }
    loss_sum = loss_sum.defined() ? loss_sum + out.loss_sum.detach() : out.loss_sum.detach();
    items += b.items;
    m.merge(out.metrics);
  }
  m.add("loss", loss_sum.defined() ? loss_sum.item<double>() : 0.0, std::max(1.0, items));
  reduce_metrics(m);
  set_training(true);
  return m;
}

RunSummary Engine::Impl::train(Trainer& trainer) {
  trainer_ = &trainer;
  setup(trainer);
  prepare_output_dir();
  // One run per output_dir: rank 0 holds the lock until training ends, and
  // every rank stops together when another run holds it.
  std::optional<io::DirectoryLock> run_lock;
  std::string holder;
  std::vector<double> busy = {0.0};
  if (rank() == 0) {
    run_lock = io::DirectoryLock::try_lock(output_dir_, "trlx " + trainer.name(), &holder);
    if (!run_lock) busy[0] = 1.0;
  }
  sum_across_ranks(busy);
  if (busy[0] > 0)
    fail_input("output_dir {} is in use by another trlx run ({}); give this run its own output_dir, or wait for that "
               "run to end",
               output_dir_.string(), rank() == 0 ? (holder.empty() ? "its lock file says nothing more" : holder)
                                                 : "rank 0 says which");
  int64_t epoch = 0;
  size_t batch_in_epoch = 0;
  if (auto dir = checkpoint_to_resume()) {
    resume(*dir, &epoch, &batch_in_epoch);
  } else if (rank() == 0) {
    fs::remove(output_dir_ / "metrics.jsonl");
  }
  if ((config_.save_strategy == "best" || config_.load_best_model_at_end) && trainer.num_examples("test") == 0)
    fail_input("{}: the best checkpoint is found by evaluating, and there is no test split to evaluate on (set "
               "dataset_test_split, or give the dataset a test split)",
               config_.save_strategy == "best" ? "save_strategy: best" : "load_best_model_at_end");
  open_tensorboard();
  open_trackio();
  start_loggers(trainer.name());
  print_startup(trainer);
  auto prev_term = std::signal(SIGTERM, on_signal);
  auto prev_int = std::signal(SIGINT, on_signal);
  dist::graceful_stop_armed(true);
  struct Disarm {
    ~Disarm() { dist::graceful_stop_armed(false); }
  } disarm;
  stop::clear();
  g_stop_agreed = false;

  const int64_t log_every = every(config_.logging_steps, schedule_.total_steps);
  const int64_t save_every = every(config_.save_steps, schedule_.total_steps);
  const int64_t eval_every = every(config_.eval_steps.value_or(config_.logging_steps), schedule_.total_steps);
  const bool tty = isatty(STDERR_FILENO);
  // disable_tqdm (null: as transformers, no bar at log_level warning or above).
  const bool bar = tty && !config_.disable_tqdm.value_or(config_.log_level == "warning" ||
                                                         config_.log_level == "error" ||
                                                         config_.log_level == "critical");
  MetricSums window;
  double window_loss = 0;
  int64_t window_steps = 0;
  double last_grad_norm = 0, last_loss = 0;
  const auto start = Clock::now();
  const int64_t start_step = step_;
  const double start_tokens = tokens_seen_;
  const int64_t start_bytes = mesh_.bytes_communicated();
  double first_step_seconds = 0;
  RunSummary summary;
  summary.output_dir = output_dir_;
  bool saved_at_step = false;
  auto batches = epoch_batches(trainer.num_examples("train"), epoch);
  PhaseClock::get().begin();
  while (step_ < schedule_.total_steps) {
    // (An online trainer moves to the next epoch when it needs the next round.)
    if (online_prompts_per_round_ == 0 && batch_in_epoch >= batches.size()) {
      ++epoch;
      batch_in_epoch = 0;
      batches = epoch_batches(trainer.num_examples("train"), epoch);
    }
    std::pair<double, double> result;
    if (online_prompts_per_round_ > 0) {
      // A stop request can cut a round's scoring short (a reward program
      // given stop_grace_seconds to answer): the step then never happened,
      // and the last finished one is saved.
      const int64_t epoch_before = epoch;
      const size_t batch_before = batch_in_epoch, round_next_before = round_next_, round_left_before = round_left_;
      try {
        result = optimizer_step(
            trainer, [&] { return next_online_micro_batches(trainer, &epoch, &batch_in_epoch, &batches, window); },
            window);
      } catch (const stop::Interrupted& e) {
        if (tty) std::cerr << "\n";
        if (g_updates_in_step > 0)
          throw Error(fmt::format("stop requested: {}; step {} had already made {} of its {} updates, so it cannot be "
                                  "saved as step {} and nothing was saved; resume from the last checkpoint",
                                  e.what(), step_ + 1, g_updates_in_step, updates_per_step_, step_));
        log::warn("stop requested: {}; step {} is dropped, saving step {} and exiting", e.what(), step_ + 1, step_);
        if (epoch != epoch_before) batches = epoch_batches(trainer.num_examples("train"), epoch_before);
        epoch = epoch_before;
        batch_in_epoch = batch_before;
        round_next_ = round_next_before;
        round_left_ = round_left_before;
        if (!saved_at_step && step_ > start_step) save_checkpoint(epoch, batch_in_epoch);
        summary.interrupted = true;
        break;
      }
    } else {
      std::vector<std::vector<size_t>> micro;
      for (int64_t i = 0; i < micro_per_step_ && batch_in_epoch < batches.size(); ++i)
        micro.push_back(batches[batch_in_epoch++]);
      result = optimizer_step(trainer, micro, window);
    }
    auto [loss, grad_norm] = result;
    if (step_ == start_step + 1)
      first_step_seconds = std::chrono::duration<double>(Clock::now() - g_process_start).count();
    saved_at_step = false;
    window_loss += loss;
    ++window_steps;
    last_grad_norm = grad_norm;
    last_loss = loss;
    if (!std::isfinite(loss))
      log::warn("step {}: the loss is {} ({})", step_, loss,
                std::isfinite(grad_norm) ? "the gradients were finite" : "fp16: the update was skipped");
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double rate = static_cast<double>(step_ - start_step) / std::max(1e-9, elapsed);
    const double eta = static_cast<double>(schedule_.total_steps - step_) / std::max(1e-9, rate);
    const double epoch_f = static_cast<double>(epoch) +
                           static_cast<double>(batch_in_epoch) / static_cast<double>(std::max<size_t>(1, batches.size()));
    // As transformers: an epoch ends after its last batch, or at the last
    // step when max_steps stops training inside it; the epoch strategies
    // log, evaluate and save then, in that order.
    const bool epoch_end = (batch_in_epoch >= batches.size() && round_left_ == 0) || step_ == schedule_.total_steps;
    const bool log_now = (config_.logging_strategy == "steps" && (step_ % log_every == 0 ||
                                                                  (config_.logging_first_step && step_ == 1) ||
                                                                  step_ == schedule_.total_steps)) ||
                         (config_.logging_strategy == "epoch" && epoch_end);
    if (log_now) {
      reduce_metrics(window);
      std::map<std::string, double> m;
      m["loss"] = window_loss / std::max<int64_t>(1, window_steps);
      m["grad_norm"] = last_grad_norm;
      m["learning_rate"] = step_lr_;  // the rate the step just used, as TRL logs it
      m["epoch"] = epoch_f;
      m["num_tokens"] = tokens_seen_;
      // transformers' include_num_input_tokens_seen: all (or true) counts
      // padding, non_padding what num_tokens counts.
      const std::string& seen = config_.include_num_input_tokens_seen;
      if (seen == "all" || seen == "true") m["num_input_tokens_seen"] = input_tokens_seen_;
      else if (seen == "non_padding") m["num_input_tokens_seen"] = tokens_seen_;
      for (const auto& [k, v] : window.means()) m[k] = v;
      log_metrics(m);
      std::string line;
      // The headline of each trainer's metrics, where it has one.
      for (const auto& k : {"loss", "grad_norm", "learning_rate", "reward", "mean_token_accuracy", "entropy",
                            "objective/scores", "objective/kl"})
        if (m.count(k)) line += fmt::format("{}={:.4g}  ", k, m[k]);
      if (tty) std::cerr << "\r\033[K";
      log::info("step {}/{}  {}epoch={:.2f}  {:.2f} it/s  ETA {}", step_, schedule_.total_steps, line, epoch_f, rate,
                duration(eta));
      trainer.on_log(owner(), step_);
      window = {};
      window_loss = 0;
      window_steps = 0;
    } else if (bar && log::rank() == 0) {
      const int width = 30;
      const int filled = static_cast<int>(width * static_cast<double>(step_) / static_cast<double>(schedule_.total_steps));
      std::cerr << fmt::format("\r\033[K[{}{}] {}/{}  {:.2f} it/s  ETA {}  loss {:.4g}", std::string(static_cast<size_t>(filled), '#'),
                               std::string(static_cast<size_t>(width - filled), '.'), step_, schedule_.total_steps, rate,
                               duration(eta), loss)
                << std::flush;
    }
    bool new_best = false;
    // As transformers, the steps strategy also evaluates at the last step.
    if (trainer.num_examples("test") > 0 &&
        ((config_.eval_strategy == "steps" && (step_ % eval_every == 0 || step_ == schedule_.total_steps)) ||
         (config_.eval_strategy == "epoch" && epoch_end))) {
      auto e = evaluate(trainer);
      std::map<std::string, double> m;
      for (const auto& [k, v] : e.means()) m["eval_" + k] = v;
      log_metrics(m);
      new_best = note_best_metric(m);
      log::info("step {}: eval_loss={:.4g}{}", step_, m["eval_loss"],
                m.count("eval_reward") ? fmt::format("  eval_reward={:.4g}", m["eval_reward"]) : "");
    }
    // As transformers, the steps strategy also saves at the last step; best
    // saves at each evaluation that sets a new best.
    if ((config_.save_strategy == "steps" && (step_ % save_every == 0 || step_ == schedule_.total_steps)) ||
        (config_.save_strategy == "epoch" && epoch_end) || (config_.save_strategy == "best" && new_best)) {
      save_checkpoint(epoch, batch_in_epoch);
      saved_at_step = true;
    }
    if (g_stop_agreed) {
      if (tty) std::cerr << "\n";
      log::warn("stop requested: saving at step {} and exiting", step_);
      if (!saved_at_step) save_checkpoint(epoch, batch_in_epoch);
      summary.interrupted = true;
      break;
    }
  }
  if (tty) std::cerr << "\r\033[K";
  PhaseClock::get().mark("between steps: logging, evaluation, saving", device_);
  if (rank() == 0) PhaseClock::get().report(step_ - start_step);
  std::signal(SIGTERM, prev_term);
  std::signal(SIGINT, prev_int);
  summary.steps = step_;
  summary.final_loss = last_loss;
  {
    const double runtime = std::chrono::duration<double>(Clock::now() - start).count();
    std::map<std::string, double> end = {
        {"train_runtime", runtime},
        {"train_steps_per_second", static_cast<double>(step_ - start_step) / std::max(1e-9, runtime)},
        {"train_tokens_per_second", (tokens_seen_ - start_tokens) / std::max(1e-9, runtime)},
        {"first_step_seconds", first_step_seconds}};
    for (const auto& [k, v] : trainer.run_totals()) end[k] = v;
    // The bytes each rank handed to collectives per step (the largest rank),
    // and on the host the most resident memory of any rank.
    std::vector<double> most = {
        static_cast<double>(mesh_.bytes_communicated() - start_bytes) / std::max<int64_t>(1, step_ - start_step),
        static_cast<double>(peak_resident_bytes().value_or(0))};
    strategy_->max_across_ranks(most);
    if (world_size() > 1) end["comm_bytes_per_step"] = most[0];
    if (!device_.is_cuda() && most[1] > 0) end["peak_host_memory_mb"] = most[1] / (1024.0 * 1024.0);
    if (device_.is_cuda()) {
      // The largest peak over ranks (every rank joins the reduction).
      std::vector<double> peak = {static_cast<double>(peak_device_bytes(device_).value_or(0))};
      strategy_->max_across_ranks(peak);
      end["peak_gpu_memory_mb"] = peak[0] / (1024.0 * 1024.0);
      log::info("peak GPU memory {:.0f} MiB (the largest over ranks)", end["peak_gpu_memory_mb"]);
    }
    log_metrics(end);
  }
  close_loggers(summary.interrupted);
  // Metrics are never lost with a clean exit: rows a full disk held back
  // and still could not take fail the run, on every rank, before its model
  // save (which that disk would refuse too).
  std::vector<double> lost = {rank() == 0 && !flush_metrics() ? 1.0 : 0.0};
  strategy_->max_across_ranks(lost);
  if (lost[0] > 0) {
    if (rank() != 0) throw Error("rank 0 could not write metrics.jsonl (see its message)");
    auto step_of = [](const std::string& row) { return nlohmann::json::parse(row).value("step", int64_t{0}); };
    throw Error(fmt::format("{}: {} metrics row(s), steps {} to {}, could not be written: free space on that disk "
                            "and resume from the last checkpoint",
                            (output_dir_ / "metrics.jsonl").string(), unwritten_metrics_.size(),
                            step_of(unwritten_metrics_.front()), step_of(unwritten_metrics_.back())));
  }
  if (!summary.interrupted) {
    load_best_model();
    save_model(output_dir_, true);
    comm_->barrier();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    log::info("done: {} steps in {}, final loss {:.4g}, model saved to {}", step_, duration(elapsed), last_loss,
              output_dir_.string());
  }
  return summary;
}

}  // namespace trlx::engine

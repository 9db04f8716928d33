// What a run tells its user: metrics reduced over ranks, JSONL and
// TensorBoard logs, and the startup table.
#include "engine/adamw8bit.hpp"
#include "engine/device_memory.hpp"
#include "engine/engine.hpp"
#include "engine/engine_impl.hpp"

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "config/loader.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "dist/comm/host_values.hpp"

namespace trlx::engine {

namespace fs = std::filesystem;

namespace {

std::string human(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

}  // namespace

void Engine::Impl::reduce_metrics(MetricSums& m) { reduce_over_ranks(*comm_, m); }

void reduce_over_ranks(dist::Communicator& comm, MetricSums& m) {
  m.read();
  if (comm.backend() == "single") return;
  // Ranks normally log the same names; if one has a name another lacks (a
  // rank that saw no data in the window), the window is summed by name over
  // the union of names. A per-micro-batch entry is named by its metric and
  // its index in the window ('\x1f' apart), which every rank counts alike.
  constexpr char kSep = '\x1f';
  std::string names;
  for (const auto& [k, v] : m.values) names += k + '\n';
  for (const auto& [k, entries] : m.per_batch)
    for (const auto& [i, v] : entries) names += fmt::format("{}{}{}\n", k, kSep, i);
  // An entry of one rank's extreme: name, index and which extreme.
  for (const auto& [k, e] : m.entries)
    for (const auto& [idx, v] : e)
      if (v.reduce != EntryReduce::Same)
        names += fmt::format("{}{}{}{}{}\n", k, kSep, idx, kSep, v.reduce == EntryReduce::Max ? "max" : "min");
  std::set<std::string> keys, extreme_keys;
  for (const auto& theirs : dist::all_gather_strings(comm, names)) {
    size_t start = 0;
    for (size_t end; (end = theirs.find('\n', start)) != std::string::npos; start = end + 1) {
      auto key = theirs.substr(start, end - start);
      (std::count(key.begin(), key.end(), kSep) == 2 ? extreme_keys : keys).insert(std::move(key));
    }
  }
  auto find = [&](const std::string& key) -> std::pair<double, double> {
    const size_t sep = key.find(kSep);
    if (sep == std::string::npos) {
      auto it = m.values.find(key);
      return it == m.values.end() ? std::pair<double, double>{0, 0} : it->second;
    }
    auto it = m.per_batch.find(key.substr(0, sep));
    if (it == m.per_batch.end()) return {0, 0};
    auto e = it->second.find(std::stoll(key.substr(sep + 1)));
    return e == it->second.end() ? std::pair<double, double>{0, 0} : e->second;
  };
  std::vector<double> flat;
  for (const auto& k : keys) {
    const auto [sum, count] = find(k);
    flat.push_back(sum);
    flat.push_back(count);
  }
  dist::all_reduce_values(comm, flat, dist::ReduceOp::Sum);
  m.values.clear();
  m.per_batch.clear();
  size_t i = 0;
  for (const auto& k : keys) {
    const size_t sep = k.find(kSep);
    if (sep == std::string::npos) m.values[k] = {flat[i], flat[i + 1]};
    else m.per_batch[k.substr(0, sep)][std::stoll(k.substr(sep + 1))] = {flat[i], flat[i + 1]};
    i += 2;
  }
  // Entries of one rank's extreme: the extreme over ranks (a min as the
  // max of its negation), over the union of every rank's entries, since a
  // rank that stood in for a micro-batch has none for it.
  if (extreme_keys.empty()) return;
  struct Key {
    std::string name;
    int64_t index;
    EntryReduce reduce;
  };
  std::vector<Key> parsed;
  std::vector<double> extremes;
  for (const auto& key : extreme_keys) {
    const size_t a = key.find(kSep), b = key.rfind(kSep);
    Key k{key.substr(0, a), std::stoll(key.substr(a + 1, b - a - 1)),
          key.substr(b + 1) == "max" ? EntryReduce::Max : EntryReduce::Min};
    double x = std::numeric_limits<double>::quiet_NaN();
    if (auto e = m.entries.find(k.name); e != m.entries.end())
      if (auto v = e->second.find(k.index); v != e->second.end()) x = v->second.value;
    // NaN (no value on this rank) loses to any number.
    extremes.push_back(std::isnan(x) ? -std::numeric_limits<double>::infinity() : k.reduce == EntryReduce::Max ? x : -x);
    parsed.push_back(std::move(k));
  }
  dist::all_reduce_values(comm, extremes, dist::ReduceOp::Max);
  for (size_t j = 0; j < parsed.size(); ++j) {
    double x = extremes[j];
    if (std::isinf(x) && x < 0) x = std::numeric_limits<double>::quiet_NaN();
    m.entries[parsed[j].name][parsed[j].index] = {parsed[j].reduce == EntryReduce::Max ? x : -x, parsed[j].reduce};
  }
}

void Engine::Impl::log_metrics(const std::map<std::string, double>& m) {
  nlohmann::ordered_json j;
  for (const auto& [k, v] : m) j[k] = v;
  j["step"] = step_;
  log_history_.push_back(j.dump());
  if (rank() != 0) return;
  unwritten_metrics_.push_back(j.dump());
  flush_metrics();
  if (!loggers_.empty()) {
    nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
    for (const auto& [k, v] : m) metrics[k] = v;
    send_to_loggers({{"event", "log"}, {"step", step_}, {"metrics", metrics}});
  }
  if (tensorboard_) {
    // transformers' TensorBoardCallback tags: eval_x -> eval/x, test_x -> test/x, x -> train/x.
    for (const auto& [k, v] : m) {
      if (k.rfind("eval_", 0) == 0) tensorboard_->scalar("eval/" + k.substr(5), v, step_);
      else if (k.rfind("test_", 0) == 0) tensorboard_->scalar("test/" + k.substr(5), v, step_);
      else tensorboard_->scalar("train/" + k, v, step_);
    }
    tensorboard_->flush();
  }
  if (trackio_) {
    try {
      trackio_->log(m, step_);
    } catch (const Error& e) {
      log::warn("{}\nThe run goes on without trackio; metrics.jsonl holds every row.", e.what());
      trackio_.reset();
    }
  }
}

bool Engine::Impl::flush_metrics() {
  if (unwritten_metrics_.empty()) return true;
  const fs::path file = output_dir_ / "metrics.jsonl";
  std::error_code ec;
  const bool regular = fs::is_regular_file(file, ec);
  const auto before = regular ? fs::file_size(file, ec) : 0;
  std::string rows;
  for (const auto& r : unwritten_metrics_) rows += r + "\n";
  errno = 0;
  bool ok = false;
  {
    std::ofstream out(file, std::ios::app | std::ios::binary);
    out << rows;
    out.flush();
    ok = static_cast<bool>(out);
    out.close();
    ok = ok && !out.fail();
  }
  const int err = errno;
  if (ok) {
    if (unwritten_metrics_.size() > 1)
      log::info("{}: {} row(s) held back are written now", file.string(), unwritten_metrics_.size() - 1);
    unwritten_metrics_.clear();
    return true;
  }
  // No half row stays behind to break the file: it goes back to its size.
  if (regular) fs::resize_file(file, before, ec);
  if (unwritten_metrics_.size() == 1)
    log::warn("{}: cannot append metrics ({}): the rows are kept in memory and written when the file takes them; "
              "the run fails at its end if they cannot be",
              file.string(), err ? std::strerror(err) : "write failed");
  return false;
}

void Engine::Impl::start_loggers(const std::string& trainer) {
  if (rank() != 0) return;
  for (const auto& entry : config_.report_to) {
    if (entry.empty() || entry.front() != '{') continue;
    const auto spec = nlohmann::json::parse(entry, nullptr, false);
    if (spec.is_discarded() || !spec.is_object())
      fail_input("report_to: {} is not a program entry ({{command: \"python3 my_logger.py\"}})", entry);
    loggers_.push_back(rewards::start_logger_program(rewards::program_entry(spec, "report_to", entry)));
    log::info("logger program '{}' receives the run (report_to)", loggers_.back()->name());
  }
  if (loggers_.empty()) return;
  send_to_loggers({{"event", "start"},
                   {"trainer", trainer},
                   {"run_name", config_.run_name ? nlohmann::ordered_json(*config_.run_name) : nlohmann::ordered_json()},
                   {"output_dir", output_dir_.string()},
                   {"world_size", world_size()},
                   {"step", step_},
                   {"config", nlohmann::ordered_json::parse(config::run_config_json())}});
}

void Engine::Impl::send_to_loggers(const nlohmann::ordered_json& event) {
  const std::string line = event.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  for (auto it = loggers_.begin(); it != loggers_.end();) {
    try {
      (*it)->send(line);
      ++it;
    } catch (const Error& e) {
      log::warn("{}\nThe run goes on without this logger; metrics.jsonl holds every row.", e.what());
      it = loggers_.erase(it);
    }
  }
}

void Engine::Impl::close_loggers(bool interrupted) {
  if (loggers_.empty()) return;
  send_to_loggers({{"event", "end"}, {"step", step_}, {"interrupted", interrupted}});
  for (auto& l : loggers_) {
    const std::string how = l->finish();
    log::info("logger program '{}' {}", l->name(), how);
  }
  loggers_.clear();
}

void Engine::Impl::open_tensorboard() {
  const bool wanted = std::any_of(config_.report_to.begin(), config_.report_to.end(),
                                  [](const std::string& s) { return s == "tensorboard" || s == "all"; });
  if (!wanted || rank() != 0) return;
  // TENSORBOARD_LOGGING_DIR overrides the directory, as in transformers.
  const char* dir = std::getenv("TENSORBOARD_LOGGING_DIR");
  tensorboard_ = std::make_unique<io::EventWriter>(dir && *dir ? fs::path(dir) : io::default_tensorboard_dir(output_dir_));
  log::info("TensorBoard event file: {}", tensorboard_->path().string());
}

std::string Engine::Impl::memory_savers() const {
  std::vector<std::string> on;
  if (lora_)
    on.push_back(fmt::format("LoRA r={} on {} layers", lora_->config.r, lora_->adapted.size()));
  if (plan_.checkpointing)
    on.push_back(fmt::format("gradient checkpointing ({})", plan_.reentrant ? "reentrant" : "non-reentrant"));
  if (plan_.logprob_chunk_size > 0)
    on.push_back(fmt::format("chunked log-probs ({} tokens per chunk)", plan_.logprob_chunk_size));
  return on.empty() ? "none" : fmt::format("{}", fmt::join(on, ", "));
}

void Engine::Impl::print_startup(Trainer& trainer) {
  // Counts, and bytes for the estimate below, over what trains (the policy
  // and a value model): weights in their dtype, trained weights, and how
  // many trained elements are below fp32 (ZeRO keeps fp32 masters of them).
  int64_t total = 0, trainable = 0, value_params = 0;
  double weight_bytes = 0, trained_bytes = 0, trained_low = 0;
  model::LanguageModelImpl* value = value_ ? value_.get() : nullptr;
  for (auto* m : {policy_.get(), value}) {
    if (!m) continue;
    for (const auto& p : m->parameters()) {
      const double b = static_cast<double>(p.numel()) * static_cast<double>(p.element_size());
      total += p.numel();
      if (m == value) value_params += p.numel();
      weight_bytes += b;
      if (!p.requires_grad()) continue;
      trainable += p.numel();
      trained_bytes += b;
      if (p.scalar_type() != torch::kFloat32) trained_low += static_cast<double>(p.numel());
    }
  }
  const int64_t world = world_size();
  const int64_t total_batch =
      config_.per_device_train_batch_size * config_.gradient_accumulation_steps * data_size();
  // What setup held on the host at most, over ranks (every rank joins).
  std::vector<double> host = {static_cast<double>(peak_resident_bytes().value_or(-1))};
  strategy_->max_across_ranks(host);
  const std::string host_memory =
      host[0] < 0 ? "not known here"
                  : fmt::format("{:.0f} MiB resident at most during setup{}", host[0] / (1024.0 * 1024.0),
                                world > 1 ? " (the largest rank)" : "");
  // What one rank holds for what trains: weights in their dtype, gradients
  // in the trained weights' dtype, two Adam moments (and fp32 masters
  // where ZeRO keeps them apart from the weights), each split over the ranks
  // where the strategy splits it: over one replica's ranks (all of them
  // without hybrid sharding).
  const double w = static_cast<double>(mesh_.replica->world_size());
  const bool split_state = strategy_->shards_optimizer_state();
  const bool split_grads = split_state && (strategy_->shards_parameters() || dist_.zero_stage >= 2);
  // ZeRO-1/2 (and any offload) keep fp32 masters apart from the weights;
  // otherwise under parameter sharding an fp32 shard is its own master.
  const bool own_masters = !strategy_->shards_parameters() || dist_.offload_optimizer_device == "cpu";
  const double masters = !split_state ? 0.0 : own_masters ? static_cast<double>(trainable) * 4 : trained_low * 4;
  const double rank_weights = strategy_->shards_parameters() ? weight_bytes / w : weight_bytes;
  const double rank_grads = split_grads ? trained_bytes / w : trained_bytes;
  // Two moments: 8 bytes a value in fp32, about 2 (codes and block scales)
  // with the 8-bit optimizer.
  const double moment_bytes = is_adamw_8bit(config_.optim) ? 2.0 + 8.0 / 256 : 8.0;
  const double rank_adam = (static_cast<double>(trainable) * moment_bytes + masters) / (split_state ? w : 1.0);
  const double mem = rank_weights + rank_grads + rank_adam;
  std::vector<std::pair<std::string, std::string>> rows = {
      {"trainer", config_.run_name ? fmt::format("{} (run {})", trainer_name_, *config_.run_name) : trainer_name_},
      // A hub name is a cache snapshot path by now; the revision it came from
      // (model_revision) is shown when it is not the default branch.
      {"model", config_.model_revision == "main"
                    ? config_.model_name_or_path.value_or("?")
                    : fmt::format("{} (revision {})", config_.model_name_or_path.value_or("?"), config_.model_revision)},
      {"parameters", fmt::format("{} total, {} trainable", human(static_cast<double>(total)), human(static_cast<double>(trainable)))},
      {"train examples", std::to_string(trainer.num_examples("train"))},
      {"eval examples", std::to_string(trainer.num_examples("test"))},
      {"batch", mesh_.seq() > 1
                    ? fmt::format("{} per device x {} accumulation x {} data rank(s) = {} (each row split over {} ranks)",
                                  config_.per_device_train_batch_size, config_.gradient_accumulation_steps,
                                  data_size(), total_batch, mesh_.seq())
                    : fmt::format("{} per device x {} accumulation x {} process(es) = {}",
                                  config_.per_device_train_batch_size, config_.gradient_accumulation_steps, world,
                                  total_batch)},
      {"steps", fmt::format("{} ({} batches per epoch)", schedule_.total_steps, batches_per_epoch_)},
      {"schedule", fmt::format("{}, peak lr {:g}, warmup {} steps", schedule_.type, schedule_.base_lr, schedule_.warmup_steps)},
      // adamw_torch and adamw_torch_fused name the same update; the 8-bit
      // names keep the moments in 8 bits (paged is not paged here).
      {"optimizer", is_adamw_8bit(config_.optim)
                        ? fmt::format("AdamW, moments in 8 bits (blocks of 256; tensors under 4096 values in "
                                      "fp32) ({}{})",
                                      config_.optim,
                                      config_.optim == "paged_adamw_8bit" ? ": not paged, as adamw_8bit" : "")
                        : fmt::format("AdamW ({})", config_.optim)},
      {"precision", config_.fp16 ? "fp16 mixed, dynamic loss scale from 65536"
                    : config_.use_bf16() ? "bf16 mixed"
                                         : "fp32"},
      {"device", fmt::format("{} x {}", world, device_.is_cuda() ? "cuda" : "cpu")},
      {"distributed", fmt::format("{} ({} communicator{}){}", strategy_->name(), comm_->backend(),
                                  dist_.source.empty() ? "" : ", " + dist_.source,
                                  mesh_.trivial() ? std::string()
                                                  : fmt::format("; mesh {}{}", mesh_.describe(),
                                                                mesh_.sp > 1   ? " (Ulysses)"
                                                                : mesh_.cp > 1 ? " (keys and values all-gathered)"
                                                                               : ""))},
      // attn_implementation: every fused choice is served by trlx's own
      // attention (eager and the rest are refused when the config is read).
      {"attention", fmt::format("{} -> {}", config_.attn_implementation.value_or("sdpa"),
                                device_.is_cuda() ? "flash kernels where the shape allows, SDPA otherwise (per "
                                                    "case: trlx env)"
                                                  : "SDPA on CPU")},
      {"memory savers", memory_savers()},
      {"memory estimate",
       fmt::format("{:.1f} MB{} (weights {:.1f} + grads {:.1f} + Adam state {:.1f}, no activations)", mem / 1e6,
                   world > 1 ? " per rank" : "", rank_weights / 1e6, rank_grads / 1e6, rank_adam / 1e6)},
      {"host memory", host_memory},
      {"output_dir", output_dir_.string()},
  };
  if (reference_) {
    int64_t n = 0;
    for (const auto& p : reference_->parameters()) n += p.numel();
    rows.insert(rows.begin() + 3,
                {trainer.reference_name(),
                 fmt::format("{} parameters, frozen{}", human(static_cast<double>(n)),
                             strategy_->shards_parameters() ? ", split over the ranks unit by unit" : "")});
  }
  if (const auto& mc = policy_->config(); mc.is_moe()) {
    // Mixture of experts: what a token runs through, and the balance loss.
    int64_t sparse = 0;
    for (bool s : mc.sparse_layers) sparse += s ? 1 : 0;
    int64_t experts = 0;
    for (const auto& p : policy_->named_parameters(true))
      if (p.key().find(".mlp.experts.") != std::string::npos) experts += p.value().numel();
    const double active = static_cast<double>(total - value_params) -
                          static_cast<double>(experts) * (1.0 - static_cast<double>(mc.num_experts_per_tok) /
                                                                    static_cast<double>(mc.num_experts));
    rows.insert(rows.begin() + 3,
                {"experts", fmt::format("{} in each of {} of {} layers, {} per token ({} parameters active); "
                                        "load-balancing loss {}",
                                        mc.num_experts, sparse, mc.num_hidden_layers, mc.num_experts_per_tok,
                                        human(active),
                                        router_aux_coef_ != 0 ? fmt::format("x {:g} (aux_loss)", router_aux_coef_)
                                                              : std::string("not added"))});
  }
  if (value_)
    rows.insert(rows.begin() + 3, {"value model", fmt::format("trained with the policy ({} parameters)",
                                                              human(static_cast<double>(value_params)))});
  std::string table = "\n";
  for (const auto& [k, v] : rows) table += fmt::format("  {:<18}{}\n", k, v);
  log::info("training setup:{}", table);
  if (config_.dataloader_num_workers > 0)
    log::info("dataloader_num_workers {}: trlx tokenized the dataset before training and collates each batch from "
              "memory; no worker processes are needed or started",
              config_.dataloader_num_workers);
}

void Engine::Impl::open_trackio() {
  const bool wanted = std::find(config_.report_to.begin(), config_.report_to.end(), "trackio") != config_.report_to.end();
  if (!wanted || rank() != 0) return;
  // transformers names the run by run_name; without one, the output
  // directory's name does.
  auto dir = fs::absolute(output_dir_).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "out/"
  const std::string run = config_.run_name ? *config_.run_name : dir.filename().string();
  trackio_ = std::make_unique<io::TrackioRun>(config_.project, run, config::run_config_json());
  log::info("trackio: project '{}', run '{}' from step {} in {} (`trackio show --project {}` opens it)", config_.project,
            run, trackio_->next_step(), trackio_->path().string(), config_.project);
}

}  // namespace trlx::engine

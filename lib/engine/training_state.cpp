// What a run saves and restores: the model (whole or as an adapter),
// checkpoints with optimizer, RNG and data position, and resume.
#include "engine/engine.hpp"
#include "engine/engine_impl.hpp"

#include <regex>

#include "io/checksum.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "config/hub_paths.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/atomic_write.hpp"
#include "io/torch_file.hpp"
#include "model/loading.hpp"
#include "model/saving.hpp"

namespace trlx::engine {

namespace fs = std::filesystem;

namespace {

// The random generators' states (dropout, sampling): the CPU's in
// rng_state.pt, the GPU's in rng_state_cuda.pt; under several processes each
// rank's own in rng_state_<rank>.pt and rng_state_cuda_<rank>.pt, rank 0's
// also under the plain names (what one process resumes from).
const char* const kRngStem = "rng_state";
const char* const kCudaRngStem = "rng_state_cuda";
fs::path rng_file(const fs::path& dir, const char* stem, int rank) {
  return dir / (rank < 0 ? fmt::format("{}.pt", stem) : fmt::format("{}_{}.pt", stem, rank));
}
// Where a trained value model goes, in checkpoints and the output directory.
const char* const kValueModelDir = "value_model";

// The checkpoint-N directories of `dir`, by step.
std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("checkpoint-", 0) != 0) continue;
    try {
      size_t used = 0;
      const int64_t step = std::stoll(name.substr(11), &used);
      if (used == name.size() - 11) out.emplace_back(step, e.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Strategies whose checkpoints hold the same optimizer files: the whole
// state (one process, DDP), or ZeRO-3 and FSDP's unit-by-unit shards.
std::string optimizer_layout(const std::string& strategy) {
  if (strategy == "single" || strategy == "ddp") return "whole";
  if (strategy == "zero3" || strategy == "fsdp") return "zero3";
  return strategy;
}

// `read(path)` under a message that names the file when LibTorch cannot read it.
void read_checkpoint_file(const fs::path& file, const std::function<void(const std::string&)>& read) {
  try {
    read(file.string());
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    why = why.substr(0, why.find('\n'));
    fail_input("resume_from_checkpoint: {} is damaged or unreadable ({}); resume from an earlier checkpoint",
               file.string(), why);
  }
}

}  // namespace

void Engine::Impl::verify_checkpoint(const fs::path& dir) const {
  // Each rank checks what it reads: the shared files and its own (another
  // rank's optimizer shard, random state or round is that rank's to check).
  static const std::regex per_rank(R"((?:rank(\d+)(?:-of-\d+)?|rng_state(?:_cuda)?_(\d+))\.pt$)");
  const auto check = io::check_manifest(dir, [&](const std::string& rel) {
    std::smatch m;
    if (!std::regex_search(rel, m, per_rank)) return true;
    return std::stoi(m[1].matched ? m[1].str() : m[2].str()) == rank();
  });
  if (check.status == io::ManifestCheck::Status::NoManifest) {
    if (rank() == 0)
      log::warn("{} has no {} (saved by an older trlx): its files are not checked before they are read", dir.string(),
                io::kManifestName);
    return;
  }
  if (check.status == io::ManifestCheck::Status::Ok) return;
  // The checkpoint before this one, where the run saved it.
  std::string earlier = "there is no earlier checkpoint beside it; start the run again";
  const fs::path canonical = fs::weakly_canonical(dir);
  const auto siblings = list_checkpoints(canonical.parent_path());
  for (size_t k = 1; k < siblings.size(); ++k)
    if (fs::weakly_canonical(siblings[k].second) == canonical)
      earlier = fmt::format("resume from the earlier checkpoint {}", siblings[k - 1].second.string());
  fail_input("resume_from_checkpoint: {} is damaged: {}. Nothing was loaded from the checkpoint; {}",
             check.file.string(), check.why, earlier);
}

void Engine::Impl::check_resumable(const fs::path& dir, const nlohmann::json& state) const {
  const std::string trainer = state.value("trainer", "");
  if (!trainer.empty() && trainer != trainer_name_)
    fail_input("resume_from_checkpoint: {} was saved by `trlx {}`, and this run is `trlx {}`: resume it with trlx {}, "
               "or start this run from its model (model_name_or_path: {})",
               dir.string(), trainer, trainer_name_, trainer, dir.string());
  if (!state.contains("strategy") || !state.contains("world_size")) return;  // saved before these were recorded
  const std::string strategy = state.at("strategy").get<std::string>();
  const int saved_world = state.at("world_size").get<int>();
  const std::string now = strategy_->name();
  const bool same_layout = optimizer_layout(strategy) == optimizer_layout(now);
  const bool whole = optimizer_layout(strategy) == "whole";
  // Split state follows the mesh too: hybrid sharding splits it within each replica.
  const std::string saved_mesh = state.value("mesh", mesh_.describe());
  if (same_layout && !whole && saved_world == world_size() && saved_mesh != mesh_.describe())
    fail_input("resume_from_checkpoint: {} was saved on the mesh {}, and this run's is {}: its optimizer state is "
               "split for that mesh. Resume with the parallelism_config it was saved with, or start a new run from "
               "its model (model_name_or_path: {})",
               dir.string(), saved_mesh, mesh_.describe(), dir.string());
  if (same_layout && (whole || saved_world == world_size())) return;
  fail_input("resume_from_checkpoint: {} was saved by {} on {} process(es), and this run is {} on {}: its optimizer "
             "state is {}. Resume with the strategy and the number of processes it was saved with, or start a "
             "new run from its model (model_name_or_path: {})",
             dir.string(), strategy, saved_world, now, world_size(),
             same_layout ? fmt::format("split {} ways", saved_world) : "laid out for " + strategy, dir.string());
}

void Engine::Impl::drop_metrics_after_step() {
  // Rows logged after the checkpoint (by a run that went on and then died)
  // would otherwise stand twice in metrics.jsonl once the steps run again,
  // as would a stopped run's summary beside the resumed run's.
  if (rank() != 0) return;
  const fs::path file = output_dir_ / "metrics.jsonl";
  std::ifstream in(file);
  if (!in) return;
  std::string kept, line;
  size_t dropped = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    bool keep = true;
    try {
      const auto j = nlohmann::json::parse(line);
      // A stopped run's summary row (train_runtime, ...) goes too: the
      // resumed run writes the run's summary at its end.
      keep = (!j.contains("step") || j.at("step").get<int64_t>() <= step_) && !j.contains("train_runtime");
    } catch (const nlohmann::json::exception&) {
      keep = false;  // a line the killed run left half-written
    }
    if (keep) kept += line + "\n";
    else ++dropped;
  }
  in.close();
  if (dropped == 0) return;
  io::write_file_atomic(file, kept);
  log::info("{}: dropped {} row(s) logged after step {} or summing up the stopped run (logged again as the run "
            "goes on)",
            file.string(), dropped, step_);
}

void Engine::Impl::prepare_output_dir() {
  std::error_code ec;
  fs::create_directories(output_dir_, ec);
  if (ec) fail_input("output_dir {} cannot be created: {}", output_dir_.string(), ec.message());
  // Fail before training, not at the first save, when output_dir is not writable.
  const fs::path probe = output_dir_ / fmt::format(".write-test-{}-{}", getpid(), rank());
  std::ofstream t(probe);
  if (!t) fail_input("output_dir {} is not writable", output_dir_.string());
  t.close();
  fs::remove(probe);
}

std::optional<fs::path> Engine::Impl::checkpoint_to_resume() const {
  if (!config_.resume_from_checkpoint) return std::nullopt;
  const std::string& want = *config_.resume_from_checkpoint;
  if (want == "latest" || want == "true") {
    const auto ckpts = list_checkpoints(output_dir_);
    if (ckpts.empty()) fail_input("resume_from_checkpoint: no checkpoint-N in {}", output_dir_.string());
    return ckpts.back().second;
  }
  if (!fs::is_directory(want)) fail_input("resume_from_checkpoint: {} does not exist", want);
  return fs::path(want);
}

std::map<std::string, torch::Tensor> Engine::Impl::parameter_values(bool trainable_only) {
  // Every rank makes the same reads, so each joins the same gathers.
  struct EndReads {
    dist::Strategy& s;
    ~EndReads() { s.end_parameter_reads(); }
  } end_reads{*strategy_};
  strategy_->begin_parameter_reads();
  std::map<std::string, torch::Tensor> out;
  std::vector<model::LanguageModelImpl*> models = {policy_.get()};
  if (value_) models.push_back(value_.get());
  for (auto* m : models)
    for (const auto& p : m->named_parameters(true)) {
      if (trainable_only && !p.value().requires_grad()) continue;
      strategy_->read_parameter(p.value());
      out[(m == policy_.get() ? "" : "value_model.") + p.key()] = p.value().detach().clone();
    }
  return out;
}

void Engine::Impl::write_on_rank0(const std::function<void(const io::BeforeWrite&)>& write) {
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
  strategy_->begin_parameter_reads();
  write([this](const torch::Tensor& t) { strategy_->read_parameter(t); });
}

void Engine::Impl::save_full_model(model::LanguageModelImpl& m, const fs::path& dir, bool into_existing_dir) {
  write_on_rank0([&](const io::BeforeWrite& before_write) {
    model::SaveModelOptions so;
    so.tokenizer_dir = tokenizer_dir_;
    so.into_existing_dir = into_existing_dir;
    so.before_write = before_write;
    model::save_language_model(dir, m, so);
  });
}

void Engine::Impl::save_model(const fs::path& dir, bool into_existing_dir) {
  if (!lora_) {
    save_full_model(*policy_, dir, into_existing_dir);
  } else {
    write_on_rank0([&](const io::BeforeWrite& before_write) {
      model::AdapterSaveOptions ao;
      ao.base_model_name_or_path = base_dir_ ? base_dir_->string() : config_.model_name_or_path.value_or("");
      // A base given by hub name (or continued from an adapter whose base
      // is in the cache) is recorded by that name and its revision (null
      // for main), as PEFT records them: another machine finds it in its
      // own cache or downloads it, at the same commit.
      if (const auto origin = config::hub_origin(ao.base_model_name_or_path)) {
        ao.base_model_name_or_path = origin->name;
        if (origin->revision != "main") ao.revision = origin->revision;
      }
      ao.tokenizer_dir = tokenizer_dir_;
      ao.into_existing_dir = into_existing_dir;
      ao.before_write = before_write;
      model::save_adapter(dir, *policy_, *lora_, ao);
    });
  }
  // The value model trained beside the policy: a whole model of its own.
  if (value_) save_full_model(*value_, dir / kValueModelDir, true);
}

torch::Device Engine::Impl::optimizer_device() const {
  for (const auto& g : optimizer_->param_groups())
    if (!g.params().empty()) return g.params().front().device();
  return device_;
}

std::string Engine::Impl::optimizer_file() const {
  return strategy_->shards_optimizer_state() ? fmt::format("optimizer-rank{}-of-{}.pt", rank(), world_size())
                                             : "optimizer.pt";
}

void Engine::Impl::save_checkpoint(int64_t epoch, size_t batch_in_epoch) {
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
  note_best_checkpoint();  // on every rank: load_best_model is a collective
  // A failed save (a full disk) leaves no partial checkpoint behind to fill
  // the disk again; the checkpoints already there are untouched.
  struct RemoveOnError {
    fs::path dir;
    bool owner;
    ~RemoveOnError() {
      if (owner && std::uncaught_exceptions() > 0) {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    }
  } cleanup{tmp, rank() == 0};
  if (rank() == 0) fs::remove_all(tmp);
  // This rank's random generators: `rank` -1 writes the plain names.
  auto save_rng = [&](int as_rank) {
    io::write_torch_file(rng_file(tmp, kRngStem, as_rank), [&](std::ostream& o) {
      torch::save(at::detail::getDefaultCPUGenerator().get_state(), o);
    });
    // Dropout and sampling on a GPU draw from its own generator.
    if (device_.is_cuda())
      io::write_torch_file(rng_file(tmp, kCudaRngStem, as_rank), [&](std::ostream& o) {
        torch::save(at::globalContext().defaultGenerator(device_).get_state(), o);
      });
  };
  // What each rank writes itself: its optimizer shard, its random state, and
  // an online trainer's round still being trained on (each rank's share, so
  // that a resumed run trains on the same completions).
  const bool mid_round = round_left_ > 0;
  const bool shards = strategy_->shards_optimizer_state();
  if (shards || mid_round || world_size() > 1) {
    comm_->barrier();
    fs::create_directories(tmp);
    if (shards)
      io::write_torch_file(tmp / optimizer_file(), [&](std::ostream& o) { torch::save(*optimizer_, o); });
    if (world_size() > 1) save_rng(rank());
    if (mid_round)
      io::write_torch_file(tmp / fmt::format("round_rank{}.pt", rank()), [&](std::ostream& o) {
        torch::serialize::OutputArchive a;
        a.write("count", torch::tensor(static_cast<int64_t>(round_batches_.size())));
        for (size_t i = 0; i < round_batches_.size(); ++i)
          for (const auto& [k, v] : round_batches_[i]) a.write(fmt::format("{}.{}", i, k), v.cpu());
        a.save_to(o);
      });
    comm_->barrier();
  }
  // A reference TR-DPO moved is part of the state: saved beside the model.
  const fs::path reference_dir = tmp / "reference";
  if (rank() != 0) {
    save_model(tmp, true);  // joins rank 0's gathers under parameter sharding
    if (reference_moved_) save_full_model(*reference_, reference_dir, false);
    return;
  }
  {
    // Into the existing temp dir: under sharded optimizer state it already
    // holds every rank's optimizer file, which a fresh directory would drop.
    save_model(tmp, true);
    if (reference_moved_) save_full_model(*reference_, reference_dir, false);
    if (!strategy_->shards_optimizer_state())
      io::write_torch_file(tmp / optimizer_file(), [&](std::ostream& o) { torch::save(*optimizer_, o); });
    save_rng(-1);
    nlohmann::ordered_json state = {{"global_step", step_},
                                    {"epoch", epoch},
                                    {"batch_in_epoch", batch_in_epoch},
                                    {"max_steps", schedule_.total_steps},
                                    {"num_tokens", tokens_seen_},
                                    {"num_input_tokens_seen", input_tokens_seen_},
                                    {"trainer", trainer_name_},
                                    {"run_name", config_.run_name ? nlohmann::ordered_json(*config_.run_name)
                                                                  : nlohmann::ordered_json()},
                                    {"strategy", strategy_->name()},
                                    {"world_size", world_size()},
                                    {"mesh", mesh_.describe()},
                                    {"log_history", nlohmann::ordered_json::array()}};
    if (loss_scale_) state["loss_scale"] = loss_scale_->state();
    if (mid_round) {
      state["round_next"] = round_next_;
      state["round_left"] = round_left_;
    }
    if (trainer_) {
      const auto own = trainer_->state();
      if (!own.is_null()) state["trainer_state"] = own;
    }
    for (const auto& l : log_history_) state["log_history"].push_back(nlohmann::ordered_json::parse(l));
    // As transformers' TrainerState: the best evaluation and its checkpoint
    // (this one, when this step set it).
    note_best_checkpoint();
    state["best_metric"] = best_metric_ ? nlohmann::ordered_json(*best_metric_) : nlohmann::ordered_json();
    state["best_global_step"] =
        best_global_step_ > 0 ? nlohmann::ordered_json(best_global_step_) : nlohmann::ordered_json();
    state["best_model_checkpoint"] =
        best_checkpoint_ ? nlohmann::ordered_json(best_checkpoint_->string()) : nlohmann::ordered_json();
    io::write_file_atomic(tmp / "trainer_state.json", state.dump(2) + "\n");
    // Last: every file's size and CRC-32 (every rank's files are in by now),
    // which resume checks before it reads anything.
    io::write_manifest(tmp);
    io::fsync_directory(tmp);
    // Only a complete checkpoint gets its final name; one already there under
    // that name (saved again after a resume) is moved aside until then, and
    // back if the new one cannot take its place.
    io::swap_in_directory(tmp, final_dir);
  }
  log::info("saved {}", final_dir.string());
  if (config_.save_total_limit && rank() == 0) {
    // Oldest first; the newest (to resume from) and the best are kept, as
    // transformers rotates them.
    const auto ckpts = list_checkpoints(output_dir_);
    const size_t keep = static_cast<size_t>(*config_.save_total_limit);
    size_t left = ckpts.size();
    for (size_t i = 0; i + 1 < ckpts.size() && left > keep; ++i) {
      if (best_checkpoint_ && ckpts[i].second.filename() == best_checkpoint_->filename()) continue;
      fs::remove_all(ckpts[i].second);
      --left;
    }
  }
}

void Engine::Impl::note_best_checkpoint() {
  if (best_global_step_ == 0) return;
  const fs::path best = output_dir_ / fmt::format("checkpoint-{}", best_global_step_);
  if (best_global_step_ == step_ || fs::exists(best)) best_checkpoint_ = best;
}

std::optional<std::string> Engine::Impl::best_metric_name() const {
  std::optional<std::string> m = config_.metric_for_best_model;
  if (!m && (config_.load_best_model_at_end || config_.save_strategy == "best")) m = "loss";
  if (m && m->rfind("eval_", 0) != 0) m = "eval_" + *m;
  return m;
}

bool Engine::Impl::note_best_metric(const std::map<std::string, double>& metrics) {
  const auto name = best_metric_name();
  if (!name) return false;
  const auto it = metrics.find(*name);
  if (it == metrics.end()) {
    std::vector<std::string> have;
    for (const auto& [k, v] : metrics) have.push_back(k);
    fail_input("metric_for_best_model: {} is not among the evaluation metrics ({}); name one of them", *name,
               fmt::join(have, ", "));
  }
  // As transformers: larger is better unless the name as given ends in loss.
  const std::string given = config_.metric_for_best_model.value_or("loss");
  const bool greater =
      config_.greater_is_better.value_or(given.size() < 4 || given.compare(given.size() - 4, 4, "loss") != 0);
  const double v = it->second;
  if (std::isnan(v) || (best_metric_ && !(greater ? v > *best_metric_ : v < *best_metric_))) return false;
  best_metric_ = v;
  if (config_.save_strategy != "no") best_global_step_ = step_;
  return true;
}

void Engine::Impl::load_best_model() {
  if (!config_.load_best_model_at_end) return;
  // Rank 0 (which wrote it) decides, for every rank: the load is collective.
  std::vector<double> found = {rank() == 0 && best_checkpoint_ && fs::exists(*best_checkpoint_ / "trainer_state.json")
                                   ? 1.0
                                   : 0.0};
  strategy_->max_across_ranks(found);
  if (found[0] == 0 || !best_checkpoint_) {
    log::warn("load_best_model_at_end: no checkpoint of a best evaluation was saved; the final model is the last "
              "step's");
    return;
  }
  log::info("loading the best model from {} ({} {:.6g})", best_checkpoint_->string(), *best_metric_name(),
            best_metric_.value_or(0.0));
  load_checkpoint_weights(*best_checkpoint_);
  // As transformers with save_total_limit 1: only the best checkpoint stays.
  if (config_.save_total_limit == 1 && rank() == 0)
    for (const auto& [step, dir] : list_checkpoints(output_dir_))
      if (dir.filename() != best_checkpoint_->filename()) fs::remove_all(dir);
  comm_->barrier();
}

void Engine::Impl::load_full_weights(model::LanguageModelImpl& m, const fs::path& dir) {
  auto loaded = model::load_language_model(dir, m.head_kind(), "auto");
  auto src = loaded->named_parameters(true);
  strategy_->write_parameters(m, [&](const std::string& name, torch::Tensor& p) {
    if (!src.contains(name)) fail_input("resume_from_checkpoint: {} has no tensor {}", dir.string(), name);
    p.copy_(src[name]);
  });
}

void Engine::Impl::load_checkpoint_weights(const fs::path& dir) {
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
      // A 4-bit layer's float weight was released (load_in_4bit); its codes
      // are the base's and stay.
      if (p.numel() == 0 && src[name].numel() > 0) return;
      p.copy_(src[name]);
    });
  } else {
    load_full_weights(*policy_, dir);
  }
  if (value_) {
    load_full_weights(*value_, dir / kValueModelDir);
  }
  strategy_->on_weights_loaded();  // ZeRO: master shards from the loaded weights
}

void Engine::Impl::resume(const fs::path& dir, int64_t* epoch, size_t* batch_in_epoch) {
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
    input_tokens_seen_ = state.value("num_input_tokens_seen", 0.0);
    if (state.contains("best_metric") && state["best_metric"].is_number())
      best_metric_ = state["best_metric"].get<double>();
    if (state.contains("best_global_step") && state["best_global_step"].is_number_integer())
      best_global_step_ = state["best_global_step"].get<int64_t>();
    if (state.contains("best_model_checkpoint") && state["best_model_checkpoint"].is_string()) {
      const fs::path best = state["best_model_checkpoint"].get<std::string>();
      if (fs::exists(best)) best_checkpoint_ = best;
      else
        log::warn("the best checkpoint {} recorded in {} is gone; the best so far is forgotten", best.string(),
                  state_file.string());
    }
    for (const auto& l : state.value("log_history", nlohmann::json::array())) log_history_.push_back(l.dump());
    // A checkpoint saved without fp16 has no loss scale: it starts afresh.
    if (loss_scale_ && state.contains("loss_scale")) loss_scale_->load(state.at("loss_scale"), state_file.string());
  } catch (const nlohmann::json::exception& e) {
    fail_input("resume_from_checkpoint: {} is corrupt: {}", state_file.string(), e.what());
  }
  check_resumable(dir, state);
  if (value_ && !fs::exists(dir / kValueModelDir / "config.json"))
    fail_input("resume_from_checkpoint: {} holds no value model ({} is missing); it was not saved by a run that "
               "trains one",
               dir.string(), (dir / kValueModelDir / "config.json").string());
  for (const std::string& f : {optimizer_file(), std::string("rng_state.pt")})
    if (!fs::exists(dir / f))
      fail_input("resume_from_checkpoint: {} is missing {}{}", dir.string(), f,
                 strategy_->shards_optimizer_state()
                     ? fmt::format(" (optimizer state is saved per rank; resume with the same number of processes, {}, "
                                   "and the same strategy)",
                                   world_size())
                     : "");
  verify_checkpoint(dir);
  load_checkpoint_weights(dir);
  if (fs::exists(dir / "reference" / "config.json")) {
    if (!reference_) {
      log::warn("{} holds a reference model moved by sync_ref_model, but this run has no separate reference; "
                "it is not used", (dir / "reference").string());
    } else {
      load_full_weights(*reference_, dir / "reference");
      reference_moved_ = true;
    }
  }
  // Adam's moments onto the device of the tensors they update (each rank's
  // GPU, or the host under optimizer offload), not the device they were
  // saved from.
  read_checkpoint_file(dir / optimizer_file(), [&](const std::string& f) { torch::load(*optimizer_, f, optimizer_device()); });
  // Each rank's own random state where the checkpoint has one (saved by as
  // many processes), else rank 0's.
  if (world_size() > 1 && rank() == 0) {
    std::vector<int> missing;
    for (int r = 0; r < world_size(); ++r)
      if (!fs::exists(rng_file(dir, kRngStem, r))) missing.push_back(r);
    if (!missing.empty())
      log::warn("{} has no random state of its own for rank(s) {} (it was saved by fewer processes): they continue "
                "from rank 0's, so dropout and sampling will not repeat the uninterrupted run's",
                dir.string(), fmt::join(missing, ", "));
  }
  auto restore_rng = [&](const char* stem, at::Generator gen) {
    fs::path f = rng_file(dir, stem, rank());
    if (world_size() == 1 || !fs::exists(f)) f = rng_file(dir, stem, -1);
    if (!fs::exists(f)) return false;
    torch::Tensor rng;
    read_checkpoint_file(f, [&](const std::string& path) { torch::load(rng, path); });
    gen.set_state(rng);  // the generator shares the default's state
    return true;
  };
  restore_rng(kRngStem, at::detail::getDefaultCPUGenerator());
  if (device_.is_cuda() && !restore_rng(kCudaRngStem, at::globalContext().defaultGenerator(device_)))
    log::warn("{} has no {}.pt (saved on CPU): dropout on the GPU will not repeat the uninterrupted run's",
              dir.string(), kCudaRngStem);
  round_left_ = state.value("round_left", size_t{0});
  round_next_ = state.value("round_next", size_t{0});
  round_batches_.clear();
  if (round_left_ > 0) {
    const fs::path f = dir / fmt::format("round_rank{}.pt", rank());
    if (!fs::exists(f))
      fail_input("resume_from_checkpoint: {} was saved in the middle of a generation round and lacks {} (the "
                 "round's completions for rank {}); resume with the processes it was saved with",
                 dir.string(), f.filename().string(), rank());
    read_checkpoint_file(f, [&](const std::string& path) {
      torch::serialize::InputArchive a;
      a.load_from(path);
      torch::Tensor count;
      a.read("count", count);
      round_batches_.resize(static_cast<size_t>(count.item<int64_t>()));
      std::vector<std::string> keys = a.keys();
      for (const auto& key : keys) {
        if (key == "count") continue;
        const auto dot = key.find('.');
        torch::Tensor t;
        a.read(key, t);
        round_batches_.at(std::stoul(key.substr(0, dot)))[key.substr(dot + 1)] = t;
      }
    });
  }
  if (trainer_ && state.contains("trainer_state")) trainer_->restore_state(state["trainer_state"]);
  drop_metrics_after_step();
  log::info("resumed from {} at step {}", dir.string(), step_);
}

}  // namespace trlx::engine

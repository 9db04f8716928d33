// Building the engine: the policy as the config names it, the device, the
// communicator and strategy, adapters, checkpointing and the optimizer.
#include "engine/engine.hpp"
#include "engine/engine_impl.hpp"

#include <regex>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "dist/comm/make_communicator.hpp"
#include "dist/env/launcher_env.hpp"
#include "dist/strategy/make_strategy.hpp"
#include "dist/strategy/sequence_parallel.hpp"
#include "engine/activation_checkpointing.hpp"
#include "model/adapter_dir.hpp"
#include "model/loading.hpp"
#include "model/lora.hpp"
#include "model/quant4.hpp"

namespace trlx::engine {

namespace fs = std::filesystem;

namespace {

// Parameters that get no weight decay: biases and norm weights, by the same
// name rules as the reference Trainer.
bool no_decay(const std::string& name) {
  static const std::regex re(R"(bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.))");
  return std::regex_search(name, re);
}

model::LoraConfig lora_config(const config::TrainingConfig& c) {
  model::LoraConfig l;
  l.r = c.lora_r;
  l.alpha = static_cast<double>(c.lora_alpha);
  l.dropout = c.lora_dropout;
  l.target_modules = c.lora_target_modules;
  l.target_parameters = c.lora_target_parameters;
  l.modules_to_save = c.lora_modules_to_save;
  l.use_rslora = c.use_rslora;
  l.use_dora = c.use_dora;
  return l;
}

}  // namespace

LoadedPolicy load_policy(const config::TrainingConfig& c, model::HeadKind head) {
  if (!c.model_name_or_path) fail_input("{}: set model_name_or_path (a Hugging Face model directory)", c.trainer);
  const fs::path dir = *c.model_name_or_path;
  // A head the checkpoint lacks (a new reward or value head) is drawn from
  // the run's seed, so a run is reproducible whatever ran before it.
  torch::manual_seed(static_cast<uint64_t>(c.seed));
  // Weights stored in another dtype than `dtype` are converted when the
  // Engine places the model: unit by unit as parameter sharding splits it,
  // so no rank converts the whole model on its host.
  LoadedPolicy out;
  out.tokenizer_dir = dir;
  if (!model::is_adapter_dir(dir)) {
    out.base_dir = dir;
    out.model = model::load_language_model(dir, head, c.dtype, /*defer_casts=*/true);
    return out;
  }
  const fs::path base = model::adapter_base_dir(dir);
  out.base_dir = base;
  if (!fs::exists(dir / "tokenizer.json")) out.tokenizer_dir = base;
  out.model = model::load_language_model(base, head, c.dtype, /*defer_casts=*/true);
  out.lora = model::load_adapter(dir, *out.model);
  log::info("continuing from the LoRA adapter in {} (base {})", dir.string(), base.string());
  return out;
}

Engine::Engine(const config::TrainingConfig& config, LoadedPolicy policy, std::string trainer_name,
               model::LanguageModel value_model)
    : Engine(config, policy.model, std::move(trainer_name), policy.tokenizer_dir, std::move(policy.lora), nullptr,
             std::move(value_model)) {
  impl_->base_dir_ = policy.base_dir;
}

Engine::Engine(const config::TrainingConfig& config, model::LanguageModel policy, std::string trainer_name,
               std::optional<fs::path> tokenizer_dir, std::optional<model::LoraInfo> lora,
               std::shared_ptr<dist::Communicator> comm, model::LanguageModel value_model)
    : impl_(std::make_unique<Impl>(*this, config, std::move(policy), std::move(trainer_name), std::move(tokenizer_dir),
                                   std::move(lora), std::move(comm), std::move(value_model))) {}

Engine::~Engine() = default;

// The insides move with the engine and point back at their new owner.
Engine::Engine(Engine&& other) noexcept : impl_(std::move(other.impl_)) {
  if (impl_) impl_->owner_ = this;
}

Engine& Engine::operator=(Engine&& other) noexcept {
  impl_ = std::move(other.impl_);
  if (impl_) impl_->owner_ = this;
  return *this;
}

// The public face: each method is the Impl method of the same name.
RunSummary Engine::train(Trainer& trainer) { return impl_->train(trainer); }
torch::Tensor Engine::forward(Role role, const model::Batch& batch) { return impl_->forward(role, batch); }
losses::TokenLogProbs Engine::logprobs(Role role, const torch::Tensor& hidden, const torch::Tensor& targets,
                                       const torch::Tensor& mask, const losses::LogProbOptions& options) {
  return impl_->logprobs(role, hidden, targets, mask, options);
}
torch::Tensor Engine::head(Role role, const torch::Tensor& hidden) { return impl_->head(role, hidden); }
torch::Tensor Engine::mean_logits(Role role, const torch::Tensor& hidden) { return impl_->mean_logits(role, hidden); }
torch::Tensor Engine::head_weight(Role role) { return impl_->head_weight(role); }
std::vector<torch::Tensor> Engine::with_heads(Role trained, const torch::Tensor& input, Role frozen,
                                           const TwoHeads& compute) {
  return impl_->with_heads(trained, input, frozen, compute);
}
const model::ModelConfig& Engine::model_config(Role role) { return impl_->model_config(role); }
model::Generation Engine::generate(const std::vector<std::vector<int64_t>>& prompts, model::GenerationOptions options,
                                   const GenerationPlacement& placement) {
  return impl_->generate(prompts, std::move(options), placement);
}
bool Engine::training() const { return impl_->training(); }
void Engine::set_training(bool on) { impl_->set_training(on); }
void Engine::sync_reference_every(int64_t every_steps, double alpha) { impl_->sync_reference_every(every_steps, alpha); }
bool Engine::has_separate_reference() const { return impl_->has_separate_reference(); }
bool Engine::has_value_model() const { return impl_->has_value_model(); }
void Engine::set_reference(model::LanguageModel reference) { impl_->set_reference(std::move(reference)); }
void Engine::set_reward_model(model::LanguageModel reward) { impl_->set_reward_model(std::move(reward)); }
void Engine::sum_across_ranks(std::vector<double>& values) { impl_->sum_across_ranks(values); }
torch::Tensor Engine::sum_across_ranks(const torch::Tensor& t) { return impl_->sum_across_ranks(t); }
void Engine::max_across_ranks(std::vector<double>& values) { impl_->max_across_ranks(values); }
std::vector<std::vector<double>> Engine::gather_across_ranks(const std::vector<double>& mine) {
  return impl_->gather_across_ranks(mine);
}
std::vector<double> Engine::concat_across_ranks(const std::vector<double>& mine) {
  std::vector<double> out;
  for (const auto& part : gather_across_ranks(mine)) out.insert(out.end(), part.begin(), part.end());
  return out;
}
void Engine::move_batch(TensorMap& batch) { impl_->move_collated(batch); }
LossOutput Engine::run_loss(Trainer& trainer, TensorMap batch) { return impl_->run_loss(trainer, std::move(batch)); }
bool Engine::standing_in() const { return impl_->standing_in(); }
int Engine::rank() const { return impl_->rank(); }
int Engine::world_size() const { return impl_->world_size(); }
int Engine::data_rank() const { return impl_->data_rank(); }
int Engine::data_size() const { return impl_->data_size(); }
torch::Device Engine::device() const { return impl_->device(); }
std::map<std::string, torch::Tensor> Engine::parameter_values(bool trainable_only) {
  return impl_->parameter_values(trainable_only);
}
const config::TrainingConfig& Engine::config() const { return impl_->config(); }
const MemoryPlan& Engine::memory_plan() const { return impl_->memory_plan(); }
int64_t Engine::global_step() const { return impl_->global_step(); }
const fs::path& Engine::output_dir() const { return impl_->output_dir(); }
double Engine::tokens_seen() const { return impl_->tokens_seen(); }
double Engine::learning_rate() const { return impl_->learning_rate(); }
int64_t Engine::total_steps() const { return impl_->total_steps(); }

void Engine::Impl::quantize_base() {
  // Each rank keeps the whole 4-bit base: sharding it is not built.
  if (dist_.shards_parameters())
    fail_input("load_in_4bit under {}: sharding a 4-bit base is not built; use DDP or ZeRO-1/2 (each process keeps "
               "the 4-bit base, a quarter of a 16-bit one)",
               dist_.describe());
  model::Quant4Options q;
  q.quant_type = config_.bnb_4bit_quant_type;
  q.double_quant = config_.use_bnb_nested_quant;
  // TRL computes in the dtype the model is loaded in (bnb_4bit_compute_dtype).
  q.compute_dtype = policy_->placed_dtype(policy_->model->embed_tokens->weight);
  const auto done = model::quantize_linears_4bit(*policy_, q);
  log::info("QLoRA: {} linear layers kept in 4 bits ({}{}), {:.1f} MiB instead of {:.1f} MiB; computed in {}",
            done.layers, q.quant_type, q.double_quant ? ", double-quantized scales" : "",
            static_cast<double>(done.bytes) / (1 << 20), static_cast<double>(done.float_bytes) / (1 << 20),
            c10::toString(q.compute_dtype));
}

Engine::Impl::Impl(Engine& owner, const config::TrainingConfig& config, model::LanguageModel policy,
                   std::string trainer_name, std::optional<fs::path> tokenizer_dir,
                   std::optional<model::LoraInfo> lora, std::shared_ptr<dist::Communicator> comm,
                   model::LanguageModel value_model)
    : owner_(&owner), config_(config), policy_(std::move(policy)), value_(std::move(value_model)),
      lora_(std::move(lora)), comm_(std::move(comm)), trainer_name_(std::move(trainer_name)),
      tokenizer_dir_(std::move(tokenizer_dir)) {
  output_dir_ = config_.output_dir.value_or("trainer_output");
  dist_ = config_.accelerate_config ? config::read_accelerate_config(*config_.accelerate_config)
                                    : config::DistributedConfig{};
  // The training config's bf16 decides the precision. transformers lets the
  // accelerate config's mixed_precision win over bf16: false, silently; trlx
  // keeps what the training config says and says so.
  const std::string precision = config_.fp16 ? "fp16" : config_.use_bf16() ? "bf16" : "no";
  if (dist_.mixed_precision != "no" && dist_.mixed_precision != precision)
    log::warn("the accelerate config ({}) sets mixed_precision: {} but the training config trains in {}; training "
              "as the training config says (transformers would use {})",
              dist_.source, dist_.mixed_precision, precision == "no" ? "float32" : precision, dist_.mixed_precision);
  if (config_.fp16) loss_scale_.emplace();
  plan_ = plan_memory(config_, dist_);
  for (const auto& n : plan_.notes) log::info("{}", n);
  const auto env = dist::detect_launcher();
  device_ = torch::Device(torch::kCPU);
  if (!dist_.use_cpu && torch::cuda::is_available())
    device_ = torch::Device(torch::kCUDA,
                            static_cast<c10::DeviceIndex>(dist::gpu_for_process(env, torch::cuda::device_count())));
  pin_batches_ = config_.dataloader_pin_memory && device_.is_cuda();
  if (!comm_)
    comm_ = dist::make_communicator(env, device_, std::chrono::seconds(config_.ddp_timeout),
                                    config_.debug_force_distributed);
  // Every collective's tensors live on the communicator's device; the model
  // must live there too, or gradient buckets and shards would not.
  if (comm_->device() != device_)
    fail("the {} communicator works on {} tensors, but this rank computes on {}", comm_->backend(),
         comm_->device().str(), device_.str());
  config::check_deepspeed_values(dist_, config_.gradient_accumulation_steps, config_.max_grad_norm);
  mesh_ = dist::make_mesh(comm_, dist_.parallelism, dist_, env.local_world_size);
  if (mesh_.cp > 1) {
    if (dist_.parallelism.cp_comm_strategy != "allgather")
      fail_input("{}: cp_comm_strategy {} (keys and values passed around the ring) is not built in trlx; allgather "
                 "computes the same attention",
                 dist_.parallelism.source, dist_.parallelism.cp_comm_strategy);
    sequence_parallel_ = dist::make_context_parallel(mesh_.sequence);
  }
  if (mesh_.sp > 1) {
    const auto& mc = policy_->config();
    const int64_t n = mesh_.sp;
    if (mc.num_attention_heads % n != 0)
      fail_input("{}: sp_size {} splits attention heads over the ranks, but the model's {} heads do not divide by "
                 "it; choose an sp_size that divides {}",
                 dist_.parallelism.source, n, mc.num_attention_heads, mc.num_attention_heads);
    if (mc.num_key_value_heads % n != 0 && n % mc.num_key_value_heads != 0)
      fail_input("{}: sp_size {} and the model's {} key/value heads: one must divide the other (each rank takes "
                 "whole key/value heads, repeated when there are fewer than the ranks)",
                 dist_.parallelism.source, n, mc.num_key_value_heads);
    sequence_parallel_ = dist::make_sequence_parallel(mesh_.sequence);
  }
  // One seed for everything: weights drawn by the trainer or for adapters,
  // dropout, sampling.
  torch::manual_seed(static_cast<uint64_t>(config_.seed));
  // tf32: float32 matrix products (and convolutions) in TF32 on Ampere and
  // newer GPUs, as transformers sets it; null keeps PyTorch's setting.
  if (config_.tf32) {
    at::globalContext().setAllowTF32CuBLAS(*config_.tf32);
    at::globalContext().setAllowTF32CuDNN(*config_.tf32);
  }
  if (config_.load_in_4bit) quantize_base();
  if (plan_.lora && !lora_) lora_ = model::apply_lora(*policy_, lora_config(config_));
  // TRL's disable_dropout: adapters attached above or loaded with the policy.
  if (config_.disable_dropout) model::disable_dropout(*policy_);
  if (!plan_.lora && lora_)
    fail_input("{} holds a LoRA adapter; set use_peft: true to train it",
               config_.model_name_or_path.value_or("the model"));
  strategy_ = dist::make_strategy(dist_, config_, mesh_, device_);
  // Under parameter sharding the model reaches the device unit by unit, as
  // it is split (setup peaks at the shards plus one unit per GPU); otherwise
  // whole. The strategy's sharding hooks run around each layer's runner, so
  // a checkpoint recompute runs inside the gather for that layer's backward.
  // The value model trains whole (no adapters), placed and sharded as the policy.
  std::vector<model::LanguageModelImpl*> trained = {policy_.get()};
  if (value_) {
    if (config_.disable_dropout) model::disable_dropout(*value_);
    trained.push_back(value_.get());
  }
  for (auto* m : trained) {
    if (!strategy_->shards_parameters()) {
      // Trained parameters get private memory now, one bulk copy each (in
      // the dtype they are placed in), instead of viewing the checkpoint's
      // copy-on-write mapping: the first optimizer step writes every page,
      // and copying them there one 4 KiB page fault at a time took ~0.3 s of
      // the first step on a 25M-parameter model. (A device copies them
      // anyway; frozen models keep the mapping, which they only read.)
      if (device_.is_cpu()) {
        torch::NoGradGuard no_grad;
        for (auto& p : m->parameters(true))
          if (p.requires_grad()) {
            p.set_data(p.detach().to(m->placed_dtype(p), /*non_blocking=*/false, /*copy=*/true));
            m->mark_placed(p);
          }
      }
      // Moved in the checkpoint's dtype, then cast there: a host cast first
      // would make every local rank hold its own full copy of the model in
      // the wider dtype at once, and send twice the bytes.
      m->to(device_);
      m->apply_deferred_casts();
    }
    // Under parameter sharding each unit is cast and copied as it is split.
    strategy_->wrap_model(*m);
    m->to(device_);  // what no unit holds (buffers); units are there already
    if (sequence_parallel_) m->set_sequence_parallel(sequence_parallel_);
    if (plan_.checkpointing) checkpoint_layers(*m, plan_.reentrant);
  }
  std::vector<dist::NamedParam> trainable;
  for (auto* m : trained)
    for (auto& p : m->named_parameters(true))
      if (p.value().requires_grad())
        trainable.push_back({(m == policy_.get() ? "" : "value_model.") + p.key(), p.value()});
  // Loss scaling unscales the gradients of float32 weights (the optimizer
  // updates them in float32); gradients in 16 bits would overflow or lose
  // what the scale kept.
  if (config_.fp16)
    for (const auto& p : trainable)
      if (p.param.scalar_type() != torch::kFloat32)
        fail_input("fp16: the trained parameter {} is {}; fp16 mixed precision trains float32 weights and "
                   "computes in fp16 under autocast: set dtype: float32 (with LoRA on a 16-bit base, leave "
                   "lora_modules_to_save empty: those copies keep the base's dtype)",
                   p.name, c10::toString(p.param.scalar_type()));
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

}  // namespace trlx::engine

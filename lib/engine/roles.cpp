// The models a trainer computes with, by role: the policy and the frozen
// reference (a separate model, or the policy with its adapters off).
#include "engine/engine.hpp"
#include "engine/engine_impl.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/autocast.hpp"
#include "model/lora.hpp"

namespace trlx::engine {

namespace fs = std::filesystem;

model::LanguageModelImpl& Engine::Impl::model_for(Role role) {
  if (role == Role::Policy) return *policy_;
  if (role == Role::Value) {
    if (!value_) throw Error("this trainer asked for a value model, but the engine was given none");
    return *value_;
  }
  if (role == Role::Reward) {
    if (!reward_) throw Error("this trainer asked for a reward model, but the engine was given none");
    return *reward_;
  }
  if (reference_) return *reference_;
  if (lora_) return *policy_;  // with adapters disabled, see RoleScope
  throw Error("this trainer asked for a reference model, but the engine was given none");
}

// Sets the model up for one role while alive, for every Engine method that
// takes a Role: the reference runs without gradients and, when it is the
// policy itself, with its adapters off and the original modules in place of
// the modules_to_save copies (a trained embedding copy tied to the head
// included). Precision is the caller's: forwards and heads add autocast.
class Engine::Impl::RoleScope {
 public:
  RoleScope(Impl& e, Role role) : model(e.model_for(role)) {
    if (role == Role::Reward) no_grad_.emplace();
    if (role != Role::Reference) return;
    no_grad_.emplace();
    if (!e.reference_) base_only_.emplace(*e.policy_);
  }
  model::LanguageModelImpl& model;

 private:
  std::optional<torch::NoGradGuard> no_grad_;
  std::optional<model::AdaptersDisabled> base_only_;
};

torch::Tensor Engine::Impl::forward(Role role, const model::Batch& batch) {
  RoleScope scope(*this, role);
  Autocast ac(autocast_dtype(), device_.type(), !strategy_->shards_parameters());
  return scope.model.hidden_states(to_device(batch));
}

losses::TokenLogProbs Engine::Impl::logprobs(Role role, const torch::Tensor& hidden, const torch::Tensor& targets,
                                             const torch::Tensor& mask, const losses::LogProbOptions& options) {
  RoleScope scope(*this, role);
  Autocast ac(autocast_dtype(), device_.type(), !strategy_->shards_parameters());
  auto& m = scope.model;
  auto o = options;
  o.chunk_size = plan_.logprob_chunk_size;
  o.logit_softcap = m.config().final_logit_softcapping.value_or(0.0);
  losses::TokenLogProbs out;
  // Sequence parallelism: the hidden states are whole on every rank of the
  // group (gathered after the layers). Each rank takes the log-probs of its
  // share of the positions, so the head's logits cover 1/size of them, and
  // the shares are gathered; the gather's backward sums every rank's
  // gradient onto its share, and the hidden states' own gather routes each
  // position's gradient to the rank whose layers computed it.
  model::SequenceParallel* sp = m.model->sequence_parallel();
  const bool split = sp && hidden.dim() == 3 && hidden.size(1) > 0;
  const int64_t t = split ? hidden.size(1) : 0, n = split ? sp->size() : 1;
  const int64_t share = (t + n - 1) / n;
  auto mine = [&](const torch::Tensor& x) {
    if (share * n == t) return x.narrow(1, share * sp->rank(), share);
    auto shape = x.sizes().vec();
    shape[1] = share * n - t;
    return torch::cat({x, torch::zeros(shape, x.options())}, 1).narrow(1, share * sp->rank(), share);
  };
  auto whole = [&](const torch::Tensor& x) { return sp->gather(x, 1).narrow(1, 0, t); };
  const auto h = split ? mine(hidden) : hidden;
  const auto tg = split ? mine(targets.to(device_)) : targets.to(device_);
  const auto mk = split ? mine(mask.to(device_)) : mask.to(device_);
  m.with_head(hidden, [&] {
    out = losses::token_logprobs(h, m.head_weight(), tg, mk, o);
    return std::vector<torch::Tensor>{out.logps, out.entropy};
  });
  if (split) {
    out.logps = whole(out.logps);
    if (out.entropy.defined()) out.entropy = whole(out.entropy);
    if (out.correct.defined()) out.correct = whole(out.correct.to(out.logps.scalar_type())).to(torch::kBool);
  }
  return out;
}

torch::Tensor Engine::Impl::head(Role role, const torch::Tensor& hidden) {
  RoleScope scope(*this, role);
  Autocast ac(autocast_dtype(), device_.type(), !strategy_->shards_parameters());
  return scope.model.head(hidden);
}

torch::Tensor Engine::Impl::mean_logits(Role role, const torch::Tensor& hidden) {
  // A metric: fp32 and no gradient whatever the role.
  RoleScope scope(*this, role);
  torch::NoGradGuard no_grad;
  auto& m = scope.model;
  if (const auto cap = m.config().final_logit_softcapping) {
    // Soft-capped logits have no shortcut through the mean weight: one
    // sequence's logits at a time.
    const auto h = hidden.detach().to(torch::kFloat32);
    std::vector<torch::Tensor> rows;
    m.with_head(torch::Tensor(), [&] {
      const auto w = m.head_weight().detach().to(torch::kFloat32);
      for (int64_t i = 0; i < h.size(0); ++i)
        rows.push_back((torch::tanh(torch::matmul(h[i], w.t()) / *cap) * *cap).mean(-1));
      return std::vector<torch::Tensor>{};
    });
    return torch::stack(rows);
  }
  torch::Tensor w;
  m.with_head(torch::Tensor(), [&] {
    w = m.head_weight().detach().to(torch::kFloat32).mean(0);
    return std::vector<torch::Tensor>{};
  });
  return torch::matmul(hidden.detach().to(torch::kFloat32), w);
}

const model::ModelConfig& Engine::Impl::model_config(Role role) { return model_for(role).config(); }

torch::Tensor Engine::Impl::head_weight(Role role) {
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

std::vector<torch::Tensor> Engine::Impl::with_heads(Role trained, const torch::Tensor& input, Role frozen,
                                                 const Engine::TwoHeads& compute) {
  if (trained == Role::Reference || frozen == Role::Policy || trained == frozen)
    throw Error("with_heads: the first role is the trained model's and the second a frozen one's");
  if (frozen == Role::Reference && !reference_)
    throw Error("with_heads: the frozen model must be a separate model (set_reference), not the policy with its "
                "adapters off");
  RoleScope scope(*this, trained);
  auto& other = model_for(frozen);
  Autocast ac(autocast_dtype(), device_.type(), !strategy_->shards_parameters());
  auto& m = scope.model;
  // The frozen head is gathered inside the trained one's and hands nothing
  // to its hook, so it is released as soon as `compute` returns; the outputs
  // go through the trained head's hook, which prepares its backward.
  return m.with_head(input, [&] {
    std::vector<torch::Tensor> out;
    other.with_head(torch::Tensor(), [&] {
      torch::Tensor frozen_weight;
      {
        torch::NoGradGuard no_grad;
        frozen_weight = other.head_weight().detach();
      }
      out = compute(m.head_weight(), frozen_weight);
      return std::vector<torch::Tensor>{};
    });
    return out;
  });
}

void Engine::Impl::sync_reference_every(int64_t every_steps, double alpha) {
  if (every_steps < 1) fail_input("ref_model_sync_steps must be at least 1, not {}", every_steps);
  if (!reference_)
    fail_input("sync_ref_model needs a separate reference model to update (set ref_model, or train without use_peft)");
  reference_sync_ = ReferenceSync{every_steps, alpha};
}

void Engine::Impl::sync_reference(double alpha) {
  strategy_->lerp_parameters(*reference_, *policy_, alpha);
  reference_moved_ = true;
}

void Engine::Impl::before_step() {
  // TR-DPO: after every every_steps-th optimizer step the reference moves
  // towards the policy, before the next forward (the first time it matters).
  // A checkpoint taken in between holds the reference before that move, and
  // resume makes it at the same point, so resumed runs equal uninterrupted ones.
  if (reference_sync_ && step_ > 0 && step_ % reference_sync_->every_steps == 0) {
    sync_reference(reference_sync_->alpha);
    log::info("step {}: reference model synced with the policy (ref_model_mixup_alpha {})", step_,
              reference_sync_->alpha);
  }
}

model::Batch Engine::Impl::to_device(const model::Batch& b) const {
  auto mv = [&](const torch::Tensor& t) { return t.defined() ? t.to(device_) : t; };
  model::Batch out{mv(b.input_ids), mv(b.attention_mask), mv(b.position_ids), mv(b.document_ids)};
  out.padding_trails = b.padding_trails;
  out.outputs_from = b.outputs_from;
  out.branch_reach = mv(b.branch_reach);
  if (!out.branch_reach.defined() && b.position_ids.defined() && b.document_ids.defined()) {
    // Packed positions the engine collated: their reach was worked out on
    // the host then; positions still on the host are read here, before they
    // move.
    for (const auto& [pos, reach] : branch_reaches_)
      if (pos.is_same(b.position_ids)) out.branch_reach = reach;
    if (!out.branch_reach.defined() && b.position_ids.device().is_cpu() && b.attention_mask.defined()) {
      ++host_fact_reads_;
      out.branch_reach = mv(model::branch_reach(b.position_ids, b.document_ids, b.attention_mask));
    }
  }
  out.segments = mv(b.segments);
  out.longest_segment = b.longest_segment;
  if (!out.segments.defined() && b.document_ids.defined()) {
    // Packed rows the engine collated: their segments were found on the
    // host then; rows still there are read here.
    for (const auto& s : segments_)
      if (s.document_ids.is_same(b.document_ids)) {
        out.segments = s.cu_seqlens;
        out.longest_segment = s.longest;
      }
    if (!out.segments.defined() && b.document_ids.device().is_cpu() && b.document_ids.dim() == 2) {
      ++host_fact_reads_;
      auto [cu, longest] = model::document_segments(b.document_ids);
      out.segments = mv(cu);
      out.longest_segment = longest;
    }
  }
  if (!out.padding_trails && b.attention_mask.defined()) {
    // A mask the engine collated: its layout was read on the host then.
    for (const auto& m : trailing_masks_)
      if (m.is_same(b.attention_mask)) out.padding_trails = true;
    // A mask still on the host is read here, before it moves.
    if (!out.padding_trails && b.attention_mask.device().is_cpu()) {
      ++host_fact_reads_;
      out.padding_trails = padding_trails(b.attention_mask);
    }
  }
  return out;
}

bool Engine::Impl::padding_trails(const torch::Tensor& host_mask) {
  // Every row is ones then zeros: no 0 is followed by a 1.
  if (host_mask.dim() != 2 || host_mask.size(1) < 2) return host_mask.dim() == 2;
  auto m = host_mask.to(torch::kBool);
  auto rises = m.slice(1, 1).logical_and(m.slice(1, 0, m.size(1) - 1).logical_not());
  return !rises.any().item<bool>();
}

void Engine::Impl::set_reference(model::LanguageModel reference) {
  reference_ = std::move(reference);
  add_frozen_model(*reference_);
}

void Engine::Impl::set_reward_model(model::LanguageModel reward) {
  reward_ = std::move(reward);
  add_frozen_model(*reward_);
}

void Engine::Impl::add_frozen_model(model::LanguageModelImpl& m) {
  for (auto& p : m.parameters()) p.requires_grad_(false);
  if (config_.disable_dropout) model::disable_dropout(m);
  m.eval();
  // Sharded like the policy under ZeRO-3/FSDP (reaching the device unit by
  // unit), whole on every rank otherwise.
  if (!strategy_->shards_parameters()) {
    m.to(device_);  // then cast there, as the policy is
    m.apply_deferred_casts();
  }
  strategy_->wrap_frozen_model(m);
  m.to(device_);
  if (sequence_parallel_) m.set_sequence_parallel(sequence_parallel_);
}

}  // namespace trlx::engine

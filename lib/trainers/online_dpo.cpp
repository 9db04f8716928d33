// `trlx online-dpo`: two completions per prompt ranked by rewards or a judge, and the DPO loss call.
#include "trainers/online_dpo.hpp"

#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "engine/engine.hpp"
#include "losses/preference.hpp"

namespace trlx::trainers {

OnlineDPOTrainer::OnlineDPOTrainer(const OnlineDPOConfig& config, PromptSplit prompts, text::Tokenizer tokenizer,
                                   std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions,
                                   int64_t pad_id, std::vector<int64_t> eos_ids, int world_size)
    : OnlineTrainer(config, "online-dpo", std::move(prompts), std::move(tokenizer), std::move(reward_functions),
                    pad_id, std::move(eos_ids)),
      dpo_(config),
      world_size_(world_size) {
  // The loss reads log-probs of the raw logits (sampling's temperature
  // shapes only which completions are drawn).
  logprob_temperature_ = 1.0;
}

int64_t OnlineDPOTrainer::prompts_per_round() const {
  return config_.per_device_train_batch_size * world_size_ * config_.gradient_accumulation_steps;
}

std::string OnlineDPOTrainer::describe() const {
  std::string betas;
  for (double b : dpo_.betas) betas += (betas.empty() ? "" : ", ") + fmt::format("{}", b);
  return fmt::format("each step samples 2 completions for each of {} prompts ({} per micro-batch on each of {} "
                     "process(es)); max {} new tokens, temperature {}; {} loss, beta {}; ranked by: {}",
                     prompts_per_round(), config_.per_device_train_batch_size, world_size_,
                     config_.max_completion_length, config_.temperature, dpo_.loss_type, betas, describe_rewards());
}

engine::Trainer::Rollout OnlineDPOTrainer::rollout(engine::Engine& engine, const std::vector<size_t>& round_prompts) {
  using Clock = std::chrono::steady_clock;
  const int64_t b = config_.per_device_train_batch_size;
  const int64_t world = engine.world_size();
  const int64_t ga = config_.gradient_accumulation_steps;
  // Micro-batch m of rank r holds the round's prompts (m x world + r) x b
  // onwards (the order a data loader shards batches over ranks); each prompt
  // has two rows, global slots 2p and 2p + 1.
  std::vector<const PromptExample*> rows;
  std::vector<size_t> slots;
  for (int64_t m = 0; m < ga; ++m)
    for (int64_t i = 0; i < b; ++i) {
      const int64_t p = (m * world + engine.rank()) * b + i;
      const auto* ex = &prompts_.examples.at(round_prompts.at(static_cast<size_t>(p)));
      for (int64_t k = 0; k < 2; ++k) {
        rows.push_back(ex);
        slots.push_back(static_cast<size_t>(2 * p + k));
      }
    }
  auto scored = generate_and_score(engine, rows, slots, 2);

  // Each row's score: the weighted sum of its functions' scores, a skipped
  // one counting 0, less missing_eos_penalty where no eos ended it.
  const int64_t f = scored.rewards.size(1);
  const auto weights = torch::tensor(config_.reward_weights.value_or(std::vector<double>(static_cast<size_t>(f), 1.0)),
                                     torch::kFloat64)
                           .to(torch::kFloat32);
  auto total = (scored.rewards.to(torch::kFloat32) * weights.unsqueeze(0)).nansum(1);
  std::vector<float> has_eos(rows.size(), 0.0f);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t id : scored.completions[i])
      if (std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end()) has_eos[i] = 1.0f;
  const auto eos_t = torch::tensor(has_eos, torch::kFloat32);
  if (dpo_.missing_eos_penalty) total = total - (1.0f - eos_t) * static_cast<float>(*dpo_.missing_eos_penalty);

  // A judge ranks each pair itself (no scores): chosen is the first unless
  // it prefers the second.
  std::vector<float> judged_first;
  if (judge_) {
    const auto t0 = Clock::now();
    judge_->set_step(engine.global_step());
    std::vector<std::pair<rewards::Sample, rewards::Sample>> pairs;
    for (size_t i = 0; i < rows.size(); i += 2) pairs.emplace_back(scored.samples[i], scored.samples[i + 1]);
    score_or_stop(engine, [&] {
      for (const auto& p : judge_->judge(pairs)) judged_first.push_back(p == 1 ? 0.0f : 1.0f);
    });
    scoring_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // The epoch this step belongs to picks beta (each round is one step).
  const int64_t rounds_per_epoch =
      std::max<int64_t>(1, static_cast<int64_t>(prompts_.examples.size()) / prompts_per_round());
  const double beta = dpo_.beta_at(engine.global_step() / rounds_per_epoch);

  Rollout out;
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  const bool was_training = engine.training();
  engine.set_training(false);
  const int64_t max_length = config_.max_length.value_or(std::numeric_limits<int64_t>::max());
  for (int64_t m = 0; m < ga; ++m) {
    const size_t lo = static_cast<size_t>(m * 2 * b), hi = lo + static_cast<size_t>(2 * b);
    // A micro-batch longer than max_length loses its leftmost columns, as a
    // left-padded batch would: prompt i keeps what survives of its tokens
    // after (longest prompt - its length) padding columns.
    int64_t longest_prompt = 0, longest_completion = 0;
    for (size_t i = lo; i < hi; ++i) {
      longest_prompt = std::max<int64_t>(longest_prompt, static_cast<int64_t>(rows[i]->prompt_ids.size()));
      longest_completion = std::max<int64_t>(longest_completion, static_cast<int64_t>(scored.completions[i].size()));
    }
    const int64_t cut = std::max<int64_t>(0, longest_prompt + longest_completion - max_length);
    std::vector<std::vector<int64_t>> prompts, completions;
    for (size_t i = lo; i < hi; ++i) {
      const auto& p = rows[i]->prompt_ids;
      const int64_t drop = std::min<int64_t>(static_cast<int64_t>(p.size()) - 1,
                                             std::max<int64_t>(0, cut - (longest_prompt - static_cast<int64_t>(p.size()))));
      prompts.emplace_back(p.begin() + drop, p.end());
      completions.push_back(scored.completions[i]);
    }
    auto mb = pack_rows(prompts, completions, std::vector<bool>(prompts.size(), false));
    out.tokens += mb.at("attention_mask").sum().item<double>();
    auto on_device = mb;
    engine.move_batch(on_device);
    mb["ref_logps"] = completion_logprobs(engine, engine::Role::Reference, on_device, false).logps.cpu();
    const auto r = total.slice(0, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    mb["scores"] = r;
    mb["contain_eos"] = eos_t.slice(0, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
    // Pair i is rows 2i and 2i + 1; the first is chosen unless it scores less
    // (or the judge prefers the second).
    if (judge_) {
      mb["chosen_first"] = torch::tensor(std::vector<float>(judged_first.begin() + m * b, judged_first.begin() + (m + 1) * b));
    } else {
      const auto pairs = r.view({b, 2});
      mb["chosen_first"] = (pairs.select(1, 0) >= pairs.select(1, 1)).to(torch::kFloat32);
    }
    mb["beta"] = torch::full({}, beta, torch::kFloat64);
    out.micro_batches.push_back(std::move(mb));
  }
  engine.set_training(was_training);
  logprob_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

double OnlineDPOTrainer::num_items(const engine::TensorMap& batch) const {
  return static_cast<double>(batch.at("chosen_first").size(0));
}

engine::LossOutput OnlineDPOTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  const auto logps = completion_logprobs(engine, engine::Role::Policy, batch, false).logps;
  const auto dev = logps.device();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  const auto ref = batch.at("ref_logps").to(dev, logps.scalar_type());
  const auto mask = batch.at("completion_mask").to(dev, logps.scalar_type());
  // A device scalar: reading it to the host would synchronise every micro-batch.
  const auto beta = batch.at("beta").to(dev);
  const int64_t b = batch.at("chosen_first").size(0);
  const auto first = batch.at("chosen_first").to(dev).to(torch::kBool);

  const auto seq = (logps * mask).sum(1).view({b, 2});
  const auto ref_seq = (ref * mask).sum(1).view({b, 2});
  auto pick = [&](const torch::Tensor& x, bool chosen) {
    return chosen ? torch::where(first, x.select(1, 0), x.select(1, 1)) : torch::where(first, x.select(1, 1), x.select(1, 0));
  };
  const auto chosen = pick(seq, true), rejected = pick(seq, false);
  const auto ref_chosen = pick(ref_seq, true), ref_rejected = pick(ref_seq, false);
  const auto pref = losses::online_dpo_loss({chosen, rejected, ref_chosen, ref_rejected, beta}, dpo_.loss_type);
  engine::LossOutput out;
  out.loss_sum = pref.losses.sum();

  // TRL's metrics: each a mean over every rank's rows (or pairs) of the
  // micro-batch, averaged over the window's micro-batches.
  auto& m = out.metrics;
  const auto rows = torch::full({}, static_cast<double>(2 * b), f32.dtype(torch::kFloat64));
  const auto npairs = torch::full({}, static_cast<double>(b), f32.dtype(torch::kFloat64));
  auto per_row = [&](const std::string& name, const torch::Tensor& x) { m.add_per_batch(name, x.detach().sum(), rows); };
  auto per_pair = [&](const std::string& name, const torch::Tensor& x) {
    m.add_per_batch(name, x.detach().sum(), npairs);
  };
  // Scores exist unless a judge ranked the pairs.
  const bool scored = !judge_;
  const auto scores = batch.at("scores").to(f32).view({b, 2});
  if (scored) {
    per_pair("objective/scores_margin", pick(scores, true) - pick(scores, false));
    per_row("objective/scores", scores);
  }
  per_row("val/contain_eos_token", batch.at("contain_eos").to(f32));
  per_pair("logps/chosen", chosen);
  per_pair("logps/rejected", rejected);
  // Over completion tokens only (padding has no log-prob here).
  const auto kl = ((logps - ref) * mask).sum(1);
  const auto non_score = -beta * kl;
  per_row("objective/kl", kl);
  per_row("objective/non_score_reward", non_score);
  if (scored) per_row("objective/rlhf_reward", scores.view({2 * b}) + non_score);
  per_row("objective/entropy", -(logps * mask).sum(1));
  const auto &chosen_rewards = pref.chosen_rewards, &rejected_rewards = pref.rejected_rewards;
  per_pair("rewards/chosen", chosen_rewards);
  per_pair("rewards/rejected", rejected_rewards);
  per_pair("rewards/margins", chosen_rewards - rejected_rewards);
  per_pair("rewards/accuracies", (chosen_rewards > rejected_rewards).to(torch::kFloat32));
  m.add_entry("beta", beta, engine::EntryReduce::Same);
  (void)engine;
  return out;
}

int run_online_dpo(const OnlineDPOConfig& c) { return run_online<OnlineDPOTrainer>(c, "online-dpo"); }

}  // namespace trlx::trainers

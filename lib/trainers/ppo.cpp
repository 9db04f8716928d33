// `trlx ppo`: rollouts scored by a reward model, a value model trained beside the policy, the PPO loss call.
#include "trainers/ppo.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "dist/env/launcher_env.hpp"
#include "engine/engine.hpp"
#include "losses/ppo.hpp"
#include "model/loading.hpp"

namespace trlx::trainers {

namespace {

// TRL's mark for a log-prob past a response's end: both sides of every
// log-ratio hold it there, so the ratio is 1 and the KL 0.
constexpr double kInvalidLogprob = 1.0;

// Hidden states at the positions that predict each response token: row b's
// token t is predicted at prompt_length_b - 1 + t.
torch::Tensor at_response(const torch::Tensor& hidden, const torch::Tensor& prompt_lengths, int64_t t, int64_t from) {
  const auto dev = hidden.device();
  const auto idx = prompt_lengths.to(dev).unsqueeze(1) - 1 - from +
                   torch::arange(t, torch::TensorOptions().dtype(torch::kInt64).device(dev)).unsqueeze(0);
  return hidden.gather(1, idx.unsqueeze(-1).expand({hidden.size(0), t, hidden.size(2)}));
}

}  // namespace

uint64_t ppo_shuffle_seed(int64_t seed, int64_t step, int64_t epoch, int rank) {
  return static_cast<uint64_t>(seed) * 1000003ULL + static_cast<uint64_t>(step) * 10007ULL +
         static_cast<uint64_t>(epoch) * 101ULL + static_cast<uint64_t>(rank);
}

PPOTrainer::PPOTrainer(const PPOConfig& config, PromptSplit prompts, text::Tokenizer tokenizer, int64_t pad_id,
                       std::optional<int64_t> eos_id, int world_size)
    : OnlineTrainer(config, "ppo", std::move(prompts), std::move(tokenizer), {}, pad_id,
                    eos_id ? std::vector<int64_t>{*eos_id} : std::vector<int64_t>{}),
      ppo_(config),
      world_size_(world_size),
      eos_id_(eos_id) {
  if (ppo_.stop_token) {
    if (!eos_id_) fail_input("ppo: stop_token is \"eos\" but the tokenizer has no eos token; set stop_token_id");
    stop_ids_ = {*eos_id_};
  } else if (ppo_.stop_token_id) {
    stop_ids_ = {*ppo_.stop_token_id};
  }
  // As TRL: the sampling temperature (with its 1e-7) scales every log-prob.
  logprob_temperature_ = ppo_.temperature + 1e-7;
}

int64_t PPOTrainer::total_steps(int world_size) const {
  // TRL: total_episodes (default num_train_epochs x prompts) in rollout
  // batches, rounded up; the prompts repeat as needed.
  const int64_t episodes = ppo_.total_episodes.value_or(
      static_cast<int64_t>(ppo_.num_train_epochs * static_cast<double>(prompts_.examples.size())));
  const int64_t batch = ppo_.rollout_rows() * world_size;
  return std::max<int64_t>(1, (episodes + batch - 1) / batch);
}

std::string PPOTrainer::describe() const {
  return fmt::format(
      "each step samples a response of up to {} tokens ({}) for each of {} prompts ({} on each of {} process(es)); "
      "temperature {}; kl_coef {} ({}); {} epoch(s) x {} mini-batch(es) per step; scored by the reward model {}",
      ppo_.max_completion_length,
      stop_ids_.empty() ? "no stop token" : fmt::format("ending at token {}", stop_ids_.front()), prompts_per_round(),
      ppo_.rollout_rows(), world_size_, ppo_.temperature, ppo_.kl_coef, ppo_.kl_estimator, ppo_.num_ppo_epochs,
      ppo_.num_mini_batches, ppo_.reward_model);
}

std::vector<int64_t> PPOTrainer::shuffle(int64_t step, int64_t epoch, int rank) const {
  auto gen = at::detail::createCPUGenerator(ppo_shuffle_seed(ppo_.seed, step, epoch, rank));
  auto perm = torch::randperm(ppo_.rollout_rows(), gen, torch::kInt64);
  return {perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + perm.numel()};
}

engine::TensorMap PPOTrainer::pack(const std::vector<int64_t>& rows, const torch::Tensor& responses) const {
  const int64_t n = static_cast<int64_t>(rows.size()), t = responses.size(1);
  int64_t longest = 0;
  for (int64_t r : rows) longest = std::max<int64_t>(longest, static_cast<int64_t>(rows_[static_cast<size_t>(r)]->prompt_ids.size()));
  const int64_t w = longest + t;
  auto ids = torch::zeros({n, w}, torch::kInt64);
  auto mask = torch::zeros({n, w}, torch::kInt64);
  std::vector<int64_t> prompt_lengths;
  const auto resp = responses.to(torch::kCPU, torch::kInt64).contiguous();
  auto* pi = ids.data_ptr<int64_t>();
  auto* pm = mask.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const auto& p = rows_[static_cast<size_t>(rows[static_cast<size_t>(i)])]->prompt_ids;
    const int64_t* rr = resp.data_ptr<int64_t>() + rows[static_cast<size_t>(i)] * t;
    auto put = [&](int64_t j, int64_t tok) {
      if (tok == pad_id_) return;  // padding: out of attention, id 0
      pi[i * w + j] = tok;
      pm[i * w + j] = 1;
    };
    for (size_t j = 0; j < p.size(); ++j) put(static_cast<int64_t>(j), p[j]);
    for (int64_t j = 0; j < t; ++j) put(static_cast<int64_t>(p.size()) + j, rr[j]);
    prompt_lengths.push_back(static_cast<int64_t>(p.size()));
  }
  engine::TensorMap out;
  out["input_ids"] = ids;
  out["attention_mask"] = mask;
  out["position_ids"] = mask.cumsum(1) - mask;
  out["prompt_lengths"] = torch::tensor(prompt_lengths, torch::kInt64);
  // Hidden states from the shortest prompt's last token on: the positions
  // before it predict no response token.
  const int64_t from = n ? *std::min_element(prompt_lengths.begin(), prompt_lengths.end()) - 1 : 0;
  if (from > 0) out["outputs_from"] = engine::host_count(from);
  return out;
}

torch::Tensor PPOTrainer::score(engine::Engine& engine, const engine::TensorMap& packed, const torch::Tensor& at) {
  model::Batch b{packed.at("input_ids"), packed.at("attention_mask"), packed.at("position_ids"), {}};
  // Only each row's response end is read, never before the shortest prompt's
  // last token: the last layer and the head run from there on.
  b.outputs_from = engine::host_count(packed, "outputs_from");
  const auto hidden = engine.forward(engine::Role::Reward, b);
  const auto scores = engine.head(engine::Role::Reward, hidden).select(-1, 0).to(torch::kFloat32);
  return scores.gather(1, (at - b.outputs_from).to(scores.device()).unsqueeze(1)).squeeze(1);
}

engine::Trainer::Rollout PPOTrainer::rollout(engine::Engine& engine, const std::vector<size_t>& round_prompts) {
  using Clock = std::chrono::steady_clock;
  const int64_t n = ppo_.rollout_rows();
  const int rank = engine.rank();
  // This process's prompts: rows rank x n .. of the rollout batch.
  rows_.clear();
  std::vector<size_t> slots;
  for (int64_t i = 0; i < n; ++i) {
    const auto s = static_cast<size_t>(rank * n + i);
    slots.push_back(s);
    rows_.push_back(&prompts_.examples.at(round_prompts.at(s)));
  }
  const auto completions = generate_completions(engine, rows_, slots, 1, stop_ids_);
  const auto t0 = Clock::now();

  // The responses on TRL's grid, and the same truncated after the first stop
  // token (what the reward model scores).
  int64_t t = 1;
  for (const auto& c : completions) t = std::max<int64_t>(t, static_cast<int64_t>(c.size()));
  auto responses = torch::full({n, t}, pad_id_, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    const auto& c = completions[static_cast<size_t>(i)];
    std::copy(c.begin(), c.end(), responses.data_ptr<int64_t>() + i * t);
  }
  auto post = responses.clone();
  std::vector<int64_t> seq_len(static_cast<size_t>(n));
  {
    auto* p = post.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      int64_t* row = p + i * t;
      if (!stop_ids_.empty()) {
        const auto stop = std::find(row, row + t, stop_ids_.front());
        if (stop != row + t) std::fill(stop + 1, row + t, pad_id_);
      }
      // The last token before the first padding (-1: the response is all padding).
      seq_len[static_cast<size_t>(i)] = (std::find(row, row + t, pad_id_) - row) - 1;
    }
  }
  const auto seq = torch::tensor(seq_len, torch::kInt64);

  // Log-probs of the policy and the reference, the value model's values and
  // the reward model's scores, local_rollout_forward_batch_size rows at a time.
  std::vector<torch::Tensor> logprobs, ref_logprobs, values, scores;
  {
    torch::NoGradGuard no_grad;
    const bool was_training = engine.training();
    engine.set_training(false);
    losses::LogProbOptions o;
    o.temperature = logprob_temperature_;
    for (int64_t lo = 0; lo < n; lo += ppo_.local_rollout_forward_batch_size) {
      const int64_t hi = std::min(n, lo + ppo_.local_rollout_forward_batch_size);
      std::vector<int64_t> rows;
      for (int64_t i = lo; i < hi; ++i) rows.push_back(i);
      auto packed = pack(rows, responses);
      const auto plen = packed.at("prompt_lengths");  // the host copy: seq's lengths are added to it
      engine.move_batch(packed);  // once for the four forwards, its masks' layout read on the host
      model::Batch b{packed.at("input_ids"), packed.at("attention_mask"), packed.at("position_ids"), {}};
      b.outputs_from = engine::host_count(packed, "outputs_from");
      const auto targets = responses.slice(0, lo, hi).to(engine.device());
      const auto ones = torch::ones(targets.sizes(), torch::dtype(torch::kBool).device(targets.device()));
      for (auto [role, out] : {std::pair{engine::Role::Policy, &logprobs}, {engine::Role::Reference, &ref_logprobs}}) {
        const auto h = at_response(engine.forward(role, b), plen, t, b.outputs_from);
        out->push_back(engine.logprobs(role, h, targets, ones, o).logps.to(torch::kFloat32));
      }
      const auto hv = at_response(engine.forward(engine::Role::Value, b), plen, t, b.outputs_from);
      values.push_back(engine.head(engine::Role::Value, hv).select(-1, 0).to(torch::kFloat32));
      // The score at the truncated response's last token.
      auto packed_post = pack(rows, post);
      engine.move_batch(packed_post);
      scores.push_back(score(engine, packed_post, plen + seq.slice(0, lo, hi)));
    }
    engine.set_training(was_training);
  }
  const auto dev = engine.device();
  auto lp = torch::cat(logprobs), ref = torch::cat(ref_logprobs), val = torch::cat(values);
  auto sc = torch::cat(scores);
  // A NaN or infinite score (a broken reward model) would make every
  // advantage NaN: stop and name it, as the other online trainers do.
  if (const auto bad = torch::isfinite(sc).logical_not().nonzero(); bad.numel() > 0)
    fail("reward model {} gave response {} of this rollout the score {}, which is not a finite float32 number",
         ppo_.reward_model, bad[0][0].item<int64_t>(), sc[bad[0][0].item<int64_t>()].item<double>());
  const auto seq_d = seq.to(dev);
  const auto post_d = post.to(dev), resp_d = responses.to(dev);
  const auto contain_eos = eos_id_ ? (post_d == *eos_id_).any(1) : torch::zeros({n}, torch::dtype(torch::kBool).device(dev));
  if (ppo_.missing_eos_penalty) sc = sc - contain_eos.logical_not().to(torch::kFloat32) * *ppo_.missing_eos_penalty;

  // Past the response's last token: no log-prob; past the token after it
  // (where the score lands): no value.
  const auto idx = torch::arange(t, torch::TensorOptions().dtype(torch::kInt64).device(dev)).unsqueeze(0);
  const auto padding = idx > seq_d.unsqueeze(1);
  const auto padding_p1 = idx > (seq_d + 1).unsqueeze(1);
  lp = lp.masked_fill(padding, kInvalidLogprob);
  ref = ref.masked_fill(padding, kInvalidLogprob);
  val = val.masked_fill(padding_p1, 0.0);

  // Rewards: -kl_coef x KL per token, the score added after the last token.
  const auto shaped = losses::ppo_rewards(lp, ref, sc, seq_d, ppo_.kl_coef, ppo_.kl_estimator);
  const auto& kl = shaped.kl;
  const auto& non_score = shaped.non_score_reward;
  auto rewards = shaped.rewards;
  const auto keep_p1 = padding_p1.logical_not().to(torch::kFloat32);
  const auto keep = padding.logical_not().to(torch::kFloat32);
  if (ppo_.whiten_rewards) rewards = losses::masked_whiten(rewards, keep_p1, false).masked_fill(padding_p1, 0.0);

  // GAE, then advantages whitened over the response tokens.
  const auto gae = losses::ppo_advantages(rewards, val, keep, padding, ppo_.gamma, ppo_.lam);
  const auto& advantages = gae.advantages;
  const auto& returns = gae.returns;

  // The batch's metrics, as TRL logs them: means over each process's rows,
  // averaged over processes.
  Rollout out;
  auto& m = out.metrics;
  auto per_process = [&](const std::string& name, const torch::Tensor& v) { m.add(name, v.detach().to(torch::kFloat64), 1.0); };
  const auto mean_kl = kl.sum(1).mean();
  const auto mean_non_score = non_score.sum(1).mean();
  per_process("objective/kl", mean_kl);
  // TRL sums -log-probs over the padding marks too (each counts -1).
  per_process("objective/entropy", (-lp).sum(1).mean());
  per_process("objective/non_score_reward", mean_non_score);
  per_process("objective/rlhf_reward", mean_non_score + sc.mean());
  per_process("objective/scores", sc.mean());
  std::vector<double> eos_count = {eos_id_ ? (resp_d == *eos_id_).sum().item<double>() : 0.0};
  engine.sum_across_ranks(eos_count);
  m.add_entry("val/num_eos_tokens", eos_count[0]);
  m.add_entry("lr", engine.learning_rate());
  m.add_entry("episode", static_cast<double>((engine.global_step() + 1) * prompts_per_round()));

  last_ = {{"responses", responses},         {"scores", sc.cpu()},     {"logprobs", lp.cpu()},
           {"ref_logprobs", ref.cpu()},      {"values", val.cpu()},    {"rewards", rewards.cpu()},
           {"advantages", advantages.cpu()}, {"returns", returns.cpu()}};

  // The micro-batches: for each PPO epoch a fresh shuffle, cut into
  // mini-batches (one update each) of micro-batches.
  // Consecutive micro-batches of a shuffle: update u trains on its
  // mini-batch, micro-batches u x micro_batches_per_update() onwards.
  const int64_t micro = ppo_.per_device_train_batch_size;
  const auto pad_f = padding.to(torch::kFloat32).cpu(), pad_p1_f = padding_p1.to(torch::kFloat32).cpu();
  const auto lp_c = lp.cpu(), val_c = val.cpu(), ret_c = returns.cpu(), adv_c = advantages.cpu();
  for (int64_t e = 0; e < ppo_.num_ppo_epochs; ++e) {
    const auto perm = shuffle(engine.global_step(), e, rank);
    for (int64_t lo = 0; lo < n; lo += micro) {
      std::vector<int64_t> rows(perm.begin() + lo, perm.begin() + std::min(n, lo + micro));
      const auto sel = torch::tensor(rows, torch::kInt64);
      auto mb = pack(rows, responses);
      mb["responses"] = responses.index_select(0, sel);
      mb["logprobs"] = lp_c.index_select(0, sel);
      mb["values"] = val_c.index_select(0, sel);
      mb["returns"] = ret_c.index_select(0, sel);
      mb["advantages"] = adv_c.index_select(0, sel);
      mb["padding_mask"] = pad_f.index_select(0, sel);
      mb["padding_mask_p1"] = pad_p1_f.index_select(0, sel);
      out.micro_batches.push_back(std::move(mb));
    }
  }
  for (const auto* r : rows_) out.tokens += static_cast<double>(r->prompt_ids.size());
  out.tokens += static_cast<double>((responses != pad_id_).sum().item<int64_t>());
  logprob_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

engine::LossOutput PPOTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  model::Batch b{batch.at("input_ids"), batch.at("attention_mask"), batch.at("position_ids"), {}};
  b.outputs_from = engine::host_count(batch, "outputs_from");
  const auto& plen = batch.at("prompt_lengths");
  const auto dev = engine.device();
  const auto responses = batch.at("responses").to(dev);
  const int64_t t = responses.size(1);
  const auto padding = batch.at("padding_mask").to(dev).to(torch::kBool);
  const auto padding_p1 = batch.at("padding_mask_p1").to(dev).to(torch::kBool);
  const auto keep = padding.logical_not().to(torch::kFloat32), keep_p1 = padding_p1.logical_not().to(torch::kFloat32);
  const auto old_logprobs = batch.at("logprobs").to(dev);
  const auto old_values = batch.at("values").to(dev);
  const auto returns = batch.at("returns").to(dev);
  const auto advantages = batch.at("advantages").to(dev);

  losses::LogProbOptions o;
  o.temperature = logprob_temperature_;
  o.entropy = true;
  const auto hp = at_response(engine.forward(engine::Role::Policy, b), plen, t, b.outputs_from);
  const auto lp = engine.logprobs(engine::Role::Policy, hp, responses, torch::ones_like(responses, torch::kBool), o);
  const auto new_logprobs = lp.logps.to(torch::kFloat32).masked_fill(padding, kInvalidLogprob);
  const auto hv = at_response(engine.forward(engine::Role::Value, b), plen, t, b.outputs_from);
  const auto vpred = engine.head(engine::Role::Value, hv).select(-1, 0).to(torch::kFloat32).masked_fill(padding_p1, 0.0);

  losses::PpoLossOptions po;
  po.cliprange = ppo_.cliprange;
  po.cliprange_value = ppo_.cliprange_value;
  po.vf_coef = ppo_.vf_coef;
  const auto l = losses::ppo_loss(new_logprobs, old_logprobs, vpred, old_values, returns, advantages, keep, keep_p1, po);

  engine::LossOutput out;
  out.loss_sum = l.loss;
  // Each micro-batch's values, averaged over micro-batches and processes.
  auto& m = out.metrics;
  auto each = [&](const std::string& name, const torch::Tensor& v) { m.add(name, v.detach().to(torch::kFloat64), 1.0); };
  {
    torch::NoGradGuard no_grad;
    each("policy/approxkl_avg", l.approxkl);
    each("policy/clipfrac_avg", l.pg_clipfrac);
    each("loss/policy_avg", l.pg_loss);
    each("loss/value_avg", l.vf_loss);
    each("val/clipfrac_avg", l.vf_clipfrac);
    each("policy/entropy_avg", lp.entropy.to(torch::kFloat32).mean());
    each("val/ratio", l.ratio_mean);
  }
  return out;
}

int run_ppo(const PPOConfig& c) {
  const std::string value_dir = c.value_model_path.value_or(c.reward_model);
  // The value model trains: it may start from a new head (the reward
  // model, loaded below, may not).
  auto value =
      load_score_model(value_dir, c.dtype, c.value_model_path ? "value_model_path" : "reward_model_path", c.seed,
                       /*defer_casts=*/true, /*trains=*/true);
  // The engine counts gradient accumulation per update (one mini-batch).
  PPOConfig run = c;
  run.gradient_accumulation_steps = c.micro_batches_per_update();
  auto r = set_up_online_run(run, "ppo", PPOTrainer::setup(), value);
  // Both score models read the policy's token ids.
  const auto tokenizer_dir = tokenizer_dir_of(*c.model_name_or_path);
  check_tokenizer_fits(r.text.tokenizer, tokenizer_dir, value->config().vocab_size, value_dir);
  check_same_vocabulary(r.text.tokenizer, tokenizer_dir, value_dir,
                        c.value_model_path ? "value_model_path" : "reward_model_path");
  auto reward = load_score_model(c.reward_model, c.dtype, "reward_model_path", c.seed, /*defer_casts=*/true);
  check_tokenizer_fits(r.text.tokenizer, tokenizer_dir, reward->config().vocab_size, c.reward_model);
  check_same_vocabulary(r.text.tokenizer, tokenizer_dir, c.reward_model, "reward_model_path");
  r.engine->set_reward_model(reward);
  const auto eos = r.text.tokenizer.eos_token_id();
  PPOTrainer t(c, std::move(r.prompts), std::move(r.text.tokenizer), r.pad_id, eos, r.engine->world_size());
  if (c.eval_strategy != "no") t.set_eval_prompts(std::move(r.eval_prompts));  // refused: not built for ppo
  log::info("ppo: {}", t.describe());
  return train_to_exit_code(*r.engine, t);
}

}  // namespace trlx::trainers

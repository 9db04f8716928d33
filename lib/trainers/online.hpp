#pragma once
// What the online trainers (grpo, rloo, online-dpo) share: prompts read and
// tokenized as TRL does, completions generated through the engine for this
// rank's slots of each round, scoring by every reward function, and the
// log-probs of completions. The group trainers (grpo, rloo) add rounds of
// num_generations per prompt with group advantages.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "engine/trainer.hpp"
#include "losses/logprobs.hpp"
#include "losses/policy_gradient.hpp"
#include "rewards/program.hpp"
#include "rewards/reward_function.hpp"
#include "trainers/common.hpp"
#include "trainers/online_config.hpp"
#include "trainers/tool_rollout.hpp"

namespace trlx::trainers {

struct PromptExample {
  std::vector<int64_t> prompt_ids;  // after max_prompt_length (the last tokens kept)
  nlohmann::ordered_json prompt;    // as the dataset gives it (text or messages)
  nlohmann::ordered_json columns;   // the row's other columns
};

struct PromptSplit {
  std::vector<PromptExample> examples;
  bool conversational = false;
  size_t truncated = 0;  // prompts cut to max_prompt_length
};

// What an online trainer asks of the shared set-up beyond its config; each
// trainer class gives its own (T::setup(), read by run_online).
struct OnlineSetup {
  // Plain-text prompts get the tokenizer's special tokens (a BOS), as the
  // trainer's reference tokenizes them.
  bool prompt_special_tokens = true;
  // The trainer needs the reference whatever beta is (PPO's KL term);
  // otherwise beta 0 loads none.
  bool always_reference = false;
  // The trainer scores completions itself (PPO's reward model reads token
  // ids): no reward functions are built.
  bool scores_itself = false;
  // A conversational prompt renders as TRL's maybe_apply_chat_template
  // renders it (one ending with an assistant turn is continued, not
  // answered); otherwise always with the generation prompt.
  bool prompts_as_data_utils = false;
  // beta is the KL coefficient towards a reference, loaded when beta > 0;
  // false: beta means something else (distillation's divergence) and no
  // reference is loaded here.
  bool beta_weighs_reference = true;
};

// The prompts of one split: plain text tokenized (with the tokenizer's
// special tokens when setup.prompt_special_tokens), conversations rendered
// through the chat template with the generation prompt; longer than
// max_prompt_length: the last tokens kept. With `max_context` (the model's
// max_position_embeddings; 0: unknown), a prompt that leaves no room for
// max_completion_length is refused here, naming its file and line.
PromptSplit prepare_prompts(const OnlineConfig& config, const std::string& trainer, const text::Tokenizer& tokenizer,
                            const text::ChatTemplate* chat_template, const std::string& split,
                            const OnlineSetup& setup, const nlohmann::ordered_json* tool_schemas = nullptr,
                            int64_t max_context = 0);

// The reward functions reward_funcs names (built-ins and programs; a reward
// model directory runs on this process's device, whole). Programs start now,
// so that one that cannot start stops the run before training.
std::vector<std::unique_ptr<rewards::RewardFunction>> make_reward_functions(const OnlineConfig& config,
                                                                            const std::string& trainer,
                                                                            torch::Device device,
                                                                            bool conversational,
                                                                            bool environment_rewards = false);

// What a run of an online trainer sets up before its trainer: tokenizer,
// prompts, the policy in an engine (the reference too when beta > 0: the
// offline trainers' choice of ref_model, base with adapters off, or a copy),
// the padding and eos ids, and the reward functions.
struct OnlineRun {
  explicit OnlineRun(TextInputs t);
  // Out of line, where the Engine is a complete type (this header knows it
  // only by name).
  ~OnlineRun();
  OnlineRun(OnlineRun&&) noexcept;
  TextInputs text;
  PromptSplit prompts;
  PromptSplit eval_prompts;  // the test split's, when the config evaluates
  std::unique_ptr<engine::Engine> engine;
  int64_t pad_id = 0;
  std::vector<int64_t> eos_ids;  // the tokenizer's, then the model's
  std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions;
  std::unique_ptr<rewards::JudgeProgram> judge;
  std::shared_ptr<ToolBox> tools;  // config.tools' programs; null without
};
// `value_model`: trained beside the policy (PPO), handed to the engine.
OnlineRun set_up_online_run(const OnlineConfig& config, const std::string& trainer, const OnlineSetup& setup,
                            model::LanguageModel value_model = model::LanguageModel{nullptr});

// The judge program config.judge names, started now; null without one.
std::unique_ptr<rewards::JudgeProgram> make_judge(const OnlineConfig& config);

// The engine's view of an online config: prompts in file order when
// shuffle_dataset is off.
config::TrainingConfig engine_config(const OnlineConfig& config);

// What every online trainer does around its loss: prompts, reward
// functions, sampling (or a fixed replay of completions), scoring, and the
// per-token log-probs of completions under the policy or the reference.
class OnlineTrainer : public engine::Trainer {
 public:
  // What the trainer asks of set_up_online_run; a trainer that asks
  // otherwise hides this with its own.
  static OnlineSetup setup() { return {}; }
  // Completions for this rank's slots of a round, instead of sampling them
  // (parity tests replay a reference's completions): global slot indices ->
  // completion ids, each ending where it ended (an eos included).
  using FixedCompletions = std::function<std::vector<std::vector<int64_t>>(const std::vector<size_t>& slots)>;
  // The same for evaluation: the test-split prompt index of each row and
  // its slot in the eval batch (slot s holds completion s % G of its
  // prompt, G = num_generations_eval) -> completion ids.
  using FixedEvalCompletions = std::function<std::vector<std::vector<int64_t>>(const std::vector<size_t>& prompts,
                                                                               const std::vector<size_t>& slots)>;

  OnlineTrainer(const OnlineConfig& config, std::string name, PromptSplit prompts, text::Tokenizer tokenizer,
                std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
                std::vector<int64_t> eos_ids);

  std::string name() const override { return name_; }
  size_t num_examples(const std::string& split) const override;
  engine::TensorMap collate(const std::string& split, const std::vector<size_t>& indices) const override;

  // Seconds this rank spent generating, scoring and computing the round's
  // reference and old log-probs (generation_seconds, scoring_seconds,
  // round_logprob_seconds); the rest of train_runtime is training.
  std::map<std::string, double> run_totals() const override;

  // The same for the turns after tool results (agent rollouts): global slot
  // indices and the turn (1 = the first after tool results) -> the ids
  // generated for it, before the cut to max_completion_length. Without it,
  // those turns are sampled.
  using FixedTurns = std::function<std::vector<std::vector<int64_t>>(const std::vector<size_t>& slots, int turn)>;

  void set_fixed_completions(FixedCompletions f) { fixed_ = std::move(f); }
  void set_fixed_tool_turns(FixedTurns f) { fixed_turns_ = std::move(f); }
  // Agent rollouts: the tool programs the model may call while generating.
  void set_tools(std::shared_ptr<ToolBox> tools) { tools_ = std::move(tools); }
  void set_fixed_eval_completions(FixedEvalCompletions f) { fixed_eval_ = std::move(f); }
  // The test split's prompts, evaluated at eval_strategy's steps by a
  // trainer that evaluates (the group trainers); others refuse them.
  virtual void set_eval_prompts(PromptSplit prompts);
  // A judge program that ranks pairs (online-dpo), instead of scores.
  void set_judge(std::unique_ptr<rewards::JudgeProgram> judge) { judge_ = std::move(judge); }
  std::vector<std::string> reward_names() const;
  // One line for the log on how the run generates and what scores it.
  virtual std::string describe() const = 0;

 protected:
  // This rank's rows of a round: rows[i] is the prompt of global slot
  // slots[i], and each run of `group` consecutive rows shares its prompt
  // (sampled with one shared prefill). Each gets a completion, sampled or
  // replayed (an empty one becomes an eos), and every reward function's
  // score: rewards [rows, F] float64, NaN where a function skipped one.
  struct Scored {
    std::vector<std::vector<int64_t>> completions;
    std::vector<rewards::Sample> samples;  // what the reward functions saw
    torch::Tensor rewards;
    // Agent rollouts: per completion, 1 for the model's tokens and 0 for the
    // tool results between its turns (TRL's tool_mask); its turns and tool
    // messages; and this rank's tool calls and failed calls. Empty and 0
    // without tools.
    std::vector<std::vector<uint8_t>> tool_masks;
    std::vector<nlohmann::ordered_json> messages;
    int64_t tool_calls = 0, tool_failures = 0;
  };
  Scored generate_and_score(engine::Engine& engine, const std::vector<const PromptExample*>& rows,
                            const std::vector<size_t>& slots, int64_t group);
  // Runs this rank's reward or judge programs (`score`). A stop request that
  // cut one short on any rank (stop::Interrupted) ends the round on every
  // rank, agreed over one sum, so that no rank goes on to a collective the
  // others have left.
  static void score_or_stop(engine::Engine& engine, const std::function<void()>& score);
  // Only the completions of those rows (sampled up to max_completion_length,
  // ending at any of `stop_ids`, or replayed), each ending where it ended.
  std::vector<std::vector<int64_t>> generate_completions(engine::Engine& engine,
                                                         const std::vector<const PromptExample*>& rows,
                                                         const std::vector<size_t>& slots, int64_t group,
                                                         const std::vector<int64_t>& stop_ids);

  // Agent rollouts, after the first turn of `out`'s completions: while a
  // completion's last turn calls tools (and max_tool_calling_iterations and
  // max_completion_length allow), the calls run, their results are appended
  // as tokens and the model goes on from there; every rank generates as many
  // turns as the busiest (tool_rollout.cpp).
  void continue_with_tools(engine::Engine& engine, const std::vector<const PromptExample*>& rows,
                           const std::vector<size_t>& slots, Scored& out);
  // One turn after tool results for each context (sampled, at most room[i]
  // tokens, or replayed): the ids generated, each ending where it ended.
  std::vector<std::vector<int64_t>> generate_turn(engine::Engine& engine,
                                                  const std::vector<std::vector<int64_t>>& contexts,
                                                  const std::vector<int64_t>& room, const std::vector<size_t>& slots,
                                                  int turn);

  // The reward functions' names, comma-separated.
  std::string describe_rewards() const;

  // Whether a completion's last token ends it (an eos, or padding).
  bool ends(int64_t id) const;

  // Rows of prompt then completion, padded on the right, as
  // completion_logprobs reads them: input_ids, attention_mask,
  // completion_ids, completion_mask (all 0 on rows with masked[i]),
  // prompt_lengths, completion_lengths, and outputs_from (mark_outputs_from).
  engine::TensorMap pack_rows(const std::vector<std::vector<int64_t>>& prompts,
                              const std::vector<std::vector<int64_t>>& completions,
                              const std::vector<bool>& masked,
                              const std::vector<std::vector<uint8_t>>* tool_masks = nullptr) const;
  // The final hidden states of the model in `role` at the positions that
  // predict a micro-batch's completion tokens: [B, C, H], position j of row
  // b predicting completion token j (positions past a completion's end
  // repeat its last one; the completion mask leaves them out).
  at::Tensor completion_hidden(engine::Engine& engine, engine::Role role, const engine::TensorMap& batch);

  // Sets the key outputs_from (an engine::host_count) of rows with host
  // prompt_lengths: the shortest prompt's last position, from which on
  // completion_logprobs computes hidden states. A slice of the rows calls it again.
  static void mark_outputs_from(engine::TensorMap& rows);

  // Per-token log-probs (and entropy) of a micro-batch's completion tokens
  // under the model in `role`: [B, C], 0 past each completion. The entropy
  // has no gradient unless `entropy_grad` (an entropy bonus in the loss),
  // which builds the completion positions' logits. Logits are divided by
  // logprob_temperature_ (the sampling temperature where the trainer's
  // reference does so).
  losses::TokenLogProbs completion_logprobs(engine::Engine& engine, engine::Role role, const engine::TensorMap& batch,
                                            bool entropy, bool entropy_grad = false);

  OnlineConfig config_;
  std::string name_;
  PromptSplit prompts_;
  PromptSplit eval_prompts_;
  // Set while evaluating: completions come from fixed_eval_ (when set), not fixed_.
  bool evaluating_ = false;
  text::Tokenizer tokenizer_;
  std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions_;
  int64_t pad_id_;
  std::vector<int64_t> eos_ids_;
  double logprob_temperature_;
  FixedCompletions fixed_;
  FixedEvalCompletions fixed_eval_;
  FixedTurns fixed_turns_;
  std::vector<double> weights_;  // each reward function's
  std::shared_ptr<ToolBox> tools_;
  std::unique_ptr<rewards::JudgeProgram> judge_;
  double generation_seconds_ = 0, scoring_seconds_ = 0, logprob_seconds_ = 0;
};

// The group trainers (grpo, rloo): num_generations completions per prompt,
// rewards gathered over ranks so that each group is seen whole, advantages
// over the round, the round's metrics under TRL's names, and the round cut
// into micro-batches with the log-probs the loss needs later. A trainer adds
// its advantages and its loss.
class GroupTrainer : public OnlineTrainer {
 public:
  GroupTrainer(const OnlineConfig& config, std::string name, PromptSplit prompts, text::Tokenizer tokenizer,
               std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
               std::vector<int64_t> eos_ids, int world_size);

  int64_t prompts_per_round() const override { return rounds_.generation_batch_size / config_.num_generations; }
  int64_t micro_batches_per_round() const override { return rounds_.steps_per_generation; }
  int64_t passes_per_round() const override { return config_.num_iterations; }
  Rollout rollout(engine::Engine& engine, const std::vector<size_t>& round_prompts) override;

  const OnlineConfig::Rounds& rounds() const { return rounds_; }
  std::string describe() const override;

  // Evaluation as TRL's: the test split in file order, eval batches of
  // per_device_eval_batch_size x processes completions (num_generations_eval
  // per prompt), each generated, scored and given advantages as a round is,
  // then the loss without gradients and with no accumulation. Metrics are
  // the training ones, one entry per eval batch; the loss averages over the
  // test split's completions. On several processes a short last batch is
  // filled up with the first prompts again (their completions count in the
  // metrics, not in the loss), as accelerate's even batches do.
  void set_eval_prompts(PromptSplit prompts) override;
  engine::MetricSums evaluate_rounds(engine::Engine& engine) override;

  // With log_completions, on rank 0: the last training round as
  // output_dir/completions/completions_<step:05d>.parquet (one row per
  // completion of every process, in slot order: step, prompt as the dataset
  // gives it, completion text, each reward function's score, advantage),
  // written whole or not at all, and num_completions_to_print of its rows
  // printed. Evaluation's completions are not written.
  void on_log(engine::Engine& engine, int64_t step) override;

 protected:
  // The round's rewards, gathered: [G, F] (NaN: a function skipped the
  // completion), and, when the round computed them, each completion's summed
  // per-token KL from the reference over its completion tokens [G] (RLOO
  // folds it into the reward). `group`: completions per prompt.
  virtual losses::Advantages advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                                        const std::optional<torch::Tensor>& sequence_kl, int64_t group) = 0;
  // Whether the round computes the generating policy's log-probs (the loss
  // needs them when the policy moves between generation and use).
  virtual bool needs_old_logps() const = 0;
  // Whether the reward includes -beta x the completion's KL from the
  // reference (RLOO), logged then as the round's `kl`.
  virtual bool reward_includes_kl() const { return false; }
  // Whether the round keeps the reference's log-probs of its completions
  // (beta > 0: the KL coefficient towards it).
  virtual bool needs_ref_logps() const { return config_.beta != 0; }
  // Whether completions are scored: rewards, advantages and their metrics.
  // A trainer that learns from something else (distillation's teacher)
  // says no: its rounds carry neither, and its completion logs hold the
  // prompt and completion as text, as TRL's DistillationTrainer writes them.
  virtual bool scores_completions() const { return true; }

  // The shape of a round: training's, or an eval batch's.
  struct RoundShape {
    int64_t group;             // completions per prompt
    int64_t rows;              // completions, all processes
    int64_t micro_batches;     // per process
    int64_t micro_batch_size;  // rows
    bool eval;
  };
  // Generates, scores and cuts into micro-batches the round of `split`'s
  // prompts `round_prompts` (each repeated shape.group times).
  Rollout build_round(engine::Engine& engine, const PromptSplit& split, const std::vector<size_t>& round_prompts,
                      const RoundShape& shape);

  OnlineConfig::Rounds rounds_;
  int world_size_;

 private:
  // Warnings for training rounds that teach nothing: no completion got a
  // reward from any function (`unscored` of `completions`), or every group
  // had one reward for kZeroSpreadRounds rounds in a row.
  void warn_if_unlearnable(int64_t step, int64_t unscored, int64_t completions, double frac_zero_std);
  static constexpr int64_t kZeroSpreadRounds = 5;
  int64_t zero_spread_rounds_ = 0;
  bool warned_unscored_ = false;

  // The last training round, kept on rank 0 for on_log: each slot's prompt
  // (as the dataset gives it, or the decoded prompt ids when the trainer
  // does not score) and decoded completion, the rewards [G, F] and
  // advantages [G] (float32, as the loss saw them; undefined when the
  // trainer does not score).
  struct RoundLog {
    std::vector<nlohmann::ordered_json> prompts;
    std::vector<std::string> completions;
    torch::Tensor rewards;
    torch::Tensor advantages;
  };
  // Gathers the round's completions (every rank joins) and keeps the log on
  // rank 0. `lengths`: each slot's completion length, gathered.
  void keep_round_log(engine::Engine& engine, const PromptSplit& split, const std::vector<size_t>& round_prompts,
                      int64_t group, const std::vector<std::vector<int64_t>>& completions,
                      const torch::Tensor& lengths, const torch::Tensor& rewards, const torch::Tensor& advantages);
  std::optional<RoundLog> round_log_;
};

// A whole run of the online trainer T on config c: set up, train, the
// process exit code.
template <class T, class C>
int run_online(const C& c, const std::string& trainer) {
  auto r = set_up_online_run(c, trainer, T::setup());
  T t(c, std::move(r.prompts), std::move(r.text.tokenizer), std::move(r.reward_functions), r.pad_id, r.eos_ids,
      r.engine->world_size());
  if (r.judge) t.set_judge(std::move(r.judge));
  if (r.tools) t.set_tools(r.tools);
  if (c.eval_strategy != "no") t.set_eval_prompts(std::move(r.eval_prompts));
  log::info("{}: {}", trainer, t.describe());
  return train_to_exit_code(*r.engine, t);
}

}  // namespace trlx::trainers

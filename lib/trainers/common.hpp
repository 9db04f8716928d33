#pragma once
// What every trainer does the same way around its own data preparation and
// loss: the tokenizer and chat template, turning conversations and texts into
// ids as TRL does, reading a split, the rules for empty completions, the
// padding id, the reference model, and how a run ends. A trainer file keeps
// only what is its own.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/training.hpp"
#include "engine/trainer.hpp"
#include "model/decoder.hpp"
#include "text/data/dataset.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"

namespace trlx::engine {
struct LoadedPolicy;  // engine/engine.hpp
}

namespace trlx::trainers {

// --- tokenizer and chat template -------------------------------------------

struct TextInputs {
  text::Tokenizer tokenizer;
  std::optional<text::ChatTemplate> chat_template;
  const text::ChatTemplate* chat_template_or_null() const { return chat_template ? &*chat_template : nullptr; }
};

// The directory a model's tokenizer files are in: the model directory, or for
// a LoRA adapter directory without them, the base model it names.
std::filesystem::path tokenizer_dir_of(const std::filesystem::path& model_dir);

// The tokenizer in `model_dir` and the chat template to use:
// `chat_template_path` (a Jinja file or a tokenizer directory) when set, else
// the tokenizer's own (none when it has none).
TextInputs load_tokenizer_and_template(const std::filesystem::path& model_dir,
                                       const std::optional<std::string>& chat_template_path);

// The same for a run: the tokenizer of model_name_or_path (an adapter's base
// when the adapter has none).
TextInputs load_text_inputs(const config::TrainingConfig& config, const std::string& trainer,
                            const std::optional<std::string>& chat_template_path = std::nullopt);

// --- conversations and texts to ids ----------------------------------------

// What a row gives the chat template besides its messages, as TRL passes it
// (apply_chat_template's `tools=` and `**chat_template_kwargs`): the row's
// `tools` (function schemas; data shaping has checked them and parsed a JSON
// string), and template variables: the config's chat_template_kwargs with
// the row's `chat_template_kwargs` over them.
struct TemplateInputs {
  nlohmann::ordered_json tools;  // null: none
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};
TemplateInputs template_inputs(const nlohmann::ordered_json& row,
                               const nlohmann::ordered_json& config_kwargs = nlohmann::ordered_json::object());

// The tokenizer's special tokens for a template, as transformers passes them;
// with `inputs`, its tools and variables too (borrowed: they must outlive
// the options).
text::ChatOptions chat_options(const text::Tokenizer& tokenizer, bool add_generation_prompt);
text::ChatOptions chat_options(const text::Tokenizer& tokenizer, bool add_generation_prompt,
                               const TemplateInputs& inputs);

// A conversation rendered through the chat template with a row's template
// inputs; as ids, tokenized without special tokens (the template writes
// them), as transformers' apply_chat_template(tokenize=True) does.
std::string render_conversation(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const TemplateInputs& inputs);
std::vector<int64_t> render_conversation_ids(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template,
                                             const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                             const TemplateInputs& inputs);

// A conversational prompt as TRL's maybe_apply_chat_template renders one
// (CPO, ORPO, online DPO): after a user or tool turn with the generation
// prompt; after an assistant turn ending inside it, to be continued
// (continue_final_message); any other last role is an InputError.
std::string render_prompt(const text::Tokenizer& tokenizer, const text::ChatTemplate& chat_template,
                          const nlohmann::ordered_json& prompt, const TemplateInputs& inputs);

// The prompt's messages followed by the completion's (one conversation).
nlohmann::ordered_json prompt_then(const nlohmann::ordered_json& prompt, const nlohmann::ordered_json& completion);

// Plain text to ids, with the tokenizer's special tokens when asked.
// With `limit`, only the first `limit` tokens (Tokenizer::encode_head: a long
// text costs what those tokens cost).
std::vector<int64_t> encode_text(const text::Tokenizer& tokenizer, const std::string& text, bool add_special_tokens,
                                 std::optional<size_t> limit = std::nullopt);

// `text` ending with `eos`: appended unless it is already there, as TRL does
// to plain-text completions so that the model learns to stop.
std::string with_eos(std::string text, const std::string& eos);

// How many leading ids `a` and `b` share. A completion starts where the
// tokenized prompt and the tokenized prompt+completion diverge, so a token
// merging across the boundary belongs to the completion.
size_t common_prefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// --- reading a split -------------------------------------------------------

// Where a trainer's rows come from.
struct DataSource {
  std::string trainer;  // names the trainer in errors
  std::optional<std::string> dataset_name;
  bool skip_bad_rows = false;
  std::string text_field = "text";  // the plain-text column (SFT's dataset_text_field)
  // Rows whose text (all strings together) is longer are refused (or
  // skipped with skip_bad_rows) before they are tokenized whole: with
  // max_length set, see row_bytes_limit.
  std::optional<size_t> row_bytes_limit;
};
// A row's text may take 1 KiB per token of max_length (no token is that
// long), and at least 1 MiB: past that, tokenizing it whole would cost far
// more than what training keeps of it. None without max_length.
std::optional<size_t> row_bytes_limit(const std::optional<int64_t>& max_length);
DataSource data_source(const config::TrainingConfig& config, std::string trainer);

// One split of the dataset, read and shaped for `task`, skipped bad rows
// logged. A split the dataset does not have is an error when `required`,
// else nullopt.
std::optional<data::Shaped> read_split(data::Task task, const DataSource& source, const std::string& split,
                                       bool required);

// Whether the split is made of conversations; they need a chat template.
// `template_settable`: the trainer has chat_template_path, which the error
// then suggests.
bool is_conversational(const data::Shaped& shaped, const text::ChatTemplate* chat_template, const std::string& trainer,
                    bool template_settable);

// The text appended to plain-text completions: `eos_token` when the config
// sets one (it must be in the vocabulary), else the tokenizer's; "" for
// conversations, whose end the chat template writes. `eos_token_settable`:
// the trainer has an eos_token field, which the error then suggests.
std::string completion_eos(const text::Tokenizer& tokenizer, const std::optional<std::string>& eos_token,
                           const std::string& trainer, bool eos_token_settable, bool conversational);

// An empty completion is a bad row: an error naming it, or with
// skip_bad_rows dropped and counted, the count logged once per split.
class EmptyCompletions {
 public:
  // `why`: what such a row lacks, for the error.
  EmptyCompletions(bool skip_bad_rows, std::string why) : skip_(skip_bad_rows), why_(std::move(why)) {}
  // True when one of `columns` of the row is empty and the row is dropped.
  bool drop(const data::Row& row, std::initializer_list<const char*> columns);
  void report(const std::string& split) const;
  size_t dropped() const { return dropped_; }

 private:
  bool skip_;
  std::string why_;
  size_t dropped_ = 0;
};

// --- padding ---------------------------------------------------------------

// The padding id: `pad_token` when the config sets one (it must be in the
// vocabulary), else the tokenizer's pad, else its eos.
int64_t resolve_pad_id(const text::Tokenizer& tokenizer, const std::optional<std::string>& pad_token,
                       const std::string& trainer);
// For trainers without a pad_token field: the tokenizer's pad, else its eos.
int64_t resolve_pad_id(const text::Tokenizer& tokenizer, const std::string& trainer);

// --- the reference ---------------------------------------------------------

// What serves as the frozen reference of a trainer that has one, decided in
// one place as TRL 1.16's DPOTrainer and KTOTrainer decide it:
//   * `ref_model` set: that model;
//   * continuing from a LoRA adapter directory: the adapter as it starts (TRL
//     copies the loaded adapter into a frozen "ref" adapter);
//   * new LoRA adapters (use_peft): the policy with its adapters disabled, the
//     base model, which needs no copy (`separate` stays empty);
//   * otherwise: a second copy of the starting model.
// With `precompute` (reference log-probs computed once before training), the
// policy before its first step serves instead of a second copy of itself.
struct Reference {
  model::LanguageModel separate{nullptr};  // for Engine::set_reference
  // The policy before its first step is the reference (precompute only).
  bool is_start_policy = false;
  // The files its numbers depend on (the key of cached reference log-probs).
  std::vector<std::filesystem::path> files;
  // The role whose forward gives the reference's numbers before training.
  engine::Role precompute_role() const { return is_start_policy ? engine::Role::Policy : engine::Role::Reference; }
};
Reference load_reference(const config::TrainingConfig& config, const engine::LoadedPolicy& policy,
                         const std::optional<std::string>& ref_model, bool precompute, model::HeadKind head);

// The files a model directory is made of: its configs and weights (adapter
// directories too), sorted by name.
std::vector<std::filesystem::path> model_files(const std::filesystem::path& dir);

// --- the end of a run ------------------------------------------------------

// Trains to the end and returns the process exit code: 1 when the run was
// stopped on request (it saved a checkpoint to resume from), else 0.
int train_to_exit_code(engine::Engine& engine, engine::Trainer& trainer);

// InputError when the tokenizer in `tokenizer_dir` has token ids beyond the
// `vocab_size` embedding rows of the model in `model_dir` (a tokenizer that
// belongs to another model): names the file, the token and both sizes.
void check_tokenizer_fits(const text::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_dir,
                          int64_t vocab_size, const std::filesystem::path& model_dir);

// InputError when the tokenizer in `model_dir` (if it has one) maps any id
// to another token than `tokenizer` (from `tokenizer_dir`) does: a model
// that reads the policy's token ids (PPO's reward and value models) must
// share its vocabulary, not only its size. Names both files, the first id
// that differs and both tokens. A directory without tokenizer files is not
// compared.
void check_same_vocabulary(const text::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_dir,
                           const std::filesystem::path& model_dir, const std::string& field);

// The preference trainers' pair metrics (rewards/chosen, rewards/rejected,
// rewards/accuracies, rewards/margins, logps/chosen, logps/rejected), summed
// over this micro-batch's pairs as device sums (read at a logging step).
void add_preference_metrics(engine::MetricSums& m, const torch::Tensor& chosen_rewards,
                            const torch::Tensor& rejected_rewards, const torch::Tensor& chosen_logps,
                            const torch::Tensor& rejected_logps);

}  // namespace trlx::trainers

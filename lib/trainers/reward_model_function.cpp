// A sequence-classification model (a saved reward model) as a reward function.
#include "trainers/reward_model_function.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/decoder.hpp"
#include "model/loading.hpp"
#include "trainers/common.hpp"

namespace trlx::trainers {

namespace {

// The default CPU generator seeded for a scope, and given back its state
// after it: what is drawn inside is fixed by the seed, and the draws after
// it are those the run would have made without the scope.
class SeededScope {
 public:
  explicit SeededScope(int64_t seed) : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    saved_ = gen_.get_state();
    gen_.set_current_seed(static_cast<uint64_t>(seed));
  }
  ~SeededScope() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(saved_);
  }
  SeededScope(const SeededScope&) = delete;
  SeededScope& operator=(const SeededScope&) = delete;

 private:
  at::Generator gen_;
  torch::Tensor saved_;
};

class RewardModelFunction final : public rewards::RewardFunction {
 public:
  RewardModelFunction(const std::filesystem::path& dir, torch::Device device, const std::string& dtype,
                      bool conversational, int64_t seed)
      : dir_(dir), device_(device), text_(load_tokenizer_and_template(dir, std::nullopt)) {
    if (conversational && !text_.chat_template) no_chat_template();
    model_ = load_score_model(dir.string(), dtype, "reward_funcs", seed, /*defer_casts=*/false);
    check_tokenizer_fits(text_.tokenizer, dir, model_->config().vocab_size, dir);
    model_->to(device_);
    model_->eval();
    pad_ = resolve_pad_id(text_.tokenizer, "reward_funcs");
    // As TRL names it: the directory's last component.
    auto p = dir;
    if (p.filename().empty()) p = p.parent_path();
    name_ = p.filename().string();
  }

  const std::string& name() const override { return name_; }

  rewards::Scores score(const std::vector<rewards::Sample>& batch) override {
    std::vector<std::vector<int64_t>> seqs;
    for (const auto& s : batch) {
      if (s.prompt.is_array()) {
        if (!text_.chat_template) no_chat_template();
        // The conversation rendered whole, tokenized without special tokens
        // (the template writes them), as TRL scores conversations.
        seqs.push_back(encode_text(text_.tokenizer,
                                   render_conversation(text_.tokenizer, *text_.chat_template,
                                                       prompt_then(s.prompt, s.completion), false,
                                                       TemplateInputs{}),
                                   false));
      } else {
        seqs.push_back(encode_text(text_.tokenizer, s.prompt.get<std::string>() + rewards::completion_text(s), false));
      }
      if (seqs.back().empty()) seqs.back().push_back(pad_);
    }
    size_t width = 1;
    for (const auto& q : seqs) width = std::max(width, q.size());
    auto ids = torch::full({static_cast<int64_t>(seqs.size()), static_cast<int64_t>(width)}, pad_, torch::kInt64);
    auto mask = torch::zeros_like(ids);
    auto* pi = ids.data_ptr<int64_t>();
    auto* pm = mask.data_ptr<int64_t>();
    for (size_t r = 0; r < seqs.size(); ++r) {
      std::copy(seqs[r].begin(), seqs[r].end(), pi + r * width);
      std::fill_n(pm + r * width, seqs[r].size(), int64_t{1});
    }
    torch::NoGradGuard no_grad;
    ids = ids.to(device_);
    // Padding after the tokens: plain causal attention, no mask to build.
    model::Batch in{ids, mask.to(device_), {}, {}};
    in.padding_trails = true;
    auto hidden = model_->hidden_states(in);
    auto scores = model::pool_last_non_pad(model_->head(hidden), ids, pad_).select(-1, 0).to(torch::kFloat64).cpu();
    rewards::Scores out;
    for (int64_t i = 0; i < scores.size(0); ++i) out.push_back(scores[i].item<double>());
    return out;
  }

 private:
  [[noreturn]] void no_chat_template() const {
    fail_input("reward_funcs: the reward model {} has no chat template, so it cannot score the conversations of "
               "this dataset (its tokenizer is its own, so the policy's template would not fit it); give it one "
               "(chat_template in its tokenizer_config.json) or use plain-text prompts",
               dir_.string());
  }

  std::filesystem::path dir_;
  torch::Device device_;
  TextInputs text_;
  model::LanguageModel model_{nullptr};
  int64_t pad_ = 0;
  std::string name_;
};

}  // namespace

model::LanguageModel load_score_model(const std::string& dir, const std::string& dtype, const std::string& field,
                                      int64_t seed, bool defer_casts, bool trains) {
  if (!trains && !io::Checkpoint::open_dir(dir).contains("score.weight"))
    fail_input("{}: {} has no score head (its weights hold no `score.weight`): it is a language model, not a reward "
               "model. A reward model is never trained, so a new head would score at random; train one with `trlx "
               "reward` (or give a ...ForSequenceClassification checkpoint)",
               field, dir);
  model::LanguageModel m{nullptr};
  {
    SeededScope seeded(seed);
    m = model::load_language_model(dir, model::HeadKind::SequenceClassification, dtype, defer_casts);
  }
  if (m->config().num_labels != 1)
    fail_input("{}: {} has num_labels {}; a reward or value model gives one score per sequence or position "
               "(num_labels 1)",
               field, dir, m->config().num_labels);
  return m;
}

std::unique_ptr<rewards::RewardFunction> make_reward_model_function(const std::filesystem::path& dir,
                                                                   torch::Device device, const std::string& dtype,
                                                                   bool conversational, int64_t seed) {
  return std::make_unique<RewardModelFunction>(dir, device, dtype, conversational, seed);
}

}  // namespace trlx::trainers

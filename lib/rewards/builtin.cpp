// TRL's built-in reward functions (trl.rewards) by their TRL names, scoring as TRL's do.
#include "rewards/builtin.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "rewards/math_answer.hpp"

namespace trlx::rewards {
namespace {

const std::vector<std::string>& names() {
  static const std::vector<std::string> n = {"accuracy_reward",
                                             "get_cosine_scaled_reward",
                                             "get_repetition_penalty_reward",
                                             "get_soft_overlong_punishment",
                                             "reasoning_accuracy_reward",
                                             "think_format_reward"};
  return n;
}

// A function's parameters, checked against the ones it takes.
class Params {
 public:
  Params(std::string fn, const nlohmann::json& j, std::vector<std::string> known)
      : fn_(std::move(fn)), j_(j), known_(std::move(known)) {
    if (j_.is_null()) return;
    if (!j_.is_object()) fail_input("{}: parameters must be a JSON object, got {}", fn_, j_.dump());
    for (const auto& item : j_.items()) {
      if (std::find(known_.begin(), known_.end(), item.key()) != known_.end()) continue;
      if (known_.empty()) fail_input("{}: unknown parameter '{}' (it takes no parameters)", fn_, item.key());
      fail_input("{}: unknown parameter '{}' (it takes: {})", fn_, item.key(), fmt::join(known_, ", "));
    }
  }

  // An integer >= `min`; required when there is no default.
  int64_t integer(const std::string& key, std::optional<int64_t> def, int64_t min) const {
    const nlohmann::json* v = find(key);
    if (!v) {
      if (!def) fail_input("{}: missing required parameter '{}'", fn_, key);
      return *def;
    }
    if (!v->is_number_integer()) fail_input("{}: parameter '{}' must be an integer, got {}", fn_, key, v->dump());
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail_input("{}: parameter '{}' is too large: {}", fn_, key, v->dump());
    const auto x = v->get<int64_t>();
    if (x < min) fail_input("{}: parameter '{}' must be >= {}, got {}", fn_, key, min, x);
    return x;
  }

  double number(const std::string& key, double def) const {
    const nlohmann::json* v = find(key);
    if (!v) return def;
    if (!v->is_number()) fail_input("{}: parameter '{}' must be a number, got {}", fn_, key, v->dump());
    const auto x = v->get<double>();
    if (!std::isfinite(x)) fail_input("{}: parameter '{}' must be finite, got {}", fn_, key, v->dump());
    return x;
  }

  std::vector<std::string> strings(const std::string& key, std::vector<std::string> def) const {
    const nlohmann::json* v = find(key);
    if (!v) return def;
    if (!v->is_array()) fail_input("{}: parameter '{}' must be a list of strings, got {}", fn_, key, v->dump());
    std::vector<std::string> out;
    for (const auto& e : *v) {
      if (!e.is_string()) fail_input("{}: parameter '{}' must be a list of strings, got {}", fn_, key, v->dump());
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  const std::string& fn() const { return fn_; }

 private:
  const nlohmann::json* find(const std::string& key) const {
    if (!j_.is_object()) return nullptr;
    const auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }

  std::string fn_;
  const nlohmann::json& j_;
  std::vector<std::string> known_;
};

// The gold answer of a sample, from its dataset's `solution` column.
std::string solution_of(const std::string& fn, const Sample& s, size_t i) {
  if (!s.columns.is_object() || !s.columns.contains("solution"))
    fail_input(
        "{}: sample {} has no 'solution' column; {} compares each completion with the gold answer the "
        "dataset gives in a 'solution' column",
        fn, i, fn);
  const auto& v = s.columns["solution"];
  if (!v.is_string()) fail_input("{}: the 'solution' column must be a string, got {} (sample {})", fn, v.dump(), i);
  return v.get<std::string>();
}

// At most `n` bytes of `s`, cut at a character boundary.
std::string shortened(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "...";
}

// Scores an answer against a gold solution as TRL's math_verify comparison
// does; no score where the solution holds no answer (as TRL) or where trlx
// cannot reproduce the comparison (said once, so a run is not silently
// skipping every sample).
class Grader {
 public:
  explicit Grader(std::string fn) : fn_(std::move(fn)) {}
  std::optional<double> grade(const std::string& solution, const std::string& content) {
    const math::Outcome o = math::check(solution, content);
    switch (o.verdict) {
      case math::Verdict::correct: return 1.0;
      case math::Verdict::wrong: return 0.0;
      case math::Verdict::no_gold: return std::nullopt;
      case math::Verdict::unsupported: break;
    }
    if (!warned_) {
      log::warn(
          "{}: some answers are outside what trlx compares exactly as TRL's math_verify does (numbers, "
          "fractions, percentages); those completions get no score. First: {}",
          fn_, shortened(o.detail, 400));
      warned_ = true;
    } else {
      log::debug("{}: no score: {}", fn_, shortened(o.detail, 400));
    }
    return std::nullopt;
  }

 private:
  std::string fn_;
  bool warned_ = false;
};

class ThinkFormat final : public RewardFunction {
 public:
  const std::string& name() const override { return name_; }
  // A completion starting with <think>, holding no second <think>, with a
  // </think> after the first.
  Scores score(const std::vector<Sample>& batch) override {
    static const std::string open = "<think>", close = "</think>";
    Scores out;
    for (const Sample& s : batch) {
      const std::string text = completion_text(s);
      const bool ok = text.compare(0, open.size(), open) == 0 && text.find(open, open.size()) == std::string::npos &&
                      text.find(close, open.size()) != std::string::npos;
      out.emplace_back(ok ? 1.0 : 0.0);
    }
    return out;
  }

 private:
  std::string name_ = "think_format_reward";
};

class SoftOverlong final : public RewardFunction {
 public:
  SoftOverlong(int64_t max_len, int64_t cache) : max_len_(max_len), cache_(cache) {}
  const std::string& name() const override { return name_; }
  Scores score(const std::vector<Sample>& batch) override {
    Scores out;
    for (const Sample& s : batch) {
      const auto len = static_cast<int64_t>(s.completion_ids.size());
      const int64_t free_len = max_len_ - cache_;
      if (len <= free_len) {
        out.emplace_back(0.0);
      } else if (len <= max_len_) {
        out.emplace_back(static_cast<double>(free_len - len) / static_cast<double>(cache_));
      } else {
        out.emplace_back(-1.0);
      }
    }
    return out;
  }

 private:
  std::string name_ = "soft_overlong_punishment_reward";
  int64_t max_len_, cache_;
};

class RepetitionPenalty final : public RewardFunction {
 public:
  RepetitionPenalty(int64_t ngram, double max_penalty) : n_(static_cast<size_t>(ngram)), max_penalty_(max_penalty) {}
  const std::string& name() const override { return name_; }
  Scores score(const std::vector<Sample>& batch) override {
    Scores out;
    for (const Sample& s : batch) {
      const std::vector<int64_t>& ids = s.completion_ids;
      if (ids.size() < n_) {
        out.emplace_back(0.0);
        continue;
      }
      const size_t total = ids.size() - n_ + 1;
      std::set<std::vector<int64_t>> unique;
      for (size_t i = 0; i < total; ++i) unique.emplace(ids.begin() + static_cast<std::ptrdiff_t>(i),
                                                        ids.begin() + static_cast<std::ptrdiff_t>(i + n_));
      const double scaling = 1.0 - static_cast<double>(unique.size()) / static_cast<double>(total);
      out.emplace_back(scaling != 0.0 ? scaling * max_penalty_ : 0.0);
    }
    return out;
  }

 private:
  std::string name_ = "repetition_penalty_reward";
  size_t n_;
  double max_penalty_;
};

class Accuracy final : public RewardFunction {
 public:
  const std::string& name() const override { return name_; }
  Scores score(const std::vector<Sample>& batch) override {
    Scores out;
    std::vector<std::string> solutions;
    for (size_t i = 0; i < batch.size(); ++i) solutions.push_back(solution_of(name_, batch[i], i));
    for (size_t i = 0; i < batch.size(); ++i) out.push_back(grader_.grade(solutions[i], completion_text(batch[i])));
    return out;
  }

 private:
  std::string name_ = "accuracy_reward";
  Grader grader_{name_};
};

class ReasoningAccuracy final : public RewardFunction {
 public:
  explicit ReasoningAccuracy(std::vector<std::string> delimiters) : delimiters_(std::move(delimiters)) {}
  const std::string& name() const override { return name_; }
  Scores score(const std::vector<Sample>& batch) override {
    Scores out;
    std::vector<std::string> solutions;
    for (size_t i = 0; i < batch.size(); ++i) solutions.push_back(solution_of(name_, batch[i], i));
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::optional<std::string> answer = final_part(completion_text(batch[i]));
      // An unfinished reasoning scores 0 (not skipped), whatever the gold.
      out.push_back(answer ? grader_.grade(solutions[i], *answer) : std::optional<double>(0.0));
    }
    return out;
  }

 private:
  // The text after the last occurrence of the first delimiter (in the
  // configured order) the completion contains.
  std::optional<std::string> final_part(const std::string& text) const {
    for (const std::string& d : delimiters_) {
      size_t last = std::string::npos;
      for (size_t at = text.find(d); at != std::string::npos; at = text.find(d, at + d.size())) last = at;
      if (last != std::string::npos) return text.substr(last + d.size());
    }
    return std::nullopt;
  }

  std::string name_ = "reasoning_accuracy_reward";
  std::vector<std::string> delimiters_;
  Grader grader_{name_};
};

class CosineScaled final : public RewardFunction {
 public:
  struct Bounds {
    double min_wrong, max_wrong, min_correct, max_correct;
  };
  CosineScaled(int64_t max_len, Bounds b) : max_len_(max_len), b_(b) {}
  const std::string& name() const override { return name_; }
  Scores score(const std::vector<Sample>& batch) override {
    Scores out;
    std::vector<std::string> solutions;
    for (size_t i = 0; i < batch.size(); ++i) solutions.push_back(solution_of("get_cosine_scaled_reward", batch[i], i));
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::optional<double> correct = grader_.grade(solutions[i], completion_text(batch[i]));
      if (!correct) {
        out.emplace_back(std::nullopt);
        continue;
      }
      const double progress =
          std::min(static_cast<double>(batch[i].completion_ids.size()) / static_cast<double>(max_len_), 1.0);
      const double cosine = std::cos(progress * std::numbers::pi);
      // A wrong answer's bounds are swapped: shorter is penalised more.
      const double lo = *correct != 0.0 ? b_.min_correct : b_.max_wrong;
      const double hi = *correct != 0.0 ? b_.max_correct : b_.min_wrong;
      out.emplace_back(lo + 0.5 * (hi - lo) * (1.0 + cosine));
    }
    return out;
  }

 private:
  std::string name_ = "cosine_scaled_reward";
  int64_t max_len_;
  Bounds b_;
  Grader grader_{"get_cosine_scaled_reward"};
};

}  // namespace

bool is_builtin_reward(const std::string& name) {
  const auto& n = names();
  return std::find(n.begin(), n.end(), name) != n.end();
}

std::vector<std::string> builtin_reward_names() { return names(); }

std::unique_ptr<RewardFunction> make_builtin_reward(const std::string& name, const nlohmann::json& params) {
  if (name == "think_format_reward") {
    Params p(name, params, {});
    return std::make_unique<ThinkFormat>();
  }
  if (name == "accuracy_reward") {
    Params p(name, params, {});
    return std::make_unique<Accuracy>();
  }
  if (name == "reasoning_accuracy_reward") {
    Params p(name, params, {"reasoning_delimiters"});
    std::vector<std::string> delimiters = p.strings("reasoning_delimiters", {"</think>"});
    for (const std::string& d : delimiters)
      if (d.empty()) fail_input("{}: parameter 'reasoning_delimiters' must not hold an empty string", name);
    return std::make_unique<ReasoningAccuracy>(std::move(delimiters));
  }
  if (name == "get_soft_overlong_punishment") {
    Params p(name, params, {"max_completion_len", "soft_punish_cache"});
    const int64_t max_len = p.integer("max_completion_len", std::nullopt, 0);
    const int64_t cache = p.integer("soft_punish_cache", std::nullopt, 0);
    return std::make_unique<SoftOverlong>(max_len, cache);
  }
  if (name == "get_repetition_penalty_reward") {
    if (params.is_object() && params.contains("language"))
      fail_input(
          "{}: no parameter 'language': as in TRL 1.16, the penalty counts repeated n-grams of completion "
          "token ids, which works for any language (open-r1's version split words, English on whitespace and "
          "Chinese with jieba); remove 'language'",
          name);
    Params p(name, params, {"ngram_size", "max_penalty"});
    const int64_t ngram = p.integer("ngram_size", 3, 1);
    const double max_penalty = p.number("max_penalty", -1.0);
    if (max_penalty > 0) fail_input("{}: parameter 'max_penalty' must not be positive, got {}", name, max_penalty);
    return std::make_unique<RepetitionPenalty>(ngram, max_penalty);
  }
  if (name == "get_cosine_scaled_reward") {
    Params p(name, params, {"max_len", "min_value_wrong", "max_value_wrong", "min_value_correct", "max_value_correct"});
    const int64_t max_len = p.integer("max_len", std::nullopt, 1);
    const CosineScaled::Bounds b{p.number("min_value_wrong", -1.0), p.number("max_value_wrong", -0.5),
                                 p.number("min_value_correct", 0.5), p.number("max_value_correct", 1.0)};
    return std::make_unique<CosineScaled>(max_len, b);
  }
  fail_input("unknown built-in reward function '{}'; the built-ins are: {}", name, fmt::join(names(), ", "));
}

}  // namespace trlx::rewards

// LoRA adapters on the decoder's linear layers, read and written in PEFT format.
#include "model/lora.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/atomic_write.hpp"
#include "io/safetensors.hpp"
#include "model/quant4.hpp"

namespace trlx::model {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

// Where a modules_to_save module keeps its original parameters: a child
// module, so they move with the model (.to) and merge can drop them.
constexpr const char* kOriginal = "original_module";
constexpr const char* kPrefix = "base_model.model.";
constexpr const char* kAllLinear = "all-linear";
// The child module of an adapted layer that holds DoRA's magnitude.
constexpr const char* kMagnitude = "lora_magnitude_vector";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string leaf_name(const std::string& name) {
  auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// Names of LoRA's own submodules (adapters, originals) never take part in
// matching.
bool is_lora_internal(const std::string& name) {
  for (const char* part : {"lora_A", "lora_B", kMagnitude, kOriginal, "base_layer"}) {
    const std::string p = part;
    if (name == p || ends_with(name, "." + p) || name.find("." + p + ".") != std::string::npos ||
        name.rfind(p + ".", 0) == 0)
      return true;
  }
  return false;
}

// A target name matches a module named exactly so, or one whose name ends
// with "." + target.
bool target_matches(const std::string& module, const std::string& target) {
  return module == target || ends_with(module, "." + target);
}

// A module to save excludes from adapters every module on its path: the
// module itself and anything inside it.
bool inside_module_to_save(const std::string& module, const std::string& save) {
  const std::string dotted = "." + module + ".";
  return dotted.find("." + save + ".") != std::string::npos;
}

bool is_head(const LanguageModelImpl& m, const std::string& name) {
  (void)m;
  return name == "lm_head" || name == "score";
}

struct Named {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
};

std::vector<Named> modules_of(LanguageModelImpl& m) {
  std::vector<Named> out;
  for (const auto& item : m.named_modules("", /*include_self=*/false)) {
    if (is_lora_internal(item.key())) continue;
    out.push_back({item.key(), item.value()});
  }
  return out;
}

// The member tensors a module's forward reads, which AdaptersDisabled points
// at the originals of a modules_to_save copy.
std::pair<torch::Tensor*, torch::Tensor*> weight_slots(torch::nn::Module& module) {
  if (auto* l = dynamic_cast<LinearImpl*>(&module)) return {&l->weight, &l->bias};
  if (auto* e = dynamic_cast<EmbeddingImpl*>(&module)) return {&e->weight, nullptr};
  if (auto* n = dynamic_cast<RMSNormImpl*>(&module)) return {&n->weight, nullptr};
  return {nullptr, nullptr};
}

std::string join_sorted(std::set<std::string> names) { return fmt::format("{}", fmt::join(names, ", ")); }

std::vector<std::string> default_targets(const std::string& model_type) {
  // The attention query and value projections, the default PEFT users know
  // for these architectures.
  for (const auto* t : {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "mixtral"})
    if (model_type == t) return {"q_proj", "v_proj"};
  // Phi-3 (fused projections) and Qwen3-MoE have no default, as in PEFT.
  fail_input("no default LoRA target modules for model type `{}`; set lora_target_modules (e.g. [q_proj, v_proj], "
             "for Phi-3 [qkv_proj], or all-linear)",
             model_type);
}

int64_t count(LanguageModelImpl& m, bool trainable_only) {
  int64_t n = 0;
  for (const auto& p : m.parameters(true))
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

ordered_json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) fail_input("{}: cannot read (an adapter directory holds adapter_config.json and adapter_model.safetensors)",
                      file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return ordered_json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: not valid JSON: {}", file.string(), e.what());
  }
}

void copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                        "tokenizer.model", "vocab.json", "merges.txt"}) {
    if (!fs::exists(from / f)) continue;
    fs::copy_file(from / f, to / f, fs::copy_options::overwrite_existing);
    fs::permissions(to / f, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
  }
}

}  // namespace

namespace {

// The experts module and adapter of an adapted expert weight's full name
// (<experts module>.gate_up_proj or .down_proj).
std::pair<std::string, ExpertAdapter*> expert_adapter(torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>>& named,
                                                      const std::string& name) {
  const auto dot = name.rfind('.');
  const std::string module = name.substr(0, dot), weight = name.substr(dot + 1);
  auto* e = named.contains(module) ? dynamic_cast<ExpertsImpl*>(named[module].get()) : nullptr;
  if (!e) fail("`{}` is no adapted expert weight", name);
  auto* a = weight == "gate_up_proj" ? &e->gate_up_lora : &e->down_lora;
  if (!a->defined()) fail("`{}` has no adapter (merged already?)", name);
  return {module, a};
}

}  // namespace

double LoraInfo::scale() const {
  return config.use_rslora ? config.alpha / std::sqrt(static_cast<double>(config.r))
                           : config.alpha / static_cast<double>(config.r);
}

bool has_lora(LanguageModelImpl& m) {
  for (const auto& item : m.named_modules("", false)) {
    if (auto* l = dynamic_cast<LinearImpl*>(item.value().get()); l && l->lora_A) return true;
    if (auto* e = dynamic_cast<ExpertsImpl*>(item.value().get());
        e && (e->gate_up_lora.defined() || e->down_lora.defined()))
      return true;
    if (ends_with(item.key(), std::string(".") + kOriginal) || item.key() == kOriginal) return true;
  }
  return false;
}

LoraInfo apply_lora(LanguageModelImpl& m, const LoraConfig& config) {
  if (config.r <= 0) fail_input("lora_r must be a positive rank, found {}", config.r);
  if (config.dropout < 0 || config.dropout >= 1) fail_input("lora_dropout must be in [0, 1), found {}", config.dropout);
  if (has_lora(m)) fail_input("the model already has LoRA adapters; merge or load them once");
  const bool seq_cls = m.head_kind() == HeadKind::SequenceClassification;
  const auto modules = modules_of(m);

  LoraInfo info;
  info.config = config;

  // Modules to save: the sequence-classification head always trains (it is
  // new); "classifier" is the name other architectures use for it.
  std::vector<std::string> save_names = config.modules_to_save.value_or(std::vector<std::string>{});
  if (seq_cls)
    for (const char* h : {"classifier", "score"})
      if (std::find(save_names.begin(), save_names.end(), h) == save_names.end()) save_names.push_back(h);
  info.modules_to_save = save_names;
  std::set<std::string> with_params;
  for (const auto& [name, module] : modules)
    if (!module->named_parameters(false).is_empty()) with_params.insert(name);
  std::vector<Named> to_copy;
  for (const auto& want : save_names) {
    if (seq_cls && want == "classifier") continue;
    bool found = false;
    for (const auto& n : modules) {
      if (!with_params.count(n.name) || !ends_with(n.name, want)) continue;
      if (!weight_slots(*n.module).first)
        fail_input("lora_modules_to_save: `{}` matches `{}`, which trlx cannot copy", want, n.name);
      found = true;
      if (std::none_of(to_copy.begin(), to_copy.end(), [&](const Named& c) { return c.name == n.name; }))
        to_copy.push_back(n);
    }
    if (!found) {
      std::set<std::string> avail;
      for (const auto& n : with_params) avail.insert(n.find("layers.") != std::string::npos ? leaf_name(n) : n);
      fail_input("lora_modules_to_save: `{}` matches no module of this {} model; modules with weights: {}", want,
                 m.config().model_type, join_sorted(avail));
    }
  }

  // Targets.
  std::vector<Named> linears;
  for (const auto& n : modules)
    if (dynamic_cast<LinearImpl*>(n.module.get())) linears.push_back(n);
  std::set<std::string> linear_leaves;
  for (const auto& n : linears)
    if (!is_head(m, n.name)) linear_leaves.insert(leaf_name(n.name));
  auto excluded = [&](const std::string& name) {
    return std::any_of(save_names.begin(), save_names.end(),
                       [&](const std::string& s) { return inside_module_to_save(name, s); });
  };
  std::vector<Named> targets;
  std::set<std::string> listed;
  const bool all_linear = config.target_modules && config.target_modules->size() == 1 &&
                          (*config.target_modules)[0] == kAllLinear;
  if (all_linear) {
    for (const auto& n : linears) {
      if (is_head(m, n.name) || excluded(n.name)) continue;
      targets.push_back(n);
      listed.insert(leaf_name(n.name));
    }
    if (targets.empty()) fail_input("lora_target_modules: all-linear found no linear layer outside the head");
  } else if (!config.target_modules && config.target_parameters) {
    // Expert weights only (below).
  } else {
    const auto wanted = config.target_modules ? *config.target_modules : default_targets(m.config().model_type);
    if (wanted.empty()) fail_input("lora_target_modules is an empty list; name modules (e.g. q_proj) or all-linear");
    for (const auto& t : wanted) {
      if (t == kAllLinear)
        fail_input("lora_target_modules: all-linear must be the only entry, found it among {}", fmt::join(wanted, ", "));
      listed.insert(t);
    }
    for (const auto& n : linears) {
      bool hit = std::any_of(wanted.begin(), wanted.end(), [&](const std::string& t) { return target_matches(n.name, t); });
      if (!hit || excluded(n.name)) continue;
      if (is_head(m, n.name))
        fail_input("lora_target_modules: `{}` is the output head; trlx puts adapters inside the decoder only. Train the "
                   "head in full with lora_modules_to_save: [{}]",
                   n.name, n.name);
      targets.push_back(n);
    }
    for (const auto& t : wanted) {
      bool hit = std::any_of(targets.begin(), targets.end(), [&](const Named& n) { return target_matches(n.name, t); });
      if (!hit)
        fail_input("lora_target_modules: `{}` matches no linear layer of this {} model; linear layers: {} (or "
                   "all-linear)",
                   t, m.config().model_type, join_sorted(linear_leaves));
    }
  }
  info.target_modules.assign(listed.begin(), listed.end());

  // Expert weights (target_parameters): each experts module's stacked weights.
  struct ExpertTarget {
    std::string module;
    ExpertsImpl* experts;
    bool gate_up, down;
  };
  std::vector<ExpertTarget> expert_targets;
  if (config.target_parameters) {
    const auto& wanted = *config.target_parameters;
    if (wanted.empty()) fail_input("lora_target_parameters is an empty list; name expert weights or leave it unset");
    if (config.dropout != 0.0)
      fail_input("lora_target_parameters needs lora_dropout 0 (found {}): an adapter on a stacked weight cannot drop "
                 "inputs, and PEFT refuses it too",
                 config.dropout);
    if (config.use_dora) fail_input("lora_target_parameters does not work with use_dora (PEFT refuses it too)");
    std::set<std::string> available;
    std::set<std::string> hit_targets;
    for (const auto& n : modules) {
      auto* e = dynamic_cast<ExpertsImpl*>(n.module.get());
      if (!e) continue;
      ExpertTarget t{n.name, e, false, false};
      for (const char* w : {"gate_up_proj", "down_proj"}) {
        const std::string full = n.name + "." + w;
        available.insert(std::string("mlp.experts.") + w);
        for (const auto& want : wanted)
          if (target_matches(full, want)) {
            (std::string(w) == "gate_up_proj" ? t.gate_up : t.down) = true;
            hit_targets.insert(want);
          }
      }
      if (!t.gate_up && !t.down) continue;
      expert_targets.push_back(t);
    }
    for (const auto& want : wanted)
      if (!hit_targets.count(want))
        fail_input("lora_target_parameters: `{}` matches no expert weight of this {} model{}", want,
                   m.config().model_type,
                   available.empty() ? " (it has no experts)"
                                     : fmt::format("; expert weights: {}", join_sorted(available)));
    info.target_parameters = wanted;
  }

  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters(true)) p.requires_grad_(false);
  const double scale = info.scale();
  for (const auto& n : targets) {
    auto& lin = *dynamic_cast<LinearImpl*>(n.module.get());
    // A 4-bit base keeps its shape with its codes (its float weight is empty).
    const auto shape = lin.quant4 ? lin.quant4->shape : lin.weight.sizes().vec();
    const int64_t out = shape.at(0), in = shape.at(1);
    // As PEFT (autocast_adapter_dtype): adapters on a 16-bit base are
    // float32, so their updates are not lost to bf16/fp16 rounding.
    const auto base = m.placed_dtype(lin.weight);
    const bool narrow = base == torch::kBFloat16 || base == torch::kFloat16;
    auto opts = lin.weight.options().dtype(config.adapter_dtype.value_or(narrow ? torch::kFloat32 : base));
    lin.lora_A = std::make_shared<LinearImpl>(in, config.r, false);
    lin.lora_B = std::make_shared<LinearImpl>(config.r, out, false);
    // A: kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)),
    // drawn in fp32 whatever the dtype; B: zero, so the output is unchanged.
    // The random stream is used as PEFT uses it: its two nn.Linear draw
    // their default weights (A's shape, then B's) before A is drawn again,
    // so with the same seed the adapters start where PEFT's do.
    torch::empty({config.r, in}, torch::kFloat32).uniform_();
    torch::empty({out, config.r}, torch::kFloat32).uniform_();
    auto a = torch::empty({config.r, in}, torch::kFloat32);
    torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
    lin.lora_A->weight.set_data(a.to(opts));
    lin.lora_B->weight.set_data(torch::zeros({out, config.r}, opts));
    lin.register_module("lora_A", lin.lora_A);
    lin.register_module("lora_B", lin.lora_B);
    lin.lora_A->weight.requires_grad_(true);
    lin.lora_B->weight.requires_grad_(true);
    lin.lora_scale = scale;
    lin.lora_dropout = config.dropout;
    lin.lora_enabled = true;
    if (config.use_dora) {
      // The magnitude starts at the row norms of W + scale * B A (B is zero:
      // of W), in the adapters' dtype, as PEFT's update_layer sets it.
      // It lives in a child module, so that merge_lora can drop it.
      auto norm = torch::linalg_vector_norm(float_weight(lin), 2, {1});
      auto holder = std::make_shared<torch::nn::Module>();
      lin.lora_magnitude = holder->register_parameter("weight", norm.to(opts), /*requires_grad=*/true);
      lin.register_module(kMagnitude, holder);
    }
    info.adapted.push_back(n.name);
  }
  for (const auto& t : expert_targets) {
    auto& e = *t.experts;
    const int64_t experts = e.num_experts();
    // PEFT's nesting: the experts' last adapted weight (in registration
    // order) outermost, the others under base_layer.
    const int adapted = (t.gate_up ? 1 : 0) + (t.down ? 1 : 0);
    int index = 0;
    for (auto [wanted, weight, adapter] : {std::tuple{t.gate_up, &e.gate_up_proj, &e.gate_up_lora},
                                           std::tuple{t.down, &e.down_proj, &e.down_lora}}) {
      if (!wanted) continue;
      // [E, out, in], or [E, in, out] where the experts store them so (gpt-oss).
      const int64_t out = weight->size(e.interleaved() ? 2 : 1), in = weight->size(e.interleaved() ? 1 : 2);
      const auto base = m.placed_dtype(*weight);
      const bool narrow = base == torch::kBFloat16 || base == torch::kFloat16;
      auto opts = weight->options().dtype(config.adapter_dtype.value_or(narrow ? torch::kFloat32 : base));
      auto a = torch::empty({config.r * experts, in}, torch::kFloat32);
      torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
      std::string infix;
      for (int k = index + 1; k < adapted; ++k) infix += "base_layer.";
      // Registered as PEFT names them: <experts>.<infix>lora_A.weight.
      torch::nn::Module* holder = &e;
      std::shared_ptr<torch::nn::Module> nested;
      for (int k = index + 1; k < adapted; ++k) {
        auto child = holder->named_children().contains("base_layer") ? holder->named_children()["base_layer"]
                                                                     : holder->register_module("base_layer",
                                                                                               std::make_shared<torch::nn::Module>());
        holder = child.get();
      }
      auto mod_a = std::make_shared<torch::nn::Module>(), mod_b = std::make_shared<torch::nn::Module>();
      adapter->A = mod_a->register_parameter("weight", a.to(opts), /*requires_grad=*/true);
      adapter->B = mod_b->register_parameter("weight", torch::zeros({out, config.r * experts}, opts), true);
      holder->register_module("lora_A", mod_a);
      holder->register_module("lora_B", mod_b);
      adapter->scale = scale;
      adapter->infix = infix;
      info.adapted_parameters.push_back(t.module + (weight == &e.gate_up_proj ? ".gate_up_proj" : ".down_proj"));
      ++index;
    }
    e.lora_enabled = true;
  }
  for (const auto& n : to_copy) {
    // The registered parameters become the trained copies (their names stay
    // the model's own, as the adapter file stores them); the originals move
    // to a frozen child module for the disabled-adapter view.
    auto original = std::make_shared<torch::nn::Module>();
    for (auto& p : n.module->named_parameters(false)) {
      auto& kept = original->register_parameter(p.key(), p.value().detach().clone(), /*requires_grad=*/false);
      if (m.placed_dtype(p.value()) != p.value().scalar_type()) m.defer_cast(kept, m.placed_dtype(p.value()));
      p.value().requires_grad_(true);
    }
    n.module->register_module(kOriginal, original);
    info.copied.push_back(n.name);
  }
  info.trainable_parameters = count(m, true);
  info.total_parameters = count(m, false);
  log::info("{}: r {}, alpha {}, scale {:.4g}, adapters on {} layers ({}){}, {} module(s) trained in full{}; "
            "{} trainable of {} parameters ({:.3f}%)",
            config.use_dora ? "DoRA" : "LoRA", config.r, config.alpha, scale, info.adapted.size(), fmt::join(info.target_modules, ", "),
            info.adapted_parameters.empty()
                ? std::string()
                : fmt::format(" and {} expert weights ({}; one adapter per expert)", info.adapted_parameters.size(),
                              fmt::join(info.target_parameters, ", ")),
            info.copied.size(), info.copied.empty() ? "" : fmt::format(" ({})", fmt::join(info.copied, ", ")),
            info.trainable_parameters, info.total_parameters,
            100.0 * static_cast<double>(info.trainable_parameters) / static_cast<double>(info.total_parameters));
  return info;
}

AdaptersDisabled::AdaptersDisabled(LanguageModelImpl& m) {
  for (const auto& item : m.named_modules("", false)) {
    auto& module = *item.value();
    if (auto* l = dynamic_cast<LinearImpl*>(&module); l && l->lora_A) {
      Saved s;
      s.linear = l;
      s.enabled = l->lora_enabled;
      l->lora_enabled = false;
      saved_.push_back(std::move(s));
    }
    if (auto* e = dynamic_cast<ExpertsImpl*>(&module); e && (e->gate_up_lora.defined() || e->down_lora.defined())) {
      Saved s;
      s.experts = e;
      s.enabled = e->lora_enabled;
      e->lora_enabled = false;
      saved_.push_back(std::move(s));
    }
    auto children = module.named_children();
    if (!children.contains(kOriginal)) continue;
    auto& original = *children[kOriginal];
    auto [w, b] = weight_slots(module);
    if (!w) continue;
    Saved s;
    s.weight_slot = w;
    s.weight = *w;
    *w = original.named_parameters(false)["weight"];
    if (b && b->defined()) {
      s.bias_slot = b;
      s.bias = *b;
      *b = original.named_parameters(false)["bias"];
    }
    saved_.push_back(std::move(s));
  }
}

AdaptersDisabled::~AdaptersDisabled() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->linear) it->linear->lora_enabled = it->enabled;
    if (it->experts) it->experts->lora_enabled = it->enabled;
    if (it->weight_slot) *it->weight_slot = it->weight;
    if (it->bias_slot) *it->bias_slot = it->bias;
  }
}

void save_adapter(const fs::path& dir, LanguageModelImpl& m, const LoraInfo& info, const AdapterSaveOptions& o) {
  io::NamedTensors tensors;
  auto named = m.named_modules("", false);
  for (const auto& name : info.adapted) {
    auto* l = dynamic_cast<LinearImpl*>(named[name].get());
    if (!l || !l->lora_A) fail("save_adapter: `{}` has no adapter (merged already?)", name);
    tensors.emplace_back(kPrefix + name + ".lora_A.weight", l->lora_A->weight.detach());
    tensors.emplace_back(kPrefix + name + ".lora_B.weight", l->lora_B->weight.detach());
    if (l->lora_magnitude.defined())
      tensors.emplace_back(kPrefix + name + ".lora_magnitude_vector", l->lora_magnitude.detach());
  }
  for (const auto& name : info.adapted_parameters) {
    const auto [module, adapter] = expert_adapter(named, name);
    tensors.emplace_back(kPrefix + module + "." + adapter->infix + "lora_A.weight", adapter->A.detach());
    tensors.emplace_back(kPrefix + module + "." + adapter->infix + "lora_B.weight", adapter->B.detach());
  }
  for (const auto& name : info.copied)
    for (const auto& p : named[name]->named_parameters(false))
      tensors.emplace_back(kPrefix + name + "." + p.key(), p.value().detach());

  const auto& c = info.config;
  nlohmann::json j;  // keys sorted, as PEFT writes them
  j["alora_invocation_tokens"] = nullptr;
  j["alpha_pattern"] = nlohmann::json::object();
  j["arrow_config"] = nullptr;
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = o.base_model_name_or_path;
  j["bias"] = "none";
  j["corda_config"] = nullptr;
  j["ensure_weight_tying"] = false;
  j["eva_config"] = nullptr;
  j["exclude_modules"] = nullptr;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["kasa_config"] = nullptr;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = nlohmann::json::object();
  if (c.alpha == std::floor(c.alpha)) j["lora_alpha"] = static_cast<int64_t>(c.alpha);
  else j["lora_alpha"] = c.alpha;
  j["lora_bias"] = false;
  j["lora_dropout"] = c.dropout;
  j["lora_ga_config"] = nullptr;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  if (info.modules_to_save.empty()) j["modules_to_save"] = nullptr;
  else j["modules_to_save"] = info.modules_to_save;
  j["monteclora_config"] = nullptr;
  j["peft_type"] = "LORA";
  j["qalora_group_size"] = 16;
  j["r"] = c.r;
  j["rank_pattern"] = nlohmann::json::object();
  j["revision"] = o.revision ? nlohmann::json(*o.revision) : nlohmann::json(nullptr);
  j["target_modules"] = info.target_modules;
  j["target_parameters"] = info.target_parameters.empty() ? nlohmann::json(nullptr)
                                                          : nlohmann::json(info.target_parameters);
  j["task_type"] = m.head_kind() == HeadKind::SequenceClassification ? "SEQ_CLS" : "CAUSAL_LM";
  j["trainable_token_indices"] = nullptr;
  j["use_bdlora"] = nullptr;
  j["use_dora"] = c.use_dora;
  j["use_qalora"] = false;
  j["use_rslora"] = c.use_rslora;
  j["velora_config"] = nullptr;
  const std::string config_text = j.dump(2);

  const fs::path target = fs::absolute(dir).lexically_normal();
  const fs::path parent = target.parent_path();
  if (o.into_existing_dir) {
    // Weights first: a crash between the two renames leaves new weights with
    // the old config, which describes the same adapter shapes for a run that
    // kept its settings.
    fs::create_directories(target);
    io::save_safetensors(target / "adapter_model.safetensors", tensors, {{"format", "pt"}}, o.before_write);
    io::write_file_atomic(target / "adapter_config.json", config_text);
    if (o.tokenizer_dir) copy_tokenizer_files(*o.tokenizer_dir, target);
    io::fsync_directory(target);
    return;
  }
  fs::create_directories(parent);
  const fs::path tmp = parent / fmt::format(".{}.tmp-{}", target.filename().string(), getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    io::save_safetensors(tmp / "adapter_model.safetensors", tensors, {{"format", "pt"}}, o.before_write);
    io::write_file_atomic(tmp / "adapter_config.json", config_text);
    if (o.tokenizer_dir) copy_tokenizer_files(*o.tokenizer_dir, tmp);
    io::fsync_directory(tmp);
    io::swap_in_directory(tmp, target);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

std::string adapter_task_type(const fs::path& dir) {
  auto j = read_json(dir / "adapter_config.json");
  return j.contains("task_type") && j["task_type"].is_string() ? j["task_type"].get<std::string>() : "";
}

LoraConfig read_adapter_config(const fs::path& dir) {
  const fs::path file = dir / "adapter_config.json";
  auto j = read_json(file);
  const std::string f = file.string();
  auto str = [&](const char* key) -> std::string {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
  };
  auto truthy = [&](const char* key) {
    if (!j.contains(key) || j[key].is_null()) return false;
    const auto& v = j[key];
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_object() || v.is_array()) return !v.empty();
    return true;
  };
  if (str("peft_type") != "LORA")
    fail_input("{}: peft_type is `{}`; trlx reads LoRA adapters only (peft_type LORA)", f,
               j.contains("peft_type") ? j["peft_type"].dump() : "missing");
  for (const char* key : {"use_qalora", "lora_bias", "alpha_pattern", "rank_pattern", "layers_to_transform",
                          "layers_pattern", "layer_replication", "exclude_modules",
                          "trainable_token_indices", "alora_invocation_tokens", "use_bdlora", "fan_in_fan_out"})
    if (truthy(key))
      fail_input("{}: `{}` is set ({}); trlx supports LoRA, rsLoRA and DoRA adapters only (no patterns, layer "
                 "selection or excluded modules)",
                 f, key, j[key].dump());
  if (j.contains("bias") && str("bias") != "none")
    fail_input("{}: bias is `{}`; trlx supports bias \"none\" only", f, j["bias"].dump());
  LoraConfig c;
  try {
    c.r = j.at("r").get<int64_t>();
    c.alpha = j.contains("lora_alpha") ? j["lora_alpha"].get<double>() : 8.0;
    c.dropout = j.contains("lora_dropout") && !j["lora_dropout"].is_null() ? j["lora_dropout"].get<double>() : 0.0;
    c.use_rslora = j.contains("use_rslora") && j["use_rslora"].get<bool>();
    c.use_dora = truthy("use_dora");
    const auto& t = j.at("target_modules");
    if (t.is_string()) {
      const auto s = t.get<std::string>();
      std::string lower = s;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower != kAllLinear)
        fail_input("{}: target_modules is the pattern `{}`; trlx reads a list of module names or \"all-linear\"", f, s);
      c.target_modules = std::vector<std::string>{kAllLinear};
    } else if (t.is_array()) {
      c.target_modules = t.get<std::vector<std::string>>();
    } else {
      fail_input("{}: target_modules must be a list of module names, found {}", f, t.dump());
    }
    if (j.contains("modules_to_save") && !j["modules_to_save"].is_null())
      c.modules_to_save = j["modules_to_save"].get<std::vector<std::string>>();
    // Expert weights (PEFT writes the list in any order: it is a set).
    if (truthy("target_parameters")) c.target_parameters = j["target_parameters"].get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: {}", f, e.what());
  }
  return c;
}

LoraInfo load_adapter(const fs::path& dir, LanguageModelImpl& m, std::optional<torch::Dtype> adapter_dtype) {
  LoraConfig config = read_adapter_config(dir);
  const fs::path config_file = dir / "adapter_config.json";
  const std::string task = adapter_task_type(dir);
  const bool seq_cls = m.head_kind() == HeadKind::SequenceClassification;
  if (task == "SEQ_CLS" && !seq_cls)
    fail_input("{}: the adapter is for a sequence-classification (score) model, but the model has a language-model head",
               config_file.string());
  if (task == "CAUSAL_LM" && seq_cls)
    fail_input("{}: the adapter is for a causal language model, but the model has a score head", config_file.string());
  config.adapter_dtype = adapter_dtype;
  const fs::path weights = dir / "adapter_model.safetensors";
  if (!fs::exists(weights)) {
    if (fs::exists(dir / "adapter_model.bin"))
      fail_input("{}: trlx reads adapters in safetensors only; save it with safe_serialization=True",
                 (dir / "adapter_model.bin").string());
    fail_input("{}: missing (the adapter's weights)", weights.string());
  }
  auto file = io::SafetensorsFile::open(weights);
  LoraInfo info;
  try {
    info = apply_lora(m, config);
  } catch (const InputError& e) {
    fail_input("{}: {}", config_file.string(), e.what());
  }
  std::set<std::string> used;
  auto named = m.named_modules("", false);
  torch::NoGradGuard no_grad;
  auto fill = [&](torch::Tensor& param, const std::string& name) {
    if (!file.contains(name))
      fail_input("{}: tensor `{}` is missing (adapter_config.json targets this layer)", weights.string(), name);
    auto t = file.get(name);
    if (t.sizes() != param.sizes())
      fail_input("{}: tensor `{}` has shape {} but this model and r = {} need {}", weights.string(), name,
                 fmt::format("{}", fmt::join(t.sizes(), "x")), config.r,
                 fmt::format("{}", fmt::join(param.sizes(), "x")));
    const auto placed = m.placed_dtype(param);
    if (placed != param.scalar_type()) {
      // A base weight still viewing its checkpoint (cast at placement) takes
      // the adapter's copy, converted now.
      param.set_data(t.to(placed, /*non_blocking=*/false, /*copy=*/true).contiguous());
      m.mark_placed(param);
    } else {
      param.copy_(t);
    }
    used.insert(name);
  };
  for (const auto& name : info.adapted) {
    auto* l = dynamic_cast<LinearImpl*>(named[name].get());
    fill(l->lora_A->weight, kPrefix + name + ".lora_A.weight");
    fill(l->lora_B->weight, kPrefix + name + ".lora_B.weight");
    if (l->lora_magnitude.defined()) fill(l->lora_magnitude, kPrefix + name + ".lora_magnitude_vector");
  }
  for (const auto& name : info.adapted_parameters) {
    const auto [module, adapter] = expert_adapter(named, name);
    fill(adapter->A, kPrefix + module + "." + adapter->infix + "lora_A.weight");
    fill(adapter->B, kPrefix + module + "." + adapter->infix + "lora_B.weight");
  }
  for (const auto& name : info.copied)
    for (auto& p : named[name]->named_parameters(false)) fill(p.value(), kPrefix + name + "." + p.key());
  for (const auto& t : file.tensors()) {
    if (used.count(t.name)) continue;
    if (t.name.find(".lora_") != std::string::npos)
      fail_input("{}: tensor `{}` belongs to no layer that trlx adapts from adapter_config.json's target_modules; "
                 "the adapter does not fit this model",
                 weights.string(), t.name);
    log::warn("{}: tensor `{}` is not used", weights.string(), t.name);
  }
  log::info("loaded LoRA adapter {} ({} adapted layers)", dir.string(), info.adapted.size());
  return info;
}

void merge_lora(LanguageModelImpl& m) {
  torch::NoGradGuard no_grad;
  for (const auto& item : m.named_modules("", false)) {
    auto& module = *item.value();
    if (auto* l = dynamic_cast<LinearImpl*>(&module); l && l->lora_A) {
      if (l->quant4)
        fail_input("cannot fold adapters into a 4-bit base; merge the saved adapter into the unquantized base with "
                   "`trlx merge-lora`");
      auto delta = torch::matmul(l->lora_B->weight.to(torch::kFloat32), l->lora_A->weight.to(torch::kFloat32));
      auto merged = l->weight.to(torch::kFloat32) + delta.to(l->weight.device()) * l->lora_scale;
      if (l->lora_magnitude.defined()) {
        // DoRA: each row of W + scale * B A scaled to its magnitude.
        auto norm = torch::linalg_vector_norm(merged, 2, {1}, /*keepdim=*/true);
        merged = merged * (l->lora_magnitude.to(torch::kFloat32).to(merged.device()).view({-1, 1}) / norm);
        l->lora_magnitude = torch::Tensor();
        l->unregister_module(kMagnitude);
      }
      l->weight.copy_(merged.to(l->weight.scalar_type()));
      l->unregister_module("lora_A");
      l->unregister_module("lora_B");
      l->lora_A.reset();
      l->lora_B.reset();
      l->lora_scale = 0.0;
      l->lora_enabled = true;
    }
  }
  // Expert weights: each expert's delta folded in, the adapters dropped.
  for (const auto& item : m.named_modules("", false)) {
    auto* e = dynamic_cast<ExpertsImpl*>(item.value().get());
    if (!e) continue;
    for (auto [weight, adapter] : {std::pair{&e->gate_up_proj, &e->gate_up_lora}, {&e->down_proj, &e->down_lora}}) {
      if (!adapter->defined()) continue;
      auto delta = adapter->delta(e->num_experts()).to(torch::kFloat32);
      if (e->interleaved()) delta = delta.transpose(1, 2);  // stored [E, in, out]
      weight->copy_((weight->to(torch::kFloat32) + delta.to(weight->device())).to(weight->scalar_type()));
      *adapter = ExpertAdapter();
    }
    for (const char* name : {"lora_A", "lora_B", "base_layer"})
      if (e->named_children().contains(name)) e->unregister_module(name);
    e->lora_enabled = true;
  }
  // The copies already are the modules' registered weights; the originals go.
  for (const auto& item : m.named_modules("", false))
    if (item.value()->named_children().contains(kOriginal)) item.value()->unregister_module(kOriginal);
}

}  // namespace trlx::model

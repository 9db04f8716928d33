#pragma once
// LoRA adapters on the decoder's linear layers, read and written in PEFT
// format (adapter_config.json + adapter_model.safetensors), so that adapters
// trained by trlx load in PeftModel.from_pretrained and the other way round.
//
// One model holds the base weights and the adapters together. The base is
// frozen; only the adapters (and full copies of the modules_to_save) train.
// With adapters disabled (AdaptersDisabled) the same model computes the base
// model's outputs: that is the reference model, at no extra memory.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "model/decoder.hpp"

namespace trlx::model {

struct LoraConfig {
  int64_t r = 16;
  double alpha = 32;
  double dropout = 0.0;
  // Module names or name suffixes (a name matches a module whose full name is
  // it or ends with "." + it); {"all-linear"}: every linear layer of the
  // decoder (not the output head); nullopt: the model type's default
  // (q_proj, v_proj for llama, mistral, qwen2, qwen3 and the Gemmas; Phi-3
  // has none).
  std::optional<std::vector<std::string>> target_modules;
  // Stacked expert weights of a mixture of experts (PEFT's
  // target_parameters): a parameter name or a suffix after a "." (e.g.
  // mlp.experts.gate_up_proj); each gets an adapter per expert
  // (model/moe.hpp, ExpertAdapter). lora_dropout must be 0 and DoRA off.
  std::optional<std::vector<std::string>> target_parameters;
  // Modules trained in full: the model keeps the original for the
  // disabled-adapter view and trains a copy, which the adapter file carries.
  // A name matches every module whose full name ends with it. A
  // sequence-classification model always adds its head ("score").
  std::optional<std::vector<std::string>> modules_to_save;
  bool use_rslora = false;
  // DoRA (weight-decomposed LoRA): a trained magnitude per output row of each
  // adapted layer, started at the row norms of its weight.
  bool use_dora = false;
  // Adapter weights' dtype; nullopt: the base weights' dtype, float32 when
  // that is bf16 or fp16 (as PEFT). modules_to_save copies keep the base's.
  std::optional<torch::Dtype> adapter_dtype;
};

// What apply_lora did.
struct LoraInfo {
  LoraConfig config;
  // target_modules as adapter_config.json lists them (sorted names).
  std::vector<std::string> target_modules;
  // modules_to_save as adapter_config.json lists them.
  std::vector<std::string> modules_to_save;
  std::vector<std::string> adapted;  // full names of the linear layers with adapters
  std::vector<std::string> target_parameters;    // as adapter_config.json lists them
  std::vector<std::string> adapted_parameters;   // full names of the expert weights with adapters
  std::vector<std::string> copied;   // full names of the modules_to_save modules
  int64_t trainable_parameters = 0;
  int64_t total_parameters = 0;  // base + adapters + copies
  double scale() const;
};

// Attaches adapters (A kaiming-uniform with a = sqrt(5) from the default
// generator, B zero, so the model's output is unchanged) to the linear layers
// `config` targets, freezes every other parameter and makes the adapters and
// the modules_to_save copies trainable. InputError (exit 2) when r <= 0, when
// a target or a module to save matches nothing (the message lists the
// model's module names), or when the model already has adapters.
LoraInfo apply_lora(LanguageModelImpl& m, const LoraConfig& config);

// True when the model has adapters or modules_to_save copies attached.
bool has_lora(LanguageModelImpl& m);

// While alive, the model computes with its base weights only: adapters off,
// original modules instead of the modules_to_save copies. Nests; restores the
// previous state when destroyed. Nothing is copied or modified in place, so
// forwards with and without adapters may be mixed freely under autograd.
class AdaptersDisabled {
 public:
  explicit AdaptersDisabled(LanguageModelImpl& m);
  ~AdaptersDisabled();
  AdaptersDisabled(const AdaptersDisabled&) = delete;
  AdaptersDisabled& operator=(const AdaptersDisabled&) = delete;

 private:
  // A layer's adapter switch, or a module's weight/bias handles (swapped to
  // the originals of a modules_to_save copy), with the values to restore.
  struct Saved {
    LinearImpl* linear = nullptr;
    ExpertsImpl* experts = nullptr;
    bool enabled = true;
    torch::Tensor* weight_slot = nullptr;
    torch::Tensor* bias_slot = nullptr;
    torch::Tensor weight, bias;
  };
  std::vector<Saved> saved_;
};

struct AdapterSaveOptions {
  // adapter_config.json's base_model_name_or_path, and its revision (the
  // base's hub revision when it is a hub name; null when unset).
  std::string base_model_name_or_path;
  std::optional<std::string> revision;
  // Tokenizer files copied beside the adapter from here.
  std::optional<std::filesystem::path> tokenizer_dir;
  // Write the two adapter files into `dir` beside what it holds (a training
  // output_dir), each atomically, the weights first. Otherwise the whole
  // directory is built beside `dir` and swapped in.
  bool into_existing_dir = false;
  // Called before each tensor's bytes are read (see io::BeforeWrite).
  io::BeforeWrite before_write;
};

// Writes adapter_config.json and adapter_model.safetensors in PEFT format:
// tensors `base_model.model.<name>.lora_A.weight` / `.lora_B.weight` (with
// DoRA also `.lora_magnitude_vector`) and, for the modules_to_save,
// `base_model.model.<name>.weight` (the trained copy).
// A failure leaves a previous adapter in `dir` intact.
void save_adapter(const std::filesystem::path& dir, LanguageModelImpl& m, const LoraInfo& info,
                  const AdapterSaveOptions& options = {});

// The LoraConfig an adapter_config.json describes (InputError naming the
// file for settings trlx does not support: rank/alpha patterns, ...).
LoraConfig read_adapter_config(const std::filesystem::path& dir);
// The task_type of an adapter_config.json ("CAUSAL_LM", "SEQ_CLS", ...).
std::string adapter_task_type(const std::filesystem::path& dir);

// Applies the adapter in `dir` (PEFT format) to the model and loads its
// weights, converted to the adapter dtype (default: the base weights'). The
// adapters are trainable, as after apply_lora. Errors name the file and the
// tensor.
LoraInfo load_adapter(const std::filesystem::path& dir, LanguageModelImpl& m,
                      std::optional<torch::Dtype> adapter_dtype = std::nullopt);

// Folds every adapter into its base weight (W += B A * scale, computed in
// fp32; with DoRA each row of the sum is then scaled to its magnitude), makes the modules_to_save copies the modules' only weights and
// removes all LoRA state: the model is a plain model again. Parameters keep
// their requires_grad as set by apply_lora (base frozen).
void merge_lora(LanguageModelImpl& m);

}  // namespace trlx::model

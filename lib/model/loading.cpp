// Loading a Hugging Face model directory into a LanguageModel.
#include "model/loading.hpp"

#include "core/error.hpp"
#include "io/safetensors.hpp"

namespace trlx::model {

torch::Dtype parse_dtype(const std::string& name, const ModelConfig& config) {
  std::string n = name;
  if (n == "auto") n = config.torch_dtype.empty() ? "float32" : config.torch_dtype;
  if (n == "float32" || n == "fp32") return torch::kFloat32;
  if (n == "bfloat16" || n == "bf16") return torch::kBFloat16;
  if (n == "float16" || n == "fp16") return torch::kFloat16;
  fail_input("dtype `{}` is not one of float32, bfloat16, float16, auto", n);
}

LanguageModel load_language_model(const std::filesystem::path& dir, HeadKind head, const std::string& dtype,
                                  bool defer_casts) {
  const ModelConfig config = load_model_config(dir);
  auto ckpt = io::Checkpoint::open_dir(dir);
  LanguageModel m(config, head);
  const std::string source = ckpt.sharded() ? (dir / "model.safetensors.index.json").string()
                                            : (dir / "model.safetensors").string();
  load_parameters(
      *m,
      [&](const std::string& name) -> std::optional<torch::Tensor> {
        if (!ckpt.contains(name)) return std::nullopt;
        return ckpt.get(name);
      },
      ckpt.names(), source, parse_dtype(dtype, config), defer_casts);
  m->eval();
  return m;
}

}  // namespace trlx::model

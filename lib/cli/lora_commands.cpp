// `trlx merge-lora`: a base model and a LoRA adapter (PEFT format) in, one
// plain Hugging Face model out, loadable anywhere without PEFT.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/parse.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "model/loading.hpp"
#include "model/lora.hpp"
#include "model/saving.hpp"

namespace trlx::cli {

int run_merge_lora(std::vector<std::string> args) {
  namespace fs = std::filesystem;
  CLI::App app("Fold a LoRA adapter (PEFT format) into its base model and write a plain Hugging Face model",
               "trlx merge-lora");
  std::string base, adapter, out, dtype = "auto";
  app.add_option("--base", base, "Base model directory (Hugging Face format)")->required();
  app.add_option("--adapter", adapter, "Adapter directory (adapter_config.json + adapter_model.safetensors)")->required();
  app.add_option("--out", out, "Output directory for the merged model")->required();
  app.add_option("--dtype", dtype, "Dtype of the merged weights: float32, bfloat16, float16 or auto (the base's)")
      ->capture_default_str();
  if (auto rc = parse_args(app, args)) return *rc;
  if (fs::absolute(out).lexically_normal() == fs::absolute(base).lexically_normal() ||
      fs::absolute(out).lexically_normal() == fs::absolute(adapter).lexically_normal())
    fail_input("--out {} must differ from --base and --adapter (the merged model replaces the output directory)", out);

  // Read the adapter's config first: a bad adapter fails before the base loads.
  (void)model::read_adapter_config(adapter);
  const auto head = model::adapter_task_type(adapter) == "SEQ_CLS" ? model::HeadKind::SequenceClassification
                                                                    : model::HeadKind::CausalLM;
  auto m = model::load_language_model(base, head, dtype);
  // Adapters in fp32 whatever the base dtype: the merge sums in fp32.
  const auto info = model::load_adapter(adapter, *m, torch::kFloat32);
  model::merge_lora(*m);

  model::SaveModelOptions so;
  for (const auto& dir : {fs::path(base), fs::path(adapter)}) {
    if (fs::exists(dir / "tokenizer.json") || fs::exists(dir / "tokenizer_config.json")) {
      so.tokenizer_dir = dir;
      break;
    }
  }
  model::save_language_model(out, *m, so);
  std::cout << fmt::format("wrote {}: {} with {} adapted layers merged{}\n", out, base, info.adapted.size(),
                           info.copied.empty() ? "" : fmt::format(" and {} module(s) replaced", info.copied.size()));
  return 0;
}

}  // namespace trlx::cli

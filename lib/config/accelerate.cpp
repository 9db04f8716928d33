// Reading accelerate config files (bundled presets or the user's) into a DistributedConfig.
#include "config/accelerate.hpp"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"

namespace trlx::config {

std::string DistributedConfig::describe() const {
  std::string s;
  switch (strategy) {
    case Strategy::Single: s = "single process"; break;
    case Strategy::DDP: s = "DDP"; break;
    case Strategy::FSDP:
      s = fmt::format("FSDP{} (reshard_after_forward {})", fsdp_version, reshard_after_forward ? "true" : "false");
      break;
    case Strategy::Zero: s = fmt::format("ZeRO-{}", zero_stage); break;
  }
  if (offload_optimizer_device != "none") s += ", optimizer offload " + offload_optimizer_device;
  if (offload_param_device != "none") s += ", parameter offload " + offload_param_device;
  // No precision: the training config's bf16 decides it (the engine warns
  // when this file's mixed_precision disagrees).
  return s;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& [name, text] : bundled_presets()) out.push_back(name);
  return out;
}

namespace {

// Reads typed values from one accelerate file with file:line:col in errors.
class Reader {
 public:
  Reader(std::string source, DistributedConfig& out) : source_(std::move(source)), out_(out) {}

  std::string at(const YAML::Node& n) const {
    return fmt::format("{}:{}:{}", source_, n.Mark().line + 1, n.Mark().column + 1);
  }
  std::string str(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail_input("{}: `{}` expects a string", at(n), key);
    return n.Scalar();
  }
  bool boolean(const YAML::Node& n, const std::string& key) const {
    const std::string s = to_lower(n.IsScalar() ? n.Scalar() : "?");
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
    fail_input("{}: `{}` expects true or false, found `{}`", at(n), key, n.IsScalar() ? n.Scalar() : "a non-scalar");
  }
  int integer(const YAML::Node& n, const std::string& key, int lo, int hi) const {
    int v = 0;
    try {
      if (!n.IsScalar()) throw YAML::Exception(n.Mark(), "");
      v = n.as<int>();
    } catch (const YAML::Exception&) {
      fail_input("{}: `{}` expects an integer, found `{}`", at(n), key, n.IsScalar() ? n.Scalar() : "a non-scalar");
    }
    if (v < lo || v > hi) fail_input("{}: `{}` must be between {} and {}, found {}", at(n), key, lo, hi, v);
    return v;
  }
  std::string choice(const YAML::Node& n, const std::string& key, const std::vector<std::string>& choices) const {
    const std::string s = str(n, key);
    for (const auto& c : choices)
      if (to_lower(c) == to_lower(s)) return c;
    fail_input("{}: `{}` must be one of {}, found `{}`", at(n), key, join(choices, ", "), s);
  }
  void unused(const YAML::Node& key, const std::string& name, const std::string& why) {
    out_.warnings.push_back(fmt::format("{}: accelerate key `{}` {}", at(key), name, why));
  }
  // A key this reader does not know: refused, since trlx cannot tell whether
  // it would change the run (a misspelt one would silently do nothing).
  // `word`: what is matched against `known` (the key after its section).
  [[noreturn]] void unknown(const YAML::Node& key, const std::string& name, const std::vector<std::string>& known,
                            std::string word = "") const {
    if (word.empty()) word = name.substr(name.rfind('.') + 1);
    std::string msg = fmt::format("{}: `{}` is not an accelerate key trlx knows", at(key), name);
    const std::string near = closest_match(word, known);
    if (!near.empty()) msg += fmt::format(" (did you mean `{}`?)", near);
    fail_input("{}; remove it (keys trlx reads: {})", msg, join(known, ", "));
  }
  // Runs the reading of one key; a bad value is recorded and reading goes
  // on, so that one run of trlx reports every bad value of the file.
  template <class F>
  void key(F&& read) {
    try {
      read();
    } catch (const InputError& e) {
      errors.emplace_back(e.what());
    }
  }
  std::vector<std::string> errors;

 private:
  std::string source_;
  DistributedConfig& out_;
};

bool is_false_like(const YAML::Node& n) {
  if (!n.IsScalar()) return n.IsNull() || (n.IsSequence() && n.size() == 0);
  const std::string s = to_lower(n.Scalar());
  return s == "false" || s == "no" || s.empty() || s == "null";
}

const std::vector<std::string>& top_level_keys() {
  static const std::vector<std::string> k = {
      "distributed_type", "mixed_precision", "num_processes", "num_machines", "machine_rank", "main_process_ip",
      "main_process_port", "use_cpu", "deepspeed_config", "fsdp_config", "parallelism_config", "gpu_ids",
      "compute_environment", "main_training_function", "rdzv_backend", "same_network", "debug", "tpu_use_cluster",
      "tpu_use_sudo", "enable_cpu_affinity", "tpu_env", "downcast_bf16", "tpu_name", "tpu_zone", "commands",
      "command_file", "dynamo_config", "ipex_config"};
  return k;
}

const std::vector<std::string>& deepspeed_keys() {
  static const std::vector<std::string> k = {
      "zero_stage", "offload_optimizer_device", "offload_param_device", "zero3_init_flag", "zero3_save_16bit_model",
      "gradient_accumulation_steps", "gradient_clipping", "deepspeed_multinode_launcher", "deepspeed_hostfile",
      "deepspeed_inclusion_filter", "deepspeed_exclusion_filter", "offload_optimizer_nvme_path",
      "offload_param_nvme_path", "deepspeed_moe_layer_cls_names", "deepspeed_config_file"};
  return k;
}

const std::vector<std::string>& fsdp_keys() {
  static const std::vector<std::string> k = {
      "fsdp_version", "fsdp_reshard_after_forward", "fsdp_sharding_strategy", "fsdp_offload_params",
      "fsdp_activation_checkpointing", "fsdp_state_dict_type", "fsdp_auto_wrap_policy",
      "fsdp_transformer_layer_cls_to_wrap", "fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states",
      "fsdp_use_orig_params", "fsdp_forward_prefetch", "fsdp_backward_prefetch", "fsdp_min_num_params"};
  return k;
}

const std::vector<std::string>& parallelism_keys() {
  static const std::vector<std::string> k = {
      "parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size", "parallelism_config_tp_size",
      "parallelism_config_cp_size", "parallelism_config_cp_backend", "parallelism_config_cp_comm_strategy",
      "parallelism_config_sp_size", "parallelism_config_sp_backend", "parallelism_config_sp_seq_length",
      "parallelism_config_sp_seq_length_is_variable", "parallelism_config_sp_attn_implementation",
      "parallelism_config_sp_allow_recurrent_layers", "parallelism_config_sp_disable_in_eval"};
  return k;
}

// accelerate's parallelism_config mapping (`accelerate config` writes the
// keys with a parallelism_config_ prefix; the bare field names of its
// ParallelismConfig are read too), with its checks.
void read_parallelism(const YAML::Node& map, Reader& r, ParallelismConfig& out) {
  out.present = true;
  std::optional<int> sp_seq_length;
  bool sp_fixed = false;
  // `accelerate config` writes unset fields as null (or None).
  auto is_null = [](const YAML::Node& v) { return v.IsNull() || (v.IsScalar() && v.Scalar() == "None"); };
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::string key = it->first.Scalar();
    const YAML::Node v = it->second;  // a copy: `it->` returns a temporary proxy
    const std::string name = "parallelism_config." + key;
    if (starts_with(key, "parallelism_config_")) key = key.substr(19);
    r.key([&] {
      if (key == "dp_replicate_size") {
        out.dp_replicate_size = r.integer(v, name, 1, 1 << 20);
      } else if (key == "dp_shard_size") {
        out.dp_shard_size = r.integer(v, name, 1, 1 << 20);
      } else if (key == "tp_size") {
        out.tp_size = r.integer(v, name, 1, 1 << 20);
      } else if (key == "cp_size") {
        out.cp_size = r.integer(v, name, 1, 1 << 20);
      } else if (key == "sp_size") {
        out.sp_size = r.integer(v, name, 1, 1 << 20);
      } else if (key == "cp_backend") {
        out.cp_backend = r.choice(v, name, {"torch"});
      } else if (key == "cp_comm_strategy") {
        out.cp_comm_strategy = r.choice(v, name, {"allgather", "alltoall"});
      } else if (key == "sp_backend") {
        out.sp_backend = r.choice(v, name, {"deepspeed"});
      } else if (key == "sp_seq_length") {
        // A fixed length lets DeepSpeed size its buffers once; trlx splits
        // every length (padding the last rank's share), the same numbers.
        if (!is_null(v)) sp_seq_length = r.integer(v, name, 1, 1 << 30);
      } else if (key == "sp_seq_length_is_variable") {
        if (!is_null(v)) sp_fixed = !r.boolean(v, name);
      } else if (key == "sp_attn_implementation") {
        // The kernel DeepSpeed's attention calls; trlx picks its kernel per
        // case (`trlx env` lists them), the same attention.
        if (!is_null(v)) {
          const std::string impl = r.str(v, name);
          if (impl != "sdpa" && impl != "flash_attention_2" && impl != "flash_attention_3" &&
              impl.find('/') == std::string::npos)
            fail_input("{}: `{}` must be sdpa, flash_attention_2, flash_attention_3 or a hub kernel "
                       "(owner/name), found `{}`",
                       r.at(v), name, impl);
        }
      } else if (key == "sp_allow_recurrent_layers" || key == "sp_disable_in_eval") {
        // Recurrent (linear-attention) layers: trlx builds no model with
        // them. Evaluation: split or whole, a row's loss is the same.
        if (!is_null(v)) r.boolean(v, name);
      } else {
        r.unknown(it->first, name, parallelism_keys(), "parallelism_config_" + key);
      }
    });
  }
  if (sp_fixed && !sp_seq_length)
    fail_input("{}: parallelism_config_sp_seq_length_is_variable is false, so parallelism_config_sp_seq_length "
               "must be given (accelerate refuses this too)",
               out.source);
  // accelerate's own checks on the sizes alone; those that need the world
  // size run when the mesh is built (dist::make_mesh).
  if (out.cp_size > 1 && out.sp_size > 1)
    fail_input("{}: context parallelism (cp_size {}) and sequence parallelism (sp_size {}) are mutually exclusive; "
               "set one of them to 1",
               out.source, out.cp_size, out.sp_size);
  if (out.cp_size > 1 && out.dp_replicate_size.value_or(1) > 1 && out.dp_shard_size.value_or(1) == 1)
    fail_input("{}: context parallelism (cp_size {}) cannot be used with pure data parallelism (dp_replicate_size "
               "{} and dp_shard_size 1); set dp_shard_size > 1",
               out.source, out.cp_size, *out.dp_replicate_size);
  if (out.tp_size > 1)
    fail_input("{}: tensor parallelism (tp_size {}) is not built in trlx; shard the model with FSDP or ZeRO-3 "
               "(dp_shard_size) and split long sequences with sp_size instead",
               out.source, out.tp_size);
}

void read_deepspeed(const YAML::Node& map, Reader& r, DistributedConfig& out, bool& have_stage) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node v = it->second;  // a copy: `it->` returns a temporary proxy
    const std::string name = "deepspeed_config." + key;
    r.key([&] {
    if (key == "zero_stage") {
      out.zero_stage = r.integer(v, name, 0, 3);
      have_stage = true;
    } else if (key == "offload_optimizer_device") {
      out.offload_optimizer_device = v.IsNull() ? "none" : r.choice(v, name, {"none", "cpu", "nvme"});
    } else if (key == "offload_param_device") {
      out.offload_param_device = v.IsNull() ? "none" : r.choice(v, name, {"none", "cpu", "nvme"});
    } else if (key == "zero3_init_flag") {
      out.zero3_init_flag = r.boolean(v, name);
    } else if (key == "zero3_save_16bit_model") {
      out.zero3_save_16bit_model = r.boolean(v, name);
    } else if (key == "deepspeed_multinode_launcher" || key == "deepspeed_hostfile" ||
               key == "deepspeed_inclusion_filter" || key == "deepspeed_exclusion_filter" ||
               key == "offload_optimizer_nvme_path" || key == "offload_param_nvme_path" ||
               key == "deepspeed_moe_layer_cls_names") {
      // How accelerate starts DeepSpeed on several nodes (trlx is started by
      // its own launcher: torchrun, mpirun, srun), NVMe paths (NVMe offload
      // is refused below), and the layers ZeRO-3 keeps whole (trlx gathers
      // each decoder layer, experts included): nothing that changes the run.
    } else if (key == "deepspeed_config_file") {
      fail_input("{}: `{}`: DeepSpeed JSON config files are not read by trlx; put zero_stage and the "
                 "offload devices in deepspeed_config instead",
                 r.at(it->first), name);
    } else if (key == "gradient_accumulation_steps") {
      // The training config's must agree (the engine checks), as transformers
      // refuses a DeepSpeed value that differs from TrainingArguments'.
      if (!(v.IsScalar() && v.Scalar() == "auto"))
        out.deepspeed_gradient_accumulation_steps = {r.integer(v, name, 1, 1 << 20), r.at(it->first)};
    } else if (key == "gradient_clipping") {
      if (!(v.IsScalar() && v.Scalar() == "auto")) {
        double d = 0;
        try {
          d = v.as<double>();
        } catch (const YAML::Exception&) {
          fail_input("{}: `{}` expects a number, found `{}`", r.at(v), name, v.IsScalar() ? v.Scalar() : "a non-scalar");
        }
        out.deepspeed_gradient_clipping = {d, r.at(it->first)};
      }
    } else {
      r.unknown(it->first, name, deepspeed_keys());
    }
    });
  }
}

void read_fsdp(const YAML::Node& map, Reader& r, DistributedConfig& out) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node v = it->second;  // a copy: `it->` returns a temporary proxy
    const std::string name = "fsdp_config." + key;
    r.key([&] {
    if (key == "fsdp_version") {
      out.fsdp_version = r.integer(v, name, 1, 2);
    } else if (key == "fsdp_reshard_after_forward" || key == "fsdp_sharding_strategy") {
      // FSDP2 takes a boolean; FSDP1 files name a sharding strategy.
      const std::string s = v.IsScalar() ? to_lower(v.Scalar()) : "";
      if (s == "true" || s == "false") {
        out.reshard_after_forward = s == "true";
      } else if (s == "full_shard" || s == "1" || s == "hybrid_shard" || s == "4") {
        out.reshard_after_forward = true;
      } else if (s == "shard_grad_op" || s == "2" || s == "_hybrid_shard_zero2" || s == "5") {
        out.reshard_after_forward = false;
      } else if (s == "no_shard" || s == "3") {
        out.strategy = Strategy::DDP;
      } else {
        fail_input("{}: `{}` expects true/false or FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD; found `{}`",
                   r.at(v), name, v.IsScalar() ? v.Scalar() : "?");
      }
      // Hybrid: sharded within each node, replicated across nodes.
      if (s.find("hybrid") != std::string::npos || s == "4" || s == "5") {
        out.parallelism.hybrid_per_node = true;
        if (out.parallelism.source.empty()) out.parallelism.source = r.at(it->first);
      }
    } else if (key == "fsdp_offload_params") {
      if (r.boolean(v, name)) out.offload_param_device = "cpu";
    } else if (key == "fsdp_activation_checkpointing") {
      out.fsdp_activation_checkpointing = r.boolean(v, name);
    } else if (key == "fsdp_state_dict_type") {
      out.fsdp_state_dict_type = r.choice(v, name, {"FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"});
    } else if (key == "fsdp_auto_wrap_policy") {
      const std::string p = r.str(v, name);
      if (p != "TRANSFORMER_BASED_WRAP")
        r.unused(it->first, name, fmt::format("`{}` is not used: trlx always wraps each decoder layer", p));
    } else if (key == "fsdp_transformer_layer_cls_to_wrap" || key == "fsdp_cpu_ram_efficient_loading" ||
               key == "fsdp_sync_module_states" || key == "fsdp_use_orig_params" ||
               key == "fsdp_forward_prefetch" || key == "fsdp_backward_prefetch" || key == "fsdp_min_num_params") {
      // What these ask for is how trlx always works: it wraps its own decoder
      // layers, loads weights once and broadcasts them, and prefetches the next unit.
    } else {
      r.unknown(it->first, name, fsdp_keys());
    }
    });
  }
}

}  // namespace

bool looks_like_accelerate_config(const std::string& yaml_text) {
  try {
    YAML::Node root = YAML::Load(yaml_text);
    return root.IsMap() && (root["distributed_type"] || root["compute_environment"]);
  } catch (const YAML::Exception&) {
    return false;
  }
}

DistributedConfig parse_accelerate_config(const std::string& yaml_text, const std::string& source) {
  DistributedConfig out;
  out.source = source;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    fail_input("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (!root.IsMap()) fail_input("{}: an accelerate config must be a mapping of `key: value` lines", source);
  Reader r(source, out);
  bool have_stage = false;
  YAML::Node deepspeed, fsdp, dist_key, parallelism, parallelism_key;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node v = it->second;  // a copy: `it->` returns a temporary proxy
    r.key([&] {
    if (key == "distributed_type") {
      dist_key = it->first;
      const std::string t = r.str(v, key);
      if (t == "NO") out.strategy = Strategy::Single;
      else if (t == "MULTI_GPU" || t == "MULTI_CPU") out.strategy = Strategy::DDP;
      else if (t == "FSDP") out.strategy = Strategy::FSDP;
      else if (t == "DEEPSPEED") out.strategy = Strategy::Zero;
      else
        fail_input("{}: distributed_type `{}` is not supported by trlx; use NO, MULTI_GPU, MULTI_CPU, FSDP or DEEPSPEED",
                   r.at(v), t);
    } else if (key == "mixed_precision") {
      out.mixed_precision = v.IsNull() ? "no" : r.choice(v, key, {"no", "fp16", "bf16", "fp8"});
      if (out.mixed_precision == "fp8")
        fail_input("{}: mixed_precision fp8 is not built in trlx; use bf16 or fp16", r.at(v));
    } else if (key == "num_processes") {
      out.num_processes = r.integer(v, key, 1, 1 << 20);
    } else if (key == "num_machines") {
      out.num_machines = r.integer(v, key, 1, 1 << 16);
    } else if (key == "machine_rank") {
      out.machine_rank = r.integer(v, key, 0, 1 << 16);
    } else if (key == "main_process_ip") {
      out.main_process_ip = v.IsNull() ? "" : r.str(v, key);
    } else if (key == "main_process_port") {
      if (!v.IsNull()) out.main_process_port = r.integer(v, key, 1, 65535);
    } else if (key == "use_cpu") {
      out.use_cpu = r.boolean(v, key);
    } else if (key == "deepspeed_config") {
      deepspeed = v;
    } else if (key == "fsdp_config") {
      fsdp = v;
    } else if (key == "parallelism_config") {
      parallelism = v;
      parallelism_key = it->first;
    } else if (key == "gpu_ids") {
      if (!(v.IsScalar() && to_lower(v.Scalar()) == "all"))
        r.unused(it->first, key, "is not used: trlx takes the GPU of each process's local rank (set CUDA_VISIBLE_DEVICES to choose GPUs)");
    } else if (key == "compute_environment") {
      if (r.str(v, key) != "LOCAL_MACHINE") r.unused(it->first, key, "is not used: trlx runs where it is launched");
    } else if (key == "main_training_function" || key == "rdzv_backend" || key == "same_network") {
      // Launch details accelerate needs and trlx's launchers already cover.
    } else if (key == "debug" || key == "tpu_use_cluster" || key == "tpu_use_sudo" || key == "enable_cpu_affinity" ||
               key == "tpu_env" || key == "downcast_bf16" || key == "tpu_name" || key == "tpu_zone" ||
               key == "commands" || key == "command_file" || key == "dynamo_config" || key == "ipex_config") {
      // Off by default; a file that switches one on asks for something trlx does not do.
      if (!is_false_like(v)) r.unused(it->first, key, "is not used by trlx and is ignored");
    } else {
      r.unknown(it->first, key, top_level_keys());
    }
    });
  }
  if (deepspeed && !deepspeed.IsNull()) {
    if (!deepspeed.IsMap()) fail_input("{}: deepspeed_config must be a mapping", r.at(deepspeed));
    if (out.strategy != Strategy::Zero)
      r.unused(deepspeed, "deepspeed_config", "is ignored because distributed_type is not DEEPSPEED");
    else read_deepspeed(deepspeed, r, out, have_stage);
  }
  if (fsdp && !fsdp.IsNull()) {
    if (!fsdp.IsMap()) fail_input("{}: fsdp_config must be a mapping", r.at(fsdp));
    if (out.strategy != Strategy::FSDP) r.unused(fsdp, "fsdp_config", "is ignored because distributed_type is not FSDP");
    else read_fsdp(fsdp, r, out);
  }
  if (parallelism && !parallelism.IsNull()) {
    if (!parallelism.IsMap()) fail_input("{}: parallelism_config must be a mapping", r.at(parallelism));
    out.parallelism.source = r.at(parallelism_key);
    r.key([&] { read_parallelism(parallelism, r, out.parallelism); });
  }
  if (r.errors.size() == 1) fail_input("{}", r.errors.front());
  if (!r.errors.empty()) {
    std::string all;
    for (const auto& e : r.errors) all += "\n  - " + e;
    fail_input("{}: {} bad values:{}", source, r.errors.size(), all);
  }
  if (out.strategy == Strategy::Zero) {
    if (!have_stage)
      fail_input("{}: distributed_type DEEPSPEED needs deepspeed_config.zero_stage (1, 2 or 3)",
                 dist_key ? r.at(dist_key) : source);
    if (out.zero_stage == 0) out.strategy = Strategy::DDP;  // stage 0 is plain data parallel
    if (out.offload_param_device != "none" && out.zero_stage != 3)
      fail_input("{}: offload_param_device needs zero_stage 3 (only stage 3 shards parameters)", source);
  }
  if (out.offload_optimizer_device == "nvme" || out.offload_param_device == "nvme")
    fail_input("{}: NVMe offload is not supported by trlx; use cpu or none", source);
  for (const auto& w : out.warnings) log::warn("{}", w);
  return out;
}

void check_deepspeed_values(const DistributedConfig& dist, int gradient_accumulation_steps, double max_grad_norm) {
  if (const auto& ga = dist.deepspeed_gradient_accumulation_steps; ga && ga->first != gradient_accumulation_steps)
    fail_input("{}: deepspeed_config.gradient_accumulation_steps is {} but the training config's "
               "gradient_accumulation_steps is {}; make them agree (or write auto in the accelerate file)",
               ga->second, ga->first, gradient_accumulation_steps);
  if (const auto& clip = dist.deepspeed_gradient_clipping; clip && clip->first != max_grad_norm)
    fail_input("{}: deepspeed_config.gradient_clipping is {} but the training config's max_grad_norm is {}; make "
               "them agree (or write auto in the accelerate file)",
               clip->second, clip->first, max_grad_norm);
}

DistributedConfig read_accelerate_config(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(name_or_path, ec)) {
    std::ifstream in(name_or_path, std::ios::binary);
    if (!in) fail_input("cannot read accelerate config {}", name_or_path);
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_accelerate_config(ss.str(), name_or_path);
  }
  std::string name = name_or_path;
  if (ends_with(name, ".yaml")) name = name.substr(0, name.size() - 5);
  // Names users know from other tools.
  if (name == "fsdp2") name = "fsdp";
  if (name == "ddp") name = "multi_gpu";
  if (starts_with(name, "deepspeed_zero")) name = "zero" + name.substr(14);
  for (const auto& [preset, text] : bundled_presets())
    if (preset == name) return parse_accelerate_config(text, "preset " + preset);
  if (name_or_path.find('/') != std::string::npos || ends_with(name_or_path, ".yaml"))
    fail_input("accelerate config file {} does not exist", name_or_path);
  std::string msg = fmt::format("`{}` is neither a bundled accelerate preset ({}) nor a file", name_or_path,
                                join(preset_names(), ", "));
  const std::string near = closest_match(name, preset_names());
  if (!near.empty()) msg += fmt::format(" (did you mean `{}`?)", near);
  fail_input("{}", msg);
}

}  // namespace trlx::config

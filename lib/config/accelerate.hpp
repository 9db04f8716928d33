#pragma once
// Reads accelerate config files (the bundled presets or users' own, unchanged)
// into one description of how the run is distributed.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trlx::config {

enum class Strategy { Single, DDP, FSDP, Zero };

// accelerate's parallelism_config: how the processes form a device mesh,
// in accelerate's order (dp_replicate, dp_shard, cp, sp, tp; the last
// dimension's ranks are neighbours). Unset sizes are 1.
struct ParallelismConfig {
  bool present = false;            // the file has a parallelism_config
  std::optional<int> dp_replicate_size, dp_shard_size;  // unset: resolved from the world size
  int tp_size = 1, cp_size = 1, sp_size = 1;
  std::string cp_backend = "torch";           // the only one accelerate names
  std::string cp_comm_strategy = "allgather"; // allgather | alltoall
  std::string sp_backend = "deepspeed";       // Ulysses
  // FSDP's HYBRID_SHARD: shard within each node, replicate across nodes
  // (dp_shard = the processes per node), unless the sizes are given.
  bool hybrid_per_node = false;
  std::string source;  // "file:line" of the parallelism_config key, for errors
};

struct DistributedConfig {
  Strategy strategy = Strategy::Single;
  int zero_stage = 0;                         // 1..3 under Zero
  std::string offload_optimizer_device = "none";  // none | cpu | nvme
  std::string offload_param_device = "none";      // none | cpu | nvme
  bool reshard_after_forward = true;          // FSDP: free gathered weights after a unit's forward
  int fsdp_version = 2;
  bool fsdp_activation_checkpointing = false;
  std::string fsdp_state_dict_type = "FULL_STATE_DICT";
  bool zero3_init_flag = false;
  bool zero3_save_16bit_model = false;
  std::string mixed_precision = "no";         // no | fp16 | bf16
  std::optional<int> num_processes;
  int num_machines = 1;
  int machine_rank = 0;
  std::string main_process_ip;
  std::optional<int> main_process_port;
  bool use_cpu = false;
  std::string source;                         // "preset zero3" or the file path
  std::vector<std::string> warnings;          // one per key trlx does not use
  ParallelismConfig parallelism;
  // deepspeed_config's gradient_accumulation_steps and gradient_clipping
  // (unless "auto"), with where they were set: the training config's values
  // must agree with them.
  std::optional<std::pair<int, std::string>> deepspeed_gradient_accumulation_steps;
  std::optional<std::pair<double, std::string>> deepspeed_gradient_clipping;

  bool shards_parameters() const { return strategy == Strategy::FSDP || (strategy == Strategy::Zero && zero_stage == 3); }
  std::string describe() const;               // "ZeRO-3, optimizer offload cpu"
};

// The presets compiled into the binary: (name, YAML text).
const std::vector<std::pair<std::string, std::string>>& bundled_presets();
std::vector<std::string> preset_names();

// `name_or_path`: a bundled preset name (zero3, fsdp, ...) or a file path.
// Throws InputError naming the file, line and key on bad input. Keys trlx does
// not use are returned as warnings (and logged), one each.
DistributedConfig read_accelerate_config(const std::string& name_or_path);
DistributedConfig parse_accelerate_config(const std::string& yaml_text, const std::string& source);

// deepspeed_config's gradient_accumulation_steps and gradient_clipping, where
// the file sets them, agree with the training config's; InputError naming
// both otherwise (transformers refuses a DeepSpeed value that differs from
// TrainingArguments').
void check_deepspeed_values(const DistributedConfig& dist, int gradient_accumulation_steps, double max_grad_norm);

// True when a YAML file looks like an accelerate config rather than a
// training config.
bool looks_like_accelerate_config(const std::string& yaml_text);

}  // namespace trlx::config

#pragma once
// Reads accelerate config files (the bundled presets or users' own, unchanged)
// into one description of how the run is distributed.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trlx::config {

enum class Strategy { Single, DDP, FSDP, Zero };

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

// True when a YAML file looks like an accelerate config rather than a
// training config.
bool looks_like_accelerate_config(const std::string& yaml_text);

}  // namespace trlx::config

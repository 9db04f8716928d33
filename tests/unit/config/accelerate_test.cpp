// Tests: accelerate config files (presets and users' own) read into the strategies they ask for.
#include <catch2/catch.hpp>

#include "config/accelerate.hpp"
#include "core/error.hpp"
#include "support.hpp"

using namespace trlx;
using namespace trlx::config;
using Catch::Matchers::Contains;

namespace {
}  // namespace

TEST_CASE("bundled presets read into the right strategies without warnings", "[accelerate]") {
  auto single = read_accelerate_config("single_gpu");
  CHECK(single.strategy == Strategy::Single);
  CHECK(single.num_processes == 1);
  auto ddp = read_accelerate_config("multi_gpu");
  CHECK(ddp.strategy == Strategy::DDP);
  CHECK(ddp.mixed_precision == "bf16");
  auto fsdp = read_accelerate_config("fsdp");
  CHECK(fsdp.strategy == Strategy::FSDP);
  CHECK(fsdp.fsdp_version == 2);
  CHECK(fsdp.reshard_after_forward);
  CHECK(fsdp.shards_parameters());
  for (int stage = 1; stage <= 3; ++stage) {
    auto z = read_accelerate_config("zero" + std::to_string(stage));
    CHECK(z.strategy == Strategy::Zero);
    CHECK(z.zero_stage == stage);
    CHECK(z.shards_parameters() == (stage == 3));
    CHECK(z.warnings.empty());
  }
  CHECK(read_accelerate_config("zero3").zero3_save_16bit_model);
  // Hybrid sharding: one replica per node.
  auto hybrid = read_accelerate_config("fsdp_hybrid");
  CHECK(hybrid.strategy == Strategy::FSDP);
  CHECK(hybrid.parallelism.hybrid_per_node);
  for (const auto& name : preset_names()) CHECK(read_accelerate_config(name).warnings.empty());
  // Names from other tools.
  CHECK(read_accelerate_config("deepspeed_zero2").zero_stage == 2);
  CHECK(read_accelerate_config("fsdp2").strategy == Strategy::FSDP);
  CHECK(read_accelerate_config("zero1.yaml").zero_stage == 1);
}

TEST_CASE("a user's accelerate file is read unchanged and unused keys warn once each", "[accelerate]") {
  const auto path = (test::data_dir() / "config" / "user_accelerate_zero3.yaml").string();
  auto d = read_accelerate_config(path);
  CHECK(d.strategy == Strategy::Zero);
  CHECK(d.zero_stage == 3);
  CHECK(d.offload_optimizer_device == "cpu");
  CHECK(d.num_processes == 4);
  CHECK(d.source == path);
  // DeepSpeed's accumulation and clipping are kept for the engine to check
  // against the training config, where they were set.
  REQUIRE(d.deepspeed_gradient_accumulation_steps);
  CHECK(d.deepspeed_gradient_accumulation_steps->first == 4);
  CHECK_THAT(d.deepspeed_gradient_accumulation_steps->second, Contains(path + ":8:3"));
  REQUIRE(d.deepspeed_gradient_clipping);
  CHECK(d.deepspeed_gradient_clipping->first == 1.0);
  // What changes nothing trlx computes warns once each.
  REQUIRE(d.warnings.size() == 2);
  std::string all;
  for (const auto& w : d.warnings) all += w + "\n";
  CHECK_THAT(all, Contains("`dynamo_config`"));
  CHECK_THAT(all, Contains("`gpu_ids`"));
  CHECK_THAT(all, Contains(path + ":"));
}

TEST_CASE("keys trlx does not know are refused, with the nearest known one", "[accelerate]") {
  auto msg = test::input_error_of([] { parse_accelerate_config("distributed_type: MULTI_GPU\nnum_proceses: 2\n", "a.yaml"); });
  CHECK_THAT(msg, Contains("a.yaml:2:1: `num_proceses` is not an accelerate key trlx knows"));
  CHECK_THAT(msg, Contains("did you mean `num_processes`"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  zero_stage3_prefetch: 1\n", "a.yaml");
  });
  CHECK_THAT(msg, Contains("`deepspeed_config.zero_stage3_prefetch` is not an accelerate key trlx knows"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: FSDP\nfsdp_config:\n  fsdp_versoin: 2\n", "a.yaml");
  });
  CHECK_THAT(msg, Contains("did you mean `fsdp_version`"));
  // Keys of the launcher and NVMe paths change nothing trlx runs.
  auto d = parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
                                   "  deepspeed_hostfile: /etc/hosts\n  deepspeed_moe_layer_cls_names: MixtralSparseMoeBlock\n",
                                   "a.yaml");
  CHECK(d.warnings.empty());
}

TEST_CASE("parallelism_config is read with accelerate's names and checks", "[accelerate]") {
  auto d = parse_accelerate_config("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\nparallelism_config:\n"
                                   "  parallelism_config_dp_replicate_size: 2\n  parallelism_config_dp_shard_size: 4\n"
                                   "  parallelism_config_sp_size: 2\n  parallelism_config_sp_backend: deepspeed\n",
                                   "p.yaml");
  CHECK(d.parallelism.present);
  CHECK(d.parallelism.dp_replicate_size == 2);
  CHECK(d.parallelism.dp_shard_size == 4);
  CHECK(d.parallelism.sp_size == 2);
  CHECK(d.parallelism.cp_size == 1);
  CHECK(d.parallelism.source == "p.yaml:4:1");
  // ParallelismConfig's own field names too.
  d = parse_accelerate_config("distributed_type: FSDP\nparallelism_config:\n  cp_size: 2\n", "p.yaml");
  CHECK(d.parallelism.cp_size == 2);
  CHECK_FALSE(d.parallelism.dp_shard_size.has_value());
  // HYBRID_SHARD replicates across nodes.
  d = parse_accelerate_config("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n", "h.yaml");
  CHECK(d.parallelism.hybrid_per_node);
  CHECK(d.reshard_after_forward);
  CHECK(d.warnings.empty());
  auto msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: FSDP\nparallelism_config:\n  tp_size: 2\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("tensor parallelism (tp_size 2) is not built"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: FSDP\nparallelism_config:\n  cp_size: 2\n  sp_size: 2\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("mutually exclusive"));
  msg = test::input_error_of([] {
    parse_accelerate_config(
        "distributed_type: FSDP\nparallelism_config:\n  cp_size: 2\n  dp_replicate_size: 2\n  dp_shard_size: 1\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("cannot be used with pure data parallelism"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: FSDP\nparallelism_config:\n  sp_backend: megatron\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("must be one of deepspeed"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: FSDP\nparallelism_config:\n  sp_sise: 2\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("did you mean `parallelism_config_sp_size`"));
}

TEST_CASE("parallelism_config's sequence-parallel details are checked as accelerate checks them",
          "[accelerate]") {
  // What `accelerate config` writes, unset fields as null, and accelerate
  // 1.16's two newer keys.
  auto d = parse_accelerate_config(
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nparallelism_config:\n  parallelism_config_sp_size: 2\n"
      "  parallelism_config_sp_seq_length: null\n  parallelism_config_sp_seq_length_is_variable: true\n"
      "  parallelism_config_sp_attn_implementation: flash_attention_2\n"
      "  parallelism_config_sp_allow_recurrent_layers: false\n  parallelism_config_sp_disable_in_eval: true\n",
      "p.yaml");
  CHECK(d.parallelism.sp_size == 2);
  d = parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nparallelism_config:\n  sp_size: 2\n  sp_seq_length: 4096\n"
                              "  sp_seq_length_is_variable: false\n  sp_attn_implementation: kernels-community/flash-attn2\n",
                              "p.yaml");
  CHECK(d.parallelism.sp_size == 2);
  auto msg = test::input_error_of([] {
    parse_accelerate_config(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nparallelism_config:\n  sp_size: 2\n  sp_seq_length_is_variable: false\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("sp_seq_length must be given"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nparallelism_config:\n  sp_attn_implementation: eager\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("must be sdpa, flash_attention_2, flash_attention_3 or a hub kernel"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nparallelism_config:\n  sp_seq_length: long\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("expects an integer"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nparallelism_config:\n  sp_disable_in_eval: maybe\n", "p.yaml");
  });
  CHECK_THAT(msg, Contains("expects true or false"));
}

TEST_CASE("FSDP1 sharding strategies map onto reshard_after_forward", "[accelerate]") {
  auto d = parse_accelerate_config("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_version: 1\n", "f.yaml");
  CHECK(d.strategy == Strategy::FSDP);
  CHECK_FALSE(d.reshard_after_forward);
  CHECK(d.fsdp_version == 1);
  d = parse_accelerate_config("distributed_type: FSDP\nfsdp_config:\n  fsdp_reshard_after_forward: false\n  fsdp_offload_params: true\n", "f.yaml");
  CHECK_FALSE(d.reshard_after_forward);
  CHECK(d.offload_param_device == "cpu");
}

TEST_CASE("bad accelerate files say where and what", "[accelerate]") {
  auto msg = test::input_error_of([] { parse_accelerate_config("distributed_type: TPU\n", "a.yaml"); });
  CHECK_THAT(msg, Contains("a.yaml:1:19"));
  CHECK_THAT(msg, Contains("`TPU` is not supported"));
  msg = test::input_error_of([] { parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n", "a.yaml"); });
  CHECK_THAT(msg, Contains("a.yaml:3:15"));
  CHECK_THAT(msg, Contains("between 0 and 3, found 4"));
  msg = test::input_error_of([] { parse_accelerate_config("distributed_type: DEEPSPEED\n", "a.yaml"); });
  CHECK_THAT(msg, Contains("needs deepspeed_config.zero_stage"));
  msg = test::input_error_of([] { parse_accelerate_config("num_processes: many\n", "a.yaml"); });
  CHECK_THAT(msg, Contains("`num_processes` expects an integer, found `many`"));
  msg = test::input_error_of([] {
    parse_accelerate_config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_param_device: cpu\n", "a.yaml");
  });
  CHECK_THAT(msg, Contains("needs zero_stage 3"));
  msg = test::input_error_of([] { read_accelerate_config("zero4"); });
  CHECK_THAT(msg, Contains("neither a bundled accelerate preset"));
  CHECK_THAT(msg, Contains("did you mean `zero"));
  msg = test::input_error_of([] { read_accelerate_config("configs/missing.yaml"); });
  CHECK_THAT(msg, Contains("configs/missing.yaml does not exist"));
  msg = test::input_error_of([] { parse_accelerate_config("distributed_type: [\n", "a.yaml"); });
  CHECK_THAT(msg, Contains("YAML syntax error"));
  // Every bad value of a file at once, each where it is.
  msg = test::input_error_of([] {
    parse_accelerate_config("mixed_precision: fp17\nnum_processes: -3\ndistributed_type: FSDP\nfsdp_config:\n"
                            "  fsdp_version: 7\n",
                            "a.yaml");
  });
  CHECK_THAT(msg, Contains("a.yaml: 3 bad values"));
  CHECK_THAT(msg, Contains("a.yaml:1:18: `mixed_precision` must be one of"));
  CHECK_THAT(msg, Contains("a.yaml:2:16: `num_processes` must be between 1"));
  CHECK_THAT(msg, Contains("a.yaml:5:17: `fsdp_config.fsdp_version` must be between 1 and 2, found 7"));
}

TEST_CASE("accelerate files are told apart from training configs", "[accelerate]") {
  CHECK(looks_like_accelerate_config("distributed_type: MULTI_GPU\n"));
  CHECK_FALSE(looks_like_accelerate_config("beta: 0.1\n"));
  CHECK_FALSE(looks_like_accelerate_config("[not yaml"));
}

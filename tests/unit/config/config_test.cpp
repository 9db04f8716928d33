// Tests: config resolution (defaults < YAML < flags), its checks and its error messages.
#include <catch2/catch.hpp>

#include "config/loader.hpp"
#include "core/error.hpp"
#include "support.hpp"
#include "core/strings.hpp"
#include "trainers/dpo_config.hpp"
#include "trainers/grpo_config.hpp"
#include "trainers/rloo_config.hpp"
#include "trainers/sft_config.hpp"

using namespace trlx;
using trlx::trainers::DPOConfig;
using Catch::Matchers::Contains;

namespace {

struct Flags : std::vector<std::pair<std::string, std::vector<std::string>>> {};

// Loads `yaml` (named "dpo.yaml") and `flags` into a DPO config.
config::Loaded<DPOConfig> load_dpo(const std::string& yaml, Flags flags = {}) {
  config::Loaded<DPOConfig> out;
  out.loader = std::make_shared<config::ConfigLoader>(trainers::dpo_schema());
  out.loader->load_yaml_text(yaml, "dpo.yaml");
  for (const auto& [k, v] : flags) out.loader->apply_flag(k, v);
  out.loader->resolve(&out.config);
  return out;
}


}  // namespace

TEST_CASE("defaults < YAML < flags, with origins", "[config]") {
  auto c = load_dpo("beta: 0.2\nlearning_rate: 5.0e-7\n", Flags{{{"beta", {"0.3"}}}});
  CHECK(c.config.beta == Approx(0.3));
  CHECK(c.config.learning_rate == Approx(5e-7));
  CHECK(c.config.max_grad_norm == Approx(1.0));  // default
  CHECK(c.loader->origin("beta").describe() == "--beta");
  CHECK(c.loader->origin("learning_rate").describe() == "dpo.yaml:2:1");
  CHECK(c.loader->origin("max_grad_norm").describe() == "default");
  const std::string yaml = c.loader->to_yaml();
  CHECK_THAT(yaml, Contains("beta: 0.3"));
  CHECK_THAT(yaml, Contains("# from --beta"));
  CHECK_THAT(yaml, Contains("# from dpo.yaml:2:1"));
}

TEST_CASE("a flag of null or [] clears a list the file set", "[config]") {
  auto c = load_dpo("lora_modules_to_save: [lm_head]\nreport_to: [tensorboard]\nloss_type: [sigmoid, bco_pair]\n",
                    Flags{{{"lora_modules_to_save", {"[]"}}, {"report_to", {" null "}}}});
  REQUIRE(c.config.lora_modules_to_save);
  CHECK(c.config.lora_modules_to_save->empty());
  CHECK(c.config.report_to.empty());
  CHECK(c.loader->origin("report_to").describe() == "--report_to");
}

TEST_CASE("unknown key names file, line, column and the closest key", "[config]") {
  const auto msg = test::input_error_of([] { load_dpo("beta: 0.1\nlearning_rat: 1.0e-6\n"); });
  CHECK_THAT(msg, Contains("dpo.yaml:2:1"));
  CHECK_THAT(msg, Contains("unknown key `learning_rat`"));
  CHECK_THAT(msg, Contains("did you mean `learning_rate`?"));
}

TEST_CASE("a section given a plain value says it is a section and names its keys", "[config]") {
  auto msg = test::input_error_of([] { load_dpo("gradient_checkpointing_kwargs: true\n"); });
  CHECK_THAT(msg, Contains("dpo.yaml:1:1"));
  CHECK_THAT(msg, Contains("`gradient_checkpointing_kwargs` is a section, not a value"));
  CHECK_THAT(msg, Contains("use_reentrant"));
  msg = test::input_error_of([] { load_dpo("", Flags{{{"gradient_checkpointing_kwargs", {"true"}}}}); });
  CHECK_THAT(msg, Contains("--gradient_checkpointing_kwargs.use_reentrant"));
}

TEST_CASE("unknown flag suggests the closest flag", "[config]") {
  const auto msg = test::input_error_of([] { load_dpo("", Flags{{{"betta", {"0.2"}}}}); });
  CHECK_THAT(msg, Contains("unknown flag `--betta`"));
  CHECK_THAT(msg, Contains("did you mean `--beta`?"));
}

TEST_CASE("wrong type names where, what was expected and what was found", "[config]") {
  auto msg = test::input_error_of([] { load_dpo("\n\nbeta: abc\n"); });
  CHECK_THAT(msg, Contains("dpo.yaml:3:7"));
  CHECK_THAT(msg, Contains("`beta` expects a finite number, found `abc`"));
  msg = test::input_error_of([] { load_dpo("per_device_train_batch_size: 2.5\n"); });
  CHECK_THAT(msg, Contains("expects an integer, found `2.5`"));
  msg = test::input_error_of([] { load_dpo("bf16: maybe\n"); });
  CHECK_THAT(msg, Contains("expects a boolean"));
  msg = test::input_error_of([] { load_dpo("beta: [1, 2]\n"); });
  CHECK_THAT(msg, Contains("found a list"));
  msg = test::input_error_of([] { load_dpo("", Flags{{{"learning_rate", {"fast"}}}}); });
  CHECK_THAT(msg, Contains("--learning_rate: expects a finite number, found `fast`"));
  // Infinite values train to NaN weights: refused like NaN, as flags and in YAML.
  for (const std::string v : {"inf", "-inf", "Infinity", ".inf", "nan"}) {
    msg = test::input_error_of([&] { load_dpo("", Flags{{{"learning_rate", {v}}}}); });
    CHECK_THAT(msg, Contains("--learning_rate: expects a finite number, found `" + v + "`"));
  }
  msg = test::input_error_of([] { load_dpo("beta: .inf\n"); });
  CHECK_THAT(msg, Contains("`beta` expects a finite number"));
}

TEST_CASE("out of range and not among the choices", "[config]") {
  auto msg = test::input_error_of([] { load_dpo("beta: -1\n"); });
  CHECK_THAT(msg, Contains("dpo.yaml:1:1"));
  CHECK_THAT(msg, Contains("`beta` must be >= 0.0, found -1.0"));
  msg = test::input_error_of([] { load_dpo("lr_scheduler_type: cosin\n"); });
  CHECK_THAT(msg, Contains("must be one of linear, cosine"));
  CHECK_THAT(msg, Contains("did you mean `cosine`?"));
  msg = test::input_error_of([] { load_dpo("loss_type: [sigmoid, hingee]\n"); });
  CHECK_THAT(msg, Contains("found `hingee`"));
  CHECK_THAT(msg, Contains("did you mean `hinge`?"));
}

TEST_CASE("every problem is reported at once", "[config]") {
  const auto msg = test::input_error_of([] { load_dpo("beta: x\nlerning_rate: 1\nmax_grad_norm: -2\n"); });
  CHECK_THAT(msg, Contains("3 problems"));
  CHECK_THAT(msg, Contains("beta"));
  CHECK_THAT(msg, Contains("lerning_rate"));
  CHECK_THAT(msg, Contains("max_grad_norm"));
}

TEST_CASE("conflicting fields are named together with what to change", "[config]") {
  auto msg = test::input_error_of([] { load_dpo("warmup_ratio: 0.1\n", Flags{{{"warmup_steps", {"5"}}}}); });
  CHECK_THAT(msg, Contains("conflicting settings"));
  CHECK_THAT(msg, Contains("`warmup_ratio: 0.1` (dpo.yaml:1:1)"));
  CHECK_THAT(msg, Contains("`warmup_steps: 5.0` (--warmup_steps)"));
  CHECK_THAT(msg, Contains("drop warmup_ratio"));
  msg = test::input_error_of([] { load_dpo("loss_type: [sigmoid, sft]\nloss_weights: [1.0]\n"); });
  CHECK_THAT(msg, Contains("`loss_type"));
  CHECK_THAT(msg, Contains("`loss_weights"));
  CHECK_THAT(msg, Contains("2 losses, 1 weights"));
  msg = test::input_error_of([] { load_dpo("precompute_ref_log_probs: true\nsync_ref_model: true\n"); });
  CHECK_THAT(msg, Contains("precompute_ref_log_probs"));
  CHECK_THAT(msg, Contains("sync_ref_model"));
  msg = test::input_error_of([] { load_dpo("lr_scheduler_type: cosine_with_min_lr\n"); });
  CHECK_THAT(msg, Contains("lr_scheduler_kwargs.min_lr"));
}

TEST_CASE("lists: YAML lists, a scalar, several flag values, comma-separated", "[config]") {
  CHECK(load_dpo("loss_type: [sigmoid, sft]\n").config.loss_type == std::vector<std::string>{"sigmoid", "sft"});
  CHECK(load_dpo("loss_type:\n  - ipo\n").config.loss_type == std::vector<std::string>{"ipo"});
  CHECK(load_dpo("loss_type: hinge\n").config.loss_type == std::vector<std::string>{"hinge"});
  CHECK(load_dpo("", Flags{{{"loss_type", {"sigmoid", "sft"}}}}).config.loss_type ==
        std::vector<std::string>{"sigmoid", "sft"});
  auto c = load_dpo("", Flags{{{"loss_type", {"sigmoid,sft"}}, {"loss_weights", {"1.0,0.5"}}}});
  CHECK(c.config.loss_type == std::vector<std::string>{"sigmoid", "sft"});
  REQUIRE(c.config.loss_weights);
  CHECK(*c.config.loss_weights == std::vector<double>{1.0, 0.5});
}

TEST_CASE("nested keys in YAML and as dotted flags", "[config]") {
  auto c = load_dpo("gradient_checkpointing_kwargs:\n  use_reentrant: false\n");
  REQUIRE(c.config.use_reentrant.has_value());
  CHECK_FALSE(*c.config.use_reentrant);
  CHECK(c.loader->origin("gradient_checkpointing_kwargs.use_reentrant").describe() == "dpo.yaml:2:3");
  c = load_dpo("", Flags{{{"gradient_checkpointing_kwargs.use_reentrant", {"true"}}}});
  CHECK(*c.config.use_reentrant);
  CHECK_FALSE(load_dpo("").config.use_reentrant.has_value());
  const auto msg = test::input_error_of([] { load_dpo("gradient_checkpointing_kwargs:\n  use_reentrat: true\n"); });
  CHECK_THAT(msg, Contains("dpo.yaml:2:3"));
  CHECK_THAT(msg, Contains("did you mean `gradient_checkpointing_kwargs.use_reentrant`?"));
  CHECK_THAT(c.loader->to_yaml(), Contains("gradient_checkpointing_kwargs:\n  use_reentrant: true"));
}

TEST_CASE("null: allowed for optional fields, an error elsewhere", "[config]") {
  auto c = load_dpo("max_length: null\n");
  CHECK_FALSE(c.config.max_length.has_value());
  CHECK(load_dpo("").config.max_length == 1024);
  const auto msg = test::input_error_of([] { load_dpo("beta: null\n"); });
  CHECK_THAT(msg, Contains("`beta` expects a finite number, found null"));
  CHECK_FALSE(load_dpo("", Flags{{{"max_length", {"None"}}}}).config.max_length.has_value());
}

TEST_CASE("booleans as TRL users write them", "[config]") {
  CHECK(load_dpo("use_peft: yes\n").config.use_peft);
  CHECK_FALSE(load_dpo("use_peft: False\n").config.use_peft);
  CHECK(load_dpo("", Flags{{{"use_peft", {}}}}).config.use_peft);
  CHECK_FALSE(load_dpo("", Flags{{{"use_peft", {"false"}}}}).config.use_peft);
  CHECK(load_dpo("").config.use_bf16());
  CHECK_FALSE(load_dpo("bf16: false\n").config.use_bf16());
}

TEST_CASE("duplicate keys and YAML syntax errors name their lines", "[config]") {
  auto msg = test::input_error_of([] { load_dpo("beta: 0.1\nseed: 1\nbeta: 0.2\n"); });
  CHECK_THAT(msg, Contains("dpo.yaml:3:1"));
  CHECK_THAT(msg, Contains("appears twice (first on line 1)"));
  msg = test::input_error_of([] { load_dpo("beta: 0.1\nloss_type: [sigmoid\n"); });
  CHECK_THAT(msg, Contains("dpo.yaml:"));
  CHECK_THAT(msg, Contains("YAML syntax error"));
  msg = test::input_error_of([] { load_dpo("- beta\n- 0.1\n"); });
  CHECK_THAT(msg, Contains("mapping"));
}

TEST_CASE("renamed fields are accepted with a warning naming the new key", "[config]") {
  config::ConfigLoader l(trainers::rloo_schema());
  l.load_yaml_text("rloo_k: 4\nkl_coef: 0.02\ncliprange: 0.1\nnum_ppo_epochs: 2\n", "rloo.yaml");
  l.apply_flag("num_mini_batches", {"3"});
  trainers::RLOOConfig c;
  l.resolve(&c);
  CHECK(c.num_generations == 4);
  CHECK(c.beta == Approx(0.02));
  CHECK(c.epsilon == Approx(0.1));
  CHECK(c.num_iterations == 2);
  CHECK(c.steps_per_generation == 3);
  REQUIRE(l.warnings().size() == 5);
  CHECK_THAT(l.warnings()[0], Contains("rloo.yaml:1:1"));
  CHECK_THAT(l.warnings()[0], Contains("`rloo_k` is the old name of `num_generations`"));
  CHECK_THAT(l.warnings()[4], Contains("--num_mini_batches is the old name of --steps_per_generation"));
  CHECK_THAT(l.origin("num_generations").describe(), Contains("as `rloo_k`"));
}

TEST_CASE("each trainer keeps TRL's per-trainer defaults", "[config]") {
  trainers::SFTConfig sft;
  config::ConfigLoader ls(trainers::sft_schema());
  ls.resolve(&sft);
  CHECK(sft.learning_rate == Approx(2e-5));
  CHECK_FALSE(sft.disable_dropout);
  CHECK(sft.dataset_text_field == "text");
  DPOConfig dpo;
  config::ConfigLoader ld(trainers::dpo_schema());
  ld.resolve(&dpo);
  CHECK(dpo.learning_rate == Approx(1e-6));
  CHECK(dpo.disable_dropout);
  CHECK(dpo.loss_type == std::vector<std::string>{"sigmoid"});
}

TEST_CASE("closest_match finds typos and leaves unrelated words alone", "[strings]") {
  const std::vector<std::string> c = {"learning_rate", "beta", "max_length"};
  CHECK(closest_match("learnig_rate", c) == "learning_rate");
  CHECK(closest_match("Beta", c) == "beta");
  CHECK(closest_match("zzzzzzzz", c).empty());
  CHECK(edit_distance("abc", "acb") == 1);
}

TEST_CASE("model_init_kwargs: other names of dtype, attn_implementation and revision, the rest checked", "[config]") {
  // The mapping, a string of JSON (TRL's `dict | str`), and a JSON flag.
  for (const auto& yaml : {std::string("model_init_kwargs:\n  dtype: bfloat16\n  attn_implementation: flash_attention_2\n"
                                       "  revision: v2\n  use_cache: false\n  device_map: auto\n"),
                           std::string("model_init_kwargs: '{\"dtype\": \"bfloat16\", \"attn_implementation\": "
                                       "\"flash_attention_2\", \"revision\": \"v2\"}'\n")}) {
    auto c = load_dpo(yaml);
    CHECK(c.config.dtype == "bfloat16");
    CHECK(c.config.attn_implementation == std::optional<std::string>("flash_attention_2"));
    CHECK(c.config.model_revision == "v2");
    CHECK_THAT(c.loader->origin("dtype").describe(), Contains("as `model_init_kwargs.dtype`"));
  }
  auto f = load_dpo("", Flags{{{"model_init_kwargs", {"{\"torch_dtype\": \"float16\", \"use_cache\": true}"}}}});
  CHECK(f.config.dtype == "float16");  // torch_dtype: the older name of dtype
  CHECK(load_dpo("").config.dtype == "float32");
  CHECK(load_dpo("dtype: bfloat16\nmodel_init_kwargs: {dtype: bfloat16}\n").config.dtype == "bfloat16");

  auto msg = test::input_error_of([] { load_dpo("dtype: float32\nmodel_init_kwargs:\n  dtype: bfloat16\n"); });
  CHECK_THAT(msg, Contains("`dtype: float32` (dpo.yaml:1:1)"));
  CHECK_THAT(msg, Contains("`model_init_kwargs.dtype: bfloat16` (dpo.yaml:3:3)"));
  CHECK_THAT(msg, Contains("these are one setting"));
  msg = test::input_error_of([] { load_dpo("model_init_kwargs:\n  quantization_config: {}\n"); });
  CHECK_THAT(msg, Contains("dpo.yaml:2:3: unknown key `model_init_kwargs.quantization_config`"));
  msg = test::input_error_of([] { load_dpo("model_init_kwargs: {trust_remote_code: true}\n"); });
  CHECK_THAT(msg, Contains("trust_remote_code: true"));
  CHECK_THAT(msg, Contains("trlx runs no Python"));
  msg = test::input_error_of([] { load_dpo("attn_implementation: eager\n"); });
  CHECK_THAT(msg, Contains("eager attention rounds"));
  CHECK_THAT(msg, Contains("use sdpa"));
  msg = test::input_error_of([] { load_dpo("attn_implementation: flex_attention\n"); });
  CHECK_THAT(msg, Contains("flex_attention is not built"));
  CHECK(load_dpo("attn_implementation: kernels-community/flash-attn3\n").config.attn_implementation.has_value());
  msg = test::input_error_of([] { load_dpo("model_init_kwargs: {device_map: balanced}\n"); });
  CHECK_THAT(msg, Contains("spreading layers over devices is not built"));
  msg = test::input_error_of([] { load_dpo("model_init_kwargs: {low_cpu_mem_usage: false}\n"); });
  CHECK_THAT(msg, Contains("tensor by tensor"));
}

TEST_CASE("TRL settings trlx does not build are refused by name, with what to do", "[config]") {
  for (const auto& [yaml, want] : std::vector<std::pair<std::string, std::string>>{
           {"push_to_hub: true\n", "huggingface-cli upload"},
           {"hub_model_id: me/model\n", "push_to_hub is not built"},
           {"torch_compile: true\n", "no torch.compile"},
           {"deepspeed: ds.json\n", "accelerate_config"},
           {"fsdp: full_shard\n", "accelerate_config"},
           {"neftune_noise_alpha: 5\n", "NEFTune"}}) {
    const auto msg = test::input_error_of([&] { load_dpo(yaml); });
    INFO(yaml);
    CHECK_THAT(msg, Contains("not built in trlx"));
    CHECK_THAT(msg, Contains(want));
  }
  // vLLM's settings, at their defaults, load; any other value is refused.
  config::ConfigLoader grpo(trainers::grpo_schema());
  grpo.load_yaml_text("vllm_mode: colocate\nvllm_gpu_memory_utilization: 0.3\n", "grpo.yaml");
  trainers::GRPOConfig g;
  grpo.resolve(&g);
  config::ConfigLoader grpo2(trainers::grpo_schema());
  grpo2.load_yaml_text("vllm_mode: server\n", "grpo.yaml");
  const auto msg = test::input_error_of([&] { grpo2.resolve(&g); });
  CHECK_THAT(msg, Contains("there is no vLLM in trlx"));
  // Accepted and built.
  auto c = load_dpo("dataloader_num_workers: 4\ndataloader_pin_memory: false\ntf32: true\ntorch_empty_cache_steps: 10\n"
                    "disable_tqdm: true\ninclude_num_input_tokens_seen: non_padding\n");
  CHECK(c.config.dataloader_num_workers == 4);
  CHECK_FALSE(c.config.dataloader_pin_memory);
  CHECK(c.config.tf32 == std::optional<bool>(true));
  CHECK(c.config.torch_empty_cache_steps == std::optional<int64_t>(10));
  CHECK(c.config.include_num_input_tokens_seen == "non_padding");
}

TEST_CASE("generation_kwargs: one reading serves the config's check and the sampler", "[config]") {
  std::string problem;
  const auto g = trainers::parse_generation_kwargs(
      R"({"temperature": 0.7, "top_p": 0.9, "top_k": null, "min_p": null, "repetition_penalty": 1.1,
          "do_sample": false, "no_repeat_ngram_size": 3, "suppress_tokens": [4, 5], "eos_token_id": 7,
          "bad_words_ids": [[1, 2], [3]], "stop_strings": "END"})",
      problem);
  CHECK(problem.empty());
  CHECK(g.temperature == 0.7);
  CHECK(g.top_p == 0.9);
  CHECK(g.top_k == 0);                        // null: off
  REQUIRE(g.min_p.has_value());               // given ...
  CHECK_FALSE(g.min_p->has_value());          // ... as null: off
  CHECK(g.repetition_penalty == 1.1);
  CHECK(g.do_sample == false);
  CHECK(g.no_repeat_ngram_size == 3);
  CHECK(g.suppress_tokens == std::vector<int64_t>{4, 5});
  CHECK(g.eos_token_id == std::vector<int64_t>{7});
  CHECK(g.bad_words_ids == std::vector<std::vector<int64_t>>{{1, 2}, {3}});
  CHECK(g.stop_strings == std::vector<std::string>{"END"});

  const auto none = trainers::parse_generation_kwargs("{}", problem);
  CHECK(problem.empty());
  CHECK_FALSE(none.temperature.has_value());
  CHECK_FALSE(none.min_p.has_value());
  CHECK_FALSE(none.eos_token_id.has_value());

  trainers::parse_generation_kwargs(R"({"top_p": 1.5})", problem);
  CHECK_THAT(problem, Contains("`top_p` expects a number in (0, 1]"));
  trainers::parse_generation_kwargs(R"({"eos_token_id": [1, -2]})", problem);
  CHECK_THAT(problem, Contains("`eos_token_id` expects a token id or a list of token ids"));
  trainers::parse_generation_kwargs(R"({"num_beams": 4})", problem);
  CHECK_THAT(problem, Contains("beam search is not built"));
  trainers::parse_generation_kwargs(R"({"typical_p": 0.5})", problem);
  CHECK_THAT(problem, Contains("`typical_p` is not built"));
  trainers::parse_generation_kwargs("[1]", problem);
  CHECK(problem == "expects a mapping of generation settings");
}

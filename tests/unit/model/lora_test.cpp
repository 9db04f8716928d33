// LoRA against PEFT: adapters PEFT made on examples/tiny-model and the logits
// PEFT computed (scripts/fixtures/lora_fixtures.py), PEFT's file format both
// ways, merge, the disabled-adapter view, and bad input.
#include "catch_torch.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "helpers.hpp"
#include "io/safetensors.hpp"
#include "model/loading.hpp"
#include "model/lora.hpp"
#include "model/saving.hpp"
#include "support.hpp"

using namespace trlx;
using Catch::Matchers::Contains;

namespace {

namespace fs = std::filesystem;

fs::path lora_data() { return test::data_dir() / "lora"; }
using test::tiny_model;

model::LanguageModel base() { return model::load_language_model(tiny_model(), model::HeadKind::CausalLM); }

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("trlx_lora_test") {}
};

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

using model_test::read_json;

std::set<std::string> tensor_names(const fs::path& file) {
  std::set<std::string> out;
  const auto f = io::SafetensorsFile::open(file);
  for (const auto& t : f.tensors()) out.insert(t.name);
  return out;
}

void randomize_adapters(model::LanguageModelImpl& m, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& p : m.named_parameters(true))
    if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0.0, 0.05);
}

}  // namespace

TEST_CASE("a PEFT adapter in trlx gives PEFT's logits with adapters on, off, and merged", "[model][lora][golden]") {
  for (const char* name : {"default", "all_linear", "dora"}) {
    INFO(name);
    auto expected = io::Checkpoint::open(lora_data() / name / "expected.safetensors");
    auto ids = expected.get("input_ids", true);
    auto m = base();
    auto info = model::load_adapter(lora_data() / name / "adapter", *m);
    torch::NoGradGuard no_grad;
    CHECK(max_diff(m->forward({ids, {}, {}}), expected.get("logits_lora")) < 1e-5);
    {
      model::AdaptersDisabled off(*m);
      CHECK(max_diff(m->forward({ids, {}, {}}), expected.get("logits_base")) < 1e-5);
      model::AdaptersDisabled nested(*m);
      CHECK(max_diff(m->forward({ids, {}, {}}), expected.get("logits_base")) < 1e-5);
    }
    auto unmerged = m->forward({ids, {}, {}});
    CHECK(max_diff(unmerged, expected.get("logits_lora")) < 1e-5);
    model::merge_lora(*m);
    CHECK_FALSE(model::has_lora(*m));
    auto merged = m->forward({ids, {}, {}});
    CHECK(max_diff(merged, unmerged) < 1e-5);
    CHECK(max_diff(merged, expected.get("logits_merged")) < 1e-5);
    // A merged model is a plain model again: the parameters a checkpoint holds.
    auto plain = base();
    CHECK(model::checkpoint_names(*m) == model::checkpoint_names(*plain));
  }
}

TEST_CASE("DoRA: one training step's loss and gradients equal PEFT's", "[model][lora][golden]") {
  // scripts/fixtures/lora_fixtures.py: the mean next-token cross-entropy of
  // PEFT's DoRA model in training mode and the gradient of each adapter
  // tensor (the magnitudes included; the row norms are not differentiated).
  auto expected = io::Checkpoint::open(lora_data() / "dora" / "expected.safetensors");
  auto ids = expected.get("input_ids", true);
  auto m = base();
  auto info = model::load_adapter(lora_data() / "dora" / "adapter", *m);
  CHECK(info.config.use_dora);
  m->train();
  auto logits = m->forward({ids, {}, {}});
  const int64_t v = logits.size(-1);
  auto loss = torch::nn::functional::cross_entropy(logits.narrow(1, 0, logits.size(1) - 1).reshape({-1, v}),
                                                  ids.narrow(1, 1, ids.size(1) - 1).reshape({-1}));
  CHECK(std::abs(loss.item<double>() - expected.get("loss").item<double>()) < 1e-5);
  loss.backward();
  auto named = m->named_modules("", false);
  int compared = 0;
  for (const auto& name : info.adapted) {
    INFO(name);
    auto* l = dynamic_cast<model::LinearImpl*>(named[name].get());
    REQUIRE(l);
    REQUIRE(l->lora_magnitude.defined());
    const std::string key = "grad:base_model.model." + name;
    CHECK(max_diff(l->lora_A->weight.grad(), expected.get(key + ".lora_A.weight")) < 1e-5);
    CHECK(max_diff(l->lora_B->weight.grad(), expected.get(key + ".lora_B.weight")) < 1e-5);
    CHECK(max_diff(l->lora_magnitude.grad(), expected.get(key + ".lora_magnitude_vector")) < 1e-5);
    compared += 3;
  }
  CHECK(compared == 3 * 6);  // q_proj, v_proj and down_proj of two layers
  // Only the adapters train: the base weights get no gradient.
  for (const auto& p : m->named_parameters(true))
    if (p.key().find("lora_") == std::string::npos) CHECK_FALSE(p.value().grad().defined());
}

TEST_CASE("DoRA from apply_lora: the magnitudes start at the weights' row norms, the output unchanged",
          "[model][lora]") {
  auto expected = io::Checkpoint::open(lora_data() / "dora" / "expected.safetensors");
  auto ids = expected.get("input_ids", true);
  auto m = base();
  torch::NoGradGuard no_grad;
  auto before = m->forward({ids, {}, {}});
  model::LoraConfig c;
  c.r = 4;
  c.alpha = 8;
  c.use_dora = true;
  c.target_modules = std::vector<std::string>{"q_proj", "v_proj"};
  auto info = model::apply_lora(*m, c);
  CHECK(max_diff(m->forward({ids, {}, {}}), before) < 1e-5);
  auto named = m->named_modules("", false);
  for (const auto& name : info.adapted) {
    auto* l = dynamic_cast<model::LinearImpl*>(named[name].get());
    CHECK(max_diff(l->lora_magnitude, torch::linalg_vector_norm(l->weight, 2, {1})) < 1e-6);
    CHECK(l->lora_magnitude.requires_grad());
  }
  // Each adapted layer trains A, B and a magnitude per output row.
  int64_t trainable = 0;
  for (const auto& name : info.adapted) {
    auto* l = dynamic_cast<model::LinearImpl*>(named[name].get());
    trainable += l->lora_A->weight.numel() + l->lora_B->weight.numel() + l->weight.size(0);
  }
  CHECK(info.trainable_parameters == trainable);
}

TEST_CASE("the disabled adapter view equals the base model (no second copy) under autograd", "[model][lora]") {
  auto expected = io::Checkpoint::open(lora_data() / "all_linear" / "expected.safetensors");
  auto ids = expected.get("input_ids", true);
  auto m = base();
  model::load_adapter(lora_data() / "all_linear" / "adapter", *m);
  m->train();  // dropout 0 in this adapter: training mode changes nothing
  torch::Tensor ref;
  {
    torch::NoGradGuard no_grad;
    model::AdaptersDisabled off(*m);
    ref = m->forward({ids, {}, {}});
  }
  CHECK_FALSE(ref.requires_grad());
  CHECK(max_diff(ref, expected.get("logits_base")) < 1e-5);
  auto logits = m->forward({ids, {}, {}});
  REQUIRE(logits.requires_grad());
  CHECK(max_diff(logits.detach(), expected.get("logits_lora")) < 1e-5);
  // A reference forward between the policy forward and its backward changes nothing.
  {
    model::AdaptersDisabled off(*m);
    auto again = m->forward({ids, {}, {}});
    CHECK(max_diff(again.detach(), ref) == 0.0);
  }
  (logits - ref).pow(2).mean().backward();
  for (const auto& p : m->named_parameters(true)) {
    INFO(p.key());
    const bool adapter = p.key().find("lora_") != std::string::npos;
    const bool copy = p.key() == "model.norm.weight";
    CHECK(p.value().requires_grad() == (adapter || copy));
    if (adapter || copy) {
      REQUIRE(p.value().grad().defined());
      CHECK(p.value().grad().abs().sum().item<double>() > 0);
    } else {
      CHECK_FALSE(p.value().grad().defined());
    }
  }
}

TEST_CASE("adapters on a bf16 or fp16 base are float32 and modules_to_save copies keep the base's dtype, as PEFT's",
          "[model][lora][golden]") {
  const auto want = read_json(lora_data() / "adapter_dtypes.json");
  REQUIRE(want.size() == 3);
  const auto ids = io::Checkpoint::open(lora_data() / "default" / "expected.safetensors").get("input_ids", true);
  for (const auto& [dtype, kinds] : want.items()) {
    INFO("base in " << dtype);
    auto m = model::load_language_model(tiny_model(), model::HeadKind::CausalLM, dtype);
    model::LoraConfig c;
    c.r = 4;
    c.alpha = 8;
    c.modules_to_save = std::vector<std::string>{"model.norm"};
    model::apply_lora(*m, c);
    std::map<std::string, std::set<std::string>> got;
    for (const auto& p : m->named_parameters(true)) {
      if (!p.value().requires_grad()) continue;
      const auto& n = p.key();
      const std::string kind = n.find("lora_A") != std::string::npos   ? "lora_A"
                               : n.find("lora_B") != std::string::npos ? "lora_B"
                                                                       : "modules_to_save";
      const std::string t = c10::toString(p.value().scalar_type());
      got[kind].insert(t == "Float" ? "float32" : t == "BFloat16" ? "bfloat16" : t == "Half" ? "float16" : t);
    }
    for (const auto& [kind, dtypes] : kinds.items()) {
      INFO(kind);
      CHECK(got[kind] == dtypes.get<std::set<std::string>>());
    }
    // A forward through float32 adapters on the 16-bit base runs in the base's dtype.
    torch::NoGradGuard no_grad;
    CHECK(m->forward({ids, {}, {}}).scalar_type() == m->model->embed_tokens->weight.scalar_type());
  }
}

TEST_CASE("apply_lora: targets like PEFT, only adapters train, the output starts unchanged", "[model][lora]") {
  auto expected = io::Checkpoint::open(lora_data() / "default" / "expected.safetensors");
  auto ids = expected.get("input_ids", true);

  SECTION("default targets (q_proj, v_proj)") {
    auto m = base();
    model::LoraConfig c;
    c.r = 4;
    c.alpha = 8;
    auto info = model::apply_lora(*m, c);
    CHECK(info.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
    CHECK(info.adapted == std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                                   "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"});
    CHECK(info.scale() == 2.0);
    // hidden 128, kv 2 x 32 = 64: per layer q 4x128 + 128x4, v 4x128 + 64x4
    CHECK(info.trainable_parameters == 2 * (4 * 128 + 128 * 4 + 4 * 128 + 64 * 4));
    torch::NoGradGuard no_grad;
    CHECK(max_diff(m->forward({ids, {}, {}}), expected.get("logits_base")) < 1e-6);  // B = 0
    // A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform, a = sqrt(5)).
    auto& a = m->model->layers[0]->as<model::DecoderLayerImpl>()->self_attn->q_proj->lora_A->weight;
    CHECK(a.abs().max().item<double>() <= 1.0 / std::sqrt(128.0));
    CHECK(a.abs().max().item<double>() > 0.8 / std::sqrt(128.0));
  }
  SECTION("all-linear: every decoder linear layer, not the head; rslora scale") {
    auto cfg = base()->config();
    cfg.tie_word_embeddings = false;  // a separate lm_head must stay without adapter
    model::LanguageModel untied(cfg, model::HeadKind::CausalLM);
    model::LoraConfig c;
    c.r = 16;
    c.alpha = 8;
    c.use_rslora = true;
    c.target_modules = std::vector<std::string>{"all-linear"};
    auto info = model::apply_lora(*untied, c);
    CHECK(info.adapted.size() == 14);
    CHECK(info.target_modules ==
          std::vector<std::string>{"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"});
    CHECK_FALSE(untied->lm_head->lora_A);
    CHECK(info.scale() == 2.0);  // 8 / sqrt(16)
  }
  SECTION("a full name and a suffix; modules_to_save excluded from adapters") {
    auto m = base();
    model::LoraConfig c;
    c.r = 2;
    c.target_modules = std::vector<std::string>{"model.layers.1.mlp.up_proj", "o_proj", "k_proj"};
    c.modules_to_save = std::vector<std::string>{"layers.0.self_attn.k_proj"};
    auto info = model::apply_lora(*m, c);
    CHECK(info.adapted == std::vector<std::string>{"model.layers.0.self_attn.o_proj", "model.layers.1.self_attn.k_proj",
                                                   "model.layers.1.self_attn.o_proj", "model.layers.1.mlp.up_proj"});
    CHECK(info.copied == std::vector<std::string>{"model.layers.0.self_attn.k_proj"});
  }
  SECTION("dropout acts in training mode only") {
    auto m = base();
    model::LoraConfig c;
    c.r = 4;
    c.dropout = 0.5;
    model::apply_lora(*m, c);
    randomize_adapters(*m, 3);
    torch::NoGradGuard no_grad;
    m->eval();
    auto a = m->forward({ids, {}, {}}), b = m->forward({ids, {}, {}});
    CHECK(max_diff(a, b) == 0.0);
    m->train();
    CHECK(max_diff(m->forward({ids, {}, {}}), a) > 0.0);
  }
}

TEST_CASE("trlx writes PEFT's tensor names and adapter_config keys", "[model][lora][golden]") {
  for (const char* name : {"default", "all_linear", "dora"}) {
    INFO(name);
    const auto peft = lora_data() / name / "adapter";
    auto m = base();
    auto info = model::load_adapter(peft, *m);
    TempDir tmp;
    model::AdapterSaveOptions o;
    o.base_model_name_or_path = tiny_model().string();
    model::save_adapter(tmp.path / "adapter", *m, info, o);
    const auto mine = tmp.path / "adapter";
    CHECK(tensor_names(mine / "adapter_model.safetensors") == tensor_names(peft / "adapter_model.safetensors"));
    auto want = io::SafetensorsFile::open(peft / "adapter_model.safetensors");
    auto got = io::SafetensorsFile::open(mine / "adapter_model.safetensors");
    CHECK(got.metadata() == want.metadata());
    for (const auto& t : want.tensors()) {
      INFO(t.name);
      CHECK(torch::equal(got.get(t.name), want.get(t.name)));
    }
    auto jm = read_json(mine / "adapter_config.json"), jp = read_json(peft / "adapter_config.json");
    std::set<std::string> km, kp;
    for (auto it = jm.begin(); it != jm.end(); ++it) km.insert(it.key());
    for (auto it = jp.begin(); it != jp.end(); ++it)
      if (it.key() != "peft_version") kp.insert(it.key());  // trlx is not PEFT and claims no PEFT version
    CHECK(km == kp);
    for (const char* key : {"r", "lora_alpha", "lora_dropout", "use_rslora", "modules_to_save", "task_type", "peft_type",
                            "bias", "fan_in_fan_out", "use_dora", "init_lora_weights", "inference_mode"}) {
      INFO(key);
      CHECK(jm[key] == jp[key]);
    }
    // PEFT lists the targets it matched (a set, full names for all-linear);
    // trlx lists the names it was given, which match the same layers.
    auto again = base();
    auto reloaded = model::load_adapter(mine, *again);
    CHECK(reloaded.adapted == info.adapted);
  }
}

TEST_CASE("trlx still writes the adapters that PEFT was checked to load", "[model][lora][golden]") {
  // tests/data/lora/trlx_saved (LoRA) and trlx_saved_dora (DoRA) were
  // written by trlx and loaded by PeftModel.from_pretrained in
  // lora_fixtures.py, with PEFT's logits equal.
  for (const auto& [dir, from] : {std::pair<const char*, const char*>{"trlx_saved", "all_linear"},
                                  std::pair<const char*, const char*>{"trlx_saved_dora", "dora"}}) {
  INFO(dir);
  const auto saved = lora_data() / dir;
  auto check = read_json(saved / "peft_check.json");
  CHECK(check["ok"] == true);
  CHECK(check["max_abs_diff_vs_peft_logits"].get<double>() < 1e-5);
  auto m = base();
  auto info = model::load_adapter(lora_data() / from / "adapter", *m);
  TempDir tmp;
  model::AdapterSaveOptions o;
  o.base_model_name_or_path = "examples/tiny-model";
  model::save_adapter(tmp.path / "a", *m, info, o);
  CHECK(read_json(tmp.path / "a" / "adapter_config.json") == read_json(saved / "adapter_config.json"));
  auto got = io::SafetensorsFile::open(tmp.path / "a" / "adapter_model.safetensors");
  auto want = io::SafetensorsFile::open(saved / "adapter_model.safetensors");
  CHECK(tensor_names(tmp.path / "a" / "adapter_model.safetensors") == tensor_names(saved / "adapter_model.safetensors"));
  for (const auto& t : want.tensors()) CHECK(torch::equal(got.get(t.name), want.get(t.name)));
  }
}

TEST_CASE("save and load round trip: same adapters, same logits", "[model][lora]") {
  auto ids = io::Checkpoint::open(lora_data() / "default" / "expected.safetensors").get("input_ids", true);
  for (auto head : {model::HeadKind::CausalLM, model::HeadKind::SequenceClassification}) {
    const bool seq_cls = head == model::HeadKind::SequenceClassification;
    INFO((seq_cls ? "score" : "lm"));
    auto m = model::load_language_model(tiny_model(), head);
    model::LoraConfig c;
    c.r = 3;
    c.alpha = 5;
    c.target_modules = std::vector<std::string>{"q_proj", "down_proj"};
    c.modules_to_save = std::vector<std::string>{"post_attention_layernorm"};
    auto info = model::apply_lora(*m, c);
    CHECK(info.copied.size() == (seq_cls ? 3u : 2u));  // two layer norms (+ the score head)
    randomize_adapters(*m, 5);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : m->named_parameters(true))
        if (p.key().find("post_attention_layernorm.weight") != std::string::npos) p.value().add_(0.1);
    }
    TempDir tmp;
    model::AdapterSaveOptions o;
    o.tokenizer_dir = tiny_model();
    model::save_adapter(tmp.path / "adapter", *m, info, o);
    CHECK(fs::exists(tmp.path / "adapter" / "tokenizer.json"));
    auto j = read_json(tmp.path / "adapter" / "adapter_config.json");
    CHECK(j["task_type"] == (seq_cls ? "SEQ_CLS" : "CAUSAL_LM"));
    if (seq_cls) {
      CHECK(j["modules_to_save"] == nlohmann::json{"post_attention_layernorm", "classifier", "score"});
      CHECK(tensor_names(tmp.path / "adapter" / "adapter_model.safetensors").count("base_model.model.score.weight"));
    }
    // A second save replaces the first whole.
    model::save_adapter(tmp.path / "adapter", *m, info, o);
    auto other = model::load_language_model(tiny_model(), head);
    if (seq_cls) {
      torch::NoGradGuard no_grad;
      other->score->weight.normal_();  // the score head must come from the adapter
    }
    auto info2 = model::load_adapter(tmp.path / "adapter", *other);
    CHECK(info2.adapted == info.adapted);
    CHECK(info2.copied == info.copied);
    CHECK(info2.trainable_parameters == info.trainable_parameters);
    torch::NoGradGuard no_grad;
    CHECK(max_diff(other->forward({ids, {}, {}}), m->forward({ids, {}, {}})) == 0.0);
    model::AdaptersDisabled off1(*m), off2(*other);
    if (!seq_cls) CHECK(max_diff(other->forward({ids, {}, {}}), m->forward({ids, {}, {}})) == 0.0);
  }
}

TEST_CASE("LoRA bad input: clear errors, exit 2", "[model][lora][errors]") {
  using test::input_error_of;
  SECTION("a target that matches nothing") {
    auto m = base();
    model::LoraConfig c;
    c.target_modules = std::vector<std::string>{"q_proj", "qkv_proj"};
    auto msg = input_error_of([&] { model::apply_lora(*m, c); });
    CHECK_THAT(msg, Contains("qkv_proj") && Contains("matches no linear layer") && Contains("gate_proj") &&
                        Contains("all-linear"));
  }
  SECTION("lora_r 0") {
    auto m = base();
    model::LoraConfig c;
    c.r = 0;
    CHECK_THAT(input_error_of([&] { model::apply_lora(*m, c); }), Contains("lora_r"));
  }
  SECTION("an unknown module to save") {
    auto m = base();
    model::LoraConfig c;
    c.modules_to_save = std::vector<std::string>{"lm_head"};  // tied: no lm_head
    CHECK_THAT(input_error_of([&] { model::apply_lora(*m, c); }),
               Contains("lm_head") && Contains("embed_tokens") && Contains("model.norm"));
  }
  SECTION("the output head as a target") {
    auto cfg = base()->config();
    cfg.tie_word_embeddings = false;
    model::LanguageModel m(cfg, model::HeadKind::CausalLM);
    model::LoraConfig c;
    c.target_modules = std::vector<std::string>{"lm_head"};
    CHECK_THAT(input_error_of([&] { model::apply_lora(*m, c); }), Contains("lora_modules_to_save"));
  }
  SECTION("adapters twice") {
    auto m = base();
    model::apply_lora(*m, {});
    CHECK_THAT(input_error_of([&] { model::apply_lora(*m, {}); }), Contains("already"));
  }
  SECTION("bad adapter directories") {
    TempDir tmp;
    auto m = base();
    CHECK_THAT(input_error_of([&] { model::load_adapter(tmp.path, *m); }), Contains("adapter_config.json"));
    const auto a = tmp.path / "a";
    fs::copy(lora_data() / "default" / "adapter", a);
    auto j = read_json(a / "adapter_config.json");
    auto write = [&](const nlohmann::json& v) { std::ofstream(a / "adapter_config.json") << v.dump(); };
    auto bad = j;
    bad["target_modules"] = {"nothing_here"};
    write(bad);
    CHECK_THAT(input_error_of([&] { model::load_adapter(a, *base()); }),
               Contains("adapter_config.json") && Contains("nothing_here"));
    bad = j;
    bad["use_dora"] = true;  // DoRA without its magnitudes in the file
    write(bad);
    CHECK_THAT(input_error_of([&] { model::load_adapter(a, *base()); }),
               Contains("lora_magnitude_vector") && Contains("missing"));
    bad = j;
    bad["use_qalora"] = true;
    write(bad);
    CHECK_THAT(input_error_of([&] { model::load_adapter(a, *base()); }), Contains("use_qalora"));
    bad = j;
    bad["r"] = 8;  // the file holds rank-4 tensors
    write(bad);
    CHECK_THAT(input_error_of([&] { model::load_adapter(a, *base()); }),
               Contains("adapter_model.safetensors") && Contains("lora_A.weight") && Contains("shape"));
    bad = j;
    bad["target_modules"] = {"q_proj"};  // the file also holds v_proj adapters
    write(bad);
    CHECK_THAT(input_error_of([&] { model::load_adapter(a, *base()); }), Contains("v_proj.lora_A.weight"));
    bad = j;
    bad["target_modules"] = {"q_proj", "v_proj", "k_proj"};
    write(bad);
    CHECK_THAT(input_error_of([&] { model::load_adapter(a, *base()); }),
               Contains("k_proj.lora_A.weight") && Contains("missing"));
    write(j);
    fs::remove(a / "adapter_model.safetensors");
    CHECK_THAT(input_error_of([&] { model::load_adapter(a, *base()); }), Contains("adapter_model.safetensors"));
  }
}

// Not run by default: lora_fixtures.py --trlx-test runs it to have PEFT load
// what trlx writes.
TEST_CASE("export a trlx-saved adapter for PEFT to load", "[.lora_export]") {
  // TRLX_LORA_EXPORT_CASE: the PEFT case trlx loads and saves again
  // (all_linear by default; dora).
  const char* out = std::getenv("TRLX_LORA_EXPORT_DIR");
  REQUIRE(out);
  const char* which = std::getenv("TRLX_LORA_EXPORT_CASE");
  auto m = base();
  auto info = model::load_adapter(lora_data() / (which ? which : "all_linear") / "adapter", *m);
  model::AdapterSaveOptions o;
  o.base_model_name_or_path = "examples/tiny-model";
  model::save_adapter(out, *m, info, o);
}

// `trlx distill`: the teacher's forward beside the student's, and the chunked divergence between them.
#include "trainers/distill.hpp"

#include <fstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "engine/reference_cache.hpp"
#include "losses/distill.hpp"
#include "model/loading.hpp"

namespace trlx::trainers {

namespace fs = std::filesystem;

namespace {

// The config the group-trainer machinery runs: one completion per prompt,
// one pass over each round.
DistillConfig as_rounds(DistillConfig c) {
  c.num_generations = 1;
  c.num_iterations = 1;
  return c;
}

std::string divergence_name(double beta) {
  if (beta == 0) return "forward KL(teacher || student)";
  if (beta == 1) return "reverse KL(student || teacher)";
  return fmt::format("generalized JSD, mixture {} student + {} teacher", 1 - beta, beta);
}

}  // namespace

nlohmann::json teacher_identity(const fs::path& dir) {
  engine::CacheKey key;
  for (const auto& f : model_files(dir)) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec) fail_input("{}: cannot be read: {}", f.string(), ec.message());
    const bool weights = f.extension() == ".safetensors" || f.extension() == ".bin";
    if (!weights || size <= (uint64_t{64} << 20)) {
      key.file(f);
      continue;
    }
    // A large weight file: its name, size, and 1 MiB at its start, middle and end.
    key.text(f.filename().string());
    key.bytes(&size, sizeof size);
    std::ifstream in(f, std::ios::binary);
    std::vector<char> buf(size_t{1} << 20);
    for (uint64_t at : {uint64_t{0}, size / 2, size - buf.size()}) {
      in.seekg(static_cast<std::streamoff>(at));
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      if (!in) fail_input("{}: cannot be read at byte {}", f.string(), at);
      key.bytes(buf.data(), buf.size());
    }
  }
  return {{"model", dir.string()}, {"fingerprint", key.hex()}};
}

DistillTrainer::DistillTrainer(const DistillConfig& config, PromptSplit prompts, text::Tokenizer tokenizer,
                               int64_t pad_id, std::vector<int64_t> eos_ids, int world_size, nlohmann::json teacher)
    : GroupTrainer(as_rounds(config), "distill", std::move(prompts), std::move(tokenizer), {}, pad_id,
                   std::move(eos_ids), world_size),
      distill_(as_rounds(config)),
      teacher_(std::move(teacher)) {}

OnlineSetup DistillTrainer::setup() {
  OnlineSetup s;
  s.beta_weighs_reference = false;
  s.scores_itself = true;
  return s;
}

double DistillTrainer::num_items(const engine::TensorMap& batch) const {
  return batch.at("completion_mask").sum().item<double>();
}

engine::LossOutput DistillTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  using engine::Role;
  const auto student = completion_hidden(engine, Role::Policy, batch);
  const auto teacher = completion_hidden(engine, Role::Reference, batch);
  const auto mask = batch.at("completion_mask").to(student.device(), torch::kFloat32);
  losses::DivergenceOptions o;
  o.beta = config_.beta;
  // The loss divides by the config's temperature, as TRL's (generation_kwargs
  // may sample at another).
  o.temperature = config_.temperature;
  o.student_softcap = engine.model_config(Role::Policy).final_logit_softcapping.value_or(0.0);
  o.teacher_softcap = engine.model_config(Role::Reference).final_logit_softcapping.value_or(0.0);
  const auto outs = engine.with_heads(Role::Policy, student, Role::Reference,
                                      [&](const torch::Tensor& student_head, const torch::Tensor& teacher_head) {
                                        auto d = losses::token_divergence(student, student_head, teacher,
                                                                          teacher_head, mask, o);
                                        return std::vector<torch::Tensor>{d.loss_sum, d.entropy};
                                      });
  engine::LossOutput out;
  out.loss_sum = outs.at(0);
  out.metrics.add_per_batch("entropy", (outs.at(1) * mask).sum(), mask.sum());
  return out;
}

losses::Advantages DistillTrainer::advantages(const torch::Tensor&, const torch::Tensor&,
                                              const std::optional<torch::Tensor>&, int64_t) {
  throw Error("distill: completions are not scored, so there are no advantages");
}

std::string DistillTrainer::describe() const {
  const auto& c = config_;
  return fmt::format("rounds of {} completions (one per prompt), {} micro-batch(es) each; max {} new tokens, "
                     "temperature {}; beta {}: {}; teacher {}",
                     rounds_.generation_batch_size, rounds_.steps_per_generation, c.max_completion_length,
                     c.temperature, c.beta, divergence_name(c.beta), teacher_.value("model", std::string("?")) +
                         (teacher_.contains("revision") ? " (revision " + teacher_.value("revision", "") + ")" : ""));
}

nlohmann::json DistillTrainer::state() const { return {{"teacher", teacher_}}; }

void DistillTrainer::restore_state(const nlohmann::json& state) {
  const auto saved = state.is_object() ? state.value("teacher", nlohmann::json()) : nlohmann::json();
  if (!saved.is_object()) {
    log::warn("distill: the checkpoint does not say which teacher it was trained against; going on with {}",
              teacher_.value("model", std::string("?")));
    return;
  }
  if (saved.value("fingerprint", std::string()) != teacher_.value("fingerprint", std::string()))
    fail_input("distill: the checkpoint was trained against the teacher {} (fingerprint {}), and this run's teacher "
               "{} is another model (fingerprint {}); resume with the same teacher_model_name_or_path, or start a "
               "new run in another output_dir",
               saved.value("model", std::string("?")), saved.value("fingerprint", std::string("?")),
               teacher_.value("model", std::string("?")), teacher_.value("fingerprint", std::string("?")));
}

int run_distill(const DistillConfig& config) {
  const DistillConfig c = as_rounds(config);
  auto r = set_up_online_run(c, "distill", DistillTrainer::setup());
  if (!c.teacher_model_name_or_path)
    fail_input("distill: set teacher_model_name_or_path (the teacher's model directory or hub name)");
  const fs::path dir = *c.teacher_model_name_or_path;
  auto teacher = model::load_language_model(dir, model::HeadKind::CausalLM, c.teacher_dtype.value_or(c.dtype),
                                            /*defer_casts=*/true);
  const int64_t student_vocab = r.engine->model_config(engine::Role::Policy).vocab_size;
  if (teacher->config().vocab_size != student_vocab)
    fail_input("distill: the student {} has a vocabulary of {} tokens and the teacher {} has {}; distillation "
               "compares the teacher's whole next-token distribution with the student's, so both need the same "
               "vocabulary",
               c.model_name_or_path.value_or("?"), student_vocab, dir.string(), teacher->config().vocab_size);
  auto identity = teacher_identity(dir);
  // A hub teacher's revision (its directory above is the cache snapshot of it).
  if (c.teacher_model_revision) identity["revision"] = *c.teacher_model_revision;
  r.engine->set_reference(std::move(teacher));
  DistillTrainer t(c, std::move(r.prompts), std::move(r.text.tokenizer), r.pad_id, r.eos_ids,
                   r.engine->world_size(), std::move(identity));
  if (r.tools) t.set_tools(r.tools);
  if (c.eval_strategy != "no") t.set_eval_prompts(std::move(r.eval_prompts));
  log::info("distill: {}", t.describe());
  return train_to_exit_code(*r.engine, t);
}

}  // namespace trlx::trainers

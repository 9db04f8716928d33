// Engine::generate under mpirun (2 and 3 ranks): under DDP, ZeRO-3 and FSDP,
// each rank's completions equal one process's on the same prompts, for
// every placement of the sharded weights (all gathered for the round, one
// unit at a time, or a budget between), each within its memory bound; ranks
// with far more work than others (uneven prompt counts through one slot)
// keep every rank's gathers matched until all are done.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include "dist/comm/make_communicator.hpp"
#include "dist/strategy/strategy.hpp"
#include "model/saving.hpp"
#include "support.hpp"
#include "support/trainers.hpp"

using namespace trlx;

namespace {

std::shared_ptr<dist::Communicator> world() {
  static std::shared_ptr<dist::Communicator> c = dist::make_mpi_communicator(std::chrono::seconds(60));
  return c;
}

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * t.element_size(); }

}  // namespace

TEST_CASE("generation under every strategy and placement gives one process's completions within its bound",
          "[generate][dist]") {
  const int rank = world()->rank();
  // Rank r has 1 + 2r prompts and one slot: rank 2 decodes five times as
  // many steps as rank 0, which must keep joining the gathers meanwhile.
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < 1 + 2 * rank; ++i) prompts.push_back({5 + i, 17, 33 + rank, 8, 41 - i});
  model::GenerationOptions o;
  o.max_new_tokens = 6;
  o.max_batch = 1;
  // Six layers, so that one unit at a time (with the next prefetched) is
  // well below the whole model; the same seeded weights on every rank.
  model::NewModelSpec spec;
  spec.vocab_size = 304;
  spec.hidden_size = 32;
  spec.num_layers = 6;
  spec.tie_word_embeddings = true;
  auto fresh = [&] {
    model::LanguageModel m(model::new_model_config(spec), model::HeadKind::CausalLM);
    model::init_weights(*m, 3);
    return m;
  };
  auto reference = fresh();
  reference->eval();
  const auto expected = model::generate(*reference, prompts, o).completions;
  // What the sharded units hold: every parameter but the final norm.
  int64_t units_bytes = 0, largest_layer = 0;
  for (const auto& p : reference->named_parameters(true))
    if (p.key() != "model.norm.weight") units_bytes += bytes_of(p.value());
  for (const auto& m : *reference->model->layers) {
    int64_t b = 0;
    for (const auto& p : m->parameters()) b += bytes_of(p);
    largest_layer = std::max(largest_layer, b);
  }
  const int64_t embedding = bytes_of(reference->model->embed_tokens->weight);  // also the head (tied)
  const int64_t per_forward = embedding + 2 * largest_layer;  // a layer, the next one prefetched
  REQUIRE(per_forward < units_bytes / 2);

  for (const std::string preset : {"ddp", "zero3", "fsdp"}) {
    DYNAMIC_SECTION(preset) {
      // Several processes without an accelerate config train under DDP.
      auto c = test::sft_config(preset == "ddp" ? test::Flags{} : test::Flags{{"accelerate_config", preset}});
      engine::Engine engine(c, fresh(), "sft", test::tiny_model(), std::nullopt, world());
      auto& strategy = engine::EngineProbe::strategy(engine);
      const bool sharded = strategy.shards_parameters();
      CHECK(sharded == (preset != "ddp"));
      struct Placement {
        const char* name;
        engine::Engine::GenerationPlacement p;
      };
      const int64_t budget = units_bytes / 2;
      for (const auto& [name, placement] :
           {Placement{"gather all", {true, 0}}, Placement{"one unit at a time", {false, 0}},
            Placement{"half the model", {false, static_cast<double>(budget) / (1024.0 * 1024.0)}}}) {
        INFO(preset << ", " << name << ", rank " << rank << " of " << world()->world_size());
        strategy.reset_peak_gathered_bytes();
        int64_t between = -1;  // gathered bytes held between two forwards
        auto oo = o;
        oo.progress = [&](int64_t, int64_t, int64_t) { between = strategy.gathered_bytes(); };
        auto g = engine.generate(prompts, oo, placement);
        CHECK(g.completions == expected);
        CHECK(strategy.gathered_bytes() == 0);  // everything released after the round
        if (!sharded) continue;
        const int64_t peak = strategy.peak_gathered_bytes();
        INFO("peak " << peak << " bytes, between forwards " << between << ", units " << units_bytes);
        if (placement.gather_all) {
          CHECK(between == units_bytes);
          CHECK(peak == units_bytes);
        } else if (placement.budget_mb == 0) {
          // Per forward: the embedding (kept through the forward, as it is
          // the tied head), a layer and the next one prefetched.
          CHECK(between == 0);
          CHECK(peak <= per_forward);
        } else {
          CHECK(between > 0);
          CHECK(between <= budget);
          CHECK(peak <= between + per_forward);
          CHECK(peak < units_bytes);
        }
      }
    }
  }
}

// Sequence parallelism (DeepSpeed-Ulysses) inside the model, under mpirun
// with 2 and 4 ranks (CMakeLists.txt): each rank's layers see only its share
// of the positions, the gathered hidden states equal one process's forward,
// and the ranks' gradients sum to the gradient of the loss every rank
// computes from them (each rank's share of the work, nothing counted twice
// or lost), for plain, padded, packed, sliding-window, soft-capped,
// sink and latent-attention models, rows of a length no rank count divides,
// and fewer key/value heads than ranks.
#include "dist/strategy/sequence_parallel.hpp"

#include "catch_torch.hpp"
#include "dist/comm/communicator.hpp"
#include "model/decoder.hpp"
#include "model/loading.hpp"
#include "mpi_world.hpp"
#include "support.hpp"

using namespace trlx;

namespace {

double sp_max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

struct SpCase {
  std::string name;
  std::filesystem::path dir;
  // Relative tolerance of the summed gradients: double precision, or
  // float32's where the family computes its attention softmax (soft-capping,
  // sinks) or its router in float32 as transformers does, whose sums then
  // round differently over a share of the positions than over all of them.
  double tolerance = 1e-9;
};

}  // namespace

TEST_CASE("Ulysses and context parallelism: split rows, same hidden states, gradients that sum to one process's",
          "[sp]") {
  auto& comm = dist::test::mpi_comm();
  const int n = comm.world_size();
  auto world = std::shared_ptr<dist::Communicator>(&comm, [](dist::Communicator*) {});
  for (const bool context : {false, true}) {
    auto sp = context ? dist::make_context_parallel(world) : dist::make_sequence_parallel(world);
    REQUIRE(sp->size() == n);
    // Ulysses: consecutive shares of ceil(13 / n); context parallelism: two
    // chunks of ceil(13 / 2n) each.
    const int64_t expected_share = context ? 2 * ((13 + 2 * n - 1) / (2 * n)) : (13 + n - 1) / n;
    const auto models = trlx::test::data_dir() / "models";
    const std::vector<SpCase> cases = {{"tiny (4 heads, 2 key/value heads)", trlx::test::tiny_model()},
                                       {"sliding window", models / "mistral_window"},
                                       {"soft-capped, sliding", models / "gemma2_softcap", 1e-5},
                                       {"sinks, experts", models / "gpt_oss", 1e-5},
                                       {"latent attention, grouped sigmoid routing", models / "deepseek_v3", 1e-5}};
    for (const auto& c : cases) {
      auto model = model::load_language_model(c.dir, model::HeadKind::CausalLM);
      model->to(torch::kDouble);
      const int64_t vocab = model->config().vocab_size;
      torch::manual_seed(7);        // the same rows on every rank
      const int64_t b = 2, t = 13;  // 13: no rank count here divides it
      auto ids = torch::randint(1, vocab, {b, t}, torch::kInt64);
      // Row 1 padded on the left: attention needs an explicit mask.
      auto mask = torch::ones({b, t}, torch::kInt64);
      mask[1].narrow(0, 0, 3).zero_();
      // Packed: two documents per row, positions restarting.
      auto docs = torch::cat({torch::zeros({b, 6}, torch::kInt64), torch::ones({b, t - 6}, torch::kInt64)}, 1);
      auto pos = torch::cat({torch::arange(6, torch::kInt64), torch::arange(t - 6, torch::kInt64)}).expand({b, t});
      const std::vector<std::pair<std::string, model::Batch>> batches = {
          {"padded", model::Batch{ids, mask, torch::Tensor(), torch::Tensor()}},
          {"packed", model::Batch{ids, torch::ones_like(mask), pos.contiguous(), docs}}};
      for (const auto& [what, batch] : batches) {
        INFO((context ? "context parallelism, " : "Ulysses, ") << c.name << ", " << what << " rows, " << n << " ranks");
        // A loss that reads the real positions only (as every trainer's does).
        auto weights = torch::randn({b, t, model->config().hidden_size}, torch::kDouble) *
                       batch.attention_mask.unsqueeze(-1).to(torch::kDouble);
        auto loss_of = [&](const torch::Tensor& h) { return (h * weights).sum(); };
        // One process.
        model->set_sequence_parallel(nullptr);
        model->zero_grad();
        auto whole = model->hidden_states(batch);
        loss_of(whole).backward();
        std::vector<torch::Tensor> expected;
        for (const auto& p : model->parameters())
          expected.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
        // Split over the ranks: each layer sees this rank's share.
        model->set_sequence_parallel(sp);
        model->zero_grad();
        std::vector<int64_t> seen;
        model->model->run_layer = [&](model::DecoderLayerImpl& layer, const torch::Tensor& x, const torch::Tensor& cos,
                                      const torch::Tensor& sin, const model::LayerAttention& attn,
                                      model::KVCache* cache) {
          seen.push_back(x.size(1));
          return layer.forward(x, cos, sin, attn, cache);
        };
        auto split = model->hidden_states(batch);
        model->model->run_layer = nullptr;
        REQUIRE(!seen.empty());
        for (int64_t s : seen) CHECK(s == expected_share);
        REQUIRE(split.sizes() == whole.sizes());
        // Padding positions feed nothing a real position reads.
        auto real = batch.attention_mask.unsqueeze(-1).to(torch::kDouble);
        CHECK(sp_max_diff(split * real, whole.detach() * real) <
              c.tolerance * std::max(1.0, whole.abs().max().item<double>()));
        loss_of(split).backward();
        // Every rank computes the same loss from the gathered rows; the
        // gradients, summed over ranks, are n times one process's.
        size_t i = 0;
        for (const auto& p : model->parameters()) {
          const auto& want = expected[i++];
          if (!want.defined()) continue;
          REQUIRE(p.grad().defined());
          auto sum = p.grad().clone();
          comm.all_reduce(sum)->wait();
          CHECK(sp_max_diff(sum, want * n) < c.tolerance * std::max(1.0, want.abs().max().item<double>()));
        }
      }
      model->set_sequence_parallel(nullptr);
    }
  }
}

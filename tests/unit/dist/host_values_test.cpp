// The device contract of the communicators, checked on CPU ranks. A GPU
// rank's communicator refuses host tensors; on CPU ranks host and device are
// the same, which hides a host tensor handed to a collective. These cases run
// the host-value paths (metric and count sums, parameter agreement, the
// gradient-sync check, the save protocol's announcements) through a
// communicator that declares a GPU and accepts only what came through its
// host_to_device, so they fail here as they would on a GPU.
#include "catch_torch.hpp"

#include <cmath>
#include <set>

#include "dist/comm/host_values.hpp"
#include "dist/comm/make_communicator.hpp"
#include "dist/env/launcher_env.hpp"
#include "dist/strategy/grad_buckets.hpp"
#include "dist/strategy/strategy.hpp"
#include "engine/metrics.hpp"
#include "mpi_world.hpp"
#include "support/checked_communicator.hpp"

using namespace trlx;
using namespace trlx::dist;
using trlx::dist::test::mpi_comm;

namespace {


// Declares cuda:0 over an MPI communicator. Tensors it hands out through
// host_to_device count as on its device; any other tensor is refused as a
// NCCL communicator refuses a host tensor.
class DeclaresGpu : public trlx::test::CheckedCommunicator {
 public:
  using CheckedCommunicator::CheckedCommunicator;
  std::string backend() const override { return "declares-gpu"; }
  torch::Device device() const override { return torch::Device(torch::kCUDA, 0); }
  torch::Tensor host_to_device(const torch::Tensor& host) const override {
    auto t = host.clone();
    staged_.insert(t.data_ptr());
    return t;
  }
  torch::Tensor device_to_host(const torch::Tensor& t) const override {
    REQUIRE(staged_.count(t.data_ptr()));
    return t.clone();
  }

 private:
  void check(const char* op, const torch::Tensor& t) const override {
    if (!staged_.count(t.data_ptr()))
      throw Error(fmt::format("{}: the tensor is on cpu but this communicator works on cuda:0 tensors", op));
  }
  mutable std::set<const void*> staged_;
};

// A strategy whose parameters a test sets directly (setup would broadcast
// the parameters themselves, which live on the host here).
struct BareStrategy : Strategy {
  using Strategy::Strategy;
  std::string name() const override { return "bare"; }
  void setup(const std::vector<NamedParam>& trainable) override { params_ = trainable; }
  void begin_backward(bool, bool) override {}
  void end_backward() override {}
};

}  // namespace

TEST_CASE("a collective handed a host tensor fails under a communicator that declares a GPU", "[mpi]") {
  DeclaresGpu gpu(mpi_comm());
  auto host = torch::ones({3});
  CHECK_THROWS_WITH(gpu.all_reduce(host, ReduceOp::Sum), Catch::Contains("on cpu") && Catch::Contains("cuda:0"));
}

TEST_CASE("host values reach collectives on the communicator's device, with the right values", "[mpi]") {
  DeclaresGpu gpu(mpi_comm());
  const int w = gpu.world_size(), r = gpu.rank();
  std::vector<double> v = {1.0 + r, -2.0 * r};
  all_reduce_values(gpu, v, ReduceOp::Sum);
  CHECK(v[0] == Approx(w + w * (w - 1) / 2.0));
  CHECK(v[1] == Approx(-1.0 * w * (w - 1)));
  std::vector<double> m = {static_cast<double>(r)};
  all_reduce_values(gpu, m, ReduceOp::Max);
  CHECK(m[0] == w - 1);
  const auto all = all_gather_values(gpu, {r, 10 * r});
  REQUIRE(all.size() == static_cast<size_t>(w));
  for (int k = 0; k < w; ++k) CHECK(all[static_cast<size_t>(k)] == std::vector<int64_t>{k, 10 * k});
  // Strings of different lengths, with bytes a metric name may hold.
  const std::string mine = std::string(static_cast<size_t>(r + 1), 'a' + static_cast<char>(r)) + "\x1f\n\xc3\xa9";
  const auto names = all_gather_strings(gpu, mine);
  for (int k = 0; k < w; ++k)
    CHECK(names[static_cast<size_t>(k)] == std::string(static_cast<size_t>(k + 1), 'a' + static_cast<char>(k)) + "\x1f\n\xc3\xa9");
  CHECK(broadcast_value(gpu, 100 + r, 0) == 100);
  // Doubles of a different count on each rank (none on rank 0), exact: NaN,
  // -0.0 and values a sum over zero-padded vectors would round stay as sent.
  std::vector<double> reals;
  for (int i = 0; i < r; ++i) reals.push_back(r == 1 && i == 0 ? -0.0 : 0.1 * r + i);
  if (r == 2) reals.push_back(std::nan(""));
  const auto gathered = all_gather_doubles(gpu, reals);
  REQUIRE(gathered.size() == static_cast<size_t>(w));
  CHECK(gathered[0].empty());
  for (int k = 1; k < w; ++k) {
    const auto& g = gathered[static_cast<size_t>(k)];
    REQUIRE(g.size() == static_cast<size_t>(k + (k == 2 ? 1 : 0)));
    for (int i = 0; i < k; ++i) {
      const double want = k == 1 && i == 0 ? -0.0 : 0.1 * k + i;
      CHECK(g[static_cast<size_t>(i)] == want);
      CHECK(std::signbit(g[static_cast<size_t>(i)]) == std::signbit(want));
    }
    if (k == 2) CHECK(std::isnan(g.back()));
  }
}

TEST_CASE("strategies' sums, parameter agreement and gradient-sync check keep to the device contract", "[mpi]") {
  auto gpu = std::make_shared<DeclaresGpu>(mpi_comm());
  const int r = gpu->rank();
  BareStrategy s(gpu);
  std::vector<double> sums = {1.0};
  s.sum_across_ranks(sums);
  CHECK(sums[0] == gpu->world_size());
  std::vector<double> maxes = {static_cast<double>(r)};
  s.max_across_ranks(maxes);
  CHECK(maxes[0] == gpu->world_size() - 1);
  const auto each = s.gather_across_ranks(std::vector<double>(static_cast<size_t>(r), 0.5 + r));
  REQUIRE(each.size() == static_cast<size_t>(gpu->world_size()));
  for (int k = 0; k < gpu->world_size(); ++k)
    CHECK(each[static_cast<size_t>(k)] == std::vector<double>(static_cast<size_t>(k), 0.5 + k));
  // A tensor sum (KTO's KL estimate): reduced without a host value, and a
  // tensor off the communicator's device goes through its host_to_device.
  const auto t = s.sum_across_ranks(torch::tensor({1.0, static_cast<double>(r)}, torch::kFloat64));
  CHECK(t.device().is_cpu());
  CHECK(t[0].item<double>() == gpu->world_size());
  CHECK(t[1].item<double>() == gpu->world_size() * (gpu->world_size() - 1) / 2);

  auto a = torch::ones({4, 3}, torch::requires_grad());
  auto b = torch::zeros({5}, torch::requires_grad());
  std::vector<NamedParam> params = {{"a", a}, {"b", b}};
  agree_on_parameters(*gpu, params);
  s.setup(params);
  a.mutable_grad() = torch::full({4, 3}, 0.5);
  b.mutable_grad() = torch::arange(5, torch::kFloat);
  s.check_grads_in_sync();
  // A gradient that differs on one rank is named.
  if (r == 1) b.mutable_grad()[2] = 7.0;
  CHECK_THROWS_WITH(s.check_grads_in_sync(), Catch::Contains("parameter b"));
}

TEST_CASE("a metric window is reduced over the union of the ranks' names, micro-batches and extremes", "[mpi]") {
  auto gpu = std::make_shared<DeclaresGpu>(mpi_comm());
  const int w = gpu->world_size(), r = gpu->rank();
  // Two micro-batches; every rank but 0 stood in for the second, so only
  // rank 0 holds its metrics.
  engine::MetricSums window;
  for (int mb = 0; mb < 2; ++mb) {
    if (mb == 1 && r != 0) {
      window.skip_batch();
      continue;
    }
    engine::MetricSums m;
    m.add("loss", torch::tensor(1.0 + r, torch::kFloat64), 1.0);
    m.add_per_batch("acc", torch::tensor(static_cast<double>(r + mb), torch::kFloat64), torch::tensor(2.0, torch::kFloat64));
    m.add_entry("max_reward", torch::tensor(10.0 * r + mb, torch::kFloat64), engine::EntryReduce::Max);
    m.add_entry("min_reward", torch::tensor(-10.0 * r - mb, torch::kFloat64), engine::EntryReduce::Min);
    window.merge(m);
  }
  engine::reduce_over_ranks(*gpu, window);
  // loss: rank 0 twice (1 + 1), every other rank once (r + 1).
  const double loss_sum = 2.0 + (w * (w + 1) / 2.0 - 1.0), loss_n = 1.0 + w;
  CHECK(*window.mean("loss") == Approx(loss_sum / loss_n));
  // acc: micro-batch 0 over every rank, micro-batch 1 rank 0's alone.
  const double acc0 = (w * (w - 1) / 2.0) / (2.0 * w), acc1 = 1.0 / 2.0;
  CHECK(*window.mean("acc") == Approx((acc0 + acc1) / 2));
  // Extremes: micro-batch 0's over every rank, micro-batch 1's rank 0's.
  CHECK(*window.mean("max_reward") == Approx((10.0 * (w - 1) + 1.0) / 2));
  CHECK(*window.mean("min_reward") == Approx((-10.0 * (w - 1) - 1.0) / 2));
}

// The NCCL communicator with one rank on one GPU: every operation and dtype
// goes through c10d's ProcessGroupNCCL and a real TCPStore rendezvous. Runs
// where a GPU is (scripts/gpu_check.sh); elsewhere ctest reports it skipped.
#define CATCH_CONFIG_RUNNER
#include "catch_torch.hpp"

#include <iostream>

#include "dist/comm/communicator.hpp"
#include "dist/comm/host_values.hpp"
#include "dist/comm/make_communicator.hpp"

using namespace trlx::dist;

namespace {

constexpr int kSkip = 77;  // SKIP_RETURN_CODE in CMakeLists.txt

std::unique_ptr<Communicator>& comm() {
  static std::unique_ptr<Communicator> c;
  if (!c) {
    Rendezvous rv;
    rv.host = "127.0.0.1";
    rv.port = 0;  // any free port
    rv.is_server = true;
    c = make_nccl_communicator(rv, torch::Device(torch::kCUDA, 0), std::chrono::seconds(60));
  }
  return c;
}

torch::TensorOptions on_gpu(torch::ScalarType dt) { return torch::TensorOptions().dtype(dt).device(torch::kCUDA, 0); }

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kLong};

}  // namespace

TEST_CASE("nccl: all_reduce sum, avg, max for every dtype") {
  auto& c = *comm();
  CHECK(c.backend() == "nccl");
  CHECK(c.world_size() == 1);
  for (auto dt : kDtypes) {
    INFO(c10::toString(dt));
    for (auto op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      auto t = torch::arange(6, on_gpu(dt));
      auto ref = t.clone();
      c.all_reduce(t, op)->wait();
      CHECK(t.cpu().equal(ref.cpu()));
    }
  }
}

TEST_CASE("nccl: all_gather, reduce_scatter, broadcast, barrier, async order, bytes") {
  auto& c = *comm();
  const int64_t before = c.bytes_communicated();
  for (auto dt : kDtypes) {
    auto in = torch::arange(7, on_gpu(dt));
    auto out = torch::zeros({7}, on_gpu(dt));
    c.all_gather(in, out)->wait();
    CHECK(out.cpu().equal(in.cpu()));
    auto rs = torch::zeros({7}, on_gpu(dt));
    c.reduce_scatter(in, rs, ReduceOp::Sum)->wait();
    CHECK(rs.cpu().equal(in.cpu()));
    auto b = torch::full({3}, 5, on_gpu(dt));
    c.broadcast(b, 0)->wait();
    CHECK(b.cpu().equal(torch::full({3}, 5, torch::TensorOptions().dtype(dt))));
  }
  c.barrier();
  std::vector<torch::Tensor> ts;
  std::vector<WorkPtr> ws;
  for (int i = 0; i < 4; ++i) {
    ts.push_back(torch::full({1 << 20}, i, on_gpu(torch::kFloat)));
    ws.push_back(c.all_reduce(ts.back()));
  }
  for (int i = 3; i >= 0; --i) ws[i]->wait();
  for (int i = 0; i < 4; ++i) CHECK(ts[i].sum().item<double>() == double(i) * (1 << 20));
  CHECK(c.bytes_communicated() > before);
}

TEST_CASE("nccl: host tensors are refused; host values go through the device and back") {
  auto& c = *comm();
  CHECK(c.device() == torch::Device(torch::kCUDA, 0));
  auto host = torch::ones({4});
  CHECK_THROWS_WITH(c.all_reduce(host, ReduceOp::Sum), Catch::Contains("on cpu") && Catch::Contains("cuda:0"));
  std::vector<double> v = {1.5, -2};
  all_reduce_values(c, v, ReduceOp::Sum);
  CHECK(v == std::vector<double>{1.5, -2});
  CHECK(all_gather_values(c, {3, 4}) == std::vector<std::vector<int64_t>>{{3, 4}});
  CHECK(all_gather_strings(c, "loss\nentropy\x1f""0\n") == std::vector<std::string>{"loss\nentropy\x1f""0\n"});
  CHECK(broadcast_value(c, 42) == 42);
}

int main(int argc, char** argv) {
  if (!nccl_available()) {
    std::cout << "SKIPPED: this build's LibTorch has no NCCL (USE_C10D_NCCL); build with the CUDA toolkit to test "
                 "the NCCL communicator\n";
    return kSkip;
  }
  if (!torch::cuda::is_available()) {
    std::cout << "SKIPPED: no CUDA device here; the NCCL communicator is tested by scripts/gpu_check.sh on a GPU "
                 "machine\n";
    return kSkip;
  }
  const int rc = Catch::Session().run(argc, argv);
  comm().reset();
  return rc;
}

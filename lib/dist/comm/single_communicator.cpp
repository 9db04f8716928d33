// One process: every collective is the identity (all_reduce's average over one
// rank is the tensor itself), so single-process training runs the same code
// as a distributed run without a special case in the engine.
#include "dist/comm/comm_common.hpp"
#include "dist/comm/make_communicator.hpp"

namespace trlx::dist {

namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
};

class SingleCommunicator : public Communicator {
 public:
  explicit SingleCommunicator(torch::Device device) : device_(device) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "single"; }
  torch::Device device() const override { return device_; }

  // The same contract as with several ranks, so that a one-GPU run catches
  // a host tensor handed to a collective as a multi-GPU run would.
  WorkPtr all_reduce(torch::Tensor& t, ReduceOp) override {
    detail::check_tensor("all_reduce", t, device_);
    bytes_ += t.nbytes();
    return done();
  }
  WorkPtr all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    detail::check_tensor("all_gather", in, device_);
    detail::check_tensor("all_gather", out, device_);
    check_same(in, out, "all_gather");
    if (!in.is_same(out)) out.copy_(in.view_as(out));
    bytes_ += in.nbytes();
    return done();
  }
  WorkPtr reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp) override {
    detail::check_tensor("reduce_scatter", in, device_);
    detail::check_tensor("reduce_scatter", out, device_);
    check_same(in, out, "reduce_scatter");
    if (!in.is_same(out)) out.copy_(in.view_as(out));
    bytes_ += in.nbytes();
    return done();
  }
  WorkPtr broadcast(torch::Tensor& t, int root) override {
    detail::check_tensor("broadcast", t, device_);
    if (root != 0) fail("broadcast: root {} does not exist in a world of 1 rank", root);
    bytes_ += t.nbytes();
    return done();
  }
  WorkPtr all_to_all(const torch::Tensor& in, torch::Tensor& out) override {
    detail::check_tensor("all_to_all", in, device_);
    detail::check_tensor("all_to_all", out, device_);
    detail::check_all_to_all(in, out, 1);
    if (!in.is_same(out)) out.copy_(in.view_as(out));
    bytes_ += in.nbytes();
    return done();
  }
  std::shared_ptr<Communicator> split(int, int) override { return std::make_shared<SingleCommunicator>(device_); }
  void barrier() override {}
  int64_t bytes_communicated() const override { return bytes_; }

 private:
  static WorkPtr done() {
    static const WorkPtr w = std::make_shared<DoneWork>();
    return w;
  }
  static void check_same(const torch::Tensor& in, const torch::Tensor& out, const char* op) {
    if (in.numel() != out.numel())
      fail("{}: with 1 rank the input has as many elements as the output ({} vs {})", op, in.numel(), out.numel());
  }
  torch::Device device_;
  int64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator(torch::Device device) {
  return std::make_unique<SingleCommunicator>(device);
}

}  // namespace trlx::dist

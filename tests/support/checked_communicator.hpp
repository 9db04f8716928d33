#pragma once
// A communicator for tests that hands every collective to another one after
// checking each tensor it is given (check throws to refuse one), so a test
// can make visible on CPU ranks what only a GPU communicator would refuse.
#include <memory>
#include <string>

#include "dist/comm/communicator.hpp"

namespace trlx::test {

class CheckedCommunicator : public dist::Communicator {
 public:
  explicit CheckedCommunicator(dist::Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string backend() const override { return inner_.backend(); }
  torch::Device device() const override { return inner_.device(); }
  dist::WorkPtr all_reduce(torch::Tensor& t, dist::ReduceOp op) override {
    check("all_reduce", t);
    return inner_.all_reduce(t, op);
  }
  dist::WorkPtr all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    check("all_gather", in);
    check("all_gather", out);
    return inner_.all_gather(in, out);
  }
  dist::WorkPtr reduce_scatter(const torch::Tensor& in, torch::Tensor& out, dist::ReduceOp op) override {
    check("reduce_scatter", in);
    check("reduce_scatter", out);
    return inner_.reduce_scatter(in, out, op);
  }
  dist::WorkPtr broadcast(torch::Tensor& t, int root) override {
    check("broadcast", t);
    return inner_.broadcast(t, root);
  }
  dist::WorkPtr all_to_all(const torch::Tensor& in, torch::Tensor& out) override {
    check("all_to_all", in);
    check("all_to_all", out);
    return inner_.all_to_all(in, out);
  }
  // The parts are the inner communicator's own, unchecked.
  std::shared_ptr<dist::Communicator> split(int color, int key) override { return inner_.split(color, key); }
  void barrier() override { inner_.barrier(); }
  int64_t bytes_communicated() const override { return inner_.bytes_communicated(); }

 protected:
  // Throws when `t` may not be handed to `op`.
  virtual void check(const char* op, const torch::Tensor& t) const = 0;
  dist::Communicator& inner_;
};

}  // namespace trlx::test

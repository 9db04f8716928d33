// Ulysses' all-to-all, context parallelism's gathers, each with its backward.
#include "dist/strategy/sequence_parallel.hpp"

#include <torch/torch.h>

#include "model/decoder.hpp"

namespace trlx::dist {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [B, H, T/n, D] -> [B, H/n, T, D]: head group j goes to rank j, which puts
// rank i's positions at [i * T/n, (i + 1) * T/n).
torch::Tensor positions_to_heads(Communicator& c, const torch::Tensor& x) {
  const int64_t n = c.world_size(), b = x.size(0), h = x.size(1) / n, tl = x.size(2), d = x.size(3);
  auto send = x.reshape({b, n, h, tl, d}).permute({1, 0, 2, 3, 4}).contiguous();
  auto recv = torch::empty_like(send);
  c.all_to_all(send, recv)->wait();
  return recv.permute({1, 2, 0, 3, 4}).reshape({b, h, n * tl, d});
}

// The inverse: [B, H/n, T, D] -> [B, H, T/n, D].
torch::Tensor heads_to_positions(Communicator& c, const torch::Tensor& y) {
  const int64_t n = c.world_size(), b = y.size(0), h = y.size(1), tl = y.size(2) / n, d = y.size(3);
  auto send = y.reshape({b, h, n, tl, d}).permute({2, 0, 1, 3, 4}).contiguous();
  auto recv = torch::empty_like(send);
  c.all_to_all(send, recv)->wait();
  return recv.permute({1, 0, 2, 3, 4}).reshape({b, n * h, tl, d});
}

Communicator& comm_of(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}

// One exchange and its backward, the inverse exchange: `to_heads` picks
// which way the forward goes.
struct Exchange : torch::autograd::Function<Exchange> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Communicator* c, bool to_heads) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(c);
    ctx->saved_data["to_heads"] = to_heads;
    return to_heads ? positions_to_heads(*c, x) : heads_to_positions(*c, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Communicator& c = comm_of(ctx);
    return {ctx->saved_data["to_heads"].toBool() ? heads_to_positions(c, g[0]) : positions_to_heads(c, g[0]),
            torch::Tensor(), torch::Tensor()};
  }
};

// Every rank's share along `dim`, in rank order; backward: the gradients of
// every rank summed onto each rank's share (reduce-scatter).
struct Gather : torch::autograd::Function<Gather> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t dim, Communicator* c) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(c);
    ctx->saved_data["dim"] = dim;
    // Along the first dimension the ranks' flat shares follow one another.
    auto send = x.movedim(dim, 0).contiguous();
    auto sizes = send.sizes().vec();
    sizes[0] *= c->world_size();
    auto out = torch::empty(sizes, x.options());
    c->all_gather(send, out)->wait();
    return out.movedim(0, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Communicator& c = comm_of(ctx);
    const int64_t dim = ctx->saved_data["dim"].toInt();
    auto send = g[0].movedim(dim, 0).contiguous();
    auto sizes = send.sizes().vec();
    sizes[0] /= c.world_size();
    auto mine = torch::empty(sizes, send.options());
    c.reduce_scatter(send, mine, ReduceOp::Sum)->wait();
    return {mine.movedim(0, dim), torch::Tensor(), torch::Tensor()};
  }
};

class Group final : public model::SequenceParallel {
 public:
  Group(std::shared_ptr<Communicator> group, Kind kind) : group_(std::move(group)), kind_(kind) {}
  Kind kind() const override { return kind_; }
  int size() const override { return group_->world_size(); }
  int rank() const override { return group_->rank(); }
  torch::Tensor to_heads(const torch::Tensor& x) override { return Exchange::apply(x, group_.get(), true); }
  torch::Tensor to_positions(const torch::Tensor& x) override { return Exchange::apply(x, group_.get(), false); }
  torch::Tensor gather(const torch::Tensor& x, int64_t dim) override { return Gather::apply(x, dim, group_.get()); }

 private:
  std::shared_ptr<Communicator> group_;
  Kind kind_;
};

}  // namespace

std::shared_ptr<model::SequenceParallel> make_sequence_parallel(std::shared_ptr<Communicator> group) {
  return std::make_shared<Group>(std::move(group), model::SequenceParallel::Kind::Ulysses);
}

std::shared_ptr<model::SequenceParallel> make_context_parallel(std::shared_ptr<Communicator> group) {
  return std::make_shared<Group>(std::move(group), model::SequenceParallel::Kind::Context);
}

}  // namespace trlx::dist

// ZeRO stages 1 and 2: the optimizer state is split across ranks.
//
// Layout: the gradient buckets (GradBuckets, shared with DDP) are the flat
// space. Each bucket is split over the ranks with shard_of, so uneven sizes
// need no padding; rank r owns slice shard_of(bucket, world, r) of every
// bucket. A parameter overlaps a rank's slice in at most one contiguous
// piece; the rank keeps that piece as an fp32 master tensor, and those
// pieces are what its optimizer updates (Adam is elementwise, so updating
// pieces equals updating whole tensors). After the step each rank's pieces
// are all-gathered, bucket by bucket, into the parameters every rank
// computes with.
//
// Stage 1 all-reduces gradients (as DDP) on the last micro-step and copies
// its slice into the masters' gradients. Stage 2 reduce-scatters every
// micro-step's gradients as backward produces them and drops the full
// gradient right after its bucket is flattened, so a rank holds full
// gradients only for buckets in flight and its 1/world slice after.
#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"
#include "dist/strategy/grad_buckets.hpp"
#include "dist/strategy/strategy.hpp"

namespace trlx::dist {

namespace {

// The part of one parameter this rank owns.
struct Piece {
  size_t param = 0;
  int64_t param_offset = 0;  // in the flattened parameter
  int64_t shard_offset = 0;  // in this rank's slice of the bucket
  int64_t numel = 0;
  torch::Tensor master;      // fp32, what the optimizer updates
};

class ZeroStrategy : public Strategy {
 public:
  ZeroStrategy(std::shared_ptr<Communicator> comm, ZeroOptions o) : Strategy(std::move(comm)), o_(std::move(o)) {
    if (o_.stage != 1 && o_.stage != 2) throw Error(fmt::format("ZeRO stage {} is not built by this strategy", o_.stage));
    if (o_.offload_optimizer_device != "none" && o_.offload_optimizer_device != "cpu")
      fail_input("offload_optimizer_device: {} is not supported by trlx; use cpu or none", o_.offload_optimizer_device);
  }
  std::string name() const override { return fmt::format("zero{}", o_.stage); }
  bool shards_optimizer_state() const override { return true; }

  void setup(const std::vector<NamedParam>& trainable) override {
    params_ = trainable;
    agree_and_broadcast(*comm_, params_);
    buckets_ = std::make_unique<GradBuckets>(params_, o_.bucket_cap_mb, [this](GradBucket& b) { launch(b); });
    pieces_.assign(buckets_->buckets().size(), {});
    torch::NoGradGuard ng;
    for (size_t bi = 0; bi < buckets_->buckets().size(); ++bi) {
      const auto& b = buckets_->buckets()[bi];
      const Shard s = shard_of(b.numel, world_size(), rank());
      for (size_t j = 0; j < b.members.size(); ++j) {
        const auto& p = params_[b.members[j]].param;
        const int64_t lo = std::max(b.offsets[j], s.offset), hi = std::min(b.offsets[j] + p.numel(), s.offset + s.numel);
        if (lo >= hi) continue;
        Piece piece;
        piece.param = b.members[j];
        piece.param_offset = lo - b.offsets[j];
        piece.shard_offset = lo - s.offset;
        piece.numel = hi - lo;
        pieces_[bi].push_back(std::move(piece));
      }
    }
    // Pieces are not added after this, so pointers to them stay valid.
    piece_of_.assign(params_.size(), nullptr);
    for (auto& bucket_pieces : pieces_)
      for (auto& piece : bucket_pieces) piece_of_[piece.param] = &piece;
    on_weights_loaded();
  }

  void on_weights_loaded() override {
    torch::NoGradGuard ng;
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(master_device());
    for (auto& bucket_pieces : pieces_)
      for (auto& piece : bucket_pieces) {
        auto src = params_[piece.param].param.detach().reshape({-1}).narrow(0, piece.param_offset, piece.numel);
        if (piece.master.defined())
          piece.master.copy_(src);
        else
          piece.master = src.to(opts, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
      }
  }

  std::vector<std::vector<torch::Tensor>> optimizer_groups(const std::vector<std::vector<size_t>>& groups) override {
    std::vector<std::vector<torch::Tensor>> out;
    for (const auto& g : groups) {
      out.emplace_back();
      for (size_t i : g)
        if (piece_of_[i]) out.back().push_back(piece_of_[i]->master);
    }
    return out;
  }

  void begin_backward(bool sync, bool has_data) override {
    has_data_ = has_data;
    // Stage 2 reduces every micro-step into the owned slice; stage 1 lets
    // gradients accumulate locally until the last one.
    buckets_->begin(o_.stage == 2 || sync);
  }

  void end_backward() override {
    if (!buckets_->active()) return;
    auto unused = buckets_->finish();
    torch::NoGradGuard ng;
    for (size_t bi = 0; bi < buckets_->buckets().size(); ++bi) {
      auto& b = buckets_->buckets()[bi];
      if (o_.stage == 1) {
        // The reduced bucket: the whole gradient stays in the parameters (as
        // under DDP) and this rank's slice goes to its masters.
        const Shard s = shard_of(b.numel, world_size(), rank());
        buckets_->unflatten(b, b.flat);
        b.out = b.flat.narrow(0, s.offset, s.numel);
      }
      for (auto& piece : pieces_[bi]) {
        auto g = b.out.narrow(0, piece.shard_offset, piece.numel);
        auto& mg = piece.master.mutable_grad();
        if (mg.defined())
          mg.add_(g.to(mg.options()));
        else
          mg = g.to(piece.master.options(), /*non_blocking=*/false, /*copy=*/true);
      }
      b.flat = torch::Tensor();
      b.out = torch::Tensor();
    }
    if (!unused.empty() && has_data_ && !o_.find_unused_parameters) fail_unused_parameters(unused, name());
  }

  double clip_grad_norm(double max_norm) override {
    // The global norm from the slices: each rank's sum of squares, summed.
    torch::NoGradGuard ng;
    auto sq = torch::zeros({1}, torch::kFloat64);
    for (auto& bucket_pieces : pieces_)
      for (auto& piece : bucket_pieces)
        if (piece.master.grad().defined()) sq += piece.master.grad().to(torch::kFloat64).pow(2).sum().cpu();
    auto total = sq.to(params_.empty() ? torch::Device(torch::kCPU) : params_.front().param.device());
    comm_->all_reduce(total, ReduceOp::Sum)->wait();
    const double norm = std::sqrt(total.item<double>());
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1)
      for (auto& bucket_pieces : pieces_)
        for (auto& piece : bucket_pieces)
          if (piece.master.grad().defined()) piece.master.mutable_grad().mul_(coef);
    return norm;
  }

  void after_optimizer_step() override {
    // Each bucket: this rank's updated slice in the parameters' dtype,
    // gathered from all ranks; the next bucket's gather is started before
    // the current one is unpacked.
    torch::NoGradGuard ng;
    auto& bs = buckets_->buckets();
    auto start = [&](size_t bi) {
      auto& b = bs[bi];
      const Shard s = shard_of(b.numel, world_size(), rank());
      const auto opts = torch::TensorOptions().dtype(b.dtype).device(b.device);
      auto mine = torch::empty({s.numel}, opts);
      for (auto& piece : pieces_[bi]) mine.narrow(0, piece.shard_offset, piece.numel).copy_(piece.master);
      b.out = mine;
      b.flat = torch::empty({b.numel}, opts);
      b.work = comm_->all_gather(b.out, b.flat);
    };
    if (!bs.empty()) start(0);
    for (size_t bi = 0; bi < bs.size(); ++bi) {
      if (bi + 1 < bs.size()) start(bi + 1);
      auto& b = bs[bi];
      b.work->wait();
      for (size_t j = 0; j < b.members.size(); ++j) {
        auto& p = params_[b.members[j]].param;
        p.detach().view({-1}).copy_(b.flat.narrow(0, b.offsets[j], p.numel()));
      }
      b.flat = torch::Tensor();
      b.out = torch::Tensor();
    }
    // The next step starts without gradients (the optimizer clears only
    // the masters').
    for (auto& p : params_) p.param.mutable_grad() = torch::Tensor();
  }

  void check_grads_in_sync() override {
    if (o_.stage == 1) return Strategy::check_grads_in_sync();
    // Under stage 2 the reduction leaves no full gradient behind; one that
    // is there came from a backward the strategy did not see.
    for (const auto& p : params_)
      if (p.param.grad().defined())
        throw Error(fmt::format("gradients are out of sync across ranks: parameter {} holds a gradient that was not "
                                "reduced (debug_check_grad_sync_steps). Every forward that feeds the loss must go "
                                "through the engine.",
                                p.name));
  }

 private:
  torch::Device master_device() const {
    if (o_.offload_optimizer_device == "cpu" || params_.empty()) return torch::kCPU;
    return params_.front().param.device();
  }

  void launch(GradBucket& b) {
    b.flat = buckets_->flatten(b);
    const ReduceOp op = o_.sum_gradients ? ReduceOp::Sum : ReduceOp::Avg;
    if (o_.stage == 1) {
      b.work = comm_->all_reduce(b.flat, op);
      return;
    }
    // The full gradients are in the flat buffer now; drop them.
    for (size_t m : b.members) params_[m].param.mutable_grad() = torch::Tensor();
    b.out = torch::empty({shard_of(b.numel, world_size(), rank()).numel}, b.flat.options());
    b.work = comm_->reduce_scatter(b.flat, b.out, op);
  }

  ZeroOptions o_;
  std::unique_ptr<GradBuckets> buckets_;
  std::vector<std::vector<Piece>> pieces_;  // per bucket
  std::vector<Piece*> piece_of_;            // per parameter; null where this rank owns none of it
  bool has_data_ = true;
};

}  // namespace

std::unique_ptr<Strategy> make_zero_strategy(std::shared_ptr<Communicator> comm, const ZeroOptions& options) {
  return std::make_unique<ZeroStrategy>(std::move(comm), options);
}

}  // namespace trlx::dist

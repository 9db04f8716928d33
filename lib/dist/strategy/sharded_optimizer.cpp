// The optimizer half of every ZeRO layout: each rank updates its slice from fp32 master copies.
#include "dist/strategy/sharded_optimizer.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"

// A LibTorch with c10d NCCL is a CUDA build, whose c10_cuda trlx links.
#if defined(USE_C10D_NCCL)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trlx::dist {

// Gradients offloaded from a GPU reach the host on a stream of their own.
// Each bucket's copy is queued as its reduction is launched, ordered after
// that reduction on this stream only, so it runs while backward goes on with
// earlier layers on the compute stream; the host waits once, at the end.
struct ShardedOptimizer::OffloadStream {
#if defined(USE_C10D_NCCL)
  explicit OffloadStream(torch::Device device) : stream(c10::cuda::getStreamFromPool(false, device.index())) {}
  c10::cuda::CUDAStream stream;
  // Per bucket: recorded on the offload stream once the bucket's reduction
  // has ended, for the compute stream to wait on where it reads the result.
  std::vector<c10::cuda::CUDAEvent> reduced;
  bool queued = false;
#endif
};

ShardedOptimizer::~ShardedOptimizer() = default;

ShardedOptimizer::ShardedOptimizer(std::shared_ptr<Communicator> comm, Options o)
    : Strategy(std::move(comm)), o_(std::move(o)) {
  if (o_.offload_optimizer_device != "none" && o_.offload_optimizer_device != "cpu")
    fail_input("offload_optimizer_device: {} is not supported by trlx; use cpu or none", o_.offload_optimizer_device);
}

void ShardedOptimizer::shard_buckets(std::unique_ptr<GradBuckets> buckets, std::vector<torch::Tensor> held_shards) {
  buckets_ = std::move(buckets);
  const auto& bs = buckets_->buckets();
  held_shards_ = std::move(held_shards);
  held_shards_.resize(bs.size());
  pieces_.assign(bs.size(), {});
  for (size_t bi = 0; bi < bs.size(); ++bi) {
    const auto& b = bs[bi];
    const Shard s = shard_of(b.numel, shard_count(), shard_rank());
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

void ShardedOptimizer::on_weights_loaded() {
  torch::NoGradGuard ng;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(master_device());
  for (size_t bi = 0; bi < pieces_.size(); ++bi) {
    const auto& held = held_shards_[bi];
    for (auto& piece : pieces_[bi]) {
      auto src = held.defined()
                     ? held.narrow(0, piece.shard_offset, piece.numel)
                     : params_[piece.param].param.detach().reshape({-1}).narrow(0, piece.param_offset, piece.numel);
      // An fp32 shard on the optimizer's device is its own master (no second
      // fp32 copy); new weights written into the shard are the master's.
      if (held.defined() && src.scalar_type() == torch::kFloat32 && src.device() == opts.device()) {
        if (!piece.master.defined()) piece.master = src.detach().requires_grad_(true);
        continue;
      }
      if (piece.master.defined())
        piece.master.copy_(src);
      else
        piece.master = host_buffer(src.sizes()).copy_(src).requires_grad_(true);
    }
  }
}

bool ShardedOptimizer::pinned_offload() const {
  // Offloaded from a GPU: masters and their gradients live in page-locked
  // host memory, so copies to and from the GPU run without the host waiting
  // on each (a pageable copy is staged and synchronous). A build without
  // c10d NCCL has no stream to run them on and copies synchronously.
#if defined(USE_C10D_NCCL)
  return master_device().is_cpu() && !params_.empty() && params_.front().param.device().is_cuda();
#else
  return false;
#endif
}

torch::Tensor ShardedOptimizer::host_buffer(at::IntArrayRef sizes) const {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(master_device());
  if (pinned_offload()) opts = opts.pinned_memory(true);
  return torch::empty(sizes, opts);
}

std::vector<std::vector<torch::Tensor>> ShardedOptimizer::optimizer_groups(
    const std::vector<std::vector<size_t>>& groups) {
  std::vector<std::vector<torch::Tensor>> out;
  for (const auto& g : groups) {
    out.emplace_back();
    for (size_t i : g)
      if (piece_of_[i]) out.back().push_back(piece_of_[i]->master);
  }
  return out;
}

void ShardedOptimizer::begin_backward(bool sync, bool has_data) {
  has_data_ = has_data;
  // Sharded gradients are reduced every micro-step into the owned slice;
  // otherwise they accumulate locally until the last one.
  buckets_->begin(o_.shard_gradients || sync);
}

void ShardedOptimizer::launch(GradBucket& b) {
  b.flat = buckets_->flatten(b);
  const ReduceOp op = o_.sum_gradients ? ReduceOp::Sum : ReduceOp::Avg;
  const Shard s = shard_of(b.numel, shard_count(), shard_rank());
  if (!o_.shard_gradients) {
    b.work = comm_->all_reduce(b.flat, op);
    b.out = b.flat.narrow(0, s.offset, s.numel);
  } else {
    // The full gradients are in the flat buffer now; drop them.
    for (size_t m : b.members) params_[m].param.mutable_grad() = torch::Tensor();
    b.out = torch::empty({s.numel}, b.flat.options());
    b.work = shards().reduce_scatter(b.flat, b.out, op);
    if (o_.groups.across_replicas) {
      // Hybrid: each replica's reduced shard, reduced across the replicas
      // (ordered after the first on the device; MPI finishes it here).
      b.work->wait();
      b.work = o_.groups.across_replicas->all_reduce(b.out, op);
    }
  }
  if (pinned_offload()) queue_to_host(static_cast<size_t>(&b - buckets_->buckets().data()));
}

void ShardedOptimizer::queue_to_host(size_t bi) {
#if defined(USE_C10D_NCCL)
  auto& b = buckets_->buckets()[bi];
  if (!offload_) offload_ = std::make_unique<OffloadStream>(b.out.device());
  auto& os = *offload_;
  if (os.reduced.size() < buckets_->buckets().size()) os.reduced.resize(buckets_->buckets().size());
  torch::NoGradGuard ng;
  // The offload stream, not the compute stream, waits for the reduction;
  // the compute stream waits only where it reads an all-reduced bucket. It
  // also waits for what the compute stream queued up to now, which orders
  // it after the reduction under a communicator that runs on the compute
  // stream itself.
  c10::cuda::CUDAEvent launched;
  launched.record(c10::cuda::getCurrentCUDAStream(os.stream.device_index()));
  launched.block(os.stream);
  c10::cuda::CUDAStreamGuard on_offload(os.stream);
  b.work->wait();
  os.reduced[bi].record(os.stream);
  for (auto& piece : pieces_[bi]) {
    piece.to_host = host_buffer({piece.numel});
    piece.to_host.copy_(b.out.narrow(0, piece.shard_offset, piece.numel), /*non_blocking=*/true);
  }
  // The compute stream frees the bucket's buffers without waiting for the
  // reduction (c10d keeps its own references only until the wait above), so
  // their memory is not reused before this stream has passed the reduction
  // and the copies.
  for (const auto* t : {&b.flat, &b.out})
    if (t->defined()) c10::cuda::CUDACachingAllocator::recordStream(t->storage().data_ptr(), os.stream);
  os.queued = true;
#else
  (void)bi;
#endif
}

void ShardedOptimizer::compute_waits_for_reduction(size_t bi) {
#if defined(USE_C10D_NCCL)
  if (offload_ && bi < offload_->reduced.size())
    offload_->reduced[bi].block(c10::cuda::getCurrentCUDAStream(offload_->stream.device_index()));
#else
  (void)bi;
#endif
}

void ShardedOptimizer::wait_for_host_copies() {
#if defined(USE_C10D_NCCL)
  if (!offload_ || !offload_->queued) return;
  offload_->stream.synchronize();
  offload_->queued = false;
#endif
}

void ShardedOptimizer::end_backward() {
  if (!buckets_->active()) return;
  auto unused = buckets_->finish();
  torch::NoGradGuard ng;
  std::vector<Piece*> on_host;
  for (size_t bi = 0; bi < buckets_->buckets().size(); ++bi) {
    auto& b = buckets_->buckets()[bi];
    // An all-reduced bucket's whole gradient goes back to the parameters.
    if (!o_.shard_gradients) {
      compute_waits_for_reduction(bi);
      buckets_->unflatten(b, b.flat);
    }
    for (auto& piece : pieces_[bi]) {
      if (piece.to_host.defined()) {  // queued on the offload stream at launch
        on_host.push_back(&piece);
        continue;
      }
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
  wait_for_host_copies();
  for (Piece* piece : on_host) {
    auto& mg = piece->master.mutable_grad();
    if (mg.defined())
      mg.add_(piece->to_host);
    else
      mg = piece->to_host;
    piece->to_host = torch::Tensor();
  }
  if (!unused.empty() && has_data_ && !o_.find_unused_parameters) fail_unused_parameters(unused, name());
}

double ShardedOptimizer::clip_grad_norm(double max_norm, double inv_scale) {
  // The global norm from the slices: each rank's sum of squares, summed.
  torch::NoGradGuard ng;
  // Summed where the masters live (the GPU, or the host under offload), one
  // transfer to the communicator's device, one read of the result.
  auto total = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(comm_->device()));
  std::vector<std::pair<torch::Device, torch::Tensor>> by_device;
  for (auto& bucket_pieces : pieces_)
    for (auto& piece : bucket_pieces) {
      const auto& g = piece.master.grad();
      if (!g.defined()) continue;
      auto s = g.to(torch::kFloat64).pow(2).sum().view({1});
      auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& e) { return e.first == g.device(); });
      if (it == by_device.end()) by_device.emplace_back(g.device(), s);
      else it->second += s;
    }
  for (auto& [device, sq] : by_device) total += sq.to(comm_->device());
  // Every replica holds the same slices: summed over one replica's ranks.
  shards().all_reduce(total, ReduceOp::Sum)->wait();
  // A loss scale is a power of two: the norm of the scaled slices times
  // `inv_scale` is the true norm, and one multiplication by inv_scale times
  // the clip coefficient gives what unscaling and then clipping would.
  const double norm = std::sqrt(total.item<double>()) * inv_scale;
  if (!std::isfinite(norm)) return norm;
  const double factor = inv_scale * std::min(1.0, max_norm / (norm + 1e-6));
  if (factor != 1.0)
    for (auto& bucket_pieces : pieces_)
      for (auto& piece : bucket_pieces)
        if (piece.master.grad().defined()) piece.master.mutable_grad().mul_(factor);
  return norm;
}

void ShardedOptimizer::after_optimizer_step() {
  torch::NoGradGuard ng;
  const bool pinned = pinned_offload();
  auto& bs = buckets_->buckets();
  // A held shard takes its masters' values, with no collective; buckets of
  // whole parameters are gathered from every rank's slice, the next bucket's
  // gather started before the current one is unpacked.
  std::vector<size_t> whole;
  for (size_t bi = 0; bi < bs.size(); ++bi) {
    if (!held_shards_[bi].defined()) {
      whole.push_back(bi);
      continue;
    }
    for (auto& piece : pieces_[bi]) {
      auto dst = held_shards_[bi].narrow(0, piece.shard_offset, piece.numel);
      // From page-locked masters the copy is queued on the compute stream,
      // which orders it before any use. The host changes the masters again
      // only after the next backward's wait for its copies to the host,
      // which the offload stream queued after reductions the compute stream
      // launched after these copies.
      if (dst.data_ptr() != piece.master.data_ptr()) dst.copy_(piece.master, /*non_blocking=*/pinned);
    }
  }
  auto start = [&](size_t bi) {
    auto& b = bs[bi];
    const Shard s = shard_of(b.numel, shard_count(), shard_rank());
    const auto opts = torch::TensorOptions().dtype(b.dtype).device(b.device);
    auto mine = torch::empty({s.numel}, opts);
    for (auto& piece : pieces_[bi]) mine.narrow(0, piece.shard_offset, piece.numel).copy_(piece.master, pinned);
    b.out = mine;
    b.flat = torch::empty({b.numel}, opts);
    b.work = shards().all_gather(b.out, b.flat);
  };
  if (!whole.empty()) start(whole[0]);
  for (size_t k = 0; k < whole.size(); ++k) {
    if (k + 1 < whole.size()) start(whole[k + 1]);
    auto& b = bs[whole[k]];
    b.work->wait();
    for (size_t j = 0; j < b.members.size(); ++j) {
      auto& p = params_[b.members[j]].param;
      p.detach().view({-1}).copy_(b.flat.narrow(0, b.offsets[j], p.numel()));
    }
    b.flat = torch::Tensor();
    b.out = torch::Tensor();
  }
  // The next step starts without gradients, and none stay live between
  // steps (the masters' slices included).
  discard_gradients();
}

void ShardedOptimizer::discard_gradients() {
  for (auto& p : params_) p.param.mutable_grad() = torch::Tensor();
  for (auto& bucket_pieces : pieces_)
    for (auto& piece : bucket_pieces) piece.master.mutable_grad() = torch::Tensor();
}

void ShardedOptimizer::check_grads_in_sync() {
  if (!o_.shard_gradients) return Strategy::check_grads_in_sync();
  // The reduction leaves no full gradient behind; one that is there came
  // from a backward the strategy did not see.
  for (const auto& p : params_)
    if (p.param.grad().defined())
      throw Error(fmt::format("gradients are out of sync across ranks: parameter {} holds a gradient that was not "
                              "reduced (debug_check_grad_sync_steps). Every forward that feeds the loss must go "
                              "through the engine.",
                              p.name));
}

torch::Device ShardedOptimizer::master_device() const {
  if (o_.offload_optimizer_device == "cpu" || params_.empty()) return torch::kCPU;
  return params_.front().param.device();
}

}  // namespace trlx::dist

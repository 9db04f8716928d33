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

#include <unordered_map>

#include "core/error.hpp"
#include "dist/strategy/grad_buckets.hpp"
#include "dist/strategy/strategy.hpp"
#include "model/decoder.hpp"

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

// Stage 3: a decoder layer's parameters, trainable and frozen apart (each a
// segment with one dtype), each segment flat and split over the ranks. While
// released, the parameters keep their sizes but their storage holds 0 bytes;
// gathering gives it back and fills it from every rank's shard.
struct Segment {
  std::vector<torch::Tensor> params;
  int64_t numel = 0;
  torch::Tensor full;   // the gathered flat segment the parameters view
  torch::Tensor shard;  // this rank's part, always held
  bool gathered = true;
  WorkPtr pending;      // a gather started ahead (prefetch), not yet waited for
};
struct Unit {
  Segment trainable, frozen;
  int64_t bucket = -1;  // the gradient bucket of `trainable`
  size_t id = 0;        // index in the strategy's units, the same on every rank
  Unit* prev = nullptr;  // the model's previous and next layer (forward order)
  Unit* next = nullptr;
};

void resize_storage(const torch::Tensor& t, int64_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (nbytes == 0)
    s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  else
    s->set_data_ptr_noswap(s->allocator()->allocate(static_cast<size_t>(nbytes)));
  s->set_nbytes(static_cast<size_t>(nbytes));
}

class ZeroStrategy : public Strategy {
 public:
  ZeroStrategy(std::shared_ptr<Communicator> comm, ZeroOptions o) : Strategy(std::move(comm)), o_(std::move(o)) {
    if (o_.stage < 1 || o_.stage > 3) throw Error(fmt::format("ZeRO stage {} is not built by this strategy", o_.stage));
    if (o_.offload_optimizer_device != "none" && o_.offload_optimizer_device != "cpu")
      fail_input("offload_optimizer_device: {} is not supported by trlx; use cpu or none", o_.offload_optimizer_device);
  }
  std::string name() const override { return o_.label.empty() ? fmt::format("zero{}", o_.stage) : o_.label; }
  bool shards_optimizer_state() const override { return true; }
  bool shards_parameters() const override { return o_.stage == 3; }

  void wrap_model(model::LanguageModelImpl& model) override {
    if (o_.stage != 3) return;
    policy_units_ = shard_model(model);
  }
  void wrap_frozen_model(model::LanguageModelImpl& model) override {
    if (o_.stage != 3) return;
    shard_model(model);
  }

  void read_parameter(const torch::Tensor& param) override {
    if (o_.stage != 3) return;
    Unit* u = unit_of(param);
    if (!u || u == reading_) return;  // whole on every rank, or gathered already
    announce(static_cast<int64_t>(u->id));
    switch_reading(u);
  }
  void end_parameter_reads() override {
    if (o_.stage != 3) return;
    announce(-1);
    switch_reading(nullptr);
  }
  void serve_parameter_reads() override {
    if (o_.stage != 3) return;
    for (;;) {
      const int64_t id = announce(0);
      switch_reading(id < 0 ? nullptr : units_.at(static_cast<size_t>(id)).get());
      if (id < 0) return;
    }
  }

  void write_parameters(model::LanguageModelImpl& model,
                        const std::function<void(const std::string&, torch::Tensor&)>& fill) override {
    if (o_.stage != 3) return Strategy::write_parameters(model, fill);
    // Every rank writes the same values, so each unit gets storage locally
    // (no gather), is filled, and keeps only this rank's slice.
    torch::NoGradGuard ng;
    std::unordered_map<Unit*, std::vector<std::pair<std::string, torch::Tensor>>> by_unit;
    for (auto& p : model.named_parameters(true)) {
      if (Unit* u = unit_of(p.value()))
        by_unit[u].emplace_back(p.key(), p.value());
      else
        fill(p.key(), p.value());
    }
    for (auto& [u, params] : by_unit) {
      for (Segment* g : {&u->trainable, &u->frozen})
        if (!g->params.empty() && !g->gathered) resize_storage(g->full, g->numel * g->full.element_size());
      for (auto& [name, t] : params) fill(name, t);
      for (Segment* g : {&u->trainable, &u->frozen}) {
        if (g->params.empty()) continue;
        const Shard s = shard_of(g->numel, world_size(), rank());
        g->shard.copy_(g->full.narrow(0, s.offset, s.numel));
        g->gathered = true;
        release(*g);
      }
    }
  }

  void lerp_parameters(model::LanguageModelImpl& dst, model::LanguageModelImpl& src, double alpha) override {
    if (o_.stage != 3) return Strategy::lerp_parameters(dst, src, alpha);
    // Layer by layer on the shards: the two models' layers are split the
    // same way when they hold the same tensors in the same order.
    torch::NoGradGuard ng;
    const auto& d = units_of_model_.at(&dst);
    const auto& s = units_of_model_.at(&src);
    auto only = [](Unit* u) -> Segment& { return u->frozen.params.empty() ? u->trainable : u->frozen; };
    for (size_t k = 0; k < std::min(d.size(), s.size()); ++k) {
      Segment &a = only(d[k]), &b = only(s[k]);
      bool same = a.params.size() == b.params.size() && (d[k]->trainable.params.empty() || d[k]->frozen.params.empty()) &&
                  (s[k]->trainable.params.empty() || s[k]->frozen.params.empty());
      for (size_t i = 0; same && i < a.params.size(); ++i) same = a.params[i].sizes() == b.params[i].sizes();
      if (!same)
        fail_input("sync_ref_model under parameter sharding needs the reference and the policy to hold the same "
                   "tensors per layer (layer {} differs); train without use_peft or without sync_ref_model",
                   k);
      a.shard.mul_(1.0 - alpha).add_(b.shard.to(a.shard.scalar_type()), alpha);
    }
    auto from = src.named_parameters(true);
    for (auto& p : dst.named_parameters(true)) {
      if (unit_of(p.value())) continue;
      const auto* f = from.find(p.key());
      if (f) p.value().mul_(1.0 - alpha).add_(f->to(p.value().scalar_type()), alpha);
    }
  }

  void setup(const std::vector<NamedParam>& trainable) override {
    params_ = trainable;
    if (o_.stage == 3) {
      agree_on_parameters(*comm_, params_);
      // One bucket per layer (its trainable segment, in the same order, so
      // the bucket's rank slices are the segment's shards), last layer
      // first; the parameters outside the layers (embedding, final norm,
      // head) stay whole on every rank, their gradients in a last bucket.
      std::unordered_map<c10::TensorImpl*, size_t> index;
      for (size_t i = 0; i < params_.size(); ++i) index[params_[i].param.unsafeGetTensorImpl()] = i;
      std::vector<std::vector<size_t>> groups;
      std::vector<bool> in_unit(params_.size(), false);
      for (size_t k = policy_units_.size(); k-- > 0;) {
        auto& u = *policy_units_[k];
        if (u.trainable.params.empty()) continue;
        groups.emplace_back();
        for (const auto& p : u.trainable.params) {
          const size_t i = index.at(p.unsafeGetTensorImpl());
          groups.back().push_back(i);
          in_unit[i] = true;
        }
        u.bucket = static_cast<int64_t>(groups.size() - 1);
      }
      std::vector<size_t> rest;
      for (size_t i = params_.size(); i-- > 0;)
        if (!in_unit[i]) rest.push_back(i);
      groups.push_back(rest);
      buckets_ = std::make_unique<GradBuckets>(params_, groups, [this](GradBucket& b) { launch(b); });
      unit_of_bucket_.assign(buckets_->buckets().size(), nullptr);
      for (Unit* u : policy_units_)
        if (u->bucket >= 0) unit_of_bucket_.at(static_cast<size_t>(u->bucket)) = u;
    } else {
      agree_and_broadcast(*comm_, params_);
      buckets_ = std::make_unique<GradBuckets>(params_, o_.bucket_cap_mb, [this](GradBucket& b) { launch(b); });
      unit_of_bucket_.assign(buckets_->buckets().size(), nullptr);
    }
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
    for (size_t bi = 0; bi < pieces_.size(); ++bi)
      for (auto& piece : pieces_[bi]) {
        Unit* u = unit_of_bucket_[bi];
        auto src = u ? u->trainable.shard.narrow(0, piece.shard_offset, piece.numel)
                     : params_[piece.param].param.detach().reshape({-1}).narrow(0, piece.param_offset, piece.numel);
        // Stage 3 with fp32 shards on the optimizer's device: the shard is
        // the master itself (no second fp32 copy).
        if (u && src.scalar_type() == torch::kFloat32 && src.device() == opts.device()) {
          if (!piece.master.defined()) piece.master = src.detach().requires_grad_(true);
          continue;
        }
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
    buckets_->begin(o_.stage >= 2 || sync);
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
    // Layers whose input needed no gradient (the first, on a frozen
    // embedding) are released here.
    for (auto& u : units_) release(*u);
    in_backward_ = false;
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
    // Stage 3: a layer's updated shard is this rank's masters, no collective
    // (the next forward gathers it).
    for (size_t bi = 0; bi < bs.size(); ++bi)
      if (Unit* u = unit_of_bucket_[bi])
        for (auto& piece : pieces_[bi]) {
          auto dst = u->trainable.shard.narrow(0, piece.shard_offset, piece.numel);
          if (dst.data_ptr() != piece.master.data_ptr()) dst.copy_(piece.master);
        }
    std::vector<size_t> whole;  // buckets of parameters every rank holds whole
    for (size_t bi = 0; bi < bs.size(); ++bi)
      if (!unit_of_bucket_[bi]) whole.push_back(bi);
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
    for (auto& p : params_) p.param.mutable_grad() = torch::Tensor();
    for (auto& bucket_pieces : pieces_)
      for (auto& piece : bucket_pieces) piece.master.mutable_grad() = torch::Tensor();
  }

  void check_grads_in_sync() override {
    if (o_.stage == 1) return Strategy::check_grads_in_sync();
    // Under stages 2 and 3 the reduction leaves no full gradient behind; one that
    // is there came from a backward the strategy did not see.
    for (const auto& p : params_)
      if (p.param.grad().defined())
        throw Error(fmt::format("gradients are out of sync across ranks: parameter {} holds a gradient that was not "
                                "reduced (debug_check_grad_sync_steps). Every forward that feeds the loss must go "
                                "through the engine.",
                                p.name));
  }

 private:
  // Splits `model` into units, each with a trainable and a frozen segment:
  // the token embedding (with the head when tied), every decoder layer, the
  // head. Installs the runners that gather a unit around its forward and
  // again for its backward. Returns the units in forward order. The final
  // norm stays whole on every rank.
  std::vector<Unit*> shard_model(model::LanguageModelImpl& model) {
    // Every rank starts from rank 0's weights, frozen ones included, before
    // the model is split.
    std::vector<torch::Tensor> all;
    for (auto& p : model.parameters()) all.push_back(p);
    broadcast_from_rank0(*comm_, all);
    torch::NoGradGuard ng;
    std::vector<Unit*> mine;
    auto add_unit = [&](const std::vector<torch::Tensor>& params) {
      auto unit = std::make_unique<Unit>();
      for (const auto& p : params) (p.requires_grad() ? unit->trainable : unit->frozen).params.push_back(p);
      init_segment(unit->trainable);
      init_segment(unit->frozen);
      unit->id = units_.size();
      for (Segment* g : {&unit->trainable, &unit->frozen})
        if (!g->params.empty()) unit_of_storage_[g->full.storage().unsafeGetStorageImpl()] = unit.get();
      Unit* u = unit.get();
      units_.push_back(std::move(unit));
      mine.push_back(u);
      return u;
    };
    Unit* embed = add_unit(model.model->embed_tokens->parameters());
    Unit* first_layer = nullptr;
    Unit* last_layer = nullptr;
    for (auto& m : *model.model->layers) {
      auto* layer = m->as<model::DecoderLayerImpl>();
      Unit* u = add_unit(layer->parameters());
      if (last_layer) {
        u->prev = last_layer;
        last_layer->next = u;
      }
      if (!first_layer) first_layer = u;
      last_layer = u;
      unit_of_layer_[layer] = u;
    }
    Unit* head = embed;  // tied: the embedding is the head
    if (model.lm_head) head = add_unit(model.lm_head->parameters());
    if (model.score) head = add_unit(model.score->parameters());
    units_of_model_[&model] = mine;

    // The embedding's backward needs no weight (only the ids), so it is
    // gathered for its forward only, and starts the first layer's gather.
    // Tied to the head, it stays gathered until the head has run (one
    // gather per forward instead of two, as FSDP keeps its root unit).
    const bool tied = head == embed;
    model.model->run_embedding = [this, embed, first_layer, tied](model::EmbeddingImpl& e, const torch::Tensor& ids) {
      gather(*embed);
      if (!in_backward_) prefetch(first_layer);
      auto out = e.forward(ids);
      if (!tied) release(*embed);
      return out;
    };
    // Gather before a layer runs (starting the next layer's gather) and
    // release after; a hook on the output's gradient gathers again for the
    // layer's backward (starting the previous layer's), one on the input's
    // releases once that backward is over. Checkpointing wraps this runner,
    // so its recompute gathers too.
    auto inner = model.model->run_layer;
    model.model->run_layer = [this, inner](model::DecoderLayerImpl& layer, const torch::Tensor& x,
                                           const torch::Tensor& cos, const torch::Tensor& sin,
                                           const torch::Tensor& mask, model::KVCache* cache) {
      Unit* u = unit_of_layer_.at(&layer);
      gather(*u);
      if (!in_backward_) prefetch(u->next);
      auto out = inner ? inner(layer, x, cos, sin, mask, cache) : layer.forward(x, cos, sin, mask, cache);
      around_backward(*u, x, {out});
      return out;
    };
    // The head in the same way, around whatever reads its weight (logits,
    // chunked log-probs, scores).
    model.head_scope = [this, head](const torch::Tensor& input,
                                    const std::function<std::vector<torch::Tensor>()>& compute) {
      gather(*head);
      auto outs = compute();
      around_backward(*head, input, outs);
      return outs;
    };
    return mine;
  }

  // After a unit's forward produced `outs` from `input`: when a backward
  // will run through it, hooks gather the unit again for that backward
  // (the first output gradient to arrive) and release it once the input's
  // gradient is computed. The unit is released now unless it is kept for
  // that backward (reshard_after_forward false).
  void around_backward(Unit& u, const torch::Tensor& input, const std::vector<torch::Tensor>& outs) {
    bool backward_follows = false;
    if (torch::GradMode::is_enabled())
      for (const auto& o : outs)
        if (o.defined() && o.requires_grad()) {
          backward_follows = true;
          Unit* up = &u;
          o.register_hook([this, up](const torch::Tensor&) {
            in_backward_ = true;
            gather(*up);
            prefetch(up->prev);
          });
        }
    if (backward_follows && input.defined() && input.requires_grad()) {
      Unit* up = &u;
      input.register_hook([this, up](const torch::Tensor&) { release(*up); });
    }
    if (!backward_follows || o_.reshard_after_forward) release(u);
  }

  Unit* unit_of(const torch::Tensor& t) const {
    if (!t.defined() || !t.has_storage()) return nullptr;
    auto it = unit_of_storage_.find(t.storage().unsafeGetStorageImpl());
    return it == unit_of_storage_.end() ? nullptr : it->second;
  }

  // Rank 0 sends `id` to every rank; the others receive it (their `id` is
  // ignored). The unit-by-unit read protocol of saving.
  int64_t announce(int64_t id) {
    auto t = torch::tensor({id}, torch::kInt64);
    if (!params_.empty()) t = t.to(params_.front().param.device());
    comm_->broadcast(t, 0)->wait();
    return t.cpu().item<int64_t>();
  }
  void switch_reading(Unit* u) {
    if (reading_) release(*reading_);
    reading_ = u;
    if (u) gather(*u);
  }

  void init_segment(Segment& g) {
    if (g.params.empty()) {
      g.gathered = false;
      return;
    }
    const auto opts = g.params.front().options();
    for (const auto& p : g.params) {
      if (p.scalar_type() != opts.dtype().toScalarType() || p.device() != opts.device())
        throw Error("ZeRO-3 needs one dtype and device for a layer's trainable (and frozen) parameters");
      g.numel += p.numel();
    }
    g.full = torch::empty({g.numel}, opts.requires_grad(false));
    int64_t off = 0;
    for (auto& p : g.params) {
      auto view = g.full.narrow(0, off, p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);
      off += p.numel();
    }
    const Shard s = shard_of(g.numel, world_size(), rank());
    g.shard = g.full.narrow(0, s.offset, s.numel).clone();
    g.gathered = true;
    release(g);
  }

  // Starts gathering a segment (storage back, all-gather in flight).
  void start_gather(Segment& g) {
    if (g.gathered || g.params.empty()) return;
    resize_storage(g.full, g.numel * g.full.element_size());
    g.pending = comm_->all_gather(g.shard, g.full);
    g.gathered = true;
  }
  void gather(Segment& g) {
    start_gather(g);
    if (g.pending) {
      g.pending->wait();
      g.pending.reset();
    }
  }
  void release(Segment& g) {
    if (!g.gathered || g.params.empty()) return;
    if (g.pending) {
      g.pending->wait();
      g.pending.reset();
    }
    resize_storage(g.full, 0);
    g.gathered = false;
  }
  void prefetch(Unit* u) {
    if (!u || !o_.prefetch) return;
    start_gather(u->trainable);
    start_gather(u->frozen);
  }
  void gather(Unit& u) {
    gather(u.trainable);
    gather(u.frozen);
  }
  void release(Unit& u) {
    release(u.trainable);
    release(u.frozen);
  }

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
  std::vector<std::unique_ptr<Unit>> units_;  // stage 3: one per decoder layer of every wrapped model
  std::vector<Unit*> policy_units_;           // the trained model's, in layer order
  std::unordered_map<const model::LanguageModelImpl*, std::vector<Unit*>> units_of_model_;
  std::unordered_map<const model::DecoderLayerImpl*, Unit*> unit_of_layer_;
  std::unordered_map<const c10::StorageImpl*, Unit*> unit_of_storage_;
  Unit* reading_ = nullptr;    // the unit gathered for saving
  bool in_backward_ = false;   // a layer's backward has started this micro-step (no forward prefetch)
  std::vector<Unit*> unit_of_bucket_;  // per bucket: its layer under stage 3, else null
  bool has_data_ = true;
};

}  // namespace

std::unique_ptr<Strategy> make_zero_strategy(std::shared_ptr<Communicator> comm, const ZeroOptions& options) {
  return std::make_unique<ZeroStrategy>(std::move(comm), options);
}

}  // namespace trlx::dist

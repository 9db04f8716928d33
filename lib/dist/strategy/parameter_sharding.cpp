// ZeRO-3 and FSDP: the parameters themselves are split across ranks, unit by
// unit, and gathered only around the computations that read them.
//
// A unit is the token embedding (with the head when tied), one decoder
// layer, or the head. Its parameters form two segments, trainable and frozen
// (each one dtype), each flat and split over the ranks with shard_of. While
// released, the parameters keep their sizes but their storage holds 0 bytes;
// gathering gives it back and fills it from every rank's shard. Each unit's
// trainable segment is one gradient bucket, so the bucket's rank slices are
// the segment's shards: fp32 shards are the optimizer's masters themselves.
#include <fmt/format.h>

#include <unordered_map>

#include "core/error.hpp"
#include "dist/comm/host_values.hpp"
#include "dist/strategy/sharded_optimizer.hpp"
#include "model/decoder.hpp"

namespace trlx::dist {

namespace {

struct Segment {
  std::vector<torch::Tensor> params;
  int64_t numel = 0;
  torch::Tensor full;   // the gathered flat segment the parameters view
  torch::Tensor shard;  // this rank's part, always held
  bool gathered = false;  // the full storage is held (set through ParameterSharding::mark)
  WorkPtr pending;      // a gather started ahead (prefetch), not yet waited for
  // Mixed precision, where `full` is in the compute dtype and `shard` in
  // float32: the shard cast for a gather in flight, and while saving reads
  // or weights are written, a float32 full buffer the parameters view instead.
  torch::Tensor send, exact;
  bool mixed() const { return shard.defined() && full.defined() && shard.scalar_type() != full.scalar_type(); }
};
struct Unit {
  Segment trainable, frozen;
  bool kept = false;     // stays gathered through a generation round (begin_generation)
  size_t id = 0;         // index in the strategy's units, the same on every rank
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

class ParameterSharding final : public ShardedOptimizer {
 public:
  ParameterSharding(std::shared_ptr<Communicator> comm, const ParameterShardingOptions& o)
      : ShardedOptimizer(std::move(comm), {.shard_gradients = true,
                                           .find_unused_parameters = o.find_unused_parameters,
                                           .sum_gradients = o.sum_gradients,
                                           .offload_optimizer_device = o.offload_optimizer_device,
                                           .name = o.name,
                                           .groups = o.groups}),
        reshard_after_forward_(o.reshard_after_forward),
        compute_dtype_(o.compute_dtype) {}

  bool shards_parameters() const override { return true; }
  // Every trained model (the policy, a value model) adds its units; their
  // gradients are reduced unit by unit alike.
  void wrap_model(model::LanguageModelImpl& model) override {
    for (Unit* u : shard_model(model)) policy_units_.push_back(u);
  }
  void wrap_frozen_model(model::LanguageModelImpl& model) override { shard_model(model); }

  void read_parameter(const torch::Tensor& param) override {
    Unit* u = unit_of(param);
    if (!u || u == reading_) return;  // whole on every rank, or gathered already
    announce(static_cast<int64_t>(u->id));
    switch_reading(u);
  }
  void begin_parameter_reads() override {
    for (auto& u : units_)
      for (Segment* g : {&u->trainable, &u->frozen}) {
        if (!g->mixed() || g->exact.defined()) continue;
        view_exact(*u, *g, torch::empty({g->numel}, g->shard.options()));
        resize_storage(g->exact, 0);
      }
  }
  void end_parameter_reads() override {
    announce(-1);
    switch_reading(nullptr);
    bool dropped = false;
    for (auto& u : units_)
      for (Segment* g : {&u->trainable, &u->frozen})
        if (g->exact.defined()) {
          drop_exact(*g);
          dropped = true;
        }
    if (dropped) reattach_gradient_hooks();
  }
  void serve_parameter_reads() override {
    for (;;) {
      const int64_t id = announce(0);
      switch_reading(id < 0 ? nullptr : units_.at(static_cast<size_t>(id)).get());
      if (id < 0) return;
    }
  }

  void begin_generation(model::LanguageModelImpl& model, int64_t keep_bytes) override {
    // Every rank splits units the same way, so every rank keeps the same
    // units and their gathers stay matched.
    int64_t held = 0;
    for (Unit* u : units_of_model_.at(&model)) {
      const int64_t bytes = unit_bytes(*u);
      if (keep_bytes >= 0 && held + bytes > keep_bytes) break;
      held += bytes;
      gather(*u);
      u->kept = true;
      kept_.push_back(u);
    }
  }
  void end_generation() override {
    for (Unit* u : kept_) {
      u->kept = false;
      release(*u);
    }
    kept_.clear();
  }
  int64_t gathered_bytes() const override { return gathered_bytes_; }
  int64_t peak_gathered_bytes() const override { return peak_gathered_bytes_; }
  void reset_peak_gathered_bytes() override { peak_gathered_bytes_ = gathered_bytes_; }

  void write_parameters(model::LanguageModelImpl& model,
                        const std::function<void(const std::string&, torch::Tensor&)>& fill) override {
    // Every rank writes the same values, so each unit gets storage locally
    // (no gather), is filled, and keeps only this rank's slice.
    torch::NoGradGuard ng;
    std::unordered_map<Unit*, std::vector<std::pair<std::string, torch::Tensor>>> by_unit;
    bool views_changed = false;
    for (auto& p : model.named_parameters(true)) {
      if (Unit* u = unit_of(p.value()))
        by_unit[u].emplace_back(p.key(), p.value());
      else
        fill(p.key(), p.value());
    }
    for (auto& [u, params] : by_unit) {
      for (Segment* g : {&u->trainable, &u->frozen}) {
        if (g->params.empty()) continue;
        if (g->mixed()) {
          // Written at full precision into a float32 buffer the parameters
          // view meanwhile: the shard (the masters) takes the values exactly.
          view_exact(*u, *g, torch::empty({g->numel}, g->shard.options()));
        } else if (!g->gathered) {
          resize_storage(g->full, g->numel * g->full.element_size());
          mark(*g, true);
        }
      }
      for (auto& [name, t] : params) fill(name, t);
      for (Segment* g : {&u->trainable, &u->frozen}) {
        if (g->params.empty()) continue;
        const Shard s = shard_of(g->numel, shard_count(), shard_rank());
        if (g->exact.defined()) {
          g->shard.copy_(g->exact.narrow(0, s.offset, s.numel));
          drop_exact(*g);
          views_changed = true;
        } else {
          g->shard.copy_(g->full.narrow(0, s.offset, s.numel));
        }
        release(*g);
      }
    }
    if (views_changed) reattach_gradient_hooks();
  }

  void lerp_parameters(model::LanguageModelImpl& dst, model::LanguageModelImpl& src, double alpha) override {
    // Unit by unit on the shards: the two models' units are split the same
    // way when they hold the same tensors in the same order.
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
    lerp_by_name(dst, src, alpha, [this](const torch::Tensor& t) { return unit_of(t) != nullptr; });
  }

  void setup(const std::vector<NamedParam>& trainable) override {
    // shard_model made every rank's weights rank 0's already.
    params_ = trainable;
    agree_on_parameters(*comm_, params_);
    // One bucket per unit (its trainable segment, in the same order), last
    // unit first as backward reaches them; the parameters outside the units
    // (the final norm) stay whole on every rank, their gradients in a last
    // bucket.
    std::unordered_map<c10::TensorImpl*, size_t> index;
    for (size_t i = 0; i < params_.size(); ++i) index[params_[i].param.unsafeGetTensorImpl()] = i;
    std::vector<std::vector<size_t>> groups;
    std::vector<torch::Tensor> held;
    std::vector<bool> in_unit(params_.size(), false);
    for (size_t k = policy_units_.size(); k-- > 0;) {
      const Segment& g = policy_units_[k]->trainable;
      if (g.params.empty()) continue;
      groups.emplace_back();
      for (const auto& p : g.params) {
        const size_t i = index.at(p.unsafeGetTensorImpl());
        groups.back().push_back(i);
        in_unit[i] = true;
      }
      held.push_back(g.shard);
    }
    std::vector<size_t> rest;
    for (size_t i = params_.size(); i-- > 0;)
      if (!in_unit[i]) rest.push_back(i);
    groups.push_back(rest);
    // Gradients of bf16 compute copies are reduced in float32, the masters' dtype.
    std::optional<torch::ScalarType> reduce_dtype;
    for (Unit* u : policy_units_)
      if (u->trainable.mixed()) reduce_dtype = torch::kFloat32;
    shard_buckets(std::make_unique<GradBuckets>(params_, groups, launcher(), reduce_dtype), std::move(held));
  }

  void end_backward() override {
    // Units whose input needed no gradient (the first layer, on a frozen
    // embedding) are still gathered; nothing below reads them.
    for (auto& u : units_) release(*u);
    in_backward_ = false;
    ShardedOptimizer::end_backward();
  }

 private:
  class Hooks;

  // Splits `model` into units and installs its Hooks. Returns the units in
  // forward order.
  std::vector<Unit*> shard_model(model::LanguageModelImpl& model);

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
    if (!backward_follows || reshard_after_forward_) release(u);
  }

  Unit* unit_of(const torch::Tensor& t) const {
    if (!t.defined() || !t.has_storage()) return nullptr;
    auto it = unit_of_storage_.find(t.storage().unsafeGetStorageImpl());
    return it == unit_of_storage_.end() ? nullptr : it->second;
  }

  // Rank 0 sends `id` to every rank; the others receive it (their `id` is
  // ignored). The unit-by-unit read protocol of saving.
  int64_t announce(int64_t id) { return broadcast_value(*comm_, id, 0); }
  // Saving reads exact values: while reads run, a mixed segment's
  // parameters view a float32 buffer (begin_parameter_reads), which holds
  // storage only while its unit is read, gathered from the float32 shards.
  void switch_reading(Unit* u) {
    if (reading_)
      for (Segment* g : {&reading_->trainable, &reading_->frozen}) {
        if (g->exact.defined())
          resize_storage(g->exact, 0);
        else if (!g->mixed() && !reading_->kept)
          release(*g);
      }
    reading_ = u;
    if (!u) return;
    for (Segment* g : {&u->trainable, &u->frozen}) {
      if (!g->mixed()) {
        gather(*g);
      } else if (g->exact.defined()) {
        resize_storage(g->exact, g->numel * g->exact.element_size());
        shards().all_gather(g->shard, g->exact)->wait();
      } else {
        // A rank that only serves the reads joins the gather.
        auto joined = torch::empty({g->numel}, g->shard.options());
        shards().all_gather(g->shard, joined)->wait();
      }
    }
  }
  // The parameters view `buffer` (a float32 full segment) instead of `full`,
  // and reads of them find their unit through it.
  void view_exact(Unit& u, Segment& g, torch::Tensor buffer) {
    g.exact = std::move(buffer);
    view_params(g, g.exact);
    unit_of_storage_[g.exact.storage().unsafeGetStorageImpl()] = &u;
  }
  void drop_exact(Segment& g) {
    unit_of_storage_.erase(g.exact.storage().unsafeGetStorageImpl());
    // Views are made on a storage that holds its bytes (LibTorch checks
    // their bounds): a released segment gets them back for the moment.
    const int64_t bytes = g.numel * g.full.element_size();
    if (!g.gathered) resize_storage(g.full, bytes);
    view_params(g, g.full);
    if (!g.gathered) resize_storage(g.full, 0);
    g.exact = torch::Tensor();
  }
  static void view_params(Segment& g, const torch::Tensor& flat) {
    int64_t off = 0;
    for (auto& p : g.params) {
      p.set_data(flat.narrow(0, off, p.numel()).view(p.sizes()));
      off += p.numel();
    }
  }

  void init_segment(Segment& g, model::LanguageModelImpl& model) {
    if (g.params.empty()) return;
    // The dtype each parameter is placed in: a weight loaded with its cast
    // deferred is converted here, as its unit is split.
    const auto dtype = model.placed_dtype(g.params.front());
    const auto device = g.params.front().device();
    for (const auto& p : g.params) {
      if (model.placed_dtype(p) != dtype || p.device() != device)
        throw Error("parameter sharding needs one dtype and device for a unit's trainable (and frozen) parameters");
      g.numel += p.numel();
    }
    // The unit moves to the communicator's device here, one unit at a time:
    // a model still on the host never stands whole on a GPU (nor converted
    // whole on the host).
    const auto opts = torch::TensorOptions().dtype(dtype).device(comm_->device());
    const Shard s = shard_of(g.numel, shard_count(), shard_rank());
    // The shard is allocated before the unit's full buffer, so freeing that
    // buffer leaves no hole between shards (the host's allocator keeps such
    // holes resident: one unit per unit split).
    g.shard = torch::empty({s.numel}, opts);
    auto placed = torch::empty({g.numel}, opts);
    int64_t off = 0;
    for (auto& p : g.params) {
      auto view = placed.narrow(0, off, p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);
      model.mark_placed(p);
      off += p.numel();
    }
    // Every rank starts from rank 0's weights. The broadcast runs on the
    // unit's device buffer: the model as loaded is host memory (a GPU
    // communicator refuses it), and writing rank 0's values into it would
    // give every other rank a private host copy of its checkpoint's mapping.
    comm_->broadcast(placed, 0)->wait();
    g.shard.copy_(placed.narrow(0, s.offset, s.numel));
    // Mixed precision: float32 units are gathered (and computed) in the
    // compute dtype; the shard keeps float32.
    if (compute_dtype_ && dtype == torch::kFloat32 && *compute_dtype_ != dtype) {
      placed = torch::Tensor();
      g.full = torch::empty({g.numel}, opts.dtype(*compute_dtype_));
      view_params(g, g.full);
    } else {
      g.full = placed;
    }
    mark(g, true);
    release(g);
  }

  // Starts gathering a segment (storage back, all-gather in flight).
  void start_gather(Segment& g) {
    if (g.gathered || g.params.empty()) return;
    resize_storage(g.full, g.numel * g.full.element_size());
    // Mixed: the float32 shard travels in the compute dtype.
    if (g.mixed()) g.send = g.shard.to(g.full.scalar_type());
    g.pending = shards().all_gather(g.mixed() ? g.send : g.shard, g.full);
    mark(g, true);
  }
  void finish_gather(Segment& g) {
    if (!g.pending) return;
    g.pending->wait();
    g.pending.reset();
    g.send = torch::Tensor();
  }
  void gather(Segment& g) {
    start_gather(g);
    finish_gather(g);
  }
  void release(Segment& g) {
    if (!g.gathered || g.params.empty()) return;
    finish_gather(g);
    resize_storage(g.full, 0);
    mark(g, false);
  }
  // Gathers the next unit while the current one computes.
  void prefetch(Unit* u) {
    if (!u) return;
    start_gather(u->trainable);
    start_gather(u->frozen);
  }
  void gather(Unit& u) {
    gather(u.trainable);
    gather(u.frozen);
  }
  void release(Unit& u) {
    if (u.kept) return;
    release(u.trainable);
    release(u.frozen);
  }

  static int64_t unit_bytes(const Unit& u) {
    int64_t bytes = 0;
    for (const Segment* g : {&u.trainable, &u.frozen})
      if (!g->params.empty()) bytes += g->numel * g->full.element_size();
    return bytes;
  }

  // Counts the bytes of gathered segments (and their peak) as they change.
  void mark(Segment& g, bool gathered) {
    if (g.gathered == gathered) return;
    g.gathered = gathered;
    const int64_t bytes = g.numel * g.full.element_size();
    gathered_bytes_ += gathered ? bytes : -bytes;
    peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  }

  bool reshard_after_forward_;
  std::optional<at::ScalarType> compute_dtype_;
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
  std::vector<Unit*> kept_;  // gathered for the generation round
  std::vector<std::unique_ptr<Unit>> units_;  // of every wrapped model
  std::vector<Unit*> policy_units_;           // the trained models', each in forward order
  std::unordered_map<const model::LanguageModelImpl*, std::vector<Unit*>> units_of_model_;
  std::unordered_map<const c10::StorageImpl*, Unit*> unit_of_storage_;
  Unit* reading_ = nullptr;   // the unit gathered for saving
  bool in_backward_ = false;  // a unit's backward has started this micro-step (no forward prefetch)
};

// One wrapped model's units, gathered around what the model runs.
class ParameterSharding::Hooks final : public model::ShardingHooks {
 public:
  Hooks(ParameterSharding& s, Unit* embed, Unit* head, std::unordered_map<const model::DecoderLayerImpl*, Unit*> layers,
        Unit* first_layer)
      : s_(s), embed_(embed), head_(head), layers_(std::move(layers)), first_layer_(first_layer) {}

  // The embedding's backward needs no weight (only the ids), so it is
  // gathered for its forward only, and starts the first layer's gather.
  // Tied to the head, it stays gathered until the head has run (one gather
  // per forward instead of two, as FSDP keeps its root unit).
  torch::Tensor embedding(const std::function<torch::Tensor()>& compute) override {
    s_.gather(*embed_);
    if (!s_.in_backward_) s_.prefetch(first_layer_);
    auto out = compute();
    if (head_ != embed_) s_.release(*embed_);
    return out;
  }

  // Gathered before the layer runs (starting the next layer's gather), and
  // again for its backward by around_backward; a checkpointed layer's
  // recompute runs inside that backward.
  torch::Tensor layer(const model::DecoderLayerImpl& layer, const torch::Tensor& input,
                      const std::function<torch::Tensor()>& compute) override {
    Unit* u = layers_.at(&layer);
    s_.gather(*u);
    if (!s_.in_backward_) s_.prefetch(u->next);
    auto out = compute();
    s_.around_backward(*u, input, {out});
    return out;
  }

  std::vector<torch::Tensor> head(const torch::Tensor& input,
                                  const std::function<std::vector<torch::Tensor>()>& compute) override {
    s_.gather(*head_);
    auto outs = compute();
    s_.around_backward(*head_, input, outs);
    return outs;
  }

 private:
  ParameterSharding& s_;
  Unit* embed_;
  Unit* head_;
  std::unordered_map<const model::DecoderLayerImpl*, Unit*> layers_;
  Unit* first_layer_;
};

std::vector<Unit*> ParameterSharding::shard_model(model::LanguageModelImpl& model) {
  // Every rank starts from rank 0's weights, frozen ones included: each
  // unit's segments are broadcast as they are split (init_segment), and what
  // stays whole (the final norm) here.
  torch::NoGradGuard ng;
  std::vector<Unit*> mine;
  auto add_unit = [&](const std::vector<torch::Tensor>& params) {
    auto unit = std::make_unique<Unit>();
    for (const auto& p : params) (p.requires_grad() ? unit->trainable : unit->frozen).params.push_back(p);
    init_segment(unit->trainable, model);
    init_segment(unit->frozen, model);
    unit->id = units_.size();
    for (Segment* g : {&unit->trainable, &unit->frozen})
      if (!g->params.empty()) unit_of_storage_[g->full.storage().unsafeGetStorageImpl()] = unit.get();
    Unit* u = unit.get();
    units_.push_back(std::move(unit));
    mine.push_back(u);
    return u;
  };
  Unit* embed = add_unit(model.model->embed_tokens->parameters());
  std::unordered_map<const model::DecoderLayerImpl*, Unit*> layers;
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
    layers[layer] = u;
  }
  Unit* head = embed;  // tied: the embedding is the head
  if (model.lm_head) head = add_unit(model.lm_head->parameters());
  if (model.score) head = add_unit(model.score->parameters());
  // What no unit holds stays whole on every rank: a copy of it on the
  // device takes rank 0's values there.
  std::vector<torch::Tensor> whole;
  for (auto& p : model.parameters()) {
    if (unit_of(p)) continue;
    p.set_data(p.detach().to(comm_->device(), model.placed_dtype(p), /*non_blocking=*/false, /*copy=*/true));
    model.mark_placed(p);
    whole.push_back(p);
  }
  broadcast_from_rank0(*comm_, whole);
  units_of_model_[&model] = mine;
  model.set_sharding_hooks(std::make_shared<Hooks>(*this, embed, head, std::move(layers), first_layer));
  return mine;
}

}  // namespace

std::unique_ptr<Strategy> make_parameter_sharding_strategy(std::shared_ptr<Communicator> comm,
                                                           const ParameterShardingOptions& options) {
  return std::make_unique<ParameterSharding>(std::move(comm), options);
}

}  // namespace trlx::dist

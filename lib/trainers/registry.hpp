#pragma once
// The trainer subcommands: one row per trainer, with its config table (whose
// name is the subcommand's and whose summary says what it does) and its entry
// points. Rows are built by entry<C>, so each trainer's run and preview
// receive its own config struct, typed, and nothing is cast on the way.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/loader.hpp"
#include "config/schema.hpp"
#include "config/training.hpp"
#include "core/error.hpp"

namespace trlx::trainers {

// A trainer's config once resolved, bound to what can be done with it.
class ResolvedTrainer {
 public:
  virtual ~ResolvedTrainer() = default;
  // The fields every trainer has (accelerate_config, output_dir, ...).
  virtual const config::TrainingConfig& config() const = 0;
  // The trainer's own config struct, the object its schema's assign/read
  // expect (hub names are replaced by cache paths there before run()).
  virtual void* config_struct() = 0;
  // Training; the process exit code.
  virtual int run() const = 0;
  // `trlx preview <trainer>`: what the trainer will train on.
  virtual int preview(size_t num_examples, bool json) const = 0;
};

struct TrainerEntry {
  std::string name;  // its schema's name, one of config::trainer_names()
  const config::Schema& (*schema)() = nullptr;
  // The trainer's own config struct, filled and checked by `loader`.
  std::function<std::unique_ptr<ResolvedTrainer>(config::ConfigLoader& loader)> resolve;
  bool previews = false;  // `trlx preview` is built for it
};

template <class C>
using RunFn = int (*)(const C&);
template <class C>
using PreviewFn = int (*)(const C&, size_t num_examples, bool json);

// The row of the trainer whose schema is `schema` and config struct C;
// `preview` is null for a trainer `trlx preview` cannot show.
template <class C>
TrainerEntry entry(const config::Schema& (*schema)(), RunFn<C> run, PreviewFn<C> preview = nullptr) {
  class Bound final : public ResolvedTrainer {
   public:
    Bound(std::string name, RunFn<C> run, PreviewFn<C> preview)
        : name_(std::move(name)), run_(run), preview_(preview) {}
    C typed;
    const config::TrainingConfig& config() const override { return typed; }
    void* config_struct() override { return &typed; }
    int run() const override { return run_(typed); }
    int preview(size_t num_examples, bool json) const override {
      if (!preview_) throw Error(fmt::format("trlx preview is not built for the {} trainer", name_));
      return preview_(typed, num_examples, json);
    }

   private:
    std::string name_;
    RunFn<C> run_;
    PreviewFn<C> preview_;
  };
  TrainerEntry e;
  e.name = schema().name();
  e.schema = schema;
  e.previews = preview != nullptr;
  e.resolve = [name = e.name, run, preview](config::ConfigLoader& loader) {
    auto bound = std::make_unique<Bound>(name, run, preview);
    loader.resolve(&bound->typed);
    return std::unique_ptr<ResolvedTrainer>(std::move(bound));
  };
  return e;
}

// One row per trainer, in config::trainer_names()'s order.
const std::vector<TrainerEntry>& trainer_table();
const TrainerEntry* find_trainer(const std::string& name);

}  // namespace trlx::trainers

// MetricSums: pooled and per-micro-batch means, with sums given as numbers or
// as device tensors read later in one transfer.
#include "catch_torch.hpp"

#include <array>

#include "engine/metrics.hpp"

using namespace trlx;

TEST_CASE("metric sums: tensors read later give the numbers' means, per micro-batch means keep their order",
          "[engine][metrics]") {
  engine::MetricSums as_numbers, as_tensors;
  const std::vector<std::pair<double, double>> batches = {{3, 4}, {1, 8}, {0, 0}, {5, 5}};
  for (const auto& [sum, count] : batches) {
    engine::MetricSums a, b;
    a.add("pooled", sum, count);
    a.add_per_batch("ratio", sum, count);
    b.add("pooled", torch::tensor(sum), torch::tensor(count));
    b.add_per_batch("ratio", torch::tensor(sum, torch::kFloat32), torch::tensor(count, torch::kFloat32));
    as_numbers.merge(a);
    as_tensors.merge(b);
  }
  CHECK(as_tensors.pending.size() == 1);
  CHECK(as_tensors.batches == 4);
  // Pooled: every item weighs the same; per micro-batch: the mean of the
  // four ratios, an empty micro-batch counting 0 (as TRL appends 0.0).
  const double pooled = 9.0 / 17.0, ratio = (0.75 + 0.125 + 0.0 + 1.0) / 4.0;
  CHECK(*as_numbers.mean("pooled") == Approx(pooled));
  CHECK(*as_numbers.mean("ratio") == Approx(ratio));
  CHECK(*as_tensors.mean("pooled") == Approx(pooled));
  CHECK(*as_tensors.mean("ratio") == Approx(ratio));
  CHECK(as_tensors.pending.empty());  // read, once
  CHECK(as_tensors.per_batch.at("ratio").size() == 4);
  // A stand-in micro-batch keeps later indices where every rank has them.
  engine::MetricSums skipped;
  skipped.skip_batch();
  engine::MetricSums one;
  one.add_per_batch("ratio", torch::tensor(1.0), torch::tensor(2.0));
  skipped.merge(one);
  skipped.read();
  CHECK(skipped.per_batch.at("ratio").count(1) == 1);
  CHECK_FALSE(skipped.mean("absent").has_value());
}

TEST_CASE("metric sums: per-batch ratios that skip empty micro-batches, and their differences", "[engine][metrics]") {
  // KTO's rewards/chosen and rewards/rejected: a micro-batch without rows of
  // a kind adds no value of that kind (the reference appends only when there
  // is one), and rewards/margins averages chosen minus rejected over the
  // micro-batches that have both.
  const std::vector<std::array<double, 4>> batches = {{2, 4, -1, 2}, {0, 0, -3, 3}, {6, 2, 0, 0}, {1, 1, 1, 4}};
  engine::MetricSums window;
  for (const auto& [cs, cn, rs, rn] : batches) {
    engine::MetricSums m;
    m.add_per_batch_nonempty("chosen", torch::tensor(cs, torch::kFloat64), torch::tensor(cn, torch::kFloat64));
    m.add_per_batch_nonempty("rejected", torch::tensor(rs, torch::kFloat64), torch::tensor(rn, torch::kFloat64));
    m.add_per_batch("plain", torch::tensor(cs, torch::kFloat64), torch::tensor(cn, torch::kFloat64));
    m.add_difference("margin", "chosen", "rejected");
    window.merge(m);
  }
  CHECK(*window.mean("chosen") == Approx((0.5 + 3.0 + 1.0) / 3.0));
  CHECK(*window.mean("rejected") == Approx((-0.5 - 1.0 + 0.25) / 3.0));
  CHECK(*window.mean("margin") == Approx(((0.5 + 0.5) + (1.0 - 0.25)) / 2.0));
  CHECK(*window.mean("plain") == Approx((0.5 + 0.0 + 3.0 + 1.0) / 4.0));  // an empty one counts 0
  const auto all = window.means();
  CHECK(all.count("margin") == 1);
  // Nothing of a kind in the whole window: not logged at all.
  engine::MetricSums none;
  none.add_per_batch_nonempty("chosen", torch::tensor(0.0, torch::kFloat64), torch::tensor(0.0, torch::kFloat64));
  none.add_per_batch_nonempty("rejected", torch::tensor(1.0, torch::kFloat64), torch::tensor(2.0, torch::kFloat64));
  none.add_difference("margin", "chosen", "rejected");
  CHECK_FALSE(none.mean("chosen").has_value());
  CHECK_FALSE(none.mean("margin").has_value());
  CHECK(none.means().count("chosen") == 0);
}

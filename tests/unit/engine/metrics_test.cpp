// MetricSums: pooled and per-micro-batch means, with sums given as numbers or
// as device tensors read later in one transfer.
#include "catch_torch.hpp"

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

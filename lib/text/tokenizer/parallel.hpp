#pragma once
// Row-parallel work for dataset preparation (dataset_num_proc): f(i) for
// every i in [0, n) on up to `threads` threads. Each index is handled exactly
// once and callers write results by index, so the output is the same as one
// thread's whatever the thread count. When calls throw, the exception of the
// lowest index is rethrown once all threads are done, as a single thread
// would have raised it first.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace trlx::text {

template <typename F>
void parallel_for(size_t n, int threads, F&& f) {
  const size_t workers = std::min<size_t>(n, threads > 1 ? static_cast<size_t>(threads) : 1);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  // Small chunks handed out in order: rows differ in length, so a fixed split
  // would leave one thread with the long ones.
  constexpr size_t kChunk = 16;
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_error{n};
  std::mutex mu;
  std::exception_ptr error;
  size_t error_index = n;
  auto work = [&] {
    for (;;) {
      const size_t b = next.fetch_add(kChunk);
      if (b >= n || b > first_error.load()) return;
      const size_t e = std::min(n, b + kChunk);
      for (size_t i = b; i < e; ++i) {
        try {
          f(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (i < error_index) {
            error_index = i;
            error = std::current_exception();
            first_error.store(i);
          }
          break;
        }
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (size_t t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

// f(i) -> T for every row on `threads` threads, each row's result or what it
// threw kept in its place: get(i) returns row i's result or rethrows its
// exception, so a caller that walks the rows in order (counting, dropping,
// logging there) fails at the same row, with the same error, as one thread.
template <typename T>
class RowResults {
 public:
  template <typename F>
  RowResults(size_t n, int threads, F&& f) : values_(n), errors_(n) {
    parallel_for(n, threads, [&](size_t i) {
      try {
        values_[i].emplace(f(i));
      } catch (...) {
        errors_[i] = std::current_exception();
      }
    });
  }
  // Row i's value, or its error rethrown; an InputError gets `where` (the
  // row's file:line) in front (rethrow_at).
  T& get(size_t i, const std::string& where = "") {
    if (errors_[i]) {
      try {
        std::rethrow_exception(errors_[i]);
      } catch (const InputError&) {
        rethrow_at(where);
      }
    }
    return *values_[i];
  }

 private:
  std::vector<std::optional<T>> values_;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace trlx::text

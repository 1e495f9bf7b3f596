// rill/connectors/ordered_sink.hpp — a shared sink that writes records in event-time
// order, identical for any number of workers.
//
// Defines rill::ordered_sink<T, Less, Write>: a rill::sink_of<T> that buffers records from
// every worker and writes them, ordered by (event time, Less), once no worker can still
// produce an earlier one.
//
// Example (compiled by tests/banner_examples.py; one row per window and key, written in
// window order, and by key within a window, whatever the number of workers):
//   #include <rill/operators/stream.hpp>
//   using row = rill::keyed_window_result<int, std::uint64_t>;
//   auto by_key = [](const row& a, const row& b) { return a.key < b.key; };
//   auto print = [](rill::event_time, const row& r) {
//     std::cout << r.key << ' ' << r.value << '\n';
//   };
//   const std::size_t workers = 2;
//   auto out = std::make_shared<rill::ordered_sink<row, decltype(by_key), decltype(print)>>(
//       workers, by_key, print);
//   std::vector<rill::record<int>> recs{{3, rill::event_time{3s}}, {14, rill::event_time{1s}}};
//   rill::runtime{{.workers = workers}}.run(rill::from(rill::vector_source<int>{recs})
//                                               .key_by([](const int& x) { return x % 10; })
//                                               .window(rill::tumbling{10s}, {.max_delay = 2s})
//                                               .count()
//                                               .sink(out));
//
// Rule: each worker's frontier is the watermark of the window_sort before it. A record of
// time t comes before its worker's frontier passes t, and a worker never sends a record
// older than its frontier, so a record with time < min over workers of the frontier is
// final: it and everything before it can be written. end(worker) sets that worker's
// frontier to +infinity.
//
// Memory: records wait here at most until the slowest worker's watermark passes them.
// Thread safety: write/progress/end from any worker (one mutex; Write is called under
// it, on the worker that released the records — keep it short: a buffered stream).
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "rill/core/record.hpp"

namespace rill {

template <class T, class Less, class Write>
class ordered_sink {
 public:
  /// `workers`: the runtime's worker count (worker ids 0 .. workers-1). `less(a, b)`
  /// orders records of equal event time; `write(event_time, const T&)` receives them.
  /// Any thread, before the run.
  ordered_sink(std::size_t workers, Less less, Write write)
      : frontier_(workers, event_time_min), less_(std::move(less)), write_(std::move(write)) {}

  /// Buffers `r` until every worker's frontier passed its time. Worker `worker` (the
  /// caller's id); any number of workers at once. Never blocks beyond the mutex.
  void write(std::size_t /*worker*/, record<T>&& r) {
    std::lock_guard lk(mu_);
    pending_[r.time].push_back(std::move(r.value));
  }
  /// Worker `worker` has seen event times up to `t` (frontiers never decrease; a smaller
  /// t is ignored). Writes, on the calling worker, every record that became final.
  void progress(std::size_t worker, event_time t) {
    std::lock_guard lk(mu_);
    frontier_[worker] = std::max(frontier_[worker], t);
    release();
  }
  /// Worker `worker` sent everything: its frontier becomes +infinity. Once every worker
  /// ended, every buffered record is written.
  void end(std::size_t worker) { progress(worker, event_time_max); }

  /// Records written so far. Any thread.
  std::size_t written() const {
    std::lock_guard lk(mu_);
    return written_;
  }

 private:
  void release() {
    const auto low = *std::min_element(frontier_.begin(), frontier_.end());
    while (!pending_.empty() && (pending_.begin()->first < low || low == event_time_max)) {
      auto& rows = pending_.begin()->second;
      std::sort(rows.begin(), rows.end(), less_);
      for (auto& v : rows) {
        write_(pending_.begin()->first, v);
        ++written_;
      }
      pending_.erase(pending_.begin());
    }
  }

  mutable std::mutex mu_;
  std::vector<event_time> frontier_;
  std::map<event_time, std::vector<T>> pending_;
  Less less_;
  Write write_;
  std::size_t written_ = 0;
};

}  // namespace rill

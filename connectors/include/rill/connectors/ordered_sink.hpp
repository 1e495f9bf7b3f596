// rill/connectors/ordered_sink.hpp — a shared sink that writes records in event-time
// order, identical for any number of workers.
//
// Defines rill::ordered_sink<T, Less, Write>: a rill::sink_of<T> that buffers records from
// every worker and writes them, ordered by (event time, Less), once no worker can still
// produce an earlier one.
//
// Example (netflow: one row per window and conversation, written in window order):
//   auto out = std::make_shared<rill::ordered_sink<row, by_key, write_line>>(workers, by_key{},
//                                                                            write_line{&file});
//   stream_of_rows.sink(out);
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
  ordered_sink(std::size_t workers, Less less, Write write)
      : frontier_(workers, event_time_min), less_(std::move(less)), write_(std::move(write)) {}

  void write(std::size_t, record<T>&& r) {
    std::lock_guard lk(mu_);
    pending_[r.time].push_back(std::move(r.value));
  }
  void progress(std::size_t worker, event_time t) {
    std::lock_guard lk(mu_);
    frontier_[worker] = std::max(frontier_[worker], t);
    release();
  }
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

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
// Thread safety: write/progress/end from any worker. write() and a progress() that may
// release records take one mutex; a progress() that cannot release any takes none (a
// window stage reports progress after nearly every record, on every worker). Write is
// called on the worker that released the records, in order, under a second mutex that
// write() does not take: a worker emitting a window is not held up by another worker
// writing the one before it, unless a third releaser holds the first mutex while it waits
// for its turn to write (keep Write short all the same: a buffered stream).
#pragma once

#include <algorithm>
#include <atomic>
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
      : frontier_(workers), less_(std::move(less)), write_(std::move(write)) {}

  /// Buffers `r` until every worker's frontier passed its time. Worker `worker` (the
  /// caller's id); any number of workers at once. Never blocks beyond the mutex.
  void write(std::size_t /*worker*/, record<T>&& r) {
    std::lock_guard lk(mu_);
    const event_time t = r.time;
    pending_[t].push_back(std::move(r.value));
    if (t < earliest_.load(std::memory_order_relaxed)) earliest_.store(t);
  }
  /// Worker `worker` has seen event times up to `t` (frontiers never decrease; a smaller
  /// t is ignored). Writes, on the calling worker, every record that became final.
  /// Lock-free when none did: one store and one or two loads of shared atomics, and the
  /// other workers' frontiers only while a record at or before t is pending.
  void progress(std::size_t worker, event_time t) {
    std::atomic<event_time>& mine = frontier_[worker].t;
    if (t <= mine.load(std::memory_order_relaxed)) return;  // only `worker` stores it
    mine.store(t);
    // A record written by worker w has time >= w's frontier then (workers never send
    // records older than their frontier), so it becomes final only when some frontier
    // rises past it, and that progress() sees it: the stores above and in write() and
    // the loads below are sequentially consistent. An end (t = +infinity) always looks.
    if (t != event_time_max) {
      const event_time first = earliest_.load();
      if (first >= t) return;  // the minimum frontier is <= t
      if (first >= low()) return;
    }
    std::unique_lock lk(mu_);
    const event_time lo = low();
    std::vector<std::pair<event_time, std::vector<T>>> ready;
    while (!pending_.empty() && (pending_.begin()->first < lo || lo == event_time_max)) {
      auto node = pending_.extract(pending_.begin());
      ready.emplace_back(node.key(), std::move(node.mapped()));
    }
    earliest_.store(pending_.empty() ? event_time_max : pending_.begin()->first);
    if (ready.empty()) return;
    std::lock_guard out(out_);  // taken before mu_ is let go: releases write in order
    lk.unlock();
    std::vector<T*> order;  // sorted instead of the records: a swap moves a pointer
    for (auto& [time, rows] : ready) {
      order.clear();
      for (auto& v : rows) order.push_back(&v);
      std::sort(order.begin(), order.end(),
                [this](const T* a, const T* b) { return less_(*a, *b); });
      for (T* v : order) {
        write_(time, *v);
        ++written_;
      }
    }
  }
  /// Worker `worker` sent everything: its frontier becomes +infinity. Once every worker
  /// ended, every buffered record is written.
  void end(std::size_t worker) { progress(worker, event_time_max); }

  /// Records written so far. Any thread.
  std::size_t written() const {
    std::lock_guard lk(out_);
    return written_;
  }

 private:
  event_time low() const noexcept {
    event_time m = event_time_max;
    for (const auto& f : frontier_) m = std::min(m, f.t.load());
    return m;
  }

  // One worker's frontier, on a cache line of its own: each worker stores its own after
  // nearly every record.
  struct alignas(64) frontier {
    std::atomic<event_time> t{event_time_min};
  };

  mutable std::mutex mu_;  // pending_, and the order in which releasers take out_
  std::vector<frontier> frontier_;
  std::map<event_time, std::vector<T>> pending_;
  std::atomic<event_time> earliest_{event_time_max};  // pending_'s first time; max when empty
  mutable std::mutex out_;  // Write and written_
  Less less_;
  Write write_;
  std::size_t written_ = 0;
};

}  // namespace rill

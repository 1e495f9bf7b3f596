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
// window stage reports progress after nearly every record, on every worker). By default
// Write is called on the worker that released the records, in order, under a second
// mutex that write() does not take: a worker emitting a window is not held up by another
// worker writing the one before it, unless a third releaser holds the first mutex while
// it waits for its turn to write (keep Write short all the same: a buffered stream).
// With ordered_sink_options::writer_thread, Write is called, in the same order, on a
// thread the sink owns: a releasing worker hands its records over and goes on, and the
// end() that ends the last worker returns once every record is written.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "rill/core/record.hpp"

namespace rill {

/// How an ordered_sink calls Write.
struct ordered_sink_options {
  /// Call Write on a thread of the sink's own, not on the worker that released the
  /// records: that worker hands them over (a move of one vector per event time) and goes
  /// on reading, so sorting, formatting and writing a window's rows overlap the workers'
  /// processing instead of stopping one worker while the others wait for it. Write must
  /// not throw then (an exception on that thread is std::terminate).
  bool writer_thread = false;
  /// With writer_thread: records handed over and not yet written, at most. A release
  /// that finds more waits (on the releasing worker, holding no lock of the sink) until
  /// the writer is back under it; a single release larger than this is handed over whole.
  std::size_t max_queued = std::size_t{1} << 20;
};

template <class T, class Less, class Write>
class ordered_sink {
 public:
  /// `workers`: the runtime's worker count (worker ids 0 .. workers-1). `less(a, b)`
  /// orders records of equal event time; `write(event_time, const T&)` receives them.
  /// `options.writer_thread` starts the writer thread here. Any thread, before the run.
  /// @throws std::system_error when the writer thread cannot be started.
  ordered_sink(std::size_t workers, Less less, Write write, ordered_sink_options options = {})
      : frontier_(workers), less_(std::move(less)), write_(std::move(write)), options_(options) {
    if (options_.writer_thread) writer_ = std::thread([this] { writer_loop(); });
  }
  /// Stops and joins the writer thread; records handed to it and not yet written are
  /// dropped (after the last end() there are none). Not concurrently with other calls.
  ~ordered_sink() {
    if (!writer_.joinable()) return;
    {
      std::lock_guard lk(queue_mu_);
      stop_ = true;
    }
    queue_cv_.notify_all();
    writer_.join();
  }
  ordered_sink(const ordered_sink&) = delete;
  ordered_sink& operator=(const ordered_sink&) = delete;

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
    if (writer_.joinable()) {
      hand_over(std::move(ready), lk, lo == event_time_max);
      return;
    }
    if (ready.empty()) return;
    std::lock_guard out(out_);  // taken before mu_ is let go: releases write in order
    lk.unlock();
    for (auto& [time, rows] : ready) write_rows(time, rows);
  }
  /// Worker `worker` sent everything: its frontier becomes +infinity. Once every worker
  /// ended, every buffered record is written (with the writer thread: the end() that sees
  /// every worker ended blocks until the writer thread wrote them).
  void end(std::size_t worker) { progress(worker, event_time_max); }

  /// Records written so far. Any thread.
  std::size_t written() const {
    std::lock_guard lk(out_);
    return written_;
  }

 private:
  using batch = std::pair<event_time, std::vector<T>>;

  // Sorts `rows` (by less_; pointers, so a swap moves one) and writes them. out_ held.
  void write_rows(event_time time, std::vector<T>& rows) {
    std::vector<T*> order;
    order.reserve(rows.size());
    for (auto& v : rows) order.push_back(&v);
    std::sort(order.begin(), order.end(), [this](const T* a, const T* b) { return less_(*a, *b); });
    for (T* v : order) {
      write_(time, *v);
      ++written_;
    }
  }

  // Queues `ready` for the writer thread (mu_ held by `lk`, so releases queue in order),
  // then lets mu_ go and waits while the queue is over max_queued, or, when `all_ended`,
  // until the writer wrote everything.
  void hand_over(std::vector<batch>&& ready, std::unique_lock<std::mutex>& lk, bool all_ended) {
    std::unique_lock q(queue_mu_);
    for (auto& b : ready) {
      queued_ += b.second.size();
      queue_.push_back(std::move(b));
    }
    lk.unlock();
    if (!ready.empty()) queue_cv_.notify_all();
    if (all_ended)
      space_cv_.wait(q, [this] { return queue_.empty() && !writing_; });
    else if (queued_ > options_.max_queued)
      space_cv_.wait(q, [this] { return queued_ <= options_.max_queued; });
  }

  void writer_loop() {
    std::unique_lock q(queue_mu_);
    for (;;) {
      queue_cv_.wait(q, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      batch b = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      q.unlock();
      {
        std::lock_guard out(out_);
        write_rows(b.first, b.second);
      }
      const std::size_t n = b.second.size();
      b.second = {};  // the rows are freed here, not under queue_mu_
      q.lock();
      queued_ -= n;
      writing_ = false;
      space_cv_.notify_all();
    }
  }

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
  ordered_sink_options options_;
  // The writer thread's queue (writer_thread only): released batches in release order.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;  // a batch queued, or stop_
  std::condition_variable space_cv_;  // a batch written
  std::deque<batch> queue_;
  std::size_t queued_ = 0;  // records in queue_
  bool writing_ = false;    // the writer holds a batch taken from queue_
  bool stop_ = false;
  std::thread writer_;  // last member: started after, joined before the others
};

}  // namespace rill

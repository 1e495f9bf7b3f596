// rill/connectors/ordered_sink.hpp — a shared sink that writes records in event-time
// order, identical for any number of workers.
//
// Defines rill::ordered_sink<T, Less, Write>: a rill::sink_of<T> that buffers records from
// every worker and writes them, ordered by (event time, Less), once no worker can still
// produce an earlier one; and rill::formatting_writer, a Write that turns each record into
// bytes on the worker that wrote it, so that only the writing of bytes is serial; and
// rill::keyed_order, a Less that also gives each record a sort key, so that a run sorts
// by keys held in one array.
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
// Thread safety: write/progress/end from any worker, each with its own id. Each worker
// buffers its records in a lane of its own (its own mutex, which another thread takes
// only to take released records out of it). A progress() that may release records takes
// one more mutex; one that cannot release any takes none (a window stage reports
// progress after nearly every record, on every worker).
// Order of work: the records of one event time are sorted per worker into a run, and the
// runs of every worker are merged (k-way, by Less) as they are written. By default the
// thread that writes sorts; with ordered_sink_options::sort_on_workers each worker sorts
// (and formats: a formatting_writer) its own records when its frontier passes them, in
// parallel with the other workers, and the thread that writes only merges and writes.
// By default Write is called on the worker that released the records, in order, under a
// second mutex that write() does not take: a worker emitting a window is not held up by
// another worker writing the one before it, unless a third releaser holds the first
// mutex while it waits for its turn to write (keep Write short all the same: a buffered
// stream). With ordered_sink_options::writer_thread, Write is called, in the same order,
// on a thread the sink owns: a releasing worker hands its records over and goes on, and
// the end() that ends the last worker returns once every record is written.
#pragma once

#include <algorithm>
#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "rill/core/record.hpp"

namespace rill {

/// How an ordered_sink calls Write.
struct ordered_sink_options {
  /// Call Write on a thread of the sink's own, not on the worker that released the
  /// records: that worker hands them over (a move of one run per worker and event time)
  /// and goes on reading, so sorting, formatting and writing a window's rows overlap the
  /// workers' processing instead of stopping one worker while the others wait for it.
  /// Write must not throw then (an exception on that thread is std::terminate).
  bool writer_thread = false;
  /// With writer_thread: records handed over and not yet written, at most. A release
  /// that finds more waits (on the releasing worker, holding no lock of the sink) until
  /// the writer is back under it; a single release larger than this is handed over whole.
  std::size_t max_queued = std::size_t{1} << 20;
  /// Sort each worker's records of an event time on that worker, when its frontier
  /// passes that time (in its progress() or end(), before the frontier is published), and
  /// with a formatting_writer also format them there: the workers do it in parallel, and
  /// the thread that writes only merges the sorted runs and writes the bytes. Off: the
  /// thread that writes sorts and formats. Costs the worker the sort (O(n log n)
  /// comparisons of its n records of that time) and the formatting; worth it when the
  /// thread that writes has no core to itself (as many workers as cores, with
  /// writer_thread), and when the last records are written after the input ends: each
  /// worker then sorts its share at once instead of one thread sorting all.
  bool sort_on_workers = false;
};

/// A Write that formats: `w.format(worker, t, v, bytes)` appends record `v`'s bytes to
/// `bytes` (and may count what it needs per worker), then `w(t, v, view)` is called in
/// the sink's order with exactly those bytes. ordered_sink calls format once per record,
/// on the worker `worker` that wrote it (ordered_sink_options::sort_on_workers) or on the
/// thread that writes, and never for one `worker` on two threads at once (as long as
/// workers keep the frontier rule of ordered_sink); calls for different workers run in
/// parallel, so format must touch no state shared between workers.
template <class W, class T>
concept formatting_writer = requires(const W& w, std::size_t worker, event_time t, const T& v,
                                     std::string& bytes, std::string_view view) {
  w.format(worker, t, v, bytes);
  w(t, v, view);
};

/// A Less that also gives each record a sort key: `less.sort_key(v)` returns a value
/// whose `<` orders records exactly as `less` does (less(a, b) == (sort_key(a) <
/// sort_key(b)) for all a, b). ordered_sink then sorts a run's (key, position) pairs, held
/// side by side in one array, instead of pointers that compare through the records: a
/// run of tens of thousands of records no longer misses the cache on every comparison.
/// The key should be small and cheap to compare (a few machine words, e.g.
/// std::array<std::uint64_t, N>); sort_key must be callable on any thread.
template <class L, class T>
concept keyed_order = requires(const L& less, const T& v) {
  { less.sort_key(v) < less.sort_key(v) } -> std::convertible_to<bool>;
};

template <class T, class Less, class Write>
class ordered_sink {
 public:
  /// `workers`: the runtime's worker count (worker ids 0 .. workers-1). `less(a, b)`
  /// orders records of equal event time (records neither orders come out in an
  /// unspecified order); `write(event_time, const T&)` receives them, or, for a
  /// formatting_writer, `write(event_time, const T&, std::string_view bytes)` with the
  /// bytes its format() made. `options.writer_thread` starts the writer thread here. Any
  /// thread, before the run.
  /// @throws std::system_error when the writer thread cannot be started.
  ordered_sink(std::size_t workers, Less less, Write write, ordered_sink_options options = {})
      : frontier_(workers),
        lanes_(workers),
        less_(std::move(less)),
        write_(std::move(write)),
        options_(options) {
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
  /// caller's id, one thread per id at a time); any number of workers at once. Takes the
  /// worker's own lane mutex (contended only by a release taking records out of it);
  /// never blocks beyond it.
  void write(std::size_t worker, record<T>&& r) {
    lane& l = lanes_[worker];
    const event_time t = r.time;
    {
      std::lock_guard lk(l.mu);
      l.pending[t].rows.push_back(std::move(r.value));
      if (t < l.unsealed) l.unsealed = t;
    }
    event_time e = earliest_.load(std::memory_order_relaxed);
    while (t < e && !earliest_.compare_exchange_weak(e, t)) {
    }
  }
  /// Worker `worker` has seen event times up to `t` (frontiers never decrease; a smaller
  /// t is ignored). With sort_on_workers, first sorts (and formats) this worker's records
  /// before t. Then writes, on the calling worker (or hands to the writer thread), every
  /// record that became final. Lock-free when nothing is to sort or release: one store
  /// and one or two loads of shared atomics, and the other workers' frontiers only while
  /// a record at or before t is pending.
  void progress(std::size_t worker, event_time t) {
    std::atomic<event_time>& mine = frontier_[worker].t;
    if (t <= mine.load(std::memory_order_relaxed)) return;  // only `worker` stores it
    // Sealed before the frontier is published: a releaser that sees the frontier past a
    // run finds it sorted (the seq_cst store below orders the sort before it).
    if (options_.sort_on_workers) seal_before(worker, t);
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
    release();
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
  static constexpr bool formats = formatting_writer<Write, T>;

  static constexpr std::size_t unformatted = std::size_t(-1);

  // One worker's records of one event time: rows in arrival order; once sealed, their
  // order by less_, and (formatting_writer, sealed on the worker) the bytes of each,
  // formatted in that order so that the thread that writes reads them front to back.
  struct run {
    std::vector<T> rows;
    std::vector<const T*> order;  // rows sorted by less_; complete when sealed()
    std::string text;             // the bytes of the formatted rows
    // begin[i], end[i]: rows[i]'s bytes in text; begin[i] == unformatted: none yet.
    std::vector<std::size_t> begin, end;
    bool sealed() const noexcept { return order.size() == rows.size(); }
  };
  // One worker's buffered records, by event time.
  struct alignas(64) lane {
    std::mutex mu;  // pending; the owner writes, a releaser takes final runs out
    std::map<event_time, run> pending;
    // sort_on_workers: the earliest time of a run the owner has not sealed (max: none),
    // and the bytes per record of the last run it formatted (to reserve the next run's
    // text at once). Owner only (write() and progress() of this lane's worker).
    event_time unsealed = event_time_max;
    std::size_t bytes_per_row = 0;
  };
  // One event time's runs, one (worker, run) per worker that had records at it.
  using batch = std::pair<event_time, std::vector<std::pair<std::size_t, run>>>;

  // Sorts the run's rows. On the worker (`l`: its lane), also formats those not
  // formatted yet, in sorted order; the thread that writes formats as it writes instead
  // (emit), so that it builds no text.
  void seal(std::size_t worker, event_time time, run& r, lane* l) {
    r.order.clear();
    r.order.reserve(r.rows.size());
    if constexpr (keyed_order<Less, T>) {
      using key = std::remove_cvref_t<decltype(less_.sort_key(r.rows.front()))>;
      std::vector<std::pair<key, const T*>> keyed;
      keyed.reserve(r.rows.size());
      for (const T& v : r.rows) keyed.emplace_back(less_.sort_key(v), &v);
      std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (const auto& k : keyed) r.order.push_back(k.second);
    } else {
      for (const T& v : r.rows) r.order.push_back(&v);
      std::sort(r.order.begin(), r.order.end(), [this](const T* a, const T* b) { return less_(*a, *b); });
    }
    if constexpr (formats) {
      if (l == nullptr) return;
      const std::size_t before = r.begin.size();
      r.begin.resize(r.rows.size(), unformatted);
      r.end.resize(r.rows.size(), unformatted);
      // Room for the new rows at once (growing a text of megabytes by doubling copies it
      // and touches fresh pages twice): at the last run's bytes per row, or, for a
      // worker's first run, the first row's.
      const std::size_t fresh = r.rows.size() - before;
      r.text.reserve(r.text.size() + fresh * l->bytes_per_row * 9 / 8);
      const std::size_t text_before = r.text.size();
      for (const T* v : r.order) {
        const auto i = std::size_t(v - r.rows.data());
        if (r.begin[i] != unformatted) continue;
        r.begin[i] = r.text.size();
        write_.format(worker, time, *v, r.text);
        r.end[i] = r.text.size();
        if (l->bytes_per_row == 0 && r.end[i] > r.begin[i]) {
          l->bytes_per_row = r.end[i] - r.begin[i];
          r.text.reserve(r.text.size() + fresh * l->bytes_per_row * 5 / 4);
        }
      }
      if (fresh > 0) l->bytes_per_row = (r.text.size() - text_before) / fresh;
    }
  }

  // The owner's runs before `t` are final for it: seal them (its lane mutex held, which a
  // releaser takes only for runs the owner sealed already).
  void seal_before(std::size_t worker, event_time t) {
    lane& l = lanes_[worker];
    if (l.unsealed >= t) return;
    std::lock_guard lk(l.mu);
    auto it = l.pending.lower_bound(l.unsealed);
    for (; it != l.pending.end() && it->first < t; ++it)
      if (!it->second.sealed()) seal(worker, it->first, it->second, &l);
    l.unsealed = it == l.pending.end() ? event_time_max : it->first;
  }

  // Takes every final run out of the lanes (all of them once every worker ended) and
  // writes them, or hands them to the writer thread, in time order.
  void release() {
    std::unique_lock lk(mu_);
    std::vector<batch> ready;
    bool all_ended = false;
    // A progress() that raised a frontier while earliest_ was being recomputed may have
    // seen it too high and returned: look again until earliest_ is below every frontier.
    for (;;) {
      const event_time lo = low();
      all_ended = lo == event_time_max;
      earliest_.store(event_time_max);
      std::map<event_time, std::vector<std::pair<std::size_t, run>>> by_time;
      event_time rest = event_time_max;
      for (std::size_t w = 0; w < lanes_.size(); ++w) {
        lane& l = lanes_[w];
        std::lock_guard g(l.mu);
        while (!l.pending.empty() && (l.pending.begin()->first < lo || all_ended)) {
          auto node = l.pending.extract(l.pending.begin());
          by_time[node.key()].emplace_back(w, std::move(node.mapped()));
        }
        if (!l.pending.empty()) rest = std::min(rest, l.pending.begin()->first);
      }
      for (auto& [time, runs] : by_time) ready.emplace_back(time, std::move(runs));
      event_time e = earliest_.load();
      while (rest < e && !earliest_.compare_exchange_weak(e, rest)) {
      }
      const event_time first = earliest_.load();
      if (all_ended || first == event_time_max || first >= low()) break;
    }
    if (writer_.joinable()) {
      hand_over(std::move(ready), lk, all_ended);
      return;
    }
    if (ready.empty()) return;
    std::lock_guard out(out_);  // taken before mu_ is let go: releases write in order
    lk.unlock();
    for (auto& b : ready) write_batch(b);
  }

  // Writes one event time's runs merged by less_ (two runs: side by side; more: a heap of
  // the runs' next rows), sealing any run not sealed yet. out_ held.
  void write_batch(batch& b) {
    const event_time time = b.first;
    auto& runs = b.second;
    for (auto& [w, r] : runs)
      if (!r.sealed()) seal(w, time, r, nullptr);
    if (runs.size() == 1) {
      const auto& [w, r] = runs.front();
      for (const T* v : r.order) emit(time, w, r, v);
      return;
    }
    if (runs.size() == 2) {  // one comparison per record, no heap
      const auto& [wa, a] = runs[0];
      const auto& [wb, b] = runs[1];
      auto i = a.order.begin(), j = b.order.begin();
      while (i != a.order.end() && j != b.order.end()) {
        if (less_(**j, **i)) emit(time, wb, b, *j++);
        else emit(time, wa, a, *i++);
      }
      for (; i != a.order.end(); ++i) emit(time, wa, a, *i);
      for (; j != b.order.end(); ++j) emit(time, wb, b, *j);
      return;
    }
    struct cursor {
      const T* const* next;
      const T* const* end;
      std::size_t worker;
      const run* r;
    };
    std::vector<cursor> heap;
    heap.reserve(runs.size());
    for (const auto& [w, r] : runs)
      if (!r.order.empty())
        heap.push_back({r.order.data(), r.order.data() + r.order.size(), w, &r});
    // std heap functions keep the largest first: "after" puts the smallest next row there.
    auto after = [this](const cursor& a, const cursor& b) { return less_(**b.next, **a.next); };
    std::make_heap(heap.begin(), heap.end(), after);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), after);
      cursor& c = heap.back();
      emit(time, c.worker, *c.r, *c.next);
      if (++c.next == c.end) heap.pop_back();
      else std::push_heap(heap.begin(), heap.end(), after);
    }
  }

  // Writes one record of worker `worker`'s run `r`: its bytes from the run, or formatted
  // here when the worker did not format it. out_ held.
  void emit(event_time time, std::size_t worker, const run& r, const T* v) {
    if constexpr (formats) {
      const auto i = std::size_t(v - r.rows.data());
      if (i < r.begin.size() && r.begin[i] != unformatted) {
        write_(time, *v, std::string_view(r.text).substr(r.begin[i], r.end[i] - r.begin[i]));
      } else {
        scratch_.clear();
        write_.format(worker, time, *v, scratch_);
        write_(time, *v, std::string_view(scratch_));
      }
    } else {
      write_(time, *v);
    }
    ++written_;
  }

  static std::size_t rows_of(const batch& b) noexcept {
    std::size_t n = 0;
    for (const auto& wr : b.second) n += wr.second.rows.size();
    return n;
  }

  // Queues `ready` for the writer thread (mu_ held by `lk`, so releases queue in order),
  // then lets mu_ go and waits while the queue is over max_queued, or, when `all_ended`,
  // until the writer wrote everything.
  void hand_over(std::vector<batch>&& ready, std::unique_lock<std::mutex>& lk, bool all_ended) {
    std::unique_lock q(queue_mu_);
    for (auto& b : ready) {
      queued_ += rows_of(b);
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
        write_batch(b);
      }
      const std::size_t n = rows_of(b);
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

  mutable std::mutex mu_;  // the order in which releasers take runs out and take out_
  std::vector<frontier> frontier_;
  std::vector<lane> lanes_;
  // <= every lane's first time; max when all are empty.
  std::atomic<event_time> earliest_{event_time_max};
  mutable std::mutex out_;  // Write, written_ and scratch_
  std::string scratch_;     // the bytes of a record formatted as it is written
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

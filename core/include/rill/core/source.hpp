// rill/core/source.hpp — what a source is, and the one driver that runs a split of any
// source on a worker without ever blocking the worker's loop.
//
// Defines:
//   rill::poll_status, rill::source_of<S>   the source contract
//   rill::source_driver<Reader, T>          reads one split in slices of `slice` records
//   rill::split_count_of(src, workers)      how many splits a source has on `workers`
//   rill::vector_source<T, P = acked>       an in-memory source (tests, benchmarks)
//
// A source S has `using value_type = T`, optionally `using record_policy = P`
// (rill::unacked for a source that never acknowledges; absent = rill::acked:
// rill/core/record.hpp), either `std::size_t split_count() const` or
// `std::size_t split_count(std::size_t workers) const` (a source that scales with the
// workers, e.g. one Kafka consumer per worker), and `Reader open(std::size_t split)`
// (may throw: opening happens in runtime::run on the calling thread, before workers
// start, so a missing file fails the run up front). A Reader has
//   template <class Emit> poll_status poll(Emit&& emit, std::size_t max_records);
//       emit(record<T, P>&&) up to max_records times; never blocks. Returns more (call again),
//       idle (nothing now: live capture; call again after a short delay), end, or error.
//   std::string error() const;       // after poll() returned error: "FILE: what, at byte N"
//
// A Reader may also offer capabilities; the driver uses each one it finds (concepts
// below), so a fix to the source path lands once for every source:
//   gated_reader        bool ready(); void serve();
//       No record is read until ready(); meanwhile serve() keeps the source's session
//       alive (a Kafka consumer serving its group), every 1 ms.
//   backpressure_aware_reader   void on_backpressure(std::chrono::nanoseconds blocked_for);
//                               void on_resume();
//       Called on every retry while downstream is full (blocked_for: since the first
//       refused flush), and once when it accepts again.
//   partitioned_reader  std::uint64_t assignment_version() const;
//                       void held_partitions(std::vector<std::int32_t>& out) const;
//                       std::chrono::nanoseconds partition_idle_timeout() const;
//       The split reads several partitions (record.position->partition): its progress is
//       rill::partition_progress over the held partitions, re-read whenever
//       assignment_version() changes; a record's own time does not advance it
//       (rill::advances_progress). A record whose partition's largest time is still
//       behind the progress the split already sent gets position->catching_up.
//   draining_reader     bool settled(); void close(); std::chrono::nanoseconds drain_timeout() const;
//       After end of input: once the chain accepted the end, wait until settled() (every
//       emitted record acknowledged downstream) or drain_timeout passed, then close()
//       (e.g. Kafka's final synchronous offset commit). The run ends after every such
//       close; the wait for settled() also ends when every sink has ended. A non-empty
//       error() after close() (a final commit not confirmed) goes into the run's errors.
//
// Example (compiled by tests/banner_examples.py):
//   #include <rill/operators/stream.hpp>
//   rill::vector_source<int> src{{{3, rill::event_time{3s}}, {1, rill::event_time{1s}}}};
//   auto s = rill::from(std::move(src));   // stream<int>: every split on source_driver
//
// Split i runs on worker (i mod workers). Each split is one logical input downstream: its
// frontier (largest event time read so far, or the partition_progress of a partitioned
// reader) is sent as progress after every slice. Backpressure: before each slice the
// driver flushes the chain; if a bounded queue is full it retries on a timer (200 µs)
// and reads nothing meanwhile. A stop request (runtime::request_stop) ends the input even
// while downstream is full, so a sink that cannot deliver does not hold the stop.
//
// Thread safety: a driver and its reader live on one worker.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rill/core/runtime.hpp"
#include "rill/core/stage.hpp"
#include "rill/core/watermark.hpp"

namespace rill {

enum class poll_status { more, idle, end, error };

template <class S>
concept source_of = requires(S& s) {
  typename S::value_type;
  s.open(std::size_t{});
} && (requires(const S& cs) {
  { cs.split_count() } -> std::convertible_to<std::size_t>;
} || requires(const S& cs) {
  { cs.split_count(std::size_t{}) } -> std::convertible_to<std::size_t>;
});

/// Splits of `src` on a runtime with `workers` workers: split_count(workers) when the
/// source defines it, else split_count().
template <source_of S>
std::size_t split_count_of(const S& src, std::size_t workers) {
  if constexpr (requires { src.split_count(workers); })
    return src.split_count(workers);
  else
    return src.split_count();
}

template <class R>
concept gated_reader = requires(R& r) {
  { r.ready() } -> std::convertible_to<bool>;
  r.serve();
};
template <class R>
concept backpressure_aware_reader = requires(R& r, std::chrono::nanoseconds d) {
  r.on_backpressure(d);
  r.on_resume();
};
template <class R>
concept partitioned_reader = requires(const R& r, std::vector<std::int32_t>& out) {
  { r.assignment_version() } -> std::convertible_to<std::uint64_t>;
  r.held_partitions(out);
  { r.partition_idle_timeout() } -> std::convertible_to<std::chrono::nanoseconds>;
};
template <class R>
concept draining_reader = requires(R& r, const R& cr) {
  { r.settled() } -> std::convertible_to<bool>;
  r.close();
  { cr.drain_timeout() } -> std::convertible_to<std::chrono::nanoseconds>;
};

/// Runs one split: constructed at build time on the thread calling runtime::run, then
/// start() on the worker's loop; every later call runs there (post and timers).
template <class Reader, class T, class P = acked>
class source_driver : public std::enable_shared_from_this<source_driver<Reader, T, P>> {
  static_assert(!partitioned_reader<Reader> || carries_acks_v<P>,
                "a partitioned reader's records carry their source position: its policy is rill::acked");

 public:
  /// `on_closed` (draining_reader only; may be empty): called once on the worker when the
  /// reader was closed after its drain. The DSL passes the run's drain_done, so that a
  /// run ends only after every draining reader's final commit (a transactional sink
  /// commits it: the sink must still be there); with it set, the drain also stops
  /// waiting for acknowledgements once every sink of the run has ended.
  source_driver(Reader reader, stage_in<T, P>* head, std::size_t input, runtime& rt, worker& w,
                stage_counters& counters, std::size_t slice = 256, const std::string* name = nullptr,
                std::function<void()> on_closed = {})
      : reader_(std::move(reader)), head_(head), input_(input), rt_(rt), w_(w),
        counters_(counters), timer_(w.context()), slice_(slice), name_(name), on_closed_(std::move(on_closed)) {
    if constexpr (partitioned_reader<Reader>) partitions_.emplace(reader_.partition_idle_timeout());
  }

  /// On the worker's loop.
  void start() { step(); }

 private:
  using clock = std::chrono::steady_clock;

  void step() {
    turn_scope turn{&w_};  // one loop turn: busy time and the stall detector
    if (ended_) return drain();
    if (rt_.stop_requested()) return finish();
    if (!head_->on_flush()) return blocked();
    retry_ = {};
    const auto now = clock::now();
    if (blocked_) {
      blocked_ = false;
      auto& bp = w_.stats().backpressured_ns;
      bp.store(bp.load(std::memory_order_relaxed) + std::uint64_t((now - blocked_since_).count()),
               std::memory_order_relaxed);
      if constexpr (partitioned_reader<Reader>) partitions_->touch(now);
      if constexpr (backpressure_aware_reader<Reader>) reader_.on_resume();
    }
    if constexpr (gated_reader<Reader>) {
      if (!reader_.ready()) {
        reader_.serve();
        return later(std::chrono::milliseconds{1});
      }
    }
    std::size_t n = 0;
    operator_scope op{operator_slot(&w_), name_};
    const auto st = reader_.poll(
        [&](record<T, P>&& r) {
          if constexpr (partitioned_reader<Reader>) {
            sync_partitions(now);
            const event_time lane = partitions_->observe(r.position ? r.position->partition : -1, r.time, now);
            // Behind the progress already sent: a moved or resumed partition catching up.
            if (r.position && lane < sent_) r.position->catching_up = true;
          } else if (r.time > largest_) {
            largest_ = r.time;
          }
          ++n;
          head_->on_record(input_, std::move(r));
        },
        slice_);
    counters_.add(counters_.out, n);
    if constexpr (partitioned_reader<Reader>) {
      sync_partitions(now);
      largest_ = partitions_->current(now);
    }
    if (largest_ > sent_) {
      sent_ = largest_;
      head_->on_progress(input_, largest_);
    }
    switch (st) {
      case poll_status::more:
        boost::asio::post(w_.context(), [self = this->shared_from_this()] { self->step(); });
        return;
      case poll_status::idle:
        return later(std::chrono::milliseconds{1});
      case poll_status::error:
        counters_.add(counters_.errors);
        rt_.report_error(reader_.error());
        reported_ = true;
        return finish();
      case poll_status::end:
        return finish();
    }
  }
  /// Downstream is full: retry later; tell a reader that cares how long it has lasted.
  void blocked() {
    const auto now = clock::now();
    if (!blocked_) {
      blocked_ = true;
      blocked_since_ = now;
    }
    if constexpr (backpressure_aware_reader<Reader>) reader_.on_backpressure(now - blocked_since_);
    later(next_retry());
  }
  /// The wait before the next try of a full downstream: 200 us, doubled while it stays
  /// full, up to 200 us x ceil(workers / CPUs) (runtime::workers_per_cpu). With no more
  /// workers than CPUs every retry is 200 us; with many workers per CPU all blocked, their
  /// retries together stay near CPUs x 5,000 per second instead of growing with the
  /// workers and leaving no CPU to the workers that drain.
  std::chrono::nanoseconds next_retry() noexcept {
    constexpr std::chrono::nanoseconds first = std::chrono::microseconds{200};
    retry_ = retry_.count() == 0 ? first : std::min(retry_ * 2, first * std::int64_t(rt_.workers_per_cpu()));
    return retry_;
  }
  void sync_partitions(clock::time_point now) {
    if constexpr (partitioned_reader<Reader>) {
      const std::uint64_t v = reader_.assignment_version();
      if (v == version_) return;
      version_ = v;
      held_.clear();
      reader_.held_partitions(held_);
      partitions_->assign(held_, now);
    }
  }
  void finish() {
    ended_ = true;
    if constexpr (draining_reader<Reader>) drain_until_ = clock::now() + reader_.drain_timeout();
    head_->on_end(input_);
    drain();
  }
  /// After the end: push buffers on; then (draining_reader) wait until every emitted
  /// record is acknowledged downstream, both bounded by drain_timeout and by the end of
  /// every sink (after it nothing is acknowledged: a sink gives up on what it could not
  /// deliver within its flush timeout), close, and call on_closed. The run waits for that
  /// call, so the close happens while every stage is still there; only a run ended by an
  /// error leaves the close to the reader's destructor.
  void drain() {
    if (closed_) return;
    if constexpr (draining_reader<Reader>) {
      // Inside a run that waits for on_closed: also not past the end of every sink.
      const bool patient = clock::now() < drain_until_ && !(on_closed_ && rt_.sinks_finished());
      if (!head_->on_flush() && patient) return later(next_retry());
      if (!reader_.settled() && patient) return later(std::chrono::milliseconds{1});
      reader_.close();
      closed_ = true;
      // A close that failed (a final offset commit not confirmed) is the run's error too.
      if (!reported_) {
        if (auto e = reader_.error(); !e.empty()) {
          counters_.add(counters_.errors);
          rt_.report_error(std::move(e));
        }
      }
      if (on_closed_) on_closed_();
    } else {
      if (!head_->on_flush()) return later(next_retry());
      closed_ = true;
    }
  }
  void later(std::chrono::nanoseconds d) {
    timer_.expires_after(d);
    timer_.async_wait([self = this->shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->step();
    });
  }

  Reader reader_;
  stage_in<T, P>* head_;
  std::size_t input_;
  runtime& rt_;
  worker& w_;
  stage_counters& counters_;
  boost::asio::steady_timer timer_;
  std::size_t slice_;
  const std::string* name_;  ///< the source stage's name (job_metrics), for the stall detector
  std::function<void()> on_closed_;
  event_time largest_ = event_time_min, sent_ = event_time_min;
  std::optional<partition_progress> partitions_;  ///< partitioned_reader only
  std::vector<std::int32_t> held_;
  std::uint64_t version_ = ~std::uint64_t{0};
  clock::time_point blocked_since_{}, drain_until_{};
  std::chrono::nanoseconds retry_{0};  ///< the last backpressure wait (next_retry); 0 after a free step
  bool blocked_ = false, ended_ = false, closed_ = false;
  bool reported_ = false;  ///< a poll error was reported (a close error is not reported twice)
};

/// In-memory source: `splits` vectors of records, each a split (an input). The records
/// are copied into each run. Any event times, in any order. Policy P (rill/core/record.hpp):
/// acked by default (tests give records positions and tokens); vector_source<T, unacked>
/// takes records of value and time only.
template <class T, class P = acked>
class vector_source {
 public:
  using value_type = T;
  using record_policy = P;
  vector_source(std::vector<record<T, P>> one) { splits_.push_back(std::move(one)); }
  vector_source(std::vector<std::vector<record<T, P>>> many) : splits_(std::move(many)) {}
  std::size_t split_count() const noexcept { return splits_.size(); }
  std::string name() const { return "vector_source"; }

  class reader {
   public:
    explicit reader(const std::vector<record<T, P>>* data) : data_(data) {}
    template <class Emit>
    poll_status poll(Emit&& emit, std::size_t max) {
      for (std::size_t n = 0; n < max && pos_ < data_->size(); ++n) emit(record<T, P>((*data_)[pos_++]));
      return pos_ < data_->size() ? poll_status::more : poll_status::end;
    }
    std::string error() const { return {}; }

   private:
    const std::vector<record<T, P>>* data_;
    std::size_t pos_ = 0;
  };
  reader open(std::size_t split) const { return reader{&splits_.at(split)}; }

 private:
  std::vector<std::vector<record<T, P>>> splits_;
};

}  // namespace rill

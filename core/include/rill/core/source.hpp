// rill/core/source.hpp — what a source is, and the driver that runs one split of it on
// a worker without ever blocking the worker's loop.
//
// Defines:
//   rill::poll_status, rill::source_of<S>   the source contract
//   rill::source_driver<Reader, T>          reads one split in slices of `slice` records
//   rill::vector_source<T>                  an in-memory source (tests, benchmarks)
//
// A source S has `using value_type = T`, `std::size_t split_count() const` and
// `Reader open(std::size_t split)` (may throw: opening happens in runtime::run on the
// calling thread, before workers start, so a missing file fails the run up front).
// A Reader has
//   template <class Emit> poll_status poll(Emit&& emit, std::size_t max_records);
//       emit(record<T>&&) up to max_records times; never blocks. Returns more (call again),
//       idle (nothing now: live capture; call again after a short delay), end, or error.
//   std::string error() const;       // after poll() returned error: "FILE: what, at byte N"
//
// Example:
//   rill::vector_source<int> src{{{3, rill::event_time{3s}}, {1, rill::event_time{1s}}}};
//   auto s = rill::from(std::move(src));   // stream<int>, see <rill/operators/stream.hpp>
//
// Split i runs on worker (i mod workers). Each split is one logical input downstream: its
// frontier (largest event time read so far) is sent as progress after every slice.
// Backpressure: before each slice the driver flushes the chain; if a bounded queue is
// full it retries on a timer (200 µs) and reads nothing meanwhile.
//
// Thread safety: a driver and its reader live on one worker.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rill/core/runtime.hpp"
#include "rill/core/stage.hpp"

namespace rill {

enum class poll_status { more, idle, end, error };

template <class S>
concept source_of = requires(S& s, const S& cs) {
  typename S::value_type;
  { cs.split_count() } -> std::convertible_to<std::size_t>;
  s.open(std::size_t{});
};

template <class Reader, class T>
class source_driver : public std::enable_shared_from_this<source_driver<Reader, T>> {
 public:
  source_driver(Reader reader, stage_in<T>* head, std::size_t input, runtime& rt, worker& w,
                stage_counters& counters, std::size_t slice = 256)
      : reader_(std::move(reader)), head_(head), input_(input), rt_(rt), w_(w),
        counters_(counters), timer_(w.context()), slice_(slice) {}

  /// On the worker's loop.
  void start() { step(); }

 private:
  void step() {
    // A stop request ends the input even while downstream is full (as kafka_source's
    // driver does): else a sink that cannot deliver held the stop until it could.
    if (!ended_ && rt_.stop_requested()) return finish();
    if (!head_->on_flush()) return later(std::chrono::microseconds{200});  // backpressure
    if (ended_) return;
    std::size_t n = 0;
    const auto st = reader_.poll(
        [&](record<T>&& r) {
          if (r.time > largest_) largest_ = r.time;
          ++n;
          head_->on_record(input_, std::move(r));
        },
        slice_);
    counters_.add(counters_.out, n);
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
        return finish();
      case poll_status::end:
        return finish();
    }
  }
  void finish() {
    ended_ = true;
    head_->on_end(input_);
    if (!head_->on_flush()) later(std::chrono::microseconds{200});
  }
  void later(std::chrono::nanoseconds d) {
    timer_.expires_after(d);
    timer_.async_wait([self = this->shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->step();
    });
  }

  Reader reader_;
  stage_in<T>* head_;
  std::size_t input_;
  runtime& rt_;
  worker& w_;
  stage_counters& counters_;
  boost::asio::steady_timer timer_;
  std::size_t slice_;
  event_time largest_ = event_time_min, sent_ = event_time_min;
  bool ended_ = false;
};

/// In-memory source: `splits` vectors of records, each a split (an input). The records
/// are copied into each run. Any event times, in any order.
template <class T>
class vector_source {
 public:
  using value_type = T;
  vector_source(std::vector<record<T>> one) { splits_.push_back(std::move(one)); }
  vector_source(std::vector<std::vector<record<T>>> many) : splits_(std::move(many)) {}
  std::size_t split_count() const noexcept { return splits_.size(); }
  std::string name() const { return "vector_source"; }

  class reader {
   public:
    explicit reader(const std::vector<record<T>>* data) : data_(data) {}
    template <class Emit>
    poll_status poll(Emit&& emit, std::size_t max) {
      for (std::size_t n = 0; n < max && pos_ < data_->size(); ++n) emit(record<T>((*data_)[pos_++]));
      return pos_ < data_->size() ? poll_status::more : poll_status::end;
    }
    std::string error() const { return {}; }

   private:
    const std::vector<record<T>>* data_;
    std::size_t pos_ = 0;
  };
  reader open(std::size_t split) const { return reader{&splits_.at(split)}; }

 private:
  std::vector<std::vector<record<T>>> splits_;
};

}  // namespace rill

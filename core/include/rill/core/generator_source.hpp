// rill/core/generator_source.hpp — a source of `count` records made by a function, at a
// target rate in processing time.
//
// Defines rill::generator_source<F>, rill::generator_options.
//
// Example (4,000 records a second for 5 s; the value carries its creation time;
// compiled by tests/banner_examples.py):
//   #include <rill/operators/stream.hpp>
//   struct item { std::uint64_t seq; rill::steady_time born; };
//   rill::generator_source gen{{.count = 20'000, .rate = 4000},
//                              [](std::uint64_t i) { return item{i, std::chrono::steady_clock::now()}; }};
//   auto s = rill::from(std::move(gen));   // stream<item>
//
// One split. fn(i) is called for i = 0 .. count-1, in order, on the worker, when record i
// is due: at start + i / rate (the first at start; start = the first poll). Each poll
// emits the records due by now (at most the driver's slice) and returns idle while the
// next one is not due yet, so the worker is never blocked; the driver polls again about
// a millisecond later, so records come in bursts of up to rate/1000. rate 0 = as fast as
// the pipeline takes them.
//
// Event time: when fn returns rill::record<T, P>, that record as is (policy P); when it
// returns T, the time record i is due after start (i / rate seconds; i nanoseconds when
// rate is 0), and the records are rill::unacked (value and time: rill/core/record.hpp).
//
// Thread safety: the source is copied into each run; fn is called on one worker only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "rill/core/record.hpp"
#include "rill/core/source.hpp"
#include "rill/core/time.hpp"

namespace rill {

struct generator_options {
  std::uint64_t count = 0;  ///< records in all
  double rate = 0;          ///< records per second of processing time; 0 = unthrottled
};

namespace detail {
// What a generator function returning R makes: its value type and record policy (a plain
// value: unacked; a record<T, P>: T and P).
template <class R>
struct generated {
  using type = R;
  using policy = unacked;
};
template <class T, class P>
struct generated<record<T, P>> {
  using type = T;
  using policy = P;
};
}  // namespace detail

template <class F>
class generator_source {
  using result = std::invoke_result_t<const F&, std::uint64_t>;

 public:
  using value_type = typename detail::generated<result>::type;
  /// unacked when fn returns T; the policy of fn's record otherwise (rill/core/record.hpp).
  using record_policy = typename detail::generated<result>::policy;

  generator_source(generator_options o, F fn) : o_(o), fn_(std::move(fn)) {}
  std::size_t split_count() const noexcept { return 1; }
  std::string name() const { return "generator_source"; }

  class reader {
   public:
    explicit reader(const generator_source* s) : s_(s) {}
    template <class Emit>
    poll_status poll(Emit&& emit, std::size_t max) {
      return poll_at(std::forward<Emit>(emit), max, std::chrono::steady_clock::now());
    }
    /// poll() at processing time `now` (tests drive it with a manual clock).
    template <class Emit>
    poll_status poll_at(Emit&& emit, std::size_t max, steady_time now) {
      if (!t0_) t0_ = now;
      const std::uint64_t due = due_by(now);
      for (std::size_t n = 0; n < max && sent_ < due; ++n, ++sent_) emit(make(sent_));
      if (sent_ == s_->o_.count) return poll_status::end;
      return sent_ < due ? poll_status::more : poll_status::idle;
    }
    /// Records emitted so far.
    std::uint64_t sent() const noexcept { return sent_; }
    std::string error() const { return {}; }

   private:
    std::uint64_t due_by(steady_time now) const {
      const auto& o = s_->o_;
      if (o.rate <= 0) return o.count;
      const double elapsed = std::chrono::duration<double>(now - *t0_).count();
      return std::min<std::uint64_t>(o.count, std::uint64_t(elapsed * o.rate) + 1);
    }
    record<value_type, record_policy> make(std::uint64_t i) const {
      if constexpr (std::is_same_v<result, record<value_type, record_policy>>) {
        return s_->fn_(i);
      } else {
        const auto& o = s_->o_;
        const auto t = o.rate > 0 ? event_time{std::chrono::nanoseconds{std::int64_t(double(i) * 1e9 / o.rate)}}
                                  : event_time{std::chrono::nanoseconds{std::int64_t(i)}};
        return record<value_type, record_policy>{s_->fn_(i), t};
      }
    }
    const generator_source* s_;
    std::uint64_t sent_ = 0;
    std::optional<steady_time> t0_;
  };
  reader open(std::size_t) const { return reader{this}; }

 private:
  generator_options o_;
  F fn_;
};

}  // namespace rill

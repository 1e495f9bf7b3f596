// rill/core/watermark.hpp — the event-time watermark of one operator instance.
//
// Defines:
//   rill::watermark_tracker   W = min over live inputs of (largest event time seen - delay),
//                             monotone, with idle inputs and end of stream
//                             (docs/design.md "Records, time, watermarks").
//   rill::partition_progress  the progress of one source split that reads several
//                             partitions (Kafka): min over its live partitions
//   rill::detail::saturating_sub   event_time - duration that stops at -/+infinity
//
// Example:
//   using namespace std::chrono_literals;
//   rill::manual_clock clk;
//   rill::watermark_tracker wm{2, /*max_delay=*/0s, /*idle_timeout=*/1s, clk.now()};
//   wm.observe(0, rill::event_time{5s}, clk.now());   // input 1 has sent nothing: W = -inf
//   clk.advance(1s);
//   wm.tick(clk.now());                               // input 1 idle for 1 s: ignored
//   assert(wm.current() == rill::event_time{5s});
//   wm.end(0); wm.end(1);                             // end of stream: W = +inf
//   assert(wm.current() == rill::event_time_max);
//
//   rill::partition_progress pp{/*idle_timeout=*/10s};
//   pp.assign({0, 1}, clk.now());                     // the split holds partitions 0 and 1
//   pp.observe(0, rill::event_time{7s}, clk.now());   // partition 1 not read yet: -inf
//   assert(pp.current(clk.now()) == rill::event_time_min);
//
// Thread safety: single-threaded state machines. Distinct objects: safe. Shared
// objects: unsafe — every call on one tracker must come from the owning worker's thread
// (docs/design.md "Runtime": no locks in operator code). Nothing here blocks or does I/O.
#pragma once

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "rill/core/error.hpp"
#include "rill/core/time.hpp"

namespace rill {

namespace detail {

/// t - d for d >= 0, saturating: -infinity stays -infinity, +infinity stays +infinity
/// (infinity minus a finite delay), and a result below event_time_min becomes
/// event_time_min instead of overflowing. Precondition: d >= 0.
constexpr event_time saturating_sub(event_time t, std::chrono::nanoseconds d) noexcept {
  if (t == event_time_min || t == event_time_max) return t;
  const std::int64_t v = t.time_since_epoch().count();
  const std::int64_t lo = std::numeric_limits<std::int64_t>::min();
  if (v < lo + d.count()) return event_time_min;  // lo + d cannot overflow: d >= 0
  return event_time{std::chrono::nanoseconds{v - d.count()}};
}

}  // namespace detail

/// Tracks the watermark of one operator instance fed by `inputs` inputs (upstream
/// instances, Kafka partitions, ...), numbered 0 .. inputs-1.
///
/// The rule (docs/design.md "Records, time, watermarks"):
///   - each input i has a largest event time seen, largest_i (-infinity before it sends
///     anything); its own watermark is largest_i - max_delay (saturating at -/+infinity);
///   - W = minimum over *active* inputs: an input is active unless it has ended (end())
///     or is idle (tick() found no observe() for >= idle_timeout);
///   - an ended input counts as +infinity: once every input has ended, W = event_time_max
///     and every window fires;
///   - if every input that has not ended is idle, W stays where it was;
///   - W never decreases. An idle input that comes back does not pull W down: it is held
///     to the current W, and its records older than W are late.
///
/// Cost: observe() and end() are O(1) unless the input was the last active one at or
/// below W (it "held" W: then W may rise and they scan, O(inputs)); tick() and observe()
/// of an idle input are O(inputs). So n inputs that all end at the same watermark (an
/// exchange's inputs at end of stream) cost O(n) together, not O(n^2). Memory: O(inputs),
/// fixed at construction.
///
/// Thread safety: distinct objects safe, shared objects unsafe (one worker owns it).
class watermark_tracker {
 public:
  /// `inputs`: number of inputs, >= 1. `max_delay`: the allowed out-of-order delay,
  /// >= 0 (0 = records must arrive in event-time order per input). `idle_timeout`:
  /// processing time without observe() after which an input is idle, >= 0; 0 = inputs
  /// never become idle. `now`: the processing time at construction; an input that never
  /// sends anything becomes idle idle_timeout after it.
  ///
  /// Throws rill::config_error with key "watermark.inputs" (inputs == 0),
  /// "watermark.max_delay" (< 0) or "watermark.idle_timeout" (< 0); std::bad_alloc if
  /// the per-input state cannot be allocated.
  watermark_tracker(std::size_t inputs, std::chrono::nanoseconds max_delay,
                    std::chrono::nanoseconds idle_timeout, steady_time now)
      : max_delay_(max_delay), idle_timeout_(idle_timeout) {
    if (inputs == 0) throw config_error("watermark.inputs", "watermark.inputs must be >= 1");
    if (max_delay < std::chrono::nanoseconds::zero())
      throw config_error("watermark.max_delay", "watermark.max_delay must be >= 0");
    if (idle_timeout < std::chrono::nanoseconds::zero())
      throw config_error("watermark.idle_timeout", "watermark.idle_timeout must be >= 0");
    sole_floor_ = std::numeric_limits<std::int64_t>::min() + max_delay.count();  // max_delay >= 0 here
    inputs_.assign(inputs, input_state{event_time_min, now, false, false});
    live_ = holders_ = inputs;  // all at -infinity = W
    one_input_ = inputs == 1;
    sole_live_ = one_input_ && idle_timeout == std::chrono::nanoseconds::zero();
  }

  /// Input `input` has seen event time `t`: a record's time, or a progress marker
  /// meaning "this input has seen everything up to t". Raises largest_input to t if t is
  /// larger (an older t only refreshes activity), marks the input active (an idle input
  /// counts again from now on) and records `now` as its last activity.
  ///
  /// Call is_late(t) *before* observe(t) to classify a record: after it, the record's
  /// own time may already be part of W. Observing on an ended input is ignored (end is
  /// final). Does not re-evaluate the idleness of other inputs: only tick() does.
  ///
  /// Precondition: input < inputs() (checked by assert in debug builds). noexcept.
  void observe(std::size_t input, event_time t, steady_time now) noexcept {
    assert(input < inputs_.size());
    input_state& s = inputs_[input];
    if (sole_live_) {  // W = largest - max_delay: no activity bookkeeping, no scan
      if (t > s.largest) {
        s.largest = t;
        current_ = sole_watermark(t);
      }
      return;
    }
    if (s.ended || s.idle) [[unlikely]] {
      observe_inactive(s, t, now);
      return;
    }
    if (idle_timeout_.count() != 0) s.last_active = now;  // only tick() reads it
    if (t <= s.largest) return;
    const event_time old_largest = s.largest;
    s.largest = t;
    if (one_input_) {  // the only input defines W: no scan
      current_ = std::max(current_, detail::saturating_sub(t, max_delay_));
      return;
    }
    // W moves only when no active input holds it (see holders_): an input whose old
    // contribution was above W held nothing, and one that stays at or below W still holds.
    if (detail::saturating_sub(old_largest, max_delay_) <= current_ &&
        detail::saturating_sub(t, max_delay_) > current_ && --holders_ == 0)
      recompute();
  }

  /// Input `input` has finished: from now on it counts as +infinity and no longer holds
  /// W back. When every input has ended, W = event_time_max (end of stream raises the
  /// watermark to +infinity, so every window fires). Idempotent.
  /// Precondition: input < inputs() (assert in debug builds). noexcept; O(1) unless the
  /// input was the last one holding W (see the class comment), then O(inputs).
  void end(std::size_t input) noexcept {
    assert(input < inputs_.size());
    input_state& s = inputs_[input];
    if (s.ended) return;
    s.ended = true;
    sole_live_ = false;
    if (--live_ == 0) {
      current_ = event_time_max;
      holders_ = 0;
      return;
    }
    // An idle input or one above W held nothing: the minimum over the active inputs and
    // so W stay where they are.
    if (!s.idle && detail::saturating_sub(s.largest, max_delay_) <= current_ && --holders_ == 0) recompute();
  }

  /// Re-evaluates idleness at processing time `now`: an input that has not ended and
  /// has had no observe() for >= idle_timeout (since its last observe(), or since
  /// construction if it never sent anything) becomes idle and leaves the minimum, which
  /// may raise W (an idle input stops holding the watermark back, as Flink's
  /// WatermarkStrategy::withIdleness). With idle_timeout == 0 this does nothing. The runtime calls it from a
  /// timer; tests call it with a manual_clock. noexcept; O(inputs).
  void tick(steady_time now) noexcept {
    if (idle_timeout_ == std::chrono::nanoseconds::zero()) return;
    bool changed = false;
    for (input_state& s : inputs_) {
      if (s.ended || s.idle) continue;
      if (now - s.last_active >= idle_timeout_) {
        s.idle = true;
        changed = true;
      }
    }
    if (changed) recompute();
  }

  /// The watermark W (see the class comment). event_time_min (-infinity) until every
  /// active input has sent something; event_time_max (+infinity) once every input has
  /// ended. Monotone: never smaller than any value it returned before. noexcept, O(1).
  event_time current() const noexcept { return current_; }

  /// True when a record with event time `t` is late: t < current().
  ///
  /// With one input (and before that input is idle) this is docs/design.md
  /// "window_sort": late when (largest seen) - t > delay, because
  /// t < largest - delay  <=>  largest - t > delay; so largest - t == delay is in time.
  /// With several inputs a record is late only when it is older
  /// than the current (minimum) watermark — a record behind its own input's largest by
  /// more than the delay is still in time while a slower input holds W back.
  /// Call it before observe() for the same record. noexcept, O(1).
  bool is_late(event_time t) const noexcept { return t < current_; }

  /// Number of inputs given at construction.
  std::size_t inputs() const noexcept { return inputs_.size(); }
  /// The max out-of-order delay given at construction.
  std::chrono::nanoseconds max_delay() const noexcept { return max_delay_; }
  /// The idle timeout given at construction (0 = never idle).
  std::chrono::nanoseconds idle_timeout() const noexcept { return idle_timeout_; }
  /// Largest event time input `input` has observed; event_time_min if none.
  event_time largest_seen(std::size_t input) const noexcept {
    assert(input < inputs_.size());
    return inputs_[input].largest;
  }
  /// Whether input `input` is currently idle (set by tick(), cleared by observe()).
  bool is_idle(std::size_t input) const noexcept {
    assert(input < inputs_.size());
    return inputs_[input].idle;
  }
  /// Whether end(input) has been called.
  bool has_ended(std::size_t input) const noexcept {
    assert(input < inputs_.size());
    return inputs_[input].ended;
  }

 private:
  struct input_state {
    event_time largest;       // -infinity until the first observe()
    steady_time last_active;  // last observe(), or construction time
    bool idle;
    bool ended;
  };

  // saturating_sub(t, max_delay_) for t > event_time_min, without branches. With one
  // input that never idles or ends (sole_live_), W is exactly this of the largest time:
  // both only rise, so observe() sets W without comparing it with the old one.
  event_time sole_watermark(event_time t) const noexcept {
    const std::int64_t v = t.time_since_epoch().count();
    // v - max_delay in unsigned arithmetic (defined on wrap-around); the selects below
    // replace a wrapped value (v below sole_floor_) and +infinity.
    std::int64_t w = std::int64_t(std::uint64_t(v) - std::uint64_t(max_delay_.count()));
    w = v < sole_floor_ ? std::numeric_limits<std::int64_t>::min() : w;
    w = v == std::numeric_limits<std::int64_t>::max() ? v : w;
    return event_time{std::chrono::nanoseconds{w}};
  }

  // observe() of an ended input (ignored) or an idle one (active again).
  [[gnu::noinline]] void observe_inactive(input_state& s, event_time t, steady_time now) noexcept {
    if (s.ended) return;
    s.last_active = now;
    s.idle = false;
    if (t > s.largest) {
      s.largest = t;
      if (one_input_) {
        current_ = std::max(current_, detail::saturating_sub(t, max_delay_));
        return;
      }
    }
    recompute();  // every other input may be idle: this one now defines the minimum
  }

  void recompute() noexcept {
    event_time candidate = event_time_max;
    bool all_ended = true;
    bool any_active = false;
    for (const input_state& s : inputs_) {
      if (s.ended) continue;
      all_ended = false;
      if (s.idle) continue;
      any_active = true;
      candidate = std::min(candidate, detail::saturating_sub(s.largest, max_delay_));
    }
    if (all_ended) {
      current_ = event_time_max;
    } else if (any_active) {
      current_ = std::max(current_, candidate);
    }
    // else: every unfinished input is idle — W stays where it was.
    holders_ = 0;
    for (const input_state& s : inputs_)
      if (!s.ended && !s.idle && detail::saturating_sub(s.largest, max_delay_) <= current_) ++holders_;
  }

  std::vector<input_state> inputs_;
  // Inputs not ended; active inputs whose contribution (largest - max_delay) is <= W.
  // While holders_ > 0 the minimum over the active inputs is <= W, so W cannot rise:
  // observe() and end() scan only when they take holders_ to 0. Exact after every call
  // (recompute() recounts whenever W or an input's idleness changes). With one input
  // holders_ is neither kept nor read.
  std::size_t live_ = 0, holders_ = 0;
  bool one_input_ = false;  // inputs_.size() == 1, without loading the vector's ends
  // One input that has not ended and never becomes idle (idle_timeout 0): observe()
  // only raises largest and W, without the activity bookkeeping tick() needs.
  bool sole_live_ = false;
  std::chrono::nanoseconds max_delay_;
  std::chrono::nanoseconds idle_timeout_;
  // event_time_min + max_delay in ns: below it, t - max_delay saturates at -infinity.
  std::int64_t sole_floor_ = 0;
  event_time current_ = event_time_min;
};

/// The progress of one source split that reads several partitions (a Kafka consumer's
/// assigned partitions): what the split may claim downstream as "everything up to t has
/// been read". Flink's Kafka source tracks watermarks per partition the same way
/// (Flink docs, "Generating Watermarks": watermark strategies and the Kafka connector).
///
/// The rule: each held partition has a largest event time read (-infinity until its
/// first record); current() is the minimum over the held partitions that are not idle.
/// A partition is idle when nothing was observed from it for >= idle_timeout (0 = never
/// idle); it counts again from its next record. When every held partition is idle (the
/// split has caught up with all of them), current() is the maximum over them, so the last
/// windows fire instead of waiting for new data. With no partition held: -infinity.
/// Unlike watermark_tracker, current() is not monotone by itself (a new partition starts
/// at -infinity); the driver sends only values above what it sent before.
///
/// Cost: observe() O(1) for repeated partitions (a one-entry cache), else O(held);
/// assign() and current() O(held). Memory O(held partitions).
///
/// Thread safety: distinct objects safe, shared objects unsafe (one worker owns it).
class partition_progress {
 public:
  /// `idle_timeout` >= 0 (processing time; 0 = a partition never goes idle). noexcept.
  explicit partition_progress(std::chrono::nanoseconds idle_timeout) noexcept : idle_(idle_timeout) {}

  /// The partitions held from now on: kept ones keep their state, new ones start at
  /// -infinity with `now` as their last activity, the others are forgotten. May allocate.
  void assign(const std::vector<std::int32_t>& held, steady_time now) {
    std::erase_if(lanes_, [&](const lane& l) { return std::find(held.begin(), held.end(), l.pid) == held.end(); });
    for (const auto pid : held)
      if (std::none_of(lanes_.begin(), lanes_.end(), [&](const lane& l) { return l.pid == pid; }))
        lanes_.push_back({pid, event_time_min, now});
    hit_ = 0;
  }

  /// A record of partition `pid` with event time `t` was read at `now`. A partition not
  /// held is added (a record can arrive before the assignment is seen). Returns the
  /// partition's largest event time after it. May allocate.
  event_time observe(std::int32_t pid, event_time t, steady_time now) {
    lane& l = lane_of(pid, now);
    if (t > l.largest) l.largest = t;
    l.last = now;
    return l.largest;
  }

  /// Every held partition counts as active from `now`: time the split spent not reading
  /// (blocked by backpressure) does not make its partitions idle. noexcept.
  void touch(steady_time now) noexcept {
    for (auto& l : lanes_) l.last = now;
  }

  /// The split's progress at `now` (see the class comment). noexcept.
  event_time current(steady_time now) const noexcept {
    event_time m = event_time_max, all = event_time_min;
    bool any = false;
    for (const auto& l : lanes_) {
      all = std::max(all, l.largest);
      if (idle_.count() > 0 && now - l.last >= idle_) continue;
      any = true;
      m = std::min(m, l.largest);
    }
    return any ? m : all;
  }

  /// Number of partitions held (assigned or seen). noexcept.
  std::size_t partitions() const noexcept { return lanes_.size(); }

 private:
  struct lane {
    std::int32_t pid;
    event_time largest;  // -infinity until its first record
    steady_time last;    // last record, assignment, or touch()
  };
  lane& lane_of(std::int32_t pid, steady_time now) {
    if (hit_ < lanes_.size() && lanes_[hit_].pid == pid) return lanes_[hit_];
    for (hit_ = 0; hit_ < lanes_.size(); ++hit_)
      if (lanes_[hit_].pid == pid) return lanes_[hit_];
    lanes_.push_back({pid, event_time_min, now});
    return lanes_.back();  // hit_ == old size == its index
  }

  std::chrono::nanoseconds idle_;
  std::vector<lane> lanes_;
  std::size_t hit_ = 0;
};

}  // namespace rill

// rill/operators/window_sort.hpp — event-time tumbling windows, sorted inside.
//
// Defines:
//   rill::window_sort_options   length, delay, idle timeout, buffer cap, late policy
//   rill::window<T>             one fired window: [start, end) and its records, sorted
//   rill::window_sorter<T>      the single-threaded state machine of one operator instance
//                               (docs/design.md "window_sort")
//
// Example (compiled by tests/banner_examples.py):
//   using namespace std::chrono_literals;
//   rill::manual_clock clk;
//   rill::window_sorter<int> ws{{.length = 10s, .max_delay = 2s}, /*inputs=*/1, clk.now()};
//   auto on_window = [](rill::window<int>&& w) { /* w.records sorted by time */ };
//   auto on_late = [](rill::record<int>&& r, rill::event_time start, rill::event_time end) {};
//   for (int s : {1, 5, 11, 9, 15})
//     ws.push(0, {s, rill::event_time{std::chrono::seconds{s}}}, clk.now(), on_window, on_late);
//   // at 15 s: W = 13 s >= 10 s, so [0 s, 10 s) fired with 1, 5, 9
//   ws.end(0, on_window);   // end of stream: [10 s, 20 s) fires with 11, 15
//
// Thread safety: a single-threaded state machine. Distinct objects: safe. Shared objects:
// unsafe — one worker owns an instance and makes every call on its thread (docs/design.md
// "Runtime"). Callbacks run synchronously on the calling thread, inside the call. Nothing
// here blocks, sleeps, or does I/O; the runtime wraps it.
#pragma once

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "rill/core/error.hpp"
#include "rill/core/record.hpp"
#include "rill/core/time.hpp"
#include "rill/core/watermark.hpp"

namespace rill {

/// Configuration of one window_sort stage. Aggregate: use designated initializers,
/// `{.length = 10s, .max_delay = 2s}`.
struct window_sort_options {
  /// Window length L (> 0): window k covers event times [kL, (k+1)L).
  std::chrono::nanoseconds length{0};
  /// Max out-of-order delay (>= 0): W = largest event time seen - max_delay.
  std::chrono::nanoseconds max_delay{0};
  /// Processing time after which a silent input is idle (>= 0; 0 = never idle).
  std::chrono::nanoseconds idle_timeout{0};
  /// Cap on records buffered in open windows (>= 1). See window_sorter, "Memory bound".
  std::size_t max_buffered = std::size_t{1} << 20;
  /// What happens to a late record: side_output calls on_late; drop only counts it.
  enum class late_policy { side_output, drop } on_late = late_policy::side_output;

  /// Throws rill::config_error naming the first bad key: "window_sort.length" (<= 0),
  /// "window_sort.max_delay" (< 0), "window_sort.idle_timeout" (< 0),
  /// "window_sort.max_buffered" (== 0), "window_sort.on_late" (not a listed value).
  /// Rule: docs/design.md "Errors" (bad configuration throws config_error with the key).
  void validate() const {
    using std::chrono::nanoseconds;
    if (length <= nanoseconds::zero())
      throw config_error("window_sort.length", "window_sort.length must be > 0");
    if (max_delay < nanoseconds::zero())
      throw config_error("window_sort.max_delay", "window_sort.max_delay must be >= 0");
    if (idle_timeout < nanoseconds::zero())
      throw config_error("window_sort.idle_timeout", "window_sort.idle_timeout must be >= 0");
    if (max_buffered == 0)
      throw config_error("window_sort.max_buffered", "window_sort.max_buffered must be >= 1");
    if (on_late != late_policy::side_output && on_late != late_policy::drop)
      throw config_error("window_sort.on_late", "window_sort.on_late must be side_output or drop");
  }
};

/// One fired window: event times [start, end), its records sorted by event time (stable:
/// equal times keep arrival order). `early` is true when the buffer cap forced it out
/// before the watermark reached `end` (records for it that arrive later go to the late
/// side output). Owns its records.
template <class T, class P = acked>
struct window {
  using value_type = T;
  using record_policy = P;
  event_time start;
  event_time end;
  std::vector<record<T, P>> records;
  bool early = false;
};

/// An unacked window as an acked one (its records by rill::to_acked): for user functions
/// written for window<T>&&. O(records).
template <class T>
window<T, acked> to_acked(window<T, unacked>&& w) {
  window<T, acked> out{w.start, w.end, {}, w.early};
  out.records.reserve(w.records.size());
  for (auto& r : w.records) out.records.push_back(to_acked(std::move(r)));
  return out;
}

namespace detail {

/// Start of the window holding t: rill::window_start, except that a window that would
/// start below event_time_min (t within L of -infinity) starts at event_time_min instead
/// of overflowing. Precondition: length > 0.
constexpr event_time window_start_saturating(event_time t,
                                             std::chrono::nanoseconds length) noexcept {
  const std::int64_t k = floor_div(t.time_since_epoch().count(), length.count());
  if (k < std::numeric_limits<std::int64_t>::min() / length.count()) return event_time_min;
  return event_time{std::chrono::nanoseconds{k * length.count()}};
}

/// start + length, saturating at event_time_max. Precondition: length > 0.
constexpr event_time window_end_saturating(event_time start,
                                           std::chrono::nanoseconds length) noexcept {
  const std::int64_t s = start.time_since_epoch().count();
  if (s > std::numeric_limits<std::int64_t>::max() - length.count()) return event_time_max;
  return event_time{std::chrono::nanoseconds{s + length.count()}};
}

}  // namespace detail

/// The window_sort operator of one instance: assigns records to event-time tumbling
/// windows, buffers them, and emits each window sorted once the watermark passes its end.
///
/// Rules (docs/design.md "window_sort" and "Records, time, watermarks"):
///   - window k covers [kL, (k+1)L); negative times floor (rill::window_start), so an event
///     exactly at kL belongs to window k, never k-1;
///   - W comes from a watermark_tracker over `inputs` inputs (min over active inputs of
///     largest - max_delay, idle inputs ignored, +infinity when all inputs ended);
///   - a record is late when, *before* its own time is observed, t < W — with one input,
///     exactly "(largest seen) - t > delay"; with several, "older than the current
///     watermark", so an input that comes back from idle is late only for records older
///     than W (as Flink's idleness, FLINK-3121) — or when its window has already fired on time;
///   - a late record is never lost silently: the `late` counter rises and, with
///     late_policy::side_output, it goes to on_late with its window bounds (never silent, unlike
///     the drop FLINK-7611 reports);
///     with late_policy::drop it is only counted (logging belongs to the runtime);
///   - a window fires when W >= its end; windows fire in increasing start order, each
///     on time at most once; windows that received no record are never emitted.
///
/// Memory bound: at most options.max_buffered records are buffered, ever. When a push
/// would exceed the cap and no window can fire on time, the OLDEST open window fires
/// early as a segment (window::early = true, counted by early_fired()). Records that
/// arrive later for that window, and are not late by the watermark, start a new segment
/// of the same window, which fires later (early again at the cap, or on time). So a
/// window holding more than the cap comes out as several sorted segments with the same
/// start/end: each record exactly once, nothing late because of the cap, memory bounded.
/// A consumer that needs one result per window merges segments (netflow sums rows of the
/// same window and conversation). Backpressure itself comes from the runtime's bounded
/// queues; this cap only bounds the operator's own memory (docs/design.md "window_sort").
/// Memory: O(buffered records + open windows).
///
/// Callbacks are template parameters (no std::function on the hot path) and run
/// synchronously inside the call:
///   on_window(rill::window<T>&&)
///   on_late(rill::record<T>&&, rill::event_time window_start, rill::event_time window_end)
/// A callback must not call back into the same window_sorter.
///
/// Errors: the constructor throws config_error. Other calls throw only std::bad_alloc
/// (buffer growth) or whatever a callback throws; a window handed to a callback has
/// already left the sorter (and is counted), so an exception from on_window loses that
/// window's ownership to the callback, and windows not yet emitted stay open and fire on
/// the next call (basic guarantee).
///
/// Cost: push is O(log open_windows) amortized; sorting happens once per window at fire
/// time (std::stable_sort, skipped when records arrived in order).
///
/// Thread safety: distinct objects safe, shared objects unsafe (one worker owns it).
template <class T, class P = acked>
class window_sorter {
 public:
  using value_type = T;

  /// `options`: validated here. `inputs`: number of inputs (>= 1), numbered
  /// 0 .. inputs-1. `now`: processing time at construction (start of idle timers).
  /// Throws rill::config_error (keys of window_sort_options::validate(), or
  /// "window_sort.inputs" when inputs == 0); std::bad_alloc.
  window_sorter(window_sort_options options, std::size_t inputs, steady_time now)
      : options_(checked(options, inputs)),
        tracker_(inputs, options_.max_delay, options_.idle_timeout, now) {}

  /// Record `r` arrives on input `input` at processing time `now`.
  ///  1. Late check against the watermark *before* r's time is observed, and against the
  ///     windows already fired (see class comment). A late record goes to
  ///     on_late(std::move(r), window_start, window_end) — unless the policy is drop —
  ///     and late() rises.
  ///  2. Otherwise r is buffered in its window [kL, (k+1)L), after any records of equal
  ///     time already there (stable).
  ///  3. r's time is observed (may raise W; marks the input active) — unless r came from
  ///     a partitioned source (r.position set: see rill::advances_progress; then only
  ///     the input's activity is refreshed and progress() moves W) — and every window
  ///     with end <= W fires through on_window, in window order.
  /// A late record still counts as activity of its input (resets its idle timer; an
  /// idle input that sends only late data is active again and holds W at its value).
  /// If the buffer is full (buffered() == max_buffered), windows that can fire on time
  /// fire first; if that frees nothing, the oldest open window fires early.
  /// Precondition: input < inputs. Throws std::bad_alloc or what a callback throws.
  template <class OnWindow, class OnLate>
  void push(std::size_t input, record<T, P>&& r, steady_time now, OnWindow&& on_window,
            OnLate&& on_late) {
    check_on_window<OnWindow>();
    static_assert(std::is_invocable_v<OnLate&, record<T, P>&&, event_time, event_time>,
                  "on_late must be callable as on_late(rill::record<T>&& r, "
                  "rill::event_time window_start, rill::event_time window_end)");
    const event_time t = r.time;
    const bool late = tracker_.is_late(t) || t < fired_until_;  // before observing t
    // A partitioned source's record only marks its input active; the source's progress
    // markers carry that input's time (per-partition watermarks, record.hpp).
    tracker_.observe(input, advances_progress(r) ? t : event_time_min, now);
    if (late) {
      reject_late(std::move(r), on_late);
      fire_ready(on_window);  // W cannot rise on a late record; kept for robustness
      return;
    }
    const event_time start = detail::window_start_saturating(t, options_.length);
    if (buffered_ < options_.max_buffered) {
      buffer(start, std::move(r));
      fire_ready(on_window);
      return;
    }
    // Full. Windows before r's own that are due fire on time first (they precede r's
    // window in window order anyway).
    const event_time w = tracker_.current();
    while (!windows_.empty() && windows_.begin()->first < start &&
           end_of(windows_.begin()->first) <= w) {
      emit(windows_.begin(), false, on_window);
    }
    if (end_of(start) <= w) {
      // r's own window is due now (W jumped past it on r's observation, e.g. an idle
      // input came back): emit it on time with r appended, without buffering r.
      emit_with(start, std::move(r), on_window);
      fire_ready(on_window);
      return;
    }
    while (buffered_ >= options_.max_buffered) {
      emit(windows_.begin(), true, on_window);  // oldest open window, early segment
    }
    buffer(start, std::move(r));  // a new segment if r's window just fired early
    fire_ready(on_window);
  }

  /// push() of a record that neither is late nor finds the buffer full, without firing:
  /// steps 2 and 3 of push() except the firing. Returns false, and leaves `r` untouched,
  /// when `r` is late or buffered() == max_buffered (the caller then calls push(), which
  /// may emit). After true, due() says whether a window is due: fire() emits it (so does
  /// any later call). Lets a caller fold records without preparing to emit (the DSL runs
  /// emitting calls on a fiber: <rill/operators/resumable.hpp>). Precondition: input <
  /// inputs. Throws std::bad_alloc.
  bool try_buffer(std::size_t input, record<T, P>& r, steady_time now) {
    const event_time t = r.time;
    if (tracker_.is_late(t) || t < fired_until_ || buffered_ >= options_.max_buffered) return false;
    tracker_.observe(input, advances_progress(r) ? t : event_time_min, now);
    buffer(detail::window_start_saturating(t, options_.length), std::move(r));
    return true;
  }
  /// progress() without its firing: observes t for `input` (marks it active). Then due()
  /// says whether fire() has work. Precondition: input < inputs. noexcept.
  void observe(std::size_t input, event_time t, steady_time now) noexcept { tracker_.observe(input, t, now); }
  /// Whether a window is due: W >= the end of the oldest open window (fire() emits it).
  bool due() const noexcept {
    return !windows_.empty() && end_of(windows_.begin()->first) <= tracker_.current();
  }
  /// Fires every due window through on_window, in window order (what every other call
  /// does last).
  template <class OnWindow>
  void fire(OnWindow&& on_window) {
    check_on_window<OnWindow>();
    fire_ready(on_window);
  }

  /// Progress marker: input `input` has seen everything up to event time `t` (e.g. a
  /// Kafka partition's position, or an upstream watermark). Observes t, marks the input
  /// active, and fires every window with end <= W. Precondition: input < inputs.
  template <class OnWindow>
  void progress(std::size_t input, event_time t, steady_time now, OnWindow&& on_window) {
    check_on_window<OnWindow>();
    tracker_.observe(input, t, now);
    fire_ready(on_window);
  }

  /// Input `input` has ended (end of stream): it no longer holds W back. When every
  /// input has ended, W = +infinity and every open window fires (docs/design.md
  /// "Records, time, watermarks"). Idempotent.
  /// Precondition: input < inputs.
  template <class OnWindow>
  void end(std::size_t input, OnWindow&& on_window) {
    check_on_window<OnWindow>();
    tracker_.end(input);
    fire_ready(on_window);
  }

  /// Processing time has advanced to `now`: inputs silent for >= idle_timeout become
  /// idle and stop holding W back (docs/design.md "Records, time, watermarks"), and every
  /// window with end <= W fires. The runtime calls this from a timer; tests use a
  /// manual_clock.
  template <class OnWindow>
  void tick(steady_time now, OnWindow&& on_window) {
    check_on_window<OnWindow>();
    tracker_.tick(now);
    fire_ready(on_window);
  }

  /// The current watermark W (event_time_min = -infinity, event_time_max = +infinity).
  event_time watermark() const noexcept { return tracker_.current(); }
  /// Late records so far: side-output plus dropped.
  std::uint64_t late() const noexcept { return late_; }
  /// Windows emitted so far, early ones included.
  std::uint64_t fired() const noexcept { return fired_; }
  /// Windows emitted early because of the max_buffered cap (a subset of fired()).
  std::uint64_t early_fired() const noexcept { return early_fired_; }
  /// Records currently buffered in open windows; never exceeds options().max_buffered.
  std::size_t buffered() const noexcept { return buffered_; }
  /// Windows currently open (holding at least one record).
  std::size_t open_windows() const noexcept { return windows_.size(); }
  /// The end of the last window fired: records before it are late. event_time_min if
  /// nothing has fired.
  event_time fired_until() const noexcept { return fired_until_; }
  /// The validated options.
  const window_sort_options& options() const noexcept { return options_; }
  /// The watermark state (per-input largest time, idleness).
  const watermark_tracker& tracker() const noexcept { return tracker_; }

 private:
  struct open_window {
    std::vector<record<T, P>> records;
    bool sorted = true;  // records arrived in non-decreasing time order
  };
  using map_type = std::map<event_time, open_window>;

  static window_sort_options checked(const window_sort_options& options, std::size_t inputs) {
    options.validate();
    if (inputs == 0) throw config_error("window_sort.inputs", "window_sort.inputs must be >= 1");
    return options;
  }

  template <class OnWindow>
  static constexpr void check_on_window() {
    static_assert(std::is_invocable_v<std::remove_reference_t<OnWindow>&, window<T, P>&&>,
                  "on_window must be callable as on_window(rill::window<T>&& w)");
  }

  event_time end_of(event_time start) const noexcept {
    return detail::window_end_saturating(start, options_.length);
  }

  static void append(open_window& w, record<T, P>&& r) {
    if (!w.records.empty() && r.time < w.records.back().time) w.sorted = false;
    w.records.push_back(std::move(r));
  }

  void buffer(event_time start, record<T, P>&& r) {
    auto it = windows_.lower_bound(start);
    if (it == windows_.end() || it->first != start)
      it = windows_.emplace_hint(it, start, open_window{});
    append(it->second, std::move(r));
    ++buffered_;
  }

  template <class OnLate>
  void reject_late(record<T, P>&& r, OnLate& on_late) {
    ++late_;
    if (options_.on_late == window_sort_options::late_policy::drop) return;
    const event_time start = detail::window_start_saturating(r.time, options_.length);
    on_late(std::move(r), start, end_of(start));
  }

  template <class OnWindow>
  void fire_ready(OnWindow& on_window) {
    const event_time w = tracker_.current();
    while (!windows_.empty() && end_of(windows_.begin()->first) <= w) {
      emit(windows_.begin(), false, on_window);
    }
  }

  // Emits r's own (due) window with r appended; r was never counted as buffered.
  template <class OnWindow>
  void emit_with(event_time start, record<T, P>&& r, OnWindow& on_window) {
    open_window ow;
    if (auto it = windows_.find(start); it != windows_.end()) {
      ow = std::move(it->second);
      windows_.erase(it);
      buffered_ -= ow.records.size();
    }
    append(ow, std::move(r));
    deliver(start, std::move(ow), false, on_window);
  }

  template <class OnWindow>
  void emit(typename map_type::iterator it, bool early, OnWindow& on_window) {
    assert(it != windows_.end());
    auto node = windows_.extract(it);
    buffered_ -= node.mapped().records.size();
    deliver(node.key(), std::move(node.mapped()), early, on_window);
  }

  template <class OnWindow>
  void deliver(event_time start, open_window&& ow, bool early, OnWindow& on_window) {
    if (!ow.sorted) {
      std::stable_sort(ow.records.begin(), ow.records.end(),
                       [](const record<T, P>& a, const record<T, P>& b) { return a.time < b.time; });
    }
    const event_time end = end_of(start);
    if (!early) fired_until_ = std::max(fired_until_, end);  // early segments stay open
    ++fired_;
    if (early) ++early_fired_;
    on_window(window<T, P>{start, end, std::move(ow.records), early});
  }

  window_sort_options options_;
  watermark_tracker tracker_;
  map_type windows_;  // open windows keyed by start; each holds >= 1 record
  std::size_t buffered_ = 0;
  event_time fired_until_ = event_time_min;
  std::uint64_t late_ = 0;
  std::uint64_t fired_ = 0;
  std::uint64_t early_fired_ = 0;
};

}  // namespace rill

// rill/operators/window.hpp — event-time window assigners, their options, aggregate
// functions, and the result of a keyed window.
//
// Defines:
//   rill::tumbling, rill::sliding, rill::session   window assigners (event time)
//   rill::window_options        max out-of-order delay, allowed lateness, idle timeout,
//                               what a stop does to open windows
//   rill::keyed_window_result<K, R>   one (key, window) result: key, [start, end), value
//   rill::aggregate_function<G, T>    what `.aggregate(g)` accepts (init, add, result)
//   rill::mergeable_aggregate<G, T>   ... plus merge (sliding and session windows need it)
//   rill::agg::count, sum, min, max, mean, fold, reduce   ready aggregate functions
//
// Example (compiled by tests/banner_examples.py; a keyed windowed count, with the DSL of
// <rill/operators/stream.hpp>):
//   #include <rill/operators/stream.hpp>
//   using namespace std::chrono_literals;
//   std::vector<rill::record<int>> recs{{3, rill::event_time{3s}}, {14, rill::event_time{1s}}};
//   auto j = rill::from(rill::vector_source<int>{recs})
//                .key_by([](const int& x) { return x % 10; })
//                .window(rill::sliding{.size = 10s, .slide = 2s}, {.max_delay = 1s})
//                .count()
//                .sink([](rill::keyed_window_result<int, std::uint64_t>&& r) {
//                  // r.key, r.start, r.end, r.value: one result per (key, window)
//                });
//
// Window rules (docs/design.md "Keyed windows"):
//   - tumbling{size}: window k covers [k*size, (k+1)*size); negative times floor
//     (rill::window_start);
//   - sliding{size, slide}: window k covers [k*slide, k*slide + size); a time belongs to
//     ceil(size / slide) or floor(size / slide) windows; slide need not divide size;
//   - session{gap}: each record opens [t, t + gap); windows of one key that overlap or
//     touch (a.start <= b.end && b.start <= a.end, as Flink's TimeWindow.intersects)
//     merge into one session [min start, max end). A session closes when the watermark
//     passes its end (= last event + gap): W > end, since a record at t = end >= W is
//     still on time and touches it. A session is kept until W passes end +
//     allowed_lateness; a later record of the key that would have touched it starts a
//     new session (the closed one was emitted and is gone).
//
// Thread safety: plain values and stateless function objects; distinct objects safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "rill/core/error.hpp"
#include "rill/core/time.hpp"

namespace rill {

/// Tumbling windows of `size` (> 0): [k*size, (k+1)*size). Aggregate:
/// `rill::tumbling{10s}`.
struct tumbling {
  std::chrono::nanoseconds size{0};
  /// Throws config_error "window.size" when size <= 0.
  void validate() const {
    if (size <= std::chrono::nanoseconds::zero())
      throw config_error("window.size", "window.size must be > 0");
  }
};

/// Sliding (hopping) windows of `size` every `slide` (both > 0, slide <= size):
/// [k*slide, k*slide + size). Computed from slices of gcd(size, slide) (general stream
/// slicing, Traub et al., EDBT 2019): a record is folded into one slice whatever the
/// slide, and a window's result merges its slices.
struct sliding {
  std::chrono::nanoseconds size{0};
  std::chrono::nanoseconds slide{0};
  /// A record is in ceil(size / slide) windows, so that many results per key may come of
  /// it: at most this many (a bound on output per record, not a performance limit).
  static constexpr std::int64_t max_windows_per_record = 1'000'000;
  /// Throws config_error "window.size" (<= 0), "window.slide" (<= 0; > size: a slide
  /// larger than the size would leave gaps no window covers; size / slide >
  /// max_windows_per_record).
  void validate() const {
    if (size <= std::chrono::nanoseconds::zero())
      throw config_error("window.size", "window.size must be > 0");
    if (slide <= std::chrono::nanoseconds::zero())
      throw config_error("window.slide", "window.slide must be > 0");
    if (slide > size) throw config_error("window.slide", "window.slide must be <= window.size");
    if ((size.count() - 1) / slide.count() + 1 > max_windows_per_record)  // ceil(size / slide)
      throw config_error("window.slide", "window.size / window.slide must be <= 1000000 (a record is in "
                                         "size / slide windows)");
  }
};

/// Session windows: a key's records closer than or exactly `gap` (> 0) apart form one
/// session [first event, last event + gap).
struct session {
  std::chrono::nanoseconds gap{0};
  /// Throws config_error "window.gap" when gap <= 0.
  void validate() const {
    if (gap <= std::chrono::nanoseconds::zero())
      throw config_error("window.gap", "window.gap must be > 0");
  }
};

/// Options of a keyed window stage. Aggregate: `{.max_delay = 2s}`.
///
/// Watermark (docs/design.md "Records, time, watermarks"): W = min over active inputs of
/// (largest event time seen - max_delay); idle inputs (idle_timeout) do not hold it back;
/// end of stream raises it to +infinity. A tumbling or sliding window fires once
/// W >= its end, a session once W > its end.
/// Late: a record whose every window has end + allowed_lateness <= W (sessions: <) (before its own
/// time is observed) goes to the late side output and the `late` counter; it changes no
/// state. A record of a window that fired but is still within allowed_lateness is
/// folded in and that window's result is emitted again at once (update = true): an
/// accumulating, retraction-free update, as Flink's allowed lateness with its default
/// event-time trigger. A record that is late for some of its sliding windows but not
/// all is folded into the others only (Flink's rule).
struct window_options {
  /// Max out-of-order delay (>= 0).
  std::chrono::nanoseconds max_delay{0};
  /// How long a window's state is kept after it fired, for late updates (>= 0).
  std::chrono::nanoseconds allowed_lateness{0};
  /// Processing time after which a silent input is idle (>= 0; 0 = never).
  std::chrono::nanoseconds idle_timeout{0};
  /// What request_stop() (SIGINT/SIGTERM) does to windows still open when the input
  /// ends: `discard` (default; like Flink's stop without --drain and cancel: no window
  /// fires early on partial data, counted as discarded; with a Kafka source their
  /// offsets are not committed, so a restart reads them again) or `fire` (like
  /// `flink stop --drain`: every open window fires as at end of stream). A clean end of
  /// every input always fires every window (as Flink does, FLINK-3554).
  enum class stop_policy { discard, fire } on_stop = stop_policy::discard;

  /// Throws config_error "window.max_delay", "window.allowed_lateness",
  /// "window.idle_timeout" (< 0), "window.on_stop" (not a listed value).
  void validate() const {
    using std::chrono::nanoseconds;
    if (max_delay < nanoseconds::zero())
      throw config_error("window.max_delay", "window.max_delay must be >= 0");
    if (allowed_lateness < nanoseconds::zero())
      throw config_error("window.allowed_lateness", "window.allowed_lateness must be >= 0");
    if (idle_timeout < nanoseconds::zero())
      throw config_error("window.idle_timeout", "window.idle_timeout must be >= 0");
    if (on_stop != stop_policy::discard && on_stop != stop_policy::fire)
      throw config_error("window.on_stop", "window.on_stop must be discard or fire");
  }
};

/// The result of one key in one window: emitted once when the watermark passes `end`
/// (and again, with update = true, for each allowed-late record; see window_options).
/// Its record's event time is end - 1 ns.
template <class K, class R>
struct keyed_window_result {
  K key;
  event_time start;
  event_time end;
  R value;
  bool update = false;
  bool operator==(const keyed_window_result&) const = default;
};

/// An aggregate function over values T: `init()` makes an empty accumulator,
/// `add(acc, value)` folds one value in (called once per record, on arrival), and
/// `result(acc)` gives the emitted value. Called on the owning worker only; const.
template <class G, class T>
concept aggregate_function = requires(const G& g, typename G::accumulator& a, const T& v) {
  typename G::accumulator;
  { g.init() } -> std::convertible_to<typename G::accumulator>;
  g.add(a, v);
  g.result(std::as_const(a));
};

/// An aggregate function that can also combine two accumulators: `merge(into, from)`
/// must give the accumulator of the union of both inputs (associative; sliding windows
/// merge their slices, sessions merge when a record bridges them).
template <class G, class T>
concept mergeable_aggregate =
    aggregate_function<G, T> && requires(const G& g, typename G::accumulator& a) {
      g.merge(a, std::as_const(a));
    };

namespace agg {

/// Number of records. Result std::uint64_t.
struct count {
  using accumulator = std::uint64_t;
  accumulator init() const noexcept { return 0; }
  template <class T>
  void add(accumulator& a, const T&) const noexcept { ++a; }
  void merge(accumulator& a, const accumulator& b) const noexcept { a += b; }
  accumulator result(const accumulator& a) const noexcept { return a; }
};

}  // namespace agg

namespace detail {

/// An aggregate made of an initial value and callables, bound to the value type T:
/// `add` is void(A&, const T&); `merge` void(A&, const A&) or std::nullptr_t (none);
/// `get` R(const A&) or std::nullptr_t (the accumulator is the result).
template <class A, class Add, class Merge, class Get>
struct fold_aggregate {
  using accumulator = A;
  A initial;
  Add add_fn;
  Merge merge_fn;
  Get get_fn;
  A init() const { return initial; }
  template <class T>
  void add(A& a, const T& v) const { add_fn(a, v); }
  void merge(A& a, const A& b) const
    requires(!std::is_same_v<Merge, std::nullptr_t>)
  { merge_fn(a, b); }
  decltype(auto) result(const A& a) const {
    if constexpr (std::is_same_v<Get, std::nullptr_t>) return A(a);
    else return get_fn(a);
  }
};

}  // namespace detail

namespace agg {

/// `.aggregate(init, add[, merge])` as an object: accumulator A = init's type.
/// add: void(A&, const T&); merge: void(A&, const A&).
template <class A, class Add>
auto fold(A init, Add add) {
  return detail::fold_aggregate<A, Add, std::nullptr_t, std::nullptr_t>{std::move(init), std::move(add),
                                                                        nullptr, nullptr};
}
template <class A, class Add, class Merge>
auto fold(A init, Add add, Merge merge) {
  return detail::fold_aggregate<A, Add, Merge, std::nullptr_t>{std::move(init), std::move(add),
                                                               std::move(merge), nullptr};
}

/// Sum of f(value) in the type f returns (arithmetic).
template <class T, class F>
auto sum_of(F f) {
  using V = std::remove_cvref_t<std::invoke_result_t<const F&, const T&>>;
  static_assert(std::is_arithmetic_v<V>, "rill::agg sum: f(const T&) must return an arithmetic type");
  auto add = [f](V& a, const T& v) { a += f(v); };
  auto merge = [](V& a, const V& b) { a += b; };
  return detail::fold_aggregate<V, decltype(add), decltype(merge), std::nullptr_t>{V{}, add, merge, nullptr};
}

/// Smallest (min_of) / largest (max_of) f(value): f's type, with operator<.
template <class T, class F>
auto min_of(F f) {
  using V = std::remove_cvref_t<std::invoke_result_t<const F&, const T&>>;
  using A = std::optional<V>;
  auto add = [f](A& a, const T& v) {
    V x = f(v);
    if (!a || x < *a) a = std::move(x);
  };
  auto merge = [](A& a, const A& b) {
    if (b && (!a || *b < *a)) a = b;
  };
  auto get = [](const A& a) { return *a; };  // a window holds >= 1 record
  return detail::fold_aggregate<A, decltype(add), decltype(merge), decltype(get)>{A{}, add, merge, get};
}
template <class T, class F>
auto max_of(F f) {
  using V = std::remove_cvref_t<std::invoke_result_t<const F&, const T&>>;
  using A = std::optional<V>;
  auto add = [f](A& a, const T& v) {
    V x = f(v);
    if (!a || *a < x) a = std::move(x);
  };
  auto merge = [](A& a, const A& b) {
    if (b && (!a || *a < *b)) a = b;
  };
  auto get = [](const A& a) { return *a; };
  return detail::fold_aggregate<A, decltype(add), decltype(merge), decltype(get)>{A{}, add, merge, get};
}

/// Arithmetic mean of f(value) as double (sum in double, count in std::uint64_t).
template <class T, class F>
auto mean_of(F f) {
  struct A {
    double sum = 0;
    std::uint64_t n = 0;
  };
  auto add = [f](A& a, const T& v) {
    a.sum += double(f(v));
    ++a.n;
  };
  auto merge = [](A& a, const A& b) {
    a.sum += b.sum;
    a.n += b.n;
  };
  auto get = [](const A& a) { return a.sum / double(a.n); };
  return detail::fold_aggregate<A, decltype(add), decltype(merge), decltype(get)>{A{}, add, merge, get};
}

/// reduce(f): T f(const T&, const T&), associative; the result is a T.
template <class T, class F>
auto reduce_of(F f) {
  using A = std::optional<T>;
  auto add = [f](A& a, const T& v) {
    if (a) a = f(std::as_const(*a), v);
    else a = v;
  };
  auto merge = [f](A& a, const A& b) {
    if (!b) return;
    if (a) a = f(std::as_const(*a), *b);
    else a = b;
  };
  auto get = [](const A& a) { return *a; };
  return detail::fold_aggregate<A, decltype(add), decltype(merge), decltype(get)>{A{}, add, merge, get};
}

}  // namespace agg

}  // namespace rill

// rill/operators/two_phase.hpp — keyed window aggregation in two phases: a local
// pre-aggregation on the worker that reads a record, then a global merge on the key's
// worker.
//
// Defines:
//   rill::two_phase_aggregate(s, key, assigner, options, agg[, name, hash])
//       the results of `s.key_by(key, hash).window(assigner, options).name(name)
//       .aggregate(agg)`, computed with local-global aggregation
//   rill::window_partial<K, A>   what crosses the exchange: one worker's accumulator of
//       one key in one slice
//
// Example (compiled by tests/banner_examples.py; a count per key and 10 s window):
//   #include <rill/operators/two_phase.hpp>
//   using namespace std::chrono_literals;
//   std::vector<rill::record<int>> recs{{3, rill::event_time{3s}}, {14, rill::event_time{1s}}};
//   auto counts = rill::two_phase_aggregate(rill::from(rill::vector_source<int>{recs}),
//                                           [](const int& x) { return x % 10; },
//                                           rill::tumbling{10s}, {.max_delay = 2s}, rill::agg::count{});
//   rill::job j = std::move(counts).sink([](rill::keyed_window_result<int, std::uint64_t>&& r) {
//     // one result per (key, window), as .key_by(...).window(...).count() gives
//   });
//   rill::runtime{}.run(j);
//
// Why: key_by moves every record to its key's worker, and with many records per key and
// window that hand-over costs more than folding the record in. Local-global aggregation
// (Flink's table.optimizer.agg-phase-strategy TWO_PHASE; the "combiner" of MapReduce,
// Dean and Ghemawat, OSDI 2004) folds each record on the worker that reads it and moves
// one accumulator per (key, slice, worker) instead: the exchange carries O(keys x
// windows x workers) partials, not O(records).
//
// How (docs/design.md "Two-phase aggregation"):
//   1. local: on the record's worker, a keyed window stage over slices (tumbling: the
//      window; sliding: gcd(size, slide), the slices of general stream slicing) with the
//      given max_delay folds records into accumulators (agg.add) and, when its own
//      watermark passes a slice's end, emits each key's accumulator as a partial with
//      event time slice end - 1 ns. A record whose slice this worker already emitted is
//      emitted at once as a partial of its own (not dropped: the local watermark is
//      ahead of the global one). Its progress downstream is its watermark.
//   2. key_by(partial.key, hash): the worker owning the key, as key_by(key, hash) picks.
//   3. global: the keyed window stage of `assigner` with max_delay 0 (its inputs' progress
//      already is the local watermark, so its watermark is min over workers of (largest
//      time - max_delay), as in one phase) merges partials (agg.merge) and fires,
//      applies allowed lateness and the stop policy, and emits one
//      keyed_window_result<K, R> per (key, window) on the same rules as one phase.
// Results equal the one-phase results when they do not depend on the order records of
// different workers arrive in (merge associative and commutative, as
// rill::mergeable_aggregate requires).
//
// Differences from one phase: the late side output gets partials, not records (the
// global stage sees only partials), and the global stage's `late` counter counts them,
// the local stage's (named `name + ".local"`) counts records handed on as one-record
// partials. idle_timeout must be 0 (an idle input's local state would reach the global
// stage after its windows fired): for live inputs use one phase. A Kafka source's
// catch-up lanes (rill::source_position::catching_up) exist in the local stage only: a
// partial of a partition that caught up is late at the global stage if its windows fired
// there. Memory: the local state is O(keys read on the worker x open slices) per worker,
// on top of the global O(keys x open windows).
//
// Errors: config_error from the assigner's and the options' validate(), and
// "window.idle_timeout" when it is not 0. Thread safety: as every DSL builder.
#pragma once

#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>

#include "rill/core/error.hpp"
#include "rill/operators/keyed_stream.hpp"
#include "rill/operators/stream.hpp"
#include "rill/operators/window.hpp"

namespace rill {

/// One worker's accumulator `value` of `key` over [start, end) (a slice of the windows),
/// as the local stage of two_phase_aggregate emits it.
template <class K, class A>
using window_partial = keyed_window_result<K, A>;

namespace detail {

/// The local phase's aggregate: G's init/add/merge, and the accumulator as its result.
template <class G>
struct local_phase {
  G g;
  using accumulator = typename G::accumulator;
  accumulator init() const { return g.init(); }
  template <class T>
  void add(accumulator& a, const T& v) const {
    g.add(a, v);
  }
  void merge(accumulator& a, const accumulator& b) const { g.merge(a, b); }
  accumulator result(const accumulator& a) const { return a; }
};

/// The global phase's aggregate over partials: merge each partial's accumulator in, and
/// G's result.
template <class G, class K>
struct global_phase {
  G g;
  using accumulator = typename G::accumulator;
  accumulator init() const { return g.init(); }
  void add(accumulator& a, const window_partial<K, accumulator>& p) const { g.merge(a, p.value); }
  void merge(accumulator& a, const accumulator& b) const { g.merge(a, b); }
  decltype(auto) result(const accumulator& a) const { return g.result(a); }
};

}  // namespace detail

/// The results of `std::move(s).key_by(key, hash).window(a, o).name(name).aggregate(g)`
/// computed in two phases (see the banner): stream<keyed_window_result<K, R>, P> (P: the
/// input's record policy), K = key's result type, R = g.result's. `a`: rill::tumbling or rill::sliding; `g` a
/// rill::mergeable_aggregate over T (rill::agg::count, sum_of, min_of, max_of, mean_of,
/// fold with a merge, or the user's). The run report has stages `name + ".local"` and
/// `name`. `late`: nullptr, or void f(const window_partial<K, A>&) called (on the key's
/// worker) with each partial the global stage drops as late (A = G::accumulator: e.g.
/// count the records inside). Throws rill::config_error (the assigner's and options' keys, and
/// "window.idle_timeout" when o.idle_timeout != 0). Build thread only.
template <class T, class P, class KeyFn, class Assigner, class G,
          class Hash = default_hash<std::remove_cvref_t<std::invoke_result_t<KeyFn&, const T&>>>,
          class Late = std::nullptr_t>
auto two_phase_aggregate(stream<T, P>&& s, KeyFn key, Assigner a, window_options o, G g, std::string name = "window",
                         Hash hash = {}, Late late = nullptr) {
  using K = std::remove_cvref_t<std::invoke_result_t<KeyFn&, const T&>>;
  static_assert(std::is_same_v<Assigner, tumbling> || std::is_same_v<Assigner, sliding>,
                "rill::two_phase_aggregate: the assigner must be rill::tumbling or rill::sliding (sessions "
                "merge by key and cannot be cut into slices per worker)");
  static_assert(mergeable_aggregate<G, T>,
                "rill::two_phase_aggregate: the aggregate must merge accumulators (merge(acc&, const acc&)): "
                "the global phase merges the workers' accumulators");
  a.validate();
  o.validate();
  if (o.idle_timeout.count() != 0)
    throw config_error("window.idle_timeout",
                       "window.idle_timeout must be 0 with two-phase aggregation (an idle input's local "
                       "state would reach the global stage after its windows fired)");
  using A = typename G::accumulator;
  static_assert(std::is_same_v<Late, std::nullptr_t> || std::is_invocable_v<Late&, const window_partial<K, A>&>,
                "rill::two_phase_aggregate(..., late): accepted is void f(const rill::window_partial<K, A>&)");
  tumbling slice{};
  if constexpr (std::is_same_v<Assigner, tumbling>)
    slice.size = a.size;
  else
    slice.size = std::chrono::nanoseconds{std::gcd(a.size.count(), a.slide.count())};

  window_options local = o;
  local.allowed_lateness = std::chrono::nanoseconds{0};  // a late record is handed on at once
  window_options global = o;
  global.max_delay = std::chrono::nanoseconds{0};  // the local watermark already has it

  auto hashed = std::move(s).map(
      [key, hash](T&& v) {
        const std::size_t h = detail::mix_hash(hash(key(static_cast<const T&>(v))));
        return detail::keyed<T>{std::move(v), h};
      },
      name + ".hash");
  auto partials = windowed_stream<K, T, KeyFn, tumbling, detail::late_as_partial, Hash, P>(
                      std::move(hashed), key, slice, local, detail::late_as_partial{}, name + ".local", hash)
                      .aggregate(detail::local_phase<G>{g});
  auto windowed = std::move(partials)
                      .key_by([](const window_partial<K, A>& p) -> const K& { return p.key; }, hash)
                      .window(a, global)
                      .name(std::move(name));
  if constexpr (std::is_same_v<Late, std::nullptr_t>) {
    return std::move(windowed).aggregate(detail::global_phase<G, K>{std::move(g)});
  } else {
    return std::move(windowed)
        .late([late](record<window_partial<K, A>>&& r, const K&, event_time, event_time) mutable { late(r.value); })
        .aggregate(detail::global_phase<G, K>{std::move(g)});
  }
}

}  // namespace rill

// rill/operators/keyed_window.hpp — incremental aggregation of keyed event-time windows.
//
// Defines:
//   rill::keyed_window_aggregator<K, T, Assigner, Agg>   the single-threaded state machine
//       of one `.key_by(k).window(assigner, options).aggregate(agg)` instance: folds each
//       record into its (key, slice) or (key, session) accumulator on arrival and emits one
//       rill::keyed_window_result per (key, window) when the watermark passes the window's
//       end (docs/design.md "Keyed windows")
//   rill::default_hash<K>   std::hash<K> when it exists, else boost::hash<K>
//
// Example (compiled by tests/banner_examples.py; what the DSL builds for you, tests drive
// it directly):
//   using namespace std::chrono_literals;
//   rill::keyed_window_aggregator<std::string, int, rill::tumbling, rill::agg::count> a{
//       rill::tumbling{10s}, {.max_delay = 2s}, rill::agg::count{}, /*inputs=*/1, {}};
//   std::vector<rill::keyed_window_result<std::string, std::uint64_t>> out;
//   auto on_result = [&](auto&& r) { out.push_back(std::move(r.value)); };
//   auto on_late = [](rill::record<int>&&, const std::string&, rill::event_time, rill::event_time) {};
//   for (int s : {1, 5, 11, 9, 15})
//     a.push(0, "k", {s, rill::event_time{std::chrono::seconds{s}}}, {}, on_result, on_late);
//   // at 15 s W = 13 s: ("k", [0 s, 10 s), 3) was emitted
//   a.end(0, on_result);  // end of stream: ("k", [10 s, 20 s), 2)
//
// Cost. State is O(keys x open slices) for tumbling/sliding (a slice is gcd(size, slide)
// long; sliding windows add the two stacks, at most one accumulator per key and slice of
// one window, and a number and a key copy per key of the two windows they span; at most
// two emptied slice tables are kept for reuse) and O(keys x open sessions) for sessions,
// never O(records) — except that records from a source that tracks acknowledgements
// (rill::kafka_source) keep their ack token in their slice until every window holding the
// slice has been emitted (at-least-once: record.hpp). push() of an in-time record: one
// rill::key_table lookup in its slice's table (the key_by hash is passed in, not
// recomputed) and one add(); prefetch() fetches that table slot ahead of the push. Firing
// a window emits each of its keys once; a sliding window merges O(1)
// accumulators per key (two stacks). Sessions: a sorted vector of sessions per key and
// one timer per key, O(log open session ends) to insert.
//
// Thread safety: distinct objects safe, shared objects unsafe: one worker owns an
// instance and makes every call on its thread. Callbacks run synchronously inside the
// call and must not call back into the same aggregator. Nothing blocks or does I/O.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <boost/container_hash/hash.hpp>

#include <algorithm>
#include <bit>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "rill/core/error.hpp"
#include "rill/core/record.hpp"
#include "rill/core/time.hpp"
#include "rill/core/watermark.hpp"
#include "rill/operators/key_table.hpp"
#include "rill/operators/window.hpp"

namespace rill {

namespace detail {
template <class K, class = void>
struct has_std_hash : std::false_type {};
template <class K>
struct has_std_hash<K, std::void_t<decltype(std::hash<K>{}(std::declval<const K&>()))>> : std::true_type {};
}  // namespace detail

/// The hash key_by uses when none is given: std::hash<K> if it is defined for K, else
/// boost::hash<K> (which also covers std::pair, std::tuple and containers).
template <class K>
using default_hash = std::conditional_t<detail::has_std_hash<K>::value, std::hash<K>, boost::hash<K>>;

namespace detail {

using wide = __int128;  // window arithmetic on ns counts without overflow

constexpr event_time clamp_time(wide ns) noexcept {
  constexpr wide lo = std::numeric_limits<std::int64_t>::min();
  constexpr wide hi = std::numeric_limits<std::int64_t>::max();
  return event_time{std::chrono::nanoseconds{std::int64_t(ns < lo ? lo : ns > hi ? hi : ns)}};
}
constexpr wide floor_div_wide(wide n, wide d) noexcept {
  constexpr wide lim = wide(1) << 62;  // 64-bit division when both fit (no __divti3 call)
  if (n > -lim && n < lim && d < lim) return floor_div(std::int64_t(n), std::int64_t(d));
  wide q = n / d;
  return (n % d != 0 && n < 0) ? q - 1 : q;
}
constexpr wide ns_of(event_time t) noexcept { return t.time_since_epoch().count(); }

/// Spreads std::hash-like (identity) integer hashes over all bits (`% workers` and the
/// open-addressing tables use different bits): the 128-bit product with a 64-bit odd
/// constant, its two halves xor-ed (the "folded multiply" of wyhash and of Go's and
/// Rust's aHash fallback). One multiply: it is on every record's path.
constexpr std::size_t mix_hash(std::size_t h) noexcept {
  const unsigned __int128 p = static_cast<unsigned __int128>(h) * 0x9e3779b97f4a7c15ULL;
  return std::size_t(std::uint64_t(p) ^ std::uint64_t(p >> 64));
}

/// A key together with the hash key_by computed for it: the table never hashes again.
template <class K>
struct hashed_key {
  K key;
  std::size_t hash;
};
struct hashed_key_hash {
  template <class K>
  std::size_t operator()(const hashed_key<K>& k) const noexcept { return k.hash; }
};
struct hashed_key_eq {
  template <class K>
  bool operator()(const hashed_key<K>& a, const hashed_key<K>& b) const {
    return a.hash == b.hash && a.key == b.key;
  }
};

/// A lookup of key `*key` whose hash key_by computed already (heterogeneous lookup in a
/// table of plain K: the slot holds no hash, the probe brings it).
template <class K>
struct key_probe {
  const K* key;
  std::size_t hash;
};
/// Hashes a stored K as key_by does (mix_hash(Hash{}(k)): only when a table grows) and
/// a probe by its carried hash.
template <class K, class Hash>
struct probe_hash {
  using is_transparent = void;
  [[no_unique_address]] Hash h{};
  std::size_t operator()(const K& k) const { return mix_hash(h(k)); }
  std::size_t operator()(const key_probe<K>& p) const noexcept { return p.hash; }
};
template <class K>
struct probe_eq {
  using is_transparent = void;
  bool operator()(const K& a, const K& b) const { return a == b; }
  bool operator()(const key_probe<K>& a, const K& b) const { return *a.key == b; }
  bool operator()(const K& a, const key_probe<K>& b) const { return a == *b.key; }
};

template <class Assigner>
inline constexpr bool is_session = std::is_same_v<Assigner, session>;

}  // namespace detail

/// One instance of a keyed window aggregation (see the banner).
///
/// Template parameters: K the key (equality-comparable, copyable), T the value, Assigner
/// rill::tumbling, rill::sliding or rill::session, Agg a rill::aggregate_function<T>
/// (rill::mergeable_aggregate<T> for sliding and session), Hash the key's hash (used
/// only by the push() overload without a hash).
///
/// Rules (docs/design.md "Keyed windows"; window_options says when a record is late):
///   - W is the watermark of a rill::watermark_tracker over `inputs` inputs (max_delay,
///     idle_timeout; +infinity once every input ended); a record's own time moves it
///     unless the record came from a partitioned source (rill::advances_progress);
///   - a (key, window) of a tumbling or sliding window is emitted once W >= its end; a
///     session once W > its end (a record at t = end is still on time at W = end and
///     touches it); results come in increasing order of window end (keys of one end in
///     no particular order), with record time end - 1 ns and the ack tokens of every
///     record folded in (rill::join_acks rule);
///   - windows a key has no record in are never emitted;
///   - with allowed_lateness, state stays until W >= end + allowed_lateness and every
///     allowed-late record re-emits its windows at once (update = true when that
///     (key, window) had been emitted before).
///
/// Callbacks (template parameters, no std::function on the hot path):
///   on_result(rill::record<keyed_window_result<K, R>>&&)
///   on_late(rill::record<T>&&, const K&, event_time window_start, event_time window_end)
///     — the window is the record's last one (sliding: the latest-ending; session: the
///     record's own [t, t + gap)).
///
/// Errors: the constructor throws config_error (keys of the assigner's and the options'
/// validate(), "window.inputs" when inputs == 0). Other calls throw std::bad_alloc or
/// what a callback or the aggregate throws (basic guarantee: state stays consistent).
template <class K, class T, class Assigner, class Agg, class Hash = default_hash<K>>
class keyed_window_aggregator {
  static_assert(aggregate_function<Agg, T>,
                "keyed_window_aggregator: Agg must provide accumulator, init(), add(acc, const T&), "
                "result(const acc&) (rill::aggregate_function)");
  static_assert(std::is_same_v<Assigner, tumbling> || mergeable_aggregate<Agg, T>,
                "sliding and session windows merge accumulators: the aggregate needs "
                "merge(acc&, const acc&) (rill::mergeable_aggregate; .aggregate(init, add, merge))");

 public:
  using accumulator = typename Agg::accumulator;
  using result_type =
      std::remove_cvref_t<decltype(std::declval<const Agg&>().result(std::declval<const accumulator&>()))>;
  using output = keyed_window_result<K, result_type>;

  /// `assigner`, `options`: validated here. `inputs` >= 1. `now`: processing time at
  /// construction (start of idle timers).
  keyed_window_aggregator(Assigner assigner, window_options options, Agg agg, std::size_t inputs,
                          steady_time now, Hash hash = {})
      : assigner_(checked(assigner, options, inputs)), options_(options), agg_(std::move(agg)),
        hash_(std::move(hash)), tracker_(inputs, options.max_delay, options.idle_timeout, now) {
    if constexpr (!detail::is_session<Assigner>) {
      size_ = assigner_.size.count();
      if constexpr (std::is_same_v<Assigner, sliding>) slide_ = assigner_.slide.count();
      else slide_ = size_;
      slice_ = std::gcd(size_, slide_);
    } else {
      size_ = assigner_.gap.count();
    }
    lateness_ = options_.allowed_lateness.count();
  }

  /// Record `r` with key `key` arrives on `input` at processing time `now`. `hash` is
  /// the key's hash (key_by's); the overload without it computes Hash{}(key).
  /// Late check, fold, then r's time is observed and every due window fires.
  /// Precondition: input < inputs.
  template <class OnResult, class OnLate>
  void push(std::size_t input, const K& key, record<T>&& r, steady_time now, OnResult&& on_result,
            OnLate&& on_late) {
    push(input, key, detail::mix_hash(hash_(key)), std::move(r), now, on_result, on_late);
  }
  template <class OnResult, class OnLate>
  void push(std::size_t input, const K& key, std::size_t hash, record<T>&& r, steady_time now,
            OnResult&& on_result, OnLate&& on_late) {
    const bool adv = advances_progress(r);
    push_value(input, key, hash, r.value, r.time, adv, std::move(r.ack), now, on_result,
               [&](event_time s, event_time e) { on_late(std::move(r), key, s, e); });
  }

  /// The DSL's entry: like push(), but the value is read in place and `late(start, end)`
  /// is called (instead of on_late) for a late record, which builds the record itself.
  template <class OnResult, class LateThunk>
  void push_value(std::size_t input, const K& key, std::size_t hash, const T& value, event_time t,
                  bool advances, std::shared_ptr<ack_token>&& ack, steady_time now,
                  OnResult& on_result, LateThunk&& late) {
    const event_time w = tracker_.current();
    if constexpr (detail::is_session<Assigner>) {
      fold_session(key, hash, value, t, w, std::move(ack), on_result, late);
    } else if (t >= w) {  // no window of t has passed: fold, no lateness arithmetic
      fold_in_time(key, hash, value, t, std::move(ack));
    } else {
      fold_aligned(key, hash, value, t, w, std::move(ack), on_result, late);
    }
    tracker_.observe(input, advances ? t : event_time_min, now);
    fire_ready(on_result);
  }

  /// Hints that a record of key hash `hash` (key_by's) and time `t` will be pushed soon:
  /// fetches its state slot into the cache when t lies in the slice of the previous
  /// record (tumbling and sliding; nothing for sessions or another slice). Changes no
  /// state; O(1), noexcept. The keyed window stage calls it a few records ahead.
  void prefetch(std::size_t hash, event_time t) const noexcept {
    if constexpr (!detail::is_session<Assigner>) {
      const std::int64_t ns = t.time_since_epoch().count();
      if (slice_table* h = hot_for(ns)) h->accs.prefetch(hash);
    }
  }

  /// push_value() of a record at or after the watermark (t >= watermark()), without
  /// firing: folds it and observes its time, and emits nothing (a record not behind W is
  /// never late and re-emits no window). After it, due() says whether a window is due:
  /// fire() emits it (so does any later call). Lets a caller fold records without
  /// preparing to emit (the DSL runs emitting calls on a fiber:
  /// <rill/operators/resumable.hpp>). Preconditions: input < inputs, t >= watermark().
  void fold_on_time(std::size_t input, const K& key, std::size_t hash, const T& value, event_time t, bool advances,
                    std::shared_ptr<ack_token>&& ack, steady_time now) {
    assert(t >= tracker_.current());
    if constexpr (detail::is_session<Assigner>) {
      auto none = [](record<output>&&) { assert(!"an on-time record emits no session"); };
      auto not_late = [](event_time, event_time) { assert(!"an on-time record is not late"); };
      fold_session(key, hash, value, t, tracker_.current(), std::move(ack), none, not_late);
    } else {
      fold_in_time(key, hash, value, t, std::move(ack));
    }
    tracker_.observe(input, advances ? t : event_time_min, now);
  }
  /// progress() without its firing: observes t for `input`. Then due() says whether
  /// fire() has work. Precondition: input < inputs. noexcept.
  void observe(std::size_t input, event_time t, steady_time now) noexcept { tracker_.observe(input, t, now); }
  /// Whether a (key, window) result is due: fire() (or any call but fold_on_time and
  /// observe) would emit. O(1).
  bool due() const noexcept {
    if constexpr (detail::is_session<Assigner>) {
      return !timers_.empty() && timers_.begin()->first <= tracker_.current();
    } else {
      return tracker_.current() >= next_fire_;
    }
  }
  /// Emits every due (key, window) result, in increasing order of window end.
  template <class OnResult>
  void fire(OnResult&& on_result) {
    fire_ready(on_result);
  }

  /// Progress marker: `input` has seen everything up to `t`. Fires what is due.
  template <class OnResult>
  void progress(std::size_t input, event_time t, steady_time now, OnResult&& on_result) {
    tracker_.observe(input, t, now);
    fire_ready(on_result);
  }
  /// `input` ended (it no longer holds W back). When all inputs ended, W = +infinity and
  /// every window fires; an ended input no longer holds W (Flink FLINK-3554, FLINK-2577). Idempotent.
  template <class OnResult>
  void end(std::size_t input, OnResult&& on_result) {
    tracker_.end(input);
    fire_ready(on_result);
  }
  /// Processing time advanced: silent inputs become idle (window_options::idle_timeout).
  template <class OnResult>
  void tick(steady_time now, OnResult&& on_result) {
    tracker_.tick(now);
    fire_ready(on_result);
  }
  /// Drops every open window without emitting it (window_options::stop_policy::discard;
  /// Flink cancel). The ack tokens they hold are failed first, so a Kafka source does
  /// not commit the records they held. Returns the number of (key, window) states
  /// dropped (slices for tumbling/sliding, sessions), also added to discarded().
  std::size_t discard() {
    std::size_t n = 0;
    auto fail_all = [](acks_t& acks) {
      for (auto& a : acks) a->fail();
    };
    for (auto& [k, ks] : keys_)
      for (auto& p : ks.pieces) {
        fail_all(p.acks);
        ++n;
      }
    for (auto& [j, sl] : slices_) {
      if (k_last(j) <= fired_k_) continue;  // every window of it fired already
      for (auto& [k, a] : sl.acks) fail_all(a);
      n += sl.size();
    }
    keys_.clear();
    timers_.clear();
    last_bucket_ = timers_.end();
    slices_.clear();
    last_slice_ = slices_.end();
    set_hot(nullptr);
    next_fire_ = event_time_max;
    window_valid_ = false;
    entries_ = 0;
    discarded_ += n;
    return n;
  }

  /// The current watermark (event_time_min = -infinity, event_time_max = +infinity).
  event_time watermark() const noexcept { return tracker_.current(); }
  /// Whether a record at `t` pushed now would be late: every window of t has end +
  /// allowed_lateness <= W (sessions: its own session [t, t + gap) closed, before any
  /// merge with the key's sessions, which needs the key). Changes no state; O(1), noexcept.
  bool late_at(event_time t) const noexcept {
    const event_time w = tracker_.current();
    if (t >= w) return false;
    const std::int64_t ns = t.time_since_epoch().count();
    if constexpr (detail::is_session<Assigner>) {
      return plus_lateness(closes_at(detail::clamp_time(detail::wide(ns) + size_).time_since_epoch().count())) <= w;
    } else {
      return plus_lateness(win_end(k_last(floor_div(ns, slice_)))) <= w;
    }
  }
  /// Late records (side output) so far.
  std::uint64_t late() const noexcept { return late_; }
  /// Results emitted so far (updates included).
  std::uint64_t fired() const noexcept { return fired_; }
  /// Results emitted as updates of an already-emitted (key, window).
  std::uint64_t updates() const noexcept { return updates_; }
  /// (key, window) states dropped by discard().
  std::uint64_t discarded() const noexcept { return discarded_; }
  /// Keys holding state now (for tumbling/sliding: distinct keys over the open slices;
  /// O(state) for those, O(1) for sessions).
  std::size_t keys() const {
    if constexpr (detail::is_session<Assigner>) {
      return keys_.size();
    } else {
      absl::flat_hash_set<K, detail::probe_hash<K, Hash>, detail::probe_eq<K>> seen(
          0, detail::probe_hash<K, Hash>{hash_});
      for (const auto& [j, sl] : slices_) sl.each([&](const K& k, const accumulator&) { seen.insert(k); });
      return seen.size();
    }
  }
  /// (key, slice) or (key, session) accumulators held now: the memory bound's unit.
  std::size_t state_entries() const noexcept { return entries_; }
  /// The largest state_entries() seen.
  std::size_t peak_state_entries() const noexcept { return peak_entries_; }
  const watermark_tracker& tracker() const noexcept { return tracker_; }
  /// The validated options.
  const window_options& options() const noexcept { return options_; }

 private:
  using acks_t = std::vector<std::shared_ptr<ack_token>>;
  // A session of one key: [lo, hi) ns.
  struct piece {
    std::int64_t lo;
    std::int64_t hi;
    accumulator acc;
    acks_t acks;
    bool emitted = false;  // sessions: a result was emitted
    bool dirty = true;     // sessions: changed since the last result
  };
  struct key_state {  // sessions
    std::vector<piece> pieces;  // the key's sessions, sorted by start, pairwise disjoint
    event_time timer{};
    bool has_timer = false;
    std::uint32_t timer_refs = 0;  // entries in timers_ naming this key (some may be stale)
    bool empty() const noexcept { return pieces.empty(); }
  };
  using table = std::unordered_map<detail::hashed_key<K>, key_state, detail::hashed_key_hash,
                                   detail::hashed_key_eq>;
  using node = typename table::value_type;

  static Assigner checked(const Assigner& a, const window_options& o, std::size_t inputs) {
    a.validate();
    o.validate();
    if (inputs == 0) throw config_error("window.inputs", "window.inputs must be >= 1");
    return a;
  }

  // ---- aligned windows (tumbling, sliding) ----
  // Window k covers [k*slide, k*slide + size); slice j covers [j*g, (j+1)*g), g =
  // gcd(size, slide). State: one hash table of (key -> accumulator) per slice, so a record
  // costs one table lookup, as a hand-written per-window map does. Windows fire globally
  // in k order (fired_k_: every window <= it has fired). Sliding windows merge their
  // slices' tables with two stacks (Tangwongsan et al., "General incremental
  // sliding-window aggregation", VLDB 2015): they hold the slices of the last window
  // fired, as a front part with suffix aggregates and a back part with one running
  // aggregate, so each slice is merged O(1) times however many windows hold it. The
  // stacks keep accumulators in vectors indexed by a dense number per key (stack_index),
  // so firing a window is one pass over vectors (docs/design.md "Sliding windows with a
  // short slide").
  detail::wide k_first(detail::wide j) const noexcept {
    return detail::floor_div_wide(j * slice_ - size_, slide_) + 1;
  }
  detail::wide k_last(detail::wide j) const noexcept { return detail::floor_div_wide(j * slice_, slide_); }
  detail::wide first_slice(detail::wide k) const noexcept { return k * slide_ / slice_; }  // exact
  detail::wide end_slice(detail::wide k) const noexcept { return (k * slide_ + size_) / slice_; }
  event_time win_start(detail::wide k) const noexcept { return detail::clamp_time(k * slide_); }
  event_time win_end(detail::wide k) const noexcept { return detail::clamp_time(k * slide_ + size_); }
  event_time plus_lateness(event_time e) const noexcept {
    return detail::clamp_time(detail::ns_of(e) + lateness_);
  }
  // The largest k whose end <= w.
  detail::wide k_passed(event_time w) const noexcept {
    return detail::floor_div_wide(detail::ns_of(w) - size_, slide_);
  }

  // A slice: key -> accumulator in a rill::key_table, a slot of std::pair<K, accumulator>
  // (no stored hash: lookups carry key_by's; no ack pointer: the tokens of a source that
  // tracks acks live in a table of their own, empty otherwise).
  using slice_accs = key_table<K, accumulator, detail::probe_hash<K, Hash>>;
  using slice_acks = absl::flat_hash_map<K, acks_t, detail::probe_hash<K, Hash>, detail::probe_eq<K>>;
  // A closed slice of a sliding window (one no in-time record can reach) is packed once
  // its windows start firing: its entries move to a vector, read in order by the stacks,
  // and its table goes to spare_ for the next new slice, whose first writes then hit
  // memory still in the cache. A record or lookup that needs a packed slice's table
  // (behind the watermark, allowed-late) unpacks it first.
  struct packed_entry {  // no hash: 16 bytes for a 4-byte key and a count
    K key;
    std::uint32_t index = 0;  // the key's stack index, when stack_gen is the stacks' gen_
    accumulator acc;
  };
  struct slice_table {
    explicit slice_table(const Hash& h)
        : accs(detail::probe_hash<K, Hash>{h}), acks(0, detail::probe_hash<K, Hash>{h}) {}
    slice_accs accs;                   // empty while packed
    std::vector<packed_entry> packed;  // the entries while packed
    bool is_packed = false;
    std::uint64_t stack_gen = 0;  // the stacks' gen_ when it was pushed onto the back
    slice_acks acks;
    std::size_t size() const noexcept { return is_packed ? packed.size() : accs.size(); }
    // f(key, accumulator) for every entry.
    template <class F>
    void each(F&& f) const {
      if (is_packed) {
        for (const auto& e : packed) f(e.key, e.acc);
      } else {
        for (const auto& [k, a] : accs) f(k, a);
      }
    }
  };
  const acks_t& acks_of(const slice_table& sl, const K& k) const {
    static const acks_t none;
    if (sl.acks.empty()) return none;
    auto it = sl.acks.find(k);
    return it == sl.acks.end() ? none : it->second;
  }

  slice_table& slice_of(std::int64_t j) {
    if (last_slice_ != slices_.end() && last_slice_->first == j) {
      if (last_slice_->second.is_packed) [[unlikely]] unpack(last_slice_->second);
      return last_slice_->second;
    }
    auto [it, fresh] = slices_.try_emplace(j, hash_);
    last_slice_ = it;
    if (fresh) {
      // Keys repeat from slice to slice: size the table like its predecessor's instead
      // of growing it by rehashing (short slices of sliding windows are made often).
      it->second.accs = take_table(it != slices_.begin() ? std::prev(it)->second.size() : 0);
      next_fire_ = next_fire_end();  // a new slice may hold an earlier window
    } else if (it->second.is_packed) [[unlikely]] {
      unpack(it->second);
    }
    return it->second;
  }

  // A table with room for n entries: a spare one when its capacity is at most 4x what n
  // needs (iteration visits every slot), else a new one.
  slice_accs take_table(std::size_t n) {
    const std::size_t want = std::bit_ceil(std::max<std::size_t>(16, 2 * n));
    while (!spare_.empty()) {
      slice_accs t = std::move(spare_.back());
      spare_.pop_back();
      if (t.capacity() > 4 * want) continue;
      t.reserve(n);
      return t;
    }
    slice_accs t{detail::probe_hash<K, Hash>{hash_}};
    t.reserve(n);
    return t;
  }
  // Keeps a fired slice's table, emptied, for take_table (at most max_spare of them).
  void recycle(slice_accs&& t) noexcept {
    if (spare_.size() >= max_spare || t.capacity() == 0) return;
    t.clear();
    spare_.push_back(std::move(t));  // no allocation: capacity reserved in the constructor
  }
  static constexpr std::size_t max_spare = 2;

  // Moves a slice's entries to its packed vector (copies first: on an exception the slice
  // is unchanged) and recycles its table; on_entry(packed_entry&, hash) sees each entry as it
  // is copied, with key_by's hash of its key.
  template <class OnEntry>
  void pack(slice_table& sl, OnEntry&& on_entry) {
    std::vector<packed_entry> p = std::move(spare_packed_);
    p.clear();
    p.reserve(sl.accs.size());
    for (const auto& [k, a] : sl.accs) {
      p.push_back(packed_entry{k, 0, a});
      on_entry(p.back(), sl.accs.hash_function()(k));
    }
    if (hot_ == &sl) set_hot(nullptr);
    sl.packed = std::move(p);
    sl.is_packed = true;
    recycle(std::move(sl.accs));
    sl.accs = slice_accs{detail::probe_hash<K, Hash>{hash_}};
  }
  // Puts a packed slice's entries back in a table (each key hashed again).
  void unpack(slice_table& sl) {
    slice_accs t = take_table(sl.packed.size());
    for (const auto& e : sl.packed) t.try_emplace(e.key, t.hash_function()(e.key), [&] { return e.acc; });
    sl.accs = std::move(t);
    sl.packed = {};
    sl.is_packed = false;
  }

  // The table of the cached slice when ns lies in it, else nullptr: one unsigned compare
  // (ns - lo wraps to a large value below lo; hot_span_ is 0 without a hot table).
  slice_table* hot_for(std::int64_t ns) const noexcept {
    return std::uint64_t(ns) - std::uint64_t(cached_lo_) < hot_span_ ? hot_ : nullptr;
  }
  void set_hot(slice_table* t) noexcept {
    hot_ = t;
    hot_span_ = t != nullptr ? std::uint64_t(cached_hi_) - std::uint64_t(cached_lo_) : 0;
  }

  // Slice index of t; the last slice's bounds are cached (no division per record).
  std::int64_t slice_index(event_time t) noexcept {
    const std::int64_t ns = t.time_since_epoch().count();
    if (ns >= cached_lo_ && ns < cached_hi_) return cached_j_;
    set_hot(nullptr);
    cached_j_ = floor_div(ns, slice_);
    const event_time lo = detail::clamp_time(detail::wide(cached_j_) * slice_);
    cached_lo_ = lo.time_since_epoch().count();
    cached_hi_ = detail::clamp_time(detail::wide(cached_lo_) + slice_).time_since_epoch().count();
    if (cached_lo_ > ns) cached_lo_ = ns;  // clamped at -infinity: keep the cache sound
    return cached_j_;
  }

  // Folds into (slice j, key); true when the entry is new.
  bool fold_into(std::int64_t j, const K& key, std::size_t hash, const T& value, std::shared_ptr<ack_token>&& ack) {
    slice_table& sl = slice_of(j);
    if (j == cached_j_) set_hot(&sl);
    return fold_slice(sl, key, hash, value, std::move(ack));
  }
  [[gnu::always_inline]] bool fold_slice(slice_table& sl, const K& key, std::size_t hash, const T& value,
                                         std::shared_ptr<ack_token>&& ack) {
    const auto [it, fresh] = sl.accs.try_emplace(key, hash, [&] { return agg_.init(); });
    if (fresh) [[unlikely]] {
      ++entries_;
      peak_entries_ = std::max(peak_entries_, entries_);
    }
    agg_.add(it->second, value);
    if (ack) {
      const detail::key_probe<K> probe{&key, hash};
      sl.acks.lazy_emplace(probe, [&](const typename slice_acks::constructor& make) { make(key, acks_t{}); })
          ->second.push_back(std::move(ack));
      has_acks_ = true;
    }
    return fresh;
  }

  // t >= W: every window of t ends after W (end > t), so none has passed or is late.
  // The slice of the previous record is kept (hot_): one range check finds its table.
  [[gnu::always_inline]] void fold_in_time(const K& key, std::size_t hash, const T& value, event_time t,
                    std::shared_ptr<ack_token>&& ack) {
    const std::int64_t ns = t.time_since_epoch().count();
    if (slice_table* h = hot_for(ns)) [[likely]] {
      fold_slice(*h, key, hash, value, std::move(ack));
      return;
    }
    fold_other_slice(key, hash, value, t, std::move(ack));
  }
  // fold_in_time() of a record outside the cached slice: out of line, once per slice for
  // records in time order.
  [[gnu::noinline]] void fold_other_slice(const K& key, std::size_t hash, const T& value,
                                          event_time t, std::shared_ptr<ack_token>&& ack) {
    fold_into(slice_index(t), key, hash, value, std::move(ack));
  }

  // A record behind W (late, allowed-late or in a window not yet fired): out of line,
  // the in-order path is fold_in_time.
  template <class OnResult, class LateThunk>
  [[gnu::noinline]] void fold_aligned(const K& key, std::size_t hash, const T& value, event_time t,
                                      event_time w, std::shared_ptr<ack_token>&& ack,
                                      OnResult& on_result, LateThunk& late) {
    // Every window ending at or before W that held a slice has fired; the ones that held
    // none are past as well (they must not fire for this record's new slice).
    fired_k_ = std::max(fired_k_, k_passed(w));
    const std::int64_t j = slice_index(t);
    const detail::wide kl = k_last(j);
    if (plus_lateness(win_end(kl)) <= w) {  // every window of t is gone
      ++late_;
      late(win_start(kl), win_end(kl));
      return;
    }
    const bool fresh = fold_into(j, key, hash, value, std::move(ack));
    if (window_valid_ && j >= window_lo_ && j < window_hi_) window_valid_ = false;  // stale stacks
    if (lateness_ == 0) return;  // the passed windows of t are late: they never see it
    const detail::wide kp = std::min(k_passed(w), kl);
    for (detail::wide k = k_first(j); k <= kp; ++k)  // allowed-late: re-emit at once
      if (plus_lateness(win_end(k)) > w) emit_key(key, hash, k, j, fresh, on_result);
  }

  // Re-emits window k of one key (an allowed-late record in slice j, `fresh` when that
  // entry is new: the window was emitted before only if it held another entry of the key).
  template <class OnResult>
  void emit_key(const K& key, std::size_t hash, detail::wide k, std::int64_t j, bool fresh, OnResult& on_result) {
    std::optional<accumulator> acc;
    acks_t acks;
    bool other = false;
    for (auto it = slices_.lower_bound(std::int64_t(first_slice(k))); it != slices_.end() && it->first < end_slice(k);
         ++it) {
      if (it->second.is_packed) unpack(it->second);
      auto* e = it->second.accs.find(key, hash);
      if (e == nullptr) continue;
      if (it->first != j) other = true;
      if (!acc) {
        acc = e->second;
      } else if constexpr (mergeable_aggregate<Agg, T>) {
        agg_.merge(*acc, e->second);
      }
      const acks_t& ea = acks_of(it->second, key);
      acks.insert(acks.end(), ea.begin(), ea.end());
    }
    if (acc) deliver(key, win_start(k), win_end(k), agg_.result(*acc), joined(acks), !fresh || other, on_result);
  }

  // The next window to fire: the first after fired_k_ that holds a slice.
  std::optional<detail::wide> next_window() const noexcept {
    for (auto it = slices_.begin(); it != slices_.end(); ++it) {
      const detail::wide kl = k_last(it->first);
      if (kl > fired_k_) return std::max(fired_k_ + 1, k_first(it->first));
    }
    return std::nullopt;
  }

  // End of the next window to fire; event_time_max when there is none (a window ending at
  // +infinity fires at end of stream through the loop below as well).
  event_time next_fire_end() const noexcept {
    const auto k = next_window();
    return k ? win_end(*k) : event_time_max;
  }

  template <class OnResult>
  [[gnu::noinline]] void fire_aligned(OnResult& on_result) {
    const event_time w = tracker_.current();
    if (w < next_fire_) return;
    for (;;) {
      const auto k = next_window();
      if (!k || win_end(*k) > w) break;
      emit_window(*k, on_result);
      fired_k_ = *k;
      // Slices whose every window fired: acks are in the results; past the lateness, gone.
      for (auto it = slices_.begin(); it != slices_.end() && k_last(it->first) <= fired_k_;) {
        if (plus_lateness(win_end(k_last(it->first))) <= w) {
          entries_ -= it->second.size();
          if (last_slice_ == it) last_slice_ = slices_.end();
          if (hot_ == &it->second) set_hot(nullptr);
          recycle(std::move(it->second.accs));
          if (it->second.is_packed) spare_packed_ = std::move(it->second.packed);
          it = slices_.erase(it);
        } else {
          if (has_acks_) it->second.acks.clear();
          ++it;
        }
      }
    }
    next_fire_ = next_fire_end();
  }

  template <class OnResult>
  void emit_window(detail::wide k, OnResult& on_result) {
    const event_time start = win_start(k), end = win_end(k);
    if (slide_ == size_) {  // tumbling: window k is slice k
      auto it = slices_.find(std::int64_t(k));
      if (it == slices_.end()) return;
      assert(!it->second.is_packed);  // tumbling slices are never packed
      for (auto& [key, acc] : it->second.accs)
        deliver(key, start, end, agg_.result(acc), joined(acks_of(it->second, key)), false, on_result);
      return;
    }
    if constexpr (mergeable_aggregate<Agg, T>) {
      const std::int64_t lo = std::int64_t(first_slice(k)), hi = std::int64_t(end_slice(k));
      if (has_acks_) {  // the acks of every slice go with the result: merge directly
        struct merged {
          accumulator acc;
          acks_t acks;
        };
        absl::flat_hash_map<K, merged, detail::probe_hash<K, Hash>, detail::probe_eq<K>> out(
            0, detail::probe_hash<K, Hash>{hash_});
        for (auto it = slices_.lower_bound(lo); it != slices_.end() && it->first < hi; ++it) {
          it->second.each([&](const K& key, const accumulator& a) {
            auto [o, fresh] = out.try_emplace(key, merged{a, {}});
            if (!fresh) agg_.merge(o->second.acc, a);
            const acks_t& ka = acks_of(it->second, key);
            o->second.acks.insert(o->second.acks.end(), ka.begin(), ka.end());
          });
        }
        for (auto& [key, m] : out) deliver(key, start, end, agg_.result(m.acc), joined(m.acks), false, on_result);
        return;
      }
      slide_window(lo, hi);
      // One pass over the stacks' keys by index: the head suffix holds indices [0, nf),
      // the back those with back_has_ set.
      const std::vector<accumulator>* head = front_head_ < front_.size() ? &front_[front_head_].suffix : nullptr;
      const std::size_t nf = head != nullptr ? head->size() : 0;
      for (std::size_t i = 0; i < stack_keys_.size(); ++i) {
        if (i < nf) {
          if (back_has_[i]) {
            accumulator acc = (*head)[i];
            agg_.merge(acc, back_acc_[i]);
            deliver(stack_keys_[i], start, end, agg_.result(acc), nullptr, false, on_result);
          } else {
            deliver(stack_keys_[i], start, end, agg_.result((*head)[i]), nullptr, false, on_result);
          }
        } else if (back_has_[i]) {
          deliver(stack_keys_[i], start, end, agg_.result(back_acc_[i]), nullptr, false, on_result);
        }
      }
    }
  }

  // f(key, key_by's hash, accumulator) for every entry of a slice (each key hashed again:
  // neither a table slot nor a packed entry keeps its hash).
  template <class F>
  static void each_hashed(const slice_table& sl, F&& f) {
    sl.each([&](const K& key, const accumulator& a) { f(key, sl.accs.hash_function()(key), a); });
  }

  // The stacks' index of a key: stack_index_ numbers the keys of the stacks 0, 1, ...
  // from the last flip on (the front's keys first); back_acc_ and back_has_ grow with it.
  // key_by's hash of a key (the tables' hash function).
  std::size_t hash_of(const K& key) const { return detail::probe_hash<K, Hash>{hash_}(key); }
  std::uint32_t stack_index(const K& key, std::size_t hash) {
    const auto n = std::uint32_t(stack_keys_.size());
    const auto [it, fresh] = stack_index_.try_emplace(key, hash, [n] { return n; });
    if (fresh) {
      stack_keys_.push_back(key);
      back_acc_.push_back(agg_.init());
      back_has_.push_back(0);
    }
    return it->second;
  }
  void clear_stack_keys() noexcept {
    stack_index_.clear();
    stack_keys_.clear();
    back_acc_.clear();
    back_has_.clear();
  }

  // Moves the two stacks to the slices [lo, hi) of the next window.
  void slide_window(std::int64_t lo, std::int64_t hi) {
    if (!window_valid_) {  // first use, or a record changed a slice inside: rebuild
      front_.clear();
      front_head_ = 0;
      back_slices_.clear();
      clear_stack_keys();
      ++gen_;
      window_hi_ = lo;
    }
    window_valid_ = false;  // until the end: an exception leaves the stacks to be rebuilt
    // pop slices before lo from the front; flip the back into the front when it is empty
    while (front_head_ < front_.size() && front_[front_head_].j < lo) ++front_head_;
    if (front_head_ == front_.size()) flip(lo);
    // push the slices up to hi onto the back (slices below hi end at or before W: closed,
    // so packed); their entries learn their stack index
    auto to_back = [&](packed_entry& e, std::size_t hash) {
      e.index = stack_index(e.key, hash);
      if (!back_has_[e.index]) {
        back_acc_[e.index] = e.acc;
        back_has_[e.index] = 1;
      } else if constexpr (mergeable_aggregate<Agg, T>) {
        agg_.merge(back_acc_[e.index], e.acc);
      }
    };
    for (auto it = slices_.lower_bound(std::max(window_hi_, lo)); it != slices_.end() && it->first < hi; ++it) {
      back_slices_.push_back(it->first);
      slice_table& sl = it->second;
      if (sl.is_packed) {
        for (packed_entry& e : sl.packed) to_back(e, sl.accs.hash_function()(e.key));
      } else {
        pack(sl, to_back);
      }
      sl.stack_gen = gen_;
    }
    window_lo_ = lo;
    window_hi_ = std::max(window_hi_, hi);
    window_valid_ = true;
  }

  // The back's slices from lo on become the front, as suffix aggregates from the newest
  // slice to the oldest. The keys are numbered anew in the order the newest-first pass
  // meets them, so a suffix's keys are the indices [0, its size). An entry pushed in
  // this generation carries its old index (one array read to renumber it); any other is
  // looked up by key.
  void flip(std::int64_t lo) {
    front_head_ = 0;
    std::erase_if(back_slices_, [lo](std::int64_t j) { return j < lo; });
    front_.resize(back_slices_.size());  // the kept suffix vectors keep their capacity
    // The old numbering moves to prev_*: their buffers are kept from flip to flip.
    std::swap(stack_index_, prev_index_);
    std::swap(stack_keys_, prev_keys_);
    stack_index_.clear();
    stack_keys_.clear();
    stack_index_.reserve(prev_index_.size());
    constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
    renumbered_.assign(prev_keys_.size(), none);
    back_acc_.clear();
    back_has_.clear();
    std::vector<accumulator>& run = run_;  // suffix aggregates by new index
    run.clear();
    auto fold = [&](std::uint32_t x, const accumulator& a) {
      if (x == run.size()) {
        run.push_back(a);
      } else if constexpr (mergeable_aggregate<Agg, T>) {
        agg_.merge(run[x], a);
      }
    };
    // The new number of old number o (key `key`), assigned the first time it is met.
    auto by_old = [&](std::uint32_t o, const K& key) {
      if (renumbered_[o] == none) renumbered_[o] = stack_index(key, hash_of(key));
      return renumbered_[o];
    };
    for (std::size_t i = back_slices_.size(); i-- > 0;) {
      auto it = slices_.find(back_slices_[i]);
      if (it != slices_.end()) {
        const slice_table& sl = it->second;
        if (sl.is_packed && sl.stack_gen == gen_) {
          for (const packed_entry& e : sl.packed) fold(by_old(e.index, e.key), e.acc);
        } else {
          each_hashed(sl, [&](const K& key, std::size_t hash, const accumulator& a) {
            const auto* o = prev_index_.find(key, hash);
            fold(o != nullptr ? by_old(o->second, key) : stack_index(key, hash), a);
          });
        }
      }
      front_[i].j = back_slices_[i];
      front_[i].suffix = run;
    }
    back_slices_.clear();
    ++gen_;
  }

  // ---- sessions ----
  // A session [lo, hi) closes once W > hi: until then a record at t = hi >= W is on time and
  // touches it (they merge), so the watermark must pass the end, not only reach it.
  static event_time closes_at(std::int64_t hi) noexcept { return detail::clamp_time(detail::wide(hi) + 1); }

  template <class OnResult, class LateThunk>
  void fold_session(const K& key, std::size_t hash, const T& value, event_time t, event_time w,
                    std::shared_ptr<ack_token>&& ack, OnResult& on_result, LateThunk& late) {
    const std::int64_t lo = t.time_since_epoch().count();
    const std::int64_t hi = detail::clamp_time(detail::wide(lo) + size_).time_since_epoch().count();
    auto it = keys_.find(detail::hashed_key<K>{key, hash});
    // Sessions of the key that overlap or touch [lo, hi]: a contiguous run [a, b).
    std::size_t a = 0, b = 0;
    std::int64_t mlo = lo, mhi = hi;
    if (it != keys_.end()) {
      auto& p = it->second.pieces;
      b = p.size();
      while (b > 0 && p[b - 1].lo > hi) --b;
      a = b;
      while (a > 0 && p[a - 1].hi >= lo) --a;
      if (a < b) {
        mlo = std::min(mlo, p[a].lo);
        mhi = std::max(mhi, p[b - 1].hi);
      }
    }
    if (plus_lateness(closes_at(mhi)) <= w) {
      ++late_;
      late(t, event_time{std::chrono::nanoseconds{hi}});
      return;
    }
    node& n = it != keys_.end() ? *it : *keys_.emplace(detail::hashed_key<K>{key, hash}, key_state{}).first;
    auto& p = n.second.pieces;
    if (a == b) {  // a new session
      p.insert(p.begin() + std::ptrdiff_t(a), piece{lo, hi, agg_.init(), {}});
      ++entries_;
      peak_entries_ = std::max(peak_entries_, entries_);
    } else if constexpr (mergeable_aggregate<Agg, T>) {  // merge [a, b) into a
      piece& s = p[a];
      for (std::size_t i = a + 1; i < b; ++i) {
        agg_.merge(s.acc, p[i].acc);
        s.acks.insert(s.acks.end(), p[i].acks.begin(), p[i].acks.end());
        s.emitted = s.emitted || p[i].emitted;
      }
      p.erase(p.begin() + std::ptrdiff_t(a + 1), p.begin() + std::ptrdiff_t(b));
      entries_ -= b - a - 1;
      s.lo = mlo;
      s.hi = mhi;
    }
    piece& s = p[a];
    agg_.add(s.acc, value);
    if (ack) s.acks.push_back(std::move(ack));
    s.dirty = true;
    if (closes_at(s.hi) <= w) emit_session(n, s, on_result);  // allowed-late
    schedule(n);
  }

  template <class OnResult>
  void emit_session(node& n, piece& s, OnResult& on_result) {
    const bool update = s.emitted;
    s.emitted = true;
    s.dirty = false;
    auto ack = joined(s.acks);
    s.acks.clear();
    deliver(n.first.key, event_time{std::chrono::nanoseconds{s.lo}}, event_time{std::chrono::nanoseconds{s.hi}},
            agg_.result(s.acc), std::move(ack), update, on_result);
  }

  std::optional<event_time> next_session(const key_state& ks) const noexcept {
    std::optional<event_time> best;
    for (const piece& s : ks.pieces) {
      const event_time e = closes_at(s.hi);
      const event_time at = s.dirty ? e : plus_lateness(e);
      if (!best || at < *best) best = at;
    }
    return best;
  }

  template <class OnResult>
  void process_session(node& n, event_time e, OnResult& on_result) {
    auto& p = n.second.pieces;
    for (piece& s : p)
      if (s.dirty && closes_at(s.hi) <= e) emit_session(n, s, on_result);
    const auto before = p.size();
    std::erase_if(p, [&](const piece& s) { return !s.dirty && plus_lateness(closes_at(s.hi)) <= e; });
    entries_ -= before - p.size();
  }

  // ---- timers: one live entry per key, at its next time ----
  void schedule(node& n) {
    key_state& ks = n.second;
    const std::optional<event_time> at = next_session(ks);
    if (!at) {
      ks.has_timer = false;
      return;
    }
    if (ks.has_timer && ks.timer <= *at) return;  // the earlier entry reschedules
    ks.has_timer = true;
    ks.timer = *at;
    ++ks.timer_refs;
    if (last_bucket_ == timers_.end() || last_bucket_->first != *at)
      last_bucket_ = timers_.try_emplace(*at).first;
    last_bucket_->second.push_back(&n);
  }

  // The check is inline; the firing is not (fire_aligned, fire_sessions): a push that
  // fires nothing keeps its registers instead of sharing a frame with the emit loops.
  template <class OnResult>
  void fire_ready(OnResult& on_result) {
    if constexpr (!detail::is_session<Assigner>) {
      if (tracker_.current() >= next_fire_) [[unlikely]] fire_aligned(on_result);
    } else {
      if (!timers_.empty() && timers_.begin()->first <= tracker_.current()) [[unlikely]]
        fire_sessions(on_result);
    }
  }

  template <class OnResult>
  [[gnu::noinline]] void fire_sessions(OnResult& on_result) {
    const event_time w = tracker_.current();
    while (!timers_.empty() && timers_.begin()->first <= w) {
      if (last_bucket_ == timers_.begin()) last_bucket_ = timers_.end();
      auto bucket = timers_.extract(timers_.begin());
      const event_time e = bucket.key();
      for (node* n : bucket.mapped()) {
        key_state& ks = n->second;
        --ks.timer_refs;
        if (ks.has_timer && ks.timer == e) {
          ks.has_timer = false;
          process_session(*n, e, on_result);
          schedule(*n);
        }
        if (ks.timer_refs == 0 && ks.empty() && !ks.has_timer) keys_.erase(n->first);
      }
    }
  }

  static std::shared_ptr<ack_token> joined(const acks_t& acks) {
    if (acks.empty()) return nullptr;
    if (acks.size() == 1) return acks.front();
    return std::make_shared<ack_group>(acks);
  }

  template <class OnResult>
  void deliver(const K& key, event_time start, event_time end, result_type&& value,
               std::shared_ptr<ack_token>&& ack, bool update, OnResult& on_result) {
    ++fired_;
    if (update) ++updates_;
    const event_time t = end == event_time_min ? end : end - std::chrono::nanoseconds{1};
    on_result(record<output>{output{key, start, end, std::move(value), update}, t, std::nullopt, std::move(ack)});
  }

  Assigner assigner_;
  window_options options_;
  Agg agg_;
  Hash hash_;
  watermark_tracker tracker_;
  std::int64_t size_ = 0, slide_ = 0, slice_ = 1;  // ns; sessions: size_ = gap
  std::int64_t lateness_ = 0;
  // sessions: per key, its sessions, and one timer per key at its next end
  table keys_;
  std::map<event_time, std::vector<node*>> timers_;
  typename std::map<event_time, std::vector<node*>>::iterator last_bucket_ = timers_.end();
  // tumbling/sliding: one table per slice, and the two stacks of the last window fired
  std::map<std::int64_t, slice_table> slices_;
  typename std::map<std::int64_t, slice_table>::iterator last_slice_ = slices_.end();
  std::vector<packed_entry> spare_packed_;  // the vector of the last packed slice erased
  std::vector<slice_accs> spare_ = [] {  // emptied tables of fired or packed slices
    std::vector<slice_accs> v;
    v.reserve(max_spare);
    return v;
  }();
  detail::wide fired_k_ = detail::wide(std::numeric_limits<std::int64_t>::min()) * 2;
  bool has_acks_ = false;
  event_time next_fire_ = event_time_max;  // end of the next window to fire
  std::int64_t cached_j_ = 0, cached_lo_ = 0, cached_hi_ = 0;  // slice_index's last slice
  slice_table* hot_ = nullptr;  // the table of slice cached_j_, once it exists
  std::uint64_t hot_span_ = 0;   // cached_hi_ - cached_lo_ while hot_ is set, else 0
  // sliding: the stacks hold accumulators by a dense index of their keys (stack_index)
  struct stacked {
    std::int64_t j = 0;
    std::vector<accumulator> suffix;  // by index: this slice merged with every newer one of
                                      // the front; its keys are exactly indices [0, size)
  };
  std::vector<stacked> front_;
  std::size_t front_head_ = 0;
  using index_table = key_table<K, std::uint32_t, detail::probe_hash<K, Hash>>;
  index_table stack_index_{detail::probe_hash<K, Hash>{hash_}};  // key -> index
  std::vector<K> stack_keys_;                                     // index -> key
  // the numbering before the last flip, and flip()'s work vectors (kept for their capacity)
  index_table prev_index_{detail::probe_hash<K, Hash>{hash_}};
  std::vector<K> prev_keys_;
  std::vector<std::uint32_t> renumbered_;
  std::vector<accumulator> run_;
  std::vector<accumulator> back_acc_;      // index -> merge of back_slices_ (where back_has_)
  std::vector<std::uint8_t> back_has_;     // index -> the key has an entry in back_slices_
  std::vector<std::int64_t> back_slices_;  // in window order
  std::uint64_t gen_ = 1;                  // +1 at every flip and rebuild (packed_entry::index)
  std::int64_t window_lo_ = 0, window_hi_ = 0;
  bool window_valid_ = false;
  std::size_t entries_ = 0, peak_entries_ = 0;
  std::uint64_t late_ = 0, fired_ = 0, updates_ = 0, discarded_ = 0;
};

}  // namespace rill

// rill/operators/join_state.hpp — the single-threaded state machines of the joins of
// <rill/operators/join.hpp>: the watermarks of a two-sided operator, the interval join and
// the window join of one worker's instance.
//
// Defines:
//   rill::join_side                      left or right
//   rill::join_watermarks                per-side watermarks and the join's watermark
//   rill::interval_join_state<K, A, B>   one instance of an interval join
//   rill::window_join_state<K, A, B, Assigner>   one instance of a window join
// (aliases of rill::detail classes; the DSL builds them, tests and benchmarks drive them.)
//
// Example (namespace scope; compiled by tests/banner_examples.py):
//   struct pairs_out {
//     std::vector<std::string> got;
//     void pair(const int&, const std::string& a, const std::string& b, rill::event_time,
//               std::shared_ptr<rill::ack_token>&&) { got.push_back(a + b); }
//   };
//   std::vector<std::string> joined() {
//     rill::interval_join_state<int, std::string, std::string> j{-1s, 1s, 0s, 0s, 1, 1, {}};
//     pairs_out out;
//     auto late = [](auto&&) {};
//     j.push_left(0, 7, 7, {"a", rill::event_time{10s}}, {}, out, late);
//     j.push_right(0, 7, 7, {"b", rill::event_time{11s}}, {}, out, late);  // 11 in [10 - 1, 10 + 1]
//     return out.got;  // {"ab"}
//   }
//
// Calls: push_left/push_right(input, key, hash, record, now, out, late) with `hash` the
// key's hash as key_by computes it (any function of the key, the same for both sides);
// progress(side, input, t, now, out), end(side, input, out), tick(now, out); and the
// steps for a caller that emits only a bounded number of results at a time:
// observe/due/advance_quiet/advance_due (both joins), keep_left/keep_right (the window
// join: store without firing), try_push_left/try_push_right (the interval join: push
// only a record with at most max_results partners). `out`
// receives results: out.pair(const K&, const A&, const B&, event_time, shared_ptr<ack_token>&&)
// and, for a window join, whose Out also defines `static constexpr bool outer`: when it is
// true (a left outer join), out.left_only(const K&, const A&, event_time,
// const shared_ptr<ack_token>&). The interval join (inner only) reads no Out::outer.
// `late(record<A or B>&&)` receives a late record.
// Errors: std::bad_alloc, or what a callback throws (basic guarantee).
//
// Rules (docs/design.md "Joins"; the public header repeats them for users):
//   - each side has its own watermark (a rill::watermark_tracker over that side's inputs);
//     the operator's watermark W is a tracker over the inputs of both sides (minimum over
//     the active ones: an idle side stops holding W back, as Flink's withIdleness);
//   - a side's effective watermark E_side = max(W_side, W);
//   - interval join: left a and right b match when b.t in [a.t + lower, a.t + upper]
//     (inclusive); a pair is emitted when its second record arrives, with time
//     max(a.t, b.t); a stored record is dropped once the other side's E passes the last
//     time a partner could have (left: E_right > a.t + upper; right: E_left > b.t - lower);
//     a record is late when t < E_side at its arrival (its partners may be gone);
//   - window join (tumbling, sliding): records are kept per (slice, key) and a window
//     fires once W >= its end, emitting per key every (a, b) pair (inner) and, left outer,
//     each left record of a key without right records in that window, with time
//     end - 1 ns; a record is late when every window it is in has end <= W.
//
// Thread safety: distinct objects safe, shared objects unsafe; one worker owns an instance.
// Callbacks run synchronously inside the calls and must not call back into the object.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "rill/core/record.hpp"
#include "rill/core/time.hpp"
#include "rill/core/watermark.hpp"
#include "rill/operators/keyed_window.hpp"
#include "rill/operators/window.hpp"

namespace rill {

/// The two sides of a join: left (a, the stream join is called on) and right (b).
enum class join_side : std::uint8_t { left = 0, right = 1 };

namespace detail {

constexpr join_side other_side(join_side s) noexcept {
  return s == join_side::left ? join_side::right : join_side::left;
}

/// The token of an output made of two inputs (rill::join_acks rule): null when neither
/// has one, the single token when only one has one or both share it, else a group.
inline std::shared_ptr<ack_token> join_two_acks(const std::shared_ptr<ack_token>& a,
                                                const std::shared_ptr<ack_token>& b) {
  if (!a) return b;
  if (!b || a == b) return a;
  return std::make_shared<ack_group>(std::vector<std::shared_ptr<ack_token>>{a, b});
}

/// One stored record of a join side: time (ns), value, ack token (null without acks).
template <class V>
struct join_entry {
  std::int64_t t;
  V value;
  std::shared_ptr<ack_token> ack;
};

/// The watermarks of a two-sided operator (see the banner): one tracker per side and one
/// over all inputs (left inputs first, then right). A side with 0 inputs counts as ended.
class join_watermarks {
 public:
  join_watermarks(std::size_t left_inputs, std::size_t right_inputs, std::chrono::nanoseconds max_delay,
                  std::chrono::nanoseconds idle_timeout, steady_time now)
      : nl_(std::max<std::size_t>(left_inputs, 1)),
        side_{watermark_tracker{nl_, max_delay, idle_timeout, now},
              watermark_tracker{std::max<std::size_t>(right_inputs, 1), max_delay, idle_timeout, now}},
        all_(nl_ + std::max<std::size_t>(right_inputs, 1), max_delay, idle_timeout, now) {
    if (left_inputs == 0) end(join_side::left, 0);
    if (right_inputs == 0) end(join_side::right, 0);
  }
  void observe(join_side s, std::size_t input, event_time t, steady_time now) noexcept {
    side_[idx(s)].observe(input, t, now);
    all_.observe(offset(s) + input, t, now);
  }
  void end(join_side s, std::size_t input) noexcept {
    side_[idx(s)].end(input);
    all_.end(offset(s) + input);
  }
  void tick(steady_time now) noexcept {
    side_[0].tick(now);
    side_[1].tick(now);
    all_.tick(now);
  }
  /// E_side = max(W_side, W): no record of side `s` below it can still arrive in time.
  event_time effective(join_side s) const noexcept { return std::max(side_[idx(s)].current(), all_.current()); }
  /// W, the operator's watermark (what goes downstream).
  event_time combined() const noexcept { return all_.current(); }
  const watermark_tracker& side(join_side s) const noexcept { return side_[idx(s)]; }

 private:
  static std::size_t idx(join_side s) noexcept { return std::size_t(s); }
  std::size_t offset(join_side s) const noexcept { return s == join_side::left ? 0 : nl_; }
  std::size_t nl_;
  watermark_tracker side_[2];
  watermark_tracker all_;
};

/// Counters and state size shared by both joins.
struct join_stats {
  std::size_t entries = 0, peak_entries = 0;
  std::uint64_t late = 0, results = 0, discarded = 0;
  void add_entry() noexcept {
    ++entries;
    peak_entries = std::max(peak_entries, entries);
  }
};

constexpr std::int64_t ns_count(event_time t) noexcept { return t.time_since_epoch().count(); }

/// What both joins share: the calls that feed them and their counters. Derived provides
/// `push<join_side>(input, key, hash, record, now, out, late)` and `advance(out)` (what
/// follows a watermark change: expiry, or firing windows).
template <class Derived, class K, class A, class B>
class join_state_base {
 public:
  /// A left record with `key` (and key_by's `hash`) arrives on left input `input` at
  /// processing time `now`. `late(record<A>&&)` gets it when it is late; otherwise it
  /// joins. Then its time is observed and what W allows happens (expiry, firing).
  template <class Out, class Late>
  void push_left(std::size_t input, const K& key, std::size_t hash, record<A>&& r, steady_time now, Out& out,
                 Late&& late) {
    self().template push<join_side::left>(input, key, hash, std::move(r), now, out, late);
  }
  /// The same for a right record (`late(record<B>&&)`).
  template <class Out, class Late>
  void push_right(std::size_t input, const K& key, std::size_t hash, record<B>&& r, steady_time now, Out& out,
                  Late&& late) {
    self().template push<join_side::right>(input, key, hash, std::move(r), now, out, late);
  }
  /// Progress marker: `input` of side `s` has seen everything up to `t`.
  template <class Out>
  void progress(join_side s, std::size_t input, event_time t, steady_time now, Out& out) {
    wm_.observe(s, input, t, now);
    self().advance(out);
  }
  /// Input `input` of side `s` ended (counts as +infinity). Idempotent.
  template <class Out>
  void end(join_side s, std::size_t input, Out& out) {
    wm_.end(s, input);
    self().advance(out);
  }
  /// Processing time advanced: silent inputs become idle (idle_timeout).
  template <class Out>
  void tick(steady_time now, Out& out) {
    wm_.tick(now);
    self().advance(out);
  }

  /// progress() in two steps: observe() takes the marker; then, when due() is false,
  /// advance_quiet() does the rest without emitting (expiry), and when it is true,
  /// advance_due(out) emits what is due (a window join's windows). The interval join is
  /// never due: it emits on arrival only. noexcept observe(); the others as progress().
  void observe(join_side s, std::size_t input, event_time t, steady_time now) noexcept {
    wm_.observe(s, input, t, now);
  }
  bool due() const noexcept { return self_c().due_now(); }
  void advance_quiet() {
    no_output out;
    self().advance(out);
  }
  template <class Out>
  void advance_due(Out& out) {
    self().advance(out);
  }

  /// W, the join's watermark (event_time_min = -infinity, event_time_max = +infinity).
  event_time watermark() const noexcept { return wm_.combined(); }
  const join_watermarks& watermarks() const noexcept { return wm_; }
  /// Records held now (both sides): the memory bound's unit.
  std::size_t state_entries() const noexcept { return stats_.entries; }
  /// The largest state_entries() seen.
  std::size_t peak_state_entries() const noexcept { return stats_.peak_entries; }
  /// Late records (both sides) so far.
  std::uint64_t late() const noexcept { return stats_.late; }
  /// Results emitted so far (pairs, and unmatched left records of a left outer join).
  std::uint64_t results() const noexcept { return stats_.results; }

 protected:
  join_state_base(std::size_t left_inputs, std::size_t right_inputs, std::chrono::nanoseconds max_delay,
                  std::chrono::nanoseconds idle_timeout, steady_time now)
      : wm_(left_inputs, right_inputs, max_delay, idle_timeout, now) {}
  // A late record: counted, observed (activity only: its time is below W), handed over.
  template <join_side S, class V, class Late>
  void reject(std::size_t input, record<V>&& r, steady_time now, Late& late) {
    ++stats_.late;
    wm_.observe(S, input, advances_progress(r) ? r.time : event_time_min, now);
    late(std::move(r));
  }
  // Every stored record was dropped (discard): counts them, returns how many.
  std::size_t dropped_all() noexcept {
    const std::size_t n = stats_.entries;
    stats_.entries = 0;
    stats_.discarded += n;
    return n;
  }
  join_watermarks wm_;
  join_stats stats_;

 private:
  // What advance_quiet() passes: called only if due() was wrong.
  struct no_output {
    static constexpr bool outer = false;
    void pair(const K&, const A&, const B&, event_time, std::shared_ptr<ack_token>&&) { assert(!"not due"); }
    void left_only(const K&, const A&, event_time, const std::shared_ptr<ack_token>&) { assert(!"not due"); }
  };
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
  const Derived& self_c() const noexcept { return static_cast<const Derived&>(*this); }
};

/// The interval join of one instance (see the banner). K the key (==, copyable), A the
/// left value, B the right value. `out.pair(key, a, b, time, ack)` receives each pair.
///
/// State: per side, the records that may still match, in time slices of `span` =
/// max((upper - lower) / 2, 1 ms) of event time, each slice a hash table key -> records
/// (one record inline). A probe looks the key up in the at most 3 slices the partner
/// range [t + lower, t + upper] (or [t - upper, t - lower]) overlaps; a slice goes whole
/// once the other side's E has passed the last time any of its records could match, so
/// expiry costs no per-key work. Small per-slice tables also keep the lookups in cache.
/// Memory: the records of the last (upper - lower) / 2 + (upper or -lower) + max_delay
/// of event time per side (plus the gap between the sides' watermarks), independent of
/// the stream's length.
template <class K, class A, class B>
class interval_join_state : public join_state_base<interval_join_state<K, A, B>, K, A, B> {
  using base = join_state_base<interval_join_state<K, A, B>, K, A, B>;
  friend base;

 public:
  /// Preconditions (join.hpp validates them): lower <= upper, max_delay >= 0,
  /// idle_timeout >= 0.
  interval_join_state(std::chrono::nanoseconds lower, std::chrono::nanoseconds upper,
                      std::chrono::nanoseconds max_delay, std::chrono::nanoseconds idle_timeout,
                      std::size_t left_inputs, std::size_t right_inputs, steady_time now)
      : base(left_inputs, right_inputs, max_delay, idle_timeout, now), lower_(lower.count()), upper_(upper.count()),
        span_(std::max<std::int64_t>((upper - lower).count() / 2, 1'000'000)) {}

  /// Drops every stored record, failing its ack token (a stop that discards). Returns
  /// how many were dropped.
  std::size_t discard() {
    fail_all(left_);
    fail_all(right_);
    return this->dropped_all();
  }

  /// The largest `max_results` try_push_left/try_push_right accept.
  static constexpr std::size_t try_push_max = 8;

  /// push_left for a record that gives at most `max_results` results (<= try_push_max):
  /// when `r` is late, or has at most max_results partners on the right side, does
  /// exactly what push_left does (results through `out`, storage, expiry, or `late`) and
  /// returns true; otherwise changes nothing, leaves `r` as it was and returns false
  /// (push_left it, or try again with a larger max_results). Costs one probe of the
  /// right side, as push_left (the partners are gathered first, then emitted).
  template <class Out, class Late>
  bool try_push_left(std::size_t input, const K& key, std::size_t hash, record<A>& r, steady_time now,
                     std::size_t max_results, Out& out, Late&& late) {
    return try_push<join_side::left>(input, key, hash, r, now, max_results, out, late);
  }
  /// The same for a right record (partners on the left side).
  template <class Out, class Late>
  bool try_push_right(std::size_t input, const K& key, std::size_t hash, record<B>& r, steady_time now,
                      std::size_t max_results, Out& out, Late&& late) {
    return try_push<join_side::right>(input, key, hash, r, now, max_results, out, late);
  }

 private:
  bool due_now() const noexcept { return false; }  // emits on arrival only

  template <join_side S, class V, class Out, class Late>
  bool try_push(std::size_t input, const K& key, std::size_t hash, record<V>& r, steady_time now,
                std::size_t max_results, Out& out, Late& late) {
    assert(max_results <= try_push_max);
    if (r.time < wm_.effective(S)) {
      this->template reject<S>(input, std::move(r), now, late);
      return true;
    }
    using stored = std::conditional_t<S == join_side::left, B, A>;
    const join_entry<stored>* found[try_push_max];
    std::size_t n = 0;
    hashed_key<K> hk{key, hash};
    const std::int64_t t = ns_count(r.time);
    if (!for_partners<S>(hk, t, side_store<other_side(S)>(), [&](const join_entry<stored>& e) {
          if (n == max_results) return false;
          found[n++] = &e;
          return true;
        }))
      return false;
    for (std::size_t i = 0; i < n; ++i) pair_with<S>(hk.key, r.value, t, r.ack, *found[i], out);
    keep<S>(input, std::move(hk), std::move(r), now);
    return true;
  }
  using base::stats_;
  using base::wm_;
  template <class V>
  using list = absl::InlinedVector<join_entry<V>, 1>;
  template <class V>
  struct slice {
    absl::flat_hash_map<hashed_key<K>, list<V>, hashed_key_hash, hashed_key_eq> keys;
    std::size_t entries = 0;
  };
  template <class V>
  struct store_t {
    std::map<std::int64_t, slice<V>> slices;  // by floor(t / span)
    slice<V>* last = nullptr;                 // the slice last stored into (nodes stay put)
    std::int64_t last_j = 0;
  };

  template <join_side S>
  auto& side_store() noexcept {
    if constexpr (S == join_side::left) return left_;
    else return right_;
  }
  // Partners of a side-S record at t lie in [t + lo_off, t + hi_off] on the other side.
  template <join_side S>
  std::int64_t lo_off() const noexcept { return S == join_side::left ? lower_ : -upper_; }
  template <join_side S>
  std::int64_t hi_off() const noexcept { return S == join_side::left ? upper_ : -lower_; }

  template <class V>
  static void fail_all(store_t<V>& st) noexcept {
    for (auto& [j, sl] : st.slices)
      for (auto& [hk, l] : sl.keys)
        for (auto& e : l)
          if (e.ack) e.ack->fail();
    st.slices.clear();
    st.last = nullptr;
  }

  template <join_side S, class V, class Out, class Late>
  void push(std::size_t input, const K& key, std::size_t hash, record<V>&& r, steady_time now, Out& out,
            Late& late) {
    if (r.time < wm_.effective(S)) return this->template reject<S>(input, std::move(r), now, late);
    hashed_key<K> hk{key, hash};
    probe<S>(hk, r.value, ns_count(r.time), r.ack, side_store<other_side(S)>(), out);
    keep<S>(input, std::move(hk), std::move(r), now);
  }

  // After the probe: stores r while a future in-time partner is possible, observes its
  // time, expires what the watermarks allow.
  template <join_side S, class V>
  void keep(std::size_t input, hashed_key<K>&& hk, record<V>&& r, steady_time now) {
    constexpr join_side O = other_side(S);
    const std::int64_t t = ns_count(r.time);
    const bool adv = advances_progress(r);
    // Stored only while a future in-time partner is possible: t + hi_off >= E_other.
    if (wide(t) + hi_off<S>() >= wide(ns_count(wm_.effective(O)))) {
      auto& st = side_store<S>();
      const std::int64_t j = floor_div(t, span_);
      if (!st.last || st.last_j != j) {
        st.last = &st.slices[j];
        st.last_j = j;
      }
      st.last->keys[std::move(hk)].push_back(join_entry<V>{t, std::move(r.value), std::move(r.ack)});
      ++st.last->entries;
      stats_.add_entry();
    }
    wm_.observe(S, input, adv ? r.time : event_time_min, now);
    expire_both();
  }

  template <class Out>
  void advance(Out&) {  // the interval join emits on arrival only
    expire_both();
  }

  template <join_side S, class V, class Stored, class Out>
  void probe(const hashed_key<K>& hk, const V& v, std::int64_t t, const std::shared_ptr<ack_token>& ack,
             store_t<Stored>& other, Out& out) {
    for_partners<S>(hk, t, other, [&](const join_entry<Stored>& e) {
      pair_with<S>(hk.key, v, t, ack, e, out);
      return true;
    });
  }

  // Calls f(entry) for each other-side entry in a side-S record's partner range at t, in
  // slice order, then list order, while f returns true. Returns false when f stopped it.
  template <join_side S, class Stored, class F>
  bool for_partners(const hashed_key<K>& hk, std::int64_t t, store_t<Stored>& other, F&& f) {
    if (other.slices.empty()) return true;
    const std::int64_t lo = ns_count(clamp_time(wide(t) + lo_off<S>()));
    const std::int64_t hi = ns_count(clamp_time(wide(t) + hi_off<S>()));
    for (auto it = other.slices.lower_bound(floor_div(lo, span_)); it != other.slices.end() && it->first <= floor_div(hi, span_);
         ++it) {
      auto k = it->second.keys.find(hk);
      if (k == it->second.keys.end()) continue;
      for (const auto& e : k->second) {
        if (e.t < lo || e.t > hi) continue;
        if (!f(e)) return false;
      }
    }
    return true;
  }

  // One result: the side-S record (v at t) with its partner e, at max(t, e.t).
  template <join_side S, class V, class Stored, class Out>
  void pair_with(const K& key, const V& v, std::int64_t t, const std::shared_ptr<ack_token>& ack,
                 const join_entry<Stored>& e, Out& out) {
    ++stats_.results;
    const event_time when{std::chrono::nanoseconds{std::max(t, e.t)}};
    if constexpr (S == join_side::left) out.pair(key, v, e.value, when, join_two_acks(ack, e.ack));
    else out.pair(key, e.value, v, when, join_two_acks(e.ack, ack));
  }

  void expire_both() {
    expire<join_side::left>();
    expire<join_side::right>();
  }

  // Drops side-S slices whose every record's last possible partner time
  // (t + hi_off <= (j + 1) * span - 1 + hi_off) is below E_other.
  template <join_side S>
  void expire() {
    auto& st = side_store<S>();
    const wide e = ns_of(wm_.effective(other_side(S)));
    while (!st.slices.empty() && (wide(st.slices.begin()->first) + 1) * span_ - 1 + hi_off<S>() < e) {
      stats_.entries -= st.slices.begin()->second.entries;
      if (st.last == &st.slices.begin()->second) st.last = nullptr;
      st.slices.erase(st.slices.begin());
    }
  }

  std::int64_t lower_, upper_, span_;
  store_t<A> left_;
  store_t<B> right_;
};

/// Window arithmetic of tumbling and sliding windows over slices of gcd(size, slide)
/// (window k covers [k*slide, k*slide + size), slice j covers [j*g, (j+1)*g)).
struct slice_grid {
  std::int64_t size, slide, slice;
  wide k_first(wide j) const noexcept { return floor_div_wide(j * slice - size, slide) + 1; }
  wide k_last(wide j) const noexcept { return floor_div_wide(j * slice, slide); }
  wide first_slice(wide k) const noexcept { return k * slide / slice; }
  wide end_slice(wide k) const noexcept { return (k * slide + size) / slice; }
  event_time start(wide k) const noexcept { return clamp_time(k * slide); }
  event_time end(wide k) const noexcept { return clamp_time(k * slide + size); }
  wide k_passed(event_time w) const noexcept { return floor_div_wide(ns_of(w) - size, slide); }
  std::int64_t slice_of(std::int64_t t) const noexcept { return floor_div(t, slice); }
};

inline slice_grid grid_of(const tumbling& a) noexcept { return {a.size.count(), a.size.count(), a.size.count()}; }
inline slice_grid grid_of(const sliding& a) noexcept {
  return {a.size.count(), a.slide.count(), std::gcd(a.size.count(), a.slide.count())};
}

/// The window join of one instance (see the banner). Assigner rill::tumbling or
/// rill::sliding (validated by the caller). `out.pair(key, a, b, time, ack)` receives
/// the pairs of a fired window and, when `Out::outer` is true (left outer join),
/// `out.left_only(key, a, time, ack)` each left record of a key with no right record in
/// that window.
///
/// State: every in-time record until the last window holding it fired: O(records in open
/// windows). Firing a window costs O(its records + its pairs); sliding windows gather
/// their slices per key.
template <class K, class A, class B, class Assigner>
class window_join_state : public join_state_base<window_join_state<K, A, B, Assigner>, K, A, B> {
  using base = join_state_base<window_join_state<K, A, B, Assigner>, K, A, B>;
  friend base;

 public:
  window_join_state(Assigner a, std::chrono::nanoseconds max_delay, std::chrono::nanoseconds idle_timeout,
                    std::size_t left_inputs, std::size_t right_inputs, steady_time now)
      : base(left_inputs, right_inputs, max_delay, idle_timeout, now), g_(grid_of(a)) {}

  /// push_left in two steps, as progress() with observe(): keep_left stores `r` and
  /// observes its time, emitting nothing, and returns true; or, when `r` is late, hands it
  /// to `late` and returns false. After true, due() says whether advance_due(out) has
  /// windows to fire, which push_left would have fired at once; after false push_left
  /// fires nothing either. Amortised O(1); errors as push_left.
  template <class Late>
  bool keep_left(std::size_t input, const K& key, std::size_t hash, record<A>&& r, steady_time now, Late&& late) {
    return keep<join_side::left>(input, key, hash, std::move(r), now, late);
  }
  /// The same for a right record.
  template <class Late>
  bool keep_right(std::size_t input, const K& key, std::size_t hash, record<B>&& r, steady_time now, Late&& late) {
    return keep<join_side::right>(input, key, hash, std::move(r), now, late);
  }

  /// Drops every open window unemitted, failing the ack tokens of its records. Returns
  /// the number of records dropped.
  std::size_t discard() {
    for (auto& [j, tab] : slices_)
      for (auto& [hk, c] : tab) {
        fail_all(c.left);
        fail_all(c.right);
      }
    slices_.clear();
    cached_tab_ = nullptr;
    next_fire_ = event_time_max;
    return this->dropped_all();
  }

 private:
  bool due_now() const noexcept { return wm_.combined() >= next_fire_; }  // fire() has work
  using base::stats_;
  using base::wm_;
  // One record per side inline: most (slice, key) cells hold few records, and a heap
  // list per cell costs an allocation per record (bench/join_bench.cpp).
  struct cell {
    absl::InlinedVector<join_entry<A>, 1> left;
    absl::InlinedVector<join_entry<B>, 1> right;
  };
  using slice_table = absl::flat_hash_map<hashed_key<K>, cell, hashed_key_hash, hashed_key_eq>;

  template <class List>
  static void fail_all(List& v) noexcept {
    for (auto& e : v)
      if (e.ack) e.ack->fail();
  }

  template <join_side S, class V, class Out, class Late>
  void push(std::size_t input, const K& key, std::size_t hash, record<V>&& r, steady_time now, Out& out,
            Late& late) {
    if (keep<S>(input, key, hash, std::move(r), now, late)) fire(out);
  }

  // push without the firing: stores r and observes its time (true), or rejects it as
  // late (false: push fires nothing then either).
  template <join_side S, class V, class Late>
  bool keep(std::size_t input, const K& key, std::size_t hash, record<V>&& r, steady_time now, Late& late) {
    const std::int64_t t = ns_count(r.time);
    const bool adv = advances_progress(r);
    if (!(t >= cached_lo_ && t < cached_hi_)) locate(t);
    if (cached_last_end_ <= wm_.combined()) {  // every window of t has fired
      this->template reject<S>(input, std::move(r), now, late);
      return false;
    }
    if (!cached_tab_) {
      auto [it, fresh] = slices_.try_emplace(cached_j_);
      cached_tab_ = &it->second;
      if (fresh) {
        // Windows that ended before this slice existed never see it (their turn passed).
        fired_k_ = std::max(fired_k_, g_.k_passed(wm_.combined()));
        next_fire_ = next_fire_end();
      }
    }
    cell& c = (*cached_tab_)[hashed_key<K>{key, hash}];
    if constexpr (S == join_side::left) c.left.push_back({t, std::move(r.value), std::move(r.ack)});
    else c.right.push_back({t, std::move(r.value), std::move(r.ack)});
    stats_.add_entry();
    wm_.observe(S, input, adv ? r.time : event_time_min, now);
    return true;
  }

  // Caches t's slice: its index, bounds (ns), the end of its last window, and its table
  // by pointer once made (map nodes stay put, also when the state object is moved). No
  // division per record while records stay in one slice.
  void locate(std::int64_t t) noexcept {
    cached_j_ = g_.slice_of(t);
    cached_lo_ = ns_count(clamp_time(wide(cached_j_) * g_.slice));
    cached_hi_ = ns_count(clamp_time(wide(cached_lo_) + g_.slice));
    if (cached_lo_ > t) cached_lo_ = t;  // clamped at -infinity: keep the cache sound
    cached_last_end_ = g_.end(g_.k_last(cached_j_));
    auto it = slices_.find(cached_j_);
    cached_tab_ = it == slices_.end() ? nullptr : &it->second;
  }

  // End of the next window to fire: the first after fired_k_ of the oldest slice.
  event_time next_fire_end() const noexcept {
    if (slices_.empty()) return event_time_max;
    return g_.end(std::max(fired_k_ + 1, g_.k_first(slices_.begin()->first)));
  }

  template <class Out>
  void advance(Out& out) {
    fire(out);
  }

  template <class Out>
  void fire(Out& out) {
    const event_time w = wm_.combined();
    if (w < next_fire_) return;
    while (!slices_.empty()) {
      const wide k = std::max(fired_k_ + 1, g_.k_first(slices_.begin()->first));
      if (g_.end(k) > w) break;
      emit_window(k, out);
      fired_k_ = k;
      while (!slices_.empty() && g_.k_last(slices_.begin()->first) <= fired_k_) {
        for (const auto& [hk, c] : slices_.begin()->second) stats_.entries -= c.left.size() + c.right.size();
        if (cached_tab_ == &slices_.begin()->second) cached_tab_ = nullptr;
        slices_.erase(slices_.begin());
      }
    }
    fired_k_ = std::max(fired_k_, g_.k_passed(w));  // passed windows without records never fire
    next_fire_ = next_fire_end();
  }

  template <class Out>
  void emit_window(wide k, Out& out) {
    const event_time e = g_.end(k);
    const event_time t = e == event_time_min ? e : e - std::chrono::nanoseconds{1};
    if (g_.slide == g_.size) {  // tumbling: window k is slice k
      auto it = slices_.find(std::int64_t(k));
      if (it == slices_.end()) return;
      for (const auto& [hk, c] : it->second) emit_key(hk.key, c.left, c.right, t, out);
      return;
    }
    struct gathered {
      std::vector<const join_entry<A>*> left;
      std::vector<const join_entry<B>*> right;
    };
    absl::flat_hash_map<hashed_key<K>, gathered, hashed_key_hash, hashed_key_eq> keys;
    for (auto it = slices_.lower_bound(std::int64_t(g_.first_slice(k)));
         it != slices_.end() && it->first < g_.end_slice(k); ++it)
      for (const auto& [hk, c] : it->second) {
        auto& gk = keys[hk];
        for (const auto& x : c.left) gk.left.push_back(&x);
        for (const auto& x : c.right) gk.right.push_back(&x);
      }
    for (const auto& [hk, gk] : keys) emit_key(hk.key, gk.left, gk.right, t, out);
  }

  template <class X>
  static const X& deref(const X& x) noexcept { return x; }
  template <class X>
  static const X& deref(const X* x) noexcept { return *x; }

  template <class RA, class RB, class Out>
  void emit_key(const K& key, const RA& as, const RB& bs, event_time t, Out& out) {
    for (const auto& ax : as) {
      const auto& a = deref(ax);
      if (bs.empty()) {
        if constexpr (Out::outer) {
          ++stats_.results;
          out.left_only(key, a.value, t, a.ack);
        }
        continue;
      }
      for (const auto& bx : bs) {
        const auto& b = deref(bx);
        ++stats_.results;
        out.pair(key, a.value, b.value, t, join_two_acks(a.ack, b.ack));
      }
    }
  }

  slice_grid g_;
  std::map<std::int64_t, slice_table> slices_;
  slice_table* cached_tab_ = nullptr;  // see locate()
  std::int64_t cached_j_ = 0, cached_lo_ = 0, cached_hi_ = 0;  // empty range: locate() first
  event_time cached_last_end_ = event_time_min;
  event_time next_fire_ = event_time_max;  // W below it: nothing to fire
  wide fired_k_ = wide(std::numeric_limits<std::int64_t>::min()) * 2;
};

}  // namespace detail

/// See detail::join_watermarks.
using join_watermarks = detail::join_watermarks;
/// See detail::interval_join_state and the banner.
template <class K, class A, class B>
using interval_join_state = detail::interval_join_state<K, A, B>;
/// See detail::window_join_state and the banner.
template <class K, class A, class B, class Assigner>
using window_join_state = detail::window_join_state<K, A, B, Assigner>;

}  // namespace rill

// rill/operators/join.hpp — joins of two keyed streams: the interval join and the window
// join (docs/design.md "Joins").
//
// Defines:
//   rill::join_options   (<rill/operators/join_options.hpp>) max out-of-order delay, idle
//       timeout, what a stop does to state
//   rill::join_stream<Spec, K, A, KeyA, B, KeyB, ...>   what
//       `a.key_by(ka).interval_join(b.key_by(kb), lower, upper, options)` and
//       `a.key_by(ka).window_join(b.key_by(kb), assigner, options)` return: a join waiting
//       for its result function (.inner(f), .left(f)), its name and late side outputs
//
// Example (compiled by tests/banner_examples.py, its output checked by
// tests/operators/banner_examples_test.cpp; bids joined with the auction opened at most
// 5 s before them):
//   struct bid { int auction; int price; };
//   struct auction { int id; std::string item; };
//   std::vector<rill::record<bid>> bids{{{1, 10}, rill::event_time{2s}}, {{2, 7}, rill::event_time{9s}}};
//   std::vector<rill::record<auction>> auctions{{{1, "lamp"}, rill::event_time{1s}}};
//   rill::job j = rill::from(rill::vector_source<bid>{bids}, "bids")
//       .key_by([](const bid& b) { return b.auction; })
//       .interval_join(rill::from(rill::vector_source<auction>{auctions}, "auctions")
//                          .key_by([](const auction& a) { return a.id; }),
//                      -5s, 0s, {.max_delay = 1s})
//       .name("bids_x_auctions")
//       .inner([](const bid& b, const auction& a) { return a.item + ":" + std::to_string(b.price); })
//       .sink([](std::string&& s) { /* "lamp:10" only: auction 2 never opened */ });
//   rill::runtime{}.run(j);
//
// Shape (Flink's `a.keyBy(..).intervalJoin(b.keyBy(..)).between(lower, upper).process(f)`
// and `a.join(b).where(..).equalTo(..).window(..).apply(f)`, with the keys given by the
// two key_by calls):
//   a.key_by(ka).interval_join(b.key_by(kb), lower, upper, options)   bounds inclusive
//   a.key_by(ka).window_join(b.key_by(kb), rill::tumbling{..} | rill::sliding{..}, options)
//   then optionally .name(s), .late_left(f), .late_right(f), and one of
//   .inner(f)   R f(const A&, const B&) or R f(const K&, const A&, const B&)
//   .inner()    std::pair<A, B>
//   .left(f)    window join only: R f(const A&, const B*) or R f(const K&, const A&, const B*),
//               b == nullptr for a left record with no right record of its key in the window
//   .left()     window join only: std::pair<A, std::optional<B>>
//   each returning rill::stream<R>, on the key's worker.
//
// Rules (docs/design.md "Joins"):
//   - both key_by calls must give the same key type K (checked at compile time) and use
//     the same hash (the default rill::default_hash<K> does): key_by routes both sides by
//     mix(hash(key)) % workers, so matching records meet on one worker;
//   - each side has its own watermark W_left, W_right (rill::watermark_tracker over that
//     side's inputs, options.max_delay and idle_timeout); the join's watermark W, sent
//     downstream, is the minimum over the active inputs of both sides (an idle side does
//     not hold it back); E_side = max(W_side, W);
//   - interval join: left a matches right b when a.t + lower <= b.t <= a.t + upper
//     (Flink's `between`; lower <= upper, either may be negative). A pair is emitted as
//     soon as its second record arrives, with time max(a.t, b.t) (Flink). A left record
//     is kept while E_right <= a.t + upper, a right one while E_left <= b.t - lower, so
//     state is bounded by the bounds, the delay and the gap between the sides'
//     watermarks, not by the stream. A record is late when t < E_side at its arrival:
//     partners it could have had may already be gone. Inner join only (as Flink's);
//   - window join: a and b of one key match when they are in the same tumbling or
//     sliding window (a pair per window they share: a sliding window join emits a pair
//     once in each common window, as Flink's). A window fires once W >= its end and emits
//     its pairs (left outer: and its unmatched left records, Kafka Streams' leftJoin) with
//     time end - 1 ns. Records are kept until their last window fired. A record is late
//     when every window it is in has end <= W (a record late for some sliding windows
//     joins the others only);
//   - late records go to that side's late output (.late_left, .late_right) and the stage's
//     `late` counter, and change no state;
//   - ack tokens (at-least-once, <rill/core/record.hpp>): a pair carries the tokens of both
//     its records (an ack_group when both have distinct ones); a stored record keeps its
//     token until it is dropped from state;
//   - a clean end of every input of both sides raises W to +infinity: every window fires
//     and all state is released. A stop with stop_policy::discard (default) drops the
//     state unemitted, fails its tokens (a Kafka source re-reads it after a restart) and
//     counts the dropped records in `discarded`; stop_policy::fire ends as a clean end.
//
// Bounded output (docs/design.md "Bounded emission"): a call of a join instance that may
// emit many results runs on its fiber (<rill/operators/resumable.hpp>) and stops before a
// result when downstream is not ready, continuing at the next pair on a later loop turn;
// inputs of both sides that arrive meanwhile are held in arrival order. A record that
// gives at most 8 results, after downstream's ready() answered true, runs on the loop's
// stack instead (no stack switch): downstream gets at most 8 results per ready() that
// answered true. A key with thousands of records per side (millions of pairs) costs no
// memory beyond the exchanges after the join.
//
// Run report (run_report::stage(name), default name "join"): in = records of both
// sides, out = results, late, discarded, peak_state = most records stored at once (sum of
// the per-worker peaks).
//
// Thread safety: building is single-threaded; each instance runs on its worker and calls
// the user functions (copied once per worker) there. Errors: bad options throw
// rill::config_error from interval_join/window_join ("join.lower", "join.max_delay",
// "join.idle_timeout", "join.on_stop", and the assigner's "window.size", "window.slide");
// an exception from a user function stops the run (rethrown by runtime::run).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rill/core/error.hpp"
#include "rill/core/runtime.hpp"
#include "rill/core/stage.hpp"
#include "rill/operators/join_options.hpp"
#include "rill/operators/join_state.hpp"
#include "rill/operators/resumable.hpp"
#include "rill/operators/stream.hpp"
#include "rill/operators/window.hpp"

namespace rill {

namespace detail {

/// The bounds of an interval join, ns, inclusive.
struct interval_bounds {
  std::chrono::nanoseconds lower, upper;
};

template <class Spec, class K, class A, class B>
struct join_state_of {
  using type = window_join_state<K, A, B, Spec>;
  static type make(const Spec& s, const join_options& o, std::size_t nl, std::size_t nr, steady_time now) {
    return type(s, o.max_delay, o.idle_timeout, nl, nr, now);
  }
};
template <class K, class A, class B>
struct join_state_of<interval_bounds, K, A, B> {
  using type = interval_join_state<K, A, B>;
  static type make(const interval_bounds& s, const join_options& o, std::size_t nl, std::size_t nr,
                   steady_time now) {
    return type(s.lower, s.upper, o.max_delay, o.idle_timeout, nl, nr, now);
  }
};

/// Calls the user's result function in either accepted form (with or without the key).
template <class F, class K, class A, class BArg>
decltype(auto) call_join_fn(F& f, const K& k, const A& a, BArg&& b) {
  if constexpr (std::is_invocable_v<F&, const K&, const A&, BArg>) return f(k, a, std::forward<BArg>(b));
  else return f(a, std::forward<BArg>(b));
}

/// One input of a join instance, run now or held while the instance is suspended: a left
/// record (a), a right record (b), a progress marker or end of input `in` of side `s`, a
/// tick (now), a firing (what a marker observed on the loop's stack made due).
template <class A, class B>
struct join_call {
  enum class kind : std::uint8_t { left, right, progress, end, tick, fire } k;
  join_side s = join_side::left;
  std::size_t in = 0;
  event_time t{};
  steady_time now{};
  std::optional<record<keyed<A>>> a;
  std::optional<record<keyed<B>>> b;
};

/// One join instance on one worker: both sides' inputs lead here (left_in, right_in).
/// Output is bounded by downstream capacity: a call that may emit more than
/// `loop_results` results, or any while downstream is not ready, runs on the instance's
/// fiber and stops before a result when downstream is not ready, continuing on a later
/// loop turn at the next pair (<rill/operators/resumable.hpp>); inputs of either side
/// that arrive meanwhile are held in arrival order. The rest runs on the loop's stack
/// (take(), side_in::on_progress). Downstream gets at most `loop_results` (8) results per
/// ready() that answered true. All members on the instance's worker.
///
/// Policies (rill/core/record.hpp): side inputs of policies PA and PB; the state holds
/// every record in acked form (rill::to_acked: an unacked side's records have no token);
/// results are record<R, join_policy_t<PA, PB>> (acked when either side is).
template <class Spec, class K, class A, class KeyA, class B, class KeyB, class F, bool Outer, class R,
          class LateL, class LateR, class PA = acked, class PB = acked>
struct join_stage final
    : resumable_stage<join_stage<Spec, K, A, KeyA, B, KeyB, F, Outer, R, LateL, LateR, PA, PB>, join_call<A, B>> {
  using maker = join_state_of<Spec, K, A, B>;
  using state_t = typename maker::type;
  using call = join_call<A, B>;
  using PO = join_policy_t<PA, PB>;

  template <join_side S, class V, class KeyFn, class PS>
  struct side_in final : stage_in<keyed<V>, PS> {
    join_stage* owner = nullptr;
    KeyFn key;
    explicit side_in(KeyFn k) : key(std::move(k)) {}
    // A record that emits nothing, or a few results that downstream takes now, runs on
    // the loop's stack (join_stage::take).
    void on_record(std::size_t in, record<keyed<V>, PS>&& r) override {
      owner->c->add(owner->c->in);
      owner->template take<S, V>(key, in, to_acked(std::move(r)));
    }
    // A marker that makes nothing due is taken on the loop's stack (the exchange sends
    // one with nearly every record: its frontier).
    void on_progress(std::size_t in, event_time t) override {
      if (!owner->busy()) {
        owner->st->observe(S, in, t, owner->now());
        if (!owner->st->due()) {
          owner->st->advance_quiet();
          return owner->advance();
        }
        return owner->submit({call::kind::fire, S, in, {}, {}, std::nullopt, std::nullopt});
      }
      owner->submit({call::kind::progress, S, in, t, {}, std::nullopt, std::nullopt});
    }
    void on_end(std::size_t in) override {
      owner->submit({call::kind::end, S, in, {}, {}, std::nullopt, std::nullopt});
    }
    /// Pushes downstream buffers on; false while the join is busy (suspended or holding).
    bool on_flush() override {
      const bool d = owner->down->on_flush();
      return d && !owner->busy();
    }
    /// False while the join is busy, else downstream's answer.
    bool ready() override { return !owner->busy() && owner->down->ready(); }
  };

  // What the state machine emits into: on the fiber (Gated: gate() before each result),
  // or on the loop's stack (the caller made sure downstream may take them).
  template <bool Gated>
  struct emit_to {
    static constexpr bool outer = Outer;
    join_stage* s;
    void pair(const K& k, const A& a, const B& b, event_time t, std::shared_ptr<ack_token>&& ack) {
      s->c->add(s->c->out);
      if constexpr (Gated) s->gate();
      if constexpr (Outer)
        s->down->on_record(0, make_record<PO>(R(call_join_fn(s->fn, k, a, &b)), t, std::nullopt, std::move(ack)));
      else
        s->down->on_record(0, make_record<PO>(R(call_join_fn(s->fn, k, a, b)), t, std::nullopt, std::move(ack)));
    }
    void left_only(const K& k, const A& a, event_time t, const std::shared_ptr<ack_token>& ack) {
      if constexpr (Outer) {
        s->c->add(s->c->out);
        if constexpr (Gated) s->gate();
        s->down->on_record(0, make_record<PO>(R(call_join_fn(s->fn, k, a, static_cast<const B*>(nullptr))), t,
                                              std::nullopt, ack));
      }
    }
  };
  using emit = emit_to<true>;

  Spec spec;
  join_options opts;
  F fn;
  LateL late_l;
  LateR late_r;
  runtime* rt;
  stage_counters* c;
  stage_in<R, PO>* down = nullptr;
  side_in<join_side::left, A, KeyA, PA> left_in;
  side_in<join_side::right, B, KeyB, PB> right_in;
  std::optional<std::size_t> inputs[2];
  std::optional<state_t> st;
  std::size_t inputs_left = 0;
  event_time sent = event_time_min;

  join_stage(Spec sp, join_options o, F f, LateL ll, LateR lr, KeyA ka, KeyB kb, runtime* r, stage_counters* cs,
             worker* w)
      : resumable_stage<join_stage, call>(w), spec(sp), opts(o), fn(std::move(f)), late_l(std::move(ll)),
        late_r(std::move(lr)), rt(r), c(cs), left_in(std::move(ka)), right_in(std::move(kb)) {
    left_in.owner = this;
    right_in.owner = this;
  }
  ~join_stage() { this->unwind(); }

  /// Build time: side `s` has `n` inputs; the state is made once both sides are known.
  void bind(join_side s, std::size_t n) {
    inputs[std::size_t(s)] = n;
    inputs_left += n;
    if (inputs[0] && inputs[1]) st.emplace(maker::make(spec, opts, *inputs[0], *inputs[1], now()));
  }
  steady_time now() const {
    return opts.idle_timeout.count() > 0 ? std::chrono::steady_clock::now() : steady_time{};
  }
  void advance() {
    c->raise(c->peak_state, st->peak_state_entries());
    const auto w = st->watermark();
    if (w > sent) {
      sent = w;
      down->on_progress(0, w);
    }
  }
  /// The idle-input ticker; skipped while busy (the next tick does its work).
  void tick(steady_time t) {
    if (!this->busy()) this->submit({call::kind::tick, join_side::left, 0, {}, t, std::nullopt, std::nullopt});
  }

  // resumable_stage's hooks (on this worker).
  void run_call(call& k) {
    switch (k.k) {
      case call::kind::left: push<join_side::left>(left_in.key, k.in, std::move(*k.a)); break;
      case call::kind::right: push<join_side::right>(right_in.key, k.in, std::move(*k.b)); break;
      case call::kind::progress: progress(k.s, k.in, k.t); break;
      case call::kind::end: end(k.s, k.in); break;
      case call::kind::tick: {
        emit e{this};
        st->tick(k.now, e);
        advance();
        break;
      }
      case call::kind::fire: {
        emit e{this};
        st->advance_due(e);
        advance();
        break;
      }
    }
  }
  bool down_ready() { return down->ready(); }
  bool down_flush() { return down->on_flush(); }

  static constexpr bool interval = std::is_same_v<Spec, interval_bounds>;
  /// Results one record may give downstream on the loop's stack (see take()).
  static constexpr std::size_t loop_results = [] {
    if constexpr (interval) return state_t::try_push_max;
    else return std::size_t{0};
  }();

  /// A record of side S on input `in`. While the stage is not busy, it runs on the loop's
  /// stack when it gives downstream at most `loop_results` results and downstream's
  /// ready() answered true just before: a late record (it goes to its late output), a
  /// window-join record (it is stored: results come when a window is due, and a record
  /// that makes one due hands the firing to the fiber), an interval-join record with no
  /// partner in the other side's state, or, when down->ready(), with at most
  /// loop_results (8) partners. Every other record runs on the fiber (gate() before each
  /// result), and a busy stage holds it behind the inputs it holds. So downstream gets
  /// at most 8 results per ready() that answered true, and a record that emits runs
  /// before the inputs after it. The key function runs once per record, twice for an
  /// interval-join record with partners that goes to the fiber.
  template <join_side S, class V, class KeyFn>
  void take(KeyFn& key, std::size_t in, record<keyed<V>>&& r) {
    if (this->busy()) return this->submit(record_call<S>(in, std::move(r)));
    const K k = key(static_cast<const V&>(r.value.value));
    const std::size_t h = r.value.hash;
    record<V> rec{std::move(r.value.value), r.time, r.position, std::move(r.ack)};
    const auto late_before = st->late();
    if constexpr (interval) {
      emit_to<false> e{this};
      const std::size_t most = down->ready() ? loop_results : 0;
      bool done;
      if constexpr (S == join_side::left) done = st->try_push_left(in, k, h, rec, now(), most, e, late_fn<S>(k));
      else done = st->try_push_right(in, k, h, rec, now(), most, e, late_fn<S>(k));
      if (!done)
        return this->submit(record_call<S>(
            in, record<keyed<V>>{keyed<V>{std::move(rec.value), h}, rec.time, rec.position, std::move(rec.ack)}));
      count_late(late_before);
    } else {
      bool kept;
      if constexpr (S == join_side::left) kept = st->keep_left(in, k, h, std::move(rec), now(), late_fn<S>(k));
      else kept = st->keep_right(in, k, h, std::move(rec), now(), late_fn<S>(k));
      count_late(late_before);
      if (kept && st->due()) return this->submit({call::kind::fire, S, in, {}, {}, std::nullopt, std::nullopt});
    }
    advance();
  }

 private:
  template <join_side S, class V>
  static call record_call(std::size_t in, record<keyed<V>>&& r) {
    if constexpr (S == join_side::left) return {call::kind::left, S, in, {}, {}, std::move(r), std::nullopt};
    else return {call::kind::right, S, in, {}, {}, std::nullopt, std::move(r)};
  }
  // What a late record of side S (key k) goes to: the side's late output, if any
  // (without one, a lambda that captures nothing: it only drops the record).
  template <join_side S>
  auto late_fn([[maybe_unused]] const K& k) {
    using V = std::conditional_t<S == join_side::left, A, B>;
    if constexpr (std::is_same_v<std::conditional_t<S == join_side::left, LateL, LateR>, std::nullptr_t>) {
      return [](record<V>&&) {};
    } else {
      return [this, &k](record<V>&& lr) {
        if constexpr (S == join_side::left) late_l(std::move(lr), k);
        else late_r(std::move(lr), k);
      };
    }
  }
  void count_late(std::uint64_t before) {
    if (st->late() != before) c->add(c->late, st->late() - before);
  }
  template <join_side S, class V, class KeyFn>
  void push(KeyFn& key, std::size_t in, record<keyed<V>>&& r) {
    const K k = key(static_cast<const V&>(r.value.value));
    const std::size_t h = r.value.hash;
    record<V> rec{std::move(r.value.value), r.time, r.position, std::move(r.ack)};
    emit e{this};
    const auto late_before = st->late();
    if constexpr (S == join_side::left) st->push_left(in, k, h, std::move(rec), now(), e, late_fn<S>(k));
    else st->push_right(in, k, h, std::move(rec), now(), e, late_fn<S>(k));
    count_late(late_before);
    advance();
  }
  void progress(join_side s, std::size_t in, event_time t) {
    emit e{this};
    st->progress(s, in, t, now(), e);
    advance();
  }
  // As keyed windows: an input that ended by a stop has not sent everything, so with
  // stop_policy::discard the state is dropped instead of treating the input as +infinity.
  void end(join_side s, std::size_t in) {
    emit e{this};
    if (rt && rt->stop_requested() && opts.on_stop == join_options::stop_policy::discard) {
      c->add(c->discarded, st->discard());
    } else {
      st->end(s, in, e);
      advance();
    }
    if (--inputs_left == 0) down->on_end(0);
  }
};

}  // namespace detail

/// A join of two keyed streams waiting for its result function (see the banner). Made by
/// keyed_stream::interval_join and keyed_stream::window_join; each call returns a new
/// object (use it as an rvalue, as every builder of the DSL).
template <class Spec, class K, class A, class KeyA, class B, class KeyB, class LateL = std::nullptr_t,
          class LateR = std::nullptr_t, class PA = acked, class PB = acked>
class join_stream {
  static constexpr bool interval = std::is_same_v<Spec, detail::interval_bounds>;

 public:
  using key_type = K;
  /// The results' policy: acked when either side is (rill::join_policy_t).
  using record_policy = join_policy_t<PA, PB>;
  join_stream(stream<detail::keyed<A>, PA> a, KeyA ka, stream<detail::keyed<B>, PB> b, KeyB kb, Spec spec, join_options o,
              LateL ll, LateR lr, std::string name)
      : a_(std::move(a)), b_(std::move(b)), ka_(std::move(ka)), kb_(std::move(kb)), spec_(spec), opts_(o),
        late_l_(std::move(ll)), late_r_(std::move(lr)), name_(std::move(name)) {}

  /// Names the stage in the run report; default "join".
  join_stream name(std::string n) && {
    name_ = std::move(n);
    return std::move(*this);
  }
  /// Late left records: void f(rill::record<A>&&, const K& key), on the worker.
  template <class F>
  auto late_left(F f) && {
    static_assert(std::is_invocable_v<F&, record<A>&&, const K&>,
                  "rill::join_stream::late_left(f): accepted is void f(rill::record<A>&&, const K& key)");
    return join_stream<Spec, K, A, KeyA, B, KeyB, F, LateR, PA, PB>(std::move(a_), std::move(ka_), std::move(b_),
                                                           std::move(kb_), spec_, opts_, std::move(f),
                                                           std::move(late_r_), std::move(name_));
  }
  /// Late right records: void f(rill::record<B>&&, const K& key), on the worker.
  template <class F>
  auto late_right(F f) && {
    static_assert(std::is_invocable_v<F&, record<B>&&, const K&>,
                  "rill::join_stream::late_right(f): accepted is void f(rill::record<B>&&, const K& key)");
    return join_stream<Spec, K, A, KeyA, B, KeyB, LateL, F, PA, PB>(std::move(a_), std::move(ka_), std::move(b_),
                                                           std::move(kb_), spec_, opts_, std::move(late_l_),
                                                           std::move(f), std::move(name_));
  }

  /// Inner join: one result R = f(a, b) per matching pair (see the banner for when).
  /// Accepted: R f(const A&, const B&) or R f(const K&, const A&, const B&), R not void.
  template <class F>
  auto inner(F f) && {
    static_assert(std::is_invocable_v<F&, const A&, const B&> || std::is_invocable_v<F&, const K&, const A&, const B&>,
                  "rill::join_stream::inner(f): accepted are R f(const A&, const B&) and "
                  "R f(const K&, const A&, const B&)");
    using R = std::remove_cvref_t<decltype(detail::call_join_fn(f, std::declval<const K&>(),
                                                                std::declval<const A&>(),
                                                                std::declval<const B&>()))>;
    static_assert(!std::is_void_v<R>, "rill::join_stream::inner(f): f must return a value");
    return std::move(*this).template build<false, R>(std::move(f));
  }
  /// Inner join giving every pair as std::pair<A, B>.
  auto inner() && {
    return std::move(*this).inner([](const A& a, const B& b) { return std::pair<A, B>{a, b}; });
  }
  /// Left outer window join: f(a, &b) per pair, f(a, nullptr) for each left record of a
  /// key with no right record in the window. Accepted: R f(const A&, const B*) or
  /// R f(const K&, const A&, const B*). Not for interval joins (Flink's are inner only).
  template <class F>
  auto left(F f) && {
    static_assert(!interval, "rill::join_stream::left(f): the interval join is an inner join only (as "
                             "Flink's intervalJoin); use window_join for a left outer join");
    static_assert(std::is_invocable_v<F&, const A&, const B*> || std::is_invocable_v<F&, const K&, const A&, const B*>,
                  "rill::join_stream::left(f): accepted are R f(const A&, const B*) and "
                  "R f(const K&, const A&, const B*) (b == nullptr: no right record)");
    using R = std::remove_cvref_t<decltype(detail::call_join_fn(f, std::declval<const K&>(),
                                                                std::declval<const A&>(),
                                                                std::declval<const B*>()))>;
    static_assert(!std::is_void_v<R>, "rill::join_stream::left(f): f must return a value");
    return std::move(*this).template build<true, R>(std::move(f));
  }
  /// Left outer window join as std::pair<A, std::optional<B>> (nullopt: no right record).
  auto left() && {
    return std::move(*this).left([](const A& a, const B* b) {
      return std::pair<A, std::optional<B>>{a, b ? std::optional<B>(*b) : std::nullopt};
    });
  }

 private:
  template <bool Outer, class R, class F>
  stream<R, record_policy> build(F f) && {
    using stage = detail::join_stage<Spec, K, A, KeyA, B, KeyB, F, Outer, R, LateL, LateR, PA, PB>;
    return stream<R, record_policy>([a = std::move(a_).attach(), b = std::move(b_).attach(), ka = ka_, kb = kb_, spec = spec_,
                      o = opts_, ll = late_l_, lr = late_r_, name = name_,
                      f = std::move(f)](job_builder& jb, stage_factory<R, record_policy> down) {
      const auto idx = jb.metrics().add_stage(name);
      // One instance per worker, reached by both sides' exchanges (each side's key_by
      // builds its consumers on every worker, in either order).
      auto instances = std::make_shared<std::vector<stage*>>(jb.workers(), nullptr);
      auto instance = [=, &jb](build_context& ctx) -> stage* {
        stage*& s = (*instances)[ctx.worker_id];
        if (!s) {
          s = ctx.make<stage>(spec, o, f, ll, lr, ka, kb, &jb.rt(), &ctx.metrics->at(idx, ctx.worker_id), ctx.w);
          auto sub = ctx;
          sub.inputs = 1;
          s->down = down(sub);
          if (o.idle_timeout.count() > 0) ctx.add_ticker([s](steady_time now) { s->tick(now); });
        }
        return s;
      };
      a(jb, [instance](build_context& ctx) -> stage_in<detail::keyed<A>, PA>* {
        stage* s = instance(ctx);
        s->bind(join_side::left, ctx.inputs);
        return &s->left_in;
      });
      b(jb, [instance](build_context& ctx) -> stage_in<detail::keyed<B>, PB>* {
        stage* s = instance(ctx);
        s->bind(join_side::right, ctx.inputs);
        return &s->right_in;
      });
    });
  }

  stream<detail::keyed<A>, PA> a_;
  stream<detail::keyed<B>, PB> b_;
  KeyA ka_;
  KeyB kb_;
  Spec spec_;
  join_options opts_;
  LateL late_l_;
  LateR late_r_;
  std::string name_;
};

template <class K, class T, class KeyFn, class Hash, class P>
template <class K2, class B, class KeyB, class HashB, class P2>
auto keyed_stream<K, T, KeyFn, Hash, P>::interval_join(keyed_stream<K2, B, KeyB, HashB, P2>&& other,
                                                    std::chrono::nanoseconds lower, std::chrono::nanoseconds upper,
                                                    join_options o) && {
  static_assert(std::is_same_v<K, K2>, "rill::keyed_stream::interval_join: both sides must have the same key "
                                       "type K (their key_by functions return the same type)");
  static_assert(std::is_same_v<Hash, HashB>, "rill::keyed_stream::interval_join: both sides must be keyed with "
                                             "the same hash type, so that equal keys meet on one worker");
  o.validate();
  if (lower > upper) throw config_error("join.lower", "join.lower must be <= join.upper");
  return join_stream<detail::interval_bounds, K, T, KeyFn, B, KeyB, std::nullptr_t, std::nullptr_t, P, P2>(
      std::move(s_), std::move(key_), std::move(other.s_), std::move(other.key_),
      detail::interval_bounds{lower, upper}, o, nullptr, nullptr, "join");
}

template <class K, class T, class KeyFn, class Hash, class P>
template <class K2, class B, class KeyB, class HashB, class P2, class Assigner>
auto keyed_stream<K, T, KeyFn, Hash, P>::window_join(keyed_stream<K2, B, KeyB, HashB, P2>&& other, Assigner a,
                                                  join_options o) && {
  static_assert(std::is_same_v<K, K2>, "rill::keyed_stream::window_join: both sides must have the same key "
                                       "type K (their key_by functions return the same type)");
  static_assert(std::is_same_v<Hash, HashB>, "rill::keyed_stream::window_join: both sides must be keyed with "
                                             "the same hash type, so that equal keys meet on one worker");
  static_assert(std::is_same_v<Assigner, tumbling> || std::is_same_v<Assigner, sliding>,
                "rill::keyed_stream::window_join(other, a): a must be rill::tumbling or rill::sliding");
  a.validate();
  o.validate();
  return join_stream<Assigner, K, T, KeyFn, B, KeyB, std::nullptr_t, std::nullptr_t, P, P2>(std::move(s_), std::move(key_), std::move(other.s_),
                                                     std::move(other.key_), a, o, nullptr, nullptr, "join");
}

}  // namespace rill

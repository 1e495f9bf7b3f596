// rill/operators/keyed_stream.hpp — the DSL after key_by: keyed streams, their windows,
// and incremental aggregation.
//
// Defines:
//   rill::keyed_stream<K, T, KeyFn>   what `stream<T>::key_by(f)` returns: records on the
//       worker that owns their key, the key type K kept
//   rill::windowed_stream<...>         `keyed.window(assigner, options)`: a keyed stream
//       with an event-time window assigner, waiting for its aggregation
//
// Example (compiled by tests/banner_examples.py; graph: vector_source -> key_by(x % 10)
// -> tumbling 10 s -> count -> sink):
//   using namespace std::chrono_literals;
//   std::vector<rill::record<int>> recs{{3, rill::event_time{3s}}, {14, rill::event_time{1s}}};
//   rill::job j = rill::from(rill::vector_source<int>{recs})
//       .key_by([](const int& x) { return x % 10; })
//       .window(rill::tumbling{10s}, {.max_delay = 2s})
//       .name("counts")
//       .count()
//       .sink([](rill::keyed_window_result<int, std::uint64_t>&& r) { /* key, start, end, value */ });
//   rill::runtime{}.run(j);
//
// Aggregations (each returns stream<keyed_window_result<K, R>>, one result per
// (key, window), emitted when the watermark passes the window's end; the rules are in
// <rill/operators/window.hpp> and <rill/operators/keyed_window.hpp>):
//   .aggregate(g)                  g a rill::aggregate_function<T> (merge needed for
//                                  sliding and session windows: rill::mergeable_aggregate)
//   .aggregate(init, add)          A init; void add(A&, const T&)           (tumbling only)
//   .aggregate(init, add, merge)   ... void merge(A&, const A&)             (any window)
//   .reduce(f)                     T f(const T&, const T&), associative; R = T
//   .count()                       R = std::uint64_t
//   .sum(f) .min(f) .max(f)        over f(const T&); R = f's type
//   .mean(f)                       R = double
// Late side output: `.late(f)` with void f(rill::record<T>&&, const K&, event_time start,
// event_time end) (nothing given: late records are only counted). `.name(s)` names the
// stage in the run report (default "window").
//
// Catch-up lanes: a record of a Kafka partition that moved to this process behind its
// watermark (rill::source_position::catching_up) is not late; its partition gets windows
// of its own on the partition's own event time until it caught up (docs/design.md "Kafka
// source"; counted in the stage's `catch_up`).
//
// Joins with another keyed stream of the same key type: .interval_join(other, lower,
// upper, options) and .window_join(other, assigner, options) (<rill/operators/join.hpp>).
//
// Operators other than window() on a keyed stream (map, filter, flat_map, window_sort,
// sink) act on the values, on the key's worker, and return a plain rill::stream.
//
// Firing is bounded by downstream capacity (docs/design.md "Bounded emission"): a window
// stops at its next key when the exchange after it is full and continues on a later loop
// turn (<rill/operators/resumable.hpp>); inputs that arrive meanwhile are held in order.
//
// Thread safety: building streams is single-threaded; each stage instance runs on its
// worker (docs/design.md "Runtime"). User functions are copied once per worker.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "rill/core/runtime.hpp"
#include "rill/core/stage.hpp"
#include "rill/operators/join_options.hpp"
#include "rill/operators/keyed_window.hpp"
#include "rill/operators/resumable.hpp"
#include "rill/operators/stream.hpp"
#include "rill/operators/window.hpp"

namespace rill {

namespace detail {

/// The late "side output" of the local stage of rill::two_phase_aggregate
/// (<rill/operators/two_phase.hpp>): a record whose window this stage already emitted
/// is emitted at once as a result of its own (the aggregate of that one record, for the
/// record's window), so the global stage after the exchange decides whether it is late.
struct late_as_partial {};

/// A keyed window's instance on one worker. Firing is bounded by downstream capacity:
/// every call that may emit runs on the stage's fiber and stops, at the window's next key,
/// when downstream is not ready (<rill/operators/resumable.hpp>); a record at or after the
/// watermark that makes no window due is folded on the loop's stack.
///
/// Policy P (rill/core/record.hpp): the aggregator keeps each window's ack token (null for
/// unacked input); results leave as record<output, P>.
template <class K, class T, class KeyFn, class Assigner, class Agg, class Late, class Hash, class P>
struct keyed_window_stage final
    : stage_in<keyed<T>, P>,
      resumable_stage<keyed_window_stage<K, T, KeyFn, Assigner, Agg, Late, Hash, P>, stage_call<keyed<T>, P>> {
  using aggregator = keyed_window_aggregator<K, T, Assigner, Agg, Hash>;
  using output = typename aggregator::output;
  using call = stage_call<keyed<T>, P>;
  aggregator agg;
  KeyFn key;
  Late late_fn;
  runtime* rt;
  stage_counters* c;
  named_op op;  // marks the stage for the stall detector on the loop's calls
  stage_in<output, P>* down = nullptr;
  std::size_t inputs_left;
  // Output progress (docs/design.md "Keyed windows"): `sent` is the watermark downstream
  // may be told (raised only when no window was due at it, after the results before it),
  // `told` what it was told. The loop-stack paths raise only `sent`, and on_flush tells
  // it (the exchange before this stage flushes it after every batch and after records it
  // delivered in place): one marker per batch instead of one per record. The fiber's
  // calls tell at once.
  event_time sent = event_time_min, told = event_time_min;

  // Catch-up lanes (docs/design.md "Kafka source"). A record of a partitioned source that
  // its source driver marked catching_up (its partition's time is behind progress already
  // sent: the partition was assigned here after a rebalance and is read again from its
  // committed offset) and that the stage's windows would drop as late opens a lane for
  // its partition: an aggregator of its own whose watermark is the partition's own time
  // (largest time seen - max_delay), as Kafka Streams keeps stream time per task. Every
  // later record of that partition goes to the lane, so no (key, window) is split between
  // the lane and the shared state. Once the lane's watermark reaches the stage's, the lane
  // follows the stage's watermark; it is dropped when it then holds no state. At most one
  // lane per partition takes records (others are retired: see lane_for); every input
  // ending ends every lane; a stop discards them too.
  struct lane {
    lane(std::int32_t p, const Assigner& a, const window_options& o, const Agg& g, const Hash& h)
        : partition(p), agg(a, o, g, 1, steady_time{}, h) {}  // built in place: not movable
    std::int32_t partition;
    aggregator agg;
    bool caught_up = false;
    bool retired = false;  // its partition was read again behind it: takes no more records
  };
  std::vector<std::unique_ptr<lane>> lanes;
  Assigner assigner;
  window_options lane_options;
  Agg agg_fn;
  Hash hash_fn;

  keyed_window_stage(Assigner a, window_options o, Agg g, std::size_t inputs, KeyFn k, Late l, Hash h, runtime* r,
                     stage_counters* cs, worker* w, named_op nop)
      : resumable_stage<keyed_window_stage, call>(w),
        agg(a, o, g, inputs, o.idle_timeout.count() > 0 ? std::chrono::steady_clock::now() : steady_time{}, h),
        key(std::move(k)), late_fn(std::move(l)), rt(r), c(cs), op(nop), inputs_left(inputs), assigner(a),
        lane_options(o), agg_fn(std::move(g)), hash_fn(std::move(h)) {
    lane_options.idle_timeout = std::chrono::nanoseconds{0};  // a lane's one input is its partition
  }
  ~keyed_window_stage() override { this->unwind(); }

  steady_time now() const {
    return agg.options().idle_timeout.count() > 0 ? std::chrono::steady_clock::now() : steady_time{};
  }
  auto on_result() {
    return [this](record<output>&& r) {
      c->add(c->out);
      this->gate();
      down->on_record(0, make_record<P>(std::move(r.value), r.time, r.position, std::move(r.ack)));
    };
  }
  void advance() {
    raise_sent();
    tell();
  }
  void raise_sent() {
    const auto w = agg.watermark();
    if (w > sent) {
      sent = w;
      if (w < event_time_max) c->watermark.store(w.time_since_epoch().count(), std::memory_order_relaxed);
    }
  }
  void tell() {
    if (sent > told) {
      told = sent;
      down->on_progress(0, sent);
    }
  }
  // Look-ahead: a record waits here until `lookahead` more have arrived, and its state
  // slot is prefetched on arrival, so the cache miss of a lookup into a table of many keys
  // overlaps the work on the records before it. A progress marker that arrives while
  // records wait is held too, in order: the exchange sends one before nearly every record
  // (the input's frontier grows with it), and applying it at once would empty the wait.
  // Everything is processed in arrival order, and everything waiting is processed before
  // an end, a flush or a tick goes on, so the results are those of processing each input
  // on arrival. The upstream is always key_by's exchange, which flushes this stage after
  // every batch it delivers and after records it handed over in place (exchange.hpp), so
  // nothing waits beyond the batch it came in.
  static constexpr std::size_t lookahead = 8;
  struct waiting {
    // A constructor of its own: emplace builds an entry in place (clang 14 has no
    // parenthesized aggregate initialisation).
    waiting(std::size_t i, record<keyed<T>, P>&& rec, event_time before)
        : in(i), r(std::move(rec)), progress_before(before) {}
    std::size_t in;
    record<keyed<T>, P> r;
    event_time progress_before;  // a held marker of input `in` (event_time_min: none)
  };
  std::array<std::optional<waiting>, lookahead> ring;
  std::size_t head = 0, count = 0;
  std::optional<std::pair<std::size_t, event_time>> held;  // a marker that arrived after the last record

  void on_record(std::size_t in, record<keyed<T>, P>&& r) override {
    operator_scope running{op.slot, op.name};
    agg.prefetch(r.value.hash, r.time);
    event_time before = event_time_min;
    if (held) {
      if (held->first == in) {
        before = held->second;
      } else {  // a marker of another input: it goes on before this record
        process_waiting();
        apply_progress(held->first, held->second);
      }
      held.reset();
    }
    if (count == lookahead) {
      auto& oldest = ring[head];
      run(std::move(*oldest));
      oldest.emplace(in, std::move(r), before);  // in place: no temporary to copy
      head = (head + 1) % lookahead;
      return;
    }
    ring[(head + count) % lookahead].emplace(in, std::move(r), before);
    ++count;
  }
  void run(waiting&& w) {
    if (w.progress_before != event_time_min) apply_progress(w.in, w.progress_before);
    process(w.in, std::move(w.r));
  }
  // Processes every waiting record and marker, in order.
  void process_waiting() {
    for (; count > 0; --count) {
      auto& w = ring[head];
      head = (head + 1) % lookahead;
      auto x = std::move(*w);
      w.reset();
      run(std::move(x));
    }
    if (held) {
      const auto [in, t] = *held;
      held.reset();
      apply_progress(in, t);
    }
  }
  // One record leaving the look-ahead: a record at or after the watermark that makes no
  // window due is folded on the loop's stack; the rest runs on the fiber.
  void process(std::size_t in, record<keyed<T>, P>&& r) {
    c->add(c->in);
    if (lanes.empty() && !this->busy() && r.time >= agg.watermark()) {  // folds without emitting
      const K k = key(static_cast<const T&>(r.value.value));
      agg.fold_on_time(in, k, r.value.hash, r.value.value, r.time, advances_progress(r), take_ack(r), now());
      if (!agg.due()) return raise_sent();
      return this->submit({call::kind::fire, 0, {}, {}, std::nullopt});
    }
    this->submit({call::kind::record, in, {}, {}, std::move(r)});
  }
  // A marker leaving the look-ahead: one that makes no window due is observed on the
  // loop's stack (the exchange sends one with nearly every record: its frontier).
  void apply_progress(std::size_t in, event_time t) {
    if (lanes.empty() && !this->busy()) {
      agg.observe(in, t, now());
      if (!agg.due()) return raise_sent();
      return this->submit({call::kind::fire, 0, {}, {}, std::nullopt});
    }
    this->submit({call::kind::progress, in, t, {}, std::nullopt});
  }
  void on_progress(std::size_t in, event_time t) override {
    operator_scope running{op.slot, op.name};
    if (count == 0 && !held) return apply_progress(in, t);
    if (held && held->first == in) {  // frontiers of one input only grow: keep the latest
      held->second = std::max(held->second, t);
      return;
    }
    if (held) process_waiting();  // a marker of another input is held: keep the order
    if (count == 0) return apply_progress(in, t);
    held.emplace(in, t);
  }
  void on_end(std::size_t in) override {
    operator_scope running{op.slot, op.name};
    process_waiting();
    this->submit({call::kind::end, in, {}, {}, std::nullopt});
  }
  /// Processes what waits in the look-ahead, tells downstream the watermark (`sent`),
  /// pushes downstream buffers on; false while busy (suspended or holding inputs).
  bool on_flush() override {
    {
      operator_scope running{op.slot, op.name};
      process_waiting();
    }
    tell();
    const bool d = down->on_flush();
    return d && !this->busy();
  }
  /// False while busy, else downstream's answer.
  bool ready() override { return !this->busy() && down->ready(); }
  /// The idle-input ticker; skipped while busy (the next tick does its work).
  void tick(steady_time t) {
    operator_scope running{op.slot, op.name};
    process_waiting();
    tell();
    if (!this->busy()) this->submit({call::kind::tick, 0, {}, t, std::nullopt});
  }

  // resumable_stage's hooks (on this worker).
  void run_call(call& k) {
    auto emit = on_result();
    switch (k.k) {
      case call::kind::record: {
        auto& r = *k.r;
        const K kk = key(static_cast<const T&>(r.value.value));
        lane* l = nullptr;
        if constexpr (carries_acks_v<P>) l = r.position ? lane_for(*r.position, r.time) : nullptr;
        aggregator& a = l ? l->agg : agg;
        const auto late_before = a.late();
        // push_value moves the token only when it folds the record in: a late record
        // keeps it, for the late side output (its input is done when that output is).
        auto ack = take_ack(r);
        a.push_value(l ? 0 : k.in, kk, r.value.hash, r.value.value, r.time, l ? !l->caught_up : advances_progress(r),
                     std::move(ack), l ? steady_time{} : now(), emit, [&](event_time s, event_time e) {
                       if constexpr (std::is_same_v<Late, late_as_partial>) {
                         // Downstream first learns the watermark this record is late at,
                         // so the global stage judges it at the same watermark.
                         raise_sent();
                         tell();
                         auto acc = agg_fn.init();
                         agg_fn.add(acc, static_cast<const T&>(r.value.value));
                         emit(record<output>{output{kk, s, e, agg_fn.result(acc)}, e - std::chrono::nanoseconds{1},
                                             std::nullopt, std::move(ack)});
                       } else if constexpr (!std::is_same_v<Late, std::nullptr_t>) {
                         call_widened(late_fn,
                                      make_record<P>(std::move(r.value.value), r.time, position_of(r), std::move(ack)),
                                      kk, s, e);
                       }
                     });
        if (a.late() != late_before) c->add(c->late, a.late() - late_before);
        if (l) {
          c->add(c->catch_up);
          if (!l->caught_up && l->agg.watermark() >= agg.watermark()) l->caught_up = true;
        }
        break;
      }
      case call::kind::progress: agg.progress(k.in, k.t, now(), emit); break;
      // An input that ends because of a stop has not sent everything: it must not count
      // as +infinity (that would fire windows on partial data), so with
      // stop_policy::discard the open windows are dropped instead, at each stopped
      // input's end.
      case call::kind::end:
        if (rt && rt->stop_requested() && agg.options().on_stop == window_options::stop_policy::discard) {
          c->add(c->discarded, agg.discard());
          for (auto& l : lanes) c->add(c->discarded, l->agg.discard());
          lanes.clear();
        } else {
          agg.end(k.in, emit);
        }
        break;
      case call::kind::tick: agg.tick(k.now, emit); break;
      case call::kind::fire: agg.fire(emit); break;
    }
    sync_lanes(emit);
    advance();
    if (k.k == call::kind::end && --inputs_left == 0) down->on_end(0);
  }
  // The lane of a record's partition: the existing one, or a new one when the record is
  // catching up and the shared windows would drop it as late; else null. A caught-up lane
  // that a catching-up record would be late in (its partition moved away and back before
  // the lane emptied) is retired: it drains on the stage's watermark, and a new lane
  // starts from the record's time.
  lane* lane_for(const source_position& p, event_time t) {
    for (auto& l : lanes) {
      if (l->partition != p.partition || l->retired) continue;
      if (!(p.catching_up && l->caught_up && l->agg.late_at(t))) return l.get();
      l->retired = true;
    }
    if (!p.catching_up || !agg.late_at(t)) return nullptr;
    lanes.push_back(std::make_unique<lane>(p.partition, assigner, lane_options, agg_fn, hash_fn));
    return lanes.back().get();
  }
  // Caught-up lanes follow the stage's watermark; the end of every input ends every lane.
  template <class OnResult>
  void sync_lanes(OnResult& emit) {
    if (lanes.empty()) return;
    const event_time w = agg.watermark();
    for (auto& l : lanes) {
      if (w == event_time_max) {
        l->agg.end(0, emit);
      } else if (l->caught_up) {  // lane W = largest - max_delay = w
        l->agg.progress(0, clamp_time(ns_of(w) + lane_options.max_delay.count()), steady_time{}, emit);
      }
    }
    std::erase_if(lanes, [&](const std::unique_ptr<lane>& l) {
      return (l->caught_up || l->retired || w == event_time_max) && l->agg.state_entries() == 0;
    });
  }
  bool down_ready() { return down->ready(); }
  bool down_flush() { return down->on_flush(); }
};

}  // namespace detail

/// A keyed stream with a window assigner (see the banner). Made by keyed_stream::window.
template <class K, class T, class KeyFn, class Assigner, class Late = std::nullptr_t, class Hash = default_hash<K>,
          class P = acked>
class windowed_stream {
 public:
  using key_type = K;
  using value_type = T;
  using record_policy = P;
  windowed_stream(stream<detail::keyed<T>, P> s, KeyFn key, Assigner a, window_options o, Late late,
                  std::string name, Hash hash = {})
      : s_(std::move(s)), key_(std::move(key)), assigner_(a), opts_(o), late_(std::move(late)),
        name_(std::move(name)), hash_(std::move(hash)) {}

  /// The late side output: void f(rill::record<T>&&, const K& key, event_time
  /// window_start, event_time window_end), called on the worker (see window_options).
  template <class F>
  auto late(F f) && {
    static_assert(detail::invocable_widened_v<F, record<T, P>, const K&, event_time, event_time>,
                  "rill::windowed_stream::late(f): accepted is void f(rill::record<T>&&, const K& key, "
                  "rill::event_time window_start, rill::event_time window_end)");
    return windowed_stream<K, T, KeyFn, Assigner, F, Hash, P>(std::move(s_), std::move(key_), assigner_, opts_,
                                                            std::move(f), std::move(name_), std::move(hash_));
  }
  /// Names the stage in the run report (run_report::stage(name)); default "window".
  windowed_stream name(std::string n) && {
    name_ = std::move(n);
    return std::move(*this);
  }

  /// Incremental aggregation with an aggregate function object (rill::aggregate_function).
  template <class G>
    requires aggregate_function<G, T>
  auto aggregate(G g) && {
    static_assert(std::is_same_v<Assigner, tumbling> || mergeable_aggregate<G, T>,
                  "rill::windowed_stream::aggregate: sliding and session windows merge accumulators; "
                  "give merge: .aggregate(init, add, merge) or an aggregate with merge(acc&, const acc&)");
    using stage = detail::keyed_window_stage<K, T, KeyFn, Assigner, G, Late, Hash, P>;
    using out = typename stage::output;
    return stream<out, P>([prev = std::move(s_).attach(), key = key_, a = assigner_, o = opts_, late = late_,
                           name = name_, h = hash_, g](job_builder& b, stage_factory<out, P> down) {
      const auto idx = b.metrics().add_stage(name);
      auto n = std::make_shared<std::string>(name);
      prev(b, [=, &b](build_context& ctx) -> stage_in<detail::keyed<T>, P>* {
        ctx.keep_alive->push_back(n);
        auto* s = ctx.make<stage>(a, o, g, ctx.inputs, key, late, h, &b.rt(), &ctx.metrics->at(idx, ctx.worker_id),
                                  ctx.w, detail::named_op_of(ctx, n.get()));
        auto sub = ctx;
        sub.inputs = 1;
        s->down = down(sub);
        if (o.idle_timeout.count() > 0) ctx.add_ticker([s](steady_time now) { s->tick(now); });
        return s;
      });
    });
  }
  /// `.aggregate(init, add)`: A init; void add(A&, const T&). Tumbling windows only.
  template <class A, class Add>
    requires(!aggregate_function<A, T>)
  auto aggregate(A init, Add add) && {
    static_assert(std::is_invocable_v<Add&, A&, const T&>,
                  "rill::windowed_stream::aggregate(init, add): add must be void add(A&, const T&)");
    static_assert(!std::is_invocable_v<Add&, const A&, const T&>,
                  "rill::windowed_stream::aggregate(init, add): add must take the accumulator by "
                  "non-const reference and change it: void add(A&, const T&) (one taking A by value "
                  "or returning the sum would leave the accumulator unchanged)");
    return std::move(*this).aggregate(agg::fold(std::move(init), std::move(add)));
  }
  /// `.aggregate(init, add, merge)`: ... and void merge(A&, const A&).
  template <class A, class Add, class Merge>
  auto aggregate(A init, Add add, Merge merge) && {
    static_assert(std::is_invocable_v<Add&, A&, const T&> && std::is_invocable_v<Merge&, A&, const A&>,
                  "rill::windowed_stream::aggregate(init, add, merge): add must be void add(A&, const T&), "
                  "merge void merge(A&, const A&)");
    static_assert(!std::is_invocable_v<Add&, const A&, const T&> &&
                      !std::is_invocable_v<Merge&, const A&, const A&>,
                  "rill::windowed_stream::aggregate(init, add, merge): add and merge must take the "
                  "accumulator they change by non-const reference: void add(A&, const T&), void "
                  "merge(A&, const A&) (one taking it by value or returning the result would leave it "
                  "unchanged)");
    return std::move(*this).aggregate(agg::fold(std::move(init), std::move(add), std::move(merge)));
  }
  /// `.reduce(f)`: T f(const T&, const T&), associative. Result T.
  template <class F>
  auto reduce(F f) && {
    static_assert(std::is_invocable_r_v<T, F&, const T&, const T&>,
                  "rill::windowed_stream::reduce(f): f must be T f(const T&, const T&)");
    return std::move(*this).aggregate(agg::reduce_of<T>(std::move(f)));
  }
  /// Number of records per (key, window): std::uint64_t.
  auto count() && { return std::move(*this).aggregate(agg::count{}); }
  /// Sum of f(value) (arithmetic).
  template <class F>
  auto sum(F f) && { return std::move(*this).aggregate(agg::sum_of<T>(std::move(f))); }
  /// Smallest f(value).
  template <class F>
  auto min(F f) && { return std::move(*this).aggregate(agg::min_of<T>(std::move(f))); }
  /// Largest f(value).
  template <class F>
  auto max(F f) && { return std::move(*this).aggregate(agg::max_of<T>(std::move(f))); }
  /// Mean of f(value) as double.
  template <class F>
  auto mean(F f) && { return std::move(*this).aggregate(agg::mean_of<T>(std::move(f))); }

 private:
  stream<detail::keyed<T>, P> s_;
  KeyFn key_;
  Assigner assigner_;
  window_options opts_;
  Late late_;
  std::string name_;
  Hash hash_;
};

/// What key_by returns (see the banner).
template <class K, class T, class KeyFn, class Hash = default_hash<K>, class P = acked>
class keyed_stream {
 public:
  using key_type = K;
  using value_type = T;
  using record_policy = P;
  /// The hash key_by used (the keyed operators after it hash stored keys with it).
  using hasher = Hash;
  keyed_stream(stream<detail::keyed<T>, P> s, KeyFn key, Hash hash = {})
      : s_(std::move(s)), key_(std::move(key)), hash_(std::move(hash)) {}

  /// Event-time windows per key. `a`: rill::tumbling, rill::sliding or rill::session;
  /// `o`: delay, lateness, idle inputs, stop policy. Both are validated here (throws
  /// rill::config_error naming the key, e.g. "window.size").
  template <class Assigner>
  windowed_stream<K, T, KeyFn, Assigner, std::nullptr_t, Hash, P> window(Assigner a, window_options o = {}) && {
    static_assert(std::is_same_v<Assigner, tumbling> || std::is_same_v<Assigner, sliding> ||
                      std::is_same_v<Assigner, session>,
                  "rill::keyed_stream::window(a): a must be rill::tumbling, rill::sliding or rill::session");
    a.validate();
    o.validate();
    return {std::move(s_), std::move(key_), a, o, nullptr, "window", std::move(hash_)};
  }

  /// Interval join with `other` (same key type K): left a and right b match when
  /// a.t + lower <= b.t <= a.t + upper. Returns a rill::join_stream; the rules and the
  /// result functions are in <rill/operators/join.hpp>. Throws rill::config_error
  /// ("join.lower" when lower > upper, and join_options::validate's keys).
  template <class K2, class B, class KeyB, class HashB, class P2>
  auto interval_join(keyed_stream<K2, B, KeyB, HashB, P2>&& other, std::chrono::nanoseconds lower,
                     std::chrono::nanoseconds upper, join_options o = {}) &&;
  /// Window join with `other` (same key type K) in tumbling or sliding windows `a`
  /// (<rill/operators/join.hpp>). Throws rill::config_error (the assigner's and
  /// join_options::validate's keys).
  template <class K2, class B, class KeyB, class HashB, class P2, class Assigner>
  auto window_join(keyed_stream<K2, B, KeyB, HashB, P2>&& other, Assigner a, join_options o = {}) &&;

  /// The values, on their key's worker (the key is dropped).
  stream<T, P> values() && {
    return std::move(s_).map([](detail::keyed<T>&& v) -> T { return std::move(v.value); });
  }
  /// The stream<T> operators, applied to values() on the key's worker: same signatures
  /// and rules as in <rill/operators/stream.hpp> (build thread only, as every builder).
  template <class F>
  auto map(F f) && { return std::move(*this).values().map(std::move(f)); }
  template <class F>
  auto filter(F f) && { return std::move(*this).values().filter(std::move(f)); }
  template <class U = void, class F>
  auto flat_map(F f) && { return std::move(*this).values().template flat_map<U>(std::move(f)); }
  template <class Late = std::nullptr_t>
  auto window_sort(window_sort_options opts, Late late = nullptr) && {
    return std::move(*this).values().window_sort(opts, std::move(late));
  }
  template <class S>
  job sink(S s, std::string name = "sink") && {
    return std::move(*this).values().sink(std::move(s), std::move(name));
  }

 private:
  template <class, class, class, class, class>
  friend class keyed_stream;  // a join takes the other side's routed stream and key
  stream<detail::keyed<T>, P> s_;
  KeyFn key_;
  Hash hash_;
};

}  // namespace rill

// After keyed_stream: the joins of two keyed streams.
#include "rill/operators/join.hpp"  // IWYU pragma: export

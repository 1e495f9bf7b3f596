// rill/operators/stream.hpp — the pipeline DSL: a typed stream and its operators.
//
// Defines:
//   rill::stream<T, P = acked>  a stream of records<T, P> (P: the record policy of
//                     <rill/core/record.hpp>); each operator returns a new stream of the same P
//   rill::from(src)   the stream of a source (rill::source_of), of the source's policy
//   rill::sink_of<S, T>  a shared sink object (write/progress/end per worker)
//   rill::end_to_end_latency(registry, sink)  the handle of a sink's latency histogram
//
// Example (compiled by tests/banner_examples.py; graph: vector_source -> map -> filter ->
// key_by -> window_sort -> sink):
//   using namespace std::chrono_literals;
//   std::vector<rill::record<int>> recs{{3, rill::event_time{3s}}, {14, rill::event_time{1s}}};
//   rill::job j = rill::from(rill::vector_source<int>{recs})
//       .map([](int x) { return x + 1; })
//       .filter([](const int& x) { return x % 2 == 0; })
//       .key_by([](const int& x) { return x % 7; })
//       .window_sort({.length = 10s, .max_delay = 2s})
//       .sink([](rill::window<int>&& w) { /* sorted records of one window */ });
//   rill::runtime{}.run(j);
//
// Placement (docs/design.md "Runtime"): every operator runs as one instance per worker that
// the stream reaches. Operators after a source run on the source split's worker;
// `key_by` routes each record to the worker owning hash(key) % workers (through a
// bounded exchange), and everything after it runs there. Stateless operators never move
// records between workers.
//
// Accepted user functions (checked at compile time, with a static_assert listing them):
//   map:       U f(T&&)  or  U f(const T&)                       (U not void)
//   filter:    bool f(const T&)
//   flat_map:  void f(T&&, Emit&)  where emit(U) may be called 0..n times (f may be
//              suspended inside emit until downstream has room: <rill/operators/flat_map.hpp>);
//              or R f(T&&) returning a range of U (std::vector<U>, ...)
//   key_by:    K f(const T&), K hashable by boost::hash
//   sink:      void f(T&&), void f(const T&), void f(record<T, P>&&), void f(record<T>&&),
//              or a rill::sink_of<T>
//   window_sort late side output: void f(record<T, P>&&, event_time start, event_time end)
// On an unacked stream a function taking the acked form (record<T>&&, window<U>&&) gets
// rill::to_acked of the value (no position, no token; a window's records are copied).
// Each function object is copied once per worker: state in it is per worker. User
// functions run on worker threads; an exception from one stops the run and is rethrown
// by runtime::run ("fail" policy).
//
// Thread safety: building streams is single-threaded; a built rill::job is immutable.
#pragma once

#include <boost/container_hash/hash.hpp>

#include <bit>
#include <concepts>
#include <memory>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rill/core/exchange.hpp"
#include "rill/core/rebalance.hpp"
#include "rill/core/runtime.hpp"
#include "rill/core/source.hpp"
#include "rill/core/stage.hpp"
#include "rill/operators/flat_map.hpp"
#include "rill/operators/keyed_window.hpp"
#include "rill/operators/resumable.hpp"
#include "rill/operators/window.hpp"
#include "rill/operators/window_sort.hpp"

namespace rill {

/// A shared sink: one object for all workers; write/progress/end are called from the
/// worker holding the record (`worker` = its id), so the implementation must be safe for
/// calls from several workers at once.
/// On a stream of policy P (rill/core/record.hpp), write may take record<T, P>&& or
/// record<T>&& (an unacked record is then given as rill::to_acked(r)).
template <class S, class T, class P = acked>
concept sink_of = requires(S& s, std::size_t worker, event_time t) {
  s.progress(worker, t);
  s.end(worker);
} && (requires(S& s, std::size_t worker, record<T, P>&& r) { s.write(worker, std::move(r)); } ||
      requires(S& s, std::size_t worker, record<T, acked>&& r) { s.write(worker, std::move(r)); });

template <class T, class P = acked>
class stream;
template <class K, class T, class KeyFn, class Hash, class P>
class keyed_stream;

/// The end-to-end latency histogram of the sink whose `operator` label is `op` (the
/// sink's name, "#k" added for the k-th of one name: job_metrics::label), in registry
/// `m` (runtime::metrics(), run_report::metrics): ns from a record's event time to the
/// wall clock when the sink took it, one record in 64 per sink instance, exposed as the
/// summary rill_end_to_end_latency_seconds{operator}. Meaningful for event times near
/// the wall clock (a live source); a replayed capture shows its age. Registers the
/// histogram if no run did yet (add_histogram: same name and labels, same handle). Any
/// thread (the registry's mutex); read with m.merged(id).
inline histogram_id end_to_end_latency(metrics_registry& m, const std::string& op) {
  return m.add_histogram("rill_end_to_end_latency_seconds",
                         "Wall clock at a sink minus the record's event time, one record in 64, seconds", 1e-9,
                         {{"operator", op}});
}

namespace detail {

template <class T, class F>
struct map_result {
  static constexpr bool by_rvalue = std::is_invocable_v<F&, T&&>;
  static constexpr bool by_cref = std::is_invocable_v<F&, const T&>;
  static_assert(by_rvalue || by_cref,
                "rill::stream<T>::map(f): f must accept T&& or const T& and return U "
                "(accepted: U f(T&&), U f(const T&))");
  using type = std::remove_cvref_t<typename std::conditional_t<
      by_rvalue, std::invoke_result<F&, T&&>, std::invoke_result<F&, const T&>>::type>;
};

/// Output type of flat_map: U when given, else the range's value type.
template <class T, class F, class U>
struct flat_map_result {
  using type = U;
};
template <class T, class F>
struct flat_map_result<T, F, void> {
  static_assert(std::is_invocable_v<F&, T&&>,
                "rill::stream<T>::flat_map(f): accepted signatures are "
                "void f(T&&, Emit&) with flat_map<U>(f), or Range<U> f(T&&)");
  using type = std::ranges::range_value_t<std::invoke_result_t<F&, T&&>>;
};

template <class F, class T, class = void>
struct returns_range : std::false_type {};
template <class F, class T>
struct returns_range<F, T, std::enable_if_t<std::is_invocable_v<F&, T&&>>>
    : std::bool_constant<std::ranges::range<std::invoke_result_t<F&, T&&>>> {};

template <class S>
struct shared_sink_traits : std::false_type {};
template <class S>
struct shared_sink_traits<std::shared_ptr<S>> : std::true_type {
  using element = S;
};

/// An operator's name and its worker's operator slot (null: stall detection off), for
/// operator_scope. `name` points into a string the job keeps alive for the run.
struct named_op {
  std::atomic<const std::string*>* slot = nullptr;
  const std::string* name = nullptr;
};

/// The named_op of an instance built in `ctx` named `*name`.
inline named_op named_op_of(const build_context& ctx, const std::string* name) noexcept {
  return named_op{operator_slot(ctx.w), name};
}

/// End-to-end latency at a sink (docs/design.md "Metrics"): one record in
/// `end_to_end_every` per sink instance is sampled, and the wall clock minus its event
/// time (ns) goes into the instance's histogram cell; records without an event time
/// (<= the epoch) are skipped, one from the future counts 0. Sampled because a clock read
/// per record costs more than the rest of a sink's bookkeeping.
inline constexpr unsigned end_to_end_every = 64;
struct end_to_end_sampler {
  histogram_cell* h = nullptr;  ///< null: not measured
  unsigned left = end_to_end_every;
  void on_record(event_time t) noexcept {
    if (--left != 0) return;
    left = end_to_end_every;
    const auto ns = t.time_since_epoch().count();
    if (!h || ns <= 0) return;
    const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    h->record(now > ns ? std::uint64_t(now - ns) : 0);
  }
};

/// Shared pass-through of the control path.
template <class In, class Out, class P>
struct forwarding_stage : stage_in<In, P> {
  stage_in<Out, P>* down = nullptr;
  void on_progress(std::size_t in, event_time t) override { down->on_progress(in, t); }
  void on_end(std::size_t in) override { down->on_end(in); }
  bool on_flush() override { return down->on_flush(); }
  bool ready() override { return down->ready(); }
};

template <class T, class U, class F, class P>
struct map_stage final : forwarding_stage<T, U, P> {
  F f;
  named_op op;
  map_stage(F fn, named_op o) : f(std::move(fn)), op(o) {}
  void on_record(std::size_t in, record<T, P>&& r) override {
    U u = [&] {
      operator_scope running{op.slot, op.name};
      return U(f(std::move(r.value)));
    }();
    this->down->on_record(in, rebind(std::move(r), std::move(u)));
  }
};

template <class T, class F, class P>
struct filter_stage final : forwarding_stage<T, T, P> {
  F f;
  named_op op;
  filter_stage(F fn, named_op o) : f(std::move(fn)), op(o) {}
  void on_record(std::size_t in, record<T, P>&& r) override {
    bool keep;
    {
      operator_scope running{op.slot, op.name};
      keep = f(static_cast<const T&>(r.value));
    }
    if (keep) this->down->on_record(in, std::move(r));
  }
};

/// stream<T, unacked>::to_acked(): each record as rill::to_acked(r).
template <class T>
struct widen_stage final : stage_in<T, unacked> {
  stage_in<T, acked>* out = nullptr;
  void on_record(std::size_t in, record<T, unacked>&& r) override { out->on_record(in, to_acked(std::move(r))); }
  void on_progress(std::size_t in, event_time t) override { out->on_progress(in, t); }
  void on_end(std::size_t in) override { out->on_end(in); }
  bool on_flush() override { return out->on_flush(); }
  bool ready() override { return out->ready(); }
};

/// A value for a user function written for the acked form: record<T, unacked> and
/// window<T, unacked> as their acked forms (rill::to_acked), anything else as is.
template <class X>
struct widened {
  using type = X;
};
template <class T>
struct widened<record<T, unacked>> {
  using type = record<T, acked>;
};
template <class T>
struct widened<window<T, unacked>> {
  using type = window<T, acked>;
};
template <class X>
using widened_t = typename widened<X>::type;
template <class X>
widened_t<X> widen(X&& x) {
  if constexpr (std::is_same_v<widened_t<X>, X>)
    return std::move(x);
  else
    return to_acked(std::move(x));
}

/// Calls f with r, or with its acked form when f accepts only that (an unacked record
/// given to a function written for record<T>&&).
template <class F, class R, class... A>
decltype(auto) call_widened(F& f, R&& r, A&&... a) {
  if constexpr (std::is_invocable_v<F&, R&&, A...>)
    return f(std::move(r), std::forward<A>(a)...);
  else
    return f(widen(std::move(r)), std::forward<A>(a)...);
}
template <class F, class R, class... A>
inline constexpr bool invocable_widened_v =
    std::is_invocable_v<F&, R&&, A...> || std::is_invocable_v<F&, widened_t<R>&&, A...>;

/// What crosses key_by's exchange: the value and the hash of its key, so that the keyed
/// operators after it never hash the key again.
template <class T>
struct keyed {
  T value;
  std::size_t hash;
};

/// Producer side of key_by: routes to hash(key) % workers through an exchange.
template <class T, class KeyFn, class Hash, class P>
struct key_by_stage final : stage_in<T, P> {
  using item = envelope<keyed<T>, P>;
  KeyFn key;
  Hash hasher;
  std::shared_ptr<exchange<keyed<T>, P>> ex;
  std::size_t from, workers, offset = 0;  // offset: first consumer-side input of ours
  // workers - 1 when workers is a power of two: hash % workers is then hash & mask (a
  // 64-bit division takes tens of cycles, on every record's path).
  std::size_t mask;
  bool pow2;
  std::vector<event_time> frontier;
  key_by_stage(KeyFn k, Hash h, std::shared_ptr<exchange<keyed<T>, P>> e, std::size_t w, std::size_t n,
               std::size_t inputs)
      : key(std::move(k)), hasher(std::move(h)), ex(std::move(e)), from(w), workers(n), mask(n - 1),
        pow2(std::has_single_bit(n)), frontier(inputs, event_time_min) {}

  void on_record(std::size_t in, record<T, P>&& r) override {
    const std::size_t h = mix_hash(hasher(key(static_cast<const T&>(r.value))));
    if (advances_progress(r) && r.time > frontier[in]) frontier[in] = r.time;
    ex->push(from, pow2 ? h & mask : h % workers,
             item{item::kind::record, std::uint32_t(offset + in), frontier[in],
                  rebind(std::move(r), keyed<T>{std::move(r.value), h})});
  }
  void on_progress(std::size_t in, event_time t) override {
    if (t > frontier[in]) frontier[in] = t;
    ex->broadcast(from, item{item::kind::progress, std::uint32_t(offset + in), frontier[in], std::nullopt});
  }
  void on_end(std::size_t in) override {
    ex->broadcast(from, item{item::kind::end, std::uint32_t(offset + in), event_time_max, std::nullopt});
    ex->flush(from);
  }
  bool on_flush() override { return ex->flush(from); }
  /// False while a batch for some worker waits for room in its inbox, or while the stage
  /// after key_by on this worker is not ready (exchange::ready).
  bool ready() override { return ex->ready(from); }
};

/// Producer side of rebalance: hands records to the node's ring.
template <class T, class P>
struct rebalance_stage final : stage_in<T, P> {
  std::shared_ptr<rebalance_exchange<T, P>> ex;
  std::size_t producer;
  rebalance_stage(std::shared_ptr<rebalance_exchange<T, P>> e, std::size_t p) : ex(std::move(e)), producer(p) {}
  void on_record(std::size_t in, record<T, P>&& r) override { ex->push(producer, in, std::move(r)); }
  void on_progress(std::size_t in, event_time t) override { ex->progress(producer, in, t); }
  void on_end(std::size_t in) override { ex->end(producer, in); }
  bool on_flush() override { return ex->flush(producer); }
  /// False while this producer's batch is full and no ring takes it
  /// (rebalance_exchange::ready).
  bool ready() override { return ex->ready(producer); }
};

/// window_sort's instance on one worker. Firing is bounded by downstream capacity: every
/// call that may emit a window runs on the stage's fiber and stops when downstream is not
/// ready (<rill/operators/resumable.hpp>); a record that is in time, finds room and makes
/// no window due is buffered on the loop's stack.
template <class T, class Late, class P>
struct window_sort_stage final : stage_in<T, P>, resumable_stage<window_sort_stage<T, Late, P>, stage_call<T, P>> {
  using call = stage_call<T, P>;
  using W = window<T, P>;
  window_sorter<T, P> sorter;
  Late late_fn;
  stage_in<W, P>* down = nullptr;
  stage_counters* c;
  event_time sent = event_time_min;
  std::size_t inputs_left;
  window_sort_stage(window_sort_options o, std::size_t inputs, Late l, stage_counters* cs, worker* w)
      : resumable_stage<window_sort_stage, call>(w),
        sorter(o, inputs, o.idle_timeout.count() > 0 ? std::chrono::steady_clock::now() : steady_time{}),
        late_fn(std::move(l)), c(cs), inputs_left(inputs) {}
  ~window_sort_stage() override { this->unwind(); }

  // Processing time matters only for idle inputs: no clock read per record otherwise.
  steady_time now() const {
    return sorter.options().idle_timeout.count() > 0 ? std::chrono::steady_clock::now() : steady_time{};
  }
  auto on_window() {
    return [this](W&& w) {
      c->add(c->out, w.records.size());
      const auto t = w.end - std::chrono::nanoseconds{1};
      auto ack = join_acks(w.records);  // the window is done when all its inputs are
      this->gate();
      down->on_record(0, make_record<P>(std::move(w), t, std::nullopt, std::move(ack)));
    };
  }
  // The sorter's late callback: late_fn, or one that does nothing when none was given.
  auto on_late() {
    if constexpr (std::is_same_v<Late, std::nullptr_t>)
      return [](record<T, P>&&, event_time, event_time) {};
    else
      return [this](record<T, P>&& lr, event_time s, event_time e) { call_widened(late_fn, std::move(lr), s, e); };
  }
  void advance() {
    const auto w = sorter.watermark();
    if (w > sent) {
      sent = w;
      if (w < event_time_max) c->watermark.store(w.time_since_epoch().count(), std::memory_order_relaxed);
      down->on_progress(0, w);
    }
  }
  void on_record(std::size_t in, record<T, P>&& r) override {
    c->add(c->in);
    if (!this->busy() && sorter.try_buffer(in, r, now())) {
      if (!sorter.due()) return advance();
      return this->submit({call::kind::fire, 0, {}, {}, std::nullopt});
    }
    this->submit({call::kind::record, in, {}, {}, std::move(r)});
  }
  // A marker that makes no window due is observed on the loop's stack (the exchange
  // sends one with nearly every record: its frontier).
  void on_progress(std::size_t in, event_time t) override {
    if (!this->busy()) {
      sorter.observe(in, t, now());
      if (!sorter.due()) return advance();
      return this->submit({call::kind::fire, 0, {}, {}, std::nullopt});
    }
    this->submit({call::kind::progress, in, t, {}, std::nullopt});
  }
  void on_end(std::size_t in) override { this->submit({call::kind::end, in, {}, {}, std::nullopt}); }
  /// Pushes downstream buffers on; false while busy (suspended or holding inputs).
  bool on_flush() override {
    const bool d = down->on_flush();
    return d && !this->busy();
  }
  /// False while busy, else downstream's answer.
  bool ready() override { return !this->busy() && down->ready(); }
  /// The idle-input ticker; skipped while busy (the next tick does its work).
  void tick(steady_time t) {
    if (!this->busy()) this->submit({call::kind::tick, 0, {}, t, std::nullopt});
  }

  // resumable_stage's hooks (on this worker).
  void run_call(call& k) {
    switch (k.k) {
      case call::kind::record: {
        const auto late_before = sorter.late();
        sorter.push(k.in, std::move(*k.r), now(), on_window(), on_late());
        if (sorter.late() != late_before) c->add(c->late, sorter.late() - late_before);
        break;
      }
      case call::kind::progress: sorter.progress(k.in, k.t, now(), on_window()); break;
      case call::kind::end: sorter.end(k.in, on_window()); break;
      case call::kind::tick: sorter.tick(k.now, on_window()); break;
      case call::kind::fire: sorter.fire(on_window()); break;
    }
    advance();
    if (k.k == call::kind::end && --inputs_left == 0) down->on_end(0);
  }
  bool down_ready() { return down->ready(); }
  bool down_flush() { return down->on_flush(); }
};

template <class T, class F, class P>
struct sink_stage final : stage_in<T, P> {
  F f;
  std::size_t inputs_left;
  std::function<void()> done;
  stage_counters* c;
  sink_stage(F fn, std::size_t inputs, std::function<void()> d, stage_counters* cs)
      : f(std::move(fn)), inputs_left(inputs), done(std::move(d)), c(cs) {}
  named_op op;
  end_to_end_sampler e2e;
  void on_record(std::size_t, record<T, P>&& r) override {
    c->add(c->in);
    e2e.on_record(r.time);
    operator_scope running{op.slot, op.name};
    if constexpr (std::is_invocable_v<F&, record<T, P>&&>) f(std::move(r));
    else if constexpr (std::is_invocable_v<F&, record<T>&&>) f(to_acked(std::move(r)));
    else if constexpr (std::is_invocable_v<F&, T&&>) f(std::move(r.value));
    else if constexpr (std::is_invocable_v<F&, const T&>) f(static_cast<const T&>(r.value));
    else f(widen(std::move(r.value)));
  }
  void on_progress(std::size_t, event_time) override {}
  void on_end(std::size_t) override {
    if (--inputs_left == 0) done();
  }
};

template <class T, class S, class P>
struct shared_sink_stage final : stage_in<T, P> {
  std::shared_ptr<S> s;
  std::size_t worker, inputs_left;
  std::vector<event_time> frontier;
  event_time sent = event_time_min;
  std::function<void()> done;
  stage_counters* c;
  shared_sink_stage(std::shared_ptr<S> sp, std::size_t w, std::size_t inputs,
                    std::function<void()> d, stage_counters* cs)
      : s(std::move(sp)), worker(w), inputs_left(inputs), frontier(inputs, event_time_min),
        done(std::move(d)), c(cs) {}
  named_op op;
  end_to_end_sampler e2e;
  void on_record(std::size_t, record<T, P>&& r) override {
    c->add(c->in);
    e2e.on_record(r.time);
    operator_scope running{op.slot, op.name};
    if constexpr (requires { s->write(worker, std::move(r)); }) s->write(worker, std::move(r));
    else s->write(worker, to_acked(std::move(r)));
  }
  /// Optional sink backpressure: a sink with `bool flush(worker)` is asked before each
  /// source slice; false = it is full and the source waits.
  bool on_flush() override {
    if constexpr (requires(S& x) { { x.flush(std::size_t{}) } -> std::convertible_to<bool>; })
      return s->flush(worker);
    else
      return true;
  }
  void on_progress(std::size_t in, event_time t) override {
    frontier[in] = std::max(frontier[in], t);
    const auto m = *std::min_element(frontier.begin(), frontier.end());
    if (m > sent) {
      sent = m;
      s->progress(worker, m);
    }
  }
  void on_end(std::size_t in) override {
    frontier[in] = event_time_max;
    if (--inputs_left == 0) {
      s->end(worker);
      done();
    }
  }
};

/// How an exchange (key_by's, rebalance's) runs a consumer's drain on worker ctx.w:
/// `post` queues it as one loop turn; `retry` runs it after detail::emit_retry on a timer
/// of its own, for a drain whose consumer is not ready (one timer per consumer: at most
/// one drain of it is scheduled at a time). The run owns the timer (ctx.keep_alive): the
/// exchange may outlive the run and the worker's io_context, and a retry asked for after
/// the run does nothing. Build time, on the building thread.
struct drain_schedule {
  std::function<void(std::function<void()>)> post, retry;
};
inline drain_schedule drain_scheduling(build_context& ctx) {
  auto* wk = ctx.w;
  auto timer = std::make_shared<boost::asio::steady_timer>(wk->context());
  ctx.keep_alive->push_back(timer);
  std::weak_ptr<boost::asio::steady_timer> retry = timer;
  return {[wk](std::function<void()> fn) {
            boost::asio::post(wk->context(), [wk, fn = std::move(fn)] {
              turn_scope turn{wk};
              fn();
            });
          },
          [wk, retry](std::function<void()> fn) {
            const auto t = retry.lock();
            if (!t) return;  // the run is over
            t->expires_after(emit_retry);
            t->async_wait([wk, fn = std::move(fn)](const boost::system::error_code& ec) {
              if (ec) return;
              turn_scope turn{wk};
              fn();
            });
          }};
}

}  // namespace detail

template <class T, class P>
class stream {
 public:
  using value_type = T;
  /// The records' policy (rill/core/record.hpp): the source's, kept by every operator.
  using record_policy = P;
  using record_type = record<T, P>;
  /// Wires the upstream part of the graph so that it feeds the consumers `down` builds.
  using attach_fn = std::function<void(job_builder&, stage_factory<T, P>)>;
  explicit stream(attach_fn a) : attach_(std::move(a)) {}

  /// The same records as acked ones (rill::to_acked): for an operator or sink written for
  /// record<T>. Costs one virtual call and a move per record; on an acked stream, itself.
  stream<T, acked> to_acked() && {
    if constexpr (carries_acks_v<P>) {
      return std::move(*this);
    } else {
      return stream<T, acked>([prev = std::move(attach_)](job_builder& b, stage_factory<T, acked> down) {
        prev(b, [down](build_context& ctx) -> stage_in<T, P>* {
          auto* s = ctx.make<detail::widen_stage<T>>();
          s->out = down(ctx);
          return s;
        });
      });
    }
  }

  /// U f(T&&) on every record. `name` names the operator for the stall detector
  /// (runtime_options::stall_threshold); map, filter and flat_map keep no counters.
  template <class F>
  auto map(F f, std::string name = "map") && {
    using U = typename detail::map_result<T, F>::type;
    static_assert(!std::is_void_v<U>, "rill::stream<T>::map(f): f must return a value (U f(T&&))");
    auto n = std::make_shared<std::string>(std::move(name));
    return stream<U, P>([prev = std::move(attach_), f, n](job_builder& b, stage_factory<U, P> down) {
      prev(b, [f, down, n](build_context& ctx) -> stage_in<T, P>* {
        ctx.keep_alive->push_back(n);
        auto* s = ctx.make<detail::map_stage<T, U, F, P>>(f, detail::named_op_of(ctx, n.get()));
        s->down = down(ctx);
        return s;
      });
    });
  }

  /// Keeps the records for which bool f(const T&) is true. `name`: as for map.
  template <class F>
  stream<T, P> filter(F f, std::string name = "filter") && {
    static_assert(std::is_invocable_r_v<bool, F&, const T&>,
                  "rill::stream<T>::filter(f): accepted signature is bool f(const T&)");
    auto n = std::make_shared<std::string>(std::move(name));
    return stream<T, P>([prev = std::move(attach_), f, n](job_builder& b, stage_factory<T, P> down) {
      prev(b, [f, down, n](build_context& ctx) -> stage_in<T, P>* {
        ctx.keep_alive->push_back(n);
        auto* s = ctx.make<detail::filter_stage<T, F, P>>(f, detail::named_op_of(ctx, n.get()));
        s->down = down(ctx);
        return s;
      });
    });
  }

  /// U must be given when f uses the emitter form: flat_map<U>(f). `name`: as for map.
  /// Emission is bounded by downstream capacity in both forms: when a key_by exchange
  /// after it is full, the call stops and continues on a later loop turn (a range is
  /// consumed lazily; the emit form runs f on a fiber) — <rill/operators/flat_map.hpp>.
  template <class U = void, class F>
  auto flat_map(F f, std::string name = "flat_map") && {
    using Out = typename detail::flat_map_result<T, F, U>::type;
    static_assert(std::is_invocable_v<F&, T&&, detail::emitter<Out, P>&> ||
                      detail::returns_range<F, T>::value,
                  "rill::stream<T>::flat_map(f): accepted signatures are "
                  "void f(T&&, Emit&) with flat_map<U>(f), or Range<U> f(T&&)");
    auto n = std::make_shared<std::string>(std::move(name));
    return stream<Out, P>([prev = std::move(attach_), f, n](job_builder& b, stage_factory<Out, P> down) {
      prev(b, [f, down, n](build_context& ctx) -> stage_in<T, P>* {
        ctx.keep_alive->push_back(n);
        const auto op = detail::named_op_of(ctx, n.get());
        auto* s = ctx.make<detail::flat_map_stage<T, Out, F, P>>(f, op.slot, op.name, ctx.w);
        s->down = down(ctx);
        return s;
      });
    });
  }

  /// Routes each record to worker hash(key(value)) % workers and returns a keyed stream
  /// (rill::keyed_stream) that keeps the key type K = key's return type. `hash` hashes a
  /// K (default rill::default_hash<K>: std::hash, else boost::hash); the result is mixed
  /// (detail::mix_hash: a folded 128-bit multiply) before `% workers`. Exchange: batches
  /// of 256 records; a destination inbox holds up to 64 x 256 envelopes in up to
  /// max(64, workers) batches (bounded; full = backpressure to the source; see
  /// <rill/core/exchange.hpp>).
  template <class KeyFn, class Hash = default_hash<std::remove_cvref_t<std::invoke_result_t<KeyFn&, const T&>>>>
  auto key_by(KeyFn key, Hash hash = {}) && {
    static_assert(std::is_invocable_v<KeyFn&, const T&>,
                  "rill::stream<T>::key_by(f): accepted signature is Key f(const T&)");
    using K = std::remove_cvref_t<std::invoke_result_t<KeyFn&, const T&>>;
    static_assert(std::is_invocable_r_v<std::size_t, const Hash&, const K&>,
                  "rill::stream<T>::key_by(f, hash): hash must be std::size_t hash(const Key&)");
    using KT = detail::keyed<T>;
    stream<KT, P> routed([prev = std::move(attach_), key, hash](job_builder& b, stage_factory<KT, P> down) {
      const std::size_t n = b.workers();
      auto ex = std::make_shared<detail::exchange<KT, P>>(n, 256, 64);
      auto producers = std::make_shared<std::vector<detail::key_by_stage<T, KeyFn, Hash, P>*>>();
      b.add_finalizer([&b, ex, producers, down, n] {
        std::size_t total = 0;
        for (auto* p : *producers) {
          p->offset = total;
          total += p->frontier.size();
        }
        for (std::size_t w = 0; w < n; ++w) {
          auto ctx = b.context(w, total);
          auto* head = down(ctx);
          b.metrics().add_gauge_fn("rill_queue_depth_batches", "Batches waiting in an exchange inbox (256 records each)",
                                   {{"queue", "key_by"}, {"worker", std::to_string(w)}},
                                   [ex, w] { return double(ex->inbox_depth(w)); });
          const auto drains = detail::drain_scheduling(ctx);
          ex->bind_consumer(w, drains.post, head, total, drains.retry);
        }
      });
      prev(b, [key, hash, ex, producers, n](build_context& ctx) -> stage_in<T, P>* {
        auto* s = ctx.make<detail::key_by_stage<T, KeyFn, Hash, P>>(key, hash, ex, ctx.worker_id, n, ctx.inputs);
        producers->push_back(s);
        return s;
      });
    });
    return keyed_stream<K, T, KeyFn, Hash, P>(std::move(routed), std::move(key), std::move(hash));
  }

  /// Shares the following stateless work between workers through the NUMA node's ring
  /// (see <rill/core/rebalance.hpp>): a record produced on node A is processed by some
  /// worker of node A, or of another node when A's ring is full or another node is idle.
  /// Batches of 256 records; 64 batches per node ring; cross-node moves of 4 batches.
  /// Each ring's depth is the gauge rill_queue_depth_batches{queue="rebalance",node}.
  stream<T, P> rebalance() && {
    return stream<T, P>([prev = std::move(attach_)](job_builder& b, stage_factory<T, P> down) {
      const std::size_t n = b.workers();
      std::size_t nodes = 1;
      for (std::size_t w = 0; w < n; ++w) nodes = std::max(nodes, b.rt().node_of(w) + 1);
      auto ex = std::make_shared<detail::rebalance_exchange<T, P>>(n, nodes, 64, 256, 4);
      for (std::size_t node = 0; node < nodes; ++node)
        b.metrics().add_gauge_fn("rill_queue_depth_batches", "Batches waiting in an exchange inbox (256 records each)",
                                 {{"queue", "rebalance"}, {"node", std::to_string(node)}},
                                 [ex, node] { return double(ex->ring().ring(node).was_size()); });
      b.add_finalizer([&b, ex, down, n] {
        for (std::size_t w = 0; w < n; ++w) {
          auto ctx = b.context(w, ex->total_inputs());
          auto* head = down(ctx);
          const auto drains = detail::drain_scheduling(ctx);
          ex->bind_consumer(w, b.rt().node_of(w), head, drains.post, drains.retry);
          // Idle workers look at their ring (and steal) and forward frontiers every tick.
          ctx.add_ticker([ex, w](steady_time) {
            if (ex->drain(w)) ex->schedule(w);
          });
          if (ex->total_inputs() == 0) b.on_start(w, [ex, w] { ex->sync(w); });
        }
      });
      prev(b, [ex, &b](build_context& ctx) -> stage_in<T, P>* {
        ex->add_producer(ctx.worker_id, b.rt().node_of(ctx.worker_id), ctx.inputs);
        return ctx.make<detail::rebalance_stage<T, P>>(ex, ex->producer_index(ctx.worker_id));
      });
    });
  }

  /// Event-time tumbling windows, sorted (see <rill/operators/window_sort.hpp> for the
  /// exact rules). Emits one rill::window<T> per fired window, with event time end - 1 ns,
  /// and forwards its watermark as the downstream frontier. Firing is bounded by
  /// downstream capacity: it stops before a window when downstream is not ready and
  /// continues on a later loop turn (<rill/operators/resumable.hpp>). `late` is the late
  /// side output (called on the worker; nullptr = count only). Throws config_error from
  /// run() when options are invalid.
  template <class Late = std::nullptr_t>
  stream<window<T, P>, P> window_sort(window_sort_options opts, Late late = nullptr) && {
    opts.validate();
    static_assert(std::is_same_v<Late, std::nullptr_t> ||
                      detail::invocable_widened_v<Late, record<T, P>, event_time, event_time>,
                  "rill::stream<T>::window_sort(opts, late): accepted late side output is "
                  "void f(record<T>&&, event_time window_start, event_time window_end)");
    using W = window<T, P>;
    return stream<W, P>([prev = std::move(attach_), opts, late](job_builder& b, stage_factory<W, P> down) {
      const auto idx = b.metrics().add_stage("window_sort");
      prev(b, [opts, late, down, idx](build_context& ctx) -> stage_in<T, P>* {
        auto* s = ctx.make<detail::window_sort_stage<T, Late, P>>(opts, ctx.inputs, late,
                                                               &ctx.metrics->at(idx, ctx.worker_id), ctx.w);
        auto sub = ctx;
        sub.inputs = 1;
        s->down = down(sub);
        if (opts.idle_timeout.count() > 0) ctx.add_ticker([s](steady_time now) { s->tick(now); });
        return s;
      });
    });
  }

  /// Ends the stream. `s` is a callable (copied per worker) or a shared rill::sink_of<T>
  /// passed as std::shared_ptr<S>. Every sink samples its end-to-end latency
  /// (rill::end_to_end_latency, one record in 64: a wall-clock read); a shared sink that
  /// is a rill::metrics_provider (kafka_sink) registers its own metrics for the run.
  template <class S>
  job sink(S s, std::string name = "sink") && {
    return job([prev = std::move(attach_), s, name](job_builder& b) {
      const auto idx = b.metrics().add_stage(name);
      // End-to-end latency, one cell per worker in the runtime's registry (typed access:
      // add_histogram with the same name and labels returns this handle).
      const auto e2e = end_to_end_latency(b.rt().metrics(), b.metrics().label(idx));
      if constexpr (detail::shared_sink_traits<S>::value) {
        if constexpr (metrics_provider<typename detail::shared_sink_traits<S>::element>)
          s->add_metrics(b.metrics(), b.metrics().label(idx));
      }
      prev(b, [s, idx, e2e, &b](build_context& ctx) -> stage_in<T, P>* {
        b.expect_sink();
        auto* c = &ctx.metrics->at(idx, ctx.worker_id);
        auto* lat = &b.rt().metrics().cell(e2e, ctx.worker_id);
        stage_in<T, P>* st;
        if constexpr (detail::shared_sink_traits<S>::value) {
          using E = typename detail::shared_sink_traits<S>::element;
          static_assert(sink_of<E, T, P>, "rill::stream<T>::sink(std::shared_ptr<S>): S must model "
                                          "rill::sink_of<T> (write, progress, end per worker)");
          auto* ss = ctx.make<detail::shared_sink_stage<T, E, P>>(
              s, ctx.worker_id, ctx.inputs, ctx.sink_done, c);
          ss->op = detail::named_op_of(ctx, &b.metrics().name(idx));
          ss->e2e.h = lat;
          st = ss;
        } else {
          static_assert(std::is_invocable_v<S&, record<T, P>&&> || std::is_invocable_v<S&, record<T>&&> ||
                            std::is_invocable_v<S&, T&&> || std::is_invocable_v<S&, const T&> ||
                            std::is_invocable_v<S&, detail::widened_t<T>&&>,
                        "rill::stream<T>::sink(s): accepted are void f(T&&), void f(const T&), "
                        "void f(record<T>&&), or std::shared_ptr<S> with S a rill::sink_of<T>");
          auto* ss = ctx.make<detail::sink_stage<T, S, P>>(s, ctx.inputs, ctx.sink_done, c);
          ss->op = detail::named_op_of(ctx, &b.metrics().name(idx));
          ss->e2e.h = lat;
          st = ss;
        }
        if (ctx.inputs == 0) b.on_start(ctx.worker_id, ctx.sink_done);
        return st;
      });
    });
  }

  const attach_fn& attach() const { return attach_; }

 private:
  attach_fn attach_;
};

/// The stream of a source (rill::source_of; any source: pcap, Kafka, vector, user's).
/// Split i of the source runs on worker i mod workers, each driven by
/// rill::source_driver; `name` is the source stage's name in the run report. A source
/// that is a rill::metrics_provider (kafka_source) registers its own metrics for the run.
template <source_of S>
stream<typename S::value_type, record_policy_of_t<S>> from(S src, std::string name = "source") {
  using T = typename S::value_type;
  using P = record_policy_of_t<S>;
  auto shared = std::make_shared<S>(std::move(src));
  return stream<T, P>([shared, name](job_builder& b, stage_factory<T, P> down) {
    const auto idx = b.metrics().add_stage(name, stage_kind::source);
    if constexpr (metrics_provider<S>) shared->add_metrics(b.metrics(), b.metrics().label(idx));
    const std::size_t n = b.workers();
    const std::size_t splits = split_count_of(*shared, n);
    for (std::size_t w = 0; w < n && w < splits; ++w) {
      std::vector<std::size_t> mine;
      for (std::size_t i = w; i < splits; i += n) mine.push_back(i);
      auto ctx = b.context(w, mine.size());
      auto* head = down(ctx);
      for (std::size_t li = 0; li < mine.size(); ++li) {
        using R = decltype(shared->open(std::size_t{}));
        // A draining reader's close (its final commit) is awaited by the run.
        std::function<void()> on_closed;
        if constexpr (draining_reader<R>) {
          b.expect_drain();
          on_closed = ctx.drain_done;
        }
        auto d = std::make_shared<source_driver<R, T, P>>(shared->open(mine[li]), head, li, b.rt(),
                                                      *ctx.w, ctx.metrics->at(idx, w), 256,
                                                      &b.metrics().name(idx), std::move(on_closed));
        b.on_start(w, [d] { d->start(); });
      }
    }
  });
}

}  // namespace rill

// After stream<T>: what key_by returns (keyed_stream, windowed_stream).
#include "rill/operators/keyed_stream.hpp"  // IWYU pragma: export

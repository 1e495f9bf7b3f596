// rill/operators/flat_map.hpp — flat_map's operator instance: emission bounded by the
// downstream capacity, in both of flat_map's forms.
//
// Defines (internals of the DSL, in rill::detail: users write `.flat_map(f)`):
//   rill::detail::emitter<U>             what the emit form's f(T&&, Emit&) calls: emit(u)
//   rill::detail::flat_map_stage<T,U,F>  the operator instance, one per worker
// (its fiber, rill::detail::fiber_call, and the emission constants are in
// <rill/operators/resumable.hpp>)
//
// Example (compiled by tests/banner_examples.py; records 1 and 2 -> 10 and 20 outputs,
// then two of each; nothing downstream holds more than the exchange's batches of them):
//   #include <rill/operators/stream.hpp>
//   std::vector<rill::record<int>> recs{{1, rill::event_time{}}, {2, rill::event_time{}}};
//   rill::job j = rill::from(rill::vector_source<int>{recs})
//       .flat_map([](int x) { return std::views::iota(0, 10 * x); })    // range form
//       .flat_map<int>([](int x, auto& emit) { emit(x); emit(-x); })   // emit form
//       .key_by([](const int& x) { return x % 7; })
//       .sink([](int) {});
//   rill::runtime{}.run(j);
//
// Bounded emission (docs/design.md "Bounded emission"). Before each output record the
// stage asks downstream `ready()` (stage_in: false when an exchange's pending batch for
// some destination could not be sent because that inbox is full, or a stage on the same
// worker is itself suspended). When it is false, or after `emit_turn_records` outputs
// in one loop turn, the stage suspends: it returns to its caller and continues where it
// left off on a later turn of its worker's loop — a posted handler when the last attempt
// made progress (the turn budget ran out), otherwise a timer of `emit_retry` (the
// worker sleeps in its loop meanwhile; it never blocks and never spins).
//   - Range form, R f(T&&): the place is the range object and its iterator, kept in the
//     stage across turns. The range is consumed lazily, so a view (std::views::iota, a
//     generator-like view) costs no memory for the outputs not yet taken.
//   - Emit form, void f(T&&, Emit&): f runs on a fiber (Boost.Context, one per stage
//     instance, `fiber_stack_bytes` of stack mapped with a guard page and reused for
//     every input record): emit(u) on a full downstream switches back to the worker's
//     loop stack, and the next turn switches into f again, right after that emit. A
//     stackful coroutine because f is the user's ordinary function: a C++20 coroutine
//     would make every user function a coroutine type, and holding f until downstream has
//     room bounds nothing when one call emits millions.
// While the stage is suspended, the records, progress and end markers that still arrive
// are held in order and replayed after it (a watermark never overtakes the records before
// it), and `on_flush()` and `ready()` return false, so a source stops reading at its next
// slice and an exchange stops draining at its next batch: the held buffer holds at most
// one source slice or one exchange batch (256 records each) per input.
//
// Thread safety: an instance lives on its worker; the fiber runs on that worker's thread
// only, inside on_record or the stage's own resume handler. Errors: an exception from f
// is caught on the fiber, carried back and rethrown on the worker's stack (the run's
// "fail" policy). A run that stops while f is suspended mid-call unwinds f's frames with
// Boost.Context's forced_unwind exception when the stage is destroyed: f must not
// swallow it (a `catch (...)` in f must rethrow).
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>

#include "rill/core/record.hpp"
#include "rill/core/stage.hpp"
#include "rill/core/worker.hpp"
#include "rill/operators/resumable.hpp"

namespace rill::detail {

/// What an output of flat_map carries besides its value: the input's time, position and
/// ack token (record.hpp, acks), and its logical input.
template <class U, class P = acked>
struct flat_map_emission {
  stage_in<U, P>* down = nullptr;
  std::size_t in = 0;
  event_time t{};
  std::optional<source_position> pos;
  std::shared_ptr<ack_token> ack;  // copied into every output
  std::size_t budget = 0;          // outputs left in this loop turn
  fiber_call* fiber = nullptr;     // emit form: where to yield

  bool may_emit() const { return budget != 0 && down->ready(); }
  void send(U&& u) {
    --budget;
    down->on_record(in, make_record<P>(std::move(u), t, pos, ack));
  }
};

/// The emit form's `emit`: emit(u) hands one output on, or (downstream full, or the turn's
/// budget spent) first suspends f until a later loop turn. Valid only during the call of
/// f it was given to; on that call's worker.
template <class U, class P = acked>
class emitter {
 public:
  explicit emitter(flat_map_emission<U, P>* e) noexcept : e_(e) {}
  void operator()(U&& u) const {
    while (!e_->may_emit()) e_->fiber->yield();
    e_->send(std::move(u));
  }
  void operator()(const U& u) const { (*this)(U(u)); }

 private:
  flat_map_emission<U, P>* e_;
};

/// A view of a range f returned by lvalue reference: begin() and end() of the referenced
/// range, which must outlive it. What std::ranges::ref_view is, without deriving from
/// std::ranges::view_interface, which clang 14 cannot instantiate with libstdc++ 12 (GCC
/// bug 102807, LLVM issue 52696).
template <class Range>
class range_ref : public std::ranges::view_base {
 public:
  explicit range_ref(Range& r) noexcept : r_(&r) {}
  auto begin() const { return std::ranges::begin(*r_); }
  auto end() const { return std::ranges::end(*r_); }

 private:
  Range* r_;
};

/// The place of a range-form flat_map in its current input: the range f returned (a
/// returned lvalue reference is kept as a range_ref, a view: its elements are copied,
/// never moved) and the iterator to its next output.
template <class Returned>
struct flat_map_range {
  using R = std::conditional_t<std::is_lvalue_reference_v<Returned>, range_ref<std::remove_reference_t<Returned>>,
                               std::remove_cvref_t<Returned>>;
  R range;
  std::ranges::iterator_t<R> it;
  std::ranges::sentinel_t<R> end;
  explicit flat_map_range(Returned&& r)
      : range(std::forward<Returned>(r)), it(std::ranges::begin(range)), end(std::ranges::end(range)) {}
  flat_map_range(const flat_map_range&) = delete;  // `it` points into `range`
  flat_map_range& operator=(const flat_map_range&) = delete;
};

template <class T, class F, bool EmitForm>
struct flat_map_place {  // emit form: the input value f is running on
  using type = T;
};
template <class T, class F>
struct flat_map_place<T, F, false> {
  using type = flat_map_range<std::invoke_result_t<F&, T&&>>;
};

/// flat_map's instance on one worker (the banner). `F` is either form; `U` the output.
/// Owned by a std::shared_ptr (build_context::make): its handlers hold weak references.
template <class T, class U, class F, class P = acked>
struct flat_map_stage final : stage_in<T, P>, std::enable_shared_from_this<flat_map_stage<T, U, F, P>> {
  static constexpr bool emit_form = std::is_invocable_v<F&, T&&, emitter<U, P>&>;

  stage_in<U, P>* down = nullptr;
  F f;
  std::atomic<const std::string*>* slot;
  const std::string* name;
  worker* w;

  flat_map_stage(F fn, std::atomic<const std::string*>* op_slot, const std::string* op_name, worker* wk)
      : f(std::move(fn)), slot(op_slot), name(op_name), w(wk) {}

  void on_record(std::size_t in, record<T, P>&& r) override {
    if (busy()) return hold(held{held::kind::record, in, {}, std::move(r)});
    operator_scope running{slot, name};  // covers the stages downstream too: they mark themselves
    e_.budget = emit_turn_records;
    begin(in, std::move(r));
    if (!run()) suspend();
  }
  void on_progress(std::size_t in, event_time t) override {
    if (busy()) return hold(held{held::kind::progress, in, t, std::nullopt});
    down->on_progress(in, t);
  }
  void on_end(std::size_t in) override {
    if (busy()) return hold(held{held::kind::end, in, {}, std::nullopt});
    down->on_end(in);
  }
  /// Pushes downstream buffers on; false while suspended or holding inputs (the caller
  /// stops: backpressure), else downstream's answer.
  bool on_flush() override {
    const bool d = down->on_flush();
    return d && !busy();
  }
  /// False while suspended or holding inputs, else downstream's answer.
  bool ready() override { return !busy() && down->ready(); }

 private:
  struct held {
    enum class kind : std::uint8_t { record, progress, end } k;
    std::size_t in;
    event_time t;
    std::optional<record<T, P>> r;
  };

  bool busy() const noexcept { return suspended_ || !held_.empty(); }
  void hold(held&& h) { held_.push_back(std::move(h)); }

  void begin(std::size_t in, record<T, P>&& r) {
    e_.down = down;
    e_.in = in;
    e_.t = r.time;
    e_.pos = position_of(r);
    e_.ack = take_ack(r);
    if constexpr (emit_form) place_.emplace(std::move(r.value));
    else place_.emplace(f(std::move(r.value)));
  }
  /// Emits from the current input until it is done (true) or the stage must stop (false).
  /// Inlined into on_record and resume() with the fiber switch (fiber_call::start).
  RILL_FIBER_SWITCH_INLINE bool run() {
    if constexpr (emit_form) {
      e_.fiber = &fiber_;
      return done(fiber_.in_call() ? fiber_.resume() : fiber_.start(&call_f, this));
    } else {
      auto& p = *place_;
      using R = typename flat_map_place<T, F, emit_form>::type::R;
      for (; p.it != p.end; ++p.it) {
        if (!e_.may_emit()) return false;
        if constexpr (std::ranges::view<R>) e_.send(U(*p.it));  // a view may refer to the user's data
        else e_.send(U(std::ranges::iter_move(p.it)));          // our own container
      }
      return done(true);
    }
  }
  RILL_FIBER_SWITCH_INLINE bool done(bool finished) {
    if (!finished) return false;
    place_.reset();
    e_.ack.reset();
    e_.pos.reset();
    return true;
  }
  static void call_f(void* p) {
    auto* s = static_cast<flat_map_stage*>(p);
    emitter<U, P> e{&s->e_};
    s->f(std::move(*s->place_), e);
  }

  void suspend() {
    suspended_ = true;
    const bool progressed = e_.budget != emit_turn_records;
    down->on_flush();  // what the exchange holds goes out now where it can
    std::weak_ptr<flat_map_stage> self = this->weak_from_this();
    if (progressed) {
      boost::asio::post(w->context(), [self] {
        if (auto s = self.lock()) s->resume();
      });
    } else {
      if (!timer_) timer_.emplace(w->context());
      timer_->expires_after(emit_retry);
      timer_->async_wait([self](const boost::system::error_code& ec) {
        if (auto s = self.lock(); s && !ec) s->resume();
      });
    }
  }
  /// A later loop turn: continue the input in progress, then replay what was held, in
  /// order, until done or downstream is full again.
  void resume() {
    turn_scope turn{w};
    operator_scope running{slot, name};
    down->on_flush();
    e_.budget = emit_turn_records;
    if (!run()) return suspend();
    while (!held_.empty()) {
      held h = std::move(held_.front());
      held_.pop_front();
      switch (h.k) {
        case held::kind::record:
          begin(h.in, std::move(*h.r));
          if (!run()) return suspend();
          break;
        case held::kind::progress: down->on_progress(h.in, h.t); break;
        case held::kind::end: down->on_end(h.in); break;
      }
    }
    suspended_ = false;
    down->on_flush();
  }

  flat_map_emission<U, P> e_;
  std::optional<typename flat_map_place<T, F, emit_form>::type> place_;
  fiber_call fiber_;  // emit form only; no fiber is created before the first input
  bool suspended_ = false;
  std::deque<held> held_;
  std::optional<boost::asio::steady_timer> timer_;
};

}  // namespace rill::detail

// rill/operators/resumable.hpp — calls of an operator instance that may emit any number
// of records, stopped when downstream is not ready and continued on a later loop turn.
//
// Defines (internals of the DSL, in rill::detail):
//   rill::detail::fiber_call            runs a call on a stack of its own that may stop
//                                       midway (yield) and be continued later
//   rill::detail::stage_call<In>        one input of a single-input stage kept for later:
//                                       a record, a progress marker, an end, a tick, a firing
//   rill::detail::resumable_stage<D, Op>  what a firing operator (window_sort, the keyed
//                                       windows, the joins) builds its instance on: the
//                                       fiber its calls run on, the inputs held while it
//                                       is suspended, and the handlers that continue it
//
// Example (namespace scope, compiled by tests/banner_examples.py; an operator that emits
// each int x as x copies of itself, suspending whenever its downstream is not ready):
//   struct repeat final : rill::stage_in<int>,
//                         rill::detail::resumable_stage<repeat, rill::detail::stage_call<int>> {
//     using call = rill::detail::stage_call<int>;
//     rill::stage_in<int>* down = nullptr;
//     explicit repeat(rill::worker* w) : resumable_stage(w) {}
//     ~repeat() override { this->unwind(); }
//     void on_record(std::size_t in, rill::record<int>&& r) override {
//       submit({call::kind::record, in, {}, {}, std::move(r)});
//     }
//     void on_progress(std::size_t in, rill::event_time t) override {
//       submit({call::kind::progress, in, t, {}, std::nullopt});
//     }
//     void on_end(std::size_t in) override { submit({call::kind::end, in, {}, {}, std::nullopt}); }
//     bool on_flush() override { return down->on_flush() && !busy(); }
//     bool ready() override { return !busy() && down->ready(); }
//     void run_call(call& c) {  // on the fiber; gate() before each output
//       if (c.k == call::kind::progress) return down->on_progress(c.in, c.t);
//       if (c.k == call::kind::end) return down->on_end(c.in);
//       for (int i = 0; i < c.r->value; ++i) {
//         gate();
//         down->on_record(c.in, rill::record<int>{c.r->value, c.r->time});
//       }
//     }
//     bool down_ready() { return down->ready(); }
//     bool down_flush() { return down->on_flush(); }
//   };
//
// Bounded emission (docs/design.md "Bounded emission"). A call that may emit without bound
// (a window firing all its keys, a join emitting a key's pairs) runs on a fiber; before
// each record it sends downstream it calls gate(), which returns at once while the turn's
// budget (`emit_turn_records` records) lasts and downstream is ready(), and otherwise
// switches back to the worker's loop: the stage is suspended. It continues on a later
// turn, right after that gate() — in the middle of its window, at the next key — in a
// posted handler when the last attempt emitted something, else after `emit_retry` (the
// worker sleeps in its loop; it never blocks and never spins). While suspended, the stage
// holds the inputs that still arrive, in order, and runs them after the call in progress,
// so a watermark never overtakes the records before it; `ready()` and `on_flush()` of the
// stage return false meanwhile (busy()), so every upstream stops at its next check and
// the held inputs are at most one source slice or one exchange batch per input. The
// state the suspended call is iterating does not change meanwhile: no other call enters
// the operator's state machine until it finished.
//
// Why a fiber and not a cursor per operator: a firing loop's place (a hash table
// iterator, the window being merged, the session timer bucket) is the loop's own frame;
// keeping that frame costs one stack per instance, mapped lazily, and no operator's state
// machine changes. A window stage runs on the fiber only calls that may emit: a record
// that arrives on time and a progress marker that make nothing due are taken on the
// loop's stack (no switch). A join takes a record on the loop's stack when it gives at
// most 8 results after downstream's ready() (<rill/operators/join.hpp>).
//
// Thread safety: an instance and its fiber live on one worker; every member is called on
// that worker's thread. Errors: an exception from a call (a user function, the sink) is
// caught on the fiber and rethrown on the worker's stack, where the runtime's "fail"
// policy stops the run. A stage destroyed while a call is suspended unwinds the call's
// frames with Boost.Context's forced_unwind (unwind()): code on the call's path must not
// swallow it (a user function's `catch (...)` must rethrow).
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <utility>

#include "rill/core/record.hpp"
#include "rill/core/sanitizers.hpp"
#include "rill/core/stage.hpp"
#include "rill/core/time.hpp"
#include "rill/core/worker.hpp"

#if RILL_ASAN
#define RILL_FIBER_ASAN 1
#include <sanitizer/common_interface_defs.h>
#endif
#if RILL_TSAN
#define RILL_FIBER_TSAN 1
#include <sanitizer/tsan_interface.h>
#endif

// Marks the functions between an operator's entry and the stack switch: inlined into the
// operator (fiber_call::start says why). Not under a sanitizer: TSan's and ASan's fiber
// bookkeeping follows function entries and exits, which must then stay on their own side
// of the switch (inlined, TSan reported races on the fiber object itself).
#if RILL_FIBER_TSAN || RILL_FIBER_ASAN
#define RILL_FIBER_SWITCH_INLINE
#else
#define RILL_FIBER_SWITCH_INLINE [[gnu::always_inline]]
#endif

namespace rill::detail {

/// Records one suspendable emitter (flat_map, a firing window, a join) sends in one loop
/// turn before it lets other handlers of its worker run (it continues on the next turn).
inline constexpr std::size_t emit_turn_records = 4096;
/// Delay before a suspended emitter looks at its downstream again after an attempt that
/// emitted nothing (downstream full).
inline constexpr std::chrono::microseconds emit_retry{100};
/// Stack of a fiber, bytes (mapped lazily: untouched pages cost nothing; a guard page
/// below it turns an overflow into a fault).
inline constexpr std::size_t fiber_stack_bytes = 256 * 1024;

/// A call that runs on a stack of its own and may stop midway: `start` enters it,
/// `yield` (from inside) goes back to whoever entered it, `resume` continues it. One
/// fiber serves every call in turn (no stack allocated per call). Confined to one thread
/// at a time; not movable (the fiber refers to it).
class fiber_call {
 public:
  fiber_call() = default;
  fiber_call(const fiber_call&) = delete;
  fiber_call& operator=(const fiber_call&) = delete;
  ~fiber_call() {
    if (!fiber_) return;
    if (!fn_) {  // idle between calls: let the loop return normally
      stopping_ = true;
      enter();
    } else {  // suspended mid-call: Boost.Context unwinds it with forced_unwind
      before_in();
      fiber_ = boost::context::fiber{};
      after_out();
      after_final();
    }
#if RILL_FIBER_TSAN
    __tsan_destroy_fiber(tsan_fiber_);
#endif
  }

  /// Starts `fn(arg)` on the fiber. Returns true when it returned, false when it yielded
  /// (call resume() later). Precondition: no call in progress. Rethrows what fn threw.
  ///
  /// start(), resume() and enter() are inlined into their caller: the stack switch leaves
  /// the CPU's return-address predictions one call off, so every function return between
  /// the switch and the operator's own code is mispredicted (perf: 5 % of a 1:1 flat_map's
  /// time when they were calls of their own).
  RILL_FIBER_SWITCH_INLINE bool start(void (*fn)(void*), void* arg) {
    fn_ = fn;
    arg_ = arg;
    if (!fiber_) create();
    enter();
    return finish();
  }
  /// Continues the call in progress; same result as start().
  RILL_FIBER_SWITCH_INLINE bool resume() {
    enter();
    return finish();
  }
  /// From inside the call only: back to the start()/resume() that entered it.
  void yield() {
    before_out();
    caller_ = std::move(caller_).resume();
    after_in();
  }
  bool in_call() const noexcept { return fn_ != nullptr; }

 private:
  struct stack {  // protected_fixedsize_stack that tells the owner where the stack is (ASan)
    boost::context::protected_fixedsize_stack inner{fiber_stack_bytes};
    fiber_call* owner;
    boost::context::stack_context allocate() {
      auto sc = inner.allocate();
      owner->stack_bottom_ = static_cast<char*>(sc.sp) - sc.size;
      owner->stack_size_ = sc.size;
      return sc;
    }
    void deallocate(boost::context::stack_context& sc) noexcept { inner.deallocate(sc); }
  };

  void create() {
#if RILL_FIBER_TSAN
    tsan_fiber_ = __tsan_create_fiber(0);
#endif
    fiber_ = boost::context::fiber{std::allocator_arg, stack{{}, this}, [this](boost::context::fiber&& c) {
      caller_ = std::move(c);
      after_in();
      while (!stopping_) {
        try {
          fn_(arg_);
        } catch (const boost::context::detail::forced_unwind&) {  // ~fiber_call mid-call
          after_in();  // the unwind entered the fiber without passing yield()'s return
          before_final();
          throw;
        } catch (...) {
          error_ = std::current_exception();
        }
        fn_ = nullptr;
        arg_ = nullptr;
        if (stopping_) break;
        yield();
      }
      before_final();
      return std::move(caller_);
    }};
  }
  RILL_FIBER_SWITCH_INLINE void enter() {
    before_in();
    fiber_ = std::move(fiber_).resume();
    after_out();
    if (!fiber_) after_final();  // the fiber's function returned (only when stopping)
  }
  RILL_FIBER_SWITCH_INLINE bool finish() {
    if (error_) {
      fn_ = nullptr;
      arg_ = nullptr;
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
    return fn_ == nullptr;
  }

  // Sanitizer bookkeeping of the stack switches (no code without a sanitizer).
  void before_in() {
#if RILL_FIBER_TSAN
    tsan_caller_ = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(tsan_fiber_, 0);
#endif
#if RILL_FIBER_ASAN
    __sanitizer_start_switch_fiber(&caller_fake_, stack_bottom_, stack_size_);
#endif
  }
  void after_out() {
#if RILL_FIBER_ASAN
    __sanitizer_finish_switch_fiber(caller_fake_, nullptr, nullptr);
#endif
  }
  void before_out() {
#if RILL_FIBER_TSAN
    __tsan_switch_to_fiber(tsan_caller_, 0);
#endif
#if RILL_FIBER_ASAN
    __sanitizer_start_switch_fiber(&fiber_fake_, caller_bottom_, caller_size_);
#endif
  }
  void after_in() {
#if RILL_FIBER_ASAN
    __sanitizer_finish_switch_fiber(fiber_fake_, &caller_bottom_, &caller_size_);
#endif
  }
  // The fiber's last switch out. ThreadSanitizer stays on the fiber's state until the
  // caller has control again (after_final): the frames that return after this point (the
  // fiber's function, Boost.Context's entry record) were entered on the fiber, and their
  // exits on the caller's shadow stack would pop frames the caller never pushed (a thread
  // that destroys fibers would underflow it).
  void before_final() {
#if RILL_FIBER_ASAN
    __sanitizer_start_switch_fiber(nullptr, caller_bottom_, caller_size_);
#endif
  }
  void after_final() {
#if RILL_FIBER_TSAN
    __tsan_switch_to_fiber(tsan_caller_, 0);
#endif
  }

  boost::context::fiber fiber_, caller_;
  void (*fn_)(void*) = nullptr;
  void* arg_ = nullptr;
  std::exception_ptr error_;
  bool stopping_ = false;
  [[maybe_unused]] const void* stack_bottom_ = nullptr;
  [[maybe_unused]] std::size_t stack_size_ = 0;
#if RILL_FIBER_ASAN
  void* caller_fake_ = nullptr;
  void* fiber_fake_ = nullptr;
  const void* caller_bottom_ = nullptr;
  std::size_t caller_size_ = 0;
#endif
#if RILL_FIBER_TSAN
  void* tsan_fiber_ = nullptr;
  void* tsan_caller_ = nullptr;
#endif
};

/// One input of a single-input stage, run now or held while the stage is suspended:
/// `record` (r set), `progress` (t: the input's frontier), `end`, `tick` (now: processing
/// time), `fire` (what a record folded on the loop's stack made due). `in`: the logical
/// input.
template <class In, class P = acked>
struct stage_call {
  enum class kind : std::uint8_t { record, progress, end, tick, fire } k;
  std::size_t in = 0;
  event_time t{};
  steady_time now{};
  std::optional<record<In, P>> r;
};

/// The base of an operator instance whose calls may emit without bound (see the banner).
/// `Derived` provides, all on its worker:
///   void run_call(Op&)  runs one input; calls gate() before each record it sends down
///   bool down_ready()   its downstream's ready()
///   bool down_flush()   its downstream's on_flush()
/// and calls unwind() first in its destructor (the call's frames refer to its members).
/// Derived is owned by a std::shared_ptr (build_context::make): the handlers that continue
/// it hold weak references, so a run that ends while it is suspended drops them.
template <class Derived, class Op>
class resumable_stage : public std::enable_shared_from_this<Derived> {
 public:
  /// `w`: the worker the instance lives on (its loop runs the continuations).
  explicit resumable_stage(worker* w) noexcept : w_(w) {}
  resumable_stage(const resumable_stage&) = delete;
  resumable_stage& operator=(const resumable_stage&) = delete;

  /// True while a call is suspended or inputs are held: the stage takes no input now
  /// (it holds it) and its ready() and on_flush() must answer false.
  bool busy() const noexcept { return suspended_ || !held_.empty(); }

 protected:
  ~resumable_stage() = default;

  /// Runs `op` on the fiber now, or holds it (in arrival order) while busy().
  void submit(Op&& op) {
    if (busy()) return hold(std::move(op));
    budget_ = emit_turn_records;
    if (!start(std::move(op))) suspend();
  }
  /// Keeps `op` for after the call in progress. Precondition: busy() (or the caller
  /// knows that no call runs and submit() would start it instead).
  void hold(Op&& op) { held_.push_back(std::move(op)); }

  /// Inside run_call only, before each record sent downstream: returns when the record
  /// may go (budget left and downstream ready), switching back to the loop until then.
  void gate() {
    while (budget_ == 0 || !self().down_ready()) fiber_->yield();
    --budget_;
  }

  /// Destroys the fiber, unwinding a suspended call (forced_unwind). Derived's destructor
  /// calls it first.
  void unwind() noexcept { fiber_.reset(); }

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }

  // Inlined into submit() with the fiber switch (fiber_call::start).
  RILL_FIBER_SWITCH_INLINE bool start(Op&& op) {
    cur_.emplace(std::move(op));
    if (!fiber_) fiber_.emplace();
    return finished(fiber_->start(&call, this));
  }
  static void call(void* p) {
    auto* s = static_cast<resumable_stage*>(p);
    s->self().run_call(*s->cur_);
  }
  RILL_FIBER_SWITCH_INLINE bool finished(bool done) {
    if (done) cur_.reset();
    return done;
  }

  void suspend() {
    suspended_ = true;
    const bool progressed = budget_ != emit_turn_records;
    self().down_flush();  // what an exchange holds goes out now where it can
    std::weak_ptr<Derived> weak = this->weak_from_this();
    if (progressed) {
      boost::asio::post(w_->context(), [weak] {
        if (auto s = weak.lock()) static_cast<resumable_stage&>(*s).resume();
      });
    } else {
      if (!timer_) timer_.emplace(w_->context());
      timer_->expires_after(emit_retry);
      timer_->async_wait([weak](const boost::system::error_code& ec) {
        if (auto s = weak.lock(); s && !ec) static_cast<resumable_stage&>(*s).resume();
      });
    }
  }
  /// A later loop turn: continue the call in progress, then run what was held, in
  /// order, until done or downstream is full again.
  void resume() {
    turn_scope turn{w_};
    self().down_flush();
    budget_ = emit_turn_records;
    if (!finished(fiber_->resume())) return suspend();
    while (!held_.empty()) {
      Op op = std::move(held_.front());
      held_.pop_front();
      if (!start(std::move(op))) return suspend();
    }
    suspended_ = false;
    self().down_flush();
  }

  worker* w_;
  std::size_t budget_ = 0;  // records left in this loop turn
  bool suspended_ = false;
  std::optional<Op> cur_;  // the input the call in progress runs
  std::deque<Op> held_;
  std::optional<boost::asio::steady_timer> timer_;
  std::optional<fiber_call> fiber_;  // made on the first call; last member: unwound first
};

}  // namespace rill::detail

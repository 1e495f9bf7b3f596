// rill/core/worker.hpp — one worker: one thread running one boost::asio::io_context.
//
// Defines:
//   rill::worker          one event-loop thread; the runtime owns its workers, operator code
//                         reaches its worker through build_context::w to post to its loop
//   rill::worker_stats    the worker's time accounting (busy, backpressured) and stalls
//   rill::turn_scope      times one loop turn (a source slice, an exchange batch, a tick)
//   rill::operator_scope  names the operator running now, for the stall detector
//
// Example (compiled by tests/banner_examples.py):
//   rill::worker w{0, /*node=*/0, /*cpu=*/-1};
//   w.start();
//   boost::asio::post(w.context(), [] { std::puts("on the worker"); });
//   w.stop_and_join();
//
// docs/design.md "Runtime": the io_context is created with concurrency hint 1 (one thread runs
// it), the thread is pinned to `cpu` when cpu >= 0 (a real topology), unpinned otherwise.
// Everything an operator instance does happens on this thread: no locks in operator code.
//
// Thread safety: context(), id(), node() from any thread. start()/stop_and_join() from the
// owning (runtime) thread only. An exception escaping a handler is caught, recorded
// (error()), and stops the worker's loop.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace rill {

/// One stall: a loop turn of `duration` on `worker` while operator `op` ran (the operator
/// the stall detector saw running once the turn passed the threshold; "" if none was
/// marked: runtime work outside any operator, which the stderr line says in words).
struct stall_event {
  std::size_t worker = 0;
  std::string op;
  std::chrono::nanoseconds duration{0};
};

/// Time accounting of one worker (Flink's busyTimeMsPerSecond / backPressuredTimeMsPerSecond
/// family, as cumulative nanoseconds: a reader takes the difference of two samples).
/// Written by the worker only (relaxed load+store); the first line is read by the stall
/// watchdog on the control thread, the second written by it. Any thread may read.
struct worker_stats {
  alignas(64) std::atomic<std::int64_t> turn_start_ns{0};  ///< steady ns; 0 = between turns
  std::atomic<const std::string*> op{nullptr};             ///< operator running now
  std::atomic<std::uint64_t> busy_ns{0};           ///< time inside timed turns
  std::atomic<std::uint64_t> backpressured_ns{0};  ///< sources of this worker blocked by a full queue
  std::atomic<std::uint64_t> turns{0}, stalls{0}, stall_ns{0};
  alignas(64) std::atomic<std::int64_t> sampled_turn{0};   ///< watchdog: turn it sampled
  std::atomic<const std::string*> sampled_op{nullptr};     ///< watchdog: op it saw then
};

/// Steady-clock nanoseconds (the clock of worker_stats).
inline std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// One event-loop thread (see the banner). Not copyable, not movable: stages keep
/// references to it.
class worker {
 public:
  /// `id`: 0-based worker index; `node`: its NUMA node (topology::placement::node);
  /// `cpu`: OS cpu to pin to, or -1 for unpinned. Creates the io_context; starts no
  /// thread. Any thread. Throws only std::bad_alloc / what asio's io_context throws.
  worker(std::size_t id, std::size_t node, int cpu) : id_(id), node_(node), cpu_(cpu), ctx_(1) {}
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;
  /// stop_and_join(): blocks until the thread ended. Not from the worker's own thread.
  ~worker() { stop_and_join(); }

  /// The 0-based worker index. Any thread.
  std::size_t id() const noexcept { return id_; }
  /// The worker's NUMA node (synthetic or real), looked up once at placement. Any thread.
  std::size_t node() const noexcept { return node_; }
  /// The OS cpu the thread is pinned to, or -1 (unpinned). Any thread.
  int cpu() const noexcept { return cpu_; }
  /// The worker's io_context: post work to it from any thread (boost::asio::post); only
  /// the worker's thread runs it.
  boost::asio::io_context& context() noexcept { return ctx_; }

  /// Starts the thread; the loop runs until stop_and_join(). Pins when cpu >= 0; a
  /// failed pin (cpu not in this process's affinity mask) leaves the thread unpinned.
  /// Owning (runtime) thread only, once. Throws std::system_error if no thread starts.
  void start();
  /// Lets the loop finish the handlers already queued, then joins. Blocks the caller
  /// until then. Owning thread only, never the worker's own thread. Idempotent.
  void stop_and_join();
  /// The exception that stopped the loop, if any. Valid after stop_and_join(). Any
  /// thread.
  std::exception_ptr error() const {
    std::lock_guard lk(mu_);
    return error_;
  }
  /// Time accounting and stall counters. Written by this worker; read from any thread.
  worker_stats& stats() noexcept { return stats_; }
  const worker_stats& stats() const noexcept { return stats_; }
  /// Whether loop turns are timed (the runtime turns it on when the stall detector or the
  /// metrics endpoint is on). Set before start(); then read-only.
  bool timed() const noexcept { return timed_; }
  /// Stall threshold; 0 = no stall detection. Set before start().
  std::chrono::nanoseconds stall_threshold() const noexcept { return stall_threshold_; }
  /// The stalls of this run so far (copied under a mutex). Any thread.
  std::vector<stall_event> stalls() const {
    std::lock_guard lk(mu_);
    return stall_events_;
  }
  /// Ends the turn that began at `start_ns` (turn_scope's destructor): adds its time to
  /// busy_ns and, when it lasted at least the stall threshold, counts a stall and prints
  /// one line on stderr ("rill: stall: worker W ran operator 'OP' for S s in one loop turn
  /// (threshold T ms)"; with no operator marked, "... ran runtime work outside any operator
  /// (an exchange drain, a flush, a timer) for S s ..."). The worker's thread only.
  void end_turn(std::int64_t start_ns) noexcept;

 private:
  std::size_t id_, node_;
  int cpu_;
  boost::asio::io_context ctx_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::exception_ptr error_;
  friend class runtime;
  std::function<void()> on_error_;  // set by the runtime before start()
  worker_stats stats_;
  bool timed_ = false;
  std::chrono::nanoseconds stall_threshold_{0};
  std::vector<stall_event> stall_events_;  // under mu_
};

/// Times one loop turn of `w` (RAII): the outermost scope on the thread counts, nested
/// ones are free. Nothing when w is null or its turns are not timed. Two steady-clock
/// reads per turn. The worker's thread only; noexcept.
///   void step() { rill::turn_scope turn{&w_}; ... }
class turn_scope {
 public:
  explicit turn_scope(worker* w) noexcept {
    if (w && w->timed() && w->stats().turn_start_ns.load(std::memory_order_relaxed) == 0) {
      w_ = w;
      start_ = steady_ns();
      w->stats().turn_start_ns.store(start_, std::memory_order_relaxed);
    }
  }
  ~turn_scope() {
    if (w_) w_->end_turn(start_);
  }
  turn_scope(const turn_scope&) = delete;
  turn_scope& operator=(const turn_scope&) = delete;

 private:
  worker* w_ = nullptr;
  std::int64_t start_ = 0;
};

/// Marks `name` as the operator running on the worker that owns `slot` (RAII; restores
/// the previous one). `slot` null (stall detection off): nothing. Two relaxed stores.
/// The slot's worker thread only; `name` must outlive the scope (a stage's own name).
class operator_scope {
 public:
  operator_scope(std::atomic<const std::string*>* slot, const std::string* name) noexcept : slot_(slot) {
    if (slot_) {
      prev_ = slot_->load(std::memory_order_relaxed);
      slot_->store(name, std::memory_order_relaxed);
    }
  }
  ~operator_scope() {
    if (slot_) slot_->store(prev_, std::memory_order_relaxed);
  }
  operator_scope(const operator_scope&) = delete;
  operator_scope& operator=(const operator_scope&) = delete;

 private:
  std::atomic<const std::string*>* slot_;
  const std::string* prev_ = nullptr;
};

/// The operator slot of `w` for operator_scope: null when w is null or not detecting
/// stalls (then operator_scope costs one branch).
inline std::atomic<const std::string*>* operator_slot(worker* w) noexcept {
  return w && w->stall_threshold().count() > 0 ? &w->stats().op : nullptr;
}

/// The worker whose thread is calling, or nullptr on a non-worker thread. Any thread,
/// noexcept, O(1) (a thread-local).
worker* this_worker() noexcept;

}  // namespace rill

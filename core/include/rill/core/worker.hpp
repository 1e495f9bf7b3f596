// rill/core/worker.hpp — one worker: one thread running one boost::asio::io_context.
//
// Defines rill::worker. The runtime owns its workers; operator code reaches its worker
// through build_context::w, to post work to its own loop.
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

#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace rill {

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
};

/// The worker whose thread is calling, or nullptr on a non-worker thread. Any thread,
/// noexcept, O(1) (a thread-local).
worker* this_worker() noexcept;

}  // namespace rill

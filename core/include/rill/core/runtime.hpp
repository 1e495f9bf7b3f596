// rill/core/runtime.hpp — workers on a topology, and running a job to its end.
//
// Defines:
//   rill::runtime_options   how many workers, which topology, pinning, signals
//   rill::runtime           owns the workers; run(job) blocks until end of stream or stop
//   (rill::run_options      per run: stop when idle, progress callback; run_control.hpp)
//   rill::job               a complete pipeline (source ... sink), type-erased
//   rill::job_builder       what a job's build function uses to instantiate itself
//   rill::run_report        stage counters, errors, stalls, elapsed time, the metrics
//
// Example (compiled by tests/banner_examples.py):
//   #include <rill/operators/stream.hpp>
//   rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores"}};
//   rill::job j = rill::from(rill::vector_source<int>{{{1, rill::event_time{1s}},
//                                                      {2, rill::event_time{2s}},
//                                                      {3, rill::event_time{3s}}}})
//                     .map([](int x) { return x * 2; })
//                     .sink([](int x) { std::cout << x << '\n'; });
//   rill::run_report rep = rt.run(j);      // returns when every sink saw end of stream
//   rt.run(j, {.stop_when_idle = 3s});     // or: a graceful stop 3 s after the last record
//
// Life of a run (docs/design.md "Runtime"): the job is instantiated on the calling thread —
// one chain instance per worker, sources on the workers their splits are assigned to
// (split i on worker i mod workers) — then every worker thread runs its io_context
// (concurrency hint 1). run() returns when every sink instance has seen end of stream.
// request_stop() (or SIGINT/SIGTERM when handle_signals, or run_options::stop_when_idle)
// makes every source end early: in-flight records drain, windows fire, sinks flush, and
// run() returns normally with report.stopped = true. A stop requested while no run is in
// progress (a signal between constructing the runtime and run()) is kept: the next run()
// stops at once, gracefully. Each run() consumes the stop request when it returns.
//
// The control thread: one more thread per runtime, started by the constructor when
// handle_signals and otherwise by the first run() that needs it (stop_when_idle, a
// progress callback, the stall detector or the memory release); it runs until the runtime
// is destroyed. It catches the signals, samples the input for stop_when_idle, calls the
// progress callback, and gives the C allocator's free pages back to the system when they
// exceed memory_release_slack (rill/core/memory_release.hpp). Nothing of the job runs on it.
//
// Errors: the constructor throws rill::config_error for bad options (key "runtime.workers":
// more than max_workers; "runtime.topology"); an exception thrown by user code on a worker stops the run and is
// rethrown by run() after every worker has joined. Source read errors (a truncated
// capture) do not throw: they are in report.errors, after the records before them went
// through the pipeline.
//
// Observability (docs/design.md "Metrics"): runtime::metrics() is the registry of user
// metrics (one cell per worker); metrics_port > 0 serves every stage's counters, the
// workers' time accounting, stalls and the registry in the Prometheus text format 0.0.4
// at http://metrics_address:metrics_port/metrics, on a thread of its own
// (rill::prometheus_server, never a worker). stall_threshold > 0 times every loop turn: one that lasts longer is
// reported once on stderr and in run_report::stalls, with the operator that was running.
//
// Thread safety: run() from one thread at a time. request_stop() from any thread, and from
// a signal handler context (it only sets an atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rill/core/memory_release.hpp"
#include "rill/core/metrics.hpp"
#include "rill/core/prometheus_server.hpp"
#include "rill/core/run_control.hpp"
#include "rill/core/stage.hpp"
#include "rill/core/topology.hpp"
#include "rill/core/worker.hpp"

namespace rill {

/// The most workers a runtime takes (runtime_options::workers). A key_by exchange is a
/// full mesh: it keeps state per (producer, consumer) pair and sends every consumer a
/// progress and an end-of-stream marker from every producer, so a job's fixed cost grows
/// with workers^2 (about a million pairs here) however few records it has, and every
/// marker may wake a sleeping worker. Beyond this, oversubscribed workers (many per core)
/// spend their run on the mesh: bench/RESULTS.md "Many workers on 2 cores" has the
/// measurements behind the number.
inline constexpr std::size_t max_workers = 1024;

struct runtime_options {
  /// Worker threads, 1..max_workers; 0 = one per core of the topology. More workers than
  /// cores run, sharing the cores (slower, with more stall reports).
  std::size_t workers = 0;
  /// "" = discover with hwloc; otherwise a synthetic topology, e.g. "2 nodes x 2 cores".
  std::string topology{};
  /// Pin workers to cores (real topologies only).
  bool pin = true;
  /// Catch SIGINT/SIGTERM from construction until destruction (Boost.Asio signal_set on
  /// the control thread): a signal = request_stop(), a graceful stop of the current or
  /// the next run. A second signal while that stop is still pending ends the process at
  /// once, by the signal's default action (a note on stderr first): Ctrl-C twice always
  /// stops, even when draining takes long. Off: the signals keep their dispositions
  /// (default: terminate).
  bool handle_signals = false;
  /// Period of worker tickers (idle-input detection), processing time.
  std::chrono::milliseconds tick{50};
  /// TCP port of the Prometheus endpoint (GET /metrics); 0 = off. Bound by the
  /// constructor: a port in use throws config_error("runtime.metrics_port").
  std::uint16_t metrics_port = 0;
  /// Address the endpoint binds; loopback unless the scraper runs on another host.
  std::string metrics_address = "127.0.0.1";
  /// A worker loop turn at least this long is a stall (Seastar's reactor stall detector):
  /// counted, printed once on stderr and listed in run_report::stalls. 0 = off.
  std::chrono::milliseconds stall_threshold{100};
  /// How often the control thread reads the C allocator's free bytes during a run
  /// (rill/core/memory_release.hpp); 0 = never. Each check costs a mallinfo2() call.
  std::chrono::milliseconds memory_release_interval{5000};
  /// Free bytes the allocator may keep: when a check finds more, and the resident set
  /// beyond the bytes in use grew by half this since the last release, it gives every
  /// whole free page back to the system (malloc_trim), as jemalloc's dirty-page decay
  /// does. The resident set then stays within about 1.5 x this of the bytes in use plus
  /// the process's other memory (code, stacks, mapped files). A release takes about
  /// 1 ms per MiB it gives back, under one arena's lock at a time: a worker allocating
  /// from the arena being released waits (docs/design.md "Memory release").
  std::size_t memory_release_slack = std::size_t{16} << 20;
};

struct run_report {
  std::vector<stage_totals> stages;
  std::vector<std::string> errors;  ///< source errors, in the order they happened
  bool stopped = false;             ///< ended by request_stop()/signal, not end of stream
  double elapsed_s = 0;
  /// Stalls of this run (runtime_options::stall_threshold), in the order they ended.
  std::vector<stall_event> stalls;
  /// Times the control thread gave the allocator's free pages back during this run
  /// (runtime_options::memory_release_interval), and by how many bytes the resident set
  /// shrank in those calls.
  std::uint64_t memory_releases = 0;
  std::uint64_t memory_released_bytes = 0;
  /// The runtime's registry (runtime::metrics()): typed access, e.g.
  /// rep.metrics->merged(latency_id).quantile(0.99). Never null after run().
  std::shared_ptr<const metrics_registry> metrics;
  /// Totals of the stage called `name` (zeros if none).
  stage_totals stage(const std::string& name) const {
    for (const auto& s : stages)
      if (s.name == name) return s;
    return stage_totals{name};
  }
};

class runtime;

/// Used by a job's build function; see job. Build time only (the thread calling run()).
class job_builder {
 public:
  explicit job_builder(runtime& rt);
  std::size_t workers() const noexcept;
  runtime& rt() noexcept { return rt_; }
  job_metrics& metrics() noexcept { return *metrics_; }
  /// A context for building an instance with `inputs` inputs on `worker_id`.
  build_context context(std::size_t worker_id, std::size_t inputs);
  /// Runs `fn` on `worker_id`'s loop when the run starts (sources start here).
  void on_start(std::size_t worker_id, std::function<void()> fn);
  /// Runs `fn` after every source chain was built, last registered first (exchange
  /// consumers are built here, once all their producers are known).
  void add_finalizer(std::function<void()> fn) { finalizers_.push_back(std::move(fn)); }
  /// One more sink instance the run waits for.
  void expect_sink() noexcept { ++sinks_; }
  /// One more draining source split (core/source.hpp, draining_reader) whose close, its
  /// final commit, the run waits for; the split calls build_context::drain_done.
  void expect_drain() noexcept { ++drains_; }

 private:
  friend class runtime;
  runtime& rt_;
  std::shared_ptr<job_metrics> metrics_;
  std::vector<std::shared_ptr<void>> keep_alive_;
  std::vector<std::pair<std::size_t, std::function<void()>>> starts_;
  std::vector<std::function<void()>> finalizers_;
  std::vector<std::vector<std::function<void(steady_time)>>> tickers_;
  std::size_t sinks_ = 0, drains_ = 0;
};

/// A complete pipeline. Made by the DSL (`stream<T>::sink`); reusable: each run()
/// instantiates it afresh.
class job {
 public:
  explicit job(std::function<void(job_builder&)> build) : build_(std::move(build)) {}
  void build(job_builder& b) const { build_(b); }

 private:
  std::function<void(job_builder&)> build_;
};

class runtime {
 public:
  /// Throws config_error: "runtime.workers" when the workers (those given, or one per core
  /// for 0) are more than max_workers, naming the value and the range;
  /// "runtime.topology" on a bad topology spec; "runtime.metrics_port" when the port is
  /// in use.
  explicit runtime(runtime_options opts = {});
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  const rill::topology& topo() const noexcept { return topo_; }
  /// ceil(workers / CPUs this process may run on (sched_getaffinity)), >= 1: how many
  /// workers share a CPU. Fixed at construction. Any thread.
  std::size_t workers_per_cpu() const noexcept { return workers_per_cpu_; }
  std::size_t worker_count() const noexcept { return placement_.size(); }
  /// Node of worker i (synthetic or real).
  std::size_t node_of(std::size_t worker_id) const { return placement_.at(worker_id).node; }
  worker& worker_at(std::size_t i) { return *workers_.at(i); }

  /// Runs `j` to end of stream (or until request_stop()). Blocks the calling thread.
  /// `o`: stop when idle and the progress callback, see run_options.
  run_report run(const job& j, const run_options& o = {});

  /// Asks every source to end early; the run then drains and returns. Without a run in
  /// progress the request is kept for the next run(). Any thread, signal handlers too.
  void request_stop() noexcept;
  bool stop_requested() const noexcept { return stop_.load(std::memory_order_acquire); }
  /// Whether every sink instance of the current run has seen the end of all its inputs
  /// (nothing downstream acknowledges a record after that). Any thread.
  bool sinks_finished() const noexcept { return sinks_left_.load() == 0; }
  /// A source read error, recorded into the report. Any thread.
  void report_error(std::string message);

  /// The registry of user metrics: register at any time (add_*), write each worker's
  /// cell on that worker, read anywhere; exposed on the metrics endpoint and in every
  /// run_report. Cells keep counting across runs (Prometheus counters never reset).
  metrics_registry& metrics() noexcept { return *metrics_; }
  /// The port the metrics endpoint listens on; 0 when off. Any thread.
  std::uint16_t metrics_port() const noexcept;
  /// The Prometheus text exposition the endpoint serves, as of now. Any thread.
  std::string prometheus_text();

 private:
  friend class job_builder;
  struct control;
  struct scrape_state;
  void sink_finished();
  void drain_finished();
  void maybe_all_done();
  control& control_loop();
  std::unique_ptr<worker> make_worker(std::size_t i) const;

  runtime_options opts_;
  rill::topology topo_;
  std::vector<topology::placement> placement_;
  std::vector<std::unique_ptr<worker>> workers_;
  std::size_t workers_per_cpu_ = 1;
  std::atomic<bool> stop_{false};
  /// The run ends when both are 0: every sink ended, every draining source split closed.
  std::atomic<std::size_t> sinks_left_{0}, drains_left_{0};
  std::mutex mu_;
  std::vector<std::string> errors_;
  std::function<void()> on_all_done_;
  std::unique_ptr<control> control_;  // the control thread, see the banner
  std::shared_ptr<metrics_registry> metrics_;
  std::shared_ptr<job_metrics> running_;  // under mu_: the current run's stages
  std::int64_t run_start_ns_ = 0;         // under mu_
  std::unique_ptr<scrape_state> scrape_;  // the previous scrape, for per-second gauges
  std::unique_ptr<prometheus_server> endpoint_;  // the metrics thread, see the banner
  // Memory releases over the runtime's life: counted by the control thread, read by the
  // metrics endpoint.
  std::shared_ptr<memory_release_totals> releases_ = std::make_shared<memory_release_totals>();
};

}  // namespace rill

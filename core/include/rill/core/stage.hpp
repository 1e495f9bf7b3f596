// rill/core/stage.hpp — the interface every operator instance implements, and the
// context a stage is built in.
//
// Defines:
//   rill::stage_in<T>       consumer side of one operator instance: records, event-time
//                           progress and end-of-input, all on the instance's worker
//   rill::stage_counters    per stage and worker: records in/out, late, errors, watermark
//   rill::stage_kind        source or operator (how the metrics endpoint names its counts)
//   rill::job_metrics       every stage's counters of one run, and the gauges and
//                           summaries connectors read when the metrics are exposed
//   rill::metrics_provider<S>  a source or shared sink that registers metrics of its own
//   rill::build_context     what a stage factory sees while the runtime instantiates a job
//
// Example (namespace scope, compiled by tests/banner_examples.py; an operator that
// doubles ints; the DSL in <rill/operators/stream.hpp> writes these for you):
//   struct doubler final : rill::stage_in<int> {
//     rill::stage_in<int>* down = nullptr;
//     void on_record(std::size_t in, rill::record<int>&& r) override {
//       r.value *= 2; down->on_record(in, std::move(r));
//     }
//     void on_progress(std::size_t in, rill::event_time t) override { down->on_progress(in, t); }
//     void on_end(std::size_t in) override { down->on_end(in); }
//     bool on_flush() override { return down->on_flush(); }
//   };
//
// Protocol (per instance, all calls on the instance's worker thread, never concurrently):
//   - `input` numbers the logical inputs of this instance, 0 .. inputs-1 (ctx.inputs when
//     it was built). An input is one source split, or one upstream instance.
//   - on_progress(input, t): that input has seen event times up to t (its frontier).
//     Frontiers of one input never decrease. Downstream of window_sort the frontier is
//     the window_sort's watermark.
//   - on_end(input): that input sent everything. After on_end for every input, the
//     instance must flush its state downstream and send on_end downstream.
//   - on_flush(): push buffered records towards the next worker (exchanges). Returns
//     false when a bounded queue downstream is full: the caller (a source) must stop
//     reading and retry later — this is how backpressure reaches the source.
//   - ready(): whether a record given now goes straight on; false = an emitter that can
//     stop (flat_map, a firing window, a join, an exchange or ring drain) stops and
//     continues on a later loop turn.
//
// Thread safety: an instance is confined to its worker. No locks in stage code.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "rill/core/metrics.hpp"
#include "rill/core/record.hpp"
#include "rill/core/time.hpp"

namespace rill {

/// The consumer side of one operator instance. Every call comes from the instance's
/// worker thread, never concurrently (the protocol in the file banner). None may block.
template <class T, class P = acked>
class stage_in {
 public:
  using value_type = T;
  using record_policy = P;
  using record_type = record<T, P>;
  virtual ~stage_in() = default;
  /// One record of logical input `input` (0 .. inputs-1); the stage owns it now.
  virtual void on_record(std::size_t input, record<T, P>&& r) = 0;
  /// Input `input` has seen event times up to `frontier` (never decreasing per input).
  virtual void on_progress(std::size_t input, event_time frontier) = 0;
  /// Input `input` sent everything; after the last input ends, flush and end downstream.
  virtual void on_end(std::size_t input) = 0;
  /// Pushes buffered records towards the next worker. false = a bounded queue is full:
  /// the caller stops reading and calls again later (backpressure). Default: nothing
  /// buffered, true.
  virtual bool on_flush() { return true; }
  /// Whether a record given now goes straight on (no bounded queue downstream is full
  /// and no stage on the way is suspended). An emitter that can stop midway (flat_map,
  /// window_sort, the keyed windows, the joins: <rill/operators/resumable.hpp>) asks
  /// before each output and, on false, stops and continues on a later loop turn
  /// (docs/design.md "Bounded emission"); a record given anyway is still taken (held
  /// or queued). Cheap (a few loads and virtual calls); never blocks. Default: true.
  virtual bool ready() { return true; }
};

/// Counters of one stage on one worker. Written by that worker only (relaxed atomics so
/// a progress reporter on another thread may read them); one cache line each.
/// `discarded`: window states dropped unemitted by a stop (window_options::on_stop).
/// `watermark`: the stage's current event-time watermark in ns since the epoch
/// (event_time_min's count = none yet); set by stages that keep one (windows).
/// `peak_state`: the largest number of state entries the stage held at once on this
/// worker (joins: stored records; 0 for stages that do not report it).
/// `catch_up`: records a keyed window folded in a catch-up lane (a partition read again
/// behind the watermark after a rebalance: docs/design.md "Kafka source").
struct alignas(64) stage_counters {
  std::atomic<std::uint64_t> in{0}, out{0}, late{0}, errors{0}, discarded{0}, peak_state{0}, catch_up{0};
  std::atomic<std::int64_t> watermark{std::numeric_limits<std::int64_t>::min()};
  /// c += n as a relaxed load and store (no read-modify-write: one writer). Owning
  /// worker only.
  void add(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  /// c = max(c, v), relaxed (one writer). Owning worker only.
  void raise(std::atomic<std::uint64_t>& c, std::uint64_t v) noexcept {
    if (v > c.load(std::memory_order_relaxed)) c.store(v, std::memory_order_relaxed);
  }
};

/// Totals of one stage over all workers. `peak_state` is the sum of the per-worker peaks
/// (an upper bound of the peak of the sum).
struct stage_totals {
  std::string name;
  std::uint64_t in = 0, out = 0, late = 0, errors = 0, discarded = 0, peak_state = 0, catch_up = 0;
};

/// What a stage is, for the metrics endpoint: a source's `out` is also exposed as its
/// records in (Flink's numRecordsIn of a source: records read from the external system).
enum class stage_kind { op, source };

/// Stage counters of a whole job: one row of `workers` counters per stage.
/// Stages are registered while the job is built (one thread); counters are then updated
/// by workers and read by anyone.
class job_metrics {
 public:
  /// One counter row per stage, `workers` counters per row. Build time.
  explicit job_metrics(std::size_t workers) : workers_(workers) {}
  /// Registers a stage (returns its index). Build time only.
  std::size_t add_stage(std::string name, stage_kind kind = stage_kind::op) {
    std::size_t same = 1;
    for (const auto& n : names_) same += n == name;
    labels_.push_back(same == 1 ? name : name + "#" + std::to_string(same));
    names_.push_back(std::move(name));
    kinds_.push_back(kind);
    rows_.push_back(std::make_unique<stage_counters[]>(workers_));
    return rows_.size() - 1;
  }
  /// The counters of `stage` on `worker` (preconditions: both in range). Written by that
  /// worker only.
  stage_counters& at(std::size_t stage, std::size_t worker) noexcept { return rows_[stage][worker]; }
  const stage_counters& at(std::size_t stage, std::size_t worker) const noexcept { return rows_[stage][worker]; }
  /// Stages registered; their names and kinds (index = add_stage's result). Stable once
  /// the job is built.
  std::size_t stage_count() const noexcept { return rows_.size(); }
  const std::string& name(std::size_t stage) const noexcept { return names_[stage]; }
  /// The stage's `operator` label on the metrics endpoint: its name, with "#k" added for
  /// the k-th stage of the same name (netflow's three "enrich" stages: enrich, enrich#2,
  /// enrich#3), so that every series is unique.
  const std::string& label(std::size_t stage) const noexcept { return labels_[stage]; }
  stage_kind kind(std::size_t stage) const noexcept { return kinds_[stage]; }
  std::size_t workers() const noexcept { return workers_; }

  /// A gauge read when the metrics are exposed (a queue depth): `read` runs on the
  /// endpoint's thread, concurrently with the workers, and must only load atomics.
  struct gauge_fn {
    std::string name, help;
    metric_labels labels;
    std::function<double()> read;
  };
  /// Registers one series of a gauge read at exposition. Build time only.
  void add_gauge_fn(std::string name, std::string help, metric_labels labels, std::function<double()> read) {
    gauge_fns_.push_back({std::move(name), std::move(help), std::move(labels), std::move(read)});
  }
  const std::vector<gauge_fn>& gauge_fns() const noexcept { return gauge_fns_; }
  /// A summary read when the metrics are exposed: `read` returns a copy of a histogram
  /// (rill::histogram reads are safe concurrently with its writers), exposed times
  /// `scale`. Same thread rules as gauge_fn. Build time only.
  struct summary_fn {
    std::string name, help;
    metric_labels labels;
    std::function<histogram()> read;
    double scale = 1.0;
  };
  void add_summary_fn(std::string name, std::string help, metric_labels labels, std::function<histogram()> read,
                      double scale) {
    summary_fns_.push_back({std::move(name), std::move(help), std::move(labels), std::move(read), scale});
  }
  const std::vector<summary_fn>& summary_fns() const noexcept { return summary_fns_; }
  /// A gauge whose series are known only when it is read (one per Kafka partition held
  /// now): `read` appends (labels, value) pairs. Same thread rules as gauge_fn, except
  /// that `read` may take a mutex the data path does not take. Every series of one name
  /// must have distinct labels, and a family's name is not a gauge_fn's. Build time only.
  struct gauge_sample {
    metric_labels labels;
    double value = 0;
  };
  struct gauge_family_fn {
    std::string name, help;
    std::function<void(std::vector<gauge_sample>&)> read;
  };
  void add_gauge_family_fn(std::string name, std::string help, std::function<void(std::vector<gauge_sample>&)> read) {
    gauge_family_fns_.push_back({std::move(name), std::move(help), std::move(read)});
  }
  const std::vector<gauge_family_fn>& gauge_family_fns() const noexcept { return gauge_family_fns_; }
  /// Every stage's counters summed over workers, in registration order. Any thread
  /// (relaxed reads: exact once the run has ended).
  std::vector<stage_totals> totals() const {
    std::vector<stage_totals> out;
    for (std::size_t s = 0; s < rows_.size(); ++s) {
      stage_totals t{names_[s]};
      for (std::size_t w = 0; w < workers_; ++w) {
        const auto& c = rows_[s][w];
        t.in += c.in.load(std::memory_order_relaxed);
        t.out += c.out.load(std::memory_order_relaxed);
        t.late += c.late.load(std::memory_order_relaxed);
        t.errors += c.errors.load(std::memory_order_relaxed);
        t.discarded += c.discarded.load(std::memory_order_relaxed);
        t.catch_up += c.catch_up.load(std::memory_order_relaxed);
        t.peak_state += c.peak_state.load(std::memory_order_relaxed);
      }
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  std::size_t workers_;
  std::deque<std::string> names_, labels_;  // deques: name() references stay valid
  std::vector<stage_kind> kinds_;
  std::vector<gauge_fn> gauge_fns_;
  std::vector<summary_fn> summary_fns_;
  std::vector<gauge_family_fn> gauge_family_fns_;
  std::vector<std::unique_ptr<stage_counters[]>> rows_;
};

/// A source (rill::from) or a shared sink (stream::sink(std::shared_ptr<S>)) with metrics
/// of its own: the DSL calls `s.add_metrics(m, op)` once per run while the job is built,
/// with `op` the stage's `operator` label; `s` registers gauge and summary functions on
/// `m` (build time, the thread calling runtime::run). Those functions run on the metrics
/// endpoint's thread while workers run, so they read only state that is safe to read
/// there (atomics, histograms, or state under a mutex of the connector's own), and they
/// keep that state alive themselves (the job_metrics may outlive the source or sink).
/// Example: kafka_source (consumer lag per partition), kafka_sink (pending records).
template <class S>
concept metrics_provider = requires(S& s, job_metrics& m, const std::string& op) { s.add_metrics(m, op); };

class runtime;
class worker;

/// What a stage factory sees while a job is instantiated (on the thread calling
/// runtime::run, before any worker runs the job).
struct build_context {
  runtime* rt = nullptr;
  worker* w = nullptr;            ///< the worker this instance lives on
  std::size_t worker_id = 0;
  std::size_t workers = 1;
  std::size_t inputs = 1;         ///< logical inputs of the instance being built
  job_metrics* metrics = nullptr;
  /// Keeps an instance alive for the duration of the run.
  std::vector<std::shared_ptr<void>>* keep_alive = nullptr;
  /// Registers a callback the worker calls periodically with the current steady time
  /// (idle-input detection). Called on the worker's thread.
  std::function<void(std::function<void(steady_time)>)> add_ticker;
  /// Called once by a sink instance when every input ended.
  std::function<void()> sink_done;
  /// Called once by a draining source split when it closed (job_builder::expect_drain).
  std::function<void()> drain_done;

  template <class S, class... A>
  S* make(A&&... a) const {
    auto p = std::make_shared<S>(std::forward<A>(a)...);
    keep_alive->push_back(p);
    return p.get();
  }
};

/// A function that builds the consumer of T on one worker: the rest of the chain after
/// the point where it is called. Build time only.
template <class T, class P = acked>
using stage_factory = std::function<stage_in<T, P>*(build_context&)>;

}  // namespace rill

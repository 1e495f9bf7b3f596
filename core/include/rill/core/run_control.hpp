// rill/core/run_control.hpp — what one runtime::run() is asked to do besides running the
// job: stop by itself when the input goes quiet, and report progress while it runs.
//
// Defines:
//   rill::run_options     per-run options of runtime::run(job, options)
//   rill::run_progress    the snapshot a progress callback receives
//   rill::idle_stop       the stop-when-idle rule on a clock the caller supplies
//   rill::source_records  records the sources of a job emitted so far
//
// Example (stop 3 s after the last record, 30 s before the first; a line a second;
// compiled by tests/banner_examples.py):
//   #include <rill/operators/stream.hpp>
//   rill::runtime rt{{.workers = 2}};
//   rill::job job = rill::from(rill::vector_source<int>{{{1, rill::event_time{1s}}}})
//                       .sink([](int) {});
//   auto rep = rt.run(job, {.stop_when_idle = 3s,
//                           .progress = [](const rill::run_progress& p) {
//                             std::cerr << rill::source_records(p.stages) << " records\n";
//                           }});
//
// Both run on the runtime's control thread (one per runtime, the thread that also catches
// SIGINT/SIGTERM), never on a worker: the callback may read atomics and stage counters
// but must not block, since stop-when-idle and signals wait while it runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "rill/core/stage.hpp"
#include "rill/core/time.hpp"

namespace rill {

/// A snapshot of a running job, taken on the control thread.
struct run_progress {
  std::vector<stage_totals> stages;  ///< as in run_report::stages, at this instant
  double elapsed_s = 0;              ///< since run() was called
  bool stop_requested = false;       ///< request_stop(), a signal or stop-when-idle
};

/// Records the sources of a job emitted: the `out` of every stage that counts `out`
/// without `in` (every operator and sink counts `in` for each record it receives; a
/// source driver counts only `out`).
inline std::uint64_t source_records(const std::vector<stage_totals>& stages) noexcept {
  std::uint64_t n = 0;
  for (const auto& s : stages)
    if (s.in == 0) n += s.out;
  return n;
}

struct run_options {
  /// > 0: request a graceful stop (as request_stop()) once the input has not grown for
  /// this long. 0 = run to end of stream or until request_stop()/a signal.
  std::chrono::nanoseconds stop_when_idle{0};
  /// How long to wait for the first record before the idle stop applies; default 10 x
  /// stop_when_idle (saturated), since a Kafka consumer takes seconds to join its group.
  std::optional<std::chrono::nanoseconds> first_record_grace{};
  /// What "the input grew" means: a counter that increases while input arrives, read on
  /// the control thread (so: atomics). Default: source_records() of the job's stages.
  std::function<std::uint64_t()> activity{};
  /// How often stop_when_idle samples the input: the stop comes at most this late.
  std::chrono::milliseconds idle_sample{20};
  /// Called every progress_interval while the run is in progress (not after it ended),
  /// on the control thread; must not block.
  std::function<void(const run_progress&)> progress{};
  std::chrono::milliseconds progress_interval{1000};
};

/// The stop-when-idle rule, fed with samples (activity counter, time): fires once no
/// sample changed the counter for `idle` (`first_grace` while the counter is still at
/// its first sampled value and that value is 0). Pure: tests drive it with a manual clock.
class idle_stop {
 public:
  idle_stop(std::chrono::nanoseconds idle, std::chrono::nanoseconds first_grace, steady_time start) noexcept
      : idle_(idle), first_(first_grace), since_(start) {}
  /// 10 x idle, saturated at nanoseconds::max().
  static std::chrono::nanoseconds default_grace(std::chrono::nanoseconds idle) noexcept {
    return idle > std::chrono::nanoseconds::max() / 10 ? std::chrono::nanoseconds::max() : 10 * idle;
  }
  /// True once: the first sample at which the input has been quiet long enough.
  bool sample(std::uint64_t activity, steady_time now) noexcept {
    if (fired_ || idle_.count() <= 0) return false;
    if (activity != last_) {
      last_ = activity;
      since_ = now;
      return false;
    }
    const auto quiet = now - since_;
    if (quiet < (activity > 0 ? idle_ : first_)) return false;
    fired_ = true;
    return true;
  }
  bool fired() const noexcept { return fired_; }

 private:
  std::chrono::nanoseconds idle_, first_;
  steady_time since_;
  std::uint64_t last_ = 0;
  bool fired_ = false;
};

}  // namespace rill

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>

#include "scrape_state.hpp"

namespace rill {

namespace {

double ms_per_s(std::uint64_t now_ns, std::uint64_t before_ns, double seconds) {
  if (seconds <= 0 || now_ns < before_ns) return 0;
  return std::min(1000.0, double(now_ns - before_ns) / 1e6 / seconds);
}

}  // namespace

std::uint16_t runtime::metrics_port() const noexcept { return endpoint_ ? endpoint_->port() : 0; }

std::string runtime::prometheus_text() {
  using detail::prom_header;
  using detail::prom_sample;
  std::string out;
  out.reserve(16 * 1024);
  std::shared_ptr<job_metrics> jm;
  std::vector<const worker_stats*> ws;
  std::int64_t run_start = 0;
  std::unique_lock lk(mu_);  // workers_ and running_ are replaced under it by run()
  jm = running_;
  run_start = run_start_ns_;
  for (auto& w : workers_) ws.push_back(&w->stats());
  const auto now_ns = steady_ns();

  // Stage counters, one series per stage and worker (Flink numRecordsIn/Out, Kafka
  // Streams' process/late-record-drop totals).
  if (jm) {
    struct family {
      const char* name;
      const char* help;
      std::atomic<std::uint64_t> stage_counters::*field;
    };
    const family fams[] = {
        {"rill_records_in_total", "Records an operator received (a source: records it read)", &stage_counters::in},
        {"rill_records_out_total", "Records an operator emitted", &stage_counters::out},
        {"rill_late_records_total", "Records dropped as late (behind the watermark)", &stage_counters::late},
        {"rill_catch_up_records_total", "Records a keyed window took in a catch-up lane (a replayed partition)",
         &stage_counters::catch_up},
        {"rill_errors_total", "Records or reads that failed", &stage_counters::errors},
    };
    for (const auto& f : fams) {
      prom_header(out, f.name, "counter", f.help);
      for (std::size_t s = 0; s < jm->stage_count(); ++s) {
        // A source counts what it read as `out`; it is also its records in.
        const bool source_in = f.field == &stage_counters::in && jm->kind(s) == stage_kind::source;
        for (std::size_t w = 0; w < jm->workers(); ++w) {
          const auto& c = jm->at(s, w);
          const auto v = (source_in ? c.out : c.*(f.field)).load(std::memory_order_relaxed);
          prom_sample(out, f.name, {{"operator", jm->label(s)}, {"worker", std::to_string(w)}}, double(v));
        }
      }
    }
    // Watermarks of the stages that keep one, and their lag behind the wall clock.
    const auto wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string wm_text, lag_text;
    for (std::size_t s = 0; s < jm->stage_count(); ++s) {
      for (std::size_t w = 0; w < jm->workers(); ++w) {
        const auto wm = jm->at(s, w).watermark.load(std::memory_order_relaxed);
        if (wm == std::numeric_limits<std::int64_t>::min()) continue;
        const metric_labels l{{"operator", jm->label(s)}, {"worker", std::to_string(w)}};
        prom_sample(wm_text, "rill_watermark_seconds", l, double(wm) / 1e9);
        prom_sample(lag_text, "rill_watermark_lag_seconds", l, wall - double(wm) / 1e9);
      }
    }
    // Gauges and summaries read now (queue depths, enrich latency), one header per name.
    auto grouped = [&](const auto& fns, const char* type, auto write) {
      for (std::size_t i = 0; i < fns.size(); ++i) {
        bool first = true;
        for (std::size_t j = 0; j < i; ++j) first = first && fns[j].name != fns[i].name;
        if (!first) continue;
        prom_header(out, fns[i].name, type, fns[i].help);
        for (std::size_t j = i; j < fns.size(); ++j)
          if (fns[j].name == fns[i].name) write(fns[j]);
      }
    };
    grouped(jm->gauge_fns(), "gauge", [&](const job_metrics::gauge_fn& g) { prom_sample(out, g.name, g.labels, g.read()); });
    // Gauge families (series known only now, e.g. per Kafka partition), one header per
    // name; a family that reads no series writes no header.
    {
      std::vector<job_metrics::gauge_sample> samples;
      const auto& fams = jm->gauge_family_fns();
      for (std::size_t i = 0; i < fams.size(); ++i) {
        bool first = true;
        for (std::size_t j = 0; j < i; ++j) first = first && fams[j].name != fams[i].name;
        if (!first) continue;
        samples.clear();
        for (std::size_t j = i; j < fams.size(); ++j)
          if (fams[j].name == fams[i].name) fams[j].read(samples);
        if (samples.empty()) continue;
        prom_header(out, fams[i].name, "gauge", fams[i].help);
        for (const auto& smp : samples) prom_sample(out, fams[i].name, smp.labels, smp.value);
      }
    }
    grouped(jm->summary_fns(), "summary", [&](const job_metrics::summary_fn& f) {
      detail::prom_summary(out, f.name, f.labels, f.read(), f.scale);
    });
    if (!wm_text.empty()) {
      prom_header(out, "rill_watermark_seconds", "gauge", "Current event-time watermark (Flink currentOutputWatermark), seconds since the epoch");
      out += wm_text;
      prom_header(out, "rill_watermark_lag_seconds", "gauge", "Wall clock minus the watermark, seconds");
      out += lag_text;
    }
  }

  // Worker time accounting: cumulative counters and Flink's per-second gauges over the
  // interval since the previous scrape (since the run started, for the first).
  std::vector<std::uint64_t> busy, bp;
  for (auto* st : ws) {
    busy.push_back(st->busy_ns.load(std::memory_order_relaxed));
    bp.push_back(st->backpressured_ns.load(std::memory_order_relaxed));
  }
  auto series = [&](const char* name, const char* type, const char* help, auto value) {
    prom_header(out, name, type, help);
    for (std::size_t w = 0; w < ws.size(); ++w) prom_sample(out, name, {{"worker", std::to_string(w)}}, value(w));
  };
  series("rill_busy_seconds_total", "counter", "Time a worker spent in loop turns, seconds",
         [&](std::size_t w) { return double(busy[w]) / 1e9; });
  series("rill_backpressured_seconds_total", "counter", "Time the sources of a worker waited on a full queue, seconds",
         [&](std::size_t w) { return double(bp[w]) / 1e9; });
  series("rill_stalls_total", "counter", "Loop turns longer than the stall threshold",
         [&](std::size_t w) { return double(ws[w]->stalls.load(std::memory_order_relaxed)); });
  series("rill_stall_seconds_total", "counter", "Time spent in stalled loop turns, seconds",
         [&](std::size_t w) { return double(ws[w]->stall_ns.load(std::memory_order_relaxed)) / 1e9; });
  series("rill_loop_turns_total", "counter", "Timed loop turns",
         [&](std::size_t w) { return double(ws[w]->turns.load(std::memory_order_relaxed)); });
  {
    auto& last = *scrape_;
    std::lock_guard ek(last.mu);
    if (last.run != jm.get() || last.busy.size() != ws.size()) {
      last.at_ns = run_start;
      last.busy.assign(ws.size(), 0);
      last.backpressured.assign(ws.size(), 0);
      last.run = jm.get();
    }
    const double secs = double(now_ns - last.at_ns) / 1e9;
    auto busy_ms = [&](std::size_t w) { return ms_per_s(busy[w], last.busy[w], secs); };
    auto bp_ms = [&](std::size_t w) { return ms_per_s(bp[w], last.backpressured[w], secs); };
    // Prometheus wants base units: Flink's xTimeMsPerSecond / 1000, a fraction of the time.
    series("rill_busy_time_ratio", "gauge",
           "Flink busyTimeMsPerSecond / 1000: fraction of the time in loop turns, since the previous scrape",
           [&](std::size_t w) { return busy_ms(w) / 1000; });
    series("rill_backpressured_time_ratio", "gauge",
           "Flink backPressuredTimeMsPerSecond / 1000: fraction of the time the sources waited on a full queue",
           [&](std::size_t w) { return bp_ms(w) / 1000; });
    series("rill_idle_time_ratio", "gauge", "Flink idleTimeMsPerSecond / 1000: 1 - busy - backpressured",
           [&](std::size_t w) { return std::max(0.0, 1000.0 - busy_ms(w) - bp_ms(w)) / 1000; });
    if (secs > 0.2) {
      last.at_ns = now_ns;
      last.busy = busy;
      last.backpressured = bp;
    }
  }
  lk.unlock();
  // The process's heap and the memory release (memory_release.hpp): no worker label.
  const heap_usage heap = read_heap_usage();
  if (heap.supported) {
    prom_header(out, "rill_heap_in_use_bytes", "gauge", "Bytes the C allocator has handed out and not taken back (mallinfo2)");
    prom_sample(out, "rill_heap_in_use_bytes", {}, double(heap.in_use_bytes));
    prom_header(out, "rill_heap_free_bytes", "gauge", "Freed bytes the C allocator keeps, resident or given back (mallinfo2)");
    prom_sample(out, "rill_heap_free_bytes", {}, double(heap.free_bytes));
  }
  prom_header(out, "rill_memory_releases_total", "counter", "Times the runtime gave the C allocator's free pages back to the system");
  prom_sample(out, "rill_memory_releases_total", {}, double(releases_->releases.load(std::memory_order_relaxed)));
  prom_header(out, "rill_memory_released_bytes_total", "counter", "Resident bytes those releases gave back");
  prom_sample(out, "rill_memory_released_bytes_total", {}, double(releases_->released_bytes.load(std::memory_order_relaxed)));
  metrics_->write_prometheus(out);
  return out;
}

}  // namespace rill

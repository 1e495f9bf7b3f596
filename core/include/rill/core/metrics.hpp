// rill/core/metrics.hpp — the metrics of a runtime: counters, gauges and one histogram
// type, one cell per worker, merged by readers; and their Prometheus text exposition.
//
// Defines:
//   rill::histogram          log-linear histogram of std::uint64_t values (HdrHistogram
//                            style: bounded relative error, mergeable)
//   rill::counter_id, gauge_id, histogram_id   typed handles of registered metrics
//   rill::metrics_registry   registration (name, help, labels) and per-worker cells
//   rill::metric_labels      label name/value pairs of one series
//
// Example (compiled by tests/banner_examples.py):
//   rill::metrics_registry reg{2};                       // two workers
//   auto lat = reg.add_histogram("rill_example_latency_seconds", "sink latency", 1e-9);
//   auto n = reg.add_counter("rill_example_rows_total", "rows written", {{"sink", "json"}});
//   reg.cell(lat, 0).record(1'500'000);                  // on worker 0: 1.5 ms in ns
//   reg.cell(n, 1).add(3);                               // on worker 1
//   rill::histogram h = reg.merged(lat);                 // any thread
//   std::cout << h.quantile(0.99) << " ns, " << reg.total(n) << " rows\n";
//   std::string text;
//   reg.write_prometheus(text);                          // exposition format 0.0.4
//
// Cells: every (metric, worker) pair has its own cells, 64-byte aligned, written by that
// worker only with relaxed load+store (one writer: no read-modify-write on the data
// path, no cache line shared between writers). Readers on any thread merge the cells
// with relaxed loads: a sum taken while workers write is a value some instant between
// the first and the last load; exact once the workers have joined. A writer that is not
// a worker (a callback thread) uses the *_shared operations (fetch_add).
//
// Why not a library: Debian 12 packages no C/C++ HdrHistogram (only Java and Go) and no
// prometheus-cpp; the histogram below is HdrHistogram's layout with 32 linear sub-buckets
// per power of two (relative error of a quantile at most 1/32 = 3.1%), and the
// exposition is the 0.0.4 text format (prometheus.io/docs/instrumenting/exposition_formats),
// checked by `promtool check metrics` in tests/core/metrics_test.cpp.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rill {

/// Log-linear histogram of non-negative integers (e.g. nanoseconds, bytes). Values
/// 0..31 have a bucket each; above, every power of two [2^e, 2^(e+1)) is cut into 32
/// equal buckets, so a bucket's width is at most 1/32 of its lower bound. quantile()
/// returns the highest value of the bucket holding the quantile (as HdrHistogram's
/// valueAtPercentile): at most 3.1% above the exact order statistic, never below it.
///
/// Thread safety: record() by one writer thread at a time; record_shared() from any
/// number of threads; every const member from any thread, concurrently with writers
/// (relaxed loads). merge() writes *this: one thread, no concurrent writer of *this.
/// Size: 1,920 counters (15 KiB); no allocation, no blocking, noexcept.
class histogram {
 public:
  static constexpr unsigned sub_bits = 5;
  static constexpr std::size_t sub_count = std::size_t{1} << sub_bits;
  static constexpr std::size_t bucket_count = (64 - sub_bits + 1) * sub_count;

  histogram() = default;
  histogram(const histogram& o) noexcept { merge(o); }
  histogram& operator=(const histogram& o) noexcept {
    if (this != &o) {
      reset();
      merge(o);
    }
    return *this;
  }

  /// The bucket of `v`, 0 .. bucket_count-1.
  static constexpr std::size_t bucket_of(std::uint64_t v) noexcept {
    if (v < sub_count) return std::size_t(v);
    const unsigned e = 63u - unsigned(std::countl_zero(v));  // >= sub_bits
    const std::size_t sub = std::size_t(v >> (e - sub_bits)) & (sub_count - 1);
    return (e - sub_bits + 1) * sub_count + sub;
  }
  /// Smallest value that falls into bucket `b`.
  static constexpr std::uint64_t lowest_of(std::size_t b) noexcept {
    const std::size_t major = b / sub_count, sub = b % sub_count;
    if (major == 0) return sub;
    return std::uint64_t(sub_count + sub) << (major - 1);
  }
  /// Largest value that falls into bucket `b`.
  static constexpr std::uint64_t highest_of(std::size_t b) noexcept {
    return b + 1 == bucket_count ? ~std::uint64_t{0} : lowest_of(b + 1) - 1;
  }

  /// Counts `v` `n` times. Single writer (see the class comment).
  void record(std::uint64_t v, std::uint64_t n = 1) noexcept {
    bump(counts_[bucket_of(v)], n);
    bump(count_, n);
    bump(sum_, v * n);
    if (v > max_.load(std::memory_order_relaxed)) max_.store(v, std::memory_order_relaxed);
  }
  /// record() for several concurrent writers (atomic read-modify-writes).
  void record_shared(std::uint64_t v, std::uint64_t n = 1) noexcept {
    counts_[bucket_of(v)].fetch_add(n, std::memory_order_relaxed);
    count_.fetch_add(n, std::memory_order_relaxed);
    sum_.fetch_add(v * n, std::memory_order_relaxed);
    auto m = max_.load(std::memory_order_relaxed);
    while (v > m && !max_.compare_exchange_weak(m, v, std::memory_order_relaxed)) {
    }
  }
  /// Adds every count of `o` to *this (histograms merge by adding buckets).
  void merge(const histogram& o) noexcept {
    for (std::size_t b = 0; b < bucket_count; ++b) {
      const auto c = o.counts_[b].load(std::memory_order_relaxed);
      if (c) bump(counts_[b], c);
    }
    bump(count_, o.count());
    bump(sum_, o.sum());
    max_.store(std::max(max(), o.max()), std::memory_order_relaxed);
  }
  void reset() noexcept {
    for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
    count_.store(0, std::memory_order_relaxed);
    sum_.store(0, std::memory_order_relaxed);
    max_.store(0, std::memory_order_relaxed);
  }

  /// Values recorded.
  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  /// Sum of the values recorded (wraps modulo 2^64).
  std::uint64_t sum() const noexcept { return sum_.load(std::memory_order_relaxed); }
  /// Largest value recorded, exact; 0 when empty.
  std::uint64_t max() const noexcept { return max_.load(std::memory_order_relaxed); }
  double mean() const noexcept { return count() ? double(sum()) / double(count()) : 0.0; }
  /// The value at quantile q (0..1, clamped): the highest value of the bucket holding the
  /// ceil(q * count)-th smallest value, capped at max(). 0 when empty.
  std::uint64_t quantile(double q) const noexcept {
    const std::uint64_t n = count();
    if (n == 0) return 0;
    q = std::clamp(q, 0.0, 1.0);
    std::uint64_t rank = std::uint64_t(q * double(n) + 0.999999);
    rank = std::clamp<std::uint64_t>(rank, 1, n);
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < bucket_count; ++b) {
      seen += counts_[b].load(std::memory_order_relaxed);
      if (seen >= rank) return std::min(highest_of(b), max());
    }
    return max();
  }
  /// Count of bucket `b` (0 .. bucket_count-1).
  std::uint64_t bucket(std::size_t b) const noexcept { return counts_[b].load(std::memory_order_relaxed); }

 private:
  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n) noexcept {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::array<std::atomic<std::uint64_t>, bucket_count> counts_{};
  std::atomic<std::uint64_t> count_{0}, sum_{0}, max_{0};
};

/// One worker's cell of a counter: monotonically increasing, single writer.
struct alignas(64) counter_cell {
  std::atomic<std::uint64_t> v{0};
  /// v += n, relaxed load+store. The owning worker only.
  void add(std::uint64_t n = 1) noexcept {
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  /// v += n from any thread (fetch_add).
  void add_shared(std::uint64_t n = 1) noexcept { v.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t value() const noexcept { return v.load(std::memory_order_relaxed); }
};

/// One worker's cell of a gauge: a value that goes up and down. The metric's value is
/// the sum of its cells (a depth split over workers adds up).
struct alignas(64) gauge_cell {
  std::atomic<double> v{0};
  /// Any thread; the last store wins.
  void set(double x) noexcept { v.store(x, std::memory_order_relaxed); }
  double value() const noexcept { return v.load(std::memory_order_relaxed); }
};

/// One worker's histogram, on lines of its own.
struct alignas(64) histogram_cell : histogram {};

/// Typed handles: an index into the registry that made them. Copyable, trivially cheap.
struct counter_id { std::size_t i = ~std::size_t{0}; };
struct gauge_id { std::size_t i = ~std::size_t{0}; };
struct histogram_id { std::size_t i = ~std::size_t{0}; };

/// Labels of one series, in the order written: {{"operator", "window"}, {"sink", "json"}}.
/// The registry adds worker="N" to every per-worker series.
using metric_labels = std::vector<std::pair<std::string, std::string>>;

/// Metrics registered by name, help and labels, each with one cell per worker.
///
/// Thread safety: add_*() from any thread (one mutex); handles and cell references stay
/// valid for the registry's lifetime. cell() is lock-free once registered: resolve it at
/// build time and keep the reference. total(), merged(), write_prometheus() from any
/// thread, concurrently with writers (see the file banner). Errors: a handle from another
/// registry, or a worker index >= workers(), is undefined (debug builds assert nothing:
/// the data path stays branch-free).
class metrics_registry {
 public:
  /// `workers` cells per metric (>= 1).
  explicit metrics_registry(std::size_t workers) : workers_(std::max<std::size_t>(workers, 1)) {}
  metrics_registry(const metrics_registry&) = delete;
  metrics_registry& operator=(const metrics_registry&) = delete;

  std::size_t workers() const noexcept { return workers_; }

  /// `name`: Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*, counters end in _total).
  /// Registering the same name and labels twice returns the first handle.
  counter_id add_counter(std::string name, std::string help, metric_labels labels = {}) {
    return counter_id{add(kind::counter, std::move(name), std::move(help), std::move(labels), 1.0)};
  }
  gauge_id add_gauge(std::string name, std::string help, metric_labels labels = {}) {
    return gauge_id{add(kind::gauge, std::move(name), std::move(help), std::move(labels), 1.0)};
  }
  /// `unit_scale` converts recorded integers to the exposed unit (1e-9: ns recorded,
  /// seconds exposed, as Prometheus' base units ask). Exposed as a summary: quantiles
  /// 0.5, 0.9, 0.99, 0.999, _sum and _count, all workers merged.
  histogram_id add_histogram(std::string name, std::string help, double unit_scale = 1.0,
                             metric_labels labels = {}) {
    return histogram_id{add(kind::histogram, std::move(name), std::move(help), std::move(labels), unit_scale)};
  }

  counter_cell& cell(counter_id id, std::size_t worker) noexcept { return get(id.i).counters[worker]; }
  gauge_cell& cell(gauge_id id, std::size_t worker) noexcept { return get(id.i).gauges[worker]; }
  histogram_cell& cell(histogram_id id, std::size_t worker) noexcept { return get(id.i).histograms[worker]; }

  /// Sum of a counter's cells.
  std::uint64_t total(counter_id id) const noexcept {
    std::uint64_t n = 0;
    const auto& m = get(id.i);
    for (std::size_t w = 0; w < workers_; ++w) n += m.counters[w].value();
    return n;
  }
  /// Sum of a gauge's cells.
  double total(gauge_id id) const noexcept {
    double x = 0;
    const auto& m = get(id.i);
    for (std::size_t w = 0; w < workers_; ++w) x += m.gauges[w].value();
    return x;
  }
  /// Every worker's cell merged into one histogram.
  histogram merged(histogram_id id) const noexcept {
    histogram h;
    const auto& m = get(id.i);
    for (std::size_t w = 0; w < workers_; ++w) h.merge(m.histograms[w]);
    return h;
  }

  /// Appends every metric in the Prometheus text format 0.0.4: one # HELP and # TYPE per
  /// name, counters and gauges one series per worker (label worker="N"), histograms as a
  /// summary over all workers. Allocates; takes the registration mutex.
  void write_prometheus(std::string& out) const;

 private:
  enum class kind { counter, gauge, histogram };
  struct metric {
    kind k;
    std::string name, help;
    metric_labels labels;
    double scale;
    std::unique_ptr<counter_cell[]> counters;
    std::unique_ptr<gauge_cell[]> gauges;
    std::unique_ptr<histogram_cell[]> histograms;
  };
  std::size_t add(kind k, std::string name, std::string help, metric_labels labels, double scale);
  metric& get(std::size_t i) noexcept { return *metrics_[i]; }
  const metric& get(std::size_t i) const noexcept { return *metrics_[i]; }

  std::size_t workers_;
  mutable std::mutex mu_;
  // Pointers are stable; the vector itself is reserved so that lock-free readers of an
  // element never see it move (capacity below; add() throws std::length_error past it).
  std::vector<std::unique_ptr<metric>> metrics_ = [] {
    std::vector<std::unique_ptr<metric>> v;
    v.reserve(max_metrics);
    return v;
  }();
  static constexpr std::size_t max_metrics = 4096;
};

namespace detail {
/// Prometheus text-format helpers (exposition 0.0.4), shared by the registry and the
/// runtime's endpoint. Label values are escaped (\\, \", \n); numbers as %.17g, +Inf,
/// -Inf, NaN.
void prom_header(std::string& out, const std::string& name, const char* type, const std::string& help);
void prom_sample(std::string& out, const std::string& name, const metric_labels& labels, double v);
/// The series of one summary (no header): quantiles 0.5, 0.9, 0.99, 0.999 of `h`, _sum
/// and _count, values times `scale`.
void prom_summary(std::string& out, const std::string& name, const metric_labels& labels, const histogram& h,
                  double scale);
}  // namespace detail

}  // namespace rill

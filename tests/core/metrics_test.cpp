// The metrics of rill (core/include/rill/core/metrics.hpp, runtime.hpp "Observability"):
// the histogram against exact order statistics, the registry's per-worker cells, and the
// runtime's Prometheus endpoint scraped over HTTP and checked by `promtool check metrics`
// (Debian package prometheus).
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <rill/rill.hpp>

using namespace std::chrono_literals;

namespace {

TEST(histogram, buckets_cover_every_value_once) {
  for (std::size_t b = 0; b + 1 < rill::histogram::bucket_count; ++b) {
    ASSERT_EQ(rill::histogram::highest_of(b) + 1, rill::histogram::lowest_of(b + 1)) << b;
    ASSERT_EQ(rill::histogram::bucket_of(rill::histogram::lowest_of(b)), b);
    ASSERT_EQ(rill::histogram::bucket_of(rill::histogram::highest_of(b)), b);
  }
  EXPECT_EQ(rill::histogram::bucket_of(~std::uint64_t{0}), rill::histogram::bucket_count - 1);
}

// Quantiles against the exact order statistic of the same sample (std::nth_element):
// never below it, at most 1/32 above.
TEST(histogram, quantiles_within_relative_error) {
  std::mt19937_64 rng{7};
  std::lognormal_distribution<double> latency_ns{13.0, 1.5};  // ~0.4 ms median, long tail
  std::vector<std::uint64_t> v(200000);
  rill::histogram h;
  for (auto& x : v) h.record(x = std::uint64_t(latency_ns(rng)));
  EXPECT_EQ(h.count(), v.size());
  for (double q : {0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    const std::size_t rank = std::max<std::size_t>(1, std::size_t(std::ceil(q * double(v.size()))));
    std::nth_element(v.begin(), v.begin() + long(rank - 1), v.end());
    const double exact = double(v[rank - 1]), got = double(h.quantile(q));
    EXPECT_GE(got, exact) << q;
    EXPECT_LE(got, exact * (1 + 1.0 / 32)) << q;
  }
  EXPECT_EQ(h.max(), *std::max_element(v.begin(), v.end()));
}

TEST(histogram, merge_equals_recording_all) {
  rill::histogram a, b, all;
  for (std::uint64_t i = 0; i < 5000; ++i) {
    (i % 3 ? a : b).record(i * 37);
    all.record(i * 37);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.sum(), all.sum());
  for (std::size_t k = 0; k < rill::histogram::bucket_count; ++k) ASSERT_EQ(a.bucket(k), all.bucket(k));
}

TEST(metrics_registry, cells_per_worker_sum_up) {
  rill::metrics_registry reg{3};
  auto c = reg.add_counter("rill_test_rows_total", "rows", {{"sink", "a"}});
  EXPECT_EQ(reg.add_counter("rill_test_rows_total", "rows", {{"sink", "a"}}).i, c.i) << "same name and labels";
  auto g = reg.add_gauge("rill_test_depth", "depth");
  auto h = reg.add_histogram("rill_test_latency_seconds", "latency", 1e-9);
  for (std::size_t w = 0; w < 3; ++w) {
    reg.cell(c, w).add(w + 1);
    reg.cell(g, w).set(double(w));
    reg.cell(h, w).record(1000 * (w + 1));
  }
  EXPECT_EQ(reg.total(c), 6u);
  EXPECT_EQ(reg.total(g), 3.0);
  EXPECT_EQ(reg.merged(h).count(), 3u);
  EXPECT_EQ(reg.merged(h).max(), 3000u);
  EXPECT_NE(&reg.cell(c, 0), &reg.cell(c, 1));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&reg.cell(c, 1)) % 64, 0u) << "one cache line per cell";
}

/// `promtool check metrics` on `text` (stdin): its exit status and output.
std::pair<int, std::string> promtool_check(const std::string& text) {
  const std::string path = ::testing::TempDir() + "rill_metrics_" + std::to_string(::getpid()) + ".txt";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  std::string cmd = "promtool check metrics < " + path + " 2>&1", out;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  char buf[512];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  std::remove(path.c_str());
  return {WEXITSTATUS(status), out};
}

TEST(metrics_registry, exposition_passes_promtool) {
  rill::metrics_registry reg{2};
  auto c = reg.add_counter("rill_test_rows_total", "rows \"written\"\nby the sink", {{"sink", "a\\b"}});
  reg.add_counter("rill_test_rows_total", "rows", {{"sink", "b"}});
  auto h = reg.add_histogram("rill_test_latency_seconds", "latency", 1e-9);
  reg.cell(c, 1).add(5);
  reg.cell(h, 0).record(2'000'000);
  std::string text;
  reg.write_prometheus(text);
  EXPECT_NE(text.find("rill_test_rows_total{sink=\"a\\\\b\",worker=\"1\"} 5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rill_test_latency_seconds_count 1\n"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '#'), 4) << "one HELP and TYPE per name:\n" << text;
  const auto [status, out] = promtool_check(text);
  EXPECT_EQ(status, 0) << out << "\n" << text;
}

/// A loopback port free now (bound then released), for the runtime to bind.
std::uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a{io, {boost::asio::ip::make_address("127.0.0.1"), 0}};
  return a.local_endpoint().port();
}

/// GET `path` from 127.0.0.1:port; the whole response (head and body).
std::string http_get(std::uint16_t port, const std::string& path) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s{io};
  s.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n";
  boost::asio::write(s, boost::asio::buffer(req));
  std::string resp;
  boost::system::error_code ec;
  boost::asio::read(s, boost::asio::dynamic_buffer(resp), ec);  // until the server closes
  return resp;
}

/// The value of the series `series` (name and labels exactly as written) in `text`; -1 if absent.
double sample_value(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// A job's counters on the endpoint: the source's records in equal the records the run
// read (its own report), the sink's records in equal what the sink saw, and promtool
// accepts the answer.
TEST(metrics_endpoint, serves_the_run_and_promtool_accepts_it) {
  const auto port = free_port();
  rill::runtime rt{{.workers = 2, .topology = "1 nodes x 2 cores", .metrics_port = port}};
  ASSERT_EQ(rt.metrics_port(), port);
  auto rows = rt.metrics().add_counter("rill_test_sink_rows_total", "rows the test sink saw");
  std::vector<rill::record<int>> a, b;
  for (int i = 0; i < 1000; ++i) (i % 2 ? a : b).push_back({i, rill::event_time{std::chrono::seconds{i}}});
  std::atomic<int> seen{0};
  auto job = rill::from(rill::vector_source<int>{{a, b}}, "numbers")
                 .filter([](int x) { return x % 4 != 0; })
                 .sink([&](int) {
                   seen.fetch_add(1);
                   rt.metrics().cell(rows, rill::this_worker()->id()).add();
                 }, "collect");
  const auto rep = rt.run(job);
  EXPECT_EQ(rep.stage("numbers").out, 1000u);
  EXPECT_EQ(rep.metrics->total(rows), 750u) << "typed access from the report";

  const std::string resp = http_get(port, "/metrics");
  ASSERT_EQ(resp.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << resp;
  EXPECT_NE(resp.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const std::string body = resp.substr(resp.find("\r\n\r\n") + 4);
  double source_in = 0, sink_in = 0;
  for (int w = 0; w < 2; ++w) {
    const std::string wl = ",worker=\"" + std::to_string(w) + "\"}";
    source_in += sample_value(body, "rill_records_in_total{operator=\"numbers\"" + wl);
    sink_in += sample_value(body, "rill_records_in_total{operator=\"collect\"" + wl);
  }
  EXPECT_EQ(source_in, double(rep.stage("numbers").out)) << body;
  EXPECT_EQ(sink_in, double(seen.load())) << body;
  EXPECT_EQ(sample_value(body, "rill_test_sink_rows_total{worker=\"0\"}") +
                sample_value(body, "rill_test_sink_rows_total{worker=\"1\"}"),
            750.0);
  EXPECT_GE(sample_value(body, "rill_busy_time_ratio{worker=\"0\"}"), 0.0) << body;
  const auto [status, out] = promtool_check(body);
  EXPECT_EQ(status, 0) << out << "\n" << body;

  EXPECT_EQ(http_get(port, "/nothing").rfind("HTTP/1.1 404", 0), 0u);
}

// Two stages of one name get distinct operator labels (window_sort, window_sort#2): the
// exposition stays valid (promtool rejects duplicate series). Stages register from the
// sink back to the source, so the downstream one is "window_sort".
TEST(metrics_endpoint, stages_of_one_name_get_distinct_labels) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores"}};
  std::vector<rill::record<int>> v;
  for (int i = 0; i < 100; ++i) v.push_back({i, rill::event_time{std::chrono::seconds{i}}});
  auto job = rill::from(rill::vector_source<int>{v})
                 .window_sort({.length = 10s, .max_delay = 1s})
                 .map([](rill::window<int>&& w) { return int(w.records.size()); })
                 .window_sort({.length = 100s, .max_delay = 1s})
                 .sink([](rill::window<int>&&) {});
  rt.run(job);
  const std::string text = rt.prometheus_text();
  EXPECT_EQ(sample_value(text, "rill_records_in_total{operator=\"window_sort#2\",worker=\"0\"}"), 100.0) << text;
  EXPECT_EQ(sample_value(text, "rill_records_in_total{operator=\"window_sort\",worker=\"0\"}"), 10.0) << text;
  EXPECT_GT(sample_value(text, "rill_watermark_seconds{operator=\"window_sort#2\",worker=\"0\"}"), 0.0) << text;
  const auto [status, out] = promtool_check(text);
  EXPECT_EQ(status, 0) << out << "\n" << text;
}

TEST(metrics_endpoint, port_in_use_is_a_config_error) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor taken{io, {boost::asio::ip::make_address("127.0.0.1"), 0}};
  const auto port = taken.local_endpoint().port();
  try {
    rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .metrics_port = port}};
    FAIL() << "bound a port in use";
  } catch (const rill::config_error& e) {
    EXPECT_EQ(e.key(), "runtime.metrics_port");
  }
}

}  // namespace

// End-to-end latency at a sink (stream.hpp rill::end_to_end_latency): 640 records whose
// event time is 10 s before the run started; the sink samples one in 64, so 10 values,
// each between 10 s and 10 s plus the run's duration (timed here). The summary is on the
// exposition, and promtool accepts it next to a rebalance ring's depth gauge.
TEST(metrics_endpoint, end_to_end_latency_of_a_sink) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores"}};
  const auto before = std::chrono::system_clock::now();
  const rill::event_time t0 = std::chrono::time_point_cast<std::chrono::nanoseconds>(before) - 10s;
  std::vector<rill::record<int>> v;
  for (int i = 0; i < 640; ++i) v.push_back({i, t0});
  auto job = rill::from(rill::vector_source<int>{v}).rebalance().sink([](int) {}, "out");
  const auto rep = rt.run(job);
  const auto after = std::chrono::system_clock::now();
  const rill::histogram h = rep.metrics->merged(rill::end_to_end_latency(rt.metrics(), "out"));
  ASSERT_EQ(h.count(), 10u);
  const auto ns = [](auto d) { return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()); };
  EXPECT_GE(h.quantile(0.0), ns(10s));  // at least the smallest value (its bucket's top)
  EXPECT_LE(h.max(), ns(10s + (after - before)));
  const std::string text = rt.prometheus_text();
  EXPECT_EQ(sample_value(text, "rill_end_to_end_latency_seconds_count{operator=\"out\"}"), 10.0) << text;
  EXPECT_EQ(sample_value(text, "rill_queue_depth_batches{queue=\"rebalance\",node=\"0\"}"), 0.0) << text;
  const auto [status, out] = promtool_check(text);
  EXPECT_EQ(status, 0) << out << "\n" << text;
}

// A gauge family (job_metrics::add_gauge_family_fn: series known only when read, as a
// Kafka source's partitions) is exposed with one header, its series as read; promtool
// accepts it.
TEST(metrics_endpoint, gauge_family_series_as_read) {
  struct two_series_source : rill::vector_source<int> {
    using rill::vector_source<int>::vector_source;
    void add_metrics(rill::job_metrics& m, const std::string& op) const {
      m.add_gauge_family_fn("rill_test_lag", "per partition", [op](std::vector<rill::job_metrics::gauge_sample>& out) {
        out.push_back({{{"operator", op}, {"partition", "0"}}, 3});
        out.push_back({{{"operator", op}, {"partition", "1"}}, 4});
      });
    }
  };
  static_assert(rill::metrics_provider<two_series_source>);
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores"}};
  rt.run(rill::from(two_series_source{std::vector<rill::record<int>>{{1, rill::event_time{1s}}}}, "src")
             .sink([](int) {}));
  const std::string text = rt.prometheus_text();
  EXPECT_EQ(sample_value(text, "rill_test_lag{operator=\"src\",partition=\"0\"}"), 3.0) << text;
  EXPECT_EQ(sample_value(text, "rill_test_lag{operator=\"src\",partition=\"1\"}"), 4.0) << text;
  EXPECT_EQ(text.find("# TYPE rill_test_lag gauge"), text.rfind("# TYPE rill_test_lag gauge"));
  const auto [status, out] = promtool_check(text);
  EXPECT_EQ(status, 0) << out << "\n" << text;
}

// Scrapes while workers write (run under TSan: tests/core/CMakeLists.txt label
// concurrency): two splits of 6,400 records each go straight to the sink on their own
// worker; the instance on worker 0 takes the exposition every 500 records, reading
// worker 1's cells as it writes them. Each instance samples 6,400 / 64 = 100 records.
TEST(metrics_endpoint, scrape_while_workers_write) {
  rill::runtime rt{{.workers = 2, .topology = "1 nodes x 2 cores"}};
  const rill::event_time t0 =
      std::chrono::time_point_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now()) - 1s;
  std::vector<std::vector<rill::record<int>>> splits(2);
  for (int i = 0; i < 12800; ++i) splits[i % 2].push_back({i, t0});
  std::atomic<int> scrapes{0};
  int seen0 = 0;
  auto job = rill::from(rill::vector_source<int>{splits}).sink([&](int) {
    if (rill::this_worker()->id() == 0 && ++seen0 % 500 == 0) {
      EXPECT_NE(rt.prometheus_text().find("rill_end_to_end_latency_seconds_count"), std::string::npos);
      scrapes.fetch_add(1);
    }
  }, "out");
  const auto rep = rt.run(job);
  EXPECT_EQ(scrapes.load(), 12);
  EXPECT_EQ(rep.metrics->merged(rill::end_to_end_latency(rt.metrics(), "out")).count(), 200u);
}

// enrichment — records at a target rate, enriched through the enrichment service in
// batches, written out as JSON lines; reports what it cost.
//
//   generator_source(--rate/s for --seconds) -> enrich(port -> IANA service name) -> sink
//
// Run with no arguments it starts the service in-process on loopback with 100 ms latency
// and sends 4,000 records/s for 5 s (the reference setting of bench/RESULTS.md "enrich"). Options:
//   --url URL        use a running service instead (examples/enrichment_service)
//   --rate N         records per second (0 = as fast as it goes)
//   --batch-size N   --max-in-flight N   --transport beast|cpprest   --latency MS
//   --output FILE    JSON lines {"seq":..,"key":..,"service":..} (default: none)
// Summary (stdout, one JSON object): records/s, p50/p99 latency per record (creation to
// sink, ms), peak threads and sockets of the process (the in-process service's own thread
// and server-side sockets included; use --url to leave them out), CPU %, peak RSS.
//
// Kafka mode (kafka_mode.hpp): --brokers HOST:PORT --from TOPIC --to TOPIC [--group G]
// reads lookup keys from a topic, enriches them the same way and writes JSON to a topic,
// at-least-once; summary: records/s and latency from read to delivery report.
// Exit status: 0 ok; 1 an enrichment or delivery failed; 2 bad arguments.
#include <CLI/CLI.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>

#include <rill/core/generator_source.hpp>
#include <rill/operators/enrich.hpp>
#include <rill/connectors/http_transport.hpp>
#include <rill/rill.hpp>

#include "cli_checks.hpp"
#include "enrichment_service.hpp"
#include "kafka_mode.hpp"  // --brokers/--from/--to: Kafka mode
#include "reporting.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct item {
  std::uint64_t seq;
  std::chrono::steady_clock::time_point born;
};

const std::vector<std::string> keys = {"22/tcp", "53/udp", "80/tcp", "443/tcp", "123/udp", "25/tcp"};

std::size_t count_entries(const char* dir, bool sockets_only) {
  std::size_t n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!sockets_only) { ++n; continue; }
    auto t = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && t.string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rill enrichment example: batched async REST enrichment at a target rate, or from\n"
               "Kafka to Kafka (--brokers HOST:PORT --from TOPIC --to TOPIC [--group G])"};
  std::string url, output, transport = "beast";
  double rate = 4000, seconds = 5;
  std::size_t batch = 200, in_flight = 4;
  int latency_ms = 100;
  std::uint16_t metrics_port = 0;
  app.add_option("--url", url, "enrichment service URL (default: start one in-process)");
  // Numeric options: rill_examples checks (the message names the value and the range).
  auto* rate_opt = app.add_option("--rate", rate, "records per second (0 = unthrottled)")
                       ->check(rill_examples::number_in(0, 1e9, false, "0 = unthrottled"));
  auto* seconds_opt = app.add_option("--seconds", seconds, "how long to send")
                          ->check(rill_examples::number_in(0, 86'400, true));
  app.add_option("--batch-size", batch, "keys per request")->check(rill_examples::whole_number(1, 1'000'000));
  app.add_option("--max-in-flight", in_flight, "outstanding requests")->check(rill_examples::whole_number(1, 65'536));
  app.add_option("--latency", latency_ms, "in-process service latency, ms")
      ->check(rill_examples::whole_number(0, 3'600'000));
  app.add_option("--transport", transport, "beast or cpprest")->check(CLI::IsMember({"beast", "cpprest"}));
  auto* output_opt = app.add_option("--output", output, "JSON lines output file");
  app.add_option("--metrics-port", metrics_port,
                 "serve Prometheus metrics on 127.0.0.1:PORT/metrics while running (0 = off)");
  enrichment_kafka::options kafka;
  enrichment_kafka::add_options(app, kafka);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;      // bad arguments: 2
  }
  if (kafka.active()) {
    for (auto* opt : {rate_opt, seconds_opt, output_opt})
      if (opt->count()) {
        std::cerr << "enrichment: " << opt->get_name() << " is for the generator mode, not Kafka mode\n";
        return 2;
      }
    return enrichment_kafka::run(kafka, {.url = url, .latency = std::chrono::milliseconds{latency_ms},
                                         .batch_size = batch, .max_in_flight = in_flight,
                                         .cpprest = transport == "cpprest", .metrics_port = metrics_port});
  }

  std::optional<rill::svc::enrichment_service> svc;
  if (url.empty()) {
    svc.emplace(rill::svc::service_options{.latency = std::chrono::milliseconds{latency_ms}});
    svc->start();
    url = svc->url();
  }
  std::ofstream out;
  if (!output.empty()) {
    out.open(output);
    if (!out) {
      std::cerr << "enrichment: cannot write --output " << output << '\n';
      return 2;
    }
  }

  const std::uint64_t total = rate > 0 ? std::uint64_t(rate * seconds) : std::uint64_t(100000 * seconds);
  std::mutex mu;  // the --output file
  rill::runtime rt{{.workers = 1, .metrics_port = metrics_port}};
  // Creation to sink, ns, one cell per worker (the sink runs on the workers).
  const auto latency = rt.metrics().add_histogram("rill_enrichment_record_latency_seconds",
                                                  "record creation to sink, through the service", 1e-9);
  // A failed record is counted exactly; stderr gets the first failure in full, then at
  // most one line a second with the count (a service that is down fails every record).
  rill_examples::error_digest errors{"enrichment", std::cerr};
  auto m = std::make_shared<rill::enrich_metrics>();

  auto s = rill::enrich(
      rill::from(rill::generator_source{{.count = total, .rate = rate},
                                        [](std::uint64_t i) { return item{i, std::chrono::steady_clock::now()}; }}),
      {.url = url, .batch_size = batch, .linger = 5ms, .max_in_flight = in_flight, .timeout = 5s,
       .retries = 2, .transport = rill::http_transport_for(transport == "cpprest" ? rill::http_transport_kind::cpprest
                                                                              : rill::http_transport_kind::beast),
       .metrics = m},
      [](const item& it) { return keys[it.seq % keys.size()]; },
      [](item&& it, json&& v) { return std::pair{it, std::move(v)}; },
      [&](rill::record<item>&& r, const rill::enrich_error& e) {
        errors.add("record " + std::to_string(r.value.seq) + ": " + e.reason, std::chrono::steady_clock::now());
      });
  auto job = std::move(s).sink([&](std::pair<item, json>&& p) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - p.first.born);
    rt.metrics().cell(latency, rill::this_worker()->id()).record(std::uint64_t(ns.count()));
    if (!out) return;
    std::lock_guard lk(mu);
    out << json{{"seq", p.first.seq}, {"key", keys[p.first.seq % keys.size()]}, {"service", p.second}} << '\n';
  });

  // Peak threads and sockets, sampled every 20 ms on the runtime's control thread (which
  // exists for this sampling and is not counted, nor is the metrics thread).
  std::size_t peak_threads = 0, peak_sockets = 0;
  const std::size_t not_counted = metrics_port ? 2 : 1;
  auto sample = [&](const rill::run_progress&) {
    peak_threads = std::max(peak_threads, count_entries("/proc/self/task", false) - not_counted);
    peak_sockets = std::max(peak_sockets, count_entries("/proc/self/fd", true));
  };
  rusage u0, u1;
  getrusage(RUSAGE_SELF, &u0);
  const auto rep = rt.run(job, {.progress = sample, .progress_interval = 20ms});
  getrusage(RUSAGE_SELF, &u1);
  errors.finish();

  auto cpu = [](const rusage& u) {
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  // From the run report: the histogram the sink filled (quantiles within 3.1%).
  const rill::histogram lat = rep.metrics->merged(latency);
  auto q = [&](double p) { return double(lat.quantile(p)) / 1e6; };
  json summary = {
      {"records", total}, {"enriched", lat.count()}, {"errors", errors.total()},
      {"seconds", rep.elapsed_s}, {"records_per_s", double(lat.count()) / rep.elapsed_s},
      {"latency_ms_p50", q(0.5)}, {"latency_ms_p99", q(0.99)},
      {"requests", m->requests.load()}, {"retries", m->retries.load()},
      {"batch_size", batch}, {"max_in_flight", in_flight}, {"transport", transport},
      {"peak_threads", peak_threads}, {"peak_sockets", peak_sockets},
      {"service_in_process", svc.has_value()},
      {"cpu_percent", 100.0 * (cpu(u1) - cpu(u0)) / rep.elapsed_s},
      {"peak_rss_mib", u1.ru_maxrss / 1024}};
  std::cout << summary.dump() << '\n';
  return errors.total() ? 1 : 0;
}

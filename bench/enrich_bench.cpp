// enrich_bench — records/s, sockets and threads of rill's enrich operator against the
// enrichment service answering after 100 ms (the reference measurement of issue 4:
// blocking 520 threads / 520 sockets, reactive 37 threads / 502 sockets at 4,000 rec/s).
//
//   enrich_bench [records_batched=400000] [latency_ms=100]
//
// The service runs as a child process (examples/enrichment_service), so threads and
// sockets counted from /proc/self are rill's alone. Configurations, 2 workers each:
//   beast|cpprest  x  batched (batch 2000, max_in_flight 4)  |  batch_size 1 (max_in_flight 64)
// Every run checks its checksum: every record enriched once, with the right value.
#include <sys/resource.h>
#include <sys/wait.h>
#include <spawn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include <rill/connectors/http_transport.hpp>
#include <rill/operators/enrich.hpp>
#include <rill/rill.hpp>

using namespace std::chrono_literals;
extern char** environ;

namespace {

/// Threads and sockets of this process now (/proc/self/task, /proc/self/fd).
std::pair<std::size_t, std::size_t> threads_and_sockets() {
  namespace fs = std::filesystem;
  std::size_t t = 0, s = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/proc/self/task", ec)) (void)e, ++t;
  for (auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
    auto target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++s;
  }
  return {t, s};
}

struct child_service {
  pid_t pid = -1;
  std::string url;
  child_service(int latency_ms) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    std::string lat = std::to_string(latency_ms);
    const char* argv[] = {ENRICHMENT_SERVICE_BINARY, "--latency", lat.c_str(), "--threads", "2", nullptr};
    if (posix_spawn(&pid, argv[0], &fa, nullptr, const_cast<char**>(argv), environ) != 0)
      throw std::runtime_error("cannot start " ENRICHMENT_SERVICE_BINARY);
    close(fds[1]);
    std::string line;
    char c;
    while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
    close(fds[0]);
    const auto at = line.find("http://");
    if (at == std::string::npos) throw std::runtime_error("service did not start: " + line);
    url = line.substr(at);
  }
  ~child_service() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      int st;
      waitpid(pid, &st, 0);
    }
  }
};

struct row {
  std::string transport;
  std::size_t batch, in_flight, records;
  double seconds = 0, rate = 0, cpu_pct = 0;
  std::size_t peak_threads = 0, peak_sockets = 0, ok = 0, errors = 0;
  std::uint64_t requests = 0, p50_us = 0, p99_us = 0;
};

// Ports whose IANA names are known (netbase /etc/services); the checksum uses them.
const std::vector<std::pair<std::string, std::string>> ports = {
    {"22/tcp", "ssh"}, {"53/udp", "domain"}, {"80/tcp", "http"}, {"443/tcp", "https"},
    {"123/udp", "ntp"}, {"25/tcp", "smtp"}, {"5432/tcp", "postgresql"}, {"993/tcp", "imaps"}};

row run(const std::string& url, rill::http_transport_kind kind, std::size_t batch,
        std::size_t in_flight, std::size_t n) {
  row r{kind == rill::http_transport_kind::beast ? "beast" : "cpprest", batch, in_flight, n};
  std::vector<std::vector<rill::record<std::uint32_t>>> splits(2);
  for (std::uint32_t i = 0; i < n; ++i) splits[i % 2].push_back({i, rill::event_time{}});
  auto m = std::make_shared<rill::enrich_metrics>();
  std::atomic<std::size_t> ok{0}, bad{0}, errors{0};
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  auto s = rill::enrich(
      rill::from(rill::vector_source<std::uint32_t>{splits}),
      {.url = url, .batch_size = batch, .linger = 5ms, .max_in_flight = in_flight, .timeout = 10s,
       .retries = 2, .order = rill::enrich_order::unordered, .transport = rill::http_transport_for(kind), .metrics = m},
      [](const std::uint32_t& i) { return ports[i % ports.size()].first; },
      [](std::uint32_t&& i, nlohmann::json&& v) {
        return v.is_string() && v.get_ref<const std::string&>() == ports[i % ports.size()].second;
      },
      [&errors](rill::record<std::uint32_t>&&, const rill::enrich_error&) { ++errors; });
  auto j = std::move(s).sink([&](bool good) { (good ? ok : bad).fetch_add(1, std::memory_order_relaxed); });
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done.load()) {
      auto [t, so] = threads_and_sockets();
      r.peak_threads = std::max(r.peak_threads, t - 1);  // minus the sampler itself
      r.peak_sockets = std::max(r.peak_sockets, so);
      std::this_thread::sleep_for(20ms);
    }
  });
  rusage u0, u1;
  getrusage(RUSAGE_SELF, &u0);
  const auto t0 = std::chrono::steady_clock::now();
  rt.run(j);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  getrusage(RUSAGE_SELF, &u1);
  done = true;
  sampler.join();
  auto cpu = [](const rusage& u) {
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  };
  r.cpu_pct = 100.0 * (cpu(u1) - cpu(u0)) / r.seconds;
  r.rate = double(n) / r.seconds;
  r.ok = ok;
  r.errors = errors + bad;
  r.requests = m->requests;
  r.p50_us = m->latency_quantile_us(0.5);
  r.p99_us = m->latency_quantile_us(0.99);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::stoul(argv[1]) : 400000;
  const int latency = argc > 2 ? std::stoi(argv[2]) : 100;
  child_service svc(latency);
  std::cout << "service " << svc.url << " latency " << latency << " ms; 2 workers\n\n"
            << "| transport | batch | max_in_flight/worker | records | s | records/s | requests | "
               "request p50/p99 (ms, rill::histogram) | peak threads | peak sockets | CPU % | checksum |\n"
            << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  int status = 0;
  for (auto kind : {rill::http_transport_kind::beast, rill::http_transport_kind::cpprest}) {
    for (auto [batch, flight, records] : {std::tuple<std::size_t, std::size_t, std::size_t>{2000, 4, n},
                                          {1, 64, 3000}}) {
      auto r = run(svc.url, kind, batch, flight, records);
      const bool good = r.ok == r.records && r.errors == 0;
      if (!good) status = 1;
      std::printf("| %s | %zu | %zu | %zu | %.2f | %.0f | %llu | %.0f / %.0f | %zu | %zu | %.0f | %s |\n",
                  r.transport.c_str(), r.batch, r.in_flight, r.records, r.seconds, r.rate,
                  (unsigned long long)r.requests, r.p50_us / 1000.0, r.p99_us / 1000.0, r.peak_threads,
                  r.peak_sockets, r.cpu_pct, good ? "ok" : "MISMATCH");
      std::fflush(stdout);
    }
  }
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  std::printf("\npeak RSS of the bench process: %ld MiB\n", u.ru_maxrss / 1024);
  return status;
}

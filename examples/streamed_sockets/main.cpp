// streamed_sockets — the five-process TCP latency test, one binary, one role per
// process (one file per role, listed in roles.hpp):
//
//   generator --> indexer ==> forwarder --> processor --> terminator
//       ^            |  \         |             |
//       |          disk  \tap    disk           | real requests only
//       |                 `--------------------------------> terminator (tap port)
//       `-----------------------------------------------'  (responses)
//
// Records are 32-byte blobs, fixed framing. The generator sends fake traffic at a target
// rate and "real" requests at a fixed rate (byte 8 = 1, bytes 16..23 = its steady-clock
// send time in ns); the indexer stamps bytes 0..7 with the record's 64-bit sequence
// index and fans the stream out to the forwarder, the terminator's tap port and its
// segment files; the forwarder passes it on and keeps its own segment files; the
// processor passes everything to the terminator and answers each real request back to
// the generator, which prints the latency; the terminator prints GB/s. Any start order
// works (sinks connect with retries); scripts/streamed_sockets.sh runs all five.
//
//   streamed_sockets --role indexer --in listen:127.0.0.1:7101
//       --out connect:127.0.0.1:7102 --out connect:127.0.0.1:7105 --dir /tmp/ss/indexer
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>

#include "cli_checks.hpp"
#include "roles.hpp"

using streamed_sockets::blob;
using streamed_sockets::config;

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // belt and braces: Asio already sends with MSG_NOSIGNAL
  // SIGINT and SIGQUIT stop a role (their default action) even when it was started with
  // them ignored, as a shell does for a background job: `kill -INT` must not go unheard.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGQUIT, SIG_DFL);
  config c;
  std::int64_t tick_us = c.tick.count();
  CLI::App app{"streamed_sockets: one role of the five-process TCP latency test"};
  app.add_option("--role", c.role, "generator | indexer | forwarder | processor | terminator")
      ->required()
      ->check(CLI::IsMember({"generator", "indexer", "forwarder", "processor", "terminator"}));
  app.add_option("--in", c.in, "input endpoint, e.g. listen:127.0.0.1:7101");
  app.add_option("--out", c.out,
                 "output endpoint(s), e.g. connect:127.0.0.1:7102 (repeat to fan out)");
  app.add_option("--back", c.back,
                 "generator: where responses arrive (listen:...); processor: where to send them "
                 "(connect:...); terminator: the tap input (listen:...)");
  app.add_option("--dir", c.dir,
                 "indexer/forwarder: directory for segment files (empty = no disk)");
  // Numeric options: rill_examples checks (the message names the value and the range).
  constexpr std::int64_t pib = std::int64_t{1} << 50;
  app.add_option("--bytes", c.bytes, "generator: bytes to send (multiple of 32)")
      ->check(rill_examples::whole_number(32, pib, "a multiple of 32, at most 1 PiB"));
  app.add_option("--rate", c.rate_gbps,
                 "generator: fake traffic target in GB/s (0 = as fast as possible)")
      ->check(rill_examples::number_in(0, 1000, false, "0 = as fast as possible"));
  // At least one per 1000 s: the period in ns stays far inside 64 bits.
  app.add_option("--real-rate", c.real_per_s, "generator: real requests per second")
      ->check(rill_examples::number_in(0.001, 1e6, false));
  app.add_option("--latency-out", c.latency_out,
                 "generator: write every real request's round trip (ns, one per line) to this file "
                 "at the end");
  app.add_option("--tick", tick_us,
                 "generator, paced (--rate > 0): microseconds between two writes (larger = "
                 "fewer, bigger writes at every hop)")
      ->check(rill_examples::whole_number(1, 1'000'000'000));
  std::int64_t stall_s = c.stall_timeout.count();
  app.add_option("--stall-timeout", stall_s,
                 "generator: seconds without a record leaving (or, after the last one, without "
                 "the missing answers) before the run ends with exit status 1")
      ->check(rill_examples::whole_number(1, 86400));
  app.add_option("--segment-records", c.segment_records, "records per segment file")
      ->check(rill_examples::whole_number(1, std::int64_t{1} << 40));
  app.add_option("--buffer", c.buffer_bytes,
                 "bytes buffered per TCP destination before backpressure")
      ->check(rill_examples::whole_number(1, pib));
  app.add_flag("--nagle", c.nagle, "leave Nagle's algorithm on (default: TCP_NODELAY)");
  app.add_flag("--disk-thread", c.disk_thread,
               "indexer/forwarder: write segment files on a thread of their own (default: "
               "write(2) on the loop, from the receive buffer)");
  app.add_flag("--reactor-reads", c.reactor_reads,
               "indexer/forwarder/processor/terminator: read through Asio's reactor (epoll, "
               "non-blocking reads) instead of blocking read(2) on the role's loop thread");
  app.add_option("--metrics-port", c.metrics_port,
                 "serve Prometheus metrics on 127.0.0.1:PORT/metrics while running (0 = off)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;      // bad arguments: 2
  }
  if (c.bytes % blob != 0) {
    std::fprintf(stderr, "--bytes: must be a multiple of %zu (the record size), got %llu\n", blob,
                 (unsigned long long)c.bytes);
    return 2;
  }
  // The endpoints each role needs (without them it would fail later with a less clear message).
  auto need = [&](bool ok, const char* what) {
    if (!ok) std::fprintf(stderr, "streamed_sockets: --role %s needs %s\n", c.role.c_str(), what);
    return ok;
  };
  const bool gen = c.role == "generator";
  if (!need(gen || !c.in.empty(), "--in ENDPOINT") || !need(!gen || !c.out.empty(), "--out ENDPOINT") ||
      !need(!(gen || c.role == "processor") || !c.back.empty(), "--back ENDPOINT"))
    return 2;
  c.tick = std::chrono::microseconds{tick_us};
  c.stall_timeout = std::chrono::seconds{stall_s};
  try {
    // The role table: --role NAME -> the function that runs it.
    const std::map<std::string, std::function<int(const config&)>> roles = {
        {"generator", streamed_sockets::generator}, {"indexer", streamed_sockets::relay},
        {"forwarder", streamed_sockets::relay},     {"processor", streamed_sockets::relay},
        {"terminator", streamed_sockets::terminator}};
    std::optional<rill::prometheus_server> metrics;
    if (c.metrics_port)
      metrics.emplace("127.0.0.1", c.metrics_port, [m = c.metrics] {
        std::string text;
        m->write_prometheus(text);
        return text;
      });
    return roles.at(c.role)(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streamed_sockets %s: %s\n", c.role.c_str(), e.what());
    return 2;
  }
}

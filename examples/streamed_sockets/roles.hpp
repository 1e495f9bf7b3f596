// roles.hpp — what the five roles of streamed_sockets share: the configuration from the
// command line (main.cpp), the record layout and the TCP options; one function per role:
//   generator.cpp   generator: fake traffic + real requests, prints the latency
//   relay.cpp       indexer / forwarder / processor: stamp, fan out, keep segment files, answer
//   terminator.cpp  terminator: counts and checks what arrives, prints GB/s
// The pipeline they form is drawn in main.cpp.
#pragma once

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rill/connectors/fan_out.hpp"
#include "rill/core/metrics.hpp"
#include "rill/core/prometheus_server.hpp"
#include "rill/connectors/file_sink.hpp"
#include "rill/connectors/tcp_sink.hpp"
#include "rill/connectors/tcp_source.hpp"

#include "cli_checks.hpp"

namespace streamed_sockets {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

constexpr std::size_t blob = 32;

struct config {
  std::string role, in, back, dir;
  std::vector<std::string> out;
  std::uint64_t bytes = std::uint64_t{1} << 30;
  double rate_gbps = 0;      // generator: fake traffic target, GB/s; 0 = as fast as possible
  double real_per_s = 1000;  // generator: real requests per second
  std::chrono::microseconds tick{250};  // generator, paced: time between two writes
  // generator: a run in which records wait and none leaves for this long (the chain does
  // not read) ends with exit status 1, as does one whose answers are still missing this
  // long after the last record left.
  std::chrono::seconds stall_timeout{30};
  // generator: if set, every real request's round trip in ns, one per line in answer order,
  // is written here at the end (8 bytes held per request until then: 1000/s for 10 s is
  // 80 KB), so that runs can be pooled (bench/streamed_sockets_vs_baseline.sh).
  std::string latency_out;
  bool nagle = false, quiet = false;
  // indexer/forwarder: segment files written by a thread of their own (a copy and a
  // hand-over per chunk) instead of write(2) on the loop, from the receive buffer.
  bool disk_thread = false;
  // indexer/forwarder/processor/terminator: read through Asio's reactor (epoll_wait, then
  // non-blocking reads) instead of blocking read(2) calls on the role's loop thread.
  bool reactor_reads = false;
  // Per TCP destination (bounded queue): at full speed every hop's queue is full, so the
  // round trip grows with it; 256 KiB is one batch of the generator.
  std::size_t buffer_bytes = std::size_t{256} << 10;
  std::uint64_t segment_records = std::uint64_t{1} << 20;  // 32 MiB segment files
  std::uint16_t metrics_port = 0;  // Prometheus endpoint on 127.0.0.1 (0 = off)
  // The role's metrics (one cell: each role runs one io thread); served on metrics_port.
  std::shared_ptr<rill::metrics_registry> metrics = std::make_shared<rill::metrics_registry>(1);
};

inline std::uint64_t now_ns() {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now().time_since_epoch()).count());
}
inline void put64(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
inline std::uint64_t get64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline rill::tcp_sink_options sink_opts(const config& c, const std::string& ep, const std::string& name) {
  return {.endpoint = rill::tcp_endpoint::parse(ep),
          .framing = rill::framing::fixed(blob),
          .buffer_bytes = c.buffer_bytes,
          .no_delay = !c.nagle,
          .name = name};
}
inline rill::tcp_source_options source_opts(const std::string& ep, const std::string& name) {
  return {.endpoint = rill::tcp_endpoint::parse(ep),
          .framing = rill::framing::fixed(blob),
          .read_bytes = std::size_t{256} << 10,
          .name = name};
}
inline void log_errors(rill::tcp_sink& s) {
  s.on_error([](const std::error_code&, const std::string& m) {
    std::fprintf(stderr, "%s\n", m.c_str());
  });
}

/// The roles; each returns the process exit status.
int generator(const config& c);
int relay(const config& c);  // indexer, forwarder, processor
int terminator(const config& c);

}  // namespace streamed_sockets

// The runtime's Prometheus endpoint (private to core/src): an Asio acceptor on a thread
// of its own, answering GET /metrics with runtime::prometheus_text().
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rill/core/runtime.hpp"

namespace rill {

/// The previous scrape's per-worker time totals, for the per-second gauges.
struct runtime::scrape_state {
  std::mutex mu;  // prometheus_text() may run on several threads
  std::int64_t at_ns = 0;
  std::vector<std::uint64_t> busy, backpressured;
  const void* run = nullptr;
};

struct runtime::endpoint {
  /// Binds address:port (throws config_error "runtime.metrics_port" when it cannot) and
  /// starts the thread.
  endpoint(runtime& rt, const std::string& address, std::uint16_t port);
  /// Stops the loop and joins the thread.
  ~endpoint();
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;

  void accept();

  runtime& rt;
  boost::asio::io_context ctx{1};
  boost::asio::ip::tcp::acceptor acceptor{ctx};
  std::uint16_t port = 0;
  std::thread thread;
};

}  // namespace rill

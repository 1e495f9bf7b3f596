// rill/core/prometheus_server.hpp — a small HTTP endpoint that answers Prometheus' scrapes.
//
// Defines rill::prometheus_server: listens on address:port and answers GET /metrics with
// the text a callback returns (the exposition format 0.0.4), on a thread of its own.
// runtime_options::metrics_port starts one for a runtime; a program without a runtime
// (examples/streamed_sockets) starts its own around a metrics_registry.
//
// Example (compiled by tests/banner_examples.py):
//   #include <rill/core/metrics.hpp>
//   rill::metrics_registry reg{1};
//   auto sent = reg.add_counter("rill_example_sent_total", "records sent");
//   rill::prometheus_server srv{"127.0.0.1", 0, [&] {
//     std::string text;
//     reg.write_prometheus(text);
//     return text;
//   }};
//   std::cout << "scrape http://127.0.0.1:" << srv.port() << "/metrics\n";
//   reg.cell(sent, 0).add(32);
//
// Why plain Asio and not Beast: the endpoint reads one request head and writes one
// response with Connection: close (Prometheus reconnects per scrape when told so), which
// is 60 lines of Asio; Beast would add a parser for requests we never get. The thread
// runs its own io_context (concurrency hint 1): a slow scraper never delays a worker.
//
// Thread safety: construct and destroy on one thread; port() from any thread. The
// callback runs on the server's thread, one scrape at a time; it must be safe to call
// concurrently with the threads that write the metrics (metrics_registry readers are).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace rill {

class prometheus_server {
 public:
  /// Binds `address`:`port` (port 0: an ephemeral port, see port()) and starts the
  /// thread. `text` answers GET /metrics (and GET /); other paths get 404. Throws
  /// rill::config_error with key "runtime.metrics_port" when the address cannot be
  /// parsed or bound (port in use).
  prometheus_server(const std::string& address, std::uint16_t port, std::function<std::string()> text);
  /// Stops accepting, closes open scrapes and joins the thread (blocks until then).
  ~prometheus_server();
  prometheus_server(const prometheus_server&) = delete;
  prometheus_server& operator=(const prometheus_server&) = delete;
  /// The port listened on. Any thread.
  std::uint16_t port() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace rill

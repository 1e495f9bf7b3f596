// rill/connectors/tcp_endpoint.hpp — where a TCP connector connects or listens, and how
// it retries.
//
// Defines:
//   rill::tcp_endpoint   connect to host:port, or listen on host:port (port 0 = any free port)
//   rill::tcp_backoff    reconnect delays: initial, doubling, capped
//   rill::detail::tcp_connector   yields connected sockets on an io_context: connect mode
//                        retries with backoff until the peer exists; listen mode accepts
//                        every incoming connection (the newest one supersedes the older)
//
// Example (compiled by tests/banner_examples.py):
//   #include <rill/connectors/tcp_sink.hpp>
//   auto ep = rill::tcp_endpoint::parse("connect:127.0.0.1:9000");   // or "listen:0.0.0.0:9000"
//   boost::asio::io_context io;
//   rill::tcp_sink sink{io, {.endpoint = ep, .framing = rill::framing::fixed(32)}};
//
// Thread safety: tcp_endpoint/tcp_backoff are plain values. A tcp_connector lives on one
// io_context: every call from the thread running it (construction from any thread
// before that thread runs it).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

namespace rill {

struct tcp_endpoint {
  enum class role : std::uint8_t { connect, listen };
  role r = role::connect;
  std::string host = "127.0.0.1";  ///< numeric IPv4/IPv6 address (no DNS: it would block)
  std::uint16_t port = 0;

  /// An endpoint that connects to host:port. Not checked here: a bad host fails the
  /// connect (on_error), never a DNS lookup.
  static tcp_endpoint connect(std::string host, std::uint16_t port) {
    return {role::connect, std::move(host), port};
  }
  /// An endpoint that listens on host:port (port 0: a free port, see port()).
  static tcp_endpoint listen(std::string host, std::uint16_t port) {
    return {role::listen, std::move(host), port};
  }
  /// "connect:HOST:PORT" or "listen:HOST:PORT" (HOST may be empty for listen: any
  /// address). Throws config_error("tcp.endpoint", ...) naming the text on a bad spec.
  static tcp_endpoint parse(const std::string& spec);
  /// The parse() form, "connect:HOST:PORT" / "listen:HOST:PORT", for logs and errors.
  std::string to_string() const;
};

/// Delay before reconnect attempt k (k = 0, 1, ...): min(initial * factor^k, max).
/// Reset to `initial` after a successful connection.
struct tcp_backoff {
  std::chrono::milliseconds initial{10};
  std::chrono::milliseconds max{1000};
  double factor = 2.0;
};

namespace detail {

/// Produces connected sockets. Connect mode: async_connect; on failure waits the backoff
/// delay and retries, forever (until stop()); reconnect() asks for a new connection after
/// the current one broke. Listen mode: binds in the constructor (throws
/// std::system_error naming the endpoint when the port is taken), then accepts every
/// connection; reconnect() does nothing (the peer reconnects). A failed accept (EMFILE:
/// the process is out of descriptors) is reported to on_error and retried after
/// accept_retry_delay: never a busy loop, never a dead listener (cpprestsdk #546 stopped
/// accepting for good; case C25).
/// SO_SNDBUF / SO_RCVBUF for every socket of a tcp_connector (0 = kernel default). Set
/// before listen() / connect(): the receive buffer decides the TCP window scale in the
/// handshake; set later, a smaller buffer can stall the connection.
struct tcp_socket_buffers {
  std::size_t send_bytes = 0, receive_bytes = 0;
};

/// The wait before accepting again after a failed accept: 20 attempts a second while
/// descriptors run out, and a freed descriptor is used within 50 ms.
inline constexpr std::chrono::milliseconds accept_retry_delay{50};

class tcp_connector : public std::enable_shared_from_this<tcp_connector> {
 public:
  using on_socket_fn = std::function<void(boost::asio::ip::tcp::socket&&)>;
  using on_error_fn = std::function<void(const std::error_code&, const std::string&)>;

  tcp_connector(boost::asio::io_context& io, tcp_endpoint ep, tcp_backoff b,
                tcp_socket_buffers bufs = {});
  /// Starts connecting/accepting. `on_socket` gets each new connection, `on_error` each
  /// failed connect/accept attempt (counted by the caller).
  void start(on_socket_fn on_socket, on_error_fn on_error);
  /// Connect mode: connect again after the backoff delay. Listen mode: no-op.
  void reconnect();
  /// Cancels pending connects/accepts/timers; handlers then complete with
  /// operation_aborted and do nothing. Idempotent.
  void stop();
  /// Listen mode: the bound port (useful with port 0). Connect mode: the configured port.
  std::uint16_t port() const noexcept { return port_; }
  const tcp_endpoint& endpoint() const noexcept { return ep_; }

 private:
  void connect_now();
  void accept_next();
  boost::asio::io_context& io_;
  tcp_endpoint ep_;
  tcp_backoff backoff_;
  tcp_socket_buffers bufs_;
  std::chrono::milliseconds delay_;
  boost::asio::steady_timer timer_;
  std::optional<boost::asio::ip::tcp::acceptor> acceptor_;
  std::optional<boost::asio::ip::tcp::socket> connecting_;
  on_socket_fn on_socket_;
  on_error_fn on_error_;
  std::uint16_t port_ = 0;
  bool stopped_ = false, pending_ = false;
};

}  // namespace detail
}  // namespace rill

// rill/connectors/http_transport.hpp — one small interface for "POST a body, get the
// answer back on my worker's loop", and its two implementations.
//
// Defines:
//   rill::http_errc, rill::http_category()   why a request failed (project error category)
//   rill::http_endpoint                      "http://host:port/target" parsed
//   rill::http_result                        what a completion receives
//   rill::http_transport                     the interface (post + connection gauges)
//   rill::make_beast_transport(ioc, opts)    Boost.Beast on the worker's own io_context,
//                                            bounded connection pool (the default)
//   rill::make_cpprest_transport(ioc, opts)  cpprestsdk's async client (its own thread
//                                            pool); completions posted back to `ioc`
//
// Example (on a worker; `ioc` is ctx.w->context()):
//   auto t = rill::make_beast_transport(ioc, {.endpoint = rill::http_endpoint::parse(
//                                                 "http://127.0.0.1:8080/enrich"),
//                                             .max_connections = 4});
//   t->post(R"(["443/tcp"])", std::chrono::milliseconds{500}, [](rill::http_result&& r) {
//     if (r.ec) std::cerr << r.ec.message() << ": " << r.detail << '\n';
//     else std::cout << r.status << ' ' << r.body << '\n';   // 200 ["https"]
//   });
//
// HTTP/1.1 carries one request at a time per connection (RFC 9112 §9.3), so a transport
// holds at most `max_connections` sockets; more concurrent posts wait for a free one
// (their timeout runs while they wait). Connections are kept alive and reused.
//
// Thread safety: a transport belongs to one io_context (one worker). post() only from
// that io_context's thread; completions run on it, never inline inside post(). Destroy
// the transport on the thread that owns it, or after the io_context stopped running.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

namespace rill {

/// Why a request failed. What the caller should do: every kind may succeed on a retry
/// (the enrich operator retries them all with backoff); `bad_url` never will.
enum class http_errc {
  timeout = 1,          ///< no complete answer within the timeout (includes waiting for a slot)
  connection_refused,   ///< nothing listens at the endpoint
  connection_reset,     ///< the peer reset the connection (RST / EPIPE)
  connection_closed,    ///< the peer closed the connection before a complete answer
  http_status,          ///< an answer with a status other than 2xx (http_result::status)
  malformed_response,   ///< the bytes are not a valid HTTP answer, or its body is not what
                        ///< the caller expects (set by callers such as enrich)
  wrong_length,         ///< the answer's array length differs from the request's (enrich)
  other,                ///< any other I/O error (detail has the system message)
  bad_key,              ///< a record's key cannot be encoded as JSON (e.g. invalid UTF-8):
                        ///< never sent (enrich); permanent, retrying cannot help
};
const std::error_category& http_category() noexcept;
inline std::error_code make_error_code(http_errc e) noexcept {
  return {static_cast<int>(e), http_category()};
}

/// "http://HOST[:PORT]/TARGET". Only plain http (loopback services).
struct http_endpoint {
  std::string host;
  std::string port = "80";
  std::string target = "/";
  /// Throws rill::config_error (key "http.url") when `url` is not http://host[:port][/path].
  static http_endpoint parse(std::string_view url);
};

/// A completion's argument. `ec` empty: `status` and `body` hold the answer (any status;
/// the transport does not judge it). `ec` set: `detail` says what happened, in words.
struct http_result {
  std::error_code ec;
  unsigned status = 0;
  std::string body;
  std::string detail;
};

class http_transport {
 public:
  using completion = std::function<void(http_result&&)>;
  virtual ~http_transport() = default;
  /// POSTs `body` (application/json) to the endpoint. `done` runs exactly once, on the
  /// owning io_context, after the answer, an error, or `timeout` (then ec = timeout and
  /// the connection is closed, never reused). Never blocks; never throws after
  /// construction (allocation failure aside).
  virtual void post(std::string body, std::chrono::milliseconds timeout, completion done) = 0;
  /// Sockets open now / the most ever open at once (gauges; owning thread).
  virtual std::size_t open_connections() const noexcept = 0;
  virtual std::size_t peak_connections() const noexcept = 0;
  virtual const char* name() const noexcept = 0;
};

struct http_transport_options {
  http_endpoint endpoint;
  /// Upper bound on sockets this transport opens (>= 1). Beast enforces it; cpprestsdk
  /// has no such limit, so the caller's max_in_flight bounds it there.
  std::size_t max_connections = 4;
};

enum class http_transport_kind { beast, cpprest };

/// Resolves the endpoint now (call at build time, not on a worker: resolution of a name
/// may block; numeric addresses do not). Throws config_error("http.url") if it fails.
std::unique_ptr<http_transport> make_beast_transport(boost::asio::io_context& ioc,
                                                     http_transport_options opts);
/// cpprestsdk http_client with its own thread pool; results are posted to `ioc`.
/// The destructor waits (up to 5 s) for requests still running in cpprestsdk.
std::unique_ptr<http_transport> make_cpprest_transport(boost::asio::io_context& ioc,
                                                       http_transport_options opts);
inline std::unique_ptr<http_transport> make_http_transport(http_transport_kind kind,
                                                           boost::asio::io_context& ioc,
                                                           http_transport_options opts) {
  return kind == http_transport_kind::cpprest ? make_cpprest_transport(ioc, std::move(opts))
                                              : make_beast_transport(ioc, std::move(opts));
}

}  // namespace rill

template <>
struct std::is_error_code_enum<rill::http_errc> : std::true_type {};

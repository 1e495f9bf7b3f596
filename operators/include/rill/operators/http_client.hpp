// rill/operators/http_client.hpp — the asynchronous HTTP client interface the enrich
// operator calls: "POST a body, get the answer back on my worker's loop".
//
// Defines:
//   rill::http_errc, rill::http_category()   why a request failed (project error category)
//   rill::http_endpoint                      "http://host:port/target" parsed
//   rill::http_request                       what post() sends: body, timeout, idempotency key
//   rill::http_result                        what a completion receives
//   rill::http_transport                     the interface (post + connection gauges)
//   rill::http_transport_options             what a factory gets: endpoint, connection bound
//   rill::http_transport_factory             makes one worker's transport (enrich_options)
//
// The implementations are connectors (<rill/connectors/http_transport.hpp>): Boost.Beast
// on the worker's loop (target rill::http) and cpprestsdk (target rill::cpprest). A test
// or a user may implement http_transport itself; enrich sees only this interface.
//
// Example (namespace scope; a transport that answers every key with null, e.g. for a dry
// run; run through enrich by tests/operators/enrich_test.cpp, "enrich_transport"):
//   #include <boost/asio/post.hpp>
//   #include <nlohmann/json.hpp>
//   struct null_transport final : rill::http_transport {
//     explicit null_transport(boost::asio::io_context& ioc) : ioc_(ioc) {}
//     void post(rill::http_request req, completion done) override {
//       const auto n = nlohmann::json::parse(req.body).size();
//       boost::asio::post(ioc_, [n, done = std::move(done)] {
//         done(rill::http_result{.status = 200,
//                                .body = nlohmann::json(std::vector<std::nullptr_t>(n)).dump()});
//       });
//     }
//     std::size_t open_connections() const noexcept override { return 0; }
//     std::size_t peak_connections() const noexcept override { return 0; }
//     const char* name() const noexcept override { return "null"; }
//     boost::asio::io_context& ioc_;
//   };
//   rill::http_transport_factory null_factory = [](boost::asio::io_context& ioc,
//                                                  rill::http_transport_options) {
//     return std::make_unique<null_transport>(ioc);
//   };
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
#include <regex>
#include <string>
#include <string_view>
#include <system_error>

#include "rill/core/error.hpp"

namespace rill {

/// Why a request failed. What the caller should do: every kind but `bad_key` may succeed
/// on a retry (the enrich operator retries them all with backoff). Whether the service may
/// have seen the request is http_result::sent, not the code: a `timeout` after the request
/// was sent leaves the outcome unknown (retry with the same idempotency key).
enum class http_errc {
  timeout = 1,          ///< no complete answer within the timeout once the request began
                        ///< (connect, write or read; http_result::sent says which side)
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
  expired_unsent,       ///< the timeout passed while the request waited unsent: for a free
                        ///< connection, or for its worker's loop (busy with other work).
                        ///< Not a service timeout: nothing reached the service; retry
};

namespace detail {
class http_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "rill.http"; }
  std::string message(int c) const override {
    switch (static_cast<http_errc>(c)) {
      case http_errc::timeout: return "timeout";
      case http_errc::connection_refused: return "connection refused";
      case http_errc::connection_reset: return "connection reset";
      case http_errc::connection_closed: return "connection closed before a complete answer";
      case http_errc::http_status: return "HTTP status not 2xx";
      case http_errc::malformed_response: return "malformed answer";
      case http_errc::wrong_length: return "answer has the wrong length";
      case http_errc::bad_key: return "key cannot be encoded as JSON";
      case http_errc::other: return "I/O error";
      case http_errc::expired_unsent: return "timeout passed before the request was sent";
    }
    return "unknown http error";
  }
};
}  // namespace detail

/// The category of http_errc ("rill.http"); one object per program (inline function).
inline const std::error_category& http_category() noexcept {
  static const detail::http_category_impl c;
  return c;
}
inline std::error_code make_error_code(http_errc e) noexcept {
  return {static_cast<int>(e), http_category()};
}

/// "http://HOST[:PORT]/TARGET". Only plain http (loopback services).
struct http_endpoint {
  std::string host{};
  std::string port = "80";
  std::string target = "/";
  /// Throws rill::config_error (key "http.url") when `url` is not http://host[:port][/path].
  static http_endpoint parse(std::string_view url) {
    static const std::regex re(R"(^http://([^/:]+)(?::(\d+))?(/.*)?$)");
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_match(url.begin(), url.end(), m, re))
      throw config_error("http.url", "http.url must look like http://host[:port][/path], got \"" +
                                         std::string(url) + "\"");
    http_endpoint e;
    e.host = m[1].str();
    if (m[2].matched) e.port = m[2].str();
    if (m[3].matched) e.target = m[3].str();
    return e;
  }
};

/// One POST. Value type (distinct objects: safe; shared: unsafe).
struct http_request {
  std::string body{};                       ///< sent as application/json
  /// From post() to the last byte of the answer, waiting for a connection included; > 0.
  std::chrono::milliseconds timeout{1000};
  /// Sent as the `Idempotency-Key` header when not empty (IETF httpapi draft "The
  /// Idempotency-Key HTTP Header Field"). A caller that retries gives every attempt of one
  /// logical request the same key, so a service that honours it applies it at most once.
  std::string idempotency_key{};
};

/// A completion's argument. `ec` empty: `status` and `body` hold the answer (any status;
/// the transport does not judge it). `ec` set: `detail` says what happened, in words.
struct http_result {
  std::error_code ec{};
  unsigned status = 0;
  std::string body{};
  std::string detail{};
  /// True when bytes of the request may have reached the service: its write began (an
  /// answer implies it). False: the service never saw this attempt (refused connect,
  /// expired_unsent, a timeout during connect). A transport that cannot tell reports true.
  bool sent = false;
};

class http_transport {
 public:
  using completion = std::function<void(http_result&&)>;
  virtual ~http_transport() = default;
  /// POSTs `req.body` (application/json) to the endpoint, with `Idempotency-Key:
  /// req.idempotency_key` when that is not empty. `done` runs exactly once, on the owning
  /// io_context, after the answer, an error, or `req.timeout` from this call: then ec =
  /// timeout when the request had begun (connection closed, never reused), or
  /// expired_unsent when it was still waiting (for a connection or for the loop), with the
  /// wait in `detail`. Never blocks; never throws after construction (allocation failure
  /// aside).
  virtual void post(http_request req, completion done) = 0;
  /// Sockets open now / the most ever open at once (gauges; owning thread).
  virtual std::size_t open_connections() const noexcept = 0;
  virtual std::size_t peak_connections() const noexcept = 0;
  virtual const char* name() const noexcept = 0;
};

struct http_transport_options {
  http_endpoint endpoint{};
  /// Upper bound on sockets this transport opens (>= 1). HTTP/1.1 carries one request
  /// at a time per connection (RFC 9112 §9.3); an implementation that cannot bound its
  /// sockets says so in its own header.
  std::size_t max_connections = 4;
};

/// Makes the transport of one worker: called once per enrich instance while the job is
/// built, with that worker's io_context, before any record reaches the instance. May
/// throw config_error (e.g. an endpoint that does not resolve): the run fails to start.
using http_transport_factory =
    std::function<std::unique_ptr<http_transport>(boost::asio::io_context&, http_transport_options)>;

}  // namespace rill

template <>
struct std::is_error_code_enum<rill::http_errc> : std::true_type {};

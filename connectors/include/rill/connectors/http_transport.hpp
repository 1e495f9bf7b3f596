// rill/connectors/http_transport.hpp — the two implementations of rill::http_transport
// (<rill/operators/http_client.hpp>), the client interface of the enrich operator.
//
// Defines:
//   rill::make_beast_transport(ioc, opts)    Boost.Beast on the worker's own io_context,
//                                            bounded connection pool (target rill::http)
//   rill::make_cpprest_transport(ioc, opts)  cpprestsdk's async client (its own thread
//                                            pool); completions posted back to `ioc`
//                                            (target rill::cpprest)
//   rill::http_transport_kind, rill::http_transport_for(kind)   pick one by name
//
// Both have the signature of rill::http_transport_factory, so either is a value of
// enrich_options::transport as it is.
//
// Example (on a worker, whose loop is `ioc`; compiled by tests/banner_examples.py):
//   boost::asio::io_context ioc;
//   auto t = rill::make_beast_transport(ioc, {.endpoint = rill::http_endpoint::parse(
//                                                 "http://127.0.0.1:8080/enrich"),
//                                             .max_connections = 4});
//   t->post({.body = R"(["443/tcp"])", .timeout = std::chrono::milliseconds{500},
//            .idempotency_key = "batch-1"}, [](rill::http_result&& r) {
//     if (r.ec) std::cerr << r.ec.message() << ": " << r.detail << '\n';
//     else std::cout << r.status << ' ' << r.body << '\n';   // 200 ["https"]
//   });
//
// HTTP/1.1 carries one request at a time per connection (RFC 9112 §9.3), so the Beast
// transport holds at most `max_connections` sockets; more concurrent posts wait for a
// free one (their timeout runs while they wait). Connections are kept alive and reused.
// cpprestsdk has no such limit, so the caller's max_in_flight bounds it there.
//
// Sent or not (http_result::sent): Beast knows; a request whose timeout passes before its
// write began (waiting for a connection, or for the worker's loop to run it) ends with
// http_errc::expired_unsent, one that timed out while connecting with timeout and sent =
// false. cpprestsdk sends from its own threads and does not say how far a request got: it
// reports sent = true for every outcome but a refused connection, and never
// expired_unsent (a busy worker delays only the completion, not the request).
//
// Thread safety: as http_transport (one io_context per transport).
#pragma once

#include <boost/asio/io_context.hpp>

#include <memory>

#include "rill/operators/http_client.hpp"

namespace rill {

/// Resolves the endpoint now (call at build time, not on a worker: resolution of a name
/// may block; numeric addresses do not). Throws config_error("http.url") if it fails.
/// Defined in target rill::http.
std::unique_ptr<http_transport> make_beast_transport(boost::asio::io_context& ioc,
                                                     http_transport_options opts);
/// cpprestsdk http_client with its own thread pool; results are posted to `ioc`.
/// The destructor waits (up to 5 s) for requests still running in cpprestsdk.
/// Defined in target rill::cpprest (links cpprestsdk and OpenSSL).
std::unique_ptr<http_transport> make_cpprest_transport(boost::asio::io_context& ioc,
                                                       http_transport_options opts);

/// The transports rill ships, by name (e.g. a command-line choice).
enum class http_transport_kind { beast, cpprest };
/// The factory of `kind`. Naming cpprest here links rill::cpprest's symbol, so a program
/// that calls this links both rill::http and rill::cpprest (target rill::enrich).
inline http_transport_factory http_transport_for(http_transport_kind kind) {
  if (kind == http_transport_kind::cpprest) return make_cpprest_transport;
  return make_beast_transport;
}

}  // namespace rill

// tests/support/enrichment_service.hpp — the small real HTTP enrichment service the
// enrich tests, examples and benchmark call (target rill_test_http_service). Runs
// in-process (this class) or as the `enrichment_service` program
// (examples/enrichment_service/main.cpp).
//
// Defines:
//   rill::svc::enrichment_service   a Boost.Beast HTTP/1.1 server on its own thread(s)
//   rill::svc::service_options      address/port, artificial latency, fault injection
//   rill::svc::fault_rule           which requests get which fault (deterministic)
//   rill::svc::lookup(key)          the data: "443/tcp" -> "https", "10.1.2.3" -> "private"
//
// Example:
//   rill::svc::enrichment_service s{{.latency = std::chrono::milliseconds{100}}};
//   s.start();                          // 127.0.0.1, ephemeral port
//   // POST s.url() with ["53/udp", "192.0.2.7", "nope"] answers ["domain", "documentation", null]
//   // GET  http://127.0.0.1:<port>/stats answers {"requests":1,"keys":3,...}
//   s.stop();
//
// Protocol: POST /enrich, body a JSON array of keys (strings), answers 200 with a JSON
// array of the same length: the IANA service name of "PORT/PROTO" (from /etc/services,
// Debian package netbase, which copies the IANA Service Name and Transport Protocol Port
// Number Registry), or the address class of an IPv4/IPv6 address per the IANA IPv4/IPv6
// Special-Purpose Address Registries (RFC 6890; entries hand-listed with their RFCs in
// enrichment_service.cpp), or null when unknown. A body that is not a JSON array: 400.
// GET /stats: requests seen, keys seen, batch-size counts, peak concurrency (requests
// received and not yet answered), connections accepted, faults injected, distinct
// Idempotency-Key values seen.
//
// Faults: request k (0-based, in arrival order of POST /enrich) gets the first rule that
// selects it: k < rule.first, or rule.rate > 0 and floor((j+1)*rate) > floor(j*rate) with
// j = k - first (so exactly one in every 1/rate requests, deterministically).
//
// Thread safety: start/stop from one thread; stats() and url() from any thread.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rill::svc {

enum class fault_kind { none, http_5xx, drop, malformed, wrong_length, stall };
/// "5xx", "drop", "malformed", "wrong_length", "stall"; nullopt otherwise.
std::optional<fault_kind> parse_fault_kind(std::string_view s);
const char* to_string(fault_kind k) noexcept;

struct fault_rule {
  fault_kind kind = fault_kind::none;
  double rate = 0;         ///< 0..1: fraction of the requests after `first`
  std::size_t first = 0;   ///< the first N requests all get this fault
};

struct service_options {
  std::string address = "127.0.0.1";
  unsigned short port = 0;                       ///< 0 = ephemeral
  std::chrono::milliseconds latency{0};          ///< added to every answer (timer, no thread)
  /// Request k waits latency + latency_cycle[k % size] (out-of-order answers in tests).
  std::vector<std::chrono::milliseconds> latency_cycle{};
  std::vector<fault_rule> faults{};
  std::string services_file = "/etc/services";   ///< netbase; see the banner
  std::size_t threads = 1;
};

struct service_stats {
  std::uint64_t requests = 0, keys = 0, connections = 0, concurrency = 0, peak_concurrency = 0;
  std::map<std::size_t, std::uint64_t> batch_sizes;  ///< batch size -> requests
  std::map<std::string, std::uint64_t> faults;       ///< fault kind -> requests
  /// The Idempotency-Key header of each POST /enrich, in arrival order ("" when absent).
  /// In to_json() only as the number of distinct keys (`idempotency_keys`).
  std::vector<std::string> idempotency_keys;
  nlohmann::json to_json() const;
};

/// Service name of "PORT/PROTO" or address class of an IP, or null (see the banner).
/// Loads /etc/services on first use (any thread; thread-safe).
nlohmann::json lookup(const nlohmann::json& key);
/// Address class of an IPv4/IPv6 literal: "private", "loopback", "link-local",
/// "multicast", "documentation", "shared", "benchmarking", "this-network", "reserved",
/// "broadcast", "unspecified", "ietf-protocol", "6to4-relay", "ipv4-mapped", "nat64",
/// "discard-only", "teredo", "orchid", "6to4" (IPv6 unique-local is "private"), or
/// "global"; nullopt
/// when `ip` is not an address.
std::optional<std::string> ip_class(std::string_view ip);

class enrichment_service {
 public:
  explicit enrichment_service(service_options o = {});
  ~enrichment_service();
  enrichment_service(const enrichment_service&) = delete;
  enrichment_service& operator=(const enrichment_service&) = delete;
  /// Binds and starts serving; returns the bound port. Throws std::system_error when the
  /// address cannot be bound, std::runtime_error when the services file is unreadable.
  unsigned short start();
  /// Closes every connection (stalled ones too) and joins the threads. Idempotent.
  void stop();
  unsigned short port() const noexcept;
  std::string url() const;  ///< http://ADDRESS:PORT/enrich
  service_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace rill::svc

// The enrichment service: Boost.Beast HTTP/1.1 server, data tables, fault injection.
#include "enrichment_service.hpp"

#include <fcntl.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <cmath>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

namespace rill::svc {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

std::optional<fault_kind> parse_fault_kind(std::string_view s) {
  if (s == "5xx") return fault_kind::http_5xx;
  if (s == "drop") return fault_kind::drop;
  if (s == "malformed") return fault_kind::malformed;
  if (s == "wrong_length") return fault_kind::wrong_length;
  if (s == "stall") return fault_kind::stall;
  return std::nullopt;
}

const char* to_string(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::none: return "none";
    case fault_kind::http_5xx: return "5xx";
    case fault_kind::drop: return "drop";
    case fault_kind::malformed: return "malformed";
    case fault_kind::wrong_length: return "wrong_length";
    case fault_kind::stall: return "stall";
  }
  return "?";
}

json service_stats::to_json() const {
  json b = json::object(), f = json::object();
  for (auto& [size, n] : batch_sizes) b[std::to_string(size)] = n;
  for (auto& [kind, n] : faults) f[kind] = n;
  return {{"requests", requests}, {"keys", keys}, {"connections", connections},
          {"concurrency", concurrency}, {"peak_concurrency", peak_concurrency},
          {"batch_sizes", b}, {"faults", f},
          {"idempotency_keys", std::set<std::string>(idempotency_keys.begin(), idempotency_keys.end()).size()}};
}

// ---- data ---------------------------------------------------------------------------

namespace {

/// "PORT/PROTO" -> first service name for it in the services(5) file. Source: Debian
/// package netbase (/etc/services), "updated from IANA's Service Name and Transport
/// Protocol Port Number Registry" (its changelog); installed by scripts/setup.
std::unordered_map<std::string, std::string> load_services(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the services file (package netbase)");
  std::unordered_map<std::string, std::string> m;
  std::string line;
  while (std::getline(in, line)) {
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ls(line);
    std::string name, port_proto;
    if (!(ls >> name >> port_proto)) continue;
    m.emplace(port_proto, name);  // keeps the first name for a port/proto
  }
  return m;
}

struct prefix {
  std::array<std::uint8_t, 16> bytes;
  unsigned len;  // in bits
  const char* cls;
};

template <std::size_t N>
bool matches(const std::array<std::uint8_t, N>& a, const std::array<std::uint8_t, 16>& p,
             unsigned len) {
  for (unsigned i = 0; i < len; ++i)
    if (((a[i / 8] >> (7 - i % 8)) & 1) != ((p[i / 8] >> (7 - i % 8)) & 1)) return false;
  return true;
}

prefix v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d, unsigned len,
          const char* cls) {
  return {{a, b, c, d}, len, cls};
}
prefix v6(const char* text, unsigned len, const char* cls) {
  return {asio::ip::make_address_v6(text).to_bytes(), len, cls};
}

// IANA IPv4 Special-Purpose Address Registry (RFC 6890) plus the multicast space
// (IANA IPv4 Multicast Address Space Registry, RFC 5771). Longest prefix wins.
const std::vector<prefix>& v4_table() {
  static const std::vector<prefix> t = {
      v4(0, 0, 0, 0, 8, "this-network"),           // RFC 791 §3.2, RFC 1122 §3.2.1.3
      v4(10, 0, 0, 0, 8, "private"),               // RFC 1918
      v4(100, 64, 0, 0, 10, "shared"),             // RFC 6598 (CGN shared address space)
      v4(127, 0, 0, 0, 8, "loopback"),             // RFC 1122 §3.2.1.3
      v4(169, 254, 0, 0, 16, "link-local"),        // RFC 3927
      v4(172, 16, 0, 0, 12, "private"),            // RFC 1918
      v4(192, 0, 0, 0, 24, "ietf-protocol"),       // RFC 6890 §2.1
      v4(192, 0, 2, 0, 24, "documentation"),       // RFC 5737 (TEST-NET-1)
      v4(192, 88, 99, 0, 24, "6to4-relay"),        // RFC 7526 (deprecated 6to4 relay anycast)
      v4(192, 168, 0, 0, 16, "private"),           // RFC 1918
      v4(198, 18, 0, 0, 15, "benchmarking"),       // RFC 2544
      v4(198, 51, 100, 0, 24, "documentation"),    // RFC 5737 (TEST-NET-2)
      v4(203, 0, 113, 0, 24, "documentation"),     // RFC 5737 (TEST-NET-3)
      v4(224, 0, 0, 0, 4, "multicast"),            // RFC 5771
      v4(240, 0, 0, 0, 4, "reserved"),             // RFC 1112 §4
      v4(255, 255, 255, 255, 32, "broadcast"),     // RFC 919 §7, RFC 8190
  };
  return t;
}

// IANA IPv6 Special-Purpose Address Registry (RFC 6890) plus multicast (RFC 4291 §2.7).
const std::vector<prefix>& v6_table() {
  static const std::vector<prefix> t = {
      v6("::1", 128, "loopback"),                  // RFC 4291
      v6("::", 128, "unspecified"),                // RFC 4291
      v6("::ffff:0:0", 96, "ipv4-mapped"),         // RFC 4291
      v6("64:ff9b::", 96, "nat64"),                // RFC 6052
      v6("64:ff9b:1::", 48, "nat64"),              // RFC 8215
      v6("100::", 64, "discard-only"),             // RFC 6666
      v6("2001::", 23, "ietf-protocol"),           // RFC 2928
      v6("2001::", 32, "teredo"),                  // RFC 4380
      v6("2001:2::", 48, "benchmarking"),          // RFC 5180
      v6("2001:20::", 28, "orchid"),               // RFC 7343 (ORCHIDv2)
      v6("2001:db8::", 32, "documentation"),       // RFC 3849
      v6("2002::", 16, "6to4"),                    // RFC 3056
      v6("3fff::", 20, "documentation"),           // RFC 9637
      v6("fc00::", 7, "private"),                  // RFC 4193 (unique local)
      v6("fe80::", 10, "link-local"),              // RFC 4291
      v6("ff00::", 8, "multicast"),                // RFC 4291 §2.7
  };
  return t;
}

template <std::size_t N>
std::string classify(const std::array<std::uint8_t, N>& a, const std::vector<prefix>& table) {
  const prefix* best = nullptr;
  for (const auto& p : table)
    if (matches(a, p.bytes, p.len) && (!best || p.len > best->len)) best = &p;
  return best ? best->cls : "global";
}

}  // namespace

std::optional<std::string> ip_class(std::string_view ip) {
  boost::system::error_code ec;
  auto a = asio::ip::make_address(std::string(ip), ec);
  if (ec) return std::nullopt;
  if (a.is_v4()) return classify(a.to_v4().to_bytes(), v4_table());
  return classify(a.to_v6().to_bytes(), v6_table());
}

json lookup(const json& key) {
  static const auto services = load_services("/etc/services");
  if (!key.is_string()) return nullptr;
  const auto& s = key.get_ref<const std::string&>();
  if (s.find('/') != std::string::npos) {
    auto it = services.find(s);
    return it == services.end() ? json(nullptr) : json(it->second);
  }
  if (auto c = ip_class(s)) return *c;
  return nullptr;
}

// ---- server -------------------------------------------------------------------------

struct enrichment_service::impl {
  service_options o;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  mutable std::mutex mu;
  service_stats st;
  std::uint64_t next_request = 0;
  unsigned short port = 0;
  std::unordered_map<std::string, std::string> services;

  fault_kind pick_fault(std::uint64_t k) const {
    for (const auto& r : o.faults) {
      if (k < r.first) return r.kind;
      const double j = double(k - r.first);
      if (r.rate > 0 && std::floor((j + 1) * r.rate) > std::floor(j * r.rate)) return r.kind;
    }
    return fault_kind::none;
  }

  json answer(const json& keys) const {
    json out = json::array();
    for (const auto& k : keys) {
      if (k.is_string()) {
        const auto& s = k.get_ref<const std::string&>();
        if (s.find('/') != std::string::npos) {
          auto it = services.find(s);
          out.push_back(it == services.end() ? json(nullptr) : json(it->second));
          continue;
        }
        if (auto c = ip_class(s)) {
          out.push_back(*c);
          continue;
        }
      }
      out.push_back(nullptr);
    }
    return out;
  }

  struct session : std::enable_shared_from_this<session> {
    impl& s;
    beast::tcp_stream stream;
    beast::flat_buffer buf;
    http::request<http::string_body> req;
    http::response<http::string_body> res;
    asio::steady_timer timer;
    session(impl& i, tcp::socket sock) : s(i), stream(std::move(sock)), timer(i.ioc) {}

    void read() {
      req = {};
      http::async_read(stream, buf, req, [self = shared_from_this()](beast::error_code ec, std::size_t) {
        if (ec) return self->close();
        self->handle();
      });
    }
    void close() {
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream.socket().close(ignored);
    }
    void reply(http::status status, std::string body) {
      res = {};
      res.result(status);
      res.version(11);
      res.set(http::field::content_type, "application/json");
      res.keep_alive(req.keep_alive());
      res.body() = std::move(body);
      res.prepare_payload();
      http::async_write(stream, res, [self = shared_from_this()](beast::error_code ec, std::size_t) {
        if (ec || !self->res.keep_alive()) return self->close();
        self->read();
      });
    }
    void handle() {
      if (req.method() == http::verb::get && req.target() == "/stats")
        return reply(http::status::ok, s.snapshot().to_json().dump());
      if (req.method() != http::verb::post || req.target() != "/enrich")
        return reply(http::status::not_found, R"({"error":"POST /enrich or GET /stats"})");
      json keys = json::parse(req.body(), nullptr, false);
      if (keys.is_discarded() || !keys.is_array())
        return reply(http::status::bad_request, R"({"error":"body must be a JSON array of keys"})");
      std::uint64_t k;
      fault_kind f;
      {
        std::lock_guard lk(s.mu);
        k = s.next_request++;
        f = s.pick_fault(k);
        ++s.st.requests;
        s.st.keys += keys.size();
        ++s.st.batch_sizes[keys.size()];
        s.st.idempotency_keys.emplace_back(req["Idempotency-Key"]);
        if (f != fault_kind::none) ++s.st.faults[to_string(f)];
        ++s.st.concurrency;
        s.st.peak_concurrency = std::max(s.st.peak_concurrency, s.st.concurrency);
      }
      auto delay = s.o.latency;
      if (!s.o.latency_cycle.empty()) delay += s.o.latency_cycle[k % s.o.latency_cycle.size()];
      if (delay.count() == 0) return respond(f, std::move(keys));
      timer.expires_after(delay);
      timer.async_wait([self = shared_from_this(), f, keys = std::move(keys)](beast::error_code ec) mutable {
        if (!ec) self->respond(f, std::move(keys));
      });
    }
    void done_one() {
      std::lock_guard lk(s.mu);
      --s.st.concurrency;
    }
    void respond(fault_kind f, json keys) {
      if (f == fault_kind::stall) {
        // Hold the request unanswered; it stops counting when the client gives up.
        req = {};
        http::async_read(stream, buf, req, [self = shared_from_this()](beast::error_code, std::size_t) {
          self->done_one();
          self->close();
        });
        return;
      }
      done_one();  // before the answer leaves: the client cannot start another one earlier
      switch (f) {
        case fault_kind::drop: return close();
        case fault_kind::http_5xx:
          return reply(http::status::service_unavailable, R"({"error":"injected 503"})");
        case fault_kind::malformed: return reply(http::status::ok, R"(["http", "dom)");
        case fault_kind::wrong_length: {
          json out = s.answer(keys);
          if (out.empty()) out.push_back(nullptr);
          else out.erase(out.size() - 1);
          return reply(http::status::ok, out.dump());
        }
        default: return reply(http::status::ok, s.answer(keys).dump());
      }
    }
  };

  service_stats snapshot() const {
    std::lock_guard lk(mu);
    return st;
  }

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket sock) {
      if (ec) return;
      ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);  // see start()
      {
        std::lock_guard lk(mu);
        ++st.connections;
      }
      std::make_shared<session>(*this, std::move(sock))->read();
      accept();
    });
  }
};

enrichment_service::enrichment_service(service_options o) : p_(std::make_unique<impl>()) {
  p_->o = std::move(o);
}
enrichment_service::~enrichment_service() { stop(); }

unsigned short enrichment_service::start() {
  p_->services = load_services(p_->o.services_file);
  tcp::endpoint ep{asio::ip::make_address(p_->o.address), p_->o.port};
  p_->acceptor.open(ep.protocol());
  // Asio opens sockets without close-on-exec: a program the test process spawns (the
  // example, tests/kafka/enrichment_kafka_test.cpp) would inherit the listener and hold
  // the port after stop(), so a service started again on that port could not bind it.
  ::fcntl(p_->acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  p_->acceptor.set_option(asio::socket_base::reuse_address(true));
  p_->acceptor.bind(ep);
  p_->acceptor.listen(asio::socket_base::max_listen_connections);
  p_->port = p_->acceptor.local_endpoint().port();
  p_->accept();
  for (std::size_t i = 0; i < std::max<std::size_t>(1, p_->o.threads); ++i)
    p_->threads.emplace_back([this] { p_->ioc.run(); });
  return p_->port;
}

void enrichment_service::stop() {
  if (!p_ || p_->threads.empty()) return;
  p_->ioc.stop();
  for (auto& t : p_->threads) t.join();
  p_->threads.clear();
  beast::error_code ignored;
  p_->acceptor.close(ignored);
}

unsigned short enrichment_service::port() const noexcept { return p_->port; }
std::string enrichment_service::url() const {
  return "http://" + p_->o.address + ":" + std::to_string(p_->port) + "/enrich";
}
service_stats enrichment_service::stats() const { return p_->snapshot(); }

}  // namespace rill::svc

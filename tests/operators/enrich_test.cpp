// Tests of rill::enrich against the real enrichment service on loopback (in-process,
// ephemeral port), through both transports (Boost.Beast, cpprestsdk).
//
// Graph under test (every test):
//   vector_source / gated_source (keys) -> enrich(service) -> sink (collector)
//                                               \-> error side output (collector)
//
// Expected values are hand-worked: service names from /etc/services (netbase; IANA
// registry), address classes from the IANA special-purpose registries (RFCs cited in
// tests/support/enrichment_service.cpp), request counts from the batch rule.
#include "rill/operators/enrich.hpp"

#include <gtest/gtest.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "enrichment_service.hpp"
#include "rill/connectors/http_transport.hpp"
#include "rill/core/runtime.hpp"
#include "rill/core/source.hpp"

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// Hand-checked against /etc/services (netbase 6.4).
const std::vector<std::pair<std::string, std::string>> known_ports = {
    {"20/tcp", "ftp-data"}, {"21/tcp", "ftp"},     {"22/tcp", "ssh"},          {"23/tcp", "telnet"},
    {"25/tcp", "smtp"},     {"53/udp", "domain"},  {"80/tcp", "http"},         {"110/tcp", "pop3"},
    {"123/udp", "ntp"},     {"143/tcp", "imap2"},  {"161/udp", "snmp"},        {"179/tcp", "bgp"},
    {"389/tcp", "ldap"},    {"443/tcp", "https"},  {"465/tcp", "submissions"}, {"514/udp", "syslog"},
    {"587/tcp", "submission"}, {"993/tcp", "imaps"}, {"995/tcp", "pop3s"},     {"5432/tcp", "postgresql"},
};

std::string expected(const std::string& key) {
  for (auto& [k, v] : known_ports)
    if (k == key) return v;
  return "?";
}

using out_t = std::pair<std::string, std::string>;  // key, value

struct collector {
  std::mutex mu;
  std::vector<out_t> out;
  std::vector<std::pair<std::string, rill::enrich_error>> errors;
};

std::vector<rill::record<std::string>> keys(std::size_t n) {
  std::vector<rill::record<std::string>> v;
  for (std::size_t i = 0; i < n; ++i)
    v.push_back({known_ports[i % known_ports.size()].first,
                 rill::event_time{std::chrono::milliseconds{std::int64_t(i)}}});
  return v;
}

/// A source that emits `first` records, then nothing (idle) until `gate()` is true (or
/// 5 s passed: the test then fails on its counts instead of hanging), then the rest.
struct gated_source {
  using value_type = std::string;
  std::vector<rill::record<std::string>> data;
  std::size_t first;
  std::function<bool()> gate;
  std::size_t split_count() const { return 1; }
  struct reader {
    const gated_source* s;
    std::size_t pos = 0;
    std::optional<std::chrono::steady_clock::time_point> waiting_since{};
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t max) {
      if (pos == s->first && pos < s->data.size()) {
        if (!waiting_since) waiting_since = std::chrono::steady_clock::now();
        if (!s->gate() && std::chrono::steady_clock::now() - *waiting_since < 5s)
          return rill::poll_status::idle;
      }
      const std::size_t stop = pos < s->first ? s->first : s->data.size();
      for (std::size_t n = 0; n < max && pos < stop; ++n) emit(rill::record<std::string>(s->data[pos++]));
      return pos < s->data.size() ? rill::poll_status::more : rill::poll_status::end;
    }
    std::string error() const { return {}; }
  };
  reader open(std::size_t) const { return reader{this, 0, std::nullopt}; }
};

template <class Src>
rill::run_report run_enrich(Src src, rill::enrich_options o, const std::shared_ptr<collector>& c,
                            std::size_t workers = 1) {
  rill::runtime rt{{.workers = workers, .topology = std::to_string(workers) + " nodes x 1 core"}};
  auto s = rill::enrich(
      rill::from(std::move(src)), std::move(o), [](const std::string& k) { return k; },
      [](std::string&& k, json&& v) {
        return out_t{std::move(k), v.is_string() ? v.get<std::string>() : v.dump()};
      },
      [c](rill::record<std::string>&& r, const rill::enrich_error& e) {
        std::lock_guard lk(c->mu);
        c->errors.emplace_back(std::move(r.value), e);
      });
  auto j = std::move(s).sink([c](out_t&& v) {
    std::lock_guard lk(c->mu);
    c->out.push_back(std::move(v));
  });
  return rt.run(j);
}

/// An address where nothing listens: bind an ephemeral port, then close it.
unsigned short dead_port() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

class enrich : public ::testing::TestWithParam<rill::http_transport_kind> {
 protected:
  rill::enrich_options opts(const rill::svc::enrichment_service& s) {
    rill::enrich_options o;
    o.url = s.url();
    o.transport = rill::http_transport_for(GetParam());
    o.metrics = m;
    return o;
  }
  std::shared_ptr<rill::enrich_metrics> m = std::make_shared<rill::enrich_metrics>();
  std::shared_ptr<collector> c = std::make_shared<collector>();
};

}  // namespace

TEST(enrich_service, ip_classes_per_iana_registries) {
  // Hand-worked from the IANA IPv4/IPv6 special-purpose registries.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"10.1.2.3", "private"},           {"172.31.255.255", "private"},  {"172.32.0.1", "global"},
      {"192.168.7.1", "private"},        {"127.0.0.1", "loopback"},      {"169.254.1.1", "link-local"},
      {"224.0.0.251", "multicast"},      {"239.255.255.250", "multicast"}, {"192.0.2.7", "documentation"},
      {"198.51.100.1", "documentation"}, {"203.0.113.9", "documentation"}, {"8.8.8.8", "global"},
      {"100.64.0.1", "shared"},          {"100.128.0.1", "global"},      {"198.19.255.1", "benchmarking"},
      {"255.255.255.255", "broadcast"},  {"240.0.0.1", "reserved"},      {"0.1.2.3", "this-network"},
      {"::1", "loopback"},               {"::", "unspecified"},          {"fe80::1", "link-local"},
      {"ff02::1", "multicast"},          {"2001:db8::1", "documentation"}, {"fd00::1", "private"},
      {"2a00:1450::1", "global"},        {"2001:0:1::1", "teredo"},      {"::ffff:10.0.0.1", "ipv4-mapped"},
  };
  for (auto& [ip, cls] : cases) EXPECT_EQ(rill::svc::ip_class(ip).value_or("none"), cls) << ip;
  EXPECT_FALSE(rill::svc::ip_class("not-an-ip"));
  EXPECT_EQ(rill::svc::lookup("443/tcp"), "https");
  EXPECT_EQ(rill::svc::lookup("10.0.0.1"), "private");
  EXPECT_TRUE(rill::svc::lookup("65000/xyz").is_null());
}

// 1000 keys, batch 100, linger far away: exactly 10 requests of 100, values right, in order.
TEST_P(enrich, batches_by_size) {
  rill::svc::enrichment_service s;
  s.start();
  auto o = opts(s);
  o.batch_size = 100;
  o.linger = 10s;
  auto rep = run_enrich(rill::vector_source<std::string>{keys(1000)}, o, c);
  ASSERT_EQ(c->out.size(), 1000u);
  for (std::size_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(c->out[i].first, known_ports[i % 20].first) << i;
    EXPECT_EQ(c->out[i].second, known_ports[i % 20].second) << i;
  }
  const auto st = s.stats();
  EXPECT_EQ(st.requests, 10u);
  EXPECT_EQ(st.batch_sizes, (std::map<std::size_t, std::uint64_t>{{100, 10}}));
  EXPECT_EQ(m->requests.load(), 10u);
  EXPECT_EQ(m->records.load(), 1000u);
  EXPECT_EQ(m->in_flight.load(), 0);
  EXPECT_EQ(rep.stage("enrich").in, 1000u);
  EXPECT_EQ(rep.stage("enrich").out, 1000u);
}

// Hostile keys: 2 of 22 are not valid UTF-8 (a lone 0xFF byte; a truncated 2-byte
// sequence), which nlohmann::json refuses to encode. They go to the error output at once
// with bad_key and attempts 0, never to the service; the 20 good keys are enriched in
// order with their known values (one request of 20), and nothing is lost.
TEST_P(enrich, key_that_is_not_json_goes_to_the_error_output) {
  rill::svc::enrichment_service s;
  s.start();
  auto o = opts(s);
  o.batch_size = 100;
  auto in = keys(20);
  in.insert(in.begin() + 5, {std::string("\xff/tcp"), rill::event_time{std::chrono::milliseconds{5}}});
  in.insert(in.begin() + 15, {std::string("80/t\xc3"), rill::event_time{std::chrono::milliseconds{14}}});
  auto rep = run_enrich(rill::vector_source<std::string>{in}, o, c);
  ASSERT_EQ(c->out.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(c->out[i].first, known_ports[i].first) << i;
    EXPECT_EQ(c->out[i].second, known_ports[i].second) << i;
  }
  ASSERT_EQ(c->errors.size(), 2u);
  EXPECT_EQ(c->errors[0].first, "\xff/tcp");
  EXPECT_EQ(c->errors[1].first, "80/t\xc3");
  for (auto& [k, e] : c->errors) {
    EXPECT_EQ(e.code, make_error_code(rill::http_errc::bad_key));
    EXPECT_EQ(e.attempts, 0u);
    EXPECT_NE(e.reason.find("UTF-8"), std::string::npos) << e.reason;
  }
  EXPECT_EQ(s.stats().requests, 1u);
  EXPECT_EQ(m->failed_records.load(), 2u);
  EXPECT_EQ(rep.stage("enrich").in, 22u);
  EXPECT_EQ(rep.stage("enrich").out, 20u);
}

// 5 keys, then the source waits until the service saw a request: only linger can send
// that partial batch. Then 5 more and end of input. Expect 2 requests of 5.
TEST_P(enrich, batches_by_linger) {
  rill::svc::enrichment_service s;
  s.start();
  auto o = opts(s);
  o.batch_size = 100;
  o.linger = 20ms;
  auto* sp = &s;
  auto rep = run_enrich(gated_source{keys(10), 5, [sp] { return sp->stats().requests >= 1; }}, o, c);
  EXPECT_EQ(c->out.size(), 10u);
  EXPECT_EQ(s.stats().batch_sizes, (std::map<std::size_t, std::uint64_t>{{5, 2}}));
}

// Answers come back out of order (request k waits 60, 0, 30, 0 ms cyclically).
// Ordered: input order holds. Unordered: every record once, and some overtaking happened.
TEST_P(enrich, ordered_holds_with_out_of_order_answers) {
  for (auto order : {rill::enrich_order::ordered, rill::enrich_order::unordered}) {
    rill::svc::enrichment_service s{{.latency_cycle = {60ms, 0ms, 30ms, 0ms}}};
    s.start();
    auto o = opts(s);
    o.batch_size = 10;
    o.linger = 10s;
    o.max_in_flight = 4;
    o.order = order;
    c = std::make_shared<collector>();
    auto in = keys(200);
    for (std::size_t i = 0; i < in.size(); ++i) in[i].value = known_ports[i % 20].first;
    run_enrich(rill::vector_source<std::string>{in}, o, c);
    ASSERT_EQ(c->out.size(), 200u);
    std::vector<std::string> got, want;
    for (auto& [k, v] : c->out) {
      got.push_back(k);
      EXPECT_EQ(v, expected(k));
    }
    for (auto& r : in) want.push_back(r.value);
    if (order == rill::enrich_order::ordered) {
      EXPECT_EQ(got, want);
    } else {
      EXPECT_NE(got, want) << "answers did not overtake (latency cycle not effective)";
      std::multiset<std::string> a(got.begin(), got.end()), b(want.begin(), want.end());
      EXPECT_EQ(a, b);
    }
  }
}

// The service records the peak number of requests it held at once.
TEST_P(enrich, max_in_flight_is_never_exceeded) {
  rill::svc::enrichment_service s{{.latency = 5ms}};
  s.start();
  auto o = opts(s);
  o.batch_size = 5;
  o.linger = 10s;
  o.max_in_flight = 3;
  run_enrich(rill::vector_source<std::string>{keys(300)}, o, c);
  EXPECT_EQ(c->out.size(), 300u);
  const auto st = s.stats();
  EXPECT_EQ(st.requests, 60u);
  EXPECT_LE(st.peak_concurrency, 3u);
  EXPECT_GE(st.peak_concurrency, 2u);  // it did overlap requests
  EXPECT_LE(m->peak_in_flight.load(), 3);
  EXPECT_EQ(m->in_flight.load(), 0);
  if (GetParam() == rill::http_transport_kind::beast) {
    EXPECT_LE(m->peak_connections.load(), 3u);
  }
}

// Every request faulty: each fault kind ends in the error side output with its reason,
// after 1 + retries attempts per batch, and the pipeline finishes.
TEST_P(enrich, every_fault_kind_reaches_the_error_output) {
  using fk = rill::svc::fault_kind;
  const std::vector<std::tuple<fk, rill::http_errc, std::string>> kinds = {
      {fk::http_5xx, rill::http_errc::http_status, "HTTP 503"},
      {fk::malformed, rill::http_errc::malformed_response, "malformed answer"},
      {fk::wrong_length, rill::http_errc::wrong_length, "answer has 9 values for 10 keys"},
      {fk::drop, rill::http_errc::connection_closed, ""},
  };
  for (auto& [kind, code, reason] : kinds) {
    SCOPED_TRACE(rill::svc::to_string(kind));
    rill::svc::enrichment_service s{{.faults = {{kind, 0, 1000}}}};
    s.start();
    c = std::make_shared<collector>();
    m = std::make_shared<rill::enrich_metrics>();
    auto o = opts(s);
    o.batch_size = 10;
    o.retries = 1;
    o.backoff = 1ms;
    auto rep = run_enrich(rill::vector_source<std::string>{keys(30)}, o, c);
    EXPECT_TRUE(c->out.empty());
    ASSERT_EQ(c->errors.size(), 30u);
    std::multiset<std::string> failed;
    for (auto& [k, e] : c->errors) {
      failed.insert(k);
      if (kind == fk::drop && GetParam() == rill::http_transport_kind::cpprest) {
        EXPECT_TRUE(e.code == rill::http_errc::connection_closed || e.code == rill::http_errc::connection_reset ||
                    e.code == rill::http_errc::other) << e.reason;
      } else {
        EXPECT_EQ(e.code, code) << e.reason;
      }
      EXPECT_NE(e.reason.find(reason), std::string::npos) << e.reason;
      EXPECT_EQ(e.attempts, 2u);
    }
    std::multiset<std::string> want;
    for (auto& r : keys(30)) want.insert(r.value);
    EXPECT_EQ(failed, want);
    EXPECT_EQ(s.stats().requests, 6u);  // 3 batches x (1 + 1 retry)
    EXPECT_EQ(m->failures.load(), 3u);
    EXPECT_EQ(m->timeouts.load(), 0u);
    EXPECT_EQ(m->timeout_unknown.load(), 0u);  // answered or cut off: not a timeout
    EXPECT_EQ(m->failed_unsent.load(), 0u);    // every attempt reached the service
    EXPECT_EQ(m->retries.load(), 3u);
    EXPECT_EQ(m->in_flight.load(), 0);
    EXPECT_EQ(rep.stage("enrich").errors, 30u);
  }
}

// A stalled service: the timeout fires, records go to the error output, nothing hangs.
TEST_P(enrich, stall_hits_the_timeout) {
  rill::svc::enrichment_service s{{.faults = {{rill::svc::fault_kind::stall, 0, 1000}}}};
  s.start();
  auto o = opts(s);
  o.batch_size = 5;
  o.timeout = 200ms;
  o.retries = 0;
  const auto t0 = std::chrono::steady_clock::now();
  run_enrich(rill::vector_source<std::string>{keys(10)}, o, c);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(c->errors.size(), 10u);
  for (auto& [k, e] : c->errors) EXPECT_EQ(e.code, rill::http_errc::timeout) << e.reason;
  EXPECT_LT(took, 3s);
  EXPECT_GE(took, 200ms);
}

// Nothing listens: connection refused after the retries, not a hang.
TEST_P(enrich, service_down_gives_errors_not_a_hang) {
  rill::enrich_options o;
  o.url = "http://127.0.0.1:" + std::to_string(dead_port()) + "/enrich";
  o.transport = rill::http_transport_for(GetParam());
  o.metrics = m;
  o.batch_size = 4;
  o.retries = 2;
  o.backoff = 1ms;
  run_enrich(rill::vector_source<std::string>{keys(8)}, o, c);
  ASSERT_EQ(c->errors.size(), 8u);
  for (auto& [k, e] : c->errors) {
    EXPECT_EQ(e.code, rill::http_errc::connection_refused) << e.reason;
    EXPECT_EQ(e.attempts, 3u);
  }
  EXPECT_EQ(m->requests.load(), 6u);  // 2 batches x 3 attempts
  EXPECT_EQ(m->failures.load(), 2u);
  EXPECT_EQ(m->failed_unsent.load(), 2u);  // the service never saw them
  EXPECT_EQ(m->timeout_unknown.load(), 0u);
  EXPECT_EQ(m->timeouts.load(), 0u);
  for (auto& [k, e] : c->errors) EXPECT_FALSE(e.outcome_unknown) << k;
}

// Every second request answers 503 (k = 1, 3, 5, ...). One request at a time, so batch
// b's first attempt is request 2b-1 for b >= 1 (fails) and its retry is request 2b (ok):
// 72 batches of 7 (500 = 71 x 7 + 3), 71 retries, 143 requests, each record exactly once.
TEST_P(enrich, retries_do_not_duplicate_records) {
  rill::svc::enrichment_service s{{.faults = {{rill::svc::fault_kind::http_5xx, 0.5, 0}}}};
  s.start();
  auto o = opts(s);
  o.batch_size = 7;
  o.max_in_flight = 1;
  o.retries = 3;
  o.backoff = 1ms;
  run_enrich(rill::vector_source<std::string>{keys(500)}, o, c);
  ASSERT_EQ(c->out.size(), 500u);
  EXPECT_TRUE(c->errors.empty());
  for (std::size_t i = 0; i < 500; ++i) EXPECT_EQ(c->out[i].first, known_ports[i % 20].first);
  EXPECT_EQ(m->retries.load(), 71u);
  EXPECT_EQ(s.stats().requests, 143u);
  EXPECT_EQ(m->failures.load(), 0u);
  // Idempotency-Key: request 0 is batch 0; requests 2b-1 and 2b (b >= 1) are the two
  // attempts of batch b and carry one key, which no other batch has.
  const auto ik = s.stats().idempotency_keys;
  ASSERT_EQ(ik.size(), 143u);
  for (std::size_t b = 1; b < 72; ++b) EXPECT_EQ(ik[2 * b - 1], ik[2 * b]) << "batch " << b;
  EXPECT_EQ(std::set<std::string>(ik.begin(), ik.end()).size(), 72u);
  EXPECT_FALSE(ik[0].empty());
}

// A stalled service: every attempt times out after its request was sent, so the batch's
// outcome is unknown (the service may have applied it). 5 keys = 1 batch, 3 attempts
// (retries 2), each with the batch's one Idempotency-Key.
TEST_P(enrich, timeout_after_the_request_was_sent_is_outcome_unknown) {
  rill::svc::enrichment_service s{{.faults = {{rill::svc::fault_kind::stall, 0, 1000}}}};
  s.start();
  auto o = opts(s);
  o.batch_size = 5;
  o.timeout = 150ms;
  o.retries = 2;
  o.backoff = 1ms;
  run_enrich(rill::vector_source<std::string>{keys(5)}, o, c);
  const auto st = s.stats();
  ASSERT_EQ(st.idempotency_keys.size(), 3u);
  EXPECT_FALSE(st.idempotency_keys[0].empty());
  EXPECT_EQ(st.idempotency_keys[1], st.idempotency_keys[0]);
  EXPECT_EQ(st.idempotency_keys[2], st.idempotency_keys[0]);
  ASSERT_EQ(c->errors.size(), 5u);
  for (auto& [k, e] : c->errors) {
    EXPECT_EQ(e.code, rill::http_errc::timeout) << e.reason;
    EXPECT_TRUE(e.outcome_unknown) << e.reason;
    EXPECT_NE(e.reason.find("timeout after 150 ms, request sent: outcome unknown"), std::string::npos) << e.reason;
    EXPECT_EQ(e.attempts, 3u);
    EXPECT_EQ(e.idempotency_key, st.idempotency_keys[0]);
  }
  EXPECT_EQ(m->requests.load(), 3u);
  EXPECT_EQ(m->retries.load(), 2u);
  EXPECT_EQ(m->timeouts.load(), 3u);
  EXPECT_EQ(m->failures.load(), 1u);
  EXPECT_EQ(m->timeout_unknown.load(), 1u);
  EXPECT_EQ(m->failed_unsent.load(), 0u);
  EXPECT_EQ(m->expired_unsent.load(), 0u);
}

// The first attempt stalls and times out, the retry (same key) is answered: one timeout,
// one retry, no failure, every record enriched once.
TEST_P(enrich, timeout_then_answer_counts_a_timeout_and_no_failure) {
  rill::svc::enrichment_service s{{.faults = {{rill::svc::fault_kind::stall, 0, 1}}}};
  s.start();
  auto o = opts(s);
  o.batch_size = 5;
  o.timeout = 150ms;
  o.retries = 1;
  o.backoff = 1ms;
  run_enrich(rill::vector_source<std::string>{keys(5)}, o, c);
  const auto st = s.stats();
  ASSERT_EQ(st.idempotency_keys.size(), 2u);
  EXPECT_EQ(st.idempotency_keys[1], st.idempotency_keys[0]);
  ASSERT_EQ(c->out.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(c->out[i].second, known_ports[i].second);
  EXPECT_TRUE(c->errors.empty());
  EXPECT_EQ(m->timeouts.load(), 1u);
  EXPECT_EQ(m->retries.load(), 1u);
  EXPECT_EQ(m->failures.load(), 0u);
  EXPECT_EQ(m->timeout_unknown.load(), 0u);
  EXPECT_EQ(m->expired_unsent.load(), 0u);
}

// A busy worker: key_fn of the second record takes 300 ms (a stand-in for any long work on
// the worker's loop) while the first record's batch (batch_size 1) waits for the loop to
// start its request. Its 100 ms timeout passes unsent: with Beast, which sends on the
// worker's loop, that is expired_unsent ("waited N ms unsent", N >= 300), not a service
// timeout, and the service never sees it; the second batch goes out and is answered.
// cpprestsdk sends from its own threads: both requests go out at once and are answered.
TEST_P(enrich, request_unsent_past_its_timeout_says_how_long_it_waited) {
  rill::svc::enrichment_service s;
  s.start();
  auto o = opts(s);
  o.batch_size = 1;
  o.timeout = 100ms;
  o.retries = 0;
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 core"}};
  auto j = rill::enrich(
                rill::from(rill::vector_source<std::string>{keys(2)}), o,
                [](const std::string& k) {
                  if (k == known_ports[1].first) std::this_thread::sleep_for(300ms);  // busy worker
                  return k;
                },
                [](std::string&& k, json&& v) { return out_t{std::move(k), v.get<std::string>()}; },
                [c = c](rill::record<std::string>&& r, const rill::enrich_error& e) {
                  std::lock_guard lk(c->mu);
                  c->errors.emplace_back(std::move(r.value), e);
                })
               .sink([c = c](out_t&& v) {
                 std::lock_guard lk(c->mu);
                 c->out.push_back(std::move(v));
               });
  rt.run(j);
  if (GetParam() == rill::http_transport_kind::cpprest) {
    EXPECT_EQ(c->out.size(), 2u);
    EXPECT_EQ(m->expired_unsent.load(), 0u);
    EXPECT_EQ(s.stats().requests, 2u);
    return;
  }
  ASSERT_EQ(c->errors.size(), 1u);
  const auto& [k, e] = c->errors[0];
  EXPECT_EQ(k, known_ports[0].first);
  EXPECT_EQ(e.code, rill::http_errc::expired_unsent);
  EXPECT_FALSE(e.outcome_unknown);
  std::smatch mt;
  ASSERT_TRUE(std::regex_search(e.reason, mt, std::regex(R"(^waited (\d+) ms unsent for its worker's loop \(timeout 100 ms\)$)")))
      << e.reason;
  EXPECT_GE(std::stoi(mt[1].str()), 300) << e.reason;
  ASSERT_EQ(c->out.size(), 1u);
  EXPECT_EQ(c->out[0], (out_t{known_ports[1].first, known_ports[1].second}));
  EXPECT_EQ(s.stats().requests, 1u);  // the expired one never reached the service
  EXPECT_EQ(m->expired_unsent.load(), 1u);
  EXPECT_EQ(m->timeouts.load(), 0u);
  EXPECT_EQ(m->failures.load(), 1u);
  EXPECT_EQ(m->failed_unsent.load(), 1u);
  EXPECT_EQ(m->timeout_unknown.load(), 0u);
}

// Cache: 5 distinct keys, then (after the first answer arrived) 95 more of the same keys:
// one request, 95 cache hits.
TEST_P(enrich, cache_answers_repeated_keys) {
  rill::svc::enrichment_service s;
  s.start();
  auto o = opts(s);
  o.batch_size = 5;
  o.cache_entries = 16;
  o.cache_ttl = 60s;
  std::vector<rill::record<std::string>> in;
  for (int i = 0; i < 100; ++i) in.push_back({known_ports[i % 5].first, rill::event_time{}});
  auto mm = m;
  run_enrich(gated_source{in, 5, [mm] { return mm->enriched.load() >= 5; }}, o, c);
  ASSERT_EQ(c->out.size(), 100u);
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(c->out[i].second, known_ports[i % 5].second);
  EXPECT_EQ(s.stats().requests, 1u);
  EXPECT_EQ(m->cache_hits.load(), 95u);
}

// Two workers, two splits: each instance keeps its own limit, every record arrives once.
TEST_P(enrich, two_workers) {
  rill::svc::enrichment_service s{{.latency = 2ms}};
  s.start();
  auto o = opts(s);
  o.batch_size = 10;
  o.linger = 10s;  // (a short linger may send partial batches while the source waits)
  o.max_in_flight = 2;
  std::vector<std::vector<rill::record<std::string>>> splits{keys(400), keys(400)};
  run_enrich(rill::vector_source<std::string>{splits}, o, c, 2);
  EXPECT_EQ(c->out.size(), 800u);
  EXPECT_EQ(s.stats().requests, 80u);
  EXPECT_LE(s.stats().peak_concurrency, 4u);
  for (auto& [k, v] : c->out) EXPECT_EQ(v, expected(k));
}

// C06 (reactor-netty #1012): the server closes the socket without an answer for the first
// 4 requests. max in flight 4, batch 1, timeout 500 ms, retry 0, 20 records.
// Expected: 4 records fail with a connection-closed error (counted), the in-flight gauge
// is back at 0, the other 16 are enriched, and the run finishes within about 2 s.
TEST_P(enrich, C06_server_closes_before_answering) {
  rill::svc::enrichment_service s{{.faults = {{rill::svc::fault_kind::drop, 0, 4}}}};
  s.start();
  auto o = opts(s);
  o.batch_size = 1;
  o.max_in_flight = 4;
  o.timeout = 500ms;
  o.retries = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto rep = run_enrich(rill::vector_source<std::string>{keys(20)}, o, c);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(c->errors.size(), 4u);
  for (auto& [k, e] : c->errors) {
    if (GetParam() == rill::http_transport_kind::beast)
      EXPECT_EQ(e.code, rill::http_errc::connection_closed) << e.reason;
    else  // cpprestsdk reports the peer's close as a reset or closed socket
      EXPECT_TRUE(e.code == rill::http_errc::connection_closed || e.code == rill::http_errc::connection_reset ||
                  e.code == rill::http_errc::other) << e.reason;
  }
  EXPECT_EQ(c->out.size(), 16u);
  for (auto& [k, v] : c->out) EXPECT_EQ(v, expected(k));
  std::multiset<std::string> all;
  for (auto& [k, v] : c->out) all.insert(k);
  for (auto& [k, e] : c->errors) all.insert(k);
  std::multiset<std::string> want;
  for (auto& r : keys(20)) want.insert(r.value);
  EXPECT_EQ(all, want);
  EXPECT_EQ(m->failures.load(), 4u);
  EXPECT_EQ(m->in_flight.load(), 0);
  EXPECT_EQ(rep.stage("enrich").errors, 4u);
  EXPECT_EQ(s.stats().requests, 20u);
  EXPECT_LE(s.stats().peak_concurrency, 4u);
  EXPECT_LT(took, 2s);
}

// The http_client.hpp banner's transport: enrich works on any http_transport, with no
// socket; every key gets null, so each record comes out with the value "null".
struct null_transport final : rill::http_transport {
  explicit null_transport(boost::asio::io_context& ioc) : ioc_(ioc) {}
  void post(rill::http_request req, completion done) override {
    const auto n = nlohmann::json::parse(req.body).size();
    boost::asio::post(ioc_, [n, done = std::move(done)] {
      done({.status = 200, .body = nlohmann::json(std::vector<std::nullptr_t>(n)).dump()});
    });
  }
  std::size_t open_connections() const noexcept override { return 0; }
  std::size_t peak_connections() const noexcept override { return 0; }
  const char* name() const noexcept override { return "null"; }
  boost::asio::io_context& ioc_;
};

TEST(enrich_transport, a_user_transport_serves_every_batch) {
  auto m = std::make_shared<rill::enrich_metrics>();
  auto c = std::make_shared<collector>();
  rill::enrich_options o;
  o.url = "http://127.0.0.1:1/unused";  // never connected: null_transport ignores it
  o.batch_size = 10;
  o.metrics = m;
  rill::http_transport_factory f = [](boost::asio::io_context& ioc, rill::http_transport_options) {
    return std::make_unique<null_transport>(ioc);
  };
  o.transport = f;
  std::vector<rill::record<std::string>> in;
  for (int i = 0; i < 95; ++i)
    in.push_back({std::to_string(i) + "/tcp", rill::event_time{std::chrono::seconds{i}}});
  run_enrich(rill::vector_source<std::string>{in}, o, c);
  ASSERT_EQ(c->out.size(), 95u);
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(c->out[i].first, in[i].value);  // ordered (the default), one worker
    EXPECT_EQ(c->out[i].second, "null");
  }
  EXPECT_TRUE(c->errors.empty());
  EXPECT_EQ(m->requests.load(), 10u);  // ceil(95 / 10) batches, no retry
}

TEST(enrich_transport, no_transport_is_a_config_error) {
  rill::enrich_options o;
  o.url = "http://127.0.0.1:1/enrich";
  try {
    o.validate();
    FAIL() << "validate() accepted an empty transport";
  } catch (const rill::config_error& e) {
    EXPECT_EQ(std::string(e.key()), "enrich.transport");
  }
}

INSTANTIATE_TEST_SUITE_P(transports, enrich,
                         ::testing::Values(rill::http_transport_kind::beast,
                                           rill::http_transport_kind::cpprest),
                         [](const auto& i) {
                           return std::string(i.param == rill::http_transport_kind::beast ? "beast"
                                                                                          : "cpprest");
                         });

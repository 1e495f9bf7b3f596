// kafka_mode.cpp — netflow's Kafka mode: the probe (pcap -> topic) and the analysis
// (topic -> key_by -> window_sort -> count -> topic). See kafka_mode.hpp.
#include "kafka_mode.hpp"
#include "flow_row.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstring>
#include <iostream>
#include <regex>
#include <thread>
#include <unordered_map>

#include <rill/connectors/kafka_sink.hpp>
#include <rill/connectors/kafka_source.hpp>
#include <rill/rill.hpp>

using namespace std::chrono_literals;

namespace netflow_kafka {
namespace {

// ---- packet wire format: fixed 64 bytes, little-endian ----
//  0 time ns (i64) | 8 wire_len (u32) | 12 cap_len (u32) | 16 proto | 17 ip_version |
// 18 flags (from_a 1, truncated 2, malformed 4, fragment 8, a_port set 16, b_port set 32) |
// 19 pad | 20 a_port (u16) | 22 b_port (u16) | 24 vlan_outer (u16) | 26 vlan_inner (u16) |
// 28 a_addr[16] | 44 b_addr[16] | 60 magic "RP1\0"
constexpr std::size_t wire_size = 64;

template <class U>
void put(std::string& s, std::size_t at, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i) s[at + i] = char((std::uint64_t(v) >> (8 * i)) & 0xff);
}
template <class U>
U get(std::string_view s, std::size_t at) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) v |= std::uint64_t(std::uint8_t(s[at + i])) << (8 * i);
  return U(v);
}

std::string encode(const rill::packet& p) {
  std::string s(wire_size, '\0');
  put<std::int64_t>(s, 0, p.time.time_since_epoch().count());
  put<std::uint32_t>(s, 8, p.wire_len);
  put<std::uint32_t>(s, 12, p.cap_len);
  s[16] = char(p.key.proto);
  s[17] = char(p.key.ip_version);
  s[18] = char((p.from_a ? 1 : 0) | (p.truncated ? 2 : 0) | (p.malformed ? 4 : 0) | (p.fragment ? 8 : 0) |
               (p.key.a_port ? 16 : 0) | (p.key.b_port ? 32 : 0));
  put<std::uint16_t>(s, 20, p.key.a_port.value_or(0));
  put<std::uint16_t>(s, 22, p.key.b_port.value_or(0));
  put<std::uint16_t>(s, 24, p.vlan_outer);
  put<std::uint16_t>(s, 26, p.vlan_inner);
  std::memcpy(s.data() + 28, p.key.a_addr.data(), 16);
  std::memcpy(s.data() + 44, p.key.b_addr.data(), 16);
  std::memcpy(s.data() + 60, "RP1", 4);
  return s;
}

/// Throws std::invalid_argument on a value that is not one of ours (poison message: the
/// source sends it to its error output with topic, partition and offset).
rill::packet decode_value(std::string_view s) {
  if (s.size() != wire_size || std::memcmp(s.data() + 60, "RP1", 4) != 0)
    throw std::invalid_argument("not a netflow packet record (" + std::to_string(s.size()) + " bytes)");
  rill::packet p;
  p.time = rill::event_time{std::chrono::nanoseconds{get<std::int64_t>(s, 0)}};
  p.wire_len = get<std::uint32_t>(s, 8);
  p.cap_len = get<std::uint32_t>(s, 12);
  p.key.proto = rill::ip_proto(std::uint8_t(s[16]));
  p.key.ip_version = std::uint8_t(s[17]);
  const auto f = std::uint8_t(s[18]);
  p.from_a = f & 1;
  p.truncated = f & 2;
  p.malformed = f & 4;
  p.fragment = f & 8;
  if (f & 16) p.key.a_port = get<std::uint16_t>(s, 20);
  if (f & 32) p.key.b_port = get<std::uint16_t>(s, 22);
  p.vlan_outer = get<std::uint16_t>(s, 24);
  p.vlan_inner = get<std::uint16_t>(s, 26);
  std::memcpy(p.key.a_addr.data(), s.data() + 28, 16);
  std::memcpy(p.key.b_addr.data(), s.data() + 44, 16);
  return p;
}

/// The message key: direction-normalised 5-tuple as text.
std::string tuple_key(const rill::flow_key& k) {
  return std::string(rill::to_string(k.proto)) + " " + k.a_endpoint() + " " + k.b_endpoint();
}

using netflow::flow_row;
using netflow::count_conversations;
using netflow::row_json;

std::chrono::nanoseconds parse_idle(const std::string& text) {
  static const std::regex re(R"(^\s*(\d+)\s*(ms|s)?\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw CLI::ValidationError("--idle-exit", "expected e.g. 3s or 500ms, got \"" + text + "\"");
  if (m[1].length() > 9)  // 999999999 s (31 years) still fits in nanoseconds
    throw CLI::ValidationError("--idle-exit", "\"" + text + "\" is out of range: at most 999999999 (s or ms)");
  const long long n = std::stoll(m[1].str());
  return m[2].matched && m[2].str() == "ms" ? std::chrono::nanoseconds{std::chrono::milliseconds{n}}
                                            : std::chrono::nanoseconds{std::chrono::seconds{n}};
}

int probe(const options& o, const std::vector<std::string>& inputs, rill::runtime& rt) {
  if (o.topic.empty()) {
    std::cerr << "netflow: --probe needs --topic\n";
    return 2;
  }
  auto sink = std::make_shared<rill::kafka_sink<rill::packet>>(
      // Kafka timestamp = produce time, the capture time stays in the value: a broker
      // deletes records by timestamp (retention.ms), and a capture may be years old.
      rill::kafka_sink_options{.brokers = o.brokers, .topic = o.topic,
                               .timestamps = rill::kafka_sink_options::timestamp_source::produce_time},
      [](const rill::packet& p) { return rill::kafka_message_out{tuple_key(p.key), encode(p)}; });
  rill::pcap_source src{inputs};
  auto stats = src.stats();
  const auto rep = rt.run(rill::from(std::move(src)).sink(sink, "kafka_sink"));
  std::cerr << nlohmann::json{{"packets", stats->packets.load()},
                              {"published", sink->stats().delivered.load()},
                              {"failed", sink->stats().failed.load()},
                              {"undelivered", sink->undelivered()},
                              {"errors", rep.errors}}
                   .dump()
            << '\n';
  for (const auto& e : sink->errors()) std::cerr << "netflow: " << e << '\n';
  return rep.errors.empty() && sink->errors().empty() && sink->undelivered() == 0 ? 0 : 1;
}

int analyse(const options& o, std::chrono::nanoseconds window, std::chrono::nanoseconds delay,
            rill::runtime& rt) {
  if (o.from.empty() || o.to.empty()) {
    std::cerr << "netflow: Kafka analysis needs --from TOPIC and --to TOPIC (or --probe)\n";
    return 2;
  }
  const auto idle = parse_idle(o.idle_exit);
  using in_rec = rill::kafka_record<std::string, rill::packet>;
  rill::kafka_source<std::string, rill::packet> src{
      {.brokers = o.brokers, .group = o.group, .topics = {o.from}, .commit_interval = 1s}, nullptr, decode_value};
  src.event_time_from([](const in_rec& r) { return r.value.time; });
  std::atomic<std::uint64_t> bad{0};
  src.on_error([&bad](const rill::kafka_bad_message& m) {
    // The first 10 are named (topic, partition, offset), as enrichment does; the report's
    // "bad" has the total (it named only the first one).
    const auto n = bad.fetch_add(1);
    if (n < 10)
      std::cerr << "netflow: " << m.topic << " partition " << m.partition << " offset " << m.offset << ": "
                << m.what << '\n';
    else if (n == 10)
      std::cerr << "netflow: more bad records: only the first 10 are named, \"bad\" in the report counts all\n";
  });
  auto stats = src.stats();
  auto sink = std::make_shared<rill::kafka_sink<flow_row>>(
      rill::kafka_sink_options{.brokers = o.brokers, .topic = o.to,  // produce time: as the probe's
                               .timestamps = rill::kafka_sink_options::timestamp_source::produce_time},
      [](const flow_row& r) { return rill::kafka_message_out{tuple_key(r.key), row_json(r)}; });
  auto job = rill::from(std::move(src))
                 .map([](in_rec&& r) { return std::move(r.value); })
                 .filter([](const rill::packet& p) { return p.key.proto != rill::ip_proto::non_ip; })
                 .key_by([](const rill::packet& p) { return std::hash<rill::flow_key>{}(p.key); })
                 .window_sort({.length = window, .max_delay = delay})
                 .flat_map(count_conversations)
                 .sink(sink, "kafka_sink");
  // --idle-exit: a bounded run for tests and benchmarks (graceful stop: windows fire,
  // flows are delivered, offsets committed).
  std::atomic<bool> running{true};
  std::thread watcher;
  if (idle.count() > 0) {
    watcher = std::thread([&] {
      std::uint64_t last = 0;
      auto since = std::chrono::steady_clock::now();
      while (running.load()) {
        std::this_thread::sleep_for(20ms);
        const auto c = stats->consumed.load() + stats->bad.load();
        const auto now = std::chrono::steady_clock::now();
        if (c != last) {
          last = c;
          since = now;
        } else if (now - since >= (c > 0 ? idle : 10 * idle)) {  // never read anything: 10x
          rt.request_stop();
          return;
        }
      }
    });
  }
  rill::run_report rep;
  try {
    rep = rt.run(job);
  } catch (...) {
    running = false;
    if (watcher.joinable()) watcher.join();
    throw;
  }
  running = false;
  if (watcher.joinable()) watcher.join();
  std::cerr << nlohmann::json{{"packets", stats->consumed.load()},
                              {"bad", stats->bad.load()},
                              {"late", rep.stage("window_sort").late},
                              {"rows", sink->stats().accepted.load()},
                              {"delivered", sink->stats().delivered.load()},
                              {"failed", sink->stats().failed.load()},
                              {"undelivered", sink->undelivered()},
                              {"commits", stats->commits.load()},
                              {"elapsed_s", rep.elapsed_s},
                              {"errors", rep.errors}}
                   .dump()
            << '\n';
  for (const auto& e : sink->errors()) std::cerr << "netflow: " << e << '\n';
  return rep.errors.empty() && sink->errors().empty() && sink->undelivered() == 0 ? 0 : 1;
}

}  // namespace

void add_options(CLI::App& app, options& o) {
  app.add_flag("--probe", o.probe, "Kafka: publish the decoded packets of --input to --topic");
  app.add_option("--brokers", o.brokers, "Kafka bootstrap servers HOST:PORT (Kafka mode)");
  app.add_option("--topic", o.topic, "Kafka: --probe's destination topic");
  app.add_option("--from", o.from, "Kafka: topic of packets to analyse");
  app.add_option("--to", o.to, "Kafka: topic the flow rows (JSON) go to");
  app.add_option("--group", o.group, "Kafka: consumer group of the analysis (default netflow)");
  app.add_option("--idle-exit", o.idle_exit, "Kafka: stop after this long without input (0 = run until SIGTERM)");
}

int run(const options& o, const std::vector<std::string>& inputs, std::chrono::nanoseconds window,
        std::chrono::nanoseconds delay, std::size_t workers, const std::string& topology) {
  if (o.brokers.empty()) {
    std::cerr << "netflow: Kafka mode needs --brokers HOST:PORT\n";
    return 2;
  }
  try {
    rill::runtime rt{{.workers = workers, .topology = topology, .handle_signals = true}};
    return o.probe ? probe(o, inputs, rt) : analyse(o, window, delay, rt);
  } catch (const CLI::Error& e) {
    std::cerr << "netflow: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {  // broker unreachable, bad capture, bad config
    std::cerr << "netflow: " << e.what() << '\n';
    return 2;
  }
}

}  // namespace netflow_kafka

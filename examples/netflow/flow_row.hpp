// flow_row.hpp — netflow's output row, shared by the file mode (netflow.cpp) and the Kafka
// mode (kafka_mode.cpp): one conversation's packets and bytes in one tumbling window, the
// windowed aggregation that makes it, and its JSON line.
#pragma once

#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include <rill/pcap.hpp>
#include <rill/rill.hpp>

namespace netflow {

struct flow_row {
  rill::event_time window_start, window_end;
  rill::flow_key key;
  std::uint64_t packets = 0, bytes = 0;
  // --enrich: IANA service name of the conversation's lower port, and each address's
  // IANA special-purpose class (enrichment service; null when unknown or not asked).
  nlohmann::json service, a_class, b_class;
};

/// Packets and bytes (wire length) of one conversation: the accumulator of netflow's
/// tumbling-window aggregation (rill::aggregate_function over rill::packet).
struct flow_counts {
  struct accumulator {
    std::uint64_t packets = 0, bytes = 0;
  };
  accumulator init() const noexcept { return {}; }
  void add(accumulator& a, const rill::packet& p) const noexcept {
    ++a.packets;
    a.bytes += p.wire_len;
  }
  void merge(accumulator& a, const accumulator& b) const noexcept {
    a.packets += b.packets;
    a.bytes += b.bytes;
  }
  accumulator result(const accumulator& a) const noexcept { return a; }
};

using flow_window = rill::keyed_window_result<rill::flow_key, flow_counts::accumulator>;

/// The job both modes run on decoded packets: IP packets only, keyed by the
/// direction-normalised 5-tuple, counted per tumbling window of `window` with max
/// out-of-order delay `delay`; one flow_row per (window, conversation). A stop drains:
/// open windows fire (window_options::stop_policy::fire), as at end of input.
template <class Packets>
auto count_flows(Packets&& packets, std::chrono::nanoseconds window, std::chrono::nanoseconds delay,
                 std::chrono::nanoseconds idle_timeout = {}) {
  return std::forward<Packets>(packets)
      .filter([](const rill::packet& p) { return p.key.proto != rill::ip_proto::non_ip; })
      .key_by([](const rill::packet& p) { return p.key; })
      .window(rill::tumbling{window}, {.max_delay = delay,
                                       .idle_timeout = idle_timeout,
                                       .on_stop = rill::window_options::stop_policy::fire})
      .name("window")
      .aggregate(flow_counts{})
      .map([](flow_window&& w) {
        return flow_row{w.start, w.end, w.key, w.value.packets, w.value.bytes, {}, {}, {}};
      });
}

/// The JSON line: window_start_ns, window_end_ns, proto, a_ip, a_port, b_ip, b_port,
/// packets, bytes (ports null when the key has none), plus service/a_class/b_class when
/// `enriched`. Byte for byte what nlohmann::ordered_json's dump() gives for those fields
/// (tests/examples/flow_row_test.cpp checks it): every field but the enrichment ones is
/// a number or text that needs no escaping (a protocol name, inet_ntop's address), so the
/// line is appended with std::to_chars instead of building a JSON tree per row.
inline void append_row_json(std::string& s, const flow_row& r, bool enriched = false) {
  auto number = [&s](auto v) {
    char buf[24];
    s.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  };
  auto port = [&](const std::optional<std::uint16_t>& p) {
    if (p) number(*p);
    else s += "null";
  };
  s += "{\"window_start_ns\":";
  number(r.window_start.time_since_epoch().count());
  s += ",\"window_end_ns\":";
  number(r.window_end.time_since_epoch().count());
  s += ",\"proto\":\"";
  s += rill::to_string(r.key.proto);
  s += "\",\"a_ip\":\"";
  s += r.key.a_ip_string();
  s += "\",\"a_port\":";
  port(r.key.a_port);
  s += ",\"b_ip\":\"";
  s += r.key.b_ip_string();
  s += "\",\"b_port\":";
  port(r.key.b_port);
  s += ",\"packets\":";
  number(r.packets);
  s += ",\"bytes\":";
  number(r.bytes);
  if (enriched) {
    s += ",\"service\":";
    s += r.service.dump();
    s += ",\"a_class\":";
    s += r.a_class.dump();
    s += ",\"b_class\":";
    s += r.b_class.dump();
  }
  s += '}';
}
inline std::string row_json(const flow_row& r, bool enriched = false) {
  std::string s;
  s.reserve(192);
  append_row_json(s, r, enriched);
  return s;
}

}  // namespace netflow

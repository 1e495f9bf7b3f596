// flow_row.hpp — netflow's output row, shared by the file mode (netflow.cpp) and the Kafka
// mode (kafka_mode.cpp): one conversation in one tumbling window (or, with
// --conversations, over the whole capture) with per-direction packets, bytes and TCP
// flags and its first and last packet's time; the windowed aggregation that makes it
// (flow_stats.hpp), and its JSON line and CSV line.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <rill/pcap.hpp>
#include <rill/rill.hpp>

#include "flow_stats.hpp"

namespace netflow {

struct flow_row {
  rill::event_time window_start, window_end;
  rill::flow_key key;
  std::uint64_t packets = 0, bytes = 0;  ///< both directions together
  direction_counts a_to_b, b_to_a;       ///< a = key's endpoint a (the smaller)
  rill::event_time first, last;          ///< capture times of the first and last packet
  // --enrich: IANA service name of the conversation's lower port, and each address's
  // IANA special-purpose class (enrichment service; null when unknown or not asked).
  nlohmann::json service, a_class, b_class;
};

using flow_window = rill::keyed_window_result<rill::flow_key, flow_stats::value>;

/// The window length that makes one window of a whole capture (--conversations): [0,
/// INT64_MAX ns) holds every capture time a pcap reader returns (rill::pcap_reader: 1970
/// to 2262-04-11); the keyed windows compute bounds in 128 bits, so it does not overflow.
inline constexpr std::chrono::nanoseconds whole_capture = std::chrono::nanoseconds::max();

/// The row of one window result.
inline flow_row row_of(const flow_window& w) {
  const auto& v = w.value;
  return flow_row{w.start, w.end, w.key, v.a_to_b.packets + v.b_to_a.packets, v.a_to_b.bytes + v.b_to_a.bytes,
                  v.a_to_b, v.b_to_a, v.first, v.last, {}, {}, {}};
}

/// The job both modes run on decoded packets: IP packets only, keyed by the
/// direction-normalised 5-tuple, aggregated (flow_stats) per tumbling window of `window`
/// (whole_capture: one window) with max out-of-order delay `delay`; one flow_row per
/// (window, conversation). A stop drains: open windows fire
/// (window_options::stop_policy::fire), as at end of input. `two_phase` (netflow
/// --two-phase): aggregate on the
/// worker that decoded the packet first and merge per key after the exchange
/// (rill::two_phase_aggregate: the same rows, one accumulator per flow and worker crosses
/// the exchange instead of every packet); needs idle_timeout 0. `late_packets` (two
/// phases only, may be null) counts the packets of the partial aggregates dropped as
/// late; with one phase the window stage's `late` counter counts them.
template <class Packets>
auto count_flows(Packets&& packets, std::chrono::nanoseconds window, std::chrono::nanoseconds delay,
                 std::chrono::nanoseconds idle_timeout = {}, bool two_phase = false,
                 std::shared_ptr<std::atomic<std::uint64_t>> late_packets = nullptr) {
  auto ip = std::forward<Packets>(packets).filter(
      [](const rill::packet& p) { return p.key.proto != rill::ip_proto::non_ip; });
  auto key = [](const rill::packet& p) { return p.key; };
  const rill::window_options o{
      .max_delay = delay, .idle_timeout = idle_timeout, .on_stop = rill::window_options::stop_policy::fire};
  auto to_row = [](flow_window&& w) { return row_of(w); };
  if (two_phase)
    return rill::two_phase_aggregate(
               std::move(ip), key, rill::tumbling{window}, o, flow_stats{}, "window", std::hash<rill::flow_key>{},
               [late_packets](const rill::window_partial<rill::flow_key, flow_stats::accumulator>& p) {
                 const auto v = flow_stats{}.result(p.value);
                 if (late_packets) late_packets->fetch_add(v.a_to_b.packets + v.b_to_a.packets);
               })
        .map(to_row);
  return std::move(ip).key_by(key).window(rill::tumbling{window}, o).name("window").aggregate(flow_stats{}).map(to_row);
}

/// What a line holds besides the key and the counts.
struct row_format {
  bool windows = true;    ///< window_start_ns, window_end_ns first (false: --conversations)
  bool enriched = false;  ///< service, a_class, b_class last
};

namespace detail {
inline void append_number(std::string& s, auto v) {
  char buf[24];
  s.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}
/// A line's bytes written at a pointer into a fixed buffer, then appended to the line's
/// string at once (one capacity check instead of one per field). 1024 bytes hold a JSON
/// row without its enrichment fields: 264 bytes of names and punctuation, at most 12
/// numbers of 20 digits, 2 ports of 5 and 2 addresses of 45 (INET6_ADDRSTRLEN - 1).
/// text() and number() do not check the bound: the caller's fields must fit.
struct line_buffer {
  std::array<char, 1024> buf;
  char* p = buf.data();
  void text(std::string_view t) noexcept {
    std::memcpy(p, t.data(), t.size());
    p += t.size();
  }
  void number(auto v) noexcept { p = std::to_chars(p, p + 20, v).ptr; }
  std::string_view view() const noexcept { return {buf.data(), std::size_t(p - buf.data())}; }
};
}  // namespace detail

/// The fields of a line, in order (JSON keys and the CSV header): window_start_ns,
/// window_end_ns (when `f.windows`), proto, a_ip, a_port, b_ip, b_port, packets, bytes,
/// a_to_b_packets, a_to_b_bytes, b_to_a_packets, b_to_a_bytes, a_to_b_tcp_flags,
/// b_to_a_tcp_flags, first_ns, last_ns, then service, a_class, b_class (when
/// `f.enriched`).
inline std::vector<std::string_view> row_fields(row_format f) {
  std::vector<std::string_view> v;
  if (f.windows) v = {"window_start_ns", "window_end_ns"};
  for (std::string_view n : {"proto", "a_ip", "a_port", "b_ip", "b_port", "packets", "bytes", "a_to_b_packets",
                             "a_to_b_bytes", "b_to_a_packets", "b_to_a_bytes", "a_to_b_tcp_flags",
                             "b_to_a_tcp_flags", "first_ns", "last_ns"})
    v.push_back(n);
  if (f.enriched)
    for (std::string_view n : {"service", "a_class", "b_class"}) v.push_back(n);
  return v;
}

/// The JSON line: the fields of row_fields(f), ports null when the key has none, TCP
/// flags as the byte's value (FIN 1, SYN 2, RST 4, PSH 8, ACK 16, URG 32, ECE 64, CWR
/// 128), times in ns since the epoch. Byte for byte what nlohmann::ordered_json's dump()
/// gives for those fields (tests/examples/flow_row_test.cpp checks it): every field but
/// the enrichment ones is a number or text that needs no escaping (a protocol name,
/// inet_ntop's address), so the line is appended with std::to_chars instead of building
/// a JSON tree per row.
inline void append_row_json(std::string& s, const flow_row& r, row_format f = {}) {
  detail::line_buffer b;
  auto port = [&b](const std::optional<std::uint16_t>& p) {
    if (p) b.number(*p);
    else b.text("null");
  };
  b.text("{");
  if (f.windows) {
    b.text("\"window_start_ns\":");
    b.number(r.window_start.time_since_epoch().count());
    b.text(",\"window_end_ns\":");
    b.number(r.window_end.time_since_epoch().count());
    b.text(",");
  }
  b.text("\"proto\":\"");
  b.text(rill::to_string(r.key.proto));
  b.text("\",\"a_ip\":\"");
  b.text(r.key.a_ip_string());
  b.text("\",\"a_port\":");
  port(r.key.a_port);
  b.text(",\"b_ip\":\"");
  b.text(r.key.b_ip_string());
  b.text("\",\"b_port\":");
  port(r.key.b_port);
  b.text(",\"packets\":");
  b.number(r.packets);
  b.text(",\"bytes\":");
  b.number(r.bytes);
  b.text(",\"a_to_b_packets\":");
  b.number(r.a_to_b.packets);
  b.text(",\"a_to_b_bytes\":");
  b.number(r.a_to_b.bytes);
  b.text(",\"b_to_a_packets\":");
  b.number(r.b_to_a.packets);
  b.text(",\"b_to_a_bytes\":");
  b.number(r.b_to_a.bytes);
  b.text(",\"a_to_b_tcp_flags\":");
  b.number(unsigned{r.a_to_b.tcp_flags});
  b.text(",\"b_to_a_tcp_flags\":");
  b.number(unsigned{r.b_to_a.tcp_flags});
  b.text(",\"first_ns\":");
  b.number(r.first.time_since_epoch().count());
  b.text(",\"last_ns\":");
  b.number(r.last.time_since_epoch().count());
  s += b.view();
  if (f.enriched) {
    s += ",\"service\":";
    s += r.service.dump();
    s += ",\"a_class\":";
    s += r.a_class.dump();
    s += ",\"b_class\":";
    s += r.b_class.dump();
  }
  s += '}';
}
inline std::string row_json(const flow_row& r, row_format f = {}) {
  std::string s;
  s.reserve(320);
  append_row_json(s, r, f);
  return s;
}

/// The CSV header line (RFC 4180, no line break): row_fields(f) joined by commas.
inline std::string csv_header(row_format f) {
  std::string s;
  for (auto n : row_fields(f)) {
    if (!s.empty()) s += ',';
    s += n;
  }
  return s;
}

/// One CSV record (RFC 4180, no line break): the JSON line's values in its order; a null
/// port or enrichment value is an empty field; an enrichment text is quoted when it holds
/// a comma, a double quote, CR or LF (quotes doubled); any other JSON value is its dump().
inline void append_row_csv(std::string& s, const flow_row& r, row_format f = {}) {
  auto number = [&s](auto v) { detail::append_number(s, v); };
  auto port = [&](const std::optional<std::uint16_t>& p) {
    if (p) number(*p);
  };
  auto text = [&s](const nlohmann::json& v) {
    if (v.is_null()) return;
    const std::string t = v.is_string() ? v.get<std::string>() : v.dump();
    if (t.find_first_of(",\"\r\n") == std::string::npos) {
      s += t;
      return;
    }
    s += '"';
    for (char c : t) {
      if (c == '"') s += '"';
      s += c;
    }
    s += '"';
  };
  if (f.windows) {
    number(r.window_start.time_since_epoch().count());
    s += ',';
    number(r.window_end.time_since_epoch().count());
    s += ',';
  }
  s += rill::to_string(r.key.proto);
  s += ',';
  s += r.key.a_ip_string();
  s += ',';
  port(r.key.a_port);
  s += ',';
  s += r.key.b_ip_string();
  s += ',';
  port(r.key.b_port);
  for (std::uint64_t v : {r.packets, r.bytes, r.a_to_b.packets, r.a_to_b.bytes, r.b_to_a.packets, r.b_to_a.bytes,
                          std::uint64_t{r.a_to_b.tcp_flags}, std::uint64_t{r.b_to_a.tcp_flags}}) {
    s += ',';
    number(v);
  }
  s += ',';
  number(r.first.time_since_epoch().count());
  s += ',';
  number(r.last.time_since_epoch().count());
  if (f.enriched) {
    for (const auto* v : {&r.service, &r.a_class, &r.b_class}) {
      s += ',';
      text(*v);
    }
  }
}

}  // namespace netflow

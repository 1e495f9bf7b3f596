// examples/netflow/flow_row.hpp: netflow's JSON and CSV lines, and flow_stats.hpp, its
// per-direction aggregate. append_row_json writes the line without a JSON tree; the
// reference here builds each row with nlohmann::ordered_json and dump(), field by field,
// and the two must agree byte for byte (IPv4 and IPv6 addresses, null ports, negative and
// extreme times, 64-bit counters, enrichment values that need escaping). The CSV line is
// checked against the JSON line's values, and the aggregate against counts written out
// by hand.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flow_row.hpp"

namespace {

using netflow::flow_row;

nlohmann::ordered_json reference_json(const flow_row& r, bool enriched, bool windows = true) {
  auto port = [](const std::optional<std::uint16_t>& p) {
    return p ? nlohmann::json(*p) : nlohmann::json(nullptr);
  };
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (windows) {
    j["window_start_ns"] = r.window_start.time_since_epoch().count();
    j["window_end_ns"] = r.window_end.time_since_epoch().count();
  }
  j["proto"] = rill::to_string(r.key.proto);
  j["a_ip"] = r.key.a_ip_string();
  j["a_port"] = port(r.key.a_port);
  j["b_ip"] = r.key.b_ip_string();
  j["b_port"] = port(r.key.b_port);
  j["packets"] = r.packets;
  j["bytes"] = r.bytes;
  j["a_to_b_packets"] = r.a_to_b.packets;
  j["a_to_b_bytes"] = r.a_to_b.bytes;
  j["b_to_a_packets"] = r.b_to_a.packets;
  j["b_to_a_bytes"] = r.b_to_a.bytes;
  j["a_to_b_tcp_flags"] = r.a_to_b.tcp_flags;
  j["b_to_a_tcp_flags"] = r.b_to_a.tcp_flags;
  j["first_ns"] = r.first.time_since_epoch().count();
  j["last_ns"] = r.last.time_since_epoch().count();
  if (enriched) {
    j["service"] = r.service;
    j["a_class"] = r.a_class;
    j["b_class"] = r.b_class;
  }
  return j;
}
std::string reference(const flow_row& r, bool enriched, bool windows = true) {
  return reference_json(r, enriched, windows).dump();
}

rill::event_time at(std::int64_t ns) { return rill::event_time{std::chrono::nanoseconds{ns}}; }

std::vector<flow_row> rows() {
  std::vector<flow_row> v;
  flow_row tcp;
  tcp.window_start = at(1'700'000'000'000'000'000);
  tcp.window_end = at(1'700'000'010'000'000'000);
  tcp.key = rill::flow_key::make(rill::ip_proto::tcp, 4, {10, 0, 0, 1}, 443, {192, 168, 7, 200}, 51234);
  tcp.packets = 3;
  tcp.bytes = 4521;
  tcp.a_to_b = {2, 4461, 0x18};
  tcp.b_to_a = {1, 60, 0xff};
  tcp.first = at(1'700'000'001'000'000'001);
  tcp.last = at(1'700'000'009'999'999'999);
  v.push_back(tcp);
  flow_row udp6 = tcp;
  const std::array<std::uint8_t, 16> doc{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const std::array<std::uint8_t, 16> link{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x1b, 0x21, 0xff, 0xfe, 0x3c, 0x4d, 0x5e};
  udp6.key = rill::flow_key::make(rill::ip_proto::udp, 6, doc, 53, link, 65535);
  udp6.packets = std::numeric_limits<std::uint64_t>::max();
  udp6.bytes = 0;
  udp6.a_to_b = {std::numeric_limits<std::uint64_t>::max(), 0, 0};
  udp6.b_to_a = {};
  v.push_back(udp6);
  flow_row icmp = tcp;  // no ports: null
  icmp.key = rill::flow_key::make(rill::ip_proto::icmp, 4, {127, 0, 0, 1}, std::nullopt, {255, 255, 255, 255},
                                  std::nullopt);
  icmp.window_start = at(-10'000'000'000);  // before 1970
  icmp.window_end = at(0);
  v.push_back(icmp);
  flow_row other = icmp;
  other.key.proto = rill::ip_proto::other;
  other.window_start = at(std::numeric_limits<std::int64_t>::min());
  other.window_end = at(std::numeric_limits<std::int64_t>::max());
  other.first = at(std::numeric_limits<std::int64_t>::min());
  other.last = at(std::numeric_limits<std::int64_t>::max());
  v.push_back(other);
  return v;
}

TEST(FlowRowJson, EqualsNlohmannDump) {
  for (const auto& r : rows()) EXPECT_EQ(netflow::row_json(r), reference(r, false));
}

TEST(FlowRowJson, WithoutWindowsEqualsNlohmannDump) {
  for (const auto& r : rows()) EXPECT_EQ(netflow::row_json(r, {.windows = false}), reference(r, false, false));
}

TEST(FlowRowJson, EnrichedFieldsEqualNlohmannDump) {
  auto v = rows();
  v[0].service = "https";
  v[0].a_class = "Private-Use";
  v[0].b_class = nullptr;
  v[1].service = "quote \" back\\slash \x01 ü";  // escaped as nlohmann escapes it
  v[1].a_class = nullptr;
  v[1].b_class = "Link-Local Unicast";
  for (const auto& r : v) EXPECT_EQ(netflow::row_json(r, {.enriched = true}), reference(r, true));
}

// Splits one CSV record (RFC 4180: quoted fields, doubled quotes).
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else out.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// The CSV header names the JSON line's keys in its order, and each record holds the JSON
// line's values: numbers and text as they are, null as an empty field.
TEST(FlowRowCsv, SameFieldsAndValuesAsTheJsonLine) {
  auto v = rows();
  v[0].service = "https";
  v[0].a_class = "Private-Use";
  v[1].service = "quote \" comma, back\\slash";
  v[1].b_class = "Link-Local Unicast";
  for (bool windows : {true, false}) {
    for (bool enriched : {false, true}) {
      const netflow::row_format f{.windows = windows, .enriched = enriched};
      const auto header = split_csv(netflow::csv_header(f));
      for (const auto& r : v) {
        const auto j = reference_json(r, enriched, windows);
        std::string line;
        netflow::append_row_csv(line, r, f);
        const auto fields = split_csv(line);
        ASSERT_EQ(fields.size(), j.size());
        ASSERT_EQ(header.size(), j.size());
        std::size_t i = 0;
        for (const auto& [k, val] : j.items()) {
          EXPECT_EQ(header[i], k);
          const std::string want = val.is_null() ? "" : val.is_string() ? val.get<std::string>() : val.dump();
          EXPECT_EQ(fields[i], want) << k;
          ++i;
        }
      }
    }
  }
  std::string quoted;
  netflow::append_row_csv(quoted, v[1], {.enriched = true});
  EXPECT_NE(quoted.find(R"("quote "" comma, back\slash")"), std::string::npos) << quoted;
}

rill::packet packet_at(std::int64_t ns, bool from_a, std::uint32_t len, std::uint8_t flags) {
  rill::packet p;
  p.time = at(ns);
  p.from_a = from_a;
  p.wire_len = len;
  p.tcp_flags = flags;
  return p;
}

// A TCP handshake, data and close, out of time order, folded one by one and split in two
// halves merged: per-direction counts, ORed flags, min and max time, written out by hand.
TEST(FlowStats, PerDirectionCountsFlagsAndTimes) {
  const std::vector<rill::packet> ps = {
      packet_at(1000, true, 74, 0x02),    // SYN a->b
      packet_at(1500, false, 74, 0x12),   // SYN+ACK b->a
      packet_at(900, true, 66, 0x10),     // ACK a->b, stamped earlier (out of order)
      packet_at(3000, true, 1514, 0x18),  // PSH+ACK
      packet_at(2500, false, 66, 0x11),   // FIN+ACK b->a
  };
  const netflow::flow_stats g;
  auto all = g.init();
  for (const auto& p : ps) g.add(all, p);
  auto front = g.init(), back = g.init();
  for (std::size_t i = 0; i < ps.size(); ++i) g.add(i < 2 ? front : back, ps[i]);
  g.merge(front, back);
  for (const auto* acc : {&all, &front}) {
    const auto v = g.result(*acc);
    EXPECT_EQ(v.a_to_b, (netflow::direction_counts{3, 74 + 66 + 1514, 0x1a}));
    EXPECT_EQ(v.b_to_a, (netflow::direction_counts{2, 74 + 66, 0x13}));
    EXPECT_EQ(v.first, at(900));
    EXPECT_EQ(v.last, at(3000));
  }
  // An empty side stays zero when merged; flags never leak into counts.
  auto only_b = g.init();
  g.add(only_b, packet_at(5, false, 40, 0xff));
  g.add(only_b, packet_at(6, false, 40, 0xff));
  g.merge(only_b, g.init());
  const auto v = g.result(only_b);
  EXPECT_EQ(v.a_to_b, (netflow::direction_counts{}));
  EXPECT_EQ(v.b_to_a, (netflow::direction_counts{2, 80, 0xff}));
}


TEST(FlowRowJson, HandWrittenLine) {
  EXPECT_EQ(netflow::row_json(rows()[0]),
            R"({"window_start_ns":1700000000000000000,"window_end_ns":1700000010000000000,"proto":"tcp",)"
            R"("a_ip":"10.0.0.1","a_port":443,"b_ip":"192.168.7.200","b_port":51234,"packets":3,"bytes":4521,)"
            R"("a_to_b_packets":2,"a_to_b_bytes":4461,"b_to_a_packets":1,"b_to_a_bytes":60,"a_to_b_tcp_flags":24,)"
            R"("b_to_a_tcp_flags":255,"first_ns":1700000001000000001,"last_ns":1700000009999999999})");
}

}  // namespace

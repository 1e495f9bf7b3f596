// examples/netflow/flow_row.hpp: netflow's JSON line. append_row_json writes the line
// without a JSON tree; the reference here builds each row with nlohmann::ordered_json
// and dump(), field by field, and the two must agree byte for byte (IPv4 and IPv6
// addresses, null ports, negative and extreme times, 64-bit counters, enrichment values
// that need escaping).
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

std::string reference(const flow_row& r, bool enriched) {
  auto port = [](const std::optional<std::uint16_t>& p) {
    return p ? nlohmann::json(*p) : nlohmann::json(nullptr);
  };
  nlohmann::ordered_json j = {{"window_start_ns", r.window_start.time_since_epoch().count()},
                              {"window_end_ns", r.window_end.time_since_epoch().count()},
                              {"proto", rill::to_string(r.key.proto)},
                              {"a_ip", r.key.a_ip_string()},
                              {"a_port", port(r.key.a_port)},
                              {"b_ip", r.key.b_ip_string()},
                              {"b_port", port(r.key.b_port)},
                              {"packets", r.packets},
                              {"bytes", r.bytes}};
  if (enriched) {
    j["service"] = r.service;
    j["a_class"] = r.a_class;
    j["b_class"] = r.b_class;
  }
  return j.dump();
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
  v.push_back(tcp);
  flow_row udp6 = tcp;
  const std::array<std::uint8_t, 16> doc{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const std::array<std::uint8_t, 16> link{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x1b, 0x21, 0xff, 0xfe, 0x3c, 0x4d, 0x5e};
  udp6.key = rill::flow_key::make(rill::ip_proto::udp, 6, doc, 53, link, 65535);
  udp6.packets = std::numeric_limits<std::uint64_t>::max();
  udp6.bytes = 0;
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
  v.push_back(other);
  return v;
}

TEST(FlowRowJson, EqualsNlohmannDump) {
  for (const auto& r : rows()) EXPECT_EQ(netflow::row_json(r), reference(r, false));
}

TEST(FlowRowJson, EnrichedFieldsEqualNlohmannDump) {
  auto v = rows();
  v[0].service = "https";
  v[0].a_class = "Private-Use";
  v[0].b_class = nullptr;
  v[1].service = "quote \" back\\slash \x01 ü";  // escaped as nlohmann escapes it
  v[1].a_class = nullptr;
  v[1].b_class = "Link-Local Unicast";
  for (const auto& r : v) EXPECT_EQ(netflow::row_json(r, true), reference(r, true));
}

TEST(FlowRowJson, HandWrittenLine) {
  EXPECT_EQ(netflow::row_json(rows()[0]),
            R"({"window_start_ns":1700000000000000000,"window_end_ns":1700000010000000000,"proto":"tcp",)"
            R"("a_ip":"10.0.0.1","a_port":443,"b_ip":"192.168.7.200","b_port":51234,"packets":3,"bytes":4521})");
}

}  // namespace

// examples/netflow/packet_codec.hpp: the probe's 64-byte Kafka value round-trips, and
// decode refuses hand-made values whose fields the probe never writes (a protocol byte
// that is no rill::ip_proto, ip_version 9, wire_len 2^32-1, time INT64_MAX, ...): the
// analysis' Kafka source then counts them as bad records and names the first 10.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "packet_codec.hpp"

namespace {

using netflow_kafka::decode;
using netflow_kafka::encode;

rill::packet tcp_packet() {
  rill::packet p;
  p.time = rill::event_time{std::chrono::nanoseconds{1'704'067'200'123'456'789}};
  p.wire_len = 1514;
  p.cap_len = 96;
  p.key.proto = rill::ip_proto::tcp;
  p.key.ip_version = 4;
  p.key.a_addr = {10, 0, 0, 1};
  p.key.b_addr = {192, 168, 0, 1};
  p.key.a_port = 10000;
  p.key.b_port = 80;
  p.from_a = true;
  p.fragment = true;
  p.vlan_outer = 100;
  return p;
}

template <class U>
void poke(std::string& v, std::size_t at, U x) {
  std::memcpy(v.data() + at, &x, sizeof x);  // little-endian host (x86-64, arm64 Linux)
}

/// decode(v) throws std::invalid_argument whose text holds `part`.
void expect_refused(const std::string& v, const std::string& part) {
  try {
    decode(v);
    ADD_FAILURE() << "accepted; expected an error with \"" << part << "\"";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(packet_codec, round_trip) {
  const auto p = tcp_packet();
  const auto v = encode(p);
  ASSERT_EQ(v.size(), netflow_kafka::wire_size);
  const auto q = decode(v);
  EXPECT_EQ(q.time, p.time);
  EXPECT_EQ(q.wire_len, p.wire_len);
  EXPECT_EQ(q.cap_len, p.cap_len);
  EXPECT_EQ(q.key, p.key);
  EXPECT_EQ(q.from_a, p.from_a);
  EXPECT_EQ(q.fragment, p.fragment);
  EXPECT_FALSE(q.truncated);
  EXPECT_EQ(q.vlan_outer, 100);
  rill::packet non_ip;  // proto non_ip, ip_version 0, all zero
  non_ip.wire_len = non_ip.cap_len = 60;
  EXPECT_EQ(decode(encode(non_ip)).key, non_ip.key);
}

TEST(packet_codec, limits_themselves_are_accepted) {
  auto v = encode(tcp_packet());
  poke<std::uint32_t>(v, 8, netflow_kafka::max_packet_len);
  poke<std::uint32_t>(v, 12, netflow_kafka::max_packet_len);
  poke<std::int64_t>(v, 0, netflow_kafka::max_time_ns - 1);
  EXPECT_EQ(decode(v).wire_len, 262144u);
  v[17] = 6;
  EXPECT_EQ(decode(v).key.ip_version, 6);
}

TEST(packet_codec, nonsense_fields_are_refused_naming_field_and_value) {
  const auto good = encode(tcp_packet());
  auto v = good;
  v[16] = 9;  // rill::ip_proto ends at non_ip = 5
  expect_refused(v, "protocol byte 9");
  v = good;
  v[16] = char(0xff);
  expect_refused(v, "protocol byte 255");
  v = good;
  v[17] = 9;
  expect_refused(v, "ip_version 9");
  v = good;
  v[17] = 0;  // an IP protocol with no IP version
  expect_refused(v, "ip_version 0");
  v = good;
  v[16] = char(rill::ip_proto::non_ip);  // non_ip keys are all zero
  expect_refused(v, "ip_version 4 for non_ip");
  v = good;
  v[18] = char(64);
  expect_refused(v, "flags 64");
  v = good;
  poke<std::uint32_t>(v, 8, 0xffffffffu);
  expect_refused(v, "wire_len 4294967295");
  v = good;
  poke<std::uint32_t>(v, 8, netflow_kafka::max_packet_len + 1);
  expect_refused(v, "wire_len 262145");
  v = good;
  poke<std::uint32_t>(v, 12, 0xffffffffu);
  expect_refused(v, "cap_len 4294967295");
  v = good;
  poke<std::int64_t>(v, 0, std::numeric_limits<std::int64_t>::max());
  expect_refused(v, "time 9223372036854775807");
  v = good;
  poke<std::int64_t>(v, 0, netflow_kafka::max_time_ns);
  expect_refused(v, "time");
  v = good;
  poke<std::int64_t>(v, 0, -1);
  expect_refused(v, "time -1");
  expect_refused(good.substr(0, 63), "63 bytes");
  v = good;
  v[60] = 'X';
  expect_refused(v, "64 bytes");
}

}  // namespace

// examples/netflow/packet_codec.hpp: the probe's 64-byte Kafka value round-trips, and
// decode refuses hand-made values whose fields the probe never writes (a protocol byte
// that is no rill::ip_proto, ip_version 9, wire_len 2^32-1, time -1, a key with one port,
// ...): the analysis' Kafka source then counts them as bad records and names the first 10.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include <rill/connectors/pcap_reader.hpp>
#include <stdexcept>
#include <string>

#include "packet_codec.hpp"

namespace {

namespace fs = std::filesystem;
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
  p.tcp_flags = 0x18;  // PSH+ACK
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
  EXPECT_EQ(q.tcp_flags, 0x18);
  EXPECT_EQ(std::uint8_t(v[19]), 0x18);  // the byte the header gives it
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
  poke<std::int64_t>(v, 0, std::numeric_limits<std::int64_t>::max());  // 2262-04-11
  EXPECT_EQ(decode(v).wire_len, 262144u);
  EXPECT_EQ(decode(v).time.time_since_epoch().count(), std::numeric_limits<std::int64_t>::max());
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
  poke<std::int64_t>(v, 0, -1);
  expect_refused(v, "time -1");
  expect_refused(good.substr(0, 63), "63 bytes");
  v = good;
  v[60] = 'X';
  expect_refused(v, "64 bytes");
}

// Values whose every field is in range but whose key rill::decode never produces
// (flow_key's invariants, packet.hpp): each one a bad record, not a new conversation.
TEST(packet_codec, keys_decode_never_produces_are_refused) {
  const auto good = encode(tcp_packet());
  auto v = good;
  v[18] = char(v[18] & ~32);  // a_port set, b_port not
  expect_refused(v, "only a_port set");
  v = good;
  v[18] = char(v[18] & ~16);
  expect_refused(v, "only b_port set");
  v = good;
  v[16] = char(rill::ip_proto::icmp);
  expect_refused(v, "ports on protocol icmp");
  v = good;
  v[16] = char(rill::ip_proto::icmp);
  v[18] = char(v[18] & ~48);  // icmp without ports: what decode gives
  poke<std::uint16_t>(v, 20, 0);
  poke<std::uint16_t>(v, 22, 0);
  v[19] = 0;  // and no TCP flags
  EXPECT_EQ(decode(v).key.proto, rill::ip_proto::icmp);
  EXPECT_EQ(encode(decode(v)), v);
  rill::packet non_ip;
  non_ip.wire_len = non_ip.cap_len = 60;
  v = encode(non_ip);
  v[28] = 1;
  expect_refused(v, "addresses or ports on a non_ip key");
  v = encode(non_ip);
  v[18] = char(48);
  expect_refused(v, "addresses or ports on a non_ip key");
  v = good;
  v[28 + 7] = 1;  // IPv4 a_addr byte 7
  expect_refused(v, "IPv4 address with non-zero bytes 4..15");
  v = good;
  v[44 + 15] = 1;  // IPv4 b_addr byte 15
  expect_refused(v, "IPv4 address with non-zero bytes 4..15");
  v = good;
  v[28] = char(200);  // a = 200.0.0.1 > b = 192.168.0.1
  expect_refused(v, "not direction-normalised");
  v = good;
  v[44] = 10, v[45] = 0, v[46] = 0, v[47] = 1;  // same address: the smaller port is a
  poke<std::uint16_t>(v, 20, 80);
  poke<std::uint16_t>(v, 22, 10000);
  EXPECT_EQ(decode(v).key.a_port, 80);
  poke<std::uint16_t>(v, 20, 10000);
  poke<std::uint16_t>(v, 22, 80);
  expect_refused(v, "not direction-normalised");
  v = good;
  v[16] = char(rill::ip_proto::udp);  // PSH+ACK in byte 19 on a udp packet
  expect_refused(v, "tcp_flags 24 on a udp packet");
  v = good;
  v[16] = char(rill::ip_proto::icmp);
  v[18] = char(v[18] & ~48);  // no port flags, but the port bytes still hold 10000 and 80
  v[19] = 0;
  expect_refused(v, "a_port bytes set without the a_port flag");
  v = good;
  poke<std::uint32_t>(v, 12, 1515);  // cap_len over wire_len 1514
  expect_refused(v, "cap_len 1515 over wire_len 1514");
}

fs::path findings_dir() { return fs::path(RILL_SHARED_DIR) / "data" / "fuzz-findings"; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The values a first fuzzing run found accepted (../shared/data/fuzz-findings/README.md),
// read in place: each is refused, with the reason its file name gives.
TEST(packet_codec, fuzz_findings_are_refused) {
  if (!fs::exists(findings_dir())) {
    GTEST_SKIP() << findings_dir() << " not found (configure with -DRILL_SHARED_DIR=...)";
  }
  const std::pair<const char*, const char*> cases[] = {
      {"codec_one_port.bin", "set (ports come in pairs)"},
      {"codec_ports_on_icmp.bin", "ports on protocol"},
      {"codec_nonip_with_addrs.bin", "addresses or ports on a non_ip key"},
      {"codec_ipv4_addr_tail.bin", "IPv4 address with non-zero bytes 4..15"},
      {"codec_not_normalised.bin", "not direction-normalised"},
      {"codec_caplen_gt_wirelen.bin", "over wire_len"},
  };
  for (const auto& [file, why] : cases) {
    SCOPED_TRACE(file);
    const auto v = slurp(findings_dir() / file);
    ASSERT_EQ(v.size(), netflow_kafka::wire_size);
    expect_refused(v, why);
  }
}

// The two paths accept the same packets: every packet pcap_reader returns from every
// shared capture, and the fuzz findings' capture stamped 2200-01-01, survives
// encode/decode unchanged.
TEST(packet_codec, every_packet_the_file_mode_reads_round_trips) {
  const auto corpus = fs::path(RILL_SHARED_DIR) / "data" / "pcap";
  if (!fs::exists(corpus)) {
    GTEST_SKIP() << corpus << " not found (configure with -DRILL_SHARED_DIR=...)";
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(corpus))
    if (e.path().extension() == ".pcap" || e.path().extension() == ".pcapng") files.push_back(e.path());
  if (fs::exists(findings_dir() / "y2200.pcapng")) {
    files.push_back(findings_dir() / "y2200.pcapng");
  }
  std::size_t packets = 0;
  bool saw_2200 = false;
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    auto r = rill::pcap_reader::open(f.string());
    rill::packet p;
    while (r.next(p) == rill::read_status::ok) {
      rill::packet q;
      ASSERT_NO_THROW(q = decode(encode(p))) << "packet " << r.counters().records << " " << p.key.to_string();
      ASSERT_EQ(q.key, p.key);
      ASSERT_EQ(q.time, p.time);
      ASSERT_EQ(q.cap_len, p.cap_len);
      ASSERT_EQ(q.wire_len, p.wire_len);
      saw_2200 |= p.time.time_since_epoch().count() == 7'258'118'400'000'000'000;  // README's time_ns
      ++packets;
    }
  }
  EXPECT_GT(packets, 1000u);
  if (fs::exists(findings_dir())) {
    EXPECT_TRUE(saw_2200);
  }
}

}  // namespace

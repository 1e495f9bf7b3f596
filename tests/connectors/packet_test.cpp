// Tests for rill/connectors/packet.hpp: decode() on hand-built frames, one link type or
// header feature per test, plus truncation sweeps and random input (run under ASan).
#include "rill/connectors/packet.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <compare>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <unordered_set>

#include "frames.hpp"
#include "rill/core/record.hpp"

// What netflow's records cost per packet (record.hpp's size table): a capture's records are
// unacked, value and time only.
static_assert(sizeof(rill::packet) == 72);
static_assert(sizeof(rill::record<rill::packet, rill::unacked>) == 80);
static_assert(sizeof(rill::record<rill::packet>) == 120);

namespace {

using namespace frames;
using rill::decode;
using rill::ip_proto;

constexpr int linktype_ethernet = 1;
constexpr int linktype_raw = 101;
constexpr int linktype_sll = 113;
constexpr int linktype_sll2 = 276;

// Decodes from an exact-size heap copy, so ASan sees any read past cap_len.
std::optional<rill::packet> decode_copy(int linktype, const bytes& b,
                                        std::optional<std::uint32_t> wire_len = {}) {
  auto heap = std::make_unique<std::byte[]>(b.size() + (b.empty() ? 1 : 0));
  if (!b.empty()) std::memcpy(heap.get(), b.data(), b.size());
  return decode(linktype, std::span<const std::byte>(heap.get(), b.size()),
                wire_len.value_or(static_cast<std::uint32_t>(b.size())),
                rill::event_time{std::chrono::nanoseconds{42}});
}

rill::packet must_decode(int linktype, const bytes& b) {
  auto p = decode_copy(linktype, b);
  EXPECT_TRUE(p.has_value());
  return p.value_or(rill::packet{});
}

const addr16 h1 = v4(192, 168, 1, 10);
const addr16 h2 = v4(10, 0, 0, 2);

TEST(ip_proto, names) {
  EXPECT_EQ(rill::to_string(ip_proto::tcp), "tcp");
  EXPECT_EQ(rill::to_string(ip_proto::udp), "udp");
  EXPECT_EQ(rill::to_string(ip_proto::icmp), "icmp");
  EXPECT_EQ(rill::to_string(ip_proto::icmpv6), "icmpv6");
  EXPECT_EQ(rill::to_string(ip_proto::other), "other");
  EXPECT_EQ(rill::to_string(ip_proto::non_ip), "non_ip");
}

TEST(decode, ethernet_ipv4_udp_both_directions_share_one_key) {
  auto fwd =
      must_decode(linktype_ethernet, eth(eth_ipv4, ipv4(h1, h2, 17, udp(40000, 53, {1, 2}))));
  auto rev = must_decode(linktype_ethernet, eth(eth_ipv4, ipv4(h2, h1, 17, udp(53, 40000, {3}))));
  EXPECT_EQ(fwd.key, rev.key);
  EXPECT_EQ(std::hash<rill::flow_key>{}(fwd.key), std::hash<rill::flow_key>{}(rev.key));
  EXPECT_EQ(fwd.key.proto, ip_proto::udp);
  EXPECT_EQ(fwd.key.ip_version, 4);
  // a = smaller address bytes: 10.0.0.2 < 192.168.1.10
  EXPECT_EQ(fwd.key.a_endpoint(), "10.0.0.2:53");
  EXPECT_EQ(fwd.key.b_endpoint(), "192.168.1.10:40000");
  EXPECT_EQ(fwd.key.a_ip_string(), "10.0.0.2");
  EXPECT_FALSE(fwd.from_a);
  EXPECT_TRUE(rev.from_a);
  EXPECT_FALSE(fwd.truncated || fwd.malformed || fwd.fragment);
  EXPECT_EQ(fwd.time, rill::event_time{std::chrono::nanoseconds{42}});
  EXPECT_EQ(fwd.wire_len, 14u + 20 + 8 + 2);
  EXPECT_EQ(fwd.key.to_string(), "udp 10.0.0.2:53 <-> 192.168.1.10:40000");
}

TEST(decode, same_address_orders_by_port) {
  auto p =
      must_decode(linktype_ethernet,
                  eth(eth_ipv4, ipv4(v4(127, 0, 0, 1), v4(127, 0, 0, 1), 6, tcp(7000, 50000, {}))));
  EXPECT_EQ(p.key.a_endpoint(), "127.0.0.1:7000");
  EXPECT_EQ(p.key.b_endpoint(), "127.0.0.1:50000");
  EXPECT_TRUE(p.from_a);
}

TEST(decode, icmp_has_no_ports_even_when_quoting_udp) {
  // Destination unreachable (3/3) quoting the offending IPv4+UDP header: ports 0x1234/0x5678.
  const bytes quoted = ipv4(h2, h1, 17, udp(0x1234, 0x5678, {}));
  auto p = must_decode(linktype_ethernet, eth(eth_ipv4, ipv4(h1, h2, 1, icmp(3, 3, quoted))));
  EXPECT_EQ(p.key.proto, ip_proto::icmp);
  EXPECT_FALSE(p.key.a_port.has_value());
  EXPECT_FALSE(p.key.b_port.has_value());
  EXPECT_EQ(p.key.a_endpoint(), "10.0.0.2");
  EXPECT_EQ(p.key.b_endpoint(), "192.168.1.10");
}

TEST(decode, icmpv6_error_quoting_ipv6_udp_has_no_ports) {
  const addr16 a = v6(0xfe80, 1), b = v6(0xfe80, 2);
  const bytes quoted = ipv6(b, a, 17, udp(0x1234, 0x5678, {}));
  auto p = must_decode(linktype_ethernet, eth(eth_ipv6, ipv6(a, b, 58, icmp(1, 4, quoted))));
  EXPECT_EQ(p.key.proto, ip_proto::icmpv6);
  EXPECT_EQ(p.key.ip_version, 6);
  EXPECT_FALSE(p.key.a_port.has_value());
  EXPECT_EQ(p.key.a_endpoint(), "fe80::1");  // tshark's text
  EXPECT_EQ(p.key.b_endpoint(), "fe80::2");
}

TEST(decode, ipv6_text_matches_tshark) {
  addr16 a = v6(0x2001, 1);
  a[2] = 0x0d, a[3] = 0xb8;  // 2001:db8::1
  addr16 b{0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1};
  auto p = must_decode(linktype_ethernet, eth(eth_ipv6, ipv6(a, b, 6, tcp(21, 50000, {}))));
  EXPECT_EQ(p.key.a_endpoint(), "[2001:db8::1]:21");
  EXPECT_EQ(p.key.b_endpoint(), "[2001:db8:1::1:0:1]:50000");  // first longest zero run
  addr16 c{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
  auto q = must_decode(linktype_ethernet, eth(eth_ipv6, ipv6(a, c, 17, udp(1, 2, {}))));
  EXPECT_EQ(q.key.b_endpoint(), "[2001:db8:0:1:1:1:1:1]:2");  // a single 0 group stays (RFC 5952)
}

TEST(decode, other_ip_protocol_is_keyed_by_address_pair) {
  auto p =
      must_decode(linktype_ethernet, eth(eth_ipv4, ipv4(h1, v4(224, 0, 0, 22), 2, bytes(8, 0))));
  EXPECT_EQ(p.key.proto, ip_proto::other);  // IGMP
  EXPECT_EQ(p.key.a_endpoint(), "192.168.1.10");
  EXPECT_EQ(p.key.b_endpoint(), "224.0.0.22");
  // IP-in-IP: the outer header decides, inner TCP ports are not used.
  auto t = must_decode(linktype_ethernet,
                       eth(eth_ipv4, ipv4(h1, h2, 4, ipv4(h1, h2, 6, tcp(1, 2, {})))));
  EXPECT_EQ(t.key.proto, ip_proto::other);
  EXPECT_FALSE(t.key.a_port.has_value());
}

TEST(decode, non_ip_frames) {
  for (std::uint16_t type : {eth_arp, std::uint16_t{0x88cc} /*LLDP*/, std::uint16_t{0x890d}}) {
    auto p = must_decode(linktype_ethernet, eth(type, bytes(46, 0x45)));
    EXPECT_EQ(p.key.proto, ip_proto::non_ip) << type;
    EXPECT_EQ(p.key, rill::flow_key{});
    EXPECT_EQ(p.key.a_endpoint(), "");
    EXPECT_FALSE(p.truncated);
  }
  // IEEE 802.3 length field + LLC (STP): the "type" is a length <= 1500.
  auto llc = must_decode(linktype_ethernet, eth(0x0026, bytes(46, 0x42)));
  EXPECT_EQ(llc.key.proto, ip_proto::non_ip);
}

TEST(decode, vlan_and_qinq_tags_are_metadata) {
  const bytes inner = ipv4(h1, h2, 6, tcp(443, 50123, {}));
  auto plain = must_decode(linktype_ethernet, eth(eth_ipv4, inner));
  auto one = must_decode(linktype_ethernet, eth(0x8100, vlan(100, eth_ipv4, inner)));
  EXPECT_EQ(one.vlan_outer, 100);
  EXPECT_EQ(one.vlan_inner, 0);
  EXPECT_EQ(one.key, plain.key);
  for (std::uint16_t tpid : {std::uint16_t{0x88a8}, std::uint16_t{0x9100}}) {
    auto two =
        must_decode(linktype_ethernet, eth(tpid, vlan(10, 0x8100, vlan(20, eth_ipv4, inner))));
    EXPECT_EQ(two.vlan_outer, 10);
    EXPECT_EQ(two.vlan_inner, 20);
    EXPECT_EQ(two.key, plain.key);
    EXPECT_EQ(two.key.a_endpoint(), "10.0.0.2:50123");
  }
  auto arp = must_decode(linktype_ethernet, eth(0x8100, vlan(7, eth_arp, bytes(28, 0))));
  EXPECT_EQ(arp.key.proto, ip_proto::non_ip);
  EXPECT_EQ(arp.vlan_outer, 7);
}

TEST(decode, linux_cooked_sll_and_sll2) {
  const bytes v4pkt = ipv4(h1, h2, 17, udp(5353, 5353, {}));
  const addr16 a = v6(0xfe80, 0x10), b = v6(0xff02, 0xfb);
  const bytes v6pkt = ipv6(a, b, 6, tcp(12345, 80, {}));
  for (int lt : {linktype_sll, linktype_sll2}) {
    auto wrap = [lt](std::uint16_t proto, const bytes& p, std::uint16_t hatype = 1) {
      return lt == linktype_sll ? sll(proto, p, hatype) : sll2(proto, p, hatype);
    };
    auto p4 = must_decode(lt, wrap(eth_ipv4, v4pkt));
    EXPECT_EQ(p4.key.proto, ip_proto::udp) << lt;
    EXPECT_EQ(p4.key.a_endpoint(), "10.0.0.2:5353");
    EXPECT_EQ(p4.key.b_endpoint(), "192.168.1.10:5353");
    auto p6 = must_decode(lt, wrap(eth_ipv6, v6pkt));
    EXPECT_EQ(p6.key.proto, ip_proto::tcp) << lt;
    EXPECT_EQ(p6.key.a_endpoint(), "[fe80::10]:12345");
    EXPECT_EQ(p6.key.b_endpoint(), "[ff02::fb]:80");
    auto tagged = must_decode(lt, wrap(0x8100, vlan(33, eth_ipv4, v4pkt)));
    EXPECT_EQ(tagged.vlan_outer, 33);
    EXPECT_EQ(tagged.key, p4.key);
    EXPECT_EQ(must_decode(lt, wrap(eth_arp, bytes(28, 0))).key.proto, ip_proto::non_ip);
    EXPECT_EQ(must_decode(lt, wrap(0x0004 /*802.2 LLC*/, bytes(28, 0))).key.proto,
              ip_proto::non_ip);
    // Netlink capture: the protocol field is a netlink family, not an ethertype.
    EXPECT_EQ(must_decode(lt, wrap(eth_ipv4, v4pkt, 824)).key.proto, ip_proto::non_ip);
    // Link header itself cut.
    auto cut = must_decode(lt, bytes(lt == linktype_sll ? 15 : 19, 0));
    EXPECT_TRUE(cut.truncated);
    EXPECT_EQ(cut.key.proto, ip_proto::non_ip);
  }
}

TEST(decode, raw_ip_link_types) {
  const bytes v4pkt = ipv4(h1, h2, 6, tcp(80, 1025, {}));
  const bytes v6pkt = ipv6(v6(0x2001, 1), v6(0x2001, 2), 17, udp(547, 546, {}));
  for (int lt : {101, 12, 14}) {
    EXPECT_EQ(must_decode(lt, v4pkt).key.a_endpoint(), "10.0.0.2:1025") << lt;
    EXPECT_EQ(must_decode(lt, v6pkt).key.a_endpoint(), "[2001::1]:547") << lt;
  }
  EXPECT_EQ(must_decode(228, v4pkt).key.proto, ip_proto::tcp);
  EXPECT_EQ(must_decode(229, v6pkt).key.proto, ip_proto::udp);
  auto mismatch = must_decode(228, v6pkt);  // LINKTYPE_IPV4 carrying IPv6
  EXPECT_TRUE(mismatch.malformed);
  auto garbage = must_decode(linktype_raw, bytes(40, 0x00));  // version 0
  EXPECT_TRUE(garbage.malformed);
  EXPECT_EQ(garbage.key.proto, ip_proto::non_ip);
}

TEST(decode, unsupported_link_type_is_nullopt) {
  EXPECT_FALSE(rill::is_supported_linktype(192));
  EXPECT_FALSE(decode_copy(192, bytes(40, 0)).has_value());  // PPI
  EXPECT_FALSE(decode_copy(0, bytes(40, 0)).has_value());
  for (int lt : {1, 12, 14, 101, 113, 228, 229, 276}) EXPECT_TRUE(rill::is_supported_linktype(lt));
}

TEST(decode, ipv6_extension_header_chain_is_walked) {
  const addr16 a = v6(0x2001, 0xa), b = v6(0x2001, 0xb);
  // HBH -> Routing -> DstOpts(2 extra units) -> TCP
  auto p = must_decode(
      linktype_ethernet,
      eth(eth_ipv6, ipv6(a, b, 0, ext8(43, 0, ext8(60, 2, ext8(6, 0, tcp(8080, 9090, {})))))));
  EXPECT_EQ(p.key.proto, ip_proto::tcp);
  EXPECT_EQ(p.key.a_endpoint(), "[2001::a]:8080");
  EXPECT_EQ(p.key.b_endpoint(), "[2001::b]:9090");
  EXPECT_FALSE(p.truncated);
  // AH -> UDP
  auto q =
      must_decode(linktype_ethernet, eth(eth_ipv6, ipv6(a, b, 51, ah(17, udp(500, 4500, {})))));
  EXPECT_EQ(q.key.proto, ip_proto::udp);
  EXPECT_EQ(q.key.a_endpoint(), "[2001::a]:500");
  // IPv4 AH -> TCP
  auto r =
      must_decode(linktype_ethernet, eth(eth_ipv4, ipv4(h1, h2, 51, ah(6, tcp(22, 60000, {})))));
  EXPECT_EQ(r.key.proto, ip_proto::tcp);
  EXPECT_EQ(r.key.a_endpoint(), "10.0.0.2:60000");
  // ESP and No Next Header are "other", keyed by addresses.
  EXPECT_EQ(must_decode(linktype_ethernet, eth(eth_ipv6, ipv6(a, b, 50, bytes(16, 1)))).key.proto,
            ip_proto::other);
  EXPECT_EQ(must_decode(linktype_ethernet, eth(eth_ipv6, ipv6(a, b, 0, ext8(59, 0, {})))).key.proto,
            ip_proto::other);
  // Extension header longer than the packet: truncated, never read past it.
  bytes cut = eth(eth_ipv6, ipv6(a, b, 60, ext8(17, 3, {})));
  cut.resize(cut.size() - 8);
  auto c = must_decode(linktype_ethernet, cut);
  EXPECT_TRUE(c.truncated);
  EXPECT_FALSE(c.key.a_port.has_value());
}

// C18 (dpkt issue 575): non-first fragments never yield ports taken from their payload.
TEST(decode, c18_ipv6_fragments) {
  const addr16 a = v6(0x2001, 0x1), b = v6(0x2001, 0x2);
  bytes first_payload = udp(5000, 6000, bytes(1440, 0xee));  // 1448 bytes = 181 units
  auto first = must_decode(linktype_ethernet,
                           eth(eth_ipv6, ipv6(a, b, 44, frag6(17, 0, true, first_payload))));
  EXPECT_TRUE(first.fragment);
  EXPECT_EQ(first.key.proto, ip_proto::udp);
  EXPECT_EQ(first.key.a_endpoint(), "[2001::1]:5000");
  EXPECT_EQ(first.key.b_endpoint(), "[2001::2]:6000");
  bytes rest{0x12, 0x34, 0x56, 0x78};
  rest.resize(3000 + 8 - 1448, 0xdd);
  auto second =
      must_decode(linktype_ethernet, eth(eth_ipv6, ipv6(a, b, 44, frag6(17, 181, false, rest))));
  EXPECT_TRUE(second.fragment);
  EXPECT_FALSE(second.truncated);
  EXPECT_EQ(second.key.proto, ip_proto::udp);
  EXPECT_FALSE(second.key.a_port.has_value());
  EXPECT_FALSE(second.key.b_port.has_value());
  EXPECT_EQ(second.key.a_endpoint(), "2001::1");
  EXPECT_EQ(second.key.b_endpoint(), "2001::2");
}

TEST(decode, c18_ipv4_fragments) {
  auto first =
      must_decode(linktype_ethernet,
                  eth(eth_ipv4, ipv4(h1, h2, 17, udp(5000, 6000, bytes(1472, 0)), 0x2000 | 0)));
  EXPECT_TRUE(first.fragment);
  EXPECT_EQ(first.key.a_endpoint(), "10.0.0.2:6000");
  EXPECT_EQ(first.key.b_endpoint(), "192.168.1.10:5000");
  bytes rest{0x12, 0x34, 0x56, 0x78};
  rest.resize(3008 - 1480, 0xdd);
  auto second = must_decode(linktype_ethernet, eth(eth_ipv4, ipv4(h1, h2, 17, rest, 185)));
  EXPECT_TRUE(second.fragment);
  EXPECT_EQ(second.key.proto, ip_proto::udp);
  EXPECT_FALSE(second.key.a_port.has_value());
  EXPECT_EQ(second.key.a_endpoint(), "10.0.0.2");
  EXPECT_EQ(second.key.b_endpoint(), "192.168.1.10");
  // Never 0x1234 / 0x5678 = 4660 / 22136.
  EXPECT_EQ(second.key.to_string().find("4660"), std::string::npos);
  EXPECT_EQ(second.key.to_string().find("22136"), std::string::npos);
}

// C15 (tcpreplay issue 485): caplen 60 > len 28; the IPv4 header ends inside the source address.
TEST(decode, c15_caplen_above_len_and_cut_ipv4_header) {
  bytes frame = eth(eth_ipv4, {});
  const bytes full = ipv4(h1, h2, 17, udp(1, 2, {}));
  frame.insert(frame.end(), full.begin(), full.begin() + 14);  // ends inside src address
  frame.resize(60, 0);
  auto p = decode_copy(linktype_ethernet, frame, 28);
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->malformed);  // caplen > len
  EXPECT_TRUE(p->truncated);  // 14 of 20 IPv4 header bytes within len
  EXPECT_EQ(p->key.proto, ip_proto::other);
  EXPECT_EQ(p->key.ip_version, 4);
  EXPECT_FALSE(p->key.a_port.has_value());
  EXPECT_EQ(p->key.a_addr, addr16{});  // no address taken from the zeros after len
  EXPECT_EQ(p->cap_len, 60u);
  EXPECT_EQ(p->wire_len, 28u);
}

TEST(decode, transport_header_cut_keeps_addresses_without_ports) {
  bytes f = eth(eth_ipv4, ipv4(h1, h2, 6, tcp(80, 8080, {})));
  f.resize(14 + 20 + 3);  // 3 bytes of TCP: dst port incomplete
  auto p = must_decode(linktype_ethernet, f);
  EXPECT_TRUE(p.truncated);
  EXPECT_EQ(p.key.proto, ip_proto::tcp);
  EXPECT_FALSE(p.key.a_port.has_value());
  EXPECT_EQ(p.key.a_endpoint(), "10.0.0.2");
}

TEST(decode, tcp_flags_byte_of_tcp_packets_only) {
  // SYN+ACK (0x12) over IPv4, FIN+PSH+ACK+CWR (0x99) over IPv6: byte 13 of the TCP header.
  auto synack = must_decode(linktype_ethernet, eth(eth_ipv4, ipv4(h1, h2, 6, tcp(80, 8080, {}, 0x12))));
  EXPECT_EQ(synack.tcp_flags, 0x12);
  auto fin6 = must_decode(linktype_ethernet,
                          eth(eth_ipv6, ipv6(v6(0x2001, 1), v6(0x2001, 2), 6, tcp(443, 50000, {7}, 0x99))));
  EXPECT_EQ(fin6.key.proto, ip_proto::tcp);
  EXPECT_EQ(fin6.tcp_flags, 0x99);
  // UDP and ICMP have none, whatever their byte 13 holds.
  auto udp_p = must_decode(linktype_ethernet,
                           eth(eth_ipv4, ipv4(h1, h2, 17, udp(1, 2, bytes(16, 0xff)))));
  EXPECT_EQ(udp_p.tcp_flags, 0);
  // A TCP header cut before byte 13: ports known, flags not.
  bytes cut = eth(eth_ipv4, ipv4(h1, h2, 6, tcp(80, 8080, {}, 0x12)));
  cut.resize(14 + 20 + 13);
  auto c = must_decode(linktype_ethernet, cut);
  EXPECT_TRUE(c.key.a_port.has_value());
  EXPECT_EQ(c.tcp_flags, 0);
  cut = eth(eth_ipv4, ipv4(h1, h2, 6, tcp(80, 8080, {}, 0x12)));
  cut.resize(14 + 20 + 14);
  EXPECT_EQ(must_decode(linktype_ethernet, cut).tcp_flags, 0x12);
}

TEST(decode, bounded_by_ipv4_total_length_not_ethernet_padding) {
  // Total length says 20 + 2: only 2 bytes of UDP belong to the datagram; the rest of
  // the 60-byte frame is Ethernet padding and must not become a port.
  bytes f = eth(eth_ipv4, ipv4(h1, h2, 17, udp(1000, 2000, {}), 0, 22));
  f.resize(60, 0);
  auto p = must_decode(linktype_ethernet, f);
  EXPECT_TRUE(p.truncated);
  EXPECT_FALSE(p.key.a_port.has_value());
  // Normal minimum-size frame: padding after a complete UDP header is ignored.
  bytes g = eth(eth_ipv4, ipv4(h1, h2, 17, udp(1000, 2000, {})));
  g.resize(60, 0xff);
  auto q = must_decode(linktype_ethernet, g);
  EXPECT_FALSE(q.truncated);
  EXPECT_EQ(q.key.b_endpoint(), "192.168.1.10:1000");
}

TEST(decode, malformed_ipv4_header_fields) {
  bytes bad_ihl = eth(eth_ipv4, ipv4(h1, h2, 6, tcp(1, 2, {})));
  bad_ihl[14] = 0x44;  // IHL 4 < 5
  auto p = must_decode(linktype_ethernet, bad_ihl);
  EXPECT_TRUE(p.malformed);
  EXPECT_EQ(p.key.proto, ip_proto::other);
  bytes short_total = eth(eth_ipv4, ipv4(h1, h2, 6, tcp(1, 2, {}), 0, 12));  // total < IHL*4
  EXPECT_TRUE(must_decode(linktype_ethernet, short_total).malformed);
  bytes long_ihl = eth(eth_ipv4, ipv4(h1, h2, 6, {}));
  long_ihl[14] = 0x4f;  // IHL 60 bytes, only 20 there
  auto q = must_decode(linktype_ethernet, long_ihl);
  EXPECT_TRUE(q.malformed || q.truncated);
  EXPECT_EQ(q.key.proto, ip_proto::other);
}

// Every prefix of every kind of frame: no read past the end (ASan), and whenever the
// prefix is shorter than the headers decode needs, the packet says truncated.
TEST(decode, every_prefix_is_safe) {
  const addr16 a = v6(0x2001, 0xa), b = v6(0x2001, 0xb);
  const std::vector<std::pair<int, bytes>> frames_in = {
      {linktype_ethernet, eth(eth_ipv4, ipv4(h1, h2, 6, tcp(1, 2, {})))},
      {linktype_ethernet,
       eth(0x88a8,
           vlan(1, 0x8100,
                vlan(2, eth_ipv6, ipv6(a, b, 0, ext8(44, 0, frag6(17, 0, true, udp(1, 2, {})))))))},
      {linktype_ethernet, eth(eth_ipv6, ipv6(a, b, 51, ah(6, tcp(1, 2, {}))))},
      {linktype_ethernet, eth(eth_ipv4, ipv4(h1, h2, 51, ah(17, udp(1, 2, {}))))},
      {linktype_sll, sll(eth_ipv4, ipv4(h1, h2, 17, udp(1, 2, {})))},
      {linktype_sll2, sll2(eth_ipv6, ipv6(a, b, 6, tcp(1, 2, {})))},
      {linktype_raw, ipv4(h1, h2, 17, udp(1, 2, {}))},
  };
  for (const auto& [lt, full] : frames_in) {
    auto whole = must_decode(lt, full);
    ASSERT_FALSE(whole.truncated);
    ASSERT_TRUE(whole.key.a_port.has_value());
    // The ports end 4 bytes into the transport header; the full frame's transport header
    // is 20 (TCP) or 8 (UDP) bytes long.
    const std::size_t transport = whole.key.proto == ip_proto::tcp ? 20 : 8;
    const std::size_t ports_end = full.size() - transport + 4;
    for (std::size_t n = 0; n < full.size(); ++n) {
      bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      auto p = must_decode(lt, cut);
      // The full length stays the wire length, as a snaplen-cut capture would say.
      auto q = decode_copy(lt, cut, static_cast<std::uint32_t>(full.size()));
      ASSERT_TRUE(q.has_value());
      EXPECT_FALSE(q->malformed) << "lt " << lt << " n " << n;
      if (n < ports_end) {
        EXPECT_TRUE(p.truncated) << "lt " << lt << " n " << n;
        EXPECT_FALSE(p.key.a_port.has_value()) << "lt " << lt << " n " << n;
      } else {
        EXPECT_EQ(p.key, whole.key) << "lt " << lt << " n " << n;
      }
    }
  }
}

TEST(decode, random_bytes_never_crash) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> len(0, 120), byte(0, 255);
  const std::array<int, 8> lts{1, 12, 14, 101, 113, 228, 229, 276};
  std::uint64_t seen = 0;
  for (int i = 0; i < 20000; ++i) {
    bytes b(static_cast<std::size_t>(len(rng)));
    for (auto& x : b) x = static_cast<std::uint8_t>(byte(rng));
    // Make IP more likely than chance so the deep paths get exercised.
    if (b.size() > 14 && i % 2 == 0) {
      b[12] = i % 4 == 0 ? 0x08 : 0x86;
      b[13] = i % 4 == 0 ? 0x00 : 0xdd;
      b[14] = i % 4 == 0 ? 0x45 : 0x60;
    }
    auto p = decode_copy(lts[static_cast<std::size_t>(i) % lts.size()], b);
    ASSERT_TRUE(p.has_value());
    seen += static_cast<std::uint64_t>(p->key.proto);
  }
  EXPECT_GT(seen, 0u);
}

TEST(flow_key, ordering_equality_and_hash) {
  auto k1 = rill::flow_key::make(ip_proto::tcp, 4, h1, 1, h2, 2);
  auto k2 = rill::flow_key::make(ip_proto::tcp, 4, h2, 2, h1, 1);
  auto k3 = rill::flow_key::make(ip_proto::udp, 4, h1, 1, h2, 2);
  EXPECT_EQ(k1, k2);
  EXPECT_NE(k1, k3);
  EXPECT_TRUE(k1 < k3 || k3 < k1);
  std::unordered_set<rill::flow_key> set{k1, k2, k3};
  EXPECT_EQ(set.size(), 2u);
  bool from_a = true;
  auto k4 = rill::flow_key::make(ip_proto::icmp, 4, h1, std::nullopt, h2, std::nullopt, &from_a);
  EXPECT_FALSE(from_a);
  EXPECT_EQ(k4.to_string(), "icmp 10.0.0.2 <-> 192.168.1.10");
  EXPECT_EQ(rill::flow_key{}.to_string(), "non_ip");
}

// make() picks endpoint a and operator== compares keys word by word; the reference is the
// definition: std::array's lexicographic < on the address bytes, then the ports, and
// field-by-field equality. Random addresses that share prefixes of every length (so each
// byte position decides some pairs), equal addresses, and ports with and without values.
TEST(flow_key, make_and_equality_match_the_byte_order_definition) {
  std::mt19937_64 rng(7);
  auto addr = [&](const std::array<std::uint8_t, 16>& like) {
    std::array<std::uint8_t, 16> a = like;
    const std::size_t keep = rng() % 17;  // bytes shared with `like`
    for (std::size_t i = keep; i < 16; ++i) a[i] = std::uint8_t(rng() % 3 == 0 ? like[i] : rng());
    return a;
  };
  std::array<std::uint8_t, 16> base{};
  for (auto& b : base) b = std::uint8_t(rng());
  std::size_t swapped = 0, equal_pairs = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto src = addr(base), dst = rng() % 8 == 0 ? src : addr(src);
    const bool ports = rng() % 4 != 0;
    auto port = [&]() -> std::optional<std::uint16_t> {
      if (!ports) return std::nullopt;
      return std::uint16_t(rng() % 4);
    };
    const auto sp = port(), dp = port();
    bool from_a = false;
    const auto k = rill::flow_key::make(ip_proto::udp, 6, src, sp, dst, dp, &from_a);
    const bool want_src_first = src < dst || (src == dst && sp <= dp);
    ASSERT_EQ(from_a, want_src_first) << i;
    EXPECT_EQ(k.a_addr, want_src_first ? src : dst);
    EXPECT_EQ(k.a_port, want_src_first ? sp : dp);
    swapped += !from_a;
    const auto other = rill::flow_key::make(ip_proto::udp, 6, dst, dp, src, sp);
    EXPECT_TRUE(k == other);
    auto changed = k;
    changed.b_addr[rng() % 16] ^= std::uint8_t(1u << (rng() % 8));
    const bool fieldwise = changed.proto == k.proto && changed.ip_version == k.ip_version &&
                           changed.a_addr == k.a_addr && changed.b_addr == k.b_addr &&
                           changed.a_port == k.a_port && changed.b_port == k.b_port;
    EXPECT_EQ(changed == k, fieldwise);
    EXPECT_FALSE(changed == k);
    equal_pairs += src == dst;
  }
  EXPECT_GT(swapped, 1000u);
  EXPECT_GT(equal_pairs, 100u);
}

// order_words orders keys as operator<=> does, and both as the definition: the fields
// compared in turn (proto, ip_version, address bytes, then ports with an empty port
// first), written with std::tie. Random keys that share prefixes of every length, every
// protocol and version, ports present, empty, 0 and 65535.
TEST(flow_key, order_words_order_keys_as_the_fields_do) {
  std::mt19937_64 rng(11);
  auto addr = [&](const std::array<std::uint8_t, 16>& like) {
    std::array<std::uint8_t, 16> a = like;
    for (std::size_t i = rng() % 17; i < 16; ++i) a[i] = std::uint8_t(rng() % 2 ? like[i] : rng());
    return a;
  };
  auto port = [&]() -> std::optional<std::uint16_t> {
    switch (rng() % 5) {
      case 0: return std::nullopt;
      case 1: return 0;
      case 2: return 65535;
      default: return std::uint16_t(rng() % 4);
    }
  };
  std::array<std::uint8_t, 16> base{};
  for (auto& b : base) b = std::uint8_t(rng());
  auto key = [&](const rill::flow_key& like) {
    rill::flow_key k = like;
    if (rng() % 4 == 0) k.proto = ip_proto(rng() % 6);
    if (rng() % 4 == 0) k.ip_version = std::uint8_t(rng() % 2 ? 4 : 6);
    k.a_addr = addr(like.a_addr);
    k.b_addr = rng() % 3 ? like.b_addr : addr(like.b_addr);
    if (rng() % 2) k.a_port = port();
    if (rng() % 2) k.b_port = port();
    return k;
  };
  rill::flow_key prev{};
  prev.a_addr = prev.b_addr = base;
  std::size_t less = 0, equal = 0, greater = 0;
  for (int i = 0; i < 50000; ++i) {
    const rill::flow_key x = key(prev), y = rng() % 10 == 0 ? x : key(x);
    auto fields = [](const rill::flow_key& k) {
      return std::tie(k.proto, k.ip_version, k.a_addr, k.b_addr, k.a_port, k.b_port);
    };
    const auto want = fields(x) <=> fields(y);
    ASSERT_EQ(x <=> y, want) << x.to_string() << " vs " << y.to_string();
    const auto wx = x.order_words(), wy = y.order_words();
    ASSERT_EQ(wx <=> wy, want) << x.to_string() << " vs " << y.to_string();
    less += want < 0, equal += want == 0, greater += want > 0;
    prev = y;
  }
  EXPECT_GT(less, 10000u);
  EXPECT_GT(greater, 10000u);
  EXPECT_GT(equal, 3000u);
}

}  // namespace

// a_ip_string/b_ip_string of IPv4 keys: inet_ntop's text for every octet value in every
// position.
TEST(flow_key, ipv4_text_is_inet_ntops) {
  for (std::size_t pos = 0; pos < 4; ++pos) {
    for (unsigned v = 0; v < 256; ++v) {
      std::array<std::uint8_t, 16> a{}, b{};
      a[0] = 10, a[1] = 200, a[2] = 7, a[3] = 99;
      a[pos] = std::uint8_t(v);
      b = a;
      b[3] = std::uint8_t(a[3] ^ 1);
      const auto k = rill::flow_key::make(rill::ip_proto::tcp, 4, a, 1, b, 2);
      char want[INET_ADDRSTRLEN] = {};
      ASSERT_NE(::inet_ntop(AF_INET, k.a_addr.data(), want, sizeof want), nullptr);
      ASSERT_EQ(k.a_ip_string(), want) << "octet " << pos << " = " << v;
      ASSERT_NE(::inet_ntop(AF_INET, k.b_addr.data(), want, sizeof want), nullptr);
      ASSERT_EQ(k.b_ip_string(), want) << "octet " << pos << " = " << v;
    }
  }
}

// rill/connectors/packet.hpp — decoding one captured frame into a flow key.
//
// Defines:
//   rill::ip_proto              tcp / udp / icmp / icmpv6 / other / non_ip (+ to_string)
//   rill::flow_key              direction-normalised conversation key (proto, addresses, ports)
//   rill::packet                one decoded frame: event time, lengths, key, TCP flags,
//                               decode flags, VLAN tags
//   rill::decode                link-layer bytes (or a rill::pcap_frame) -> packet; pure,
//                               noexcept, no libpcap; a function object, so that
//                               `.map(rill::decode)` names it in a pipeline
//   rill::is_supported_linktype which link types decode understands
//   std::hash<rill::flow_key>
//
// Example (compiled by tests/banner_examples.py):
//   std::array<std::byte, 42> frame{};          // Ethernet + IPv4 + UDP, addresses 0.0.0.0
//   frame[12] = std::byte{0x08};                // EtherType 0x0800: IPv4
//   frame[14] = std::byte{0x45};                // version 4, IHL 5 (20 bytes)
//   frame[17] = std::byte{28};                  // IPv4 total length 28 = 20 + 8
//   frame[23] = std::byte{17};                  // protocol 17: UDP
//   auto p = rill::decode(1 /*Ethernet*/, frame, /*wire_len=*/42, rill::event_time{});
//   std::unordered_map<rill::flow_key, std::uint64_t> bytes_per_flow;
//   if (p && !p->truncated && p->key.proto == rill::ip_proto::udp) {
//     std::cout << p->key.a_endpoint() << " <-> " << p->key.b_endpoint() << '\n';
//     bytes_per_flow[p->key] += p->wire_len;
//   }
//
// Conventions (they match tshark 4.0 with IP defragmentation off, which the tests' truth
// files come from):
//   - the OUTERMOST IP header decides the protocol; tunnels (IP-in-IP, GRE) are `other`;
//   - ports only for TCP/UDP packets that carry the transport header (unfragmented or
//     first fragment); non-first fragments are keyed by address pair, never by payload;
//   - ICMP/ICMPv6 never have ports, not even from the IP+UDP header an ICMP error quotes;
//   - VLAN IDs are metadata, not part of the key; non-IP frames have proto non_ip.
//
// Thread safety: everything here is a pure function or a plain value type.
// Distinct objects: safe. Shared objects: unsafe (const use is safe).
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "rill/core/time.hpp"

namespace rill {

/// Transport protocol of the outermost IP header, or non_ip for frames that carry no IP.
/// Numbers: tcp 6, udp 17, icmp 1, icmpv6 58 (IANA "Protocol Numbers"), whatever the IP
/// version (ICMPv6 over IPv4 is still icmpv6, as tshark dissects it).
enum class ip_proto : std::uint8_t { tcp, udp, icmp, icmpv6, other, non_ip };

/// "tcp", "udp", "icmp", "icmpv6", "other", "non_ip" (the first five are the protocol
/// names of the tests' tshark truth files). Never throws.
std::string_view to_string(ip_proto p) noexcept;

/// Direction-normalised conversation key: both directions of a conversation map to the
/// same key. Endpoint a is the smaller of (address bytes, port) — byte order, which is
/// NOT the text order the truth files sort by; compare text pairs after sorting them.
///
/// Invariants (decode establishes them; make() does too):
///   - IPv4 addresses occupy a_addr[0..3] / b_addr[0..3], the other 12 bytes are zero;
///   - ports are both set or both empty; set only for tcp/udp packets with a header;
///   - non_ip keys are all zero (ip_version 0, zero addresses, no ports).
struct flow_key {
  ip_proto proto = ip_proto::non_ip;
  std::uint8_t ip_version = 0;  ///< 4 or 6; 0 for non-IP
  std::array<std::uint8_t, 16> a_addr{};
  std::array<std::uint8_t, 16> b_addr{};
  std::optional<std::uint16_t> a_port;
  std::optional<std::uint16_t> b_port;

  /// Builds a normalised key from one packet's source and destination. `from_a` (if not
  /// null) receives true when src became endpoint a. Ports: pass both or neither.
  static flow_key make(ip_proto proto, std::uint8_t ip_version,
                       const std::array<std::uint8_t, 16>& src,
                       std::optional<std::uint16_t> src_port,
                       const std::array<std::uint8_t, 16>& dst,
                       std::optional<std::uint16_t> dst_port, bool* from_a = nullptr) noexcept;

  /// Address text as tshark prints it: "192.0.2.1", "fe80::1" (inet_ntop, RFC 5952 style
  /// zero compression, lower-case hex). Empty string for non-IP keys.
  std::string a_ip_string() const;
  std::string b_ip_string() const;

  /// Endpoint text as in the tests' tshark truth files: "ip:port", "[ipv6]:port", or the
  /// bare address when the key has no ports. Empty string for non-IP keys.
  std::string a_endpoint() const;
  std::string b_endpoint() const;

  /// "udp 192.0.2.1:53 <-> 198.51.100.7:40000", for logs and test failure messages.
  std::string to_string() const;

  /// Field-wise equality, as the defaulted one, with each address compared as two 8-byte
  /// words (the keyed-window tables compare keys on every lookup). noexcept.
  friend bool operator==(const flow_key& x, const flow_key& y) noexcept {
    auto same16 = [](const std::array<std::uint8_t, 16>& a, const std::array<std::uint8_t, 16>& b) {
      std::uint64_t a0, a1, b0, b1;
      std::memcpy(&a0, a.data(), 8), std::memcpy(&a1, a.data() + 8, 8);
      std::memcpy(&b0, b.data(), 8), std::memcpy(&b1, b.data() + 8, 8);
      return ((a0 ^ b0) | (a1 ^ b1)) == 0;
    };
    return x.proto == y.proto && x.ip_version == y.ip_version && x.a_port == y.a_port &&
           x.b_port == y.b_port && same16(x.a_addr, y.a_addr) && same16(x.b_addr, y.b_addr);
  }
  /// Field-wise order, as the defaulted one (proto, ip_version, a_addr, b_addr, a_port,
  /// b_port; addresses byte by byte, no port before any port), with each address compared
  /// as two big-endian 8-byte words instead of a memcmp call (sorting a window's rows
  /// compares keys n log n times). noexcept.
  friend std::strong_ordering operator<=>(const flow_key& x, const flow_key& y) noexcept {
    if (auto c = x.proto <=> y.proto; c != 0) return c;
    if (auto c = x.ip_version <=> y.ip_version; c != 0) return c;
    auto cmp16 = [](const std::array<std::uint8_t, 16>& a, const std::array<std::uint8_t, 16>& b) {
      std::uint64_t a0, a1, b0, b1;
      std::memcpy(&a0, a.data(), 8), std::memcpy(&a1, a.data() + 8, 8);
      std::memcpy(&b0, b.data(), 8), std::memcpy(&b1, b.data() + 8, 8);
      if (a0 != b0) return __builtin_bswap64(a0) <=> __builtin_bswap64(b0);
      return __builtin_bswap64(a1) <=> __builtin_bswap64(b1);
    };
    if (auto c = cmp16(x.a_addr, y.a_addr); c != 0) return c;
    if (auto c = cmp16(x.b_addr, y.b_addr); c != 0) return c;
    if (auto c = x.a_port <=> y.a_port; c != 0) return c;
    return x.b_port <=> y.b_port;
  }

  /// The key as five 64-bit words whose lexicographic order (std::array's `<`) is
  /// operator<=>'s: the 34 bytes proto, ip_version, a_addr, b_addr read big-endian into
  /// words 0-3 and the top 16 bits of word 4, then each port as 17 bits (bit 16 set when
  /// the port is there, the value below; an empty port sorts first), a_port above b_port.
  /// Equal keys give equal words. For sorting many keys by a precomputed array
  /// (rill::keyed_order); tests/connectors/packet_test.cpp checks the order against the
  /// fields'. noexcept.
  std::array<std::uint64_t, 5> order_words() const noexcept {
    std::array<std::uint8_t, 40> b{};
    b[0] = static_cast<std::uint8_t>(proto);
    b[1] = ip_version;
    std::memcpy(b.data() + 2, a_addr.data(), 16);
    std::memcpy(b.data() + 18, b_addr.data(), 16);
    std::array<std::uint64_t, 5> w;
    for (std::size_t i = 0; i < 5; ++i) {
      std::uint64_t v;
      std::memcpy(&v, b.data() + 8 * i, 8);
      w[i] = __builtin_bswap64(v);
    }
    auto port = [](const std::optional<std::uint16_t>& p) -> std::uint64_t {
      return p ? (std::uint64_t{1} << 16) | *p : 0;
    };
    w[4] |= port(a_port) << 17 | port(b_port);
    return w;
  }
};

/// One decoded frame. Plain value; `decode` fills every field.
struct packet {
  event_time time{};           ///< capture timestamp, ns since the epoch
  std::uint32_t wire_len = 0;  ///< original length on the wire (pcap `len`, tshark frame.len)
  std::uint32_t cap_len = 0;   ///< bytes captured (pcap `caplen`)
  flow_key key{};
  bool from_a = false;  ///< the packet's source is key endpoint a
  /// A header that decode reads was cut off by the captured bytes: link header, VLAN tag,
  /// IP header, IPv6 extension header, or the 4 port bytes of TCP/UDP. The packet still
  /// counts toward totals:
  ///   - IP header readable (addresses known): key as far as decoded, e.g. proto tcp with
  ///     no ports when the TCP header was cut;
  ///   - IP header NOT readable (the frame says IPv4/IPv6 but the 20/40 bytes are not
  ///     there): proto `other`, ip_version set, addresses zero, no ports — "IP, unknown
  ///     protocol", as tshark's fields give an ip layer without ip.proto;
  ///   - link header not readable: proto non_ip, key all zero.
  bool truncated = false;
  /// Header fields contradict each other or the record: cap_len > wire_len (decode then
  /// bounds itself by wire_len, so it never reads bytes the frame does not carry), IPv4 IHL
  /// < 5 or IHL*4 > total length, IP version nibble that does not match the link layer's
  /// type. Keyed like `truncated`.
  bool malformed = false;
  /// An IP fragment (IPv4 MF or offset != 0; IPv6 Fragment header). Non-first fragments
  /// have no ports (their payload does not start with a transport header, so ports read
  /// there would be payload bytes); first fragments keep their real ports.
  bool fragment = false;
  /// The TCP flags byte (byte 13 of the TCP header, RFC 9293 3.1: CWR 0x80 ECE 0x40 URG
  /// 0x20 ACK 0x10 PSH 0x08 RST 0x04 SYN 0x02 FIN 0x01) of a tcp packet whose captured
  /// bytes hold its TCP header up to that byte; 0 otherwise (other protocols, non-first
  /// fragments, a header cut off before byte 13). Sits in the struct's tail padding:
  /// sizeof(packet) is what it is without it.
  std::uint8_t tcp_flags = 0;
  std::uint16_t vlan_outer = 0;  ///< first 802.1Q/802.1ad VLAN ID, 0 = none (or priority tag)
  std::uint16_t vlan_inner = 0;  ///< second VLAN ID (QinQ), 0 = none
};

/// Link types (LINKTYPE_* numbers, tcpdump.org/linktypes.html) decode understands:
///   1 Ethernet (with any stack of 0x8100 / 0x88a8 / 0x9100 VLAN tags),
///   113 Linux cooked SLL, 276 Linux cooked SLL2,
///   101 raw IP, and 12 / 14 — the DLT_RAW values libpcap's pcap_datalink() reports for
///   a LINKTYPE_RAW file (12 on Linux, 14 on OpenBSD), 228 raw IPv4, 229 raw IPv6.
/// Pure, noexcept, any thread.
bool is_supported_linktype(int linktype) noexcept;

struct pcap_frame;  // <rill/connectors/pcap_frame.hpp>

namespace detail {
/// The type of rill::decode: one object with both overloads, so that a pipeline can name
/// it (`stream<pcap_frame>::map(rill::decode)`; an overload set cannot be passed as a
/// function argument).
struct decode_fn {
  /// Decodes one captured frame.
  ///
  /// @param linktype  LINKTYPE_/DLT_ value of the capture (see is_supported_linktype)
  /// @param data      the captured bytes (cap_len = data.size()); never read past its end,
  ///                  nor past wire_len — safe on any input, fuzz/ASan-clean
  /// @param wire_len  the original length on the wire (pcap `len`)
  /// @param t         capture time, ns since the epoch
  /// @return nullopt only when the link type is unsupported; otherwise a packet, possibly
  ///         flagged truncated / malformed (see packet). Never throws, never allocates.
  /// Thread safety: pure function, any thread. Rule: the conventions in the file banner.
  std::optional<packet> operator()(int linktype, std::span<const std::byte> data,
                                   std::uint32_t wire_len, event_time t) const noexcept;

  /// Decodes a frame of rill::pcap_frame_source: the same packet, field for field, as the
  /// overload above gives for the record the frame was made from, as long as every header
  /// decode reads lies within the frame's copied bytes (pcap_frame::max_bytes); a header
  /// past them marks the packet truncated, as a capture cut at that length would, while
  /// cap_len stays the record's. A link type is_supported_linktype refuses gives a packet
  /// with the frame's time and lengths, proto non_ip and `malformed` set.
  /// Thread safety: pure function, any thread. Never throws, never allocates.
  packet operator()(const pcap_frame& frame) const noexcept;
};
}  // namespace detail

/// rill::decode(linktype, bytes, wire_len, time) and rill::decode(frame): see
/// detail::decode_fn.
inline constexpr detail::decode_fn decode{};

}  // namespace rill

/// Hash of every field of the key, not the padding: absl::HashOf over five 8-byte words,
/// the two addresses and one of proto, ip_version and both ports with their presence.
/// Stable within one process run only, never persisted or sent. noexcept.
template <>
struct std::hash<rill::flow_key> {
  std::size_t operator()(const rill::flow_key& k) const noexcept;
};

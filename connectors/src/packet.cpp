// Packet decoding: link layer -> VLAN tags -> IPv4/IPv6 (+ extension headers) -> ports.
// Every read goes through a length check against `n`, the bytes we may look at
// (min(cap_len, wire_len), then min(that, IP total length)). See packet.hpp.
#include "rill/connectors/packet.hpp"

#include "rill/connectors/pcap_frame.hpp"

#include <absl/hash/hash.h>
#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace rill {

namespace {

using addr16 = std::array<std::uint8_t, 16>;

constexpr std::uint16_t ethertype_ipv4 = 0x0800;
constexpr std::uint16_t ethertype_ipv6 = 0x86dd;
constexpr std::uint16_t ethertype_vlan = 0x8100;      // IEEE 802.1Q
constexpr std::uint16_t ethertype_qinq = 0x88a8;      // IEEE 802.1ad S-tag
constexpr std::uint16_t ethertype_qinq_old = 0x9100;  // pre-standard QinQ
constexpr std::uint16_t ethertype_min = 0x0600;       // below: 802.3 length / SLL special
constexpr std::uint16_t arphrd_netlink = 824;         // SLL/SLL2: protocol is a netlink family

constexpr std::uint8_t proto_icmp = 1;
constexpr std::uint8_t proto_tcp = 6;
constexpr std::uint8_t proto_udp = 17;
constexpr std::uint8_t proto_icmpv6 = 58;
constexpr std::uint8_t proto_hopopts = 0;
constexpr std::uint8_t proto_routing = 43;
constexpr std::uint8_t proto_fragment = 44;
constexpr std::uint8_t proto_ah = 51;
constexpr std::uint8_t proto_dstopts = 60;

// Longest header chain we walk (VLAN tags, IPv6 extension headers, AH). A longer chain is
// certainly hostile; what is left is treated as an unknown protocol.
constexpr int max_chain = 16;

inline std::uint16_t be16(const std::uint8_t* p) noexcept {
  return static_cast<std::uint16_t>((p[0] << 8) | p[1]);
}

ip_proto map_proto(std::uint8_t num) noexcept {
  switch (num) {
    case proto_tcp:
      return ip_proto::tcp;
    case proto_udp:
      return ip_proto::udp;
    case proto_icmp:
      return ip_proto::icmp;
    case proto_icmpv6:
      return ip_proto::icmpv6;
    default:
      return ip_proto::other;
  }
}

// An address as the two 8-byte words of its 16 bytes in memory order (IPv4: its 4 bytes,
// then zeros), read from the packet straight into registers. The key is built from them
// with 8-byte stores: building it from byte and 2-byte stores and copying it with 16-byte
// loads stalls on store forwarding (perf: about 10 % of netflow's time on one worker).
struct addr_words {
  std::uint64_t w0 = 0, w1 = 0;
};

addr_words ipv4_words(const std::uint8_t* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  if constexpr (std::endian::native == std::endian::little) return {v, 0};
  else return {std::uint64_t{v} << 32, 0};
}

addr_words ipv6_words(const std::uint8_t* p) noexcept {
  addr_words a;
  std::memcpy(&a.w0, p, 8);
  std::memcpy(&a.w1, p + 8, 8);
  return a;
}

// A memory-order word as a number that compares as its bytes do (big-endian value).
std::uint64_t byte_order(std::uint64_t w) noexcept {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap64(w);
  else return w;
}

// flow_key::make, in place: endpoint a is the smaller of (address bytes, port). Ports are
// `sp` / `dp` when `ports`, else none. Only full-width stores into k, no temporaries.
// The words come as scalars: a struct argument is reassembled through the stack (GCC 12).
[[gnu::always_inline]] inline void set_key(flow_key& k, ip_proto proto, std::uint8_t version,
                                           std::uint64_t src0, std::uint64_t src1, std::uint64_t dst0,
                                           std::uint64_t dst1, bool ports, std::uint16_t sp,
                                           std::uint16_t dp, bool& from_a) noexcept {
  const std::uint64_t s0 = byte_order(src0), d0 = byte_order(dst0);
  const std::uint64_t s1 = byte_order(src1), d1 = byte_order(dst1);
  const bool src_first = s0 != d0 ? s0 < d0 : s1 != d1 ? s1 < d1 : !ports || sp <= dp;
  auto put = [](std::array<std::uint8_t, 16>& to, std::uint64_t w0, std::uint64_t w1) {
    std::memcpy(to.data(), &w0, 8);
    std::memcpy(to.data() + 8, &w1, 8);
  };
  k.proto = proto;
  k.ip_version = version;
  if (src_first) {
    put(k.a_addr, src0, src1);
    put(k.b_addr, dst0, dst1);
  } else {
    put(k.a_addr, dst0, dst1);
    put(k.b_addr, src0, src1);
  }
  if (ports) {
    k.a_port.emplace(src_first ? sp : dp);
    k.b_port.emplace(src_first ? dp : sp);
  } else {
    k.a_port.reset();
    k.b_port.reset();
  }
  from_a = src_first;
}

// The IP header could not be used: "IP, unknown protocol", addresses unknown (zero).
void unusable_ip(std::uint8_t version, packet& out) noexcept {
  out.key = flow_key{};
  out.key.proto = ip_proto::other;
  out.key.ip_version = version;
}

// Keys a packet whose IP addresses are known. `l4` / `l4_len` is the transport header
// when the packet carries one (unfragmented or first fragment), else nullptr.
// Inlined where it is called: its address words then stay in registers.
[[gnu::always_inline]] inline void key_transport(std::uint8_t version, std::uint8_t num, addr_words src,
                                                 addr_words dst, const std::uint8_t* l4, std::size_t l4_len,
                                                 packet& out) noexcept {
  const ip_proto pr = map_proto(num);
  bool ports = false;
  std::uint16_t sp = 0, dp = 0;
  if (l4 != nullptr && (pr == ip_proto::tcp || pr == ip_proto::udp)) {
    if (l4_len >= 4) {
      ports = true;
      sp = be16(l4);
      dp = be16(l4 + 2);
    } else {
      out.truncated = true;
    }
    // TCP flags: byte 13 of the TCP header (RFC 9293 3.1), when it was captured.
    if (pr == ip_proto::tcp && l4_len > 13) out.tcp_flags = l4[13];
  }
  set_key(out.key, pr, version, src.w0, src.w1, dst.w0, dst.w1, ports, sp, dp, out.from_a);
}

void decode_ipv4(const std::uint8_t* p, std::size_t n, packet& out) noexcept {
  if (n < 20) {
    out.truncated = true;
    return unusable_ip(4, out);
  }
  const std::size_t ihl = static_cast<std::size_t>(p[0] & 0x0f) * 4;
  const std::size_t total = be16(p + 2);
  if (ihl < 20 || (total != 0 && total < ihl)) {
    out.malformed = true;
    return unusable_ip(4, out);
  }
  if (ihl > n) {
    out.truncated = true;
    return unusable_ip(4, out);
  }
  // Total length 0 happens with TCP segmentation offload on the capturing host: the
  // captured bytes are then the datagram (tshark does the same).
  const std::size_t bound = total == 0 ? n : std::min(n, total);
  const addr_words src = ipv4_words(p + 12), dst = ipv4_words(p + 16);
  const std::uint16_t frag = be16(p + 6);
  const bool more_fragments = (frag & 0x2000) != 0;
  const std::uint16_t offset = frag & 0x1fff;
  out.fragment = more_fragments || offset != 0;
  std::uint8_t num = p[9];
  if (offset != 0) {  // non-first fragment: its payload is not a transport header
    return key_transport(4, num, src, dst, nullptr, 0, out);
  }
  std::size_t cur = ihl;
  for (int i = 0; num == proto_ah && i < max_chain; ++i) {  // RFC 4302: len in 4-byte units - 2
    if (bound - cur < 2) {
      out.truncated = true;
      return key_transport(4, num, src, dst, nullptr, 0, out);
    }
    const std::size_t len = (static_cast<std::size_t>(p[cur + 1]) + 2) * 4;
    if (bound - cur < len) {
      out.truncated = true;
      return key_transport(4, num, src, dst, nullptr, 0, out);
    }
    num = p[cur];
    cur += len;
  }
  key_transport(4, num, src, dst, p + cur, bound - cur, out);
}

void decode_ipv6(const std::uint8_t* p, std::size_t n, packet& out) noexcept {
  if (n < 40) {
    out.truncated = true;
    return unusable_ip(6, out);
  }
  const std::size_t payload = be16(p + 4);
  // Payload length 0: jumbogram (RFC 2675) or offload; use the captured bytes.
  const std::size_t bound = payload == 0 ? n : std::min(n, 40 + payload);
  const addr_words src = ipv6_words(p + 8), dst = ipv6_words(p + 24);
  std::uint8_t nh = p[6];
  std::size_t cur = 40;
  for (int i = 0; i < max_chain; ++i) {
    std::size_t len = 0;
    switch (nh) {
      case proto_hopopts:
      case proto_routing:
      case proto_dstopts:  // RFC 8200 4.3-4.6: length in 8-byte units, not counting the first 8
        if (bound - cur < 2) break;
        len = (static_cast<std::size_t>(p[cur + 1]) + 1) * 8;
        break;
      case proto_ah:  // RFC 4302: length in 4-byte units, minus 2
        if (bound - cur < 2) break;
        len = (static_cast<std::size_t>(p[cur + 1]) + 2) * 4;
        break;
      case proto_fragment:  // RFC 8200 4.5: fixed 8 bytes
        len = 8;
        break;
      default:
        return key_transport(6, nh, src, dst, p + cur, bound - cur, out);
    }
    if (len == 0 || bound - cur < len) {
      out.truncated = true;
      return key_transport(6, nh, src, dst, nullptr, 0, out);
    }
    const std::uint8_t next = p[cur];
    if (nh == proto_fragment) {
      out.fragment = true;
      const std::uint16_t offset = be16(p + cur + 2) >> 3;
      if (offset != 0) {  // non-first fragment: keyed by its next header, no ports
        return key_transport(6, next, src, dst, nullptr, 0, out);
      }
    }
    nh = next;
    cur += len;
  }
  key_transport(6, nh, src, dst, nullptr, 0, out);  // absurdly long chain
}

// Bytes starting at an IP header. `link_version` is 4/6 when the link layer said which
// (ethertype, LINKTYPE_IPV4/6), 0 for raw IP.
void decode_ip(const std::uint8_t* p, std::size_t n, std::uint8_t link_version,
               packet& out) noexcept {
  if (n < 1) {
    out.truncated = true;
    if (link_version != 0) unusable_ip(link_version, out);
    return;
  }
  const std::uint8_t version = p[0] >> 4;
  if (link_version != 0 && version != link_version) out.malformed = true;
  if (version == 4) return decode_ipv4(p, n, out);
  if (version == 6) return decode_ipv6(p, n, out);
  out.malformed = true;
  if (link_version != 0) unusable_ip(link_version, out);
}

void decode_ethertype(std::uint16_t type, const std::uint8_t* p, std::size_t n,
                      packet& out) noexcept {
  for (int tags = 0; type == ethertype_vlan || type == ethertype_qinq || type == ethertype_qinq_old;
       ++tags) {
    if (n < 4 || tags >= max_chain) {
      out.truncated = n < 4;
      return;  // non_ip
    }
    const std::uint16_t vid = be16(p) & 0x0fff;
    if (tags == 0) out.vlan_outer = vid;
    if (tags == 1) out.vlan_inner = vid;
    type = be16(p + 2);
    p += 4;
    n -= 4;
  }
  if (type == ethertype_ipv4) return decode_ip(p, n, 4, out);
  if (type == ethertype_ipv6) return decode_ip(p, n, 6, out);
  // ARP, LLDP, 0x890d, ...: non-IP; key stays all zero.
}

}  // namespace

std::string_view to_string(ip_proto p) noexcept {
  switch (p) {
    case ip_proto::tcp:
      return "tcp";
    case ip_proto::udp:
      return "udp";
    case ip_proto::icmp:
      return "icmp";
    case ip_proto::icmpv6:
      return "icmpv6";
    case ip_proto::other:
      return "other";
    case ip_proto::non_ip:
      return "non_ip";
  }
  return "unknown";
}

flow_key flow_key::make(ip_proto proto, std::uint8_t ip_version, const addr16& src,
                        std::optional<std::uint16_t> src_port, const addr16& dst,
                        std::optional<std::uint16_t> dst_port, bool* from_a) noexcept {
  flow_key k;
  bool src_first = false;
  const addr_words s = ipv6_words(src.data()), d = ipv6_words(dst.data());
  set_key(k, proto, ip_version, s.w0, s.w1, d.w0, d.w1, src_port.has_value() && dst_port.has_value(), src_port.value_or(0), dst_port.value_or(0),
          src_first);
  if (from_a != nullptr) *from_a = src_first;
  return k;
}

namespace {

std::string ip_text(std::uint8_t version, const addr16& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (version == 4) {
    // Dotted decimal, as inet_ntop's "%u.%u.%u.%u" (which goes through sprintf: the
    // fifth of writing a flow row in netflow).
    std::string s;
    s.reserve(15);
    for (std::size_t i = 0; i < 4; ++i) {
      if (i > 0) s += '.';
      const unsigned v = a[i];
      if (v >= 100) s += char('0' + v / 100);
      if (v >= 10) s += char('0' + v / 10 % 10);
      s += char('0' + v % 10);
    }
    return s;
  }
  if (version == 6) {
    ::inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
  }
  return buf;
}

std::string endpoint_text(std::uint8_t version, const addr16& a,
                          std::optional<std::uint16_t> port) {
  std::string ip = ip_text(version, a);
  if (!port || ip.empty()) return ip;
  if (version == 6) return "[" + ip + "]:" + std::to_string(*port);
  return ip + ":" + std::to_string(*port);
}

}  // namespace

std::string flow_key::a_ip_string() const { return ip_text(ip_version, a_addr); }
std::string flow_key::b_ip_string() const { return ip_text(ip_version, b_addr); }
std::string flow_key::a_endpoint() const { return endpoint_text(ip_version, a_addr, a_port); }
std::string flow_key::b_endpoint() const { return endpoint_text(ip_version, b_addr, b_port); }

std::string flow_key::to_string() const {
  std::string s{rill::to_string(proto)};
  if (proto == ip_proto::non_ip) return s;
  return s + " " + a_endpoint() + " <-> " + b_endpoint();
}

bool is_supported_linktype(int linktype) noexcept {
  switch (linktype) {
    case 1:
    case 12:
    case 14:
    case 101:
    case 113:
    case 228:
    case 229:
    case 276:
      return true;
    default:
      return false;
  }
}

namespace {

// Both decode overloads: `p`/`n` are the bytes decode may look at, `cap_len` the packet's
// captured length, `cap_over_wire` whether the record claims more captured bytes than
// went over the wire (then nothing past wire_len is trusted).
packet decode_bytes(int linktype, const std::uint8_t* p, std::size_t n, std::uint32_t cap_len,
                    bool cap_over_wire, std::uint32_t wire_len, event_time t) noexcept {
  packet out;
  out.time = t;
  out.wire_len = wire_len;
  out.cap_len = cap_len;
  if (cap_over_wire) {  // caplen > len cannot happen honestly: trust neither beyond len
    out.malformed = true;
    n = std::min<std::size_t>(n, wire_len);
  }
  switch (linktype) {
    case 1: {  // Ethernet II / 802.3: dst(6) src(6) type-or-length(2)
      if (n < 14) {
        out.truncated = true;
        break;
      }
      const std::uint16_t type = be16(p + 12);
      if (type >= ethertype_min) decode_ethertype(type, p + 14, n - 14, out);
      break;  // else 802.3 length field (LLC): non_ip
    }
    case 113: {  // SLL: pkttype(2) hatype(2) halen(2) addr(8) protocol(2)
      if (n < 16) {
        out.truncated = true;
        break;
      }
      const std::uint16_t type = be16(p + 14);
      if (be16(p + 2) != arphrd_netlink && type >= ethertype_min) {
        decode_ethertype(type, p + 16, n - 16, out);
      }
      break;
    }
    case 276: {  // SLL2: protocol(2) reserved(2) ifindex(4) hatype(2) pkttype(1) halen(1) addr(8)
      if (n < 20) {
        out.truncated = true;
        break;
      }
      const std::uint16_t type = be16(p);
      if (be16(p + 8) != arphrd_netlink && type >= ethertype_min) {
        decode_ethertype(type, p + 20, n - 20, out);
      }
      break;
    }
    case 228:
      decode_ip(p, n, 4, out);
      break;
    case 229:
      decode_ip(p, n, 6, out);
      break;
    default:
      decode_ip(p, n, 0, out);
      break;  // 12, 14, 101: raw IP, version from the header
  }
  return out;
}

}  // namespace

std::optional<packet> detail::decode_fn::operator()(int linktype,
                                                    std::span<const std::byte> data,
                                                    std::uint32_t wire_len,
                                                    event_time t) const noexcept {
  if (!is_supported_linktype(linktype)) return std::nullopt;
  return decode_bytes(linktype, reinterpret_cast<const std::uint8_t*>(data.data()), data.size(),
                      static_cast<std::uint32_t>(std::min<std::size_t>(data.size(), UINT32_MAX)),
                      data.size() > wire_len, wire_len, t);
}

packet detail::decode_fn::operator()(const pcap_frame& f) const noexcept {
  if (!is_supported_linktype(f.linktype)) {
    packet out;
    out.time = f.time;
    out.wire_len = f.wire_len;
    out.cap_len = f.cap_len;
    out.malformed = true;
    return out;
  }
  // The copied bytes stand for the first copied_len of cap_len captured bytes: decoding
  // them is decoding a capture cut at copied_len, except that cap_len stays the record's.
  const std::size_t n = std::min<std::size_t>({f.copied_len, f.cap_len, pcap_frame::max_bytes});
  return decode_bytes(f.linktype, reinterpret_cast<const std::uint8_t*>(f.bytes.data()), n,
                      f.cap_len, f.cap_len > f.wire_len, f.wire_len, f.time);
}

}  // namespace rill

std::size_t std::hash<rill::flow_key>::operator()(const rill::flow_key& k) const noexcept {
  // Five words, as absl::Hash mixes one multiply per word: the two addresses as four
  // 8-byte words, then proto, ip_version and each port with its presence in one word (a
  // port absent hashes as absent whatever the optional's unused value).
  std::uint64_t w[4];
  std::memcpy(&w[0], k.a_addr.data(), 16);
  std::memcpy(&w[2], k.b_addr.data(), 16);
  const std::uint64_t rest = std::uint64_t(static_cast<std::uint8_t>(k.proto)) | std::uint64_t(k.ip_version) << 8 |
                             std::uint64_t(k.a_port.value_or(0)) << 16 | std::uint64_t(k.a_port.has_value()) << 32 |
                             std::uint64_t(k.b_port.value_or(0)) << 40 | std::uint64_t(k.b_port.has_value()) << 56;
  return absl::HashOf(w[0], w[1], w[2], w[3], rest);
}

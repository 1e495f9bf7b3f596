// packet_codec.cpp — netflow's Kafka value for one packet. See packet_codec.hpp.
#include "packet_codec.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace netflow_kafka {
namespace {

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

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("not a netflow packet record: " + what);
}

bool all_zero(const std::uint8_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != 0) return false;
  return true;
}

// rill::flow_key's invariants (packet.hpp), which rill::decode establishes.
void check_key(const rill::flow_key& k, std::uint8_t flags) {
  const bool a_port = flags & 16, b_port = flags & 32;
  if (k.proto == rill::ip_proto::non_ip) {
    if (a_port || b_port || !all_zero(k.a_addr.data(), 16) || !all_zero(k.b_addr.data(), 16))
      bad("addresses or ports on a non_ip key (non_ip keys are all zero)");
    return;
  }
  if (a_port != b_port) bad(std::string("only ") + (a_port ? "a_port" : "b_port") + " set (ports come in pairs)");
  const bool ports_allowed = k.proto == rill::ip_proto::tcp || k.proto == rill::ip_proto::udp;
  if (a_port && !ports_allowed)
    bad("ports on protocol " + std::string(rill::to_string(k.proto)) + " (only tcp and udp have ports)");
  if (k.ip_version == 4 && (!all_zero(k.a_addr.data() + 4, 12) || !all_zero(k.b_addr.data() + 4, 12)))
    bad("IPv4 address with non-zero bytes 4..15");
  if (rill::flow_key::make(k.proto, k.ip_version, k.a_addr, k.a_port, k.b_addr, k.b_port) != k)
    bad("key " + k.to_string() + " not direction-normalised (endpoint a greater than b)");
}

}  // namespace

std::string encode(const rill::packet& p) {
  std::string s(wire_size, '\0');
  put<std::int64_t>(s, 0, p.time.time_since_epoch().count());
  put<std::uint32_t>(s, 8, p.wire_len);
  put<std::uint32_t>(s, 12, p.cap_len);
  s[16] = char(p.key.proto);
  s[17] = char(p.key.ip_version);
  s[18] = char((p.from_a ? 1 : 0) | (p.truncated ? 2 : 0) | (p.malformed ? 4 : 0) | (p.fragment ? 8 : 0) |
               (p.key.a_port ? 16 : 0) | (p.key.b_port ? 32 : 0));
  s[19] = char(p.tcp_flags);
  put<std::uint16_t>(s, 20, p.key.a_port.value_or(0));
  put<std::uint16_t>(s, 22, p.key.b_port.value_or(0));
  put<std::uint16_t>(s, 24, p.vlan_outer);
  put<std::uint16_t>(s, 26, p.vlan_inner);
  std::memcpy(s.data() + 28, p.key.a_addr.data(), 16);
  std::memcpy(s.data() + 44, p.key.b_addr.data(), 16);
  std::memcpy(s.data() + 60, "RP1", 4);
  return s;
}

rill::packet decode(std::string_view s) {
  if (s.size() != wire_size || std::memcmp(s.data() + 60, "RP1", 4) != 0)
    throw std::invalid_argument("not a netflow packet record (" + std::to_string(s.size()) + " bytes)");
  // Fields the probe never writes: a poison record, not a packet to count.
  const auto time_ns = get<std::int64_t>(s, 0);
  const auto wire_len = get<std::uint32_t>(s, 8), cap_len = get<std::uint32_t>(s, 12);
  const auto proto = std::uint8_t(s[16]), version = std::uint8_t(s[17]), f = std::uint8_t(s[18]);
  if (proto > std::uint8_t(rill::ip_proto::non_ip)) bad("protocol byte " + std::to_string(proto));
  const bool non_ip = proto == std::uint8_t(rill::ip_proto::non_ip);
  if (non_ip ? version != 0 : version != 4 && version != 6)
    bad("ip_version " + std::to_string(version) + (non_ip ? " for non_ip (must be 0)" : " (must be 4 or 6)"));
  if (f & ~63) bad("flags " + std::to_string(f) + " (unknown bits)");
  if (wire_len > max_packet_len)
    bad("wire_len " + std::to_string(wire_len) + " (over 262144, libpcap's MAXIMUM_SNAPLEN)");
  if (cap_len > max_packet_len)
    bad("cap_len " + std::to_string(cap_len) + " (over 262144, libpcap's MAXIMUM_SNAPLEN)");
  if (cap_len > wire_len)
    bad("cap_len " + std::to_string(cap_len) + " over wire_len " + std::to_string(wire_len));
  if (time_ns < min_time_ns) bad("time " + std::to_string(time_ns) + " ns (before 1970)");
  rill::packet p;
  p.time = rill::event_time{std::chrono::nanoseconds{time_ns}};
  p.wire_len = wire_len;
  p.cap_len = cap_len;
  p.key.proto = rill::ip_proto(proto);
  p.key.ip_version = version;
  p.from_a = f & 1;
  p.truncated = f & 2;
  p.malformed = f & 4;
  p.fragment = f & 8;
  p.tcp_flags = std::uint8_t(s[19]);
  if (f & 16) p.key.a_port = get<std::uint16_t>(s, 20);
  if (f & 32) p.key.b_port = get<std::uint16_t>(s, 22);
  p.vlan_outer = get<std::uint16_t>(s, 24);
  p.vlan_inner = get<std::uint16_t>(s, 26);
  std::memcpy(p.key.a_addr.data(), s.data() + 28, 16);
  std::memcpy(p.key.b_addr.data(), s.data() + 44, 16);
  check_key(p.key, f);
  // Bytes encode() writes as zero, and flags decode never sets on other protocols: a value
  // is one encode() wrote exactly when encode(decode(value)) == value.
  if (p.tcp_flags != 0 && p.key.proto != rill::ip_proto::tcp)
    bad("tcp_flags " + std::to_string(p.tcp_flags) + " on a " + std::string(rill::to_string(p.key.proto)) +
        " packet (only tcp has them)");
  if (!(f & 16) && get<std::uint16_t>(s, 20) != 0) bad("a_port bytes set without the a_port flag");
  if (!(f & 32) && get<std::uint16_t>(s, 22) != 0) bad("b_port bytes set without the b_port flag");
  return p;
}

}  // namespace netflow_kafka

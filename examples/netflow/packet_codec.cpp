// packet_codec.cpp — netflow's Kafka value for one packet. See packet_codec.hpp.
#include "packet_codec.hpp"

#include <cstring>
#include <stdexcept>

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
  if (time_ns < 0 || time_ns >= max_time_ns)
    bad("time " + std::to_string(time_ns) + " ns (outside 1970..2106, classic pcap's range)");
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
  if (f & 16) p.key.a_port = get<std::uint16_t>(s, 20);
  if (f & 32) p.key.b_port = get<std::uint16_t>(s, 22);
  p.vlan_outer = get<std::uint16_t>(s, 24);
  p.vlan_inner = get<std::uint16_t>(s, 26);
  std::memcpy(p.key.a_addr.data(), s.data() + 28, 16);
  std::memcpy(p.key.b_addr.data(), s.data() + 44, 16);
  return p;
}

}  // namespace netflow_kafka

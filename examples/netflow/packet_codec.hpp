// packet_codec.hpp — netflow's Kafka value for one decoded packet: the probe encodes every
// packet into a fixed 64-byte value, the analysis decodes it back (kafka_mode.cpp).
//
//   const std::string v = netflow_kafka::encode(p);
//   rill::packet q = netflow_kafka::decode(v);  // == p; throws std::invalid_argument on
//                                               // bytes that are not one of ours
//
// Wire format, little-endian:
//   0 time ns (i64) | 8 wire_len (u32) | 12 cap_len (u32) | 16 proto | 17 ip_version |
//  18 flags (from_a 1, truncated 2, malformed 4, fragment 8, a_port set 16, b_port set 32) |
//  19 tcp_flags | 20 a_port (u16) | 22 b_port (u16) | 24 vlan_outer (u16) | 26 vlan_inner (u16) |
//  28 a_addr[16] | 44 b_addr[16] | 60 magic "RP1\0"
//
// Thread safety: pure functions, any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <rill/connectors/packet.hpp>

namespace netflow_kafka {

inline constexpr std::size_t wire_size = 64;

/// The largest wire_len and cap_len decode accepts: libpcap's MAXIMUM_SNAPLEN (pcap-int.h,
/// 262144 bytes), the largest snapshot length libpcap reads or captures with; far above
/// the largest IPv4 packet (65,535 bytes) and the 64 KiB+ segments of offloading NICs.
inline constexpr std::uint32_t max_packet_len = 262144;

/// Capture times decode accepts: [0, INT64_MAX] ns, 1970-01-01 to 2262-04-11T23:47:16Z,
/// exactly the times rill::pcap_reader and rill::pcap_split_reader return (a record
/// stamped outside it is a read error there), so the file mode and the Kafka mode accept
/// the same packets. The keyed windows compute window bounds without overflow up to it
/// (<rill/operators/keyed_window.hpp>).
inline constexpr std::int64_t min_time_ns = 0;

/// The 64-byte value of `p`. Never throws except std::bad_alloc.
std::string encode(const rill::packet& p);

/// The packet in `value`. Throws std::invalid_argument, naming the field and its value,
/// when the value is not one encode() writes for a packet rill::decode returns: wrong
/// size or magic, a proto byte that is not a rill::ip_proto, ip_version not 4 or 6 (0
/// exactly for non_ip), unknown flag bits, TCP flags on a packet that is not tcp, port
/// bytes without their flag (so encode(decode(v)) == v for every v accepted), wire_len or
/// cap_len over
/// max_packet_len,
/// cap_len over wire_len, time before min_time_ns, or a key that breaks rill::flow_key's
/// invariants (<rill/connectors/packet.hpp>): one port set without the other, ports on a
/// protocol other than tcp/udp, a non_ip key with addresses or ports, an IPv4 address with
/// non-zero bytes 4..15, endpoint a greater than b (not direction-normalised). Without
/// these checks such a value would count as a conversation no capture has. The Kafka
/// source sends such a record to its error side output (a poison message).
rill::packet decode(std::string_view value);

}  // namespace netflow_kafka

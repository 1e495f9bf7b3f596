// fuzz_packet_decode: rill::decode on any bytes, for every supported link type, with
// invariants (<rill/connectors/packet.hpp>): never reads past the data (ASan); the key is
// direction-normalised and keeps flow_key's invariants; decode(pcap_frame) of the same
// record gives the same packet; netflow's Kafka codec accepts the packet and round-trips
// it (the file mode and the Kafka mode take the same packets).
// Input: byte 0 picks the link type, bytes 1-2 add to the wire length, the rest is the frame.
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "check.hpp"

#include "packet_codec.hpp"
#include "rill/connectors/packet.hpp"
#include "rill/connectors/pcap_frame.hpp"
#include "rill/connectors/pcap_reader.hpp"

namespace {

constexpr int linktypes[] = {1, 12, 101, 113, 228, 229, 276, 0, 192};

bool zero(const std::uint8_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (b[i]) return false;
  return true;
}

using rill_fuzz::check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const int linktype = linktypes[data[0] % std::size(linktypes)];
  const std::uint32_t extra = std::uint32_t(data[1]) | std::uint32_t(data[2]) << 8;
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data + 3), size - 3);
  const auto wire = std::uint32_t(frame.size()) + extra;
  const rill::event_time t{std::chrono::nanoseconds{1'700'000'000'000'000'000}};
  const auto p = rill::decode(linktype, frame, wire, t);
  if (!p) return 0;  // unsupported link type
  const auto& k = p->key;
  check(p->cap_len == frame.size() && p->wire_len == wire, "lengths are the record's");
  check(k.a_port.has_value() == k.b_port.has_value(), "ports come in pairs");
  if (k.a_port) check(k.proto == rill::ip_proto::tcp || k.proto == rill::ip_proto::udp, "ports only on tcp/udp");
  if (k.proto == rill::ip_proto::non_ip) {
    check(k.ip_version == 0 && zero(k.a_addr.data(), 16) && zero(k.b_addr.data(), 16), "non_ip keys are zero");
  } else {
    check(k.ip_version == 4 || k.ip_version == 6, "ip version");
    if (k.ip_version == 4) check(zero(k.a_addr.data() + 4, 12) && zero(k.b_addr.data() + 4, 12), "IPv4 tail");
    check(rill::flow_key::make(k.proto, k.ip_version, k.a_addr, k.a_port, k.b_addr, k.b_port) == k,
          "direction-normalised");
    // The reverse direction gives the same key.
    bool from_a = false;
    const auto rev = rill::flow_key::make(k.proto, k.ip_version, k.b_addr, k.b_port, k.a_addr, k.a_port, &from_a);
    check(rev == k, "both directions give one key");
  }
  // The frame path (pcap_frame_source) decodes the same record the same way, as long as
  // the headers lie within its copied bytes.
  rill::pcap_record rec;
  rec.time = t;
  rec.cap_len = std::uint32_t(frame.size());
  rec.wire_len = wire;
  rec.data = frame;
  rill::pcap_frame f;
  f.assign(linktype, rec);
  const auto q = rill::decode(f);
  if (frame.size() <= rill::pcap_frame::max_bytes) {
    check(q.key == p->key && q.truncated == p->truncated && q.malformed == p->malformed &&
              q.fragment == p->fragment && q.from_a == p->from_a && q.tcp_flags == p->tcp_flags,
          "frame path == record path");
  }
  // The Kafka mode's codec takes every packet the file mode makes (capture lengths up to
  // libpcap's maximum), and gives it back unchanged.
  if (wire <= netflow_kafka::max_packet_len) {
    const auto v = netflow_kafka::encode(*p);
    const auto back = netflow_kafka::decode(v);  // throws (and the fuzzer reports it) if refused
    check(back.key == p->key && back.time == p->time && back.cap_len == p->cap_len && back.wire_len == p->wire_len &&
              back.from_a == p->from_a && back.truncated == p->truncated && back.malformed == p->malformed &&
              back.fragment == p->fragment && back.tcp_flags == p->tcp_flags && back.vlan_outer == p->vlan_outer && back.vlan_inner == p->vlan_inner,
          "codec round trip");
    check(netflow_kafka::encode(back) == v, "codec bytes round trip");
  }
  return 0;
}

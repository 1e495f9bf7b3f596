// rill/connectors/pcap_frame.hpp — one captured frame, not decoded yet: what
// rill::pcap_frame_source reads, so that decoding can run on another worker.
//
// Defines:
//   rill::pcap_frame   capture time, wire and captured length, link type, and the first
//                      pcap_frame::max_bytes captured bytes, inline (no allocation)
//   (rill::decode(const pcap_frame&) -> rill::packet is in <rill/connectors/packet.hpp>)
//
// Example (compiled by tests/banner_examples.py):
//   auto r = rill::pcap_reader::open("capture.pcap");
//   rill::pcap_record rec;
//   rill::pcap_frame f;
//   while (r.next(rec) == rill::read_status::ok) {
//     f.assign(r.linktype(), rec);              // copies min(cap_len, max_bytes) bytes
//     rill::packet p = rill::decode(f);         // == *rill::decode(r.linktype(), rec.data,
//   }                                           //     rec.wire_len, rec.time)
//
// The byte cap: decode reads headers only (link header, VLAN tags, IPv4 header with
// options, AH, IPv6 extension headers, the 4 port bytes of TCP/UDP: packet.cpp), so a
// frame keeps the first max_bytes = 128 captured bytes. They hold Ethernet + two VLAN
// tags + IPv4 with the largest options (60 bytes) + ports (86 bytes), or Ethernet + two
// VLAN tags + IPv6 + 62 bytes of extension headers + ports (e.g. Hop-by-Hop 8, Fragment 8,
// a 24-byte AH and 16 bytes of Destination Options); every packet of shared/data/pcap
// and of Debian's python3-dpkt and sip-tester captures needs at most 62
// (tests/connectors/pcap_frame_test.cpp compares both decode paths on all of them). A
// frame whose headers run past max_bytes decodes as if the capture had been cut there:
// the packet is marked truncated (and counted so) and keyed as far as the bytes go (see
// packet::truncated); its cap_len is still the record's. Why 128 and inline: a frame
// crosses the rebalance ring by copy; 256 inline bytes or a std::vector of every byte
// (one allocation per frame) are slower (bench/pcap_decode_bench.cpp, bench/RESULTS.md).
//
// Thread safety: a plain value type. Distinct objects: safe. Shared objects: unsafe
// (const use is safe). Copying copies the whole inline buffer (sizeof(pcap_frame) bytes).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "rill/connectors/packet.hpp"
#include "rill/connectors/pcap_reader.hpp"
#include "rill/core/time.hpp"

namespace rill {

struct pcap_frame {
  /// Bytes kept of each record's captured bytes (see the banner for why this is enough).
  static constexpr std::size_t max_bytes = 128;

  event_time time{};           ///< capture timestamp, ns since the epoch
  std::uint32_t wire_len = 0;  ///< original length on the wire (pcap `len`), bytes
  std::uint32_t cap_len = 0;   ///< bytes captured in the file (pcap `caplen`); may exceed max_bytes
  std::int32_t linktype = 0;   ///< LINKTYPE_/DLT_ value of the capture (pcap_reader::linktype)
  std::uint16_t copied_len = 0;  ///< bytes held in `bytes`: min(cap_len, max_bytes)
  /// The first copied_len captured bytes; the rest is unspecified.
  std::array<std::byte, max_bytes> bytes;

  /// The copied bytes. Valid while the frame lives and is not reassigned.
  std::span<const std::byte> data() const noexcept {
    return {bytes.data(), std::min<std::size_t>(copied_len, max_bytes)};
  }

  /// Fills the frame from a capture record: time, lengths, the link type, and the first
  /// min(captured.size(), max_bytes) bytes of `captured`; cap_len = captured.size().
  /// noexcept, no allocation; copies at most max_bytes bytes.
  void assign(int link, event_time t, std::uint32_t wire,
              std::span<const std::byte> captured) noexcept {
    time = t;
    wire_len = wire;
    cap_len = static_cast<std::uint32_t>(std::min<std::size_t>(captured.size(), UINT32_MAX));
    linktype = link;
    const std::size_t n = std::min(captured.size(), max_bytes);
    copied_len = static_cast<std::uint16_t>(n);
    if (n != 0) std::memcpy(bytes.data(), captured.data(), n);
  }
  /// The same, from a pcap_reader record (`rec.data` needs to be valid only during the call).
  void assign(int link, const pcap_record& rec) noexcept {
    assign(link, rec.time, rec.wire_len, rec.data);
  }
};

static_assert(pcap_frame::max_bytes <= UINT16_MAX, "copied_len is 16 bits wide");

}  // namespace rill

// flow_stats.hpp — netflow's per-window, per-conversation aggregate: packets, wire bytes
// and the OR of the TCP flags byte for each direction, and the capture times of the first
// and last packet. A rill::mergeable_aggregate over rill::packet, folded by the keyed
// window operator (flow_row.hpp's count_flows).
//
//   netflow::flow_stats g;
//   auto acc = g.init();
//   g.add(acc, syn);                 // a packet from endpoint a (packet::from_a)
//   g.add(acc, syn_ack);             // one from endpoint b
//   const netflow::flow_stats::value v = g.result(acc);
//   assert(v.a_to_b.packets == 1 && v.b_to_a.tcp_flags == 0x12);
//   assert(v.first == syn.time && v.last == syn_ack.time);
//
// Direction: the key is direction-normalised (endpoint a is the smaller, rill::flow_key);
// rill::packet::from_a says which way a packet went. A packet between one endpoint and
// itself counts as a -> b (flow_key::make puts it there).
//
// Size: the accumulator is 48 bytes, so a key table slot (a 42-byte flow_key, padded to
// 48, and the accumulator) is 96 bytes. Each direction's packet count and TCP flags share
// one 64-bit word (the low 56 bits count, the top 8 hold the flags): with the flags in a
// word of their own the slot would be 104 bytes and most slots would span three cache
// lines. 2^56 packets is 2,000 years at 1 Gpps, so the count never reaches the flags.
//
// Thread safety: stateless function object; an accumulator belongs to its window's worker.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <rill/pcap.hpp>

namespace netflow {

/// One direction of a conversation in one window.
struct direction_counts {
  std::uint64_t packets = 0;  ///< packets whose source is this direction's first endpoint
  std::uint64_t bytes = 0;    ///< their wire length (pcap `len`), summed
  std::uint8_t tcp_flags = 0; ///< OR of their TCP flags bytes (0 when none is tcp)
  friend bool operator==(const direction_counts&, const direction_counts&) = default;
};

struct flow_stats {
  /// Index of a direction in the accumulator's arrays.
  static constexpr std::size_t a_to_b = 0, b_to_a = 1;

  struct accumulator {
    static constexpr unsigned flags_shift = 56;
    static constexpr std::uint64_t count_mask = (std::uint64_t{1} << flags_shift) - 1;
    std::array<std::uint64_t, 2> bytes{};          ///< per direction, wire bytes
    std::array<std::uint64_t, 2> packets_flags{};  ///< per direction: packets | flags << 56
    std::int64_t first_ns = std::numeric_limits<std::int64_t>::max();  ///< ns since the epoch
    std::int64_t last_ns = std::numeric_limits<std::int64_t>::min();

    std::uint64_t packets(std::size_t dir) const noexcept { return packets_flags[dir] & count_mask; }
    std::uint8_t tcp_flags(std::size_t dir) const noexcept {
      return std::uint8_t(packets_flags[dir] >> flags_shift);
    }
  };
  static_assert(sizeof(accumulator) == 48, "a key table slot of flow_key + accumulator is 96 bytes (see banner)");

  /// What a window gives per conversation.
  struct value {
    direction_counts a_to_b, b_to_a;
    rill::event_time first, last;  ///< capture times of the first and last packet
  };

  accumulator init() const noexcept { return {}; }
  /// Folds one packet: O(1), no branch on the direction.
  void add(accumulator& a, const rill::packet& p) const noexcept {
    const std::size_t d = p.from_a ? a_to_b : b_to_a;
    a.bytes[d] += p.wire_len;
    a.packets_flags[d] = (a.packets_flags[d] + 1) | (std::uint64_t{p.tcp_flags} << accumulator::flags_shift);
    const std::int64_t t = p.time.time_since_epoch().count();
    a.first_ns = t < a.first_ns ? t : a.first_ns;
    a.last_ns = t > a.last_ns ? t : a.last_ns;
  }
  /// The accumulator of both inputs: counts add, flags OR, times min and max.
  void merge(accumulator& a, const accumulator& b) const noexcept {
    for (std::size_t d : {a_to_b, b_to_a}) {
      a.bytes[d] += b.bytes[d];
      const std::uint64_t x = a.packets_flags[d], y = b.packets_flags[d];
      a.packets_flags[d] =
          ((x & accumulator::count_mask) + (y & accumulator::count_mask)) | ((x | y) & ~accumulator::count_mask);
    }
    a.first_ns = b.first_ns < a.first_ns ? b.first_ns : a.first_ns;
    a.last_ns = b.last_ns > a.last_ns ? b.last_ns : a.last_ns;
  }
  value result(const accumulator& a) const noexcept {
    auto side = [&a](std::size_t d) { return direction_counts{a.packets(d), a.bytes[d], a.tcp_flags(d)}; };
    return {side(a_to_b), side(b_to_a), rill::event_time{std::chrono::nanoseconds{a.first_ns}},
            rill::event_time{std::chrono::nanoseconds{a.last_ns}}};
  }
};

}  // namespace netflow

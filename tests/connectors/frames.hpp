// tests/connectors/frames.hpp — test helpers: build frames byte by byte and write them
// into classic pcap files (either byte order, µs or ns).
//
// Example:
//   auto f = frames::eth(frames::eth_ipv4,
//                        frames::ipv4(frames::v4(10, 0, 0, 1), frames::v4(10, 0, 0, 2), 17,
//                                     frames::udp(1234, 53, {})));
//   frames::write_pcap(path, 1, {frames::rec(1'000'000'001, f)}, frames::file_options{.nano =
//   true});
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace frames {

using bytes = std::vector<std::uint8_t>;
using addr16 = std::array<std::uint8_t, 16>;

constexpr std::uint16_t eth_ipv4 = 0x0800;
constexpr std::uint16_t eth_ipv6 = 0x86dd;
constexpr std::uint16_t eth_arp = 0x0806;

inline void put16(bytes& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
inline void put32(bytes& b, std::uint32_t v) {
  put16(b, static_cast<std::uint16_t>(v >> 16));
  put16(b, static_cast<std::uint16_t>(v));
}
inline bytes cat(bytes a, const bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline addr16 v4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
  return addr16{a, b, c, d};
}
/// fe80::<last> style IPv6 address: prefix 16 bits, last 16 bits.
inline addr16 v6(std::uint16_t prefix, std::uint16_t last) {
  addr16 a{};
  a[0] = static_cast<std::uint8_t>(prefix >> 8);
  a[1] = static_cast<std::uint8_t>(prefix);
  a[14] = static_cast<std::uint8_t>(last >> 8);
  a[15] = static_cast<std::uint8_t>(last);
  return a;
}

inline bytes udp(std::uint16_t sp, std::uint16_t dp, const bytes& payload) {
  bytes b;
  put16(b, sp);
  put16(b, dp);
  put16(b, static_cast<std::uint16_t>(8 + payload.size()));
  put16(b, 0);
  return cat(b, payload);
}

inline bytes tcp(std::uint16_t sp, std::uint16_t dp, const bytes& payload, std::uint8_t flags = 0x02) {
  bytes b;
  put16(b, sp);
  put16(b, dp);
  put32(b, 1000);       // seq
  put32(b, 0);          // ack
  b.push_back(5 << 4);  // data offset 5
  b.push_back(flags);   // default SYN
  put16(b, 65535);
  put16(b, 0);
  put16(b, 0);
  return cat(b, payload);
}

/// ICMP echo request (type 8) or any type/code with a body (e.g. a quoted IP header).
inline bytes icmp(std::uint8_t type, std::uint8_t code, const bytes& body) {
  bytes b{type, code, 0, 0, 0, 0, 0, 0};
  return cat(b, body);
}

/// IPv4 header (IHL 5) + payload. `frag` = flags<<13 | offset (8-byte units).
/// `total_len` overrides the computed total length.
inline bytes ipv4(const addr16& src, const addr16& dst, std::uint8_t proto, const bytes& payload,
                  std::uint16_t frag = 0, std::optional<std::uint16_t> total_len = {}) {
  bytes b;
  b.push_back(0x45);
  b.push_back(0);
  put16(b, total_len.value_or(static_cast<std::uint16_t>(20 + payload.size())));
  put16(b, 0x4242);  // id
  put16(b, frag);
  b.push_back(64);
  b.push_back(proto);
  put16(b, 0);
  b.insert(b.end(), src.begin(), src.begin() + 4);
  b.insert(b.end(), dst.begin(), dst.begin() + 4);
  return cat(b, payload);
}

/// IPv6 header + payload (which may start with extension headers; `nh` names the first).
inline bytes ipv6(const addr16& src, const addr16& dst, std::uint8_t nh, const bytes& payload) {
  bytes b{0x60, 0, 0, 0};
  put16(b, static_cast<std::uint16_t>(payload.size()));
  b.push_back(nh);
  b.push_back(64);
  b.insert(b.end(), src.begin(), src.end());
  b.insert(b.end(), dst.begin(), dst.end());
  return cat(b, payload);
}

/// An IPv6 extension header of the 8-byte-unit kind (HBH 0, Routing 43, DstOpts 60)
/// with `units` extra 8-byte units, followed by `rest`.
inline bytes ext8(std::uint8_t next, std::uint8_t units, const bytes& rest) {
  bytes b(8 + 8 * std::size_t{units}, 0);
  b[0] = next;
  b[1] = units;
  if (b.size() > 2) b[2] = 1;  // PadN-ish filler, content is irrelevant to decode
  return cat(b, rest);
}
/// IPv6 Fragment header: offset in 8-byte units, M flag.
inline bytes frag6(std::uint8_t next, std::uint16_t offset, bool more, const bytes& rest) {
  bytes b{next, 0};
  put16(b, static_cast<std::uint16_t>((offset << 3) | (more ? 1 : 0)));
  put32(b, 0xabcd);
  return cat(b, rest);
}
/// Authentication header (RFC 4302): 12 bytes fixed + 4-byte ICV => payload len field 2.
inline bytes ah(std::uint8_t next, const bytes& rest) {
  bytes b{next, 2, 0, 0};
  put32(b, 0x100);  // SPI
  put32(b, 1);      // sequence
  put32(b, 0);      // ICV
  return cat(b, rest);
}

inline bytes eth(std::uint16_t type, const bytes& payload) {
  bytes b{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x00, 0x66, 0x77, 0x88, 0x99, 0xaa};
  put16(b, type);
  return cat(b, payload);
}
/// One VLAN tag (TPID tpid, VID vid) followed by `type`: use inside eth(tpid, ...).
inline bytes vlan(std::uint16_t vid, std::uint16_t type, const bytes& payload) {
  bytes b;
  put16(b, static_cast<std::uint16_t>((3 << 13) | vid));  // PCP 3
  put16(b, type);
  return cat(b, payload);
}
/// Linux cooked v1 (LINKTYPE_LINUX_SLL, 113).
inline bytes sll(std::uint16_t protocol, const bytes& payload, std::uint16_t hatype = 1) {
  bytes b;
  put16(b, 0);  // to us
  put16(b, hatype);
  put16(b, 6);
  for (std::uint8_t x : {0x02, 0x42, 0xac, 0x11, 0x00, 0x02, 0x00, 0x00}) b.push_back(x);
  put16(b, protocol);
  return cat(b, payload);
}
/// Linux cooked v2 (LINKTYPE_LINUX_SLL2, 276).
inline bytes sll2(std::uint16_t protocol, const bytes& payload, std::uint16_t hatype = 1) {
  bytes b;
  put16(b, protocol);
  put16(b, 0);
  put32(b, 3);  // ifindex
  put16(b, hatype);
  b.push_back(0);  // pkttype
  b.push_back(6);
  for (std::uint8_t x : {0x02, 0x42, 0xac, 0x11, 0x00, 0x02, 0x00, 0x00}) b.push_back(x);
  return cat(b, payload);
}

inline std::span<const std::byte> as_span(const bytes& b) {
  return {reinterpret_cast<const std::byte*>(b.data()), b.size()};
}

// ---- classic pcap files ----

struct record {
  std::int64_t time_ns = 0;
  bytes data;
  std::optional<std::uint32_t> orig_len;  // default: data.size()
  std::optional<std::uint32_t> incl_len;  // default: data.size() (lie to make bad files)
};
inline record rec(std::int64_t time_ns, bytes data, std::optional<std::uint32_t> orig_len = {}) {
  record r;
  r.time_ns = time_ns;
  r.data = std::move(data);
  r.orig_len = orig_len;
  return r;
}

struct file_options {
  bool nano = false;
  bool big_endian = false;
  std::uint32_t snaplen = 262144;
};

inline void put_u32(std::string& s, std::uint32_t v, bool be) {
  for (int i = 0; i < 4; ++i) {
    const int shift = be ? 24 - 8 * i : 8 * i;
    s.push_back(static_cast<char>((v >> shift) & 0xff));
  }
}
inline void put_u16(std::string& s, std::uint16_t v, bool be) {
  if (be) {
    s.push_back(static_cast<char>(v >> 8));
    s.push_back(static_cast<char>(v & 0xff));
  } else {
    s.push_back(static_cast<char>(v & 0xff));
    s.push_back(static_cast<char>(v >> 8));
  }
}

/// The bytes of a classic pcap file (libpcap format, 24-byte header, 16-byte records).
inline std::string pcap_bytes(std::uint32_t linktype, const std::vector<record>& recs,
                              file_options o = {}) {
  std::string s;
  put_u32(s, o.nano ? 0xa1b23c4d : 0xa1b2c3d4, o.big_endian);
  put_u16(s, 2, o.big_endian);
  put_u16(s, 4, o.big_endian);
  put_u32(s, 0, o.big_endian);
  put_u32(s, 0, o.big_endian);
  put_u32(s, o.snaplen, o.big_endian);
  put_u32(s, linktype, o.big_endian);
  for (const auto& r : recs) {
    const std::int64_t div = o.nano ? 1'000'000'000 : 1'000'000;
    const std::int64_t units = o.nano ? r.time_ns : r.time_ns / 1000;
    put_u32(s, static_cast<std::uint32_t>(units / div), o.big_endian);
    put_u32(s, static_cast<std::uint32_t>(units % div), o.big_endian);
    put_u32(s, r.incl_len.value_or(static_cast<std::uint32_t>(r.data.size())), o.big_endian);
    put_u32(s, r.orig_len.value_or(static_cast<std::uint32_t>(r.data.size())), o.big_endian);
    s.append(reinterpret_cast<const char*>(r.data.data()), r.data.size());
  }
  return s;
}

inline void write_file(const std::filesystem::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
}

inline void write_pcap(const std::filesystem::path& p, std::uint32_t linktype,
                       const std::vector<record>& recs, file_options o = {}) {
  write_file(p, pcap_bytes(linktype, recs, o));
}

}  // namespace frames

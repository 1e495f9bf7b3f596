// Tests for rill/connectors/pcap_frame.hpp and pcap_frame_source.hpp: the frame path
// (pcap_frame_source -> rill::decode(frame)) gives, field by field, the packets and stats
// of the packet path (pcap_source), on
//   1. every capture of shared/data/pcap and the Debian ones (python3-dpkt, sip-tester);
//   2. hand-built captures: VLAN/QinQ, IPv6 extension headers, snaplen cuts, caplen > len
//      (C15, tcpreplay issue 485), SLL2, a file cut off mid-record (same error and message);
//   3. the byte cap: headers past pcap_frame::max_bytes decode as a capture cut there;
//   4. a job: pcap_frame_source -> rebalance -> map(decoder) -> sink on 2 workers gives
//      the packets and the stats of pcap_source -> sink.
#include "rill/connectors/pcap_frame.hpp"

#include "captures.hpp"
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <rill/pcap.hpp>
#include <rill/rill.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "frames.hpp"
#include "rill/connectors/pcap_frame_source.hpp"

namespace {

namespace fs = std::filesystem;
using namespace frames;
using rill::ip_proto;
using rill::poll_status;

static_assert(sizeof(rill::packet) == 72,
              "rill::packet changed: compare its new fields in same_packet() below, then "
              "update this size");

// Every field of two packets; empty when equal, else the fields that differ.
std::string packet_differences(const rill::packet& a, const rill::packet& b) {
  std::ostringstream os;
  if (a.time != b.time)
    os << " time " << a.time.time_since_epoch().count() << "/" << b.time.time_since_epoch().count();
  if (a.wire_len != b.wire_len) os << " wire_len " << a.wire_len << "/" << b.wire_len;
  if (a.cap_len != b.cap_len) os << " cap_len " << a.cap_len << "/" << b.cap_len;
  if (a.key != b.key) os << " key " << a.key.to_string() << "/" << b.key.to_string();
  if (a.from_a != b.from_a) os << " from_a " << a.from_a << "/" << b.from_a;
  if (a.truncated != b.truncated) os << " truncated " << a.truncated << "/" << b.truncated;
  if (a.malformed != b.malformed) os << " malformed " << a.malformed << "/" << b.malformed;
  if (a.fragment != b.fragment) os << " fragment " << a.fragment << "/" << b.fragment;
  if (a.tcp_flags != b.tcp_flags) os << " tcp_flags " << int(a.tcp_flags) << "/" << int(b.tcp_flags);
  if (a.vlan_outer != b.vlan_outer) os << " vlan_outer " << a.vlan_outer << "/" << b.vlan_outer;
  if (a.vlan_inner != b.vlan_inner) os << " vlan_inner " << a.vlan_inner << "/" << b.vlan_inner;
  return os.str();
}

using rill_test::stats_snapshot;

// One split read to its end by the source's reader, in slices of 256 as the driver does.
template <class Source>
struct drained {
  std::vector<rill::record<typename Source::value_type, rill::record_policy_of_t<Source>>> records;
  poll_status last = poll_status::more;
  std::string error;
};
template <class Source>
drained<Source> drain(const Source& src) {
  drained<Source> d;
  auto r = src.open(0);
  do {
    d.last = r.poll(
        [&](rill::record<typename Source::value_type, rill::record_policy_of_t<Source>>&& rec) {
          d.records.push_back(std::move(rec));
        },
        256);
  } while (d.last == poll_status::more);
  if (d.last == poll_status::error) d.error = r.error();
  return d;
}

// Reads `path` through both sources and expects the same packets, event times, end
// status, error text and stats. The frame path decodes with the source's decoder.
void expect_same_paths(const std::string& path) {
  SCOPED_TRACE(path);
  rill::pcap_source packets{{path}};
  rill::pcap_frame_source frames{{path}};
  // A capture has nothing to acknowledge: both give value and time only.
  static_assert(std::is_same_v<rill::record_policy_of_t<rill::pcap_source>, rill::unacked>);
  static_assert(std::is_same_v<rill::record_policy_of_t<rill::pcap_frame_source>, rill::unacked>);
  const auto p = drain(packets);
  auto f = drain(frames);
  ASSERT_EQ(p.records.size(), f.records.size());
  {
    auto decoder = frames.decoder();
    int shown = 0;
    for (std::size_t i = 0; i < p.records.size(); ++i) {
      const rill::packet q = decoder(f.records[i].value);
      const auto diff = packet_differences(p.records[i].value, q);
      EXPECT_TRUE(diff.empty() || shown++ >= 5) << "record " << i << ":" << diff;
      EXPECT_EQ(f.records[i].time, p.records[i].time) << "record " << i;
      EXPECT_EQ(f.records[i].value.time, q.time) << "record " << i;
    }
  }  // the decoder publishes its last counts here
  EXPECT_EQ(f.last, p.last);
  EXPECT_EQ(f.error, p.error);
  EXPECT_EQ(stats_snapshot(*frames.stats()), stats_snapshot(*packets.stats()));
}

using rill_test::real_captures;

TEST(pcap_frame_real, every_capture_decodes_the_same_as_pcap_source) {
  const auto captures = real_captures();
  if (captures.empty())
    GTEST_SKIP() << "no captures: neither ../shared nor python3-dpkt/sip-tester";
  for (const auto& c : captures) expect_same_paths(c);
  std::cout << "compared " << captures.size() << " captures\n";
}

class pcap_frame_files : public rill_test::scratch_dir_test {};

const addr16 h1 = v4(192, 168, 1, 10);
const addr16 h2 = v4(10, 0, 0, 2);
const addr16 g1 = v6(0xfe80, 1);
const addr16 g2 = v6(0x2001, 2);

bytes udp4(std::uint16_t sp, std::uint16_t dp) {
  return ipv4(h1, h2, 17, udp(sp, dp, {1, 2, 3, 4}));
}
// IPv6 + `units` 8-byte units of one Destination Options header + TCP.
bytes tcp6_ext(std::uint8_t units, std::uint16_t sp, std::uint16_t dp) {
  return ipv6(g1, g2, 60, ext8(6, units, tcp(sp, dp, {9, 9})));
}

TEST_F(pcap_frame_files, hand_built_ethernet_cases_decode_the_same) {
  bytes cut = eth(eth_ipv4, udp4(1, 2));
  cut.resize(14 + 20 + 2);        // snaplen cut inside the UDP ports
  bytes c15 = eth(eth_ipv4, {});  // C15: caplen 60 > len 28, IPv4 cut in the source address
  const bytes hdr = ipv4(h1, h2, 17, udp(1, 2, {}));
  c15.insert(c15.end(), hdr.begin(), hdr.begin() + 14);
  c15.resize(60, 0);
  bytes big = eth(eth_ipv4, ipv4(h2, h1, 6, tcp(80, 5000, bytes(1400, 7))));
  const auto path = dir_ / "cases.pcap";
  write_pcap(path, 1,
             {rec(1, eth(eth_ipv4, udp4(1000, 53))),
              rec(2, eth(0x8100, vlan(10, 0x88a8, vlan(20, eth_ipv4, udp4(5, 6))))),
              rec(3, eth(0x88a8, vlan(7, 0x8100, vlan(8, eth_ipv6, tcp6_ext(4, 443, 50000))))),
              rec(4, eth(eth_ipv6, ipv6(g1, g2, 44, frag6(17, 10, false, udp(1, 2, {}))))),
              rec(5, eth(eth_arp, bytes(28, 1))), rec(6, cut, 46), rec(7, c15, 28), rec(8, big),
              rec(9, eth(eth_ipv4, ipv4(h1, h2, 1, icmp(8, 0, {1, 2}))))},
             file_options{.nano = true});
  expect_same_paths(path.string());
}

TEST_F(pcap_frame_files, linux_cooked_sll2_decodes_the_same) {
  const auto path = dir_ / "sll2.pcap";
  write_pcap(path, 276,
             {rec(1, sll2(eth_ipv4, udp4(1, 2))), rec(2, sll2(eth_ipv6, tcp6_ext(1, 3, 4)))});
  expect_same_paths(path.string());
}

TEST_F(pcap_frame_files, file_cut_off_mid_record_gives_the_same_records_and_error) {
  const std::vector<record> recs = {rec(1, eth(eth_ipv4, udp4(1, 2))),
                                    rec(2, eth(eth_ipv4, udp4(3, 4))),
                                    rec(3, eth(eth_ipv4, udp4(5, 6)))};
  const std::string full = pcap_bytes(1, recs);
  const std::size_t third = 24 + 2 * (16 + 46);
  const auto path = dir_ / "cut.pcap";
  write_file(path, full.substr(0, third + 16 + 20));
  expect_same_paths(path.string());
  rill::pcap_frame_source frames{{path.string()}};
  const auto f = drain(frames);
  EXPECT_EQ(f.records.size(), 2u);
  EXPECT_EQ(f.last, poll_status::error);
  EXPECT_NE(f.error.find(path.string()), std::string::npos) << f.error;
  EXPECT_NE(f.error.find("byte offset " + std::to_string(third)), std::string::npos) << f.error;
  EXPECT_EQ(frames.stats()->errors.load(), 1u);
}

TEST_F(pcap_frame_files, open_errors_are_pcap_source_errors) {
  const auto missing = dir_ / "no-such.pcap";
  const auto ppi = dir_ / "ppi.pcap";
  write_pcap(ppi, 192, {rec(1, bytes(40, 0))});
  for (const auto& p : {missing, ppi}) {
    std::string want, got;
    try {
      (void)rill::pcap_source{{p.string()}, {.splits_per_file = 0}}.open(0);
    } catch (const rill::pcap_error& e) {
      want = e.what();
    }
    try {
      (void)rill::pcap_frame_source{{p.string()}}.open(0);
    } catch (const rill::pcap_error& e) {
      got = e.what();
    }
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(got, want);
  }
}

// ---- the byte cap ----

rill::pcap_frame frame_of(int linktype, const bytes& b, std::uint32_t wire_len,
                          std::int64_t t_ns = 5) {
  rill::pcap_frame f;
  f.assign(linktype, rill::event_time{std::chrono::nanoseconds{t_ns}}, wire_len, as_span(b));
  return f;
}

TEST(pcap_frame, assign_copies_at_most_max_bytes_and_keeps_the_lengths) {
  const bytes b = eth(eth_ipv4, ipv4(h1, h2, 17, udp(1, 2, bytes(1000, 3))));
  const auto f = frame_of(1, b, 2000, 42);
  EXPECT_EQ(f.cap_len, b.size());
  EXPECT_EQ(f.wire_len, 2000u);
  EXPECT_EQ(f.linktype, 1);
  EXPECT_EQ(f.copied_len, rill::pcap_frame::max_bytes);
  ASSERT_EQ(f.data().size(), rill::pcap_frame::max_bytes);
  EXPECT_TRUE(std::equal(f.data().begin(), f.data().end(), as_span(b).begin()));
  EXPECT_EQ(f.time.time_since_epoch().count(), 42);
  const auto small = frame_of(1, bytes(10, 1), 10);
  EXPECT_EQ(small.copied_len, 10u);
  EXPECT_EQ(small.data().size(), 10u);
}

TEST(pcap_frame, headers_past_the_cap_decode_as_a_capture_cut_there) {
  constexpr std::size_t cap = rill::pcap_frame::max_bytes;
  // Ethernet 14 + IPv6 40 + DstOpts 8*(1+units) + TCP: the ports start at 62 + 8*units,
  // the TCP flags byte is 13 bytes further.
  const std::uint8_t all_fit = static_cast<std::uint8_t>((cap - 14 - 62) / 8);   // flags byte <= cap
  const std::uint8_t ports_fit = static_cast<std::uint8_t>((cap - 4 - 62) / 8);  // ports end <= cap
  ASSERT_GT(ports_fit, all_fit);  // one size where the ports fit and the flags do not
  for (std::uint8_t units : {all_fit, ports_fit, std::uint8_t(ports_fit + 1), std::uint8_t(ports_fit + 20)}) {
    SCOPED_TRACE(int(units));
    const bytes b = eth(eth_ipv6, tcp6_ext(units, 443, 50000));
    const auto t = rill::event_time{std::chrono::nanoseconds{5}};
    const auto full = rill::decode(1, as_span(b), static_cast<std::uint32_t>(b.size()), t);
    ASSERT_TRUE(full);
    EXPECT_FALSE(full->truncated);
    ASSERT_TRUE(full->key.a_port.has_value());
    const auto got = rill::decode(frame_of(1, b, static_cast<std::uint32_t>(b.size())));
    if (62 + 8 * std::size_t{units} + 14 <= cap) {
      EXPECT_EQ(packet_differences(got, *full), "");
      continue;
    }
    // As if the capture had been cut at the cap, except for cap_len.
    auto as_cut = rill::decode(1, as_span(b).first(cap), static_cast<std::uint32_t>(b.size()), t);
    ASSERT_TRUE(as_cut);
    as_cut->cap_len = static_cast<std::uint32_t>(b.size());
    EXPECT_EQ(packet_differences(got, *as_cut), "");
    EXPECT_EQ(got.tcp_flags, 0);  // byte 13 of TCP was not copied
    const bool ports_copied = 62 + 8 * std::size_t{units} + 4 <= cap;
    EXPECT_EQ(got.truncated, !ports_copied);
    EXPECT_EQ(got.key.a_port.has_value(), ports_copied);
    EXPECT_EQ(got.key.a_ip_string(), full->key.a_ip_string());  // the IPv6 header fits
  }
}

TEST(pcap_frame, caplen_above_len_is_malformed_whatever_was_copied) {
  // C15 with cap_len > max_bytes > wire_len and cap_len > wire_len > max_bytes.
  const bytes b = eth(eth_ipv4, ipv4(h1, h2, 17, udp(1, 2, bytes(600, 3))));
  for (std::uint32_t wire : {40u, 400u}) {
    SCOPED_TRACE(wire);
    const auto t = rill::event_time{std::chrono::nanoseconds{5}};
    const auto want = rill::decode(1, as_span(b), wire, t);
    ASSERT_TRUE(want);
    EXPECT_TRUE(want->malformed);
    EXPECT_EQ(packet_differences(rill::decode(frame_of(1, b, wire)), *want), "");
  }
}

TEST(pcap_frame, unsupported_link_type_is_a_malformed_non_ip_packet) {
  const auto p = rill::decode(frame_of(192, bytes(40, 0), 40, 7));
  EXPECT_TRUE(p.malformed);
  EXPECT_EQ(p.key, rill::flow_key{});
  EXPECT_EQ(p.wire_len, 40u);
  EXPECT_EQ(p.cap_len, 40u);
  EXPECT_EQ(p.time.time_since_epoch().count(), 7);
}

// ---- the decoder's counts ----

TEST(pcap_frame_decoder, copies_do_not_count_twice_and_destruction_publishes) {
  auto stats = std::make_shared<rill::pcap_source_stats>();
  const auto udp_f = frame_of(1, eth(eth_ipv4, udp4(1, 2)), 46);
  bytes cut = eth(eth_ipv4, udp4(1, 2));
  cut.resize(36);
  const auto cut_f = frame_of(1, cut, 46);
  {
    rill::pcap_frame_decoder a{stats};
    for (int i = 0; i < 300; ++i) (void)a(udp_f);  // 256 published, 44 local
    EXPECT_EQ(stats->by_proto[std::size_t(ip_proto::udp)].load(), 256u);
    rill::pcap_frame_decoder b = a;  // starts at zero
    (void)b(cut_f);
    rill::pcap_frame_decoder c = std::move(a);  // takes a's 44
    (void)c(udp_f);
  }
  EXPECT_EQ(stats->by_proto[std::size_t(ip_proto::udp)].load(), 302u);
  EXPECT_EQ(stats->truncated.load(), 1u);
  EXPECT_EQ(stats->packets.load(), 0u);  // the source's count, not the decoder's
}

// ---- a job ----
//
//   pcap_frame_source (1 split, worker 0) -> rebalance -> map(decoder) -> sink   (2 workers)
//   pcap_source (1 split, worker 0) -> sink                                      (2 workers)
// Same packets (as a multiset: after rebalance the order is any), same stats.

TEST(pcap_frame_job, rebalanced_decoding_gives_pcap_source_packets_and_stats) {
  const std::string path = fs::path(RILL_SHARED_DIR) / "data" / "pcap" / "echo-connections.pcap";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not found";
  auto collect = [](rill::runtime& rt, auto stream) {
    auto out = std::make_shared<std::vector<rill::packet>>();
    auto mu = std::make_shared<std::mutex>();
    const auto rep = rt.run(std::move(stream).sink([out, mu](rill::packet&& p) {
      std::lock_guard lk(*mu);
      out->push_back(p);
    }));
    EXPECT_TRUE(rep.errors.empty());
    auto key = [](const rill::packet& p) {
      return std::tie(p.time, p.key, p.wire_len, p.cap_len, p.from_a, p.truncated, p.malformed,
                      p.fragment, p.vlan_outer, p.vlan_inner);
    };
    std::sort(out->begin(), out->end(),
              [&](const auto& a, const auto& b) { return key(a) < key(b); });
    return *out;
  };
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores", .pin = false}};
  rill::pcap_source packets{{path}};
  rill::pcap_frame_source frames{{path}};
  const auto want = collect(rt, rill::from(packets));
  const auto got = collect(rt, rill::from(frames).rebalance().map(frames.decoder()));
  ASSERT_EQ(got.size(), want.size());
  ASSERT_GT(got.size(), 0u);
  std::size_t differing = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    differing += !packet_differences(got[i], want[i]).empty();
  EXPECT_EQ(differing, 0u);
  EXPECT_EQ(stats_snapshot(*frames.stats()), stats_snapshot(*packets.stats()));
}

}  // namespace

// Tests for rill/connectors/pcap_filter.hpp and the capture filter of pcap_reader,
// pcap_split_reader and pcap_source: a bad expression's error, and on shared captures
// (classic pcap and pcapng) the filter's records against the same selection made by hand
// from the decoded packets (the key's protocol and ports), which tshark's truth checks;
// and a live capture on loopback, where the kernel filters.
#include "rill/connectors/pcap_filter.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "rill/connectors/pcap_reader.hpp"
#include "rill/connectors/pcap_split_reader.hpp"

namespace {

namespace fs = std::filesystem;
const fs::path corpus = fs::path(RILL_SHARED_DIR) / "data" / "pcap";

TEST(pcap_filter, bad_expression_names_itself_and_libpcaps_reason) {
  try {
    (void)rill::pcap_filter::compile("tcp port eighty", 1, 262144);
    FAIL() << "compiled";
  } catch (const rill::pcap_error& e) {
    EXPECT_EQ(e.code(), rill::pcap_errc::bad_filter);
    const std::string what = e.what();
    EXPECT_NE(what.find("\"tcp port eighty\""), std::string::npos) << what;
    // libpcap's words (gencode.c)
    EXPECT_NE(what.find("unknown port 'eighty'"), std::string::npos) << what;
    EXPECT_NE(what.find("EN10MB"), std::string::npos) << what;
  }
  EXPECT_THROW((void)rill::pcap_filter::compile("tcp and (", 1, 262144), rill::pcap_error);
  EXPECT_EQ(rill::make_error_code(rill::pcap_errc::bad_filter).message(), "bad capture filter");
}

TEST(pcap_filter, empty_expression_matches_everything) {
  const auto f = rill::pcap_filter::compile("", 1, 262144);
  std::array<std::byte, 14> frame{};
  EXPECT_TRUE(f.matches(frame, 14));
  EXPECT_EQ(f.expression(), "");
}

bool port_80(const rill::packet& p) {
  return p.key.proto == rill::ip_proto::tcp && (p.key.a_port == 80 || p.key.b_port == 80);
}

// pcap_reader with "tcp port 80" returns exactly the packets a plain read keys as tcp with
// port 80 (in order), and counts the others as filtered.
TEST(pcap_filter, reader_and_splits_select_what_the_decoder_keys) {
  for (const char* name : {"bro.org.pcap", "wikipedia.pcap", "alexa-app.pcapng"}) {
    SCOPED_TRACE(name);
    const auto path = (corpus / name).string();
    if (!fs::exists(path)) GTEST_SKIP() << "shared corpus not found at " << corpus;
    std::vector<rill::packet> want;
    std::uint64_t all = 0;
    {
      auto r = rill::pcap_reader::open(path);
      rill::packet p;
      while (r.next(p) == rill::read_status::ok) {
        ++all;
        if (port_80(p)) want.push_back(p);
      }
    }
    ASSERT_FALSE(want.empty());
    auto r = rill::pcap_reader::open(path);
    r.set_filter("tcp port 80");
    rill::packet p;
    std::size_t i = 0;
    while (r.next(p) == rill::read_status::ok) {
      ASSERT_LT(i, want.size());
      EXPECT_EQ(p.key, want[i].key);
      EXPECT_EQ(p.time, want[i].time);
      ++i;
    }
    EXPECT_EQ(i, want.size());
    EXPECT_EQ(r.counters().records, want.size());
    EXPECT_EQ(r.counters().filtered, all - want.size());
    if (!rill::pcap_split_reader::splittable(path)) continue;
    // Three splits of chunks of 7 records: the same packets, the same filtered count.
    std::uint64_t kept = 0, filtered = 0;
    for (std::size_t s = 0; s < 3; ++s) {
      auto sr = rill::pcap_split_reader::open(path, s, 3, 7);
      sr.set_filter("tcp port 80");
      while (sr.next(p) == rill::read_status::ok) {
        EXPECT_TRUE(port_80(p)) << p.key.to_string();
        ++kept;
      }
      filtered += sr.counters().filtered;
    }
    EXPECT_EQ(kept, want.size());
    EXPECT_EQ(filtered, all - want.size());
  }
}

}  // namespace

namespace {

// A live capture on the loopback interface hands the filter to the kernel: UDP datagrams
// to two ports, the filter keeps one port; every packet read is that port's, none of the
// other's, and nothing counts as filtered (the kernel's rejects are never seen).
// Skipped without the right to capture (CAP_NET_RAW).
TEST(pcap_filter_live, kernel_filter_on_loopback_keeps_one_port) {
  std::optional<rill::pcap_reader> r;
  try {
    r.emplace(rill::pcap_reader::open_live("lo"));
  } catch (const rill::pcap_error& e) {
    GTEST_SKIP() << "cannot capture on lo: " << e.what();
  }
  const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(s, 0);
  auto bound_port = [] {  // a port nothing listens on: the datagrams go out on lo anyway
    const int t = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(t, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    ::getsockname(t, reinterpret_cast<sockaddr*>(&a), &n);
    return std::pair{t, ntohs(a.sin_port)};
  };
  const auto [keep_fd, keep] = bound_port();
  const auto [drop_fd, drop] = bound_port();
  r->set_filter("udp dst port " + std::to_string(keep));
  // Empty the capture's ring of what lo carried before the filter (other tests' traffic,
  // which libpcap now rejects in user space): a ring that filled up then would drop the
  // datagrams below. Bounded: a ring holds far fewer frames.
  rill::packet p;
  for (int i = 0; i < 1'000'000; ++i) {
    const auto rs = r->next(p);
    if (rs == rill::read_status::again) break;
    ASSERT_NE(rs, rill::read_status::error);
  }
  auto send_to = [s](std::uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const char msg[] = "rill";
    ::sendto(s, msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
  };
  for (int i = 0; i < 5; ++i) {
    send_to(drop);
    send_to(keep);
  }
  int kept = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (kept < 5 && std::chrono::steady_clock::now() < deadline) {
    const auto rs = r->next(p);
    if (rs == rill::read_status::again) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    ASSERT_EQ(rs, rill::read_status::ok);
    ASSERT_EQ(p.key.proto, rill::ip_proto::udp);
    EXPECT_TRUE(p.key.a_port == keep || p.key.b_port == keep) << p.key.to_string();
    EXPECT_FALSE(p.key.a_port == drop || p.key.b_port == drop) << p.key.to_string();
    ++kept;
  }
  EXPECT_EQ(kept, 5);
  EXPECT_EQ(r->counters().filtered, 0u);
  EXPECT_THROW(r->set_filter("udp port eighty"), rill::pcap_error);
  ::close(s);
  ::close(keep_fd);
  ::close(drop_fd);
}

}  // namespace

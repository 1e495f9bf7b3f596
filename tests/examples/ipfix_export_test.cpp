// examples/netflow/ipfix_export.hpp on a local UDP socket: the IPFIX messages themselves
// (RFC 7011 3.1 message header, 3.3 set headers) — templates (Set ID 2) before the first
// data set and again once template_interval has passed, data sets under templates 256
// (IPv4) and 257 (IPv6), one record per direction with packets.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "ipfix_export.hpp"

namespace {

struct udp_listener {
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  std::uint16_t port = 0;
  udp_listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    port = ntohs(a.sin_port);
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~udp_listener() { ::close(fd); }
  /// The set IDs of the next message (empty on timeout); checks its header.
  std::vector<std::uint16_t> next_sets() {
    std::uint8_t buf[65536];
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return {};
    auto be16 = [&](std::size_t at) { return std::uint16_t(buf[at] << 8 | buf[at + 1]); };
    EXPECT_EQ(be16(0), 10);                  // IPFIX version
    EXPECT_EQ(be16(2), std::size_t(n));      // message length
    std::vector<std::uint16_t> sets;
    for (std::size_t at = 16; at + 4 <= std::size_t(n); at += be16(at + 2)) {
      sets.push_back(be16(at));
      if (be16(at + 2) < 4) break;
    }
    return sets;
  }
};

netflow::flow_row row(std::uint8_t version) {
  netflow::flow_row r;
  if (version == 4)
    r.key = rill::flow_key::make(rill::ip_proto::tcp, 4, {10, 0, 0, 1}, 443, {10, 0, 0, 2}, 5000);
  else
    r.key = rill::flow_key::make(rill::ip_proto::udp, 6, {0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
                                 53, {0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}, 4000);
  r.a_to_b = {3, 300, 0x1a};
  r.b_to_a = {version == 4 ? 2u : 0u, version == 4 ? 120u : 0u, 0};  // IPv6: one direction only
  r.packets = r.a_to_b.packets + r.b_to_a.packets;
  r.bytes = r.a_to_b.bytes + r.b_to_a.bytes;
  return r;
}

TEST(ipfix_exporter, templates_first_then_again_after_the_interval) {
  udp_listener l;
  netflow::ipfix_exporter x{"127.0.0.1", std::to_string(l.port), std::chrono::milliseconds{200}};
  x.add(row(4));
  x.add(row(6));
  x.flush();
  EXPECT_EQ(x.stats().records, 3u);  // 2 directions of the IPv4 row, 1 of the IPv6 row
  EXPECT_EQ(x.stats().errors, 0u);
  // First: the template set, then the data sets of both templates.
  std::vector<std::uint16_t> sets;
  for (auto s = l.next_sets(); !s.empty(); s = sets.size() >= 3 ? std::vector<std::uint16_t>{} : l.next_sets())
    sets.insert(sets.end(), s.begin(), s.end());
  ASSERT_GE(sets.size(), 3u);
  EXPECT_EQ(sets[0], 2);  // Template Set
  EXPECT_EQ(std::count(sets.begin(), sets.end(), 256), 1);
  EXPECT_EQ(std::count(sets.begin(), sets.end(), 257), 1);
  // Within the interval: data only.
  x.add(row(4));
  x.flush();
  EXPECT_EQ(l.next_sets(), std::vector<std::uint16_t>{256});
  // After it: the templates again, before the data.
  std::this_thread::sleep_for(std::chrono::milliseconds{250});
  x.add(row(4));
  x.flush();
  std::vector<std::uint16_t> again;
  for (int i = 0; i < 2 && std::count(again.begin(), again.end(), 256) == 0; ++i) {
    const auto s = l.next_sets();
    again.insert(again.end(), s.begin(), s.end());
  }
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again.front(), 2);
  EXPECT_EQ(again.back(), 256);
  EXPECT_EQ(x.stats().records, 7u);
}

TEST(ipfix_exporter, unresolvable_collector_is_refused_at_construction) {
  EXPECT_THROW((netflow::ipfix_exporter{"nosuchhost.invalid", "4739"}), std::runtime_error);
}

}  // namespace

// The banner examples of the keyed-window and join headers, <rill/rill.hpp> and <rill/pcap.hpp>,
// and the README's "Using rill in your project" example, run here with their results
// checked. Each function below is the banner's code; where a banner reads
// "capture.pcap", the test passes a Debian-shipped capture. tests/banner_examples.py compiles the banner example
// of every public header as written (this file checks what a few of them compute).
#include <rill/pcap.hpp>
#include <rill/rill.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace std::chrono_literals;

const std::string dns_icmp = "/usr/share/doc/python3-dpkt/examples/data/dns_icmp.pcap";

// <rill/rill.hpp>: bytes per user and 10 s tumbling window, no packet type in sight.
struct click {
  std::string user;
  std::uint64_t bytes;
};

TEST(banner_examples, rill_hpp_sums_bytes_per_user_and_window) {
  using result = std::tuple<std::string, rill::event_time, rill::event_time, std::uint64_t>;
  auto m = std::make_shared<std::mutex>();
  auto got = std::make_shared<std::vector<result>>();
  std::vector<rill::record<click>> in{{{"ann", 100}, rill::event_time{1s}},
                                      {{"bob", 20}, rill::event_time{3s}},
                                      {{"ann", 5}, rill::event_time{12s}}};
  rill::runtime rt{{.workers = 2}};
  rt.run(rill::from(rill::vector_source<click>{in})
             .key_by([](const click& c) { return c.user; })
             .window(rill::tumbling{10s}, {.max_delay = 2s})
             .sum([](const click& c) { return c.bytes; })
             .sink([m, got](rill::keyed_window_result<std::string, std::uint64_t>&& r) {
               std::lock_guard lk(*m);
               got->emplace_back(r.key, r.start, r.end, r.value);
             }));
  std::sort(got->begin(), got->end());
  // hand-worked: ann's 1 s and bob's 3 s fall in [0, 10 s), ann's 12 s in [10 s, 20 s)
  const std::vector<result> want{{"ann", rill::event_time{0s}, rill::event_time{10s}, 100},
                                 {"ann", rill::event_time{10s}, rill::event_time{20s}, 5},
                                 {"bob", rill::event_time{0s}, rill::event_time{10s}, 20}};
  EXPECT_EQ(*got, want);
}

// <rill/pcap.hpp>
struct bytes_and_packets {
  struct accumulator {
    std::uint64_t packets = 0, bytes = 0;
  };
  accumulator init() const { return {}; }
  void add(accumulator& a, const rill::packet& p) const {
    ++a.packets;
    a.bytes += p.wire_len;
  }
  accumulator result(const accumulator& a) const { return a; }
};

TEST(banner_examples, pcap_hpp_counts_every_packet_once) {
  if (!std::filesystem::exists(dns_icmp)) GTEST_SKIP() << "python3-dpkt not installed";
  auto m = std::make_shared<std::mutex>();
  auto totals = std::make_shared<bytes_and_packets::accumulator>();
  rill::pcap_source src{{dns_icmp}};
  auto stats = src.stats();
  rill::runtime rt{{.workers = 2}};
  auto j = rill::from(std::move(src))
               .key_by([](const rill::packet& p) { return p.key; })
               .window(rill::tumbling{10s}, {.max_delay = 2s})
               .aggregate(bytes_and_packets{})
               .sink([m, totals](rill::keyed_window_result<rill::flow_key, bytes_and_packets::accumulator>&& r) {
                 std::lock_guard lk(*m);
                 totals->packets += r.value.packets;
                 totals->bytes += r.value.bytes;
               });
  rt.run(j);
  // every packet (dns_icmp.pcap is all IP) in exactly one (window, conversation)
  EXPECT_EQ(totals->packets, stats->packets.load());
  EXPECT_EQ(totals->bytes, stats->bytes.load());
  EXPECT_GT(totals->packets, 0u);
}

// <rill/operators/keyed_window.hpp>: the design example, tumbling 10 s, delay 2 s.
TEST(banner_examples, keyed_window_hpp_design_example) {
  rill::keyed_window_aggregator<std::string, int, rill::tumbling, rill::agg::count> a{
      rill::tumbling{10s}, {.max_delay = 2s}, rill::agg::count{}, /*inputs=*/1, {}};
  std::vector<rill::keyed_window_result<std::string, std::uint64_t>> out;
  auto on_result = [&](auto&& r) { out.push_back(std::move(r.value)); };
  auto on_late = [](rill::record<int>&&, const std::string&, rill::event_time, rill::event_time) {};
  for (int s : {1, 5, 11, 9, 15})
    a.push(0, "k", {s, rill::event_time{std::chrono::seconds{s}}}, {}, on_result, on_late);
  // at 15 s W = 13 s: ("k", [0 s, 10 s), 3) was emitted
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (rill::keyed_window_result<std::string, std::uint64_t>{
                        "k", rill::event_time{0s}, rill::event_time{10s}, 3, false}));
  a.end(0, on_result);  // end of stream: ("k", [10 s, 20 s), 2)
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1], (rill::keyed_window_result<std::string, std::uint64_t>{
                        "k", rill::event_time{10s}, rill::event_time{20s}, 2, false}));
}

// <rill/operators/keyed_stream.hpp> and <rill/operators/window.hpp>: keys x % 10 of 0..99
// at t = x seconds; tumbling 10 s counts: each of the 10 windows holds one x per key, so
// every (key, window) counts 1 (hand-worked: x = 10w + k). Sliding 10 s / 2 s: each x is
// in 5 windows, so the counts per key add up to 5 x 10 = 50.
std::vector<rill::record<int>> zero_to_99() {
  std::vector<rill::record<int>> recs;
  for (int x = 0; x < 100; ++x) recs.push_back({x, rill::event_time{std::chrono::seconds{x}}});
  return recs;
}

TEST(banner_examples, keyed_stream_hpp_tumbling_count) {
  auto m = std::make_shared<std::mutex>();
  auto got = std::make_shared<std::map<std::pair<int, std::int64_t>, std::uint64_t>>();
  rill::job j = rill::from(rill::vector_source<int>{zero_to_99()})
                    .key_by([](const int& x) { return x % 10; })
                    .window(rill::tumbling{10s}, {.max_delay = 2s})
                    .name("counts")
                    .count()
                    .sink([m, got](rill::keyed_window_result<int, std::uint64_t>&& r) {
                      std::lock_guard lk(*m);
                      (*got)[{r.key, r.start.time_since_epoch().count()}] += r.value;
                    });
  const auto rep = rill::runtime{}.run(j);
  ASSERT_EQ(got->size(), 100u);
  for (const auto& [kw, c] : *got) EXPECT_EQ(c, 1u);
  EXPECT_EQ(rep.stage("counts").in, 100u);
  EXPECT_EQ(rep.stage("counts").out, 100u);
}

TEST(banner_examples, window_hpp_sliding_count) {
  auto m = std::make_shared<std::mutex>();
  auto per_key = std::make_shared<std::map<int, std::uint64_t>>();
  auto j = rill::from(rill::vector_source<int>{zero_to_99()})
               .key_by([](const int& x) { return x % 10; })
               .window(rill::sliding{.size = 10s, .slide = 2s}, {.max_delay = 1s})
               .count()
               .sink([m, per_key](rill::keyed_window_result<int, std::uint64_t>&& r) {
                 std::lock_guard lk(*m);
                 (*per_key)[r.key] += r.value;
               });
  rill::runtime{{.workers = 2}}.run(j);
  ASSERT_EQ(per_key->size(), 10u);
  for (const auto& [k, c] : *per_key) EXPECT_EQ(c, 50u) << "key " << k;
}

// README "Using rill in your project": bytes per conversation in sliding 10 s / 2 s
// windows; each packet is in 5 windows, so the sums add up to 5 x the capture's bytes.
TEST(banner_examples, readme_sliding_bytes_per_conversation) {
  if (!std::filesystem::exists(dns_icmp)) GTEST_SKIP() << "python3-dpkt not installed";
  auto m = std::make_shared<std::mutex>();
  auto sum = std::make_shared<std::uint64_t>(0);
  rill::pcap_source src{{dns_icmp}};
  auto stats = src.stats();
  rill::runtime rt{{.workers = 2}};
  const auto rep =
      rt.run(rill::from(std::move(src))
                 .key_by([](const rill::packet& p) { return p.key; })
                 .window(rill::sliding{.size = 10s, .slide = 2s}, {.max_delay = 2s})
                 .name("bytes")
                 .sum([](const rill::packet& p) { return std::uint64_t(p.wire_len); })
                 .sink([m, sum](rill::keyed_window_result<rill::flow_key, std::uint64_t>&& r) {
                   std::lock_guard lk(*m);
                   *sum += r.value;
                 }));
  EXPECT_EQ(*sum, 5 * stats->bytes.load());
  EXPECT_EQ(rep.stage("bytes").late, 0u);
}

// <rill/operators/join.hpp>: bid 1 at 2 s and auction 1 at 1 s: 1 s is in [2 - 5, 2 + 0] s,
// one pair "lamp:10"; bid 2 has no auction.
struct bid {
  int auction;
  int price;
};
struct auction {
  int id;
  std::string item;
};

TEST(banner_examples, join_hpp_bids_with_their_auction) {
  auto m = std::make_shared<std::mutex>();
  auto got = std::make_shared<std::vector<std::string>>();
  std::vector<rill::record<bid>> bids{{{1, 10}, rill::event_time{2s}}, {{2, 7}, rill::event_time{9s}}};
  std::vector<rill::record<auction>> auctions{{{1, "lamp"}, rill::event_time{1s}}};
  rill::job j = rill::from(rill::vector_source<bid>{bids}, "bids")
                    .key_by([](const bid& b) { return b.auction; })
                    .interval_join(rill::from(rill::vector_source<auction>{auctions}, "auctions")
                                       .key_by([](const auction& a) { return a.id; }),
                                   -5s, 0s, {.max_delay = 1s})
                    .name("bids_x_auctions")
                    .inner([](const bid& b, const auction& a) { return a.item + ":" + std::to_string(b.price); })
                    .sink([m, got](std::string&& s) {
                      std::lock_guard lk(*m);
                      got->push_back(std::move(s));
                    });
  const auto rep = rill::runtime{{.workers = 2}}.run(j);
  EXPECT_EQ(*got, std::vector<std::string>{"lamp:10"});
  EXPECT_EQ(rep.stage("bids_x_auctions").in, 3u);
  EXPECT_EQ(rep.stage("bids_x_auctions").out, 1u);
}

// <rill/operators/join_state.hpp>: "a" at 10 s and "b" at 11 s, bounds [-1 s, +1 s]:
// 11 is in [9, 11], one pair "ab".
struct pairs_out {
  std::vector<std::string> got;
  void pair(const int&, const std::string& a, const std::string& b, rill::event_time,
            std::shared_ptr<rill::ack_token>&&) {
    got.push_back(a + b);
  }
};
TEST(banner_examples, join_state_hpp_one_pair) {
  rill::interval_join_state<int, std::string, std::string> j{-1s, 1s, 0s, 0s, 1, 1, {}};
  pairs_out out;
  auto late = [](auto&&) {};
  j.push_left(0, 7, 7, {"a", rill::event_time{10s}}, {}, out, late);
  j.push_right(0, 7, 7, {"b", rill::event_time{11s}}, {}, out, late);
  EXPECT_EQ(out.got, std::vector<std::string>{"ab"});
}

// README "Using rill in your project", the join: the click at 12 s and the "shoes" view at
// 5 s (12 - 10 <= 5 <= 12): (user 7, slot 3); the "hats" view has no click.
struct click_r {
  std::string ad;
  int user;
};
struct view_r {
  std::string ad;
  int slot;
};
TEST(banner_examples, readme_interval_join_clicks_with_views) {
  auto m = std::make_shared<std::mutex>();
  auto got = std::make_shared<std::vector<std::pair<int, int>>>();
  std::vector<rill::record<click_r>> clicks{{{"shoes", 7}, rill::event_time{12s}}};
  std::vector<rill::record<view_r>> views{{{"shoes", 3}, rill::event_time{5s}}, {{"hats", 1}, rill::event_time{6s}}};
  rill::runtime rt{{.workers = 2}};
  const auto rep =
      rt.run(rill::from(rill::vector_source<click_r>{clicks})
                 .key_by([](const click_r& c) { return c.ad; })
                 .interval_join(rill::from(rill::vector_source<view_r>{views}).key_by([](const view_r& v) { return v.ad; }),
                                -10s, 0s, {.max_delay = 1s})
                 .name("clicks_x_views")
                 .inner([](const click_r& c, const view_r& v) { return std::pair{c.user, v.slot}; })
                 .sink([m, got](std::pair<int, int>&& p) {
                   std::lock_guard lk(*m);
                   got->push_back(p);
                 }));
  EXPECT_EQ(*got, (std::vector<std::pair<int, int>>{{7, 3}}));
  EXPECT_EQ(rep.stage("clicks_x_views").out, 1u);
}

}  // namespace

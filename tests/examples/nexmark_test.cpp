// examples/nexmark: the generator's random source against rand's published reference
// values, event 0 against the crate's own unit test, the model's proportions and ordering,
// the binary event file round trip, the reader's errors on bad files, and the window
// edges of the windowed queries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nexmark/detail/rand08.hpp>
#include <nexmark/event_file.hpp>
#include <nexmark/generator.hpp>
#include <nexmark/queries.hpp>
#include <nexmark/window_queries.hpp>
#include <rill/rill.hpp>
#include <string>
#include <vector>

namespace {

using namespace nexmark;
using std::chrono::milliseconds;

std::filesystem::path scratch(const std::string& name) {
  return std::filesystem::path(RILL_TEST_BINARY_DIR) / ("nexmark_test_" + name);
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string error_of(const std::filesystem::path& p) {
  try {
    event_file_reader r{p};
    event e;
    while (r.next(e)) {
    }
  } catch (const event_file_error& e) {
    return e.what();
  }
  return "(no error)";
}

// rand 0.8 src/rngs/xoshiro256plusplus.rs `reference`: values of the reference C
// implementation (xoshiro.di.unimi.it/xoshiro256plusplus.c) for the state 1, 2, 3, 4.
TEST(NexmarkRng, Xoshiro256PlusPlusReferenceValues) {
  auto rng = detail::small_rng::from_state(1, 2, 3, 4);
  const std::uint64_t expected[] = {41943041,
                                    58720359,
                                    3588806011781223,
                                    3591011842654386,
                                    9228616714210784205ULL,
                                    9973669472204895162ULL,
                                    14011001112246962877ULL,
                                    12406186145184390807ULL,
                                    15849039046786891736ULL,
                                    10450023813501588000ULL};
  for (const std::uint64_t e : expected) EXPECT_EQ(rng.next_u64(), e);
}

// The crate's src/event.rs `test_event`: event 0 of the default configuration.
TEST(NexmarkGenerator, EventZeroIsTheCratesTestPerson) {
  config cfg;
  cfg.base_time = timestamp{milliseconds{1'234'567}};
  generator gen{cfg};
  const event e = gen.next();
  ASSERT_EQ(kind_of(e), event_kind::person);
  const auto& p = std::get<person>(e);
  EXPECT_EQ(p.id, 1000u);
  EXPECT_EQ(p.name, "vicky noris");
  EXPECT_EQ(p.email_address, "yplkvgz@qbxfg.com");
  EXPECT_EQ(p.credit_card, "7878 5821 1864 2539");
  EXPECT_EQ(p.city, "cheyenne");
  EXPECT_EQ(p.state, "az");
  EXPECT_EQ(p.date_time, cfg.base_time);
  EXPECT_EQ(p.extra,
            "lwaiyhjhrkaruidlsjilvqccyedttedeynpqmackqbwvklwuyypztnkengzgtwtjivjgrxurskpcldfohdzuwn"
            "efqymyncrksxyfaecwsbswjumzxudgoznyhakxrudomnxtmqtgshecfjgspxzpludz");
}

// 1 : 3 : 46 per 50 events; person and auction ids are consecutive from 1000; at the
// default 10,000 events/s event i is at base + round(i / 10) ms (halves away from zero); bids name
// existing or soon-to-exist items only.
TEST(NexmarkGenerator, ProportionsIdsAndTimes) {
  generator gen;
  const auto base = gen.configuration().base_time;
  std::uint64_t persons = 0, auctions = 0, bids = 0;
  event e;
  for (std::uint64_t i = 0; i < 50'000; ++i) {
    gen.next(e);
    ASSERT_EQ(date_time_of(e), base + milliseconds{(i + 5) / 10}) << "event " << i;
    const std::uint64_t slot = i % 50;
    if (slot == 0) {
      ASSERT_EQ(kind_of(e), event_kind::person) << i;
      EXPECT_EQ(std::get<person>(e).id, 1000 + persons++);
    } else if (slot < 4) {
      ASSERT_EQ(kind_of(e), event_kind::auction) << i;
      const auto& a = std::get<auction>(e);
      EXPECT_EQ(a.id, 1000 + auctions++);
      EXPECT_GE(a.reserve, a.initial_bid);
      EXPECT_GT(a.expires, a.date_time);
      EXPECT_GE(a.category, 10u);
      EXPECT_LT(a.category, 15u);
    } else {
      ASSERT_EQ(kind_of(e), event_kind::bid) << i;
      const auto& b = std::get<bid>(e);
      ++bids;
      EXPECT_LT(b.auction, 1000 + auctions + 10);  // auction_id_lead
      EXPECT_LT(b.bidder, 1000 + persons + 10);    // person_id_lead
    }
  }
  EXPECT_EQ(persons, 1000u);
  EXPECT_EQ(auctions, 3000u);
  EXPECT_EQ(bids, 46000u);
}

// With out_of_order_group_size g, each group of g consecutive events is a permutation of
// event numbers [k g, (k+1) g): times step back by less than g events' delay.
TEST(NexmarkGenerator, OutOfOrderGroupsArePermutations) {
  config cfg;
  cfg.out_of_order_group_size = 100;
  generator shuffled{cfg};
  generator ordered{};
  std::vector<event> in_order(1000);
  for (auto& e : in_order) ordered.next(e);
  std::vector<bool> seen(1000);
  bool any_back_step = false;
  timestamp prev{};
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const event e = shuffled.next();
    const std::uint64_t n = (i / 100) * 100 + (i * 953) % 100;  // the crate's rule
    ASSERT_LT(n, 1000u);
    EXPECT_FALSE(seen[n]);
    seen[n] = true;
    EXPECT_EQ(e, in_order[n]) << "event " << i << " should be event number " << n;
    if (i > 0 && date_time_of(e) < prev) any_back_step = true;
    EXPECT_LT(prev - date_time_of(e), milliseconds{10}) << i;  // 100 events x 0.1 ms
    prev = date_time_of(e);
  }
  EXPECT_TRUE(any_back_step);
}

TEST(NexmarkGenerator, BadConfigurationNamesTheKey) {
  config cfg;
  cfg.bid_proportion = 0;
  try {
    generator gen{cfg};
    FAIL() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("bid_proportion = 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(generator{}.with_step(0), config_error);
}

TEST(NexmarkEventFile, BinaryRoundTripAndJsonLine) {
  generator gen;
  std::string bin{binary_magic};
  std::vector<event> events(5000);
  for (auto& e : events) {
    gen.next(e);
    append_binary(e, bin);
  }
  const auto path = scratch("round_trip.bin");
  write_file(path, bin);
  event_file_reader r{path};
  event e;
  for (std::size_t i = 0; i < events.size(); ++i) {
    ASSERT_TRUE(r.next(e)) << i;
    ASSERT_EQ(e, events[i]) << i;
  }
  EXPECT_FALSE(r.next(e));
  EXPECT_EQ(r.events_read(), events.size());
  EXPECT_EQ(r.offset(), bin.size());

  bid b;
  b.auction = 1, b.bidder = 2, b.price = 3, b.channel = "a\"b\\c\n\x01", b.url = "u/v";
  b.date_time = timestamp{milliseconds{7}};
  std::string line;
  append_json_line(b, line);
  EXPECT_EQ(
      line,
      "{\"Bid\":{\"auction\":1,\"bidder\":2,\"price\":3,\"channel\":\"a\\\"b\\\\c\\n\\u0001\","
      "\"url\":\"u/v\",\"date_time\":7,\"extra\":\"\"}}\n");
}

TEST(NexmarkEventFile, BadFilesNameFileAndPosition) {
  const auto missing = scratch("does_not_exist.bin");
  std::filesystem::remove(missing);
  EXPECT_EQ(error_of(missing), missing.string() + ": cannot open: No such file or directory");

  const auto empty = scratch("empty.bin");
  write_file(empty, "");
  EXPECT_NE(error_of(empty).find(empty.string() + ": not a NEXMark event file: shorter than"),
            std::string::npos);

  const auto json = scratch("json.bin");
  write_file(json, "{\"Person\":{\"id\":1000}}\n");
  EXPECT_NE(error_of(json).find("the first 8 bytes are not"), std::string::npos) << error_of(json);

  // Two events, the second cut off after 10 of its bytes.
  generator gen;
  std::string bin{binary_magic};
  append_binary(gen.next(), bin);
  const std::size_t second = bin.size();
  append_binary(gen.next(), bin);
  const auto cut = scratch("cut.bin");
  write_file(cut, bin.substr(0, second + 10));
  EXPECT_EQ(error_of(cut), cut.string() + ": truncated record (file ends inside it) at byte " +
                               std::to_string(second) + " (event 1)");

  const auto kind = scratch("kind.bin");
  write_file(kind, bin.substr(0, second) + "\x07");
  EXPECT_EQ(error_of(kind), kind.string() +
                                ": malformed record: kind byte 7 (expected 0 person, 1 auction or "
                                "2 bid) at byte " +
                                std::to_string(second) + " (event 1)");

  // A bid whose channel length is 0xffffffff.
  std::string huge{binary_magic};
  huge.push_back('\x02');
  huge.append(24, '\0');
  huge.append("\xff\xff\xff\xff");
  const auto big = scratch("huge.bin");
  write_file(big, huge);
  EXPECT_EQ(error_of(big), big.string() +
                               ": malformed record: string of 4294967295 bytes (more "
                               "than 1048576) at byte 8 (event 0)");
}

// q1's price: 0.908 x cents, exact, three decimals (queries.hpp).
TEST(NexmarkQueries, RowJsonLines) {
  std::string out;
  append_json_line(q1_row{1, 2, 1 * 908, timestamp{milliseconds{5}}, "x"}, out);
  append_json_line(q1_row{1, 2, 1000 * 908, timestamp{milliseconds{5}}, ""}, out);
  append_json_line(q1_row{1, 2, 73134520ULL * 908, timestamp{milliseconds{5}}, ""}, out);
  append_json_line(q2_row{1107, 4783}, out);
  append_json_line(q0_row{1, 2, 3, timestamp{milliseconds{4}}, "a\"b"}, out);
  EXPECT_EQ(out,
            "{\"auction\":1,\"bidder\":2,\"price\":0.908,\"date_time\":5,\"extra\":\"x\"}\n"
            "{\"auction\":1,\"bidder\":2,\"price\":908.000,\"date_time\":5,\"extra\":\"\"}\n"
            "{\"auction\":1,\"bidder\":2,\"price\":66406144.160,\"date_time\":5,\"extra\":\"\"}\n"
            "{\"auction\":1107,\"price\":4783}\n"
            "{\"auction\":1,\"bidder\":2,\"price\":3,\"date_time\":4,\"extra\":\"a\\\"b\"}\n");
}

// The window edges of q7, q11 and q5 (window_queries.hpp) on hand-made bids in time
// order, one worker:
// ties keep every top bid, a bid at a window's end opens the next window, bids exactly
// one gap apart are one session, a bid more than a gap later opens another.
rill::record<event> bid_at(std::uint64_t auction, std::uint64_t bidder, std::uint64_t price,
                           std::int64_t ms) {
  bid b;
  b.auction = auction;
  b.bidder = bidder;
  b.price = price;
  b.date_time = timestamp{milliseconds{1'700'000'000'000 + ms}};
  return {event{b}, rill::event_time{b.date_time.time_since_epoch()}};
}

template <class Row, class Query>
std::vector<Row> run_on(std::vector<rill::record<event>> events, Query q) {
  std::vector<Row> rows;
  rill::runtime rt{{.workers = 1}};
  rt.run(q(rill::from(rill::vector_source<event>{std::move(events)})).sink([&rows](Row&& r) {
    rows.push_back(std::move(r));
  }));
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    std::string x, y;
    append_json_line(a, x);
    append_json_line(b, y);
    return x < y;
  });
  return rows;
}

TEST(NexmarkWindowQueries, WindowEdges) {
  const auto t0 = timestamp{milliseconds{1'700'000'000'000}};
  const std::vector<rill::record<event>> bids{bid_at(1, 7, 50, 0),      bid_at(2, 8, 90, 3000),
                                              bid_at(3, 7, 90, 9999),   bid_at(4, 8, 10, 10'000),
                                              bid_at(1, 7, 20, 20'000), bid_at(1, 7, 30, 30'001)};
  const auto q7 = run_on<q7_row>(bids, [](auto&& s) { return nexmark::q7(std::move(s)); });
  ASSERT_EQ(q7.size(), 5u);  // 90 twice in [0, 10 s); 10 in [10, 20 s); 20; 30
  EXPECT_EQ(q7[0].price, 20u);
  EXPECT_EQ(q7[1].price, 30u);
  EXPECT_EQ(q7[2].auction, 2u);
  EXPECT_EQ(q7[3].auction, 3u);
  EXPECT_EQ(q7[3].price, 90u);
  EXPECT_EQ(q7[4].auction, 4u);  // at exactly 10 s: the next window

  // Bidder 7: 0, 9.999, 20 s (10.001 s later: new session), 30.001 s (10.001 s later: new).
  // Bidder 8: 3 s and 10 s (7 s apart: one session).
  auto bids11 = bids;
  bids11.push_back(bid_at(5, 9, 1, 5000));
  bids11.push_back(bid_at(5, 9, 1, 15'000));  // exactly the gap: one session [5, 25 s)
  std::stable_sort(bids11.begin(), bids11.end(),
                   [](const auto& a, const auto& b) { return a.time < b.time; });
  const auto q11 = run_on<q11_row>(bids11, [](auto&& s) { return nexmark::q11(std::move(s)); });
  const auto s = [&](std::int64_t ms) { return t0 + milliseconds{ms}; };
  const std::vector<q11_row> want11{{7, 1, s(20'000), s(30'000)},
                                    {7, 1, s(30'001), s(40'001)},
                                    {7, 2, s(0), s(19'999)},
                                    {8, 2, s(3000), s(20'000)},
                                    {9, 2, s(5000), s(25'000)}};
  EXPECT_EQ(q11, want11);

  // q5: auction 1 and 2 both have the top count of 2 in the windows holding 0 and 3 s.
  const auto q5 = run_on<q5_row>({bid_at(1, 7, 1, 0), bid_at(1, 7, 1, 1000), bid_at(2, 7, 1, 3000),
                                  bid_at(2, 7, 1, 3500), bid_at(3, 7, 1, 4000)},
                                 [](auto&& s) { return nexmark::q5(std::move(s)); });
  // Windows [-8, 2), [-6, 4), [-4, 6), [-2, 8), [0, 10) s hold 0 and 1 s; [2, 12) ... hold
  // 3, 3.5, 4 s. [-8, 2): auction 1 (2); [-6, 4) and later up to [0, 10): 1 and 2 tie at 2;
  // [2, 12), [4, 14): auction 2 has 2 in [2, 12), auction 3 alone in [4, 14).
  std::size_t ties = 0;
  for (const auto& r : q5)
    ties += r.num == 2 && r.window_start <= s(0) && r.window_start > s(-8000);
  EXPECT_EQ(ties, 8u);  // auctions 1 and 2 in each of [-6, 4) .. [0, 10)
  EXPECT_EQ(q5.size(), 11u);
}

}  // namespace

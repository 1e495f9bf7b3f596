// record_test — ack tokens (record.hpp): join_acks, ack_group, and that every operator of
// the DSL carries a record's token so it dies exactly when the last derived output does.
//
//   token_source (2 splits) -> map -> filter (drops x % 10 == 0) -> flat_map (x twice)
//     -> key_by (x % 7) -> window_sort (10 ms) -> sink that keeps the window records
//
// Expected values are counted from the inputs (which pass the filter), not from rill.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <mutex>
#include <set>
#include <vector>

#include "rill/core/record.hpp"
#include "rill/operators/stream.hpp"

using namespace std::chrono_literals;

namespace {

/// Which input ids' tokens died, and whether failed.
struct tally {
  std::mutex mu;
  std::vector<int> done, failed;
  std::atomic<int> live{0};
};

struct counting_token final : rill::ack_token {
  tally* t;
  int id;
  std::atomic<bool> bad{false};
  counting_token(tally* ta, int i) : t(ta), id(i) { t->live.fetch_add(1); }
  ~counting_token() override {
    std::lock_guard g(t->mu);
    (bad ? t->failed : t->done).push_back(id);
    t->live.fetch_sub(1);
  }
  void fail() noexcept override { bad = true; }
};

/// Split s emits ids s*n .. s*n+n-1, value = id, event time = id ms, each with a token.
struct token_source {
  using value_type = int;
  tally* t;
  int n;
  std::size_t split_count() const { return 2; }
  struct reader {
    tally* t;
    int next, end;
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t max) {
      for (std::size_t k = 0; k < max && next < end; ++k, ++next)
        emit(rill::record<int>{next, rill::event_time{std::chrono::milliseconds{next}}, std::nullopt,
                               std::make_shared<counting_token>(t, next)});
      return next < end ? rill::poll_status::more : rill::poll_status::end;
    }
    std::string error() const { return {}; }
  };
  reader open(std::size_t i) const { return reader{t, int(i) * n, int(i) * n + n}; }
};

}  // namespace

TEST(RecordAck, JoinAcksNullSingleAndGroup) {
  tally t;
  std::vector<rill::record<int>> none{{1}, {2}};
  EXPECT_EQ(rill::join_acks(none), nullptr);
  auto a = std::make_shared<counting_token>(&t, 1);
  std::vector<rill::record<int>> same{{1, {}, {}, a}, {2, {}, {}, a}, {3}};
  EXPECT_EQ(rill::join_acks(same), a);  // one shared token: no group
  auto b = std::make_shared<counting_token>(&t, 2);
  std::vector<rill::record<int>> two{{1, {}, {}, a}, {2, {}, {}, b}};
  auto g = rill::join_acks(two);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(static_cast<rill::ack_group&>(*g).size(), 2u);
  a.reset();
  b.reset();
  same.clear();
  two.clear();
  EXPECT_EQ(t.live.load(), 2);  // the group holds both
  g->fail();
  g.reset();
  EXPECT_EQ(t.live.load(), 0);
  EXPECT_EQ(std::set<int>(t.failed.begin(), t.failed.end()), (std::set<int>{1, 2}));
  EXPECT_TRUE(t.done.empty());
}

TEST(RecordAck, TokensSurviveExchangeAndWindowsUntilTheSinkReleasesThem) {
  constexpr int n = 1000;
  tally t;
  std::mutex mu;
  std::vector<rill::record<rill::window<int>>> held;
  auto job = rill::from(token_source{&t, n})
                 .map([](int x) { return x; })
                 .filter([](const int& x) { return x % 10 != 0; })
                 .flat_map<int>([](int&& x, auto& emit) { emit(x); emit(x); })
                 .key_by([](const int& x) { return x % 7; })
                 .window_sort({.length = 10ms, .max_delay = 0ms})
                 .sink([&](rill::record<rill::window<int>>&& w) {
                   std::lock_guard g(mu);
                   held.push_back(std::move(w));
                 });
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  rt.run(job);
  // Inputs dropped by the filter are done; every other input is held by a window.
  const int kept = 2 * n - 2 * n / 10;
  EXPECT_EQ(t.live.load(), kept);
  {
    std::lock_guard g(t.mu);
    ASSERT_EQ(t.done.size(), std::size_t(2 * n / 10));
    for (int id : t.done) EXPECT_EQ(id % 10, 0) << id;
  }
  // Failing one window fails exactly its inputs; releasing the rest makes them done.
  ASSERT_FALSE(held.empty());
  std::set<int> in_first;
  for (const auto& r : held.front().value.records) in_first.insert(r.value);
  for (auto& r : held.front().value.records) r.ack.reset();  // only the window's group remains
  ASSERT_NE(held.front().ack, nullptr);
  held.front().ack->fail();
  held.clear();
  EXPECT_EQ(t.live.load(), 0);
  std::lock_guard g(t.mu);
  EXPECT_EQ(std::set<int>(t.failed.begin(), t.failed.end()), in_first);
  EXPECT_EQ(t.failed.size(), in_first.size());
  EXPECT_EQ(t.done.size() + t.failed.size(), std::size_t(2 * n));
}

// A keyed window's late side output gets the late record with its token: the input is
// done when the late output is, not when the window stage drops it.
//   vector_source (1 split, acked: ids 0 at 5 s, 1 at 20 s, 2 at 1 s) -> key_by(0)
//     -> tumbling 10 s, delay 0 -> count -> sink; late -> keep the record
// At 20 s W = 20 s: [0, 10 s) fired, so id 2 (1 s) is late. Ids 0 and 1 are folded in
// and done once their windows' results are dropped by the sink; id 2 stays live while the
// late output holds it, and is done after.
TEST(RecordAck, KeyedWindowLateOutputHoldsTheLateRecordsToken) {
  tally t;
  std::vector<rill::record<int>> recs;
  for (auto [id, sec] : {std::pair{0, 5}, std::pair{1, 20}, std::pair{2, 1}})
    recs.push_back({id, rill::event_time{std::chrono::seconds{sec}}, std::nullopt,
                    std::make_shared<counting_token>(&t, id)});
  std::vector<rill::record<int>> late;
  std::uint64_t results = 0;
  {  // the job's source keeps a copy of its records until the job is gone
    auto job = rill::from(rill::vector_source<int>{std::move(recs)})
                   .key_by([](const int&) { return 0; })
                   .window(rill::tumbling{10s}, {})
                   .late([&](rill::record<int>&& r, const int&, rill::event_time, rill::event_time) {
                     late.push_back(std::move(r));
                   })
                   .count()
                   .sink([&](rill::keyed_window_result<int, std::uint64_t>&&) { ++results; });
    rill::runtime rt{{.workers = 1}};
    rt.run(job);
  }
  EXPECT_EQ(results, 2u);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].value, 2);
  ASSERT_NE(late[0].ack, nullptr);
  EXPECT_EQ(t.live.load(), 1);
  late.clear();
  EXPECT_EQ(t.live.load(), 0);
  std::lock_guard g(t.mu);
  EXPECT_EQ(std::set<int>(t.done.begin(), t.done.end()), (std::set<int>{0, 1, 2}));
}

// Record policies (record.hpp "Record policy"): sizes, the policy each source and operator
// gives, and that code written for record<T> keeps working on an unacked stream.

static_assert(sizeof(rill::record<int, rill::unacked>) == 16, "value (padded to 8) and event time");
static_assert(sizeof(rill::record<std::uint64_t, rill::unacked>) == 16, "value and event time");
static_assert(sizeof(rill::record<int>) == 56, "value, time, optional<source_position> (24), shared_ptr (16)");
static_assert(sizeof(rill::record<int>) - sizeof(rill::record<int, rill::unacked>) == 40,
              "the acked envelope beyond value and time");
static_assert(std::is_aggregate_v<rill::record<int, rill::unacked>> && std::is_aggregate_v<rill::record<int>>);
static_assert(std::is_same_v<rill::join_policy_t<rill::acked, rill::unacked>, rill::acked>);
static_assert(std::is_same_v<rill::join_policy_t<rill::unacked, rill::acked>, rill::acked>);
static_assert(std::is_same_v<rill::join_policy_t<rill::unacked, rill::unacked>, rill::unacked>);
static_assert(std::is_same_v<rill::record_policy_of_t<token_source>, rill::acked>, "no record_policy: acked");
static_assert(std::is_same_v<rill::record_policy_of_t<rill::vector_source<int, rill::unacked>>, rill::unacked>);

namespace {

/// n records in 2 splits, value = i, time = i ms, unacked.
rill::vector_source<int, rill::unacked> unacked_ints(int n) {
  std::vector<std::vector<rill::record<int, rill::unacked>>> splits(2);
  for (int i = 0; i < n; ++i) splits[std::size_t(i % 2)].push_back({i, rill::event_time{std::chrono::milliseconds{i}}});
  return {splits};
}

}  // namespace

TEST(RecordPolicy, RebindAndToAckedKeepTimeAndProvenance) {
  tally t;
  rill::record<int> a{1, rill::event_time{5s}, rill::source_position{.partition = 3, .offset = 9},
                      std::make_shared<counting_token>(&t, 1)};
  auto b = rill::rebind(std::move(a), std::string("x"));
  static_assert(std::is_same_v<decltype(b), rill::record<std::string>>);
  EXPECT_EQ(b.time, rill::event_time{5s});
  ASSERT_TRUE(b.position.has_value());
  EXPECT_EQ(b.position->offset, 9);
  EXPECT_NE(b.ack, nullptr);
  EXPECT_FALSE(rill::advances_progress(b));

  rill::record<int, rill::unacked> u{2, rill::event_time{7s}};
  auto v = rill::rebind(std::move(u), 2.5);
  static_assert(std::is_same_v<decltype(v), rill::record<double, rill::unacked>>);
  static_assert(rill::advances_progress(rill::record<int, rill::unacked>{}));
  rill::record<double> w = rill::to_acked(std::move(v));
  EXPECT_EQ(w.value, 2.5);
  EXPECT_EQ(w.time, rill::event_time{7s});
  EXPECT_FALSE(w.position.has_value());
  EXPECT_EQ(w.ack, nullptr);
  std::vector<rill::record<int, rill::unacked>> none{{1, {}}, {2, {}}};
  EXPECT_EQ(rill::join_acks(none), nullptr);
}

// vector_source<unacked> (2 splits) -> map -> filter -> flat_map (x twice) -> key_by (x % 7)
//   -> window_sort (10 ms) -> sink: every record on the way is the 16-byte kind.
TEST(RecordPolicy, UnackedPipelineCarriesSmallRecordsEndToEnd) {
  constexpr int n = 10'000;
  auto count = std::make_shared<std::atomic<std::uint64_t>>(0);
  auto sum = std::make_shared<std::atomic<std::uint64_t>>(0);
  auto s = rill::from(unacked_ints(n))
               .map([](int x) { return std::uint64_t(x); })
               .filter([](const std::uint64_t& x) { return x % 10 != 0; })
               .flat_map<std::uint64_t>([](std::uint64_t&& x, auto& emit) { emit(x); emit(x); })
               .key_by([](const std::uint64_t& x) { return x % 7; })
               .window_sort({.length = 10ms, .max_delay = 0ms});
  static_assert(std::is_same_v<decltype(s)::record_policy, rill::unacked>);
  static_assert(std::is_same_v<decltype(s)::value_type, rill::window<std::uint64_t, rill::unacked>>);
  auto job = std::move(s).sink([count, sum](rill::record<rill::window<std::uint64_t, rill::unacked>, rill::unacked>&& r) {
    for (const auto& x : r.value.records) {
      static_assert(sizeof(x) == 16);
      sum->fetch_add(x.value);
    }
    count->fetch_add(r.value.records.size());
  });
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  rt.run(job);
  std::uint64_t want = 0, kept = 0;
  for (int i = 0; i < n; ++i)
    if (i % 10 != 0) want += 2 * std::uint64_t(i), kept += 2;
  EXPECT_EQ(count->load(), kept);
  EXPECT_EQ(sum->load(), want);
}

/// A shared sink written for acked records (record<T>&&), as before record policies.
struct acked_shared_sink {
  std::atomic<int> n{0}, with_provenance{0};
  void write(std::size_t, rill::record<int>&& r) {
    n.fetch_add(1);
    if (r.position || r.ack) with_provenance.fetch_add(1);
  }
  void progress(std::size_t, rill::event_time) {}
  void end(std::size_t) {}
};

// Sinks and late outputs that take record<T>&& or window<T>&& (the acked forms) run on an
// unacked stream: each gets rill::to_acked of what arrives.
TEST(RecordPolicy, AckedUserSinksWorkOnAnUnackedStream) {
  constexpr int n = 1000;
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  std::atomic<int> got{0}, with_provenance{0};
  rt.run(rill::from(unacked_ints(n)).map([](int x) { return x + 1; }).sink([&](rill::record<int>&& r) {
    got.fetch_add(1);
    if (r.position || r.ack) with_provenance.fetch_add(1);
  }));
  EXPECT_EQ(got.load(), n);
  EXPECT_EQ(with_provenance.load(), 0);

  std::atomic<int> windowed{0};
  rt.run(rill::from(unacked_ints(n))
             .window_sort({.length = 10ms, .max_delay = 0ms},
                          [](rill::record<int>&&, rill::event_time, rill::event_time) {})
             .sink([&](rill::window<int>&& w) { windowed.fetch_add(int(w.records.size())); }));
  EXPECT_EQ(windowed.load(), n);

  auto shared = std::make_shared<acked_shared_sink>();
  static_assert(rill::sink_of<acked_shared_sink, int, rill::unacked>);
  rt.run(rill::from(unacked_ints(n)).sink(shared));
  EXPECT_EQ(shared->n.load(), n);
  EXPECT_EQ(shared->with_provenance.load(), 0);

  auto acked_again = rill::from(unacked_ints(n)).to_acked();
  static_assert(std::is_same_v<decltype(acked_again), rill::stream<int, rill::acked>>);
  std::atomic<int> widened{0};
  rt.run(std::move(acked_again).sink([&](rill::record<int>&&) { widened.fetch_add(1); }));
  EXPECT_EQ(widened.load(), n);
}

//   token_source (acked, 2 splits) -> key_by (x % 5) ---+
//                                                      +-> window_join (tumbling 1 s) -> sink
//   vector_source<unacked> -> key_by (x % 5) ----------+
// The result is acked: each pair holds its left input's token until the sink drops it.
TEST(RecordPolicy, JoinOfAckedAndUnackedCarriesTheAckedSidesTokens) {
  constexpr int n = 200;
  tally t;
  std::mutex mu;
  std::vector<rill::record<std::pair<int, int>>> held;
  auto left = rill::from(token_source{&t, n / 2}).key_by([](const int& x) { return x % 5; });
  auto right = rill::from(unacked_ints(n)).key_by([](const int& x) { return x % 5; });
  auto joined = std::move(left).window_join(std::move(right), rill::tumbling{1s}).inner();
  static_assert(std::is_same_v<decltype(joined)::record_policy, rill::acked>);
  auto job = std::move(joined).sink([&](rill::record<std::pair<int, int>>&& r) {
    std::lock_guard g(mu);
    held.push_back(std::move(r));
  });
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  rt.run(job);
  // All times are within [0, 200 ms): one window; every left x meets the 40 right y with
  // y % 5 == x % 5.
  ASSERT_EQ(held.size(), std::size_t(n) * (n / 5));
  for (const auto& r : held) EXPECT_NE(r.ack, nullptr);
  EXPECT_EQ(t.live.load(), n);
  held.clear();
  EXPECT_EQ(t.live.load(), 0);
  std::lock_guard g(t.mu);
  EXPECT_EQ(t.done.size(), std::size_t(n));

  auto u1 = rill::from(unacked_ints(4)).key_by([](const int& x) { return x; });
  auto u2 = rill::from(unacked_ints(4)).key_by([](const int& x) { return x; });
  static_assert(std::is_same_v<decltype(std::move(u1).window_join(std::move(u2), rill::tumbling{1s}))::record_policy,
                               rill::unacked>);
}

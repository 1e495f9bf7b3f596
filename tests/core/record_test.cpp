// record_test — ack tokens (record.hpp): join_acks, ack_group, and that every operator of
// the DSL carries a record's token so it dies exactly when the last derived output does.
//
//   token_source (2 splits) -> map -> filter (drops x % 10 == 0) -> flat_map (x twice)
//     -> key_by (x % 7) -> window_sort (10 ms) -> sink that keeps the window records
//
// Expected values are counted from the inputs (which pass the filter), not from rill.
#include <gtest/gtest.h>

#include <atomic>
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

// rill::generator_source (core/include/rill/core/generator_source.hpp): which records are
// due when, on a manual clock; then count, order and rate on a real runtime.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include <rill/core/generator_source.hpp>
#include <rill/rill.hpp>

using namespace std::chrono_literals;

namespace {

const rill::steady_time t0{};

// 1,000/s: record i is due at i ms after the first poll.
TEST(generator_source, emits_what_is_due_by_now) {
  rill::generator_source gen{{.count = 50, .rate = 1000}, [](std::uint64_t i) { return int(i) * 10; }};
  static_assert(std::is_same_v<decltype(gen)::record_policy, rill::unacked>, "fn returns T: value and time");
  auto r = gen.open(0);
  std::vector<rill::record<int, rill::unacked>> got;
  auto emit = [&](rill::record<int, rill::unacked>&& x) { got.push_back(std::move(x)); };
  EXPECT_EQ(r.poll_at(emit, 256, t0), rill::poll_status::idle);  // record 0 at start
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(r.poll_at(emit, 256, t0 + 999us), rill::poll_status::idle);  // record 1 due at 1 ms
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(r.poll_at(emit, 256, t0 + 10ms), rill::poll_status::idle);  // 1..10
  EXPECT_EQ(got.size(), 11u);
  EXPECT_EQ(r.poll_at(emit, 5, t0 + 40ms), rill::poll_status::more);  // 11..40 due, 5 taken
  EXPECT_EQ(got.size(), 16u);
  EXPECT_EQ(r.poll_at(emit, 256, t0 + 1s), rill::poll_status::end);  // the rest
  ASSERT_EQ(got.size(), 50u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].value, int(i) * 10);
    EXPECT_EQ(got[i].time, rill::event_time{std::chrono::milliseconds{i}});  // due time
  }
}

TEST(generator_source, unthrottled_and_record_results) {
  rill::generator_source gen{{.count = 3}, [](std::uint64_t i) {
                               return rill::record<int>{int(i), rill::event_time{std::chrono::seconds{7 - i}}};
                             }};
  static_assert(std::is_same_v<decltype(gen)::value_type, int>);
  static_assert(std::is_same_v<decltype(gen)::record_policy, rill::acked>, "fn returns record<int>: its policy");
  auto r = gen.open(0);
  std::vector<rill::record<int>> got;
  EXPECT_EQ(r.poll_at([&](rill::record<int>&& x) { got.push_back(x); }, 256, t0), rill::poll_status::end);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].time, rill::event_time{5s});
  rill::generator_source none{{.count = 0, .rate = 10}, [](std::uint64_t) { return 0; }};
  auto rn = none.open(0);
  EXPECT_EQ(rn.poll_at([](rill::record<int, rill::unacked>&&) {}, 256, t0), rill::poll_status::end);
}

// 300 records at 1,000/s on a real runtime: all of them, in order. Record i is due i ms
// after the schedule starts, which is after `start`: record i never arrives before
// start + i ms (a late record 0 on a loaded machine may shorten the span between
// arrivals, so the bound is from `start`). At most 10 s: a run 30x too slow fails.
TEST(generator_source, count_order_and_rate_on_a_runtime) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  std::vector<std::uint64_t> seen;
  std::vector<std::chrono::steady_clock::time_point> at;
  rill::generator_source gen{{.count = 300, .rate = 1000}, [](std::uint64_t i) { return i; }};
  const auto start = std::chrono::steady_clock::now();
  const auto rep = rt.run(rill::from(gen).sink([&](std::uint64_t i) {
    seen.push_back(i);
    at.push_back(std::chrono::steady_clock::now());
  }));
  ASSERT_EQ(seen.size(), 300u);
  for (std::uint64_t i = 0; i < 300; ++i) ASSERT_EQ(seen[i], i);
  EXPECT_GE(at[299] - start, 299ms);
  EXPECT_GE(at[150] - start, 150ms);
  EXPECT_LT(rep.elapsed_s, 10.0);
}

}  // namespace

// The stall detector of rill::worker (core/include/rill/core/worker.hpp, runtime.hpp):
// a map that busy-waits 1 s on one record is reported once, on stderr, in the report and
// on the metrics, with that operator's name and a duration of at least 1 s; the results
// are those of the same job without the wait.
//
//   vector_source "numbers" (1 split, 200 records) -> map "slow" (1 s on record 100)
//     -> sink "collect"
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include <rill/rill.hpp>

using namespace std::chrono_literals;

namespace {

std::vector<rill::record<int>> numbers(int n) {
  std::vector<rill::record<int>> v;
  for (int i = 0; i < n; ++i) v.push_back({i, rill::event_time{std::chrono::milliseconds{i}}});
  return v;
}

/// Runs the job; busy-waits `wait` on record 100 inside map "slow". The sum of the outputs.
long long run(rill::runtime& rt, std::chrono::nanoseconds wait, rill::run_report& rep) {
  std::atomic<long long> sum{0};
  auto job = rill::from(rill::vector_source<int>{numbers(200)}, "numbers")
                 .map([wait](int x) {
                   if (x == 100) {
                     const auto until = std::chrono::steady_clock::now() + wait;
                     while (std::chrono::steady_clock::now() < until) {
                     }
                   }
                   return x * 3;
                 }, "slow")
                 .sink([&](int x) { sum.fetch_add(x); }, "collect");
  rep = rt.run(job);
  return sum.load();
}

TEST(stall_detector, reports_a_slow_map_once_with_its_name) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .stall_threshold = 100ms}};
  rill::run_report quick, slow;
  const long long expected = 3LL * 199 * 200 / 2;
  EXPECT_EQ(run(rt, 0ns, quick), expected);
  EXPECT_TRUE(quick.stalls.empty());

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(run(rt, 1s, slow), expected) << "results unchanged";
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(slow.stalls.size(), 1u) << err;
  EXPECT_EQ(slow.stalls[0].op, "slow");
  EXPECT_GE(slow.stalls[0].duration, 1s);
  EXPECT_LT(slow.stalls[0].duration, 5s);
  EXPECT_EQ(slow.stage("collect").in, 200u);
  // One line on stderr, naming the operator.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("rill: stall: worker 0 ran operator 'slow' for 1."), std::string::npos) << err;
  // ... and as a metric.
  const std::string text = rt.prometheus_text();
  EXPECT_NE(text.find("rill_stalls_total{worker=\"0\"} 1\n"), std::string::npos) << text;
}

// A turn with no operator marked (runtime work: an exchange drain, a source's flush, a
// timer) is named as such on stderr, not as operator ''; the report's op stays "".
TEST(stall_detector, a_turn_outside_any_operator_is_named_runtime_work) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .stall_threshold = 100ms}};
  rill::worker& w = rt.worker_at(0);
  std::promise<void> done;
  ::testing::internal::CaptureStderr();
  w.start();
  boost::asio::post(w.context(), [&] {
    rill::turn_scope turn{rill::this_worker()};
    const auto until = std::chrono::steady_clock::now() + 150ms;
    while (std::chrono::steady_clock::now() < until) {
    }
    done.set_value();
  });
  done.get_future().wait();
  w.stop_and_join();
  const std::string err = ::testing::internal::GetCapturedStderr();
  const auto stalls = w.stalls();
  ASSERT_EQ(stalls.size(), 1u) << err;
  EXPECT_EQ(stalls[0].op, "");
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("rill: stall: worker 0 ran runtime work outside any operator (an exchange drain, a flush, "
                     "a timer) for 0."),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("''"), std::string::npos) << err;
}

TEST(stall_detector, zero_threshold_is_off) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .stall_threshold = 0ms}};
  rill::run_report rep;
  EXPECT_EQ(run(rt, 300ms, rep), 3LL * 199 * 200 / 2);
  EXPECT_TRUE(rep.stalls.empty());
  EXPECT_FALSE(rt.worker_at(0).timed());
}

}  // namespace

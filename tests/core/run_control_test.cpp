// Run control of rill::runtime (core/include/rill/core/run_control.hpp, runtime.hpp):
// the stop-when-idle rule on a manual clock, then stop when idle, the progress callback
// and signal handling on real runtimes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <rill/core/generator_source.hpp>
#include <rill/core/run_control.hpp>
#include <rill/rill.hpp>

using namespace std::chrono_literals;

namespace {

const rill::steady_time t0{};

// idle 3 s, grace 30 s (10x by default): before the first record only the grace counts.
TEST(idle_stop, waits_the_grace_for_the_first_record) {
  EXPECT_EQ(rill::idle_stop::default_grace(3s), 30s);
  rill::idle_stop s{3s, rill::idle_stop::default_grace(3s), t0};
  EXPECT_FALSE(s.sample(0, t0 + 3s));
  EXPECT_FALSE(s.sample(0, t0 + 29999ms));
  EXPECT_TRUE(s.sample(0, t0 + 30s));
  EXPECT_FALSE(s.sample(0, t0 + 31s)) << "fires once";
  EXPECT_TRUE(s.fired());
}

// After the first record: 3 s after the last change of the counter, not of the start.
TEST(idle_stop, stops_idle_after_the_last_change) {
  rill::idle_stop s{3s, 30s, t0};
  EXPECT_FALSE(s.sample(5, t0 + 1s));
  EXPECT_FALSE(s.sample(5, t0 + 3999ms));
  EXPECT_FALSE(s.sample(9, t0 + 3999ms));   // grew: the 3 s start again at 3.999 s
  EXPECT_FALSE(s.sample(9, t0 + 6998ms));
  EXPECT_TRUE(s.sample(9, t0 + 6999ms));
}

TEST(idle_stop, explicit_grace_and_zero_idle) {
  rill::idle_stop s{100ms, 250ms, t0};
  EXPECT_FALSE(s.sample(0, t0 + 249ms));
  EXPECT_TRUE(s.sample(0, t0 + 250ms));
  rill::idle_stop never{0ns, 0ns, t0};
  EXPECT_FALSE(never.sample(0, t0 + 1000s));
  // 10 x 100 years does not fit in nanoseconds: saturated
  EXPECT_EQ(rill::idle_stop::default_grace(std::chrono::nanoseconds::max() / 5), std::chrono::nanoseconds::max());
}

TEST(source_records, counts_stages_without_in) {
  std::vector<rill::stage_totals> st = {{"source", 0, 7}, {"map", 7, 7}, {"sink", 7, 0}, {"kafka_source", 0, 5}};
  EXPECT_EQ(rill::source_records(st), 12u);
}

/// `n` records, then nothing, ever (a live input gone quiet): ends only on a stop.
struct stall_source {
  using value_type = int;
  int n;
  std::size_t split_count() const { return 1; }
  struct reader {
    int n, i = 0;
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t) {
      if (i < n) emit(rill::record<int>{i++, rill::event_time{std::chrono::milliseconds{i}}});
      return rill::poll_status::idle;
    }
    std::string error() const { return {}; }
  };
  reader open(std::size_t) const { return reader{n}; }
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// 100 records, then silence: the run stops itself 200 ms after the last one, gracefully
// (every record reached the sink, report.stopped). The bound above is loose for a
// loaded machine; below, the stop cannot come before 200 ms of silence.
TEST(runtime_run_control, stop_when_idle_ends_a_stalled_source) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  std::atomic<int> seen{0};
  const auto start = std::chrono::steady_clock::now();
  const auto rep = rt.run(rill::from(stall_source{100}).sink([&](int) { ++seen; }),
                          {.stop_when_idle = 200ms});
  const double took = seconds_since(start);
  EXPECT_TRUE(rep.stopped);
  EXPECT_EQ(seen.load(), 100);
  EXPECT_EQ(rep.stage("source").out, 100u);
  EXPECT_GE(took, 0.2);
  EXPECT_LT(took, 2.0);
}

// Nothing ever arrives: the idle time does not apply, the grace does (10x by default).
TEST(runtime_run_control, first_record_grace_before_anything_arrives) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  auto start = std::chrono::steady_clock::now();
  auto rep = rt.run(rill::from(stall_source{0}).sink([](int) {}),
                    {.stop_when_idle = 50ms, .first_record_grace = 400ms});
  double took = seconds_since(start);
  EXPECT_TRUE(rep.stopped);
  EXPECT_GE(took, 0.4);
  EXPECT_LT(took, 3.0);
  start = std::chrono::steady_clock::now();
  rep = rt.run(rill::from(stall_source{0}).sink([](int) {}), {.stop_when_idle = 30ms});
  took = seconds_since(start);
  EXPECT_TRUE(rep.stopped);
  EXPECT_GE(took, 0.3);  // 10 x 30 ms
  EXPECT_LT(took, 3.0);
}

// A custom activity counter replaces the source counters.
TEST(runtime_run_control, activity_counter_overrides_sources) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  std::atomic<std::uint64_t> fake{0};
  std::thread bump([&] {
    for (int i = 1; i <= 30; ++i) {
      std::this_thread::sleep_for(10ms);
      fake = i;
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const auto rep = rt.run(rill::from(stall_source{0}).sink([](int) {}),
                          {.stop_when_idle = 100ms, .activity = [&] { return fake.load(); }});
  const double took = seconds_since(start);
  bump.join();
  EXPECT_TRUE(rep.stopped);
  EXPECT_GE(took, 0.3 + 0.1);  // counter grows for 300 ms, then 100 ms quiet
  EXPECT_LT(took, 3.0);
}

// Progress every 50 ms on the control thread (not a worker), with growing totals; none
// after run() returned.
TEST(runtime_run_control, progress_callback_every_interval) {
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  std::mutex mu;
  std::vector<rill::run_progress> snaps;
  bool on_worker = false;
  const auto gen = rill::generator_source{{.count = 400, .rate = 1000}, [](std::uint64_t i) { return int(i); }};
  const auto rep = rt.run(rill::from(gen).sink([](int) {}),
                          {.progress = [&](const rill::run_progress& p) {
                             std::lock_guard lk(mu);
                             if (rill::this_worker() != nullptr) on_worker = true;
                             snaps.push_back(p);
                           },
                           .progress_interval = 50ms});
  std::lock_guard lk(mu);
  const auto calls = snaps.size();
  EXPECT_FALSE(on_worker);
  EXPECT_FALSE(rep.stopped);
  EXPECT_EQ(rep.stage("sink").in, 400u);
  // the run lasts >= 0.399 s: at least 7 intervals of 50 ms; never more than elapsed/50ms
  EXPECT_GE(calls, 3u);
  EXPECT_LE(calls, std::size_t(rep.elapsed_s / 0.05));
  for (std::size_t i = 1; i < snaps.size(); ++i) {
    EXPECT_GE(snaps[i].elapsed_s - snaps[i - 1].elapsed_s, 0.049);
    EXPECT_GE(rill::source_records(snaps[i].stages), rill::source_records(snaps[i - 1].stages));
  }
  if (!snaps.empty()) {
    EXPECT_GE(snaps.front().elapsed_s, 0.05);
    EXPECT_LE(rill::source_records(snaps.back().stages), 400u);
  }
  std::this_thread::sleep_for(120ms);
  EXPECT_EQ(snaps.size(), calls) << "a progress call after run() returned";
}

// SIGTERM between constructing the runtime and run(): the process lives on, and the
// next run stops at once, gracefully; the run after it is not stopped (consumed).
TEST(runtime_run_control, signal_before_run_stops_the_next_run) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false, .handle_signals = true}};
  ASSERT_EQ(std::raise(SIGTERM), 0);
  for (int i = 0; i < 500 && !rt.stop_requested(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(rt.stop_requested());
  const auto rep = rt.run(rill::from(stall_source{0}).sink([](int) {}));  // would never end
  EXPECT_TRUE(rep.stopped);
  EXPECT_FALSE(rt.stop_requested());
  std::atomic<int> seen{0};
  const auto again = rt.run(rill::from(rill::vector_source<int>{std::vector<rill::record<int>>{{1, {}}, {2, {}}}}).sink([&](int) { ++seen; }));
  EXPECT_FALSE(again.stopped);
  EXPECT_EQ(seen.load(), 2);
}

// SIGINT during a run that would never end: a graceful stop, every record kept.
TEST(runtime_run_control, signal_during_run_stops_gracefully) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false, .handle_signals = true}};
  std::atomic<int> seen{0};
  std::thread t([&] {
    while (seen.load() < 50) std::this_thread::sleep_for(5ms);
    std::raise(SIGINT);
  });
  const auto rep = rt.run(rill::from(stall_source{50}).sink([&](int) { ++seen; }));
  t.join();
  EXPECT_TRUE(rep.stopped);
  EXPECT_EQ(seen.load(), 50);
}

// A second SIGTERM while the stop the first one asked for is still pending (here no run
// takes it) ends the process at once by the signal's default action, with a note on
// stderr: a stop that drains slowly cannot make Ctrl-C useless.
void signal_twice() {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false, .handle_signals = true}};
  std::raise(SIGTERM);
  for (int i = 0; i < 500 && !rt.stop_requested(); ++i) std::this_thread::sleep_for(10ms);
  if (!rt.stop_requested()) std::exit(3);
  std::raise(SIGTERM);
  std::this_thread::sleep_for(5s);
  std::exit(0);  // still alive: the second signal was taken as one more graceful stop
}
TEST(runtime_run_control_death, second_signal_while_stopping_ends_the_process) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(signal_twice(), ::testing::KilledBySignal(SIGTERM),
              "rill: SIGTERM again while stopping: exiting at once");
}

// request_stop() with no run in progress is kept for the next run.
TEST(runtime_run_control, request_stop_before_run_is_kept) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  rt.request_stop();
  EXPECT_TRUE(rt.run(rill::from(stall_source{0}).sink([](int) {})).stopped);
}

// More workers than rill::max_workers: the constructor refuses them with the option's
// key, the value and the range, before any thread starts.
TEST(runtime_options_check, workers_above_max_workers_are_refused) {
  try {
    rill::runtime rt{{.workers = rill::max_workers + 1, .topology = "1 nodes x 1 cores", .pin = false}};
    ADD_FAILURE() << "accepted " << rt.worker_count() << " workers";
  } catch (const rill::config_error& e) {
    EXPECT_EQ(e.key(), "runtime.workers");
    EXPECT_NE(std::string(e.what()).find("must be in 1..1024 (rill::max_workers), got 1025"), std::string::npos)
        << e.what();
  }
  rill::runtime most{{.workers = rill::max_workers, .topology = "1 nodes x 1 cores", .pin = false}};
  EXPECT_EQ(most.worker_count(), 1024u);
}

}  // namespace

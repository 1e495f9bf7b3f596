// Case C29 (../shared/cases/CASES.md): a timed blocking wait must not depend on the wall
// clock. Stepping the machine's clock needs privileges and moves it for every process on
// the machine, so this test steps the wall clock of this process only: it interposes
// clock_gettime and the timed pthread waits (the executable's definitions come first in
// symbol lookup, so libstdc++ and Asio call these). After `jump_at` (steady time),
// CLOCK_REALTIME reads `shift` away from the machine's; a wait on an absolute
// CLOCK_REALTIME deadline then ends when that shifted clock reaches it, in 10 ms slices,
// giving up after `give_up` (counting it in `hung` and undoing the step) instead of 11
// days. Waits on CLOCK_MONOTONIC pass through untouched.
//   1. tcp_pipeline_sink::wait(300 ms) (std::condition_variable::wait_for) times out at
//      300 ms steady, whether the wall clock steps back 11 days or forward 1 h at 100 ms.
//   2. The check itself fails a wall-clock wait: condition_variable::wait_until on
//      system_clock hangs (back step) or ends at once (forward step) under the same steps.
//   3. A run of the runtime (its event loop's timers, Boost.Asio's timerfd) creates its
//      timers on CLOCK_MONOTONIC and makes no CLOCK_REALTIME wait.
//   4. Static check: no source of core/, connectors/, operators/ or examples/ names a
//      wall-clock wait (system_clock deadlines, deadline_timer, system_timer,
//      sem_timedwait, pthread_cond_timedwait, CLOCK_REALTIME); system_clock appears only
//      where it stamps wall time (listed below with the reason).
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/timerfd.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "rill/connectors/tcp_sink.hpp"
#include "rill/core/runtime.hpp"
#include "rill/operators/stream.hpp"

using namespace std::chrono_literals;

namespace {

std::atomic<std::int64_t> jump_at_ns{INT64_MAX};  ///< steady time of the step (ns since its epoch)
std::atomic<std::int64_t> shift_ns{0};            ///< wall clock minus the machine's after the step
std::atomic<std::int64_t> give_up_ns{2'000'000'000};
std::atomic<int> realtime_waits{0}, monotonic_waits{0}, hung{0};
std::atomic<int> realtime_timerfds{0}, monotonic_timerfds{0};

using clock_gettime_fn = int (*)(clockid_t, timespec*);
using clockwait_fn = int (*)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const timespec*);
using timedwait_fn = int (*)(pthread_cond_t*, pthread_mutex_t*, const timespec*);
using timerfd_create_fn = int (*)(int, int);

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}
clock_gettime_fn real_clock_gettime() {
  static const auto f = next<clock_gettime_fn>("clock_gettime");
  return f;
}
clockwait_fn real_clockwait() {
  static const auto f = next<clockwait_fn>("pthread_cond_clockwait");
  return f;
}

std::int64_t ns_of(const timespec& t) { return std::int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }
timespec ts_of(std::int64_t ns) { return {time_t(ns / 1'000'000'000), long(ns % 1'000'000'000)}; }
std::int64_t mono_now() {
  timespec t{};
  real_clock_gettime()(CLOCK_MONOTONIC, &t);
  return ns_of(t);
}
std::int64_t wall_now() {
  timespec t{};
  real_clock_gettime()(CLOCK_REALTIME, &t);
  return ns_of(t) + (mono_now() >= jump_at_ns.load() ? shift_ns.load() : 0);
}

/// A wait on an absolute deadline of the (shifted) wall clock, as the kernel would do it.
int wall_clock_wait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
  ++realtime_waits;
  const std::int64_t deadline = ns_of(*abs), started = mono_now();
  for (;;) {
    const std::int64_t now = wall_now();
    if (now >= deadline) return ETIMEDOUT;
    if (mono_now() - started >= give_up_ns.load()) {
      ++hung;
      shift_ns = 0;  // undo the step: the caller's own re-check of the clock ends the wait
      return ETIMEDOUT;
    }
    const auto slice = ts_of(mono_now() + std::min<std::int64_t>(deadline - now, 10'000'000));
    const int r = real_clockwait()(c, m, CLOCK_MONOTONIC, &slice);
    if (r != ETIMEDOUT) return r;  // signalled (or an error)
  }
}

/// Steps the wall clock by `shift` at `at` from now (steady).
void step_wall_clock(std::chrono::nanoseconds at, std::chrono::nanoseconds shift) {
  shift_ns = shift.count();
  jump_at_ns = mono_now() + at.count();
}
void reset_clock() {
  jump_at_ns = INT64_MAX;
  shift_ns = 0;
  realtime_waits = monotonic_waits = hung = 0;
  realtime_timerfds = monotonic_timerfds = 0;
}

constexpr auto eleven_days = std::chrono::hours{24 * 11};

}  // namespace

extern "C" {
int clock_gettime(clockid_t id, timespec* tp) {
  if (id != CLOCK_REALTIME) return real_clock_gettime()(id, tp);
  *tp = ts_of(wall_now());
  return 0;
}
int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t id, const timespec* abs) {
  if (id == CLOCK_REALTIME) return wall_clock_wait(c, m, abs);
  ++monotonic_waits;
  return real_clockwait()(c, m, id, abs);
}
// A condition variable's default clock is CLOCK_REALTIME (a monotonic one would be set
// with pthread_condattr_setclock: rill has none).
int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
  return wall_clock_wait(c, m, abs);
}
int sem_timedwait(sem_t* s, const timespec* abs) {
  ++realtime_waits;
  static const auto f = next<int (*)(sem_t*, const timespec*)>("sem_timedwait");
  return f(s, abs);
}
int pthread_mutex_timedlock(pthread_mutex_t* m, const timespec* abs) {
  ++realtime_waits;
  static const auto f = next<int (*)(pthread_mutex_t*, const timespec*)>("pthread_mutex_timedlock");
  return f(m, abs);
}
int timerfd_create(int id, int flags) noexcept {
  ++(id == CLOCK_REALTIME ? realtime_timerfds : monotonic_timerfds);
  static const auto f = next<timerfd_create_fn>("timerfd_create");
  return f(id, flags);
}
}

namespace {

struct byte_enc {
  void operator()(const int&, std::vector<std::byte>& out) const { out.push_back(std::byte{0}); }
};

/// tcp_pipeline_sink::wait(300 ms) on a sink that never finishes (no worker ended; its
/// peer refuses): steady time it took.
std::chrono::steady_clock::duration sink_wait(std::chrono::nanoseconds step) {
  rill::tcp_pipeline_sink<int, byte_enc> sink(
      1, {.endpoint = rill::tcp_endpoint::connect("127.0.0.1", 1), .framing = rill::framing::fixed(1)});
  step_wall_clock(100ms, step);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(sink.wait(300ms));
  return std::chrono::steady_clock::now() - t0;
}

/// The same wait written against the wall clock (what the check must catch).
std::chrono::steady_clock::duration wall_clock_wait_for_300ms(std::chrono::nanoseconds step) {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock lk(mu);
  step_wall_clock(100ms, step);
  const auto t0 = std::chrono::steady_clock::now();
  cv.wait_until(lk, std::chrono::system_clock::now() + 300ms, [] { return false; });
  return std::chrono::steady_clock::now() - t0;
}

long long ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

TEST(ClockJump, TimedWaitEndsOnTheSteadyClockWhenTheWallClockStepsBack) {
  reset_clock();
  const auto took = sink_wait(-eleven_days);
  EXPECT_GE(took, 300ms) << ms(took) << " ms";
  EXPECT_LE(took, 1300ms) << ms(took) << " ms";
  EXPECT_EQ(hung.load(), 0);
  EXPECT_EQ(realtime_waits.load(), 0);
  EXPECT_GE(monotonic_waits.load(), 1);  // the wait went through the interposed call
  reset_clock();
}

TEST(ClockJump, TimedWaitEndsOnTheSteadyClockWhenTheWallClockStepsForward) {
  reset_clock();
  const auto took = sink_wait(1h);
  EXPECT_GE(took, 300ms) << ms(took) << " ms";
  EXPECT_LE(took, 1300ms) << ms(took) << " ms";
  EXPECT_EQ(realtime_waits.load(), 0);
  reset_clock();
}

// The check fails a wait on the wall clock: it would wait 11 days (given up after 1 s
// here) after a step back, and end at about 100 ms after a step forward.
TEST(ClockJump, WallClockWaitIsCaught) {
  reset_clock();
  give_up_ns = 1'000'000'000;
  const auto back = wall_clock_wait_for_300ms(-eleven_days);
  EXPECT_GE(hung.load(), 1) << ms(back) << " ms";
  EXPECT_GE(back, 1000ms) << ms(back) << " ms";
  reset_clock();
  const auto fwd = wall_clock_wait_for_300ms(1h);
  EXPECT_LT(fwd, 300ms) << ms(fwd) << " ms";
  EXPECT_GE(realtime_waits.load(), 1);
  give_up_ns = 2'000'000'000;
  reset_clock();
}

// Graph: vector_source(1000 ints) -> map -> sink, 2 workers, the wall clock stepped back
// 11 days while it runs. Every timer fd of the event loops is on CLOCK_MONOTONIC, and no
// wait uses CLOCK_REALTIME.
TEST(ClockJump, RuntimeEventLoopTimersAreMonotonic) {
  reset_clock();
  step_wall_clock(0ms, -eleven_days);
  std::vector<rill::record<int>> in;
  for (int i = 0; i < 1000; ++i) in.push_back({i, rill::event_time{std::chrono::milliseconds{i}}});
  std::atomic<long long> sum{0};
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  const auto rep = rt.run(rill::from(rill::vector_source<int>{in}).map([](int v) { return v + 1; }).sink([&](int v) {
    sum += v;
  }));
  EXPECT_EQ(sum.load(), 1000 * 1001 / 2);
  EXPECT_GE(monotonic_timerfds.load(), 2);  // one per worker's io_context at least
  EXPECT_EQ(realtime_timerfds.load(), 0);
  EXPECT_EQ(realtime_waits.load(), 0);
  EXPECT_EQ(hung.load(), 0);
  reset_clock();
}

// Static part of C29: a wall-clock wait must not be written anywhere in the library or the
// examples. system_clock is allowed where it stamps wall time, never where it bounds a wait.
TEST(ClockJump, NoSourceWaitsOnTheWallClock) {
  const std::filesystem::path root = RILL_SOURCE_DIR;
  const std::regex forbidden(
      R"(deadline_timer|system_timer|sem_timedwait|pthread_cond_timedwait|pthread_mutex_timedlock|CLOCK_REALTIME|)"
      R"((wait_until|sleep_until|try_lock_until)\s*\([^;]*system_clock)");
  // Files that read system_clock to stamp wall time (not a wait), and why.
  const std::set<std::string> stamps = {
      "core/src/runtime_metrics.cpp",                    // the report's wall-clock stamp
      "connectors/include/rill/connectors/tcp_source.hpp",  // event time = arrival wall time
      "operators/include/rill/operators/stream.hpp",        // end-to-end latency: wall time - event time
  };
  std::vector<std::string> bad;
  std::size_t files = 0;
  for (const char* dir : {"core", "connectors", "operators", "examples"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
      const auto ext = e.path().extension();
      if (ext != ".hpp" && ext != ".cpp" && ext != ".h") continue;
      ++files;
      std::ifstream f(e.path());
      std::stringstream ss;
      ss << f.rdbuf();
      const std::string text = ss.str();
      const auto rel = std::filesystem::relative(e.path(), root).string();
      if (std::regex_search(text, forbidden)) bad.push_back(rel + ": a wall-clock wait");
      if (text.find("system_clock") != std::string::npos && !stamps.count(rel) &&
          rel.rfind("examples/", 0) != 0)
        bad.push_back(rel + ": system_clock outside the wall-time stamps");
    }
  }
  EXPECT_GT(files, 50u);
  EXPECT_TRUE(bad.empty()) << [&] {
    std::string s;
    for (const auto& b : bad) s += b + "\n";
    return s;
  }();
}

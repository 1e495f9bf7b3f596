// Tests of bounded firing (<rill/operators/resumable.hpp>) on the real runtime: a keyed
// window, a window_sort and both joins that emit millions of records at once into a
// key_by stop when its exchange is full and continue on a later loop turn; every result
// is delivered, in order with the watermarks, and nothing holds the results meanwhile.
#include "rill/operators/stream.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rill/core/generator_source.hpp"
#include "rill/core/runtime.hpp"
#include "key_owner.hpp"
#include "peak_memory.hpp"

using namespace std::chrono_literals;
namespace {

using rill_test::key_owned_by;
using rill_test::mix;
using rill_test::sanitized;
using rill_test::stress_scaled;

/// Peak memory bound of a firing, independent of N: the resident size's peak above its
/// value when the sink took the first result (the operator's state is built by then and
/// is released only after the firing). The exchange holds at most 64 inbox batches + 1
/// pending batch of 256 envelopes (under 160 bytes each for these record types: 2.6 MB),
/// plus the fibers' stacks. An emitter that ignores a full exchange (a window firing, a
/// join emitting without asking ready()) runs ahead of the stalling sink by 40 MB and
/// more at 5 M results, two workers.
constexpr long bound_kb = 16 * 1024;

/// The sink: counts and checksums (order-independent), from one worker only (every
/// result has the same key). Every 2^20 records it stalls for 2^22 rounds of mix() (a
/// consumer that falls behind for a while, without a clock), so that an emitter which
/// ignored a full exchange would run far ahead of it. The first record restarts `peak`.
struct tally {
  std::atomic<std::uint64_t> count{0}, sum{0}, bad{0}, stall_sink{0};
  bool started = false;
  rill_test::peak_window peak;
  void add(std::uint64_t v, bool ok = true) {
    if (!started) {
      started = true;
      peak.restart();
    }
    const std::uint64_t n = count.load(std::memory_order_relaxed) + 1;
    if ((n & ((1u << 20) - 1)) == 0) {
      std::uint64_t x = n;
      for (int i = 0; i < (1 << 22); ++i) x = mix(x + 1);
      stall_sink.store(x, std::memory_order_relaxed);
    }
    count.store(n, std::memory_order_relaxed);
    sum.store(sum.load(std::memory_order_relaxed) + mix(v), std::memory_order_relaxed);
    if (!ok) bad.fetch_add(1, std::memory_order_relaxed);
  }
  void check_peak(const char* what, std::size_t workers) const {
    const long above = peak.above_base_kb();
    std::printf("%s, %zu worker(s), %llu results: peak RSS %ld kB above the first result's %ld kB\n", what, workers,
                (unsigned long long)count.load(), above, peak.base_kb());
    if (!sanitized && peak.known()) {
      EXPECT_LT(above, bound_kb);
    }
  }
};

rill::runtime_options options(std::size_t workers) {
  return {.workers = workers, .topology = workers == 1 ? "1 node x 1 core" : "1 node x 2 cores"};
}

// Graph (W workers; the sink's key is owned by worker W - 1; the source's one split runs
// on worker 0):
//   generator(i = 0 .. N-1, time i ns) -> key_by(i) -> tumbling 1 s count
//     -> key_by(one key) -> sink
// N keys in one window: the window fires them all at the end of input, N results at once.
void keyed_window_firing(std::size_t workers) {
  const std::uint64_t n = stress_scaled(5'000'000);
  auto t = std::make_shared<tally>();
  const int key = key_owned_by(workers - 1, workers);
  rill::runtime rt{options(workers)};
  rill::generator_source gen{{.count = n}, [](std::uint64_t i) { return i; }};
  auto j = rill::from(std::move(gen))
               .key_by([](const std::uint64_t& v) { return v; })
               .window(rill::tumbling{1s})
               .name("w")
               .count()
               .key_by([key](const auto&) { return key; })
               .sink([t](rill::keyed_window_result<std::uint64_t, std::uint64_t>&& r) {
                 t->add(r.key, r.value == 1 && r.start == rill::event_time{} && r.end == rill::event_time{1s});
               });
  auto rep = rt.run(j);

  std::uint64_t want_sum = 0;  // every key once, counted 1
  for (std::uint64_t v = 0; v < n; ++v) want_sum += mix(v);
  EXPECT_EQ(t->count.load(), n);
  EXPECT_EQ(t->sum.load(), want_sum);
  EXPECT_EQ(t->bad.load(), 0u);
  EXPECT_EQ(rep.stage("w").out, n);
  EXPECT_EQ(rep.stage("w").late, 0u);
  EXPECT_TRUE(rep.errors.empty());
  t->check_peak("keyed window of N keys", workers);
}

TEST(resumable, keyed_window_fires_5m_keys_in_bounded_memory_one_worker) { keyed_window_firing(1); }
TEST(resumable, keyed_window_fires_5m_keys_in_bounded_memory_two_workers) { keyed_window_firing(2); }

// Graph (W workers; window_sort on worker 0 with the source; the sink's key on worker
// W - 1):
//   generator(i = 0 .. N-1, time i ns) -> window_sort(10 ns, delay 1 s) -> key_by(one key)
//     -> sink
// Nothing is due before the end of input (W = largest - 1 s < 0); then N / 10 windows of
// 10 records fire at once.
void window_sort_firing(std::size_t workers) {
  const std::uint64_t n = stress_scaled(1'000'000) / 10 * 10;
  auto t = std::make_shared<tally>();
  auto records = std::make_shared<std::atomic<std::uint64_t>>(0);
  const int key = key_owned_by(workers - 1, workers);
  rill::runtime rt{options(workers)};
  rill::generator_source gen{{.count = n}, [](std::uint64_t i) { return i; }};
  auto j = rill::from(std::move(gen))
               .window_sort({.length = 10ns, .max_delay = 1s, .max_buffered = std::size_t(n)})
               .key_by([key](const auto&) { return key; })
               .sink([t, records](rill::window<std::uint64_t>&& w) {
                 // The window's 10 records are start .. start + 9 ns, in order.
                 const auto s = std::uint64_t(w.start.time_since_epoch().count());
                 bool ok = !w.early && w.records.size() == 10 && w.end == w.start + 10ns;
                 for (std::size_t i = 0; ok && i < w.records.size(); ++i) ok = w.records[i].value == s + i;
                 records->fetch_add(w.records.size(), std::memory_order_relaxed);
                 t->add(s, ok);
               });
  auto rep = rt.run(j);

  std::uint64_t want_sum = 0;  // one window per 10 ns, named by its start
  for (std::uint64_t s = 0; s < n; s += 10) want_sum += mix(s);
  EXPECT_EQ(t->count.load(), n / 10);
  EXPECT_EQ(records->load(), n);
  EXPECT_EQ(t->sum.load(), want_sum);
  EXPECT_EQ(t->bad.load(), 0u);
  EXPECT_EQ(rep.stage("window_sort").late, 0u);
  t->check_peak("window_sort of N records", workers);
}

TEST(resumable, window_sort_fires_100k_windows_one_worker) { window_sort_firing(1); }
TEST(resumable, window_sort_fires_100k_windows_two_workers) { window_sort_firing(2); }

// Graph (2 workers; the first window's keys on both, the second window's one key on
// worker 1):
//   generator(3 x N records: second s = 0, 1, 2, key i, time s + i ns) -> key_by(i)
//     -> tumbling 1 s count -> key_by(one key) -> tumbling 1 s count -> sink
// Each first-level window fires N results while the records of the next second arrive:
// they and their progress are held until the firing is done, so the second level counts
// exactly N results in each of its windows and none is late (a watermark that overtook
// the results before it would make them late there).
TEST(resumable, held_progress_never_overtakes_a_suspended_firing) {
  const std::uint64_t n = stress_scaled(200'000);
  const int key = key_owned_by(1, 2);
  struct row {
    std::int64_t start_s;
    std::uint64_t count;
  };
  auto rows = std::make_shared<std::vector<row>>();
  rill::runtime rt{options(2)};
  rill::generator_source gen{{.count = 3 * n}, [n](std::uint64_t i) {
                               const std::uint64_t s = i / n, k = i % n;
                               return rill::record<std::uint64_t>{
                                   k, rill::event_time{std::chrono::seconds{s} + std::chrono::nanoseconds{k}}};
                             }};
  auto j = rill::from(std::move(gen))
               .key_by([](const std::uint64_t& v) { return v; })
               .window(rill::tumbling{1s})
               .name("first")
               .count()
               .key_by([key](const auto&) { return key; })
               .window(rill::tumbling{1s})
               .name("second")
               .count()
               .sink([rows](rill::keyed_window_result<int, std::uint64_t>&& r) {
                 rows->push_back({std::chrono::duration_cast<std::chrono::seconds>(r.start.time_since_epoch()).count(),
                                  r.value});
               });
  auto rep = rt.run(j);
  EXPECT_EQ(rep.stage("first").out, 3 * n);
  EXPECT_EQ(rep.stage("first").late, 0u);
  EXPECT_EQ(rep.stage("second").late, 0u);
  ASSERT_EQ(rows->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*rows)[i].start_s, std::int64_t(i));
    EXPECT_EQ((*rows)[i].count, n);
  }
}

enum class join_kind { interval, window };

// Graph (W workers; both sides' one key on worker 0, the sink's key on worker W - 1):
//   left:  vector_source(L records: a = 0 .. L-1, time a ns) -> key_by(k) --+
//                                                                          join -> key_by(one key) -> sink
//   right: vector_source(R records: b = 0 .. R-1, time b ns) -> key_by(k) --+
// Every (a, b) matches: interval [-1 s, +1 s] (a pair as soon as its second record
// arrives) or one tumbling 1 s window (every pair when it fires at the end of input).
// L x R = 5 M results from a state of L + R records.
void join_output(join_kind kind, std::size_t workers) {
  const std::uint64_t nl = stress_scaled(2'500);
  constexpr std::uint64_t nr = 2'000;
  std::vector<rill::record<std::uint64_t>> left, right;
  for (std::uint64_t a = 0; a < nl; ++a) left.push_back({a, rill::event_time{std::chrono::nanoseconds{a}}});
  for (std::uint64_t b = 0; b < nr; ++b) right.push_back({b, rill::event_time{std::chrono::nanoseconds{b}}});
  const int join_key = key_owned_by(0, workers), sink_key = key_owned_by(workers - 1, workers);
  auto t = std::make_shared<tally>();
  rill::runtime rt{options(workers)};
  auto l = rill::from(rill::vector_source<std::uint64_t>{left}, "left").key_by([join_key](const std::uint64_t&) {
    return join_key;
  });
  auto r = rill::from(rill::vector_source<std::uint64_t>{right}, "right").key_by([join_key](const std::uint64_t&) {
    return join_key;
  });
  auto pair_id = [](std::uint64_t a, std::uint64_t b) { return a * nr + b; };
  auto sink = [t](std::uint64_t id) { t->add(id); };
  auto by_key = [sink_key](const std::uint64_t&) { return sink_key; };
  rill::job j = kind == join_kind::interval
                    ? std::move(l).interval_join(std::move(r), -1s, 1s).inner(pair_id).key_by(by_key).sink(sink)
                    : std::move(l)
                          .window_join(std::move(r), rill::tumbling{1s})
                          .inner(pair_id)
                          .key_by(by_key)
                          .sink(sink);
  rill_test::peak_window whole_run;  // the state is L + R records: bounded from the start
  auto rep = rt.run(j);
  const long above = whole_run.above_base_kb();

  std::uint64_t want_sum = 0;  // brute force over every pair
  for (std::uint64_t a = 0; a < nl; ++a)
    for (std::uint64_t b = 0; b < nr; ++b) want_sum += mix(pair_id(a, b));
  EXPECT_EQ(t->count.load(), nl * nr);
  EXPECT_EQ(t->sum.load(), want_sum);
  EXPECT_EQ(rep.stage("join").out, nl * nr);
  EXPECT_EQ(rep.stage("join").late, 0u);
  EXPECT_TRUE(rep.errors.empty());
  std::printf("%s join, %zu worker(s), %llu pairs: peak RSS %ld kB above the run's start\n",
              kind == join_kind::interval ? "interval" : "window", workers, (unsigned long long)(nl * nr), above);
  if (!sanitized && whole_run.known()) {
    EXPECT_LT(above, bound_kb);
  }
}

TEST(resumable, interval_join_emits_5m_pairs_in_bounded_memory_one_worker) { join_output(join_kind::interval, 1); }
TEST(resumable, interval_join_emits_5m_pairs_in_bounded_memory_two_workers) { join_output(join_kind::interval, 2); }
TEST(resumable, window_join_emits_5m_pairs_in_bounded_memory_one_worker) { join_output(join_kind::window, 1); }
TEST(resumable, window_join_emits_5m_pairs_in_bounded_memory_two_workers) { join_output(join_kind::window, 2); }

// A run that fails while a firing is suspended mid-window (the sink throws after 100,000
// of 1,000,000 results, so the exchange fills and the window waits inside its firing
// loop) ends with the sink's exception; destroying the stage unwinds the firing's frames.
TEST(resumable, run_failing_downstream_unwinds_a_suspended_firing) {
  const std::uint64_t n = stress_scaled(1'000'000);
  const int key = key_owned_by(1, 2);
  auto seen = std::make_shared<std::atomic<std::uint64_t>>(0);
  rill::runtime rt{options(2)};
  rill::generator_source gen{{.count = n}, [](std::uint64_t i) { return i; }};
  auto j = rill::from(std::move(gen))
               .key_by([](const std::uint64_t& v) { return v; })
               .window(rill::tumbling{1s})
               .count()
               .key_by([key](const auto&) { return key; })
               .sink([seen, n](rill::keyed_window_result<std::uint64_t, std::uint64_t>&&) {
                 if (seen->fetch_add(1) + 1 == n / 10) throw std::runtime_error("sink failed");
               });
  EXPECT_THROW(
      {
        try {
          rt.run(j);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "sink failed");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_GE(seen->load(), n / 10);
  EXPECT_LT(seen->load(), n);
}

}  // namespace

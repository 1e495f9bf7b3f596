// Tests for rill/core/numa_ring.hpp: mpmc_ring and numa_ring.
//
// ctest: ctest -R "numa_ring|mpmc_ring" runs every test of this file.
//
// Loop counts: the default run uses the numbers of case C10 (boostorg/lockfree#119:
// 10^7 items).
// RILL_STRESS_SCALE=<d> divides every count by d; under ThreadSanitizer the default
// divisor is 100 (TSan slows atomics by 10-50x).
//
// C11 (blocking pop + push + close) is not tested here: mpmc_ring/numa_ring never block
// and have no close(); blocking waits belong to the event loop (docs/design.md "NumaRing"),
// so C11 lives with the runtime's tests.
#include "rill/core/numa_ring.hpp"
#include "rill/core/sanitizers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace {

#if RILL_TSAN
constexpr std::uint64_t default_divisor = 100;
#else
constexpr std::uint64_t default_divisor = 1;
#endif

std::uint64_t scaled(std::uint64_t n) {
  std::uint64_t d = default_divisor;
  if (const char* env = std::getenv("RILL_STRESS_SCALE"))
    d = std::max<std::uint64_t>(1, std::stoull(env));
  return std::max<std::uint64_t>(n / d, 1000);
}

// ---- a test element that counts constructions and destructions (as rigtorp's test) ----
// Counts are thread-local (no contention in the stress loops) and published on demand.
struct tallies {
  std::int64_t constructed = 0;
  std::int64_t destroyed = 0;
  std::int64_t bad = 0;  // destroyed or moved-from twice / never constructed
};
thread_local tallies local_tallies;
std::atomic<std::int64_t> g_constructed{0}, g_destroyed{0}, g_bad{0};

void publish_tallies() {
  g_constructed += local_tallies.constructed;
  g_destroyed += local_tallies.destroyed;
  g_bad += local_tallies.bad;
  local_tallies = {};
}
void reset_tallies() {
  local_tallies = {};
  g_constructed = 0;
  g_destroyed = 0;
  g_bad = 0;
}

struct counted {
  static constexpr std::uint32_t alive = 0xA11CE;
  static constexpr std::uint32_t dead = 0xDEAD;
  std::uint64_t value = 0;
  std::uint32_t state = alive;

  counted() noexcept { ++local_tallies.constructed; }
  explicit counted(std::uint64_t v) noexcept : value(v) { ++local_tallies.constructed; }
  counted(counted&& o) noexcept : value(o.value) {
    if (o.state != alive) ++local_tallies.bad;
    ++local_tallies.constructed;
  }
  counted& operator=(counted&& o) noexcept {
    if (o.state != alive || state != alive) ++local_tallies.bad;
    value = o.value;
    return *this;
  }
  counted(const counted&) = delete;
  ~counted() {
    if (state != alive) ++local_tallies.bad;
    state = dead;
    ++local_tallies.destroyed;
  }
};

// A counter alone on its cache line, for per-thread progress.
struct alignas(64) padded {
  std::atomic<std::uint64_t> v{0};
};

// ---------------------------------------------------------------- mpmc_ring basics --

TEST(mpmc_ring, capacity_rounds_up_to_power_of_two) {
  EXPECT_EQ(rill::mpmc_ring<int>(1).capacity(), 2u);
  EXPECT_EQ(rill::mpmc_ring<int>(2).capacity(), 2u);
  EXPECT_EQ(rill::mpmc_ring<int>(256).capacity(), 256u);
  EXPECT_EQ(rill::mpmc_ring<int>(1000).capacity(), 1024u);
  EXPECT_THROW(rill::mpmc_ring<int>(0), rill::config_error);
}

TEST(mpmc_ring, full_and_empty_are_reported_and_order_is_fifo) {
  rill::mpmc_ring<int> r(4);
  int out = -1;
  EXPECT_TRUE(r.was_empty());
  EXPECT_FALSE(r.try_pop(out));
  EXPECT_EQ(out, -1);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(r.try_push(int{i}));
  EXPECT_TRUE(r.was_full());
  int extra = 99;
  EXPECT_FALSE(r.try_push(std::move(extra)));
  EXPECT_EQ(r.was_size(), 4u);
  for (int round = 0; round < 3; ++round) {  // wrap around several laps
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(r.try_pop(out));
      EXPECT_EQ(out, round * 4 + i);
      EXPECT_TRUE(r.try_push(int{(round + 1) * 4 + i}));
    }
  }
}

TEST(mpmc_ring, batches_move_up_to_n_and_return_the_count) {
  rill::mpmc_ring<int> r(8);
  std::vector<int> in(10);
  std::iota(in.begin(), in.end(), 0);
  EXPECT_EQ(r.try_push_batch(std::span<int>(in)), 8u);  // only 8 fit
  EXPECT_EQ(r.try_push_batch(std::span<int>(in).subspan(8)), 0u);
  std::vector<int> out(5, -1);
  EXPECT_EQ(r.try_pop_batch(std::span<int>(out)), 5u);
  EXPECT_EQ(out, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.try_pop_batch(std::span<int>(out)), 3u);
  EXPECT_EQ(out[0], 5);
  EXPECT_EQ(out[2], 7);
  EXPECT_EQ(r.try_pop_batch(std::span<int>(out)), 0u);
  EXPECT_EQ(r.try_push_batch(std::span<int>()), 0u);
}

TEST(mpmc_ring, destructor_destroys_remaining_elements_once) {
  reset_tallies();
  {
    rill::mpmc_ring<counted> r(16);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(r.try_push(counted{std::uint64_t(i)}));
    counted out;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(r.try_pop(out));
    EXPECT_EQ(out.value, 2u);
  }
  publish_tallies();
  EXPECT_EQ(g_constructed.load(), g_destroyed.load());
  EXPECT_EQ(g_bad.load(), 0);
}

TEST(mpmc_ring, backoff_policy_behaves_the_same) {
  rill::mpmc_ring<int, rill::retry_policy::backoff> r(2);
  EXPECT_TRUE(r.try_push(1));
  EXPECT_TRUE(r.try_push(2));
  EXPECT_FALSE(r.try_push(3));
  int out = 0;
  EXPECT_TRUE(r.try_pop(out));
  EXPECT_EQ(out, 1);
}

// -------------------------------------------------- C10 (boostorg/lockfree#119) --

// Run 1: capacity 1024, 2 threads, each loops 10^7 times push(x) then pop(). Neither may
// fail: the thread's own push guarantees an element. Checksum and exactly-once at the end.
TEST(mpmc_ring, c10_push_then_pop_never_reports_empty) {
  const std::uint64_t loops = scaled(10'000'000);
  constexpr int threads = 2;
  rill::mpmc_ring<std::uint64_t> ring(1024);
  ASSERT_EQ(ring.capacity(), 1024u);
  std::vector<std::atomic<std::uint8_t>> seen(threads * loops);
  std::atomic<std::uint64_t> push_full{0}, pop_empty{0}, popped_sum{0}, duplicates{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::uint64_t full = 0, empty = 0, sum = 0, dup = 0;
      for (std::uint64_t i = 0; i < loops; ++i) {
        std::uint64_t v = t * loops + i;
        while (!ring.try_push(std::uint64_t{v})) ++full;
        std::uint64_t out;
        while (!ring.try_pop(out)) ++empty;
        sum += out;
        if (seen[out].exchange(1, std::memory_order_relaxed) != 0) ++dup;
      }
      push_full += full;
      pop_empty += empty;
      popped_sum += sum;
      duplicates += dup;
    });
  }
  for (auto& th : ts) th.join();
  const std::uint64_t n = threads * loops;
  EXPECT_EQ(pop_empty.load(), 0u) << "pop reported empty although the thread had pushed";
  EXPECT_EQ(push_full.load(), 0u);
  EXPECT_EQ(popped_sum.load(), n * (n - 1) / 2) << "checksum";
  EXPECT_EQ(duplicates.load(), 0u);
  EXPECT_TRUE(ring.was_empty()) << "counts balance";
}

// Run 2: capacity 256 pre-filled to 255, 4 threads each looping pop() then push() of the
// element it got. push may never report full; at the end the ring holds 0..254 once each.
TEST(mpmc_ring, c10_pop_then_push_never_reports_full) {
  const std::uint64_t loops = scaled(10'000'000);
  constexpr int threads = 4;
  rill::mpmc_ring<std::uint64_t> ring(256);
  ASSERT_EQ(ring.capacity(), 256u);
  for (std::uint64_t v = 0; v < 255; ++v) ASSERT_TRUE(ring.try_push(std::uint64_t{v}));
  std::atomic<std::uint64_t> push_full{0}, pop_empty{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      std::uint64_t full = 0, empty = 0;
      for (std::uint64_t i = 0; i < loops; ++i) {
        std::uint64_t v;
        while (!ring.try_pop(v)) ++empty;
        while (!ring.try_push(std::uint64_t{v})) ++full;
      }
      push_full += full;
      pop_empty += empty;
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(push_full.load(), 0u) << "push reported full although the thread had popped";
  EXPECT_EQ(pop_empty.load(), 0u);
  std::vector<std::uint64_t> rest;
  std::uint64_t v;
  while (ring.try_pop(v)) rest.push_back(v);
  ASSERT_EQ(rest.size(), 255u) << "counts balance";
  std::sort(rest.begin(), rest.end());
  for (std::uint64_t i = 0; i < 255; ++i) ASSERT_EQ(rest[i], i) << "no duplicate, no loss";
}

// ------------------------------------------------------------------ stress P x C --

struct stress_result {
  std::uint64_t received = 0, duplicates = 0, order_violations = 0, wrong = 0;
};

// Moves `total` counted elements from P producers to C consumers. `make_push(p)` and
// `make_pop(c)` return per-thread callables (so numa_ring can hand out endpoints).
// Element value = producer << 40 | sequence number.
template <class MakePush, class MakePop>
stress_result run_stress(int producers, int consumers, std::uint64_t total, bool check_order,
                         MakePush make_push, MakePop make_pop) {
  std::vector<std::uint64_t> first(producers + 1, 0);
  for (int p = 0; p < producers; ++p)
    first[p + 1] = first[p] + total / producers + (p == 0 ? total % producers : 0);
  std::vector<std::atomic<std::uint8_t>> seen(total);
  std::vector<padded> progress(consumers);
  std::atomic<std::uint64_t> dups{0}, order{0}, wrong{0};
  std::vector<std::thread> ts;
  for (int p = 0; p < producers; ++p) {
    ts.emplace_back([&, p] {
      {
        auto push = make_push(p);
        const std::uint64_t n = first[p + 1] - first[p];
        for (std::uint64_t i = 0; i < n; ++i) {
          counted c{(std::uint64_t(p) << 40) | i};
          while (!push(c)) std::this_thread::yield();
        }
      }  // the endpoint and its buffers are gone before the tallies are published
      publish_tallies();
    });
  }
  for (int c = 0; c < consumers; ++c) {
    ts.emplace_back([&, c] {
      std::uint64_t mine = 0, d = 0, o = 0, w = 0;
      {
        auto pop = make_pop(c);
        std::vector<std::int64_t> last(producers, -1);
        counted item;
        for (;;) {
          if (pop(item)) {
            const std::uint64_t p = item.value >> 40,
                                i = item.value & ((std::uint64_t(1) << 40) - 1);
            if (p >= std::uint64_t(producers) || first[p] + i >= first[p + 1]) {
              ++w;
            } else {
              if (seen[first[p] + i].exchange(1, std::memory_order_relaxed)) ++d;
              if (std::int64_t(i) <= last[p]) ++o;
              last[p] = std::int64_t(i);
            }
            progress[c].v.store(++mine, std::memory_order_relaxed);
          } else {
            std::uint64_t all = 0;
            for (auto& pr : progress) all += pr.v.load(std::memory_order_relaxed);
            if (all >= total) break;
            std::this_thread::yield();
          }
        }
      }  // item and endpoint destroyed before the tallies are published
      dups += d;
      order += o;
      wrong += w;
      publish_tallies();
    });
  }
  for (auto& th : ts) th.join();
  stress_result r;
  for (auto& pr : progress) r.received += pr.v.load();
  r.duplicates = dups;
  r.order_violations = check_order ? order.load() : 0;
  r.wrong = wrong;
  return r;
}

class numa_ring_stress : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(numa_ring_stress, one_ring_exactly_once_in_order_no_leak) {
  const auto [producers, consumers] = GetParam();
  const std::uint64_t total = scaled(10'000'000);
  reset_tallies();
  stress_result r;
  {
    rill::mpmc_ring<counted> ring(1024);
    r = run_stress(
        producers, consumers, total, /*check_order=*/true,
        [&](int) { return [&](counted& c) { return ring.try_push(std::move(c)); }; },
        [&](int) { return [&](counted& c) { return ring.try_pop(c); }; });
    EXPECT_TRUE(ring.was_empty());
  }
  publish_tallies();
  EXPECT_EQ(r.received, total);
  EXPECT_EQ(r.duplicates, 0u);
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_EQ(r.order_violations, 0u) << "per-producer FIFO within one ring";
  EXPECT_EQ(g_constructed.load(), g_destroyed.load()) << "leaked or double-destroyed";
  EXPECT_EQ(g_bad.load(), 0);
}

// Producers and consumers alternate between synthetic nodes 0 and 1; with P=1 or C=1
// everything crosses nodes through batch transfers. No order check: none across nodes.
TEST_P(numa_ring_stress, two_node_set_exactly_once_no_leak) {
  const auto [producers, consumers] = GetParam();
  const std::uint64_t total = scaled(10'000'000);
  reset_tallies();
  stress_result r;
  {
    rill::numa_ring<counted> ring(2, 1024, 32);
    r = run_stress(
        producers, consumers, total, /*check_order=*/false,
        [&](int p) {
          return [ep = ring.make_endpoint(p, p % 2)](counted& c) mutable {
            return ep.try_push(std::move(c));
          };
        },
        [&](int c) {
          return [ep = ring.make_endpoint(100 + c, (c + 1) % 2)](counted& out) mutable {
            return ep.try_pop(out);
          };
        });
    EXPECT_EQ(ring.was_size(), 0u);
  }
  publish_tallies();
  EXPECT_EQ(r.received, total);
  EXPECT_EQ(r.duplicates, 0u);
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_EQ(g_constructed.load(), g_destroyed.load()) << "leaked or double-destroyed";
  EXPECT_EQ(g_bad.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(p_x_c, numa_ring_stress,
                         ::testing::Combine(::testing::Range(1, 5), ::testing::Range(1, 5)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "P" +
                                  std::to_string(std::get<1>(info.param)) + "C";
                         });

// ----------------------------------------------------------------- numa routing --

// Synthetic 2-node set, 8 slots per node, batch 4, one endpoint on node 0.
//   push 0..7  -> all local;  push 8 -> node 0 full: {0,1,2} + 8 move to node 1 at once
//   push 9..11 -> local again (3 slots were freed)
//   pop x8     -> local: 3 4 5 6 7 9 10 11;  pop -> node 0 empty: one batch {0,1,2,8}
//   taken from node 1, 0 returned, {1,2,8} put into node 0 and popped locally.
TEST(numa_ring, routing_stays_local_until_full_or_empty_then_moves_one_batch) {
  rill::numa_ring<int> ring(2, 8, 4);
  auto ep = ring.make_endpoint(0, 0);
  EXPECT_EQ(ep.node(), 0u);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(ep.try_push(int{i}));
  EXPECT_EQ(ep.counters().local_push, 8u);
  EXPECT_EQ(ep.counters().remote_push_batches, 0u);

  ASSERT_TRUE(ep.try_push(8));
  EXPECT_EQ(ep.counters().local_push, 8u);
  EXPECT_EQ(ep.counters().remote_push_batches, 1u);
  EXPECT_EQ(ep.counters().remote_push_items, 4u);
  EXPECT_EQ(ring.ring(0).was_size(), 5u);
  EXPECT_EQ(ring.ring(1).was_size(), 4u);

  for (int i = 9; i < 12; ++i) ASSERT_TRUE(ep.try_push(int{i}));
  EXPECT_EQ(ep.counters().local_push, 11u);
  EXPECT_EQ(ep.counters().remote_push_batches, 1u);

  std::vector<int> got;
  int v;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(ep.try_pop(v));
    got.push_back(v);
  }
  EXPECT_EQ(got, (std::vector<int>{3, 4, 5, 6, 7, 9, 10, 11}));
  EXPECT_EQ(ep.counters().local_pop, 8u);
  EXPECT_EQ(ep.counters().remote_pop_batches, 0u);

  ASSERT_TRUE(ep.try_pop(v));
  EXPECT_EQ(v, 0);
  EXPECT_EQ(ep.counters().remote_pop_batches, 1u);
  EXPECT_EQ(ep.counters().remote_pop_items, 4u);
  EXPECT_EQ(ring.ring(1).was_size(), 0u);
  EXPECT_EQ(ring.ring(0).was_size(), 3u);
  for (int want : {1, 2, 8}) {
    ASSERT_TRUE(ep.try_pop(v));
    EXPECT_EQ(v, want);
  }
  EXPECT_EQ(ep.counters().local_pop, 11u);
  EXPECT_EQ(ep.counters().remote_pop_batches, 1u);
  EXPECT_FALSE(ep.try_pop(v));
  EXPECT_EQ(ep.counters().carried, 0u);
}

// A second endpoint on node 1 sees node 0's overflow only through batches.
TEST(numa_ring, consumer_on_other_node_takes_batches) {
  rill::numa_ring<int> ring(2, 16, 8);
  auto producer = ring.make_endpoint(0, 0);
  auto consumer = ring.make_endpoint(1, 1);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(producer.try_push(int{i}));
  int v;
  ASSERT_TRUE(consumer.try_pop(v));
  EXPECT_EQ(v, 0);
  EXPECT_EQ(consumer.counters().remote_pop_batches, 1u);
  EXPECT_EQ(consumer.counters().remote_pop_items, 8u);
  for (int i = 1; i < 8; ++i) {
    ASSERT_TRUE(consumer.try_pop(v));
    EXPECT_EQ(v, i);
  }
  EXPECT_EQ(consumer.counters().local_pop, 7u);
  EXPECT_EQ(consumer.counters().remote_pop_batches, 1u);
}

TEST(numa_ring, push_fails_only_when_every_ring_is_full) {
  rill::numa_ring<int> ring(2, 4, 2);
  auto ep = ring.make_endpoint(0, 0);
  int accepted = 0;
  for (int i = 0; i < 100; ++i) {
    int x = i;
    if (!ep.try_push(std::move(x))) {
      EXPECT_EQ(x, i) << "a refused value is handed back";
      break;
    }
    ++accepted;
  }
  EXPECT_EQ(accepted, 8);
  EXPECT_EQ(ep.carried(), 0u);
  std::vector<int> got;
  int v;
  while (ep.try_pop(v)) got.push_back(v);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(numa_ring, single_node_never_transfers) {
  rill::numa_ring<int> ring(1, 2, 1);
  auto ep = ring.make_endpoint(0, 0);
  EXPECT_TRUE(ep.try_push(1));
  EXPECT_TRUE(ep.try_push(2));
  EXPECT_FALSE(ep.try_push(3));
  EXPECT_EQ(ep.counters().remote_push_batches, 0u);
}

TEST(numa_ring, bad_configuration_throws) {
  EXPECT_THROW(rill::numa_ring<int>(0, 8, 1), rill::config_error);
  EXPECT_THROW(rill::numa_ring<int>(2, 8, 0), rill::config_error);
  EXPECT_THROW(rill::numa_ring<int>(2, 8, 9), rill::config_error);
  rill::numa_ring<int> ok(2, 8, 8);
  EXPECT_THROW(ok.make_endpoint(0, 2), rill::config_error);
}

TEST(numa_ring, remaining_elements_are_destroyed_once) {
  reset_tallies();
  {
    rill::numa_ring<counted> ring(2, 4, 2);
    auto ep = ring.make_endpoint(0, 0);
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(ep.try_push(counted{std::uint64_t(i)}));
  }
  publish_tallies();
  EXPECT_EQ(g_constructed.load(), g_destroyed.load());
  EXPECT_EQ(g_bad.load(), 0);
}

}  // namespace

namespace {

TEST(numa_ring, endpoint_moves_keep_node_and_counters) {
  rill::numa_ring<int> ring(2, 4, 2);
  auto a = ring.make_endpoint(7, 1);
  ASSERT_TRUE(a.try_push(1));
  auto b = std::move(a);
  EXPECT_EQ(b.node(), 1u);
  EXPECT_EQ(b.worker_id(), 7u);
  EXPECT_EQ(b.counters().local_push, 1u);
  b = ring.make_endpoint(8, 0);
  EXPECT_EQ(b.node(), 0u);
  int v = 0;
  ASSERT_TRUE(b.try_pop(v));  // node 0 is empty: one batch from node 1
  EXPECT_EQ(v, 1);
  EXPECT_EQ(b.counters().remote_pop_batches, 1u);
}

}  // namespace

// Tests of flat_map's bounded emission (<rill/operators/flat_map.hpp>) on the real
// runtime: one call that emits millions of records through key_by's exchange never holds
// them, in both forms, with the consumer on another worker or on the emitting one.
#include "rill/operators/stream.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rill/core/runtime.hpp"
#include "key_owner.hpp"
#include "peak_memory.hpp"

using namespace std::chrono_literals;
namespace {

/// Peak memory bound of one run above the process's resident size at its start,
/// independent of N: the exchange holds at most 64 inbox batches + 1 pending batch of 256
/// envelopes (88 bytes each for this record type: 1.5 MB), plus the fiber's stack and the runtime's
/// threads. An emitter that ignored a full exchange runs ahead of the stalling sink by
/// 40 MB and more.
constexpr long bound_kb = 16 * 1024;

using rill_test::key_owned_by;
using rill_test::mix;
using rill_test::sanitized;

/// The sink: counts, checksums and checks the order. Every 2^20 records it stalls for
/// 2^stall_log2 rounds of mix() (a consumer that falls behind for a while, without a
/// clock), so that an emitter which ignored a full exchange would run far ahead of it.
struct tally {
  std::atomic<std::uint64_t> count{0}, sum{0}, out_of_order{0}, next{0}, stall_sink{0};
  int stall_log2 = 22;
  void add(std::uint64_t v) {  // one worker only (every record has the same key)
    if ((v & ((1u << 20) - 1)) == 0) {
      std::uint64_t x = v;
      for (int i = 0; i < (1 << stall_log2); ++i) x = mix(x + 1);
      stall_sink.store(x, std::memory_order_relaxed);
    }
    if (v != next.load(std::memory_order_relaxed)) out_of_order.fetch_add(1, std::memory_order_relaxed);
    next.store(v + 1, std::memory_order_relaxed);
    count.fetch_add(1, std::memory_order_relaxed);
    sum.fetch_add(mix(v), std::memory_order_relaxed);
  }
};

/// The values [first, last), computed as they are read: a range of N outputs that holds
/// none of them, as std::views::iota(first, last) is (which clang 14 cannot compile with
/// libstdc++ 12: GCC bug 102807).
struct counting_range {
  struct iterator {
    using value_type = std::uint64_t;
    using difference_type = std::int64_t;
    std::uint64_t v;
    std::uint64_t operator*() const { return v; }
    iterator& operator++() {
      ++v;
      return *this;
    }
    iterator operator++(int) { return {v++}; }
    bool operator==(const iterator&) const = default;
  };
  std::uint64_t first, last;
  iterator begin() const { return {first}; }
  iterator end() const { return {last}; }
};

enum class form { range, emit };

struct emission_case {
  form f;
  std::size_t workers, to;  // consumer worker of the single key
  std::uint64_t per_input;  // N, before RILL_STRESS_SCALE
};

// Graph (workers W, key owned by worker `to`; the source's one split runs on worker 0):
//   vector_source(3 records: 0, 1, 2) -> flat_map(i -> i*N .. i*N+N-1) -> key_by(k) -> sink
//                                         worker 0                  exchange -> worker `to`
void run_case(const emission_case& c) {
  const std::uint64_t n = rill_test::stress_scaled(c.per_input);
  std::vector<rill::record<std::uint64_t>> in;
  for (std::uint64_t i = 0; i < 3; ++i) in.push_back({i, rill::event_time{std::chrono::seconds{i}}});
  auto t = std::make_shared<tally>();
  const int key = key_owned_by(c.to, c.workers);
  rill::runtime rt{{.workers = c.workers, .topology = c.workers == 1 ? "1 node x 1 core" : "1 node x 2 cores"}};
  auto src = rill::from(rill::vector_source<std::uint64_t>{in});
  auto sink = [t](std::uint64_t v) { t->add(v); };
  auto by_key = [key](const std::uint64_t&) { return key; };
  rill::job j = c.f == form::range
                    ? std::move(src)
                          .flat_map([n](std::uint64_t i) { return counting_range{i * n, i * n + n}; })
                          .key_by(by_key)
                          .sink(sink)
                    : std::move(src)
                          .flat_map<std::uint64_t>([n](std::uint64_t i, auto& emit) {
                            for (std::uint64_t v = i * n; v < i * n + n; ++v) emit(v);
                          })
                          .key_by(by_key)
                          .sink(sink);
  rill_test::peak_window peak;
  auto rep = rt.run(j);
  const long above_kb = peak.above_base_kb();

  std::uint64_t want_sum = 0;  // brute force over every value the flat_map emits
  for (std::uint64_t v = 0; v < 3 * n; ++v) want_sum += mix(v);
  EXPECT_EQ(t->count.load(), 3 * n);
  EXPECT_EQ(t->sum.load(), want_sum);
  EXPECT_EQ(t->out_of_order.load(), 0u);  // one producer, one key: FIFO, none lost or doubled
  EXPECT_EQ(rep.stage("sink").in, 3 * n);
  EXPECT_TRUE(rep.errors.empty());
  static_assert(sizeof(rill::detail::envelope<rill::detail::keyed<std::uint64_t>>) <= 128);
  std::printf("flat_map %s, %zu worker(s) -> worker %zu, %llu records: peak RSS %ld kB above base %ld kB\n",
              c.f == form::range ? "range" : "emit", c.workers, c.to, (unsigned long long)(3 * n),
              above_kb, peak.base_kb());
  if (!sanitized && peak.known()) {
    EXPECT_LT(above_kb, bound_kb);
  }
}

TEST(flat_map, range_form_emits_30m_records_in_bounded_memory_one_worker) {
  run_case({form::range, 1, 0, 10'000'000});
}
TEST(flat_map, range_form_emits_30m_records_in_bounded_memory_across_workers) {
  run_case({form::range, 2, 1, 10'000'000});
}
TEST(flat_map, emit_form_emits_30m_records_in_bounded_memory_one_worker) {
  run_case({form::emit, 1, 0, 10'000'000});
}
TEST(flat_map, emit_form_emits_30m_records_in_bounded_memory_across_workers) {
  run_case({form::emit, 2, 1, 10'000'000});
}
// Graph (W workers; the sink's key owned by worker W - 1; the source's split on worker 0):
//   vector_source(3 records: 0, 1, 2) -> flat_map(i -> i*N .. i*N+N-1) -> rebalance
//     -> key_by(k) -> sink
// flat_map stops when rebalance's batch is full and no ring takes it (ready()), and the
// ring's consumers stop draining while key_by's exchange is full: nothing holds the
// records. Two workers share the ring, so the sink sees them in any order. The sink
// stalls 8 times as long as above: a producer that grows its batch while the ring is full
// runs 40 MB ahead of it during one stall (two workers).
void run_rebalanced(std::size_t workers) {
  const std::uint64_t n = rill_test::stress_scaled(5'000'000);
  std::vector<rill::record<std::uint64_t>> in;
  for (std::uint64_t i = 0; i < 3; ++i) in.push_back({i, rill::event_time{std::chrono::seconds{i}}});
  auto t = std::make_shared<tally>();
  t->stall_log2 = 25;
  const int key = key_owned_by(workers - 1, workers);
  rill::runtime rt{{.workers = workers, .topology = workers == 1 ? "1 node x 1 core" : "1 node x 2 cores"}};
  auto j = rill::from(rill::vector_source<std::uint64_t>{in})
               .flat_map([n](std::uint64_t i) { return counting_range{i * n, i * n + n}; })
               .rebalance()
               .key_by([key](const std::uint64_t&) { return key; })
               .sink([t](std::uint64_t v) { t->add(v); });
  rill_test::peak_window peak;
  auto rep = rt.run(j);
  const long above_kb = peak.above_base_kb();

  std::uint64_t want_sum = 0;
  for (std::uint64_t v = 0; v < 3 * n; ++v) want_sum += mix(v);
  EXPECT_EQ(t->count.load(), 3 * n);
  EXPECT_EQ(t->sum.load(), want_sum);
  EXPECT_TRUE(rep.errors.empty());
  std::printf("flat_map through rebalance, %zu worker(s), %llu records: peak RSS %ld kB above base %ld kB\n",
              workers, (unsigned long long)(3 * n), above_kb, peak.base_kb());
  if (!sanitized && peak.known()) {
    EXPECT_LT(above_kb, bound_kb);
  }
}

TEST(flat_map, emits_15m_records_through_rebalance_in_bounded_memory_one_worker) { run_rebalanced(1); }
TEST(flat_map, emits_15m_records_through_rebalance_in_bounded_memory_two_workers) { run_rebalanced(2); }

// The consumer is the emitting worker itself: key_by hands every record over in place.
TEST(flat_map, emitting_into_its_own_worker_completes_two_workers) {
  run_case({form::emit, 2, 0, 1'000'000});
  run_case({form::range, 2, 0, 1'000'000});
}

// Graph (2 workers):  vector_source(t = 0, 10, 20 s) -> flat_map(100,000 copies each, same
// time) -> key_by(one key on worker 1) -> tumbling 10 s count -> sink
// The progress markers that arrive while flat_map is suspended wait for the records before
// them: no record is late, and each window holds exactly its input's copies.
TEST(flat_map, held_progress_never_overtakes_suspended_records) {
  const std::uint64_t n = rill_test::stress_scaled(100'000);
  std::vector<rill::record<std::uint64_t>> in;
  for (std::uint64_t i = 0; i < 3; ++i) in.push_back({i, rill::event_time{std::chrono::seconds{10 * i}}});
  struct row {
    std::int64_t start_s;
    std::uint64_t count;
  };
  auto rows = std::make_shared<std::vector<row>>();
  const int key = key_owned_by(1, 2);
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  auto j = rill::from(rill::vector_source<std::uint64_t>{in})
               .flat_map<std::uint64_t>([n](std::uint64_t i, auto& emit) {
                 for (std::uint64_t v = 0; v < n; ++v) emit(i);
               })
               .key_by([key](const std::uint64_t&) { return key; })
               .window(rill::tumbling{10s}, {.max_delay = 0s})
               .name("w")
               .count()
               .sink([rows](rill::keyed_window_result<int, std::uint64_t>&& r) {
                 rows->push_back({std::chrono::duration_cast<std::chrono::seconds>(r.start.time_since_epoch()).count(),
                                  r.value});
               });
  auto rep = rt.run(j);
  EXPECT_EQ(rep.stage("w").late, 0u);
  ASSERT_EQ(rows->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*rows)[i].start_s, std::int64_t(10 * i));
    EXPECT_EQ((*rows)[i].count, n);
  }
}

// Graph:  vector_source(0..4) -> flat_map(-> const std::vector<int>& of its own table)
//         -> key_by(one key on worker 1) -> sink      (2 workers)
// A range returned by reference is read in place and copied out: the table stays intact
// for the next record.
TEST(flat_map, range_returned_by_reference_is_copied_not_moved) {
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  const int key = key_owned_by(1, 2);
  struct table_fn {
    std::vector<std::string> table{"a", "bb", "ccc"};
    const std::vector<std::string>& operator()(int) const { return table; }
  };
  std::vector<rill::record<int>> in;
  for (int i = 0; i < 5; ++i) in.push_back({i, rill::event_time{}});
  auto chars = std::make_shared<std::atomic<std::size_t>>(0);
  auto j = rill::from(rill::vector_source<int>{in})
               .flat_map(table_fn{})
               .key_by([key](const std::string&) { return key; })
               .sink([chars](std::string s) { chars->fetch_add(s.size()); });
  rt.run(j);
  EXPECT_EQ(chars->load(), 5u * (1 + 2 + 3));
}

// An exception from the emit form's f, thrown on its fiber after it was suspended, stops
// the run and is rethrown by runtime::run.
TEST(flat_map, exception_from_a_suspended_emit_call_is_rethrown) {
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  const int key = key_owned_by(1, 2);
  std::vector<rill::record<int>> in{{1, rill::event_time{}}};
  auto j = rill::from(rill::vector_source<int>{in})
               .flat_map<int>([](int x, auto& emit) {
                 for (int v = 0; v < 100'000; ++v) emit(x);
                 throw std::runtime_error("f failed after 100000 outputs");
               })
               .key_by([key](const int&) { return key; })
               .sink([](int) {});
  EXPECT_THROW(
      {
        try {
          rt.run(j);
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "f failed after 100000 outputs");
          throw;
        }
      },
      std::runtime_error);
}

// A run that fails while the emit form's f is suspended mid-call (the sink throws after
// 1,000,000 of 30,000,000 outputs, so the exchange fills and f waits inside emit) ends
// with the sink's exception; destroying the stage unwinds f's frames: the object f holds
// on its fiber's stack is destroyed exactly once.
TEST(flat_map, run_failing_downstream_unwinds_a_suspended_emit_call) {
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  const int key = key_owned_by(1, 2);
  auto destroyed = std::make_shared<std::atomic<int>>(0);
  struct counts_destruction {
    std::shared_ptr<std::atomic<int>> n;
    ~counts_destruction() { n->fetch_add(1); }
  };
  auto seen = std::make_shared<std::atomic<std::uint64_t>>(0);
  std::vector<rill::record<int>> in{{1, rill::event_time{}}};
  {
    auto j = rill::from(rill::vector_source<int>{in})
                 .flat_map<int>([destroyed](int x, auto& emit) {
                   counts_destruction guard{destroyed};
                   for (int v = 0; v < 30'000'000; ++v) emit(x);
                 })
                 .key_by([key](const int&) { return key; })
                 .sink([seen](int) {
                   if (seen->fetch_add(1) + 1 == 1'000'000) throw std::runtime_error("sink failed");
                 });
    EXPECT_THROW(rt.run(j), std::runtime_error);
  }
  EXPECT_GE(seen->load(), 1'000'000u);
  EXPECT_LT(seen->load(), 30'000'000u);
  EXPECT_EQ(destroyed->load(), 1);
}

}  // namespace

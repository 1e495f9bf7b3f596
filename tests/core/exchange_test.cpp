// exchange_test — key_by's exchange (core/include/rill/core/exchange.hpp), driven by hand
// on one thread: worker 0 produces, worker 1 consumes, each drain called directly.
//
//   push(from 0, to 1) --batches--> inbox of worker 1 (bounded) --drain(1)--> counting stage
//
// Checks: drained batch buffers go back to the producer, so a steady stream of batches
// allocates nothing per batch; with more producers than inbox batches, every producer's
// marker batch passes in one round; a marker broadcast holds no record-sized buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include "rill/core/exchange.hpp"

namespace {

// Heap allocations made by this thread while `counting` is set (operator new below).
thread_local bool counting = false;
thread_local std::size_t allocations = 0, allocated_bytes = 0;

/// Keeps the values of the records it is given.
struct collect final : rill::stage_in<int> {
  std::vector<int> values;
  void on_record(std::size_t, rill::record<int>&& r) override { values.push_back(r.value); }
  void on_progress(std::size_t, rill::event_time) override {}
  void on_end(std::size_t) override { ++ends; }
  std::size_t ends = 0;
};

rill::detail::envelope<int> record_of(int v) {
  rill::detail::envelope<int> e;
  e.rec = rill::record<int>{v, rill::event_time{std::chrono::seconds{v}}};
  return e;
}

/// An exchange of 2 workers whose worker 1 feeds `down`; wake-ups of worker 1's drain are
/// dropped (the test drains by hand).
struct two_workers {
  rill::detail::exchange<int> ex;
  two_workers(std::size_t batch_records, std::size_t inbox_batches, collect& down)
      : ex(2, batch_records, inbox_batches) {
    ex.bind_consumer(1, [](std::function<void()>) {}, &down, 1);
  }
};

}  // namespace

void* operator new(std::size_t n) {
  if (counting) ++allocations, allocated_bytes += n;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc{};
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

TEST(exchange, drained_batch_buffers_are_reused_by_the_producer) {
  collect down;
  down.values.reserve(100'000);
  constexpr std::size_t batch = 256;
  two_workers w{batch, 4, down};
  int v = 0;
  auto one_batch = [&] {
    for (std::size_t i = 0; i < batch; ++i) w.ex.push(0, 1, record_of(v++));
    ASSERT_TRUE(w.ex.flush(0));
    w.ex.drain(1);
  };
  for (int i = 0; i < 4; ++i) one_batch();  // warm-up: the buffers in circulation exist
  counting = true;
  allocations = 0;
  for (int i = 0; i < 100; ++i) one_batch();
  counting = false;
  EXPECT_EQ(allocations, 0u);
  ASSERT_EQ(down.values.size(), 104 * batch);
  for (std::size_t i = 0; i < down.values.size(); ++i) ASSERT_EQ(down.values[i], int(i));
}

// 200 producers, one consumer whose inbox was asked for 4 batches: the end marker of
// every producer is accepted by its first flush (the inbox has room for one batch per
// producer; the envelope bound, 4 x 256, is far away), none needs a retry.
TEST(exchange, every_producer_s_marker_batch_fits_in_one_round) {
  constexpr std::size_t workers = 200;
  collect down;
  rill::detail::exchange<int> ex{workers, 256, 4};
  std::size_t wakes = 0;
  ex.bind_consumer(0, [&](std::function<void()>) { ++wakes; }, &down, workers);
  for (std::size_t from = 1; from < workers; ++from) {
    rill::detail::envelope<int> end;
    end.k = rill::detail::envelope<int>::kind::end;
    end.input = std::uint32_t(from);
    ex.push(from, 0, std::move(end));
    EXPECT_TRUE(ex.flush(from)) << "producer " << from;
  }
  EXPECT_EQ(wakes, 1u);  // the consumer slept until the first batch; then a drain is due
  while (ex.drain(0) == rill::detail::exchange<int>::drained::more) {
  }
  EXPECT_EQ(down.ends, workers - 1);
}

// A progress marker broadcast to 64 workers, sent and drained: the producer allocates
// about one envelope per destination, not a batch buffer of 256 records for each (a
// thousand workers broadcasting to a thousand would hold a million such buffers).
TEST(exchange, a_marker_broadcast_takes_no_record_sized_buffers) {
  constexpr std::size_t workers = 64;
  collect down;
  rill::detail::exchange<int> ex{workers, 256, 64};
  for (std::size_t to = 0; to < workers; ++to) ex.bind_consumer(to, [](std::function<void()>) {}, &down, 1);
  rill::detail::envelope<int> progress;
  progress.k = rill::detail::envelope<int>::kind::progress;
  progress.frontier = rill::event_time{std::chrono::seconds{1}};
  ex.broadcast(0, progress);  // warm-up: the producer's list of destinations exists
  ASSERT_TRUE(ex.flush(0));
  counting = true;
  allocated_bytes = 0;
  progress.frontier = rill::event_time{std::chrono::seconds{2}};
  ex.broadcast(0, progress);
  ASSERT_TRUE(ex.flush(0));
  counting = false;
  EXPECT_LT(allocated_bytes, workers * 8 * sizeof(rill::detail::envelope<int>));
}

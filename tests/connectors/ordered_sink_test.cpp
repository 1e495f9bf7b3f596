// ordered_sink_test — rill::ordered_sink writes a record only once every worker's frontier
// has passed its time, in (time, less) order, each exactly once: a hand-worked case on 2
// workers, and P threads writing and reporting progress at once, with Write on the
// releasing worker and on the sink's writer thread (run under TSan: label
// concurrency).
//
//   worker 0 ..P-1: write(records at or after its frontier), progress(frontier), ...,
//                   end()  ->  one ordered_sink  ->  Write appends to one vector
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "rill/connectors/ordered_sink.hpp"

namespace {

using namespace std::chrono_literals;

struct item {
  std::uint32_t worker;
  std::uint32_t seq;
};
struct by_origin {
  bool operator()(const item& a, const item& b) const {
    return std::tie(a.worker, a.seq) < std::tie(b.worker, b.seq);
  }
};
struct written {
  rill::event_time t;
  item v;
};
// Called by the sink on one releasing worker at a time (its output lock), or on its writer
// thread.
struct append {
  std::vector<written>* out;
  void operator()(rill::event_time t, const item& v) const { out->push_back({t, v}); }
};
using sink = rill::ordered_sink<item, by_origin, append>;

rill::event_time at(std::chrono::nanoseconds d) { return rill::event_time{d}; }

TEST(ordered_sink, writes_once_every_frontier_passed_in_time_then_key_order) {
  std::vector<written> out;
  sink s{2, by_origin{}, append{&out}};
  s.write(1, {item{1, 0}, at(5s)});
  s.write(0, {item{0, 0}, at(5s)});
  s.write(0, {item{0, 1}, at(7s)});
  s.progress(0, at(9s));  // worker 1 still at -infinity
  EXPECT_TRUE(out.empty());
  s.progress(1, at(5s));  // 5 s is not passed: a record at 5 s may still come
  EXPECT_TRUE(out.empty());
  s.progress(1, at(6s));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].v.worker, 0u);  // same time: by_origin
  EXPECT_EQ(out[1].v.worker, 1u);
  s.progress(1, at(6s));  // no change: nothing more
  EXPECT_EQ(s.written(), 2u);
  s.end(1);  // worker 0's frontier (9 s) passed 7 s
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].t, at(7s));
  s.write(0, {item{0, 2}, at(20s)});
  s.end(0);  // every worker ended: everything goes
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[3].v.seq, 2u);
  EXPECT_EQ(s.written(), 4u);
}

// Worker threads write and progress at random (times never below their frontier); every
// record comes out once, in (time, by_origin) order. `options`: how the sink writes.
void concurrent_writers_lose_nothing_and_keep_the_order(rill::ordered_sink_options options) {
  constexpr std::uint32_t workers = 4, steps = 20'000;
  std::vector<written> out;
  sink s{workers, by_origin{}, append{&out}, options};
  std::vector<std::thread> ts;
  std::vector<std::uint32_t> sent(workers, 0);
  for (std::uint32_t w = 0; w < workers; ++w)
    ts.emplace_back([&, w] {
      std::mt19937 rng(w);
      std::int64_t frontier = 0;  // ns
      for (std::uint32_t i = 0; i < steps; ++i) {
        // Records at or after this worker's frontier (never older), sometimes none.
        for (std::uint32_t k = rng() % 3; k-- > 0;)
          s.write(w, {item{w, sent[w]++},
                      at(std::chrono::nanoseconds{frontier + std::int64_t(rng() % 50)})});
        frontier += std::int64_t(rng() % 20);
        s.progress(w, at(std::chrono::nanoseconds{frontier}));
      }
      s.end(w);
    });
  for (auto& t : ts) t.join();
  std::size_t total = 0;
  for (auto n : sent) total += n;
  ASSERT_EQ(out.size(), total);
  EXPECT_EQ(s.written(), total);
  for (std::size_t i = 1; i < out.size(); ++i)
    ASSERT_FALSE(std::tie(out[i].t, out[i].v.worker, out[i].v.seq) <
                 std::tie(out[i - 1].t, out[i - 1].v.worker, out[i - 1].v.seq))
        << "out of order at " << i;
  std::vector<std::vector<bool>> seen(workers);
  for (std::uint32_t w = 0; w < workers; ++w) seen[w].assign(sent[w], false);
  for (const auto& o : out) {
    ASSERT_FALSE(seen[o.v.worker][o.v.seq]) << "written twice";
    seen[o.v.worker][o.v.seq] = true;
  }
}

TEST(ordered_sink, concurrent_writers_lose_nothing_and_keep_the_order) {
  concurrent_writers_lose_nothing_and_keep_the_order({});
}

// The same with Write on the sink's thread, and a queue bound small enough that releases
// wait for it; once every end() returned, everything is written.
TEST(ordered_sink, writer_thread_loses_nothing_and_keeps_the_order) {
  concurrent_writers_lose_nothing_and_keep_the_order({.writer_thread = true, .max_queued = 16});
  concurrent_writers_lose_nothing_and_keep_the_order({.writer_thread = true});
}

TEST(ordered_sink, writer_thread_has_written_everything_when_the_last_end_returns) {
  std::vector<written> out;
  sink s{2, by_origin{}, append{&out}, {.writer_thread = true}};
  for (std::uint32_t i = 0; i < 1000; ++i) s.write(i % 2, {item{i % 2, i}, at(std::chrono::seconds{i % 7})});
  s.end(0);
  s.end(1);
  ASSERT_EQ(out.size(), 1000u);  // end(1) waited for the writer: no race on `out`
  EXPECT_EQ(s.written(), 1000u);
  EXPECT_EQ(out.front().t, at(0s));
  EXPECT_EQ(out.back().t, at(6s));
}

}  // namespace

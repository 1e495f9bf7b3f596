// ordered_sink_test — rill::ordered_sink writes a record only once every worker's frontier
// has passed its time, in (time, less) order, each exactly once: a hand-worked case on 2
// workers, and P threads writing and reporting progress at once, with Write on the
// releasing worker and on the sink's writer thread, sorted there or on the workers
// (sort_on_workers), with a plain and a formatting Write (run under TSan: label
// concurrency).
//
//   worker 0 ..P-1: write(records at or after its frontier), progress(frontier), ...,
//                   end()  ->  one ordered_sink  ->  Write appends to one vector
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
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
// The same order with a sort key (rill::keyed_order): the sink sorts (key, record) pairs.
// Counts sort_key's calls (atomic: workers seal at once).
struct by_origin_keyed : by_origin {
  std::atomic<std::size_t>* keys;
  std::uint64_t sort_key(const item& v) const {
    keys->fetch_add(1, std::memory_order_relaxed);
    return std::uint64_t{v.worker} << 32 | v.seq;
  }
};
static_assert(rill::keyed_order<by_origin_keyed, item>);
static_assert(!rill::keyed_order<by_origin, item>);
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

// A formatting Write: format() makes "worker:seq\n" and counts the calls per worker (one
// slot per worker: the sink never calls it for one worker on two threads at once);
// operator() keeps the record and the bytes it was given.
struct append_text {
  std::vector<written>* out;
  std::vector<std::string>* bytes;
  std::vector<std::size_t>* formatted;  // per worker
  void format(std::size_t worker, rill::event_time, const item& v, std::string& b) const {
    b += std::to_string(v.worker) + ':' + std::to_string(v.seq) + '\n';
    ++(*formatted)[worker];
  }
  void operator()(rill::event_time t, const item& v, std::string_view b) const {
    out->push_back({t, v});
    bytes->emplace_back(b);
  }
};
static_assert(rill::formatting_writer<append_text, item>);
static_assert(!rill::formatting_writer<append, item>);

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
// record comes out once, in (time, by_origin) order. `options`: how the sink writes;
// `formatting`: append_text (each record formatted once, by the worker that wrote it,
// and written with its own bytes) instead of append.
// `Less`: by_origin, or by_origin_keyed (then every record's key is taken exactly once,
// when its run is sorted).
template <class Less = by_origin>
void concurrent_writers_lose_nothing_and_keep_the_order(rill::ordered_sink_options options,
                                                         bool formatting = false) {
  constexpr std::uint32_t workers = 4, steps = 20'000;
  std::vector<written> out;
  std::vector<std::string> bytes;
  std::vector<std::size_t> formatted(workers, 0);
  std::atomic<std::size_t> keys{0};
  Less less{};
  if constexpr (rill::keyed_order<Less, item>) less.keys = &keys;
  rill::ordered_sink<item, Less, append> plain{workers, less, append{&out}, options};
  rill::ordered_sink<item, Less, append_text> text{
      workers, less, append_text{&out, &bytes, &formatted}, options};
  auto write = [&](std::uint32_t w, rill::record<item>&& r) {
    if (formatting) text.write(w, std::move(r));
    else plain.write(w, std::move(r));
  };
  auto progress = [&](std::uint32_t w, rill::event_time t) {
    if (formatting) text.progress(w, t);
    else plain.progress(w, t);
  };
  std::vector<std::thread> ts;
  std::vector<std::uint32_t> sent(workers, 0);
  for (std::uint32_t w = 0; w < workers; ++w)
    ts.emplace_back([&, w] {
      std::mt19937 rng(w);
      std::int64_t frontier = 0;  // ns
      for (std::uint32_t i = 0; i < steps; ++i) {
        // Records at or after this worker's frontier (never older), sometimes none.
        for (std::uint32_t k = rng() % 3; k-- > 0;)
          write(w, {item{w, sent[w]++},
                    at(std::chrono::nanoseconds{frontier + std::int64_t(rng() % 50)})});
        frontier += std::int64_t(rng() % 20);
        progress(w, at(std::chrono::nanoseconds{frontier}));
      }
      if (formatting) text.end(w);
      else plain.end(w);
    });
  for (auto& t : ts) t.join();
  std::size_t total = 0;
  for (auto n : sent) total += n;
  ASSERT_EQ(out.size(), total);
  EXPECT_EQ(formatting ? text.written() : plain.written(), total);
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
  if constexpr (rill::keyed_order<Less, item>) {
    EXPECT_EQ(keys.load(), total);
  }
  if (!formatting) return;
  ASSERT_EQ(bytes.size(), out.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(bytes[i], std::to_string(out[i].v.worker) + ':' + std::to_string(out[i].v.seq) + '\n')
        << i;
  for (std::uint32_t w = 0; w < workers; ++w) EXPECT_EQ(formatted[w], sent[w]) << "worker " << w;
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

// Each worker sorts its own records (and formats them: append_text) before its frontier
// passes them; the thread that writes merges the workers' runs.
TEST(ordered_sink, sorted_on_workers_loses_nothing_and_keeps_the_order) {
  concurrent_writers_lose_nothing_and_keep_the_order({.sort_on_workers = true});
  concurrent_writers_lose_nothing_and_keep_the_order(
      {.writer_thread = true, .max_queued = 16, .sort_on_workers = true});
  concurrent_writers_lose_nothing_and_keep_the_order(
      {.writer_thread = true, .sort_on_workers = true});
}

// A Less with a sort key: the same order, each record's key taken once, wherever runs are
// sorted.
TEST(ordered_sink, a_sort_key_gives_the_same_order) {
  concurrent_writers_lose_nothing_and_keep_the_order<by_origin_keyed>({});
  concurrent_writers_lose_nothing_and_keep_the_order<by_origin_keyed>({.writer_thread = true});
  concurrent_writers_lose_nothing_and_keep_the_order<by_origin_keyed>({.sort_on_workers = true});
  concurrent_writers_lose_nothing_and_keep_the_order<by_origin_keyed>(
      {.writer_thread = true, .max_queued = 16, .sort_on_workers = true}, true);
}

// A formatting Write gets each record's own bytes, formatted once, whoever formats them.
TEST(ordered_sink, formatting_writer_gets_each_records_bytes_once) {
  concurrent_writers_lose_nothing_and_keep_the_order({}, true);
  concurrent_writers_lose_nothing_and_keep_the_order({.writer_thread = true}, true);
  concurrent_writers_lose_nothing_and_keep_the_order({.sort_on_workers = true}, true);
  concurrent_writers_lose_nothing_and_keep_the_order(
      {.writer_thread = true, .max_queued = 16, .sort_on_workers = true}, true);
}

// A record written below its worker's frontier (against the rule) after the worker sorted
// and formatted that time: still written once, in order, formatted once.
TEST(ordered_sink, a_record_below_the_frontier_is_still_written_once) {
  std::vector<written> out;
  std::vector<std::string> bytes;
  std::vector<std::size_t> formatted(2, 0);
  rill::ordered_sink<item, by_origin, append_text> s{
      2, by_origin{}, append_text{&out, &bytes, &formatted}, {.sort_on_workers = true}};
  s.write(0, {item{0, 1}, at(5s)});
  s.progress(0, at(6s));  // worker 0 sorts and formats its 5 s run
  EXPECT_EQ(formatted[0], 1u);
  s.write(0, {item{0, 0}, at(5s)});  // below worker 0's frontier
  s.progress(0, at(7s));
  s.end(1);
  s.end(0);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].v.seq, 0u);
  EXPECT_EQ(out[1].v.seq, 1u);
  EXPECT_EQ(bytes[0], "0:0\n");
  EXPECT_EQ(bytes[1], "0:1\n");
  EXPECT_EQ(formatted[0], 2u);
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

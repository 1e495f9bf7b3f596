// Tests of the keyed-window DSL (rill/operators/keyed_stream.hpp) on the real runtime: C20
// (FLINK-3554, FLINK-2577): (a) clean end, (b) stop with stop_policy::discard and ::fire,
// (c) an input that ends early; and, on 2 workers, tumbling counts checked against a
// std::map, sliding counts and session sums against the brute-force reference
// (keyed_window_model.hpp), with the stage counters; the ready aggregations through the
// DSL. Every expected value comes from the model, a std::map built here, or the hand
// computation in the comment; none from a run of the operator.
#include "rill/operators/keyed_stream.hpp"

#include "../support/event_ms.hpp"
#include "../support/collected.hpp"
#include "../support/peak_memory.hpp"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "keyed_window_model.hpp"
#include "rill/core/runtime.hpp"

using namespace std::chrono_literals;
namespace model = keyed_window_model;

namespace {

using rill::event_time;

using rill_test::ms;
using rill_test::to_ms;

// One input record: its id and key.
struct ev {
  int id;
  int key;
};

using rill_test::collected;  // a thread-safe collector shared by every worker's sink copy

// (key, start ms, end ms, ids sorted, update)
using ids_row = std::tuple<int, std::int64_t, std::int64_t, std::vector<int>, bool>;
using ids_result = rill::keyed_window_result<int, std::vector<int>>;

ids_row to_row(ids_result&& r) {
  std::sort(r.value.begin(), r.value.end());
  return {r.key, to_ms(r.start), to_ms(r.end), std::move(r.value), r.update};
}

// The ids of a window's records, through .aggregate(init, add, merge).
auto add_id = [](std::vector<int>& a, const ev& e) { a.push_back(e.id); };
auto merge_ids = [](std::vector<int>& a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
};
auto key_of = [](const ev& e) { return e.key; };

std::vector<rill::record<ev>> records_at(std::initializer_list<std::int64_t> times_ms) {
  std::vector<rill::record<ev>> v;
  for (std::int64_t t : times_ms) v.push_back({ev{int(t), 0}, ms(t), std::nullopt, nullptr});
  return v;
}

// ---------------------------------------------------------------------------------------
// C20 (FLINK-3554, FLINK-2577)
// ---------------------------------------------------------------------------------------

// C20 (a). Graph: vector_source(1 split: 1000, 2000, 12500 ms) -> key_by(0)
//   -> tumbling 10000 ms, delay 5000 ms -> ids -> sink        on 1 and 2 workers
// W after 12500 is 7500: nothing fires before the end; at EOF W = +inf releases
// [0,10000) = {1000, 2000} and [10000,20000) = {12500}. Nothing is late.
TEST(keyed_stream, c20a_bounded_source_fires_pending_windows_at_end) {
  for (std::size_t workers : {1u, 2u}) {
    rill::runtime rt{{.workers = workers, .topology = "1 node x 2 cores"}};
    auto out = std::make_shared<collected<ids_row>>();
    auto late = std::make_shared<std::atomic<int>>(0);
    auto j = rill::from(rill::vector_source<ev>{records_at({1000, 2000, 12500})})
                 .key_by(key_of)
                 .window(rill::tumbling{10000ms}, {.max_delay = 5000ms})
                 .late([late](rill::record<ev>&&, const int&, event_time, event_time) { ++*late; })
                 .name("w")
                 .aggregate(std::vector<int>{}, add_id, merge_ids)
                 .sink([out](ids_result&& r) { out->add(to_row(std::move(r))); });
    const auto rep = rt.run(j);
    std::sort(out->items.begin(), out->items.end());
    EXPECT_EQ(out->items, (std::vector<ids_row>{{0, 0, 10000, {1000, 2000}, false},
                                                {0, 10000, 20000, {12500}, false}}))
        << workers << " workers";
    EXPECT_EQ(late->load(), 0);
    EXPECT_FALSE(rep.stopped);
    EXPECT_EQ(rep.stage("w").in, 3u);
    EXPECT_EQ(rep.stage("w").out, 2u);
    EXPECT_EQ(rep.stage("w").late, 0u);
    EXPECT_EQ(rep.stage("w").discarded, 0u);
  }
}

// The stall detector names the window stage: a record whose fold (the aggregate's add)
// spins 300 ms is one stall of at least 300 ms on operator "slow window", not an
// unnamed one. 1 worker, threshold 100 ms; the other two adds return at once.
TEST(keyed_stream, stall_inside_a_window_names_the_window) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .stall_threshold = 100ms}};
  auto out = std::make_shared<collected<ids_row>>();
  auto j = rill::from(rill::vector_source<ev>{records_at({1000, 2000, 12500})})
               .key_by(key_of)
               .window(rill::tumbling{10000ms}, {.max_delay = 5000ms})
               .name("slow window")
               .aggregate(
                   std::vector<int>{},
                   [](std::vector<int>& acc, const ev& e) {
                     if (e.id == 2000) {
                       const auto until = std::chrono::steady_clock::now() + 300ms;
                       while (std::chrono::steady_clock::now() < until) {
                       }
                     }
                     add_id(acc, e);
                   },
                   merge_ids)
               .sink([out](ids_result&& r) { out->add(to_row(std::move(r))); }, "rows");
  ::testing::internal::CaptureStderr();
  const auto rep = rt.run(j);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rep.stalls.size(), 1u) << err;
  EXPECT_EQ(rep.stalls[0].op, "slow window") << err;
  EXPECT_GE(rep.stalls[0].duration, 300ms);
  EXPECT_NE(err.find("ran operator 'slow window' for 0."), std::string::npos) << err;
  std::sort(out->items.begin(), out->items.end());
  EXPECT_EQ(out->items, (std::vector<ids_row>{{0, 0, 10000, {1000, 2000}, false}, {0, 10000, 20000, {12500}, false}}));
}

// Emits `records` in its first poll and then asks the runtime to stop. Were it polled
// again it would emit a record at 50000 ms (the driver must not poll after a stop).
struct stopping_source {
  using value_type = ev;
  std::vector<rill::record<ev>> records;
  rill::runtime* rt;
  std::size_t split_count() const { return 1; }
  struct reader {
    const stopping_source* s;
    int polls = 0;
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t) {
      if (polls++ == 0) {
        for (const auto& r : s->records) emit(rill::record<ev>(r));
        s->rt->request_stop();
      } else {
        emit(rill::record<ev>{ev{50000, 0}, ms(50000), std::nullopt, nullptr});
      }
      return rill::poll_status::more;
    }
    std::string error() const { return {}; }
  };
  reader open(std::size_t) const { return reader{this}; }
};

// C20 (b). Graph: stopping_source(1000, 2000, 12500 ms, then request_stop) -> key_by(0)
//   -> tumbling 10000 ms, delay 5000 ms -> ids -> sink        on 2 workers
// At the stop W = 7500: [0,10000) and [10000,20000) are open.
//   discard (default): neither is released; 2 (key, window) states are counted discarded.
//   fire (flink stop --drain): both are released as at a clean end.
TEST(keyed_stream, c20b_stop_discards_or_fires_open_windows) {
  for (auto policy :
       {rill::window_options::stop_policy::discard, rill::window_options::stop_policy::fire}) {
    const bool fire = policy == rill::window_options::stop_policy::fire;
    rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
    auto out = std::make_shared<collected<ids_row>>();
    auto j = rill::from(stopping_source{records_at({1000, 2000, 12500}), &rt})
                 .key_by(key_of)
                 .window(rill::tumbling{10000ms}, {.max_delay = 5000ms, .on_stop = policy})
                 .name("w")
                 .aggregate(std::vector<int>{}, add_id, merge_ids)
                 .sink([out](ids_result&& r) { out->add(to_row(std::move(r))); });
    const auto rep = rt.run(j);
    SCOPED_TRACE(fire ? "stop_policy::fire" : "stop_policy::discard");
    EXPECT_TRUE(rep.stopped);
    EXPECT_EQ(rep.stage("source").out, 3u);
    EXPECT_EQ(rep.stage("w").in, 3u);
    std::sort(out->items.begin(), out->items.end());
    if (fire) {
      EXPECT_EQ(out->items, (std::vector<ids_row>{{0, 0, 10000, {1000, 2000}, false},
                                                  {0, 10000, 20000, {12500}, false}}));
      EXPECT_EQ(rep.stage("w").discarded, 0u);
      EXPECT_EQ(rep.stage("w").out, 2u);
    } else {
      EXPECT_TRUE(out->items.empty());
      EXPECT_EQ(rep.stage("w").discarded, 2u);
      EXPECT_EQ(rep.stage("w").out, 0u);
    }
  }
}

// Two splits: split 0 (A, behind) and split 1 (B, ahead). A emits its records, waits
// until B has emitted its own, then asks the runtime to stop; B then only idles.
struct two_speed_source {
  using value_type = ev;
  std::vector<rill::record<ev>> a, b;
  rill::runtime* rt;
  std::shared_ptr<std::atomic<bool>> b_sent = std::make_shared<std::atomic<bool>>(false);
  std::size_t split_count() const { return 2; }
  struct reader {
    const two_speed_source* s;
    std::size_t split;
    int polls = 0;
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t) {
      const bool first = polls++ == 0;
      if (split == 1) {
        if (first) {
          for (const auto& r : s->b) emit(rill::record<ev>(r));
          s->b_sent->store(true);
        }
        return rill::poll_status::idle;
      }
      if (first) {
        for (const auto& r : s->a) emit(rill::record<ev>(r));
        return rill::poll_status::more;
      }
      if (!s->b_sent->load()) return rill::poll_status::idle;
      s->rt->request_stop();
      return rill::poll_status::more;
    }
    std::string error() const { return {}; }
  };
  reader open(std::size_t split) const { return reader{this, split}; }
};

// C20 (b) with two inputs. Graph: two_speed_source(A: 1000, 2000; B: 1500, 30000, 40000)
//   -> key_by(0) -> tumbling 10000 ms, delay 0 -> ids -> sink     on 1 worker (both
// splits on one loop: A's end reaches the window before B's)
// At the stop W = min(2000, 40000) = 2000: [0,10000), [30000,40000) and [40000,50000)
// are all open. A stopped input has not sent everything: its end must not count as
// +infinity (that is the clean-end rule of C20 (c)), or W jumps to B's 40000 and releases
// [0,10000) and [30000,40000), windows A may still have had records for. Expected: no
// window released, 3 discarded.
TEST(keyed_stream, c20b_stop_with_two_inputs_releases_no_open_window) {
  rill::runtime rt{{.workers = 1, .topology = "1 node x 1 core"}};
  auto out = std::make_shared<collected<ids_row>>();
  auto j =
      rill::from(two_speed_source{records_at({1000, 2000}), records_at({1500, 30000, 40000}), &rt})
          .key_by(key_of)
          .window(rill::tumbling{10000ms}, {.max_delay = 0ms})
          .name("w")
          .aggregate(std::vector<int>{}, add_id, merge_ids)
          .sink([out](ids_result&& r) { out->add(to_row(std::move(r))); });
  const auto rep = rt.run(j);
  EXPECT_TRUE(rep.stopped);
  EXPECT_EQ(rep.stage("w").in, 5u);
  EXPECT_EQ(out->items, (std::vector<ids_row>{})) << "windows released after the stop";
  EXPECT_EQ(rep.stage("w").discarded, 3u);
}

// Two splits: A ends cleanly after its records; B emits its records, then idles until
// the sink has seen the window [20000, 30000) (or 10 s pass), then ends.
struct early_end_source {
  using value_type = ev;
  std::vector<rill::record<ev>> a, b;
  std::shared_ptr<std::atomic<bool>> released = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> b_ended = std::make_shared<std::atomic<bool>>(false);
  std::size_t split_count() const { return 2; }
  struct reader {
    const early_end_source* s;
    std::size_t split;
    std::chrono::steady_clock::time_point give_up{};
    int polls = 0;
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t) {
      const bool first = polls++ == 0;
      if (split == 0) {
        for (const auto& r : s->a) emit(rill::record<ev>(r));
        return rill::poll_status::end;
      }
      if (first) {
        for (const auto& r : s->b) emit(rill::record<ev>(r));
        give_up = std::chrono::steady_clock::now() + 10s;
        return rill::poll_status::idle;
      }
      if (!s->released->load() && std::chrono::steady_clock::now() < give_up)
        return rill::poll_status::idle;
      s->b_ended->store(true);
      return rill::poll_status::end;
    }
    std::string error() const { return {}; }
  };
  reader open(std::size_t split) const { return reader{this, split}; }
};

// C20 (c). Graph: early_end_source(A: 1000, 3000, ends; B: 2000, 12000, 25000, 30000,
//   41000, ends later) -> key_by(0) -> tumbling 10000 ms, delay 5000 ms -> ids -> sink
//   on 2 workers (A on worker 0, B on worker 1)
// Once A has ended W follows B alone: 41000 - 5000 = 36000, so [0,10000) =
// {1000, 2000, 3000}, [10000,20000) = {12000} and [20000,30000) = {25000} are released
// while B is still running; [30000,40000) = {30000} and [40000,50000) = {41000} at B's end.
// (B's records in [10000, 30000) give those windows data.) If A held W at 3000 - 5000,
// nothing would be released before B gave up waiting.
TEST(keyed_stream, c20c_ended_input_does_not_hold_the_watermark) {
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  early_end_source src{records_at({1000, 3000}), records_at({2000, 12000, 25000, 30000, 41000})};
  auto released = src.released;
  auto b_ended = src.b_ended;
  using seen_row = std::pair<ids_row, bool>;  // result, B had ended when it arrived
  auto out = std::make_shared<collected<seen_row>>();
  auto j = rill::from(std::move(src))
               .key_by(key_of)
               .window(rill::tumbling{10000ms}, {.max_delay = 5000ms})
               .name("w")
               .aggregate(std::vector<int>{}, add_id, merge_ids)
               .sink([out, released, b_ended](ids_result&& r) {
                 const bool after = b_ended->load();
                 const bool third = to_ms(r.start) == 20000;
                 out->add({to_row(std::move(r)), after});
                 if (third) released->store(true);
               });
  const auto rep = rt.run(j);
  std::sort(out->items.begin(), out->items.end());
  EXPECT_EQ(out->items, (std::vector<seen_row>{{{0, 0, 10000, {1000, 2000, 3000}, false}, false},
                                               {{0, 10000, 20000, {12000}, false}, false},
                                               {{0, 20000, 30000, {25000}, false}, false},
                                               {{0, 30000, 40000, {30000}, false}, true},
                                               {{0, 40000, 50000, {41000}, false}, true}}));
  EXPECT_EQ(rep.stage("w").late, 0u);
  EXPECT_FALSE(rep.stopped);
}

// ---------------------------------------------------------------------------------------
// 2 workers, checked against a std::map and the reference
// ---------------------------------------------------------------------------------------

// Graph: vector_source(2 splits) -> key_by(id * 7919 % 200) -> tumbling 1000 ms,
//   delay 200 ms -> count -> sink     on 2 workers
// 100,000 records; record i is on split i % 2 at i - U[0, 200] ms: within its split no
// record is more than 200 ms behind the largest before it, so none is late whatever the
// interleaving, and the counts are a std::map over (key, floor(t / 1000)).
// A source whose polls are scripted: each poll emits one batch (the driver sends its
// largest time as progress after each), the last ends the input.
struct scripted_source {
  using value_type = ev;
  std::vector<std::vector<rill::record<ev>>> polls;
  std::size_t split_count() const { return 1; }
  struct reader {
    const scripted_source* s;
    std::size_t next = 0;
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t) {
      for (const auto& r : s->polls[next]) emit(rill::record<ev>(r));
      return ++next == s->polls.size() ? rill::poll_status::end : rill::poll_status::more;
    }
    std::string error() const { return {}; }
  };
  reader open(std::size_t) const { return reader{this}; }
};

// A record with id = its time in ms, read from `partition` (-1: no position, so its own
// time is progress) and marked catching_up as a source driver marks a moved partition.
rill::record<ev> at_ms(std::int64_t t, int key, std::int32_t partition = -1, bool catching_up = false) {
  rill::record<ev> r{ev{int(t), key}, ms(t)};
  if (partition >= 0) r.position = rill::source_position{.partition = partition, .catching_up = catching_up, .offset = t};
  return r;
}

// Catch-up lanes (docs/design.md "Kafka source"). Graph: scripted_source -> key_by(key)
//   -> tumbling 10000 ms, delay 0 -> ids -> sink          on 1 worker
// Poll 1: key 0 at 1000, 11000, 21000, 31000, 41000, 45000 (no position): W = 45000, so
//   key 0's [0,10000) .. [30000,40000) fire.
// Poll 2: partition 1 replayed behind W (catching_up), key 1 at 1000, 2000, 12000, 22000,
//   51000, then 47000; and partition 2 at 3000, not catching_up.
//   - 1000 is late for the shared windows and catching up: it opens partition 1's lane,
//     whose W is the partition's own time. Lane W 12000 fires key 1's [0,10000) {1000,
//     2000}; 22000 fires [10000,20000) {12000}; 51000 fires [20000,30000) {22000} and
//     reaches the stage's W (45000): the lane is caught up, and its W stays 51000.
//   - 47000 is late in the lane (47000 < 51000: the partition's own clock), though not
//     for the shared windows: late.
//   - Partition 2's 3000 is not catching up: late, as without lanes.
//   - Partition 1 read again from 5000, catching up (it moved away and back): late in the
//     caught-up lane, which still holds [50000,60000), so that lane is retired (it drains
//     on the stage's W) and a new lane takes 5000: key 1's [0,10000) comes twice, the
//     duplicate of at-least-once, not a loss.
// End: W = +infinity fires key 0's [40000,50000) {41000, 45000}, key 1's [50000,60000)
//   {51000} and the new lane's [0,10000) {5000}. late = 2; catch_up = 7 (partition 1's
//   records).
TEST(keyed_stream, catching_up_partition_gets_its_own_lane_instead_of_late) {
  rill::runtime rt{{.workers = 1, .topology = "1 node x 1 core"}};
  auto out = std::make_shared<collected<ids_row>>();
  auto late = std::make_shared<collected<int>>();
  scripted_source src{{{at_ms(1000, 0), at_ms(11000, 0), at_ms(21000, 0), at_ms(31000, 0), at_ms(41000, 0),
                        at_ms(45000, 0)},
                       {at_ms(1000, 1, 1, true), at_ms(2000, 1, 1, true), at_ms(12000, 1, 1, true),
                        at_ms(22000, 1, 1, true), at_ms(51000, 1, 1, false), at_ms(47000, 1, 1, false),
                        at_ms(3000, 2, 2, false), at_ms(5000, 1, 1, true)}}};
  auto j = rill::from(std::move(src))
               .key_by(key_of)
               .window(rill::tumbling{10000ms}, {.max_delay = 0ms})
               .late([late](rill::record<ev>&& r, const int&, event_time, event_time) { late->add(r.value.id); })
               .name("w")
               .aggregate(std::vector<int>{}, add_id, merge_ids)
               .sink([out](ids_result&& r) { out->add(to_row(std::move(r))); });
  const auto rep = rt.run(j);
  std::sort(out->items.begin(), out->items.end());
  EXPECT_EQ(out->items, (std::vector<ids_row>{{0, 0, 10000, {1000}, false},
                                              {0, 10000, 20000, {11000}, false},
                                              {0, 20000, 30000, {21000}, false},
                                              {0, 30000, 40000, {31000}, false},
                                              {0, 40000, 50000, {41000, 45000}, false},
                                              {1, 0, 10000, {1000, 2000}, false},
                                              {1, 0, 10000, {5000}, false},
                                              {1, 10000, 20000, {12000}, false},
                                              {1, 20000, 30000, {22000}, false},
                                              {1, 50000, 60000, {51000}, false}}));
  std::sort(late->items.begin(), late->items.end());
  EXPECT_EQ(late->items, (std::vector<int>{3000, 47000}));
  EXPECT_EQ(rep.stage("w").late, 2u);
  EXPECT_EQ(rep.stage("w").catch_up, 7u);
  EXPECT_EQ(rep.stage("w").in, 14u);
  EXPECT_EQ(rep.stage("w").out, 10u);
}

// Catch-up lanes come and go without leaving memory behind. Graph: scripted_source ->
//   key_by(key) -> tumbling 10 s, delay 0 -> count -> sink         on 1 worker
// Episode e (100 s of event time from b = e * 100 s), partition p = e % 4 replayed:
//   poll 1: keys 0..199, one record every 0.1 s over [b, b + 50 s)      -> W = b + 50 s
//   poll 2: partition p, keys 1000..1049, every 0.5 s over [b + 10 s, b + 60 s), marked
//           catching_up below b + 50 s: the first are late for the shared windows, so p
//           gets a lane, which catches up at b + 50 s
//   poll 3: keys 0..199 over [b + 50 s, b + 100 s) and partition p over [b + 60 s,
//           b + 100 s): p's lane follows W; next episode p stops and its lane empties
// Expected, from the input itself: every record counted once (sum of counts = records,
// late = 0), and the (key, window) pairs' checksum equals the one computed here, so no
// pair is missing or emitted twice. Memory: glibc's heap in use (mallinfo2) sampled by
// the sink every 1,000 results; its largest value over the last third of the run is at
// most 64 KiB above its largest over the first third (a lane left behind per episode
// would hold its table: 40 episodes x at least a 4 KiB table).
TEST(keyed_stream, catch_up_lanes_come_and_go_in_bounded_memory) {
  const int episodes = 120;
  scripted_source src;
  std::uint64_t records = 0, expected_sum = 0;
  std::set<std::pair<int, std::int64_t>> pairs;  // (key, window start ms)
  auto add = [&](std::vector<rill::record<ev>>& poll, std::int64_t t, int key, std::int32_t partition,
                 bool catching_up) {
    poll.push_back(at_ms(t, key, partition, catching_up));
    pairs.emplace(key, t / 10000 * 10000);
    ++records;
  };
  for (int e = 0; e < episodes; ++e) {
    const std::int64_t b = std::int64_t(e) * 100000;
    const std::int32_t p = e % 4;
    std::vector<rill::record<ev>> p1, p2, p3;
    for (std::int64_t t = b, i = 0; t < b + 50000; t += 100, ++i) add(p1, t, int(i % 200), -1, false);
    for (std::int64_t t = b + 10000, i = 0; t < b + 60000; t += 500, ++i)
      add(p2, t, 1000 + int(i % 50), p, t < b + 50000);
    for (std::int64_t t = b + 50000, i = 0; t < b + 100000; t += 100, ++i) {
      add(p3, t, int(i % 200), -1, false);
      if (t >= b + 60000 && t % 500 == 0) add(p3, t, 1000 + int(i % 50), p, false);
    }
    src.polls.push_back(std::move(p1));
    src.polls.push_back(std::move(p2));
    src.polls.push_back(std::move(p3));
  }
  for (const auto& [k, w] : pairs) expected_sum += rill_test::mix(std::uint64_t(k) << 40 ^ std::uint64_t(w));

  struct tally {
    std::uint64_t results = 0, counted = 0, sum = 0;
    std::vector<std::size_t> heap;  // mallinfo2().uordblks every 1,000 results
  };
  auto out = std::make_shared<tally>();
  out->heap.reserve(1000);
  rill::runtime rt{{.workers = 1, .topology = "1 node x 1 core"}};
  auto j = rill::from(std::move(src))
               .key_by(key_of)
               .window(rill::tumbling{10000ms}, {.max_delay = 0ms})
               .name("w")
               .count()
               .sink([out](rill::keyed_window_result<int, std::uint64_t>&& r) {
                 out->counted += r.value;
                 out->sum += rill_test::mix(std::uint64_t(r.key) << 40 ^ std::uint64_t(to_ms(r.start)));
                 if (++out->results % 1000 == 0 && out->heap.size() < out->heap.capacity())
                   out->heap.push_back(mallinfo2().uordblks);
               });
  const auto rep = rt.run(j);
  EXPECT_EQ(out->counted, records);
  EXPECT_EQ(out->results, pairs.size());
  EXPECT_EQ(out->sum, expected_sum);
  EXPECT_EQ(rep.stage("w").late, 0u);
  EXPECT_GT(rep.stage("w").catch_up, 0u);
  const std::size_t n = out->heap.size();
  ASSERT_GE(n, 30u);
  if (!rill_test::sanitized) {  // the sanitizers' allocators do not report to mallinfo2
    const auto early = *std::max_element(out->heap.begin(), out->heap.begin() + n / 3);
    const auto late = *std::max_element(out->heap.end() - n / 3, out->heap.end());
    EXPECT_LE(late, early + 64 * 1024) << "heap in use grew from " << early << " to " << late << " bytes";
  }
}

// Output progress once per batch (docs/design.md "Keyed windows", Output progress).
// Graph: vector_source(1 split: t = 0, 1, ..., 9999 ms, key i % 10) -> key_by -> tumbling
// 1000 ms, delay 0 -> count -> a shared sink that logs writes and progress, 1 worker.
// By hand: 10 windows x 10 keys = 100 results of count 100. The source hands over 256
// records per loop turn (source_driver's slice) and flushes before the next: 40 turns,
// so at most 40 markers from flushes and 11 from firing calls (10 windows, the end):
// at most 51 markers, where telling per record gave one per record (10,000). Every
// result comes after no marker larger than its time (end - 1 ms).
TEST(keyed_stream, output_progress_is_told_per_batch_not_per_record) {
  constexpr int n = 10000;
  std::vector<rill::record<ev>> recs;
  for (int i = 0; i < n; ++i) recs.push_back({ev{i, i % 10}, ms(i), std::nullopt, nullptr});
  using result = rill::keyed_window_result<int, std::uint64_t>;
  struct logging_sink {
    std::vector<result> results;
    std::size_t markers = 0, behind = 0;  // behind: results after a larger marker
    event_time last = rill::event_time_min;
    void write(std::size_t, rill::record<result>&& r) {
      if (r.time < last) ++behind;
      results.push_back(std::move(r.value));
    }
    void progress(std::size_t, event_time t) {
      ++markers;
      last = std::max(last, t);
    }
    void end(std::size_t) {}
  };
  auto sink = std::make_shared<logging_sink>();
  rill::runtime rt{{.workers = 1, .topology = "1 node x 1 cores"}};
  rt.run(rill::from(rill::vector_source<ev>{{recs}})
             .key_by(key_of)
             .window(rill::tumbling{1000ms}, {.max_delay = 0ms})
             .count()
             .sink(sink));
  std::map<std::pair<int, std::int64_t>, std::uint64_t> got;
  for (const auto& r : sink->results) got[{r.key, to_ms(r.start)}] = r.value;
  std::map<std::pair<int, std::int64_t>, std::uint64_t> want;
  for (int k = 0; k < 10; ++k)
    for (std::int64_t w = 0; w < 10; ++w) want[{k, w * 1000}] = 100;
  EXPECT_EQ(got, want);
  EXPECT_EQ(sink->results.size(), 100u);
  EXPECT_EQ(sink->behind, 0u);
  EXPECT_GE(sink->markers, 10u);
  EXPECT_LE(sink->markers, 51u);
}

TEST(keyed_stream, tumbling_count_on_two_workers_matches_a_map) {
  constexpr int n = 100000;
  std::mt19937_64 rng{7};
  std::vector<std::vector<rill::record<ev>>> splits(2);
  std::map<std::pair<int, std::int64_t>, std::uint64_t> want;
  for (int i = 0; i < n; ++i) {
    const std::int64_t t =
        i - std::uniform_int_distribution<std::int64_t>{0, 200}(rng)-5000;  // negatives too
    const int key = int(std::int64_t(i) * 7919 % 200);
    splits[std::size_t(i % 2)].push_back({ev{i, key}, ms(t), std::nullopt, nullptr});
    std::int64_t k = t / 1000;
    if (k * 1000 > t) --k;
    ++want[{key, k * 1000}];
  }
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  using result = rill::keyed_window_result<int, std::uint64_t>;
  struct got_row {
    result r;
    std::size_t worker;
  };
  auto out = std::make_shared<collected<got_row>>();
  auto j = rill::from(rill::vector_source<ev>{splits})
               .key_by(key_of)
               .window(rill::tumbling{1000ms}, {.max_delay = 200ms})
               .name("counts")
               .count()
               .sink([out](result&& r) {
                 out->add({std::move(r), rill::this_worker()->id()});
               });
  const auto rep = rt.run(j);
  std::map<std::pair<int, std::int64_t>, std::uint64_t> got;
  std::map<std::size_t, std::int64_t> last_end;  // per worker: results in window-end order
  std::size_t out_of_order = 0, duplicates = 0, bad_bounds = 0;
  for (const auto& [r, w] : out->items) {
    const std::int64_t start = to_ms(r.start);
    if (to_ms(r.end) != start + 1000) ++bad_bounds;
    if (!got.emplace(std::pair{r.key, start}, r.value).second) ++duplicates;
    if (last_end.contains(w) && to_ms(r.end) < last_end[w]) ++out_of_order;
    last_end[w] = to_ms(r.end);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(duplicates, 0u);
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_EQ(bad_bounds, 0u);
  EXPECT_EQ(rep.stage("counts").in, std::uint64_t(n));
  EXPECT_EQ(rep.stage("counts").out, want.size());
  EXPECT_EQ(rep.stage("counts").late, 0u);
  EXPECT_EQ(last_end.size(), 2u);  // both workers held keys
}

// The records of a one-input model stream, in arrival order (1 split: the frontier the
// window sees at each record is the split's, as in the model; see the test below).
std::vector<rill::record<ev>> split_of(const std::vector<model::event>& evs) {
  std::vector<rill::record<ev>> v;
  for (const auto& e : evs)
    if (e.k == model::event::kind::record)
      v.push_back({ev{e.id, e.key}, ms(e.t), std::nullopt, nullptr});
  return v;
}

struct late_seen {
  int id, key;
  std::int64_t start, end;
};

// Runs `assigner` over the records of `evs` on 2 workers (1 split, 200 keys) with
// `.aggregate(ids)`, and compares with the model: the multiset of (key, start, end, ids,
// update), the late side output, per-worker window-end order and the stage counters.
// One split on 2 workers: key_by stamps every record with the split's frontier (largest
// time so far, itself included), and each worker's window sees that frontier before the
// record, so W at a record is the model's W or that record's own time - delay, which is
// below the end of each of its windows: the late decisions are the model's.
template <class Assigner>
void check_on_two_workers(Assigner assigner, const model::options& mo,
                          const std::vector<model::event>& evs, const char* what) {
  const model::output want = model::run(evs, mo);
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  struct got_row {
    ids_row row;
    std::size_t worker;
  };
  auto out = std::make_shared<collected<got_row>>();
  auto late = std::make_shared<collected<late_seen>>();
  auto j = rill::from(rill::vector_source<ev>{split_of(evs)})
               .key_by(key_of)
               .window(assigner, {.max_delay = std::chrono::milliseconds{mo.delay}})
               .late([late](rill::record<ev>&& r, const int& k, event_time s, event_time e) {
                 late->add({r.value.id, k, to_ms(s), to_ms(e)});
               })
               .name("w")
               .aggregate(std::vector<int>{}, add_id, merge_ids)
               .sink([out](ids_result&& r) {
                 out->add({to_row(std::move(r)), rill::this_worker()->id()});
               });
  const auto rep = rt.run(j);
  SCOPED_TRACE(what);

  std::vector<ids_row> got, expected;
  std::map<std::size_t, std::int64_t> last_end;
  std::size_t out_of_order = 0;
  for (auto& [row, w] : out->items) {
    const std::int64_t end = std::get<2>(row);
    if (last_end.contains(w) && end < last_end[w]) ++out_of_order;
    last_end[w] = end;
    got.push_back(row);
  }
  for (const auto& r : want.rows) expected.emplace_back(r.key, r.start, r.end, r.ids, r.update);
  std::sort(got.begin(), got.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(got.size(), expected.size());
  const auto mismatch = std::mismatch(got.begin(), got.end(), expected.begin(), expected.end());
  if (mismatch.first != got.end() || mismatch.second != expected.end())
    ADD_FAILURE() << "first difference at sorted position " << (mismatch.first - got.begin())
                  << ": operator "
                  << (mismatch.first != got.end() ? testing::PrintToString(*mismatch.first)
                                                  : "none")
                  << ", model "
                  << (mismatch.second != expected.end() ? testing::PrintToString(*mismatch.second)
                                                        : "none");
  EXPECT_EQ(out_of_order, 0u);

  std::vector<std::tuple<int, int, std::int64_t, std::int64_t>> got_late, want_late;
  for (const auto& l : late->items) got_late.emplace_back(l.id, l.key, l.start, l.end);
  for (const auto& l : want.late) want_late.emplace_back(l.id, l.key, l.start, l.end);
  std::sort(got_late.begin(), got_late.end());
  EXPECT_EQ(got_late, want_late);

  EXPECT_GT(want.late.size(), 0u);  // the stream has late records
  EXPECT_EQ(rep.stage("w").in, split_of(evs).size());
  EXPECT_EQ(rep.stage("w").out, want.rows.size());
  EXPECT_EQ(rep.stage("w").late, want.late.size());
  EXPECT_EQ(last_end.size(), 2u);
}

// Sliding 1000 ms every 300 ms (does not divide), delay 200 ms, 100,000 records over 200
// keys, 3 % of them late by more than the delay.
TEST(keyed_stream, sliding_count_on_two_workers_matches_reference) {
  const auto evs = model::make_stream(model::one_input_stream(1, 200));
  check_on_two_workers(
      rill::sliding{.size = 1000ms, .slide = 300ms},
      {.s = model::options::shape::aligned, .size = 1000, .slide = 300, .delay = 200}, evs,
      "sliding 1000/300 ms");
}

// Sessions, gap 800 ms, delay 199 ms (even times, odd delay: W never equals a session's
// end; see keyed_window_test.cpp session_matches_reference).
TEST(keyed_stream, session_on_two_workers_matches_reference) {
  const auto evs = model::make_stream(model::one_input_stream(2, 198));
  check_on_two_workers(rill::session{800ms},
                       {.s = model::options::shape::session, .gap = 800, .delay = 199}, evs,
                       "session 800 ms");
}

// The ready aggregations through the DSL, on 2 workers. One key, delay 0, in order:
// (value 4, 1 s) (value -3, 2 s) (value 10, 5 s) (value 7, 12 s); tumbling 10 s:
// [0,10) = {4, -3, 10}: sum 11, min -3, max 10, mean 11/3, reduce(product) -120;
// [10,20) = {7}: 7 for each.
TEST(keyed_stream, dsl_sum_min_max_mean_reduce) {
  std::vector<rill::record<int>> recs = {{4, ms(1000), std::nullopt, nullptr},
                                         {-3, ms(2000), std::nullopt, nullptr},
                                         {10, ms(5000), std::nullopt, nullptr},
                                         {7, ms(12000), std::nullopt, nullptr}};
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  const auto key0 = [](const int&) { return 0; };
  const auto id = [](const int& v) { return v; };
  const auto win = [&] {
    return rill::from(rill::vector_source<int>{recs})
        .key_by(key0)
        .window(rill::tumbling{10s}, {.max_delay = 0s});
  };
  using irow = std::tuple<std::int64_t, std::int64_t, int>;  // start ms, end ms, value
  auto run_int = [&](auto&& windowed_then_agg) {
    auto out = std::make_shared<collected<irow>>();
    rt.run(std::move(windowed_then_agg).sink([out](rill::keyed_window_result<int, int>&& r) {
      out->add({to_ms(r.start), to_ms(r.end), r.value});
    }));
    std::sort(out->items.begin(), out->items.end());
    return out->items;
  };
  EXPECT_EQ(run_int(win().sum(id)), (std::vector<irow>{{0, 10000, 11}, {10000, 20000, 7}}));
  EXPECT_EQ(run_int(win().min(id)), (std::vector<irow>{{0, 10000, -3}, {10000, 20000, 7}}));
  EXPECT_EQ(run_int(win().max(id)), (std::vector<irow>{{0, 10000, 10}, {10000, 20000, 7}}));
  EXPECT_EQ(run_int(win().reduce([](const int& a, const int& b) { return a * b; })),
            (std::vector<irow>{{0, 10000, -120}, {10000, 20000, 7}}));
  auto means = std::make_shared<collected<std::tuple<std::int64_t, double>>>();
  rt.run(win().mean(id).sink([means](rill::keyed_window_result<int, double>&& r) {
    means->add({to_ms(r.start), r.value});
  }));
  std::sort(means->items.begin(), means->items.end());
  EXPECT_EQ(means->items,
            (std::vector<std::tuple<std::int64_t, double>>{{0, 11.0 / 3.0}, {10000, 7.0}}));
  auto counts = std::make_shared<collected<std::tuple<std::int64_t, std::uint64_t>>>();
  rt.run(win().count().sink([counts](rill::keyed_window_result<int, std::uint64_t>&& r) {
    counts->add({to_ms(r.start), r.value});
  }));
  std::sort(counts->items.begin(), counts->items.end());
  EXPECT_EQ(counts->items,
            (std::vector<std::tuple<std::int64_t, std::uint64_t>>{{0, 3}, {10000, 1}}));
}

}  // namespace

// Tests for rill/operators/window_sort.hpp: docs/design.md "window_sort" and the cases C01
// (FLINK-26334), C02 with its idle variant (FLINK-3121), C03 (FLINK-7611). Processing time
// comes from a manual_clock (no sleeps). Event times below are written in ms or s; every
// expected value is worked by hand in the comment next to it, except the brute-force
// reference test, which recomputes the rule from scratch.
#include "rill/operators/window_sort.hpp"
#include "../support/event_ms.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using rill::event_time;
using rill::record;
using rill::window;
using rill::window_sort_options;
using rill::window_sorter;
using late_policy = window_sort_options::late_policy;

using rill_test::ms;
using rill_test::to_ms;
constexpr event_time at(std::chrono::nanoseconds d) { return event_time{d}; }

struct late_record {
  record<int> r;
  event_time start;
  event_time end;
};

// Collects what a window_sorter emits.
struct collector {
  std::vector<window<int>> windows;
  std::vector<late_record> late;

  auto on_window() {
    return [this](window<int>&& w) { windows.push_back(std::move(w)); };
  }
  auto on_late() {
    return [this](record<int>&& r, event_time s, event_time e) {
      late.push_back({std::move(r), s, e});
    };
  }
};

// Event times (ms) of one window's records, in output order.
std::vector<std::int64_t> times_ms(const window<int>& w) {
  std::vector<std::int64_t> out;
  for (const auto& r : w.records) out.push_back(to_ms(r.time));
  return out;
}
std::vector<int> values(const window<int>& w) {
  std::vector<int> out;
  for (const auto& r : w.records) out.push_back(r.value);
  return out;
}

// Single input, processing time irrelevant: push by event time in ms, value = time in ms.
struct one_input {
  rill::manual_clock clk;
  window_sorter<int> ws;
  collector out;
  explicit one_input(window_sort_options o) : ws{o, 1, clk.now()} {}
  void push_ms(std::int64_t t) { push(static_cast<int>(t), ms(t)); }
  void push(int value, event_time t) {
    ws.push(0, record<int>{value, t}, clk.now(), out.on_window(), out.on_late());
  }
  void end() { ws.end(0, out.on_window()); }
};

// docs/design.md "window_sort" worked example.
TEST(window_sort, design_page_example) {
  one_input s{{.length = 10s, .max_delay = 2s}};
  s.push(1, at(1s));
  s.push(5, at(5s));
  s.push(11, at(11s));  // W = 11 - 2 = 9 < 10: nothing fires
  EXPECT_TRUE(s.out.windows.empty());
  EXPECT_EQ(s.ws.watermark(), at(9s));
  s.push(9, at(9s));  // 11 - 9 = 2 <= 2: in time, joins window 0
  EXPECT_EQ(s.ws.late(), 0u);
  EXPECT_TRUE(s.out.windows.empty());
  s.push(15, at(15s));  // W = 15 - 2 = 13 >= 10: window 0 fires
  ASSERT_EQ(s.out.windows.size(), 1u);
  const auto& w0 = s.out.windows[0];
  EXPECT_EQ(w0.start, at(0s));
  EXPECT_EQ(w0.end, at(10s));
  EXPECT_EQ(values(w0), (std::vector<int>{1, 5, 9}));
  EXPECT_FALSE(w0.early);
  EXPECT_EQ(s.ws.open_windows(), 1u);  // [10 s, 20 s) holds 11, 15
  EXPECT_EQ(s.ws.buffered(), 2u);
  s.end();
  ASSERT_EQ(s.out.windows.size(), 2u);
  EXPECT_EQ(values(s.out.windows[1]), (std::vector<int>{11, 15}));
  EXPECT_EQ(s.ws.fired(), 2u);
  EXPECT_EQ(s.ws.buffered(), 0u);
}

TEST(window_sort, event_at_window_end_belongs_to_next_window) {
  one_input s{{.length = 10s, .max_delay = 0s}};
  s.push(1, at(10s) - 1ns);            // last instant of [0, 10 s)
  EXPECT_TRUE(s.out.windows.empty());  // W = 10 s - 1 ns < 10 s
  s.push(2, at(10s));  // first instant of [10 s, 20 s); W = 10 s >= 10 s: window 0 fires
  ASSERT_EQ(s.out.windows.size(), 1u);
  EXPECT_EQ(s.out.windows[0].start, at(0s));
  EXPECT_EQ(s.out.windows[0].end, at(10s));
  EXPECT_EQ(values(s.out.windows[0]), (std::vector<int>{1}));
  s.end();
  ASSERT_EQ(s.out.windows.size(), 2u);
  EXPECT_EQ(s.out.windows[1].start, at(10s));
  EXPECT_EQ(s.out.windows[1].end, at(20s));
  EXPECT_EQ(values(s.out.windows[1]), (std::vector<int>{2}));
}

TEST(window_sort, lateness_boundary) {
  one_input s{{.length = 100s, .max_delay = 2s}};
  s.push(1, at(10s));
  s.push(2, at(8s));        // largest - t = 10 - 8 = 2 s = delay: accepted
  s.push(3, at(8s) - 1ns);  // 10 s - (8 s - 1 ns) = 2 s + 1 ns > delay: late
  EXPECT_EQ(s.ws.late(), 1u);
  ASSERT_EQ(s.out.late.size(), 1u);
  EXPECT_EQ(s.out.late[0].r.value, 3);
  EXPECT_EQ(s.out.late[0].start, at(0s));  // window [0, 100 s) of 8 s - 1 ns
  EXPECT_EQ(s.out.late[0].end, at(100s));
  s.end();
  ASSERT_EQ(s.out.windows.size(), 1u);
  EXPECT_EQ(values(s.out.windows[0]), (std::vector<int>{2, 1}));  // 8 s, then 10 s
}

// C01 (FLINK-26334): negative times floor; in order with delay 0.
TEST(window_sort, c01_negative_event_times) {
  one_input s{{.length = 10s, .max_delay = 0s}};
  for (std::int64_t t : {-15000, -10001, -10000, -1, 0, 9999, 10000}) s.push_ms(t);
  s.end();
  // window_start floors: -15000 and -10001 -> -20000; -10000 and -1 -> -10000;
  // 0 and 9999 -> 0; 10000 -> 10000 (ms).
  ASSERT_EQ(s.out.windows.size(), 4u);
  const std::vector<std::pair<std::int64_t, std::vector<std::int64_t>>> expected = {
      {-20000, {-15000, -10001}}, {-10000, {-10000, -1}}, {0, {0, 9999}}, {10000, {10000}}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& w = s.out.windows[i];
    EXPECT_EQ(to_ms(w.start), expected[i].first);
    EXPECT_EQ(to_ms(w.end), expected[i].first + 10000);
    EXPECT_EQ(times_ms(w), expected[i].second);
    for (const auto& r : w.records) {
      EXPECT_LE(w.start, r.time);
      EXPECT_LT(r.time, w.end);
    }
  }
  EXPECT_EQ(s.ws.late(), 0u);
}

// C01 again, shuffled arrival with a delay large enough that nothing is late: the same
// windows, and each window sorted.
TEST(window_sort, c01_negative_event_times_shuffled) {
  one_input s{{.length = 10s, .max_delay = 30s}};
  for (std::int64_t t : {10000, -1, 9999, -15000, 0, -10000, -10001}) s.push_ms(t);
  // largest = 10000; smallest 10000 - (-15000) = 25000 <= 30000: none late.
  EXPECT_EQ(s.ws.late(), 0u);
  EXPECT_TRUE(s.out.windows.empty());  // W = 10000 - 30000 = -20000 < -10000
  s.end();
  ASSERT_EQ(s.out.windows.size(), 4u);
  EXPECT_EQ(times_ms(s.out.windows[0]), (std::vector<std::int64_t>{-15000, -10001}));
  EXPECT_EQ(times_ms(s.out.windows[1]), (std::vector<std::int64_t>{-10000, -1}));
  EXPECT_EQ(times_ms(s.out.windows[2]), (std::vector<std::int64_t>{0, 9999}));
  EXPECT_EQ(times_ms(s.out.windows[3]), (std::vector<std::int64_t>{10000}));
}

TEST(window_sort, equal_timestamps_keep_arrival_order) {
  one_input s{{.length = 10s, .max_delay = 10s}};
  // (value, time ms): 1@7000 2@3000 3@7000 4@3000 5@7000 6@5000
  const std::vector<std::pair<int, std::int64_t>> in = {{1, 7000}, {2, 3000}, {3, 7000},
                                                        {4, 3000}, {5, 7000}, {6, 5000}};
  for (auto [v, t] : in) s.push(v, ms(t));
  s.end();
  ASSERT_EQ(s.out.windows.size(), 1u);
  // sorted by time, ties in arrival order: 3000: 2, 4; 5000: 6; 7000: 1, 3, 5
  EXPECT_EQ(values(s.out.windows[0]), (std::vector<int>{2, 4, 6, 1, 3, 5}));
}

// C03 (FLINK-7611): late record goes to the side output with its window, counted, and the
// released window is unchanged.
TEST(window_sort, c03_late_record_side_output) {
  one_input s{{.length = 10s, .max_delay = 2s}};
  s.push_ms(1000);
  s.push_ms(15000);  // W = 15000 - 2000 = 13000 >= 10000: [0, 10000) fires with {1000}
  EXPECT_EQ(s.ws.watermark(), ms(13000));
  ASSERT_EQ(s.out.windows.size(), 1u);
  EXPECT_EQ(times_ms(s.out.windows[0]), (std::vector<std::int64_t>{1000}));
  const std::vector<std::int64_t> released = times_ms(s.out.windows[0]);

  s.push_ms(3000);  // 15000 - 3000 = 12000 > 2000: late
  EXPECT_EQ(s.ws.late(), 1u);
  ASSERT_EQ(s.out.late.size(), 1u);
  EXPECT_EQ(to_ms(s.out.late[0].r.time), 3000);
  EXPECT_EQ(to_ms(s.out.late[0].start), 0);
  EXPECT_EQ(to_ms(s.out.late[0].end), 10000);
  ASSERT_EQ(s.out.windows.size(), 1u);  // no second emission of [0, 10000)
  EXPECT_EQ(times_ms(s.out.windows[0]), released);
  EXPECT_EQ(s.ws.buffered(), 1u);  // only 15000
}

TEST(window_sort, c03_drop_policy_counts_without_side_output) {
  one_input s{{.length = 10s, .max_delay = 2s, .on_late = late_policy::drop}};
  s.push_ms(1000);
  s.push_ms(15000);
  s.push_ms(3000);  // late, as above
  EXPECT_EQ(s.ws.late(), 1u);
  EXPECT_TRUE(s.out.late.empty());
  ASSERT_EQ(s.out.windows.size(), 1u);
  EXPECT_EQ(times_ms(s.out.windows[0]), (std::vector<std::int64_t>{1000}));
}

// C02 (FLINK-3121), first form: input 1 (a reader with no partition) never sends anything.
TEST(window_sort, c02_silent_input_is_ignored_once_idle) {
  rill::manual_clock clk;  // t = 0
  window_sorter<int> ws{{.length = 10s, .idle_timeout = 1s}, 2, clk.now()};
  collector out;
  clk.advance(500ms);
  for (std::int64_t t : {1000, 5000, 12000})
    ws.push(0, record<int>{static_cast<int>(t), ms(t)}, clk.now(), out.on_window(), out.on_late());
  EXPECT_TRUE(out.windows.empty());  // input 1 holds W at -infinity
  clk.advance(500ms);                // t = 1 s: input 1 silent 1 s since construction
  ws.tick(clk.now(), out.on_window());
  EXPECT_EQ(ws.watermark(), ms(12000));  // min over {p0} = 12000 - 0
  ASSERT_EQ(out.windows.size(), 1u);
  EXPECT_EQ(times_ms(out.windows[0]), (std::vector<std::int64_t>{1000, 5000}));
  ws.push(0, record<int>{25000, ms(25000)}, clk.now(), out.on_window(), out.on_late());
  ASSERT_EQ(out.windows.size(), 2u);  // W = 25000 >= 20000
  EXPECT_EQ(to_ms(out.windows[1].start), 10000);
  EXPECT_EQ(times_ms(out.windows[1]), (std::vector<std::int64_t>{12000}));
}

// C02 (FLINK-3121) variant: 2 inputs, p1 sends one event at 0 then nothing; idle timeout 1 s.
TEST(window_sort, c02_idle_variant) {
  rill::manual_clock clk;  // processing time t = 0
  window_sorter<int> ws{{.length = 10s, .max_delay = 0s, .idle_timeout = 1s}, 2, clk.now()};
  collector out;
  auto push = [&](std::size_t input, std::int64_t t) {
    ws.push(input, record<int>{static_cast<int>(t), ms(t)}, clk.now(), out.on_window(),
            out.on_late());
  };
  push(1, 0);     // p1 at t = 0
  push(0, 1000);  // t = 0
  clk.advance(200ms);
  push(0, 5000);  // t = 200 ms
  clk.advance(700ms);
  push(0, 12000);  // t = 900 ms; W = min(12000, 0) = 0: p1 holds [0, 10000) back
  EXPECT_EQ(ws.watermark(), ms(0));
  EXPECT_TRUE(out.windows.empty());
  clk.advance(99ms);  // t = 999 ms: p1 silent 999 ms < 1 s
  ws.tick(clk.now(), out.on_window());
  EXPECT_TRUE(out.windows.empty());
  clk.advance(1ms);  // t = 1000 ms: p1 silent 1 s -> idle; p0 silent 100 ms
  ws.tick(clk.now(), out.on_window());
  EXPECT_EQ(ws.watermark(), ms(12000));
  ASSERT_EQ(out.windows.size(), 1u);  // [0, 10000): p1's 0 and p0's 1000, 5000
  EXPECT_EQ(to_ms(out.windows[0].start), 0);
  EXPECT_EQ(times_ms(out.windows[0]), (std::vector<std::int64_t>{0, 1000, 5000}));

  clk.advance(100ms);
  push(0, 25000);  // W = 25000 (p1 idle): [10000, 20000) fires with {12000}
  ASSERT_EQ(out.windows.size(), 2u);
  EXPECT_EQ(times_ms(out.windows[1]), (std::vector<std::int64_t>{12000}));

  // p1 comes back: late only when older than W = 25000.
  push(1, 24000);  // 24000 < 25000: late, side output with its window [20000, 30000)
  EXPECT_EQ(ws.late(), 1u);
  ASSERT_EQ(out.late.size(), 1u);
  EXPECT_EQ(to_ms(out.late[0].start), 20000);
  EXPECT_EQ(to_ms(out.late[0].end), 30000);
  push(1, 26000);  // 26000 >= 25000: in time; p1 counts again
  EXPECT_EQ(ws.late(), 1u);
  push(0, 32000);  // W = min(32000, 26000) = 26000: p1 holds W again
  EXPECT_EQ(ws.watermark(), ms(26000));
  EXPECT_EQ(out.windows.size(), 2u);  // [20000, 30000) still open: 26000 < 30000
  push(1, 31000);                     // W = min(32000, 31000) = 31000 >= 30000
  ASSERT_EQ(out.windows.size(), 3u);
  EXPECT_EQ(times_ms(out.windows[2]), (std::vector<std::int64_t>{25000, 26000}));
}

TEST(window_sort, two_inputs_watermark_is_the_minimum) {
  rill::manual_clock clk;
  window_sorter<int> ws{{.length = 10s}, 2, clk.now()};  // delay 0, never idle
  collector out;
  auto push = [&](std::size_t input, std::int64_t t) {
    ws.push(input, record<int>{static_cast<int>(t), ms(t)}, clk.now(), out.on_window(),
            out.on_late());
  };
  push(0, 5000);
  push(0, 15000);
  push(0, 25000);
  push(1, 3000);  // W = min(25000, 3000) = 3000
  EXPECT_EQ(ws.watermark(), ms(3000));
  EXPECT_TRUE(out.windows.empty());
  push(1, 12000);  // W = min(25000, 12000) = 12000 >= 10000: [0, 10000) fires
  ASSERT_EQ(out.windows.size(), 1u);
  EXPECT_EQ(times_ms(out.windows[0]), (std::vector<std::int64_t>{3000, 5000}));
  // p0 is at 25000, so 14000 is 11000 behind its own largest, but not older than
  // W = 12000: in time (C02 rule), joins [10000, 20000).
  push(0, 14000);
  EXPECT_EQ(ws.late(), 0u);
  push(0, 11000);  // 11000 < W = 12000: late
  EXPECT_EQ(ws.late(), 1u);
  push(1, 30000);  // W = min(25000, 30000) = 25000: [10000, 20000) fires
  ASSERT_EQ(out.windows.size(), 2u);
  EXPECT_EQ(times_ms(out.windows[1]), (std::vector<std::int64_t>{12000, 14000, 15000}));
}

TEST(window_sort, progress_marker_fires_windows) {
  one_input s{{.length = 10s, .max_delay = 2s}};
  s.push_ms(4000);
  s.ws.progress(0, ms(11999), s.clk.now(), s.out.on_window());  // W = 9999 < 10000
  EXPECT_TRUE(s.out.windows.empty());
  s.ws.progress(0, ms(12000), s.clk.now(), s.out.on_window());  // W = 10000 >= 10000
  ASSERT_EQ(s.out.windows.size(), 1u);
  EXPECT_EQ(times_ms(s.out.windows[0]), (std::vector<std::int64_t>{4000}));
  s.push_ms(9999);  // 9999 < W = 10000: late
  EXPECT_EQ(s.ws.late(), 1u);
}

// Per-partition watermarks (record.hpp advances_progress): records with a source
// position (read from Kafka) do not move W; the source's progress marker (the minimum
// over its partitions) does. One input carries two partitions read in fetch order:
// partition 0 at 1..25 s first, then partition 1 at 1..25 s. Without the rule W would be
// 25 - 2 = 23 s after partition 0 and all of partition 1 up to 20 s would be late.
TEST(window_sort, partitioned_records_move_w_only_through_progress) {
  one_input s{{.length = 10s, .max_delay = 2s}};
  auto push_at = [&](std::int32_t partition, std::int64_t t) {
    s.ws.push(0, record<int>{int(t), ms(t), rill::source_position{.partition = partition, .offset = t}}, s.clk.now(),
              s.out.on_window(), s.out.on_late());
  };
  for (std::int64_t t = 1000; t <= 25000; t += 1000) push_at(0, t);
  EXPECT_EQ(s.ws.watermark(), rill::event_time_min);  // no progress marker yet
  // the source's marker: min(partition 0 at 25 s, partition 1 not read yet = -inf)
  s.ws.progress(0, rill::event_time_min, s.clk.now(), s.out.on_window());
  for (std::int64_t t = 1000; t <= 25000; t += 1000) push_at(1, t);
  EXPECT_EQ(s.ws.late(), 0u);
  EXPECT_TRUE(s.out.windows.empty());
  // marker min(25 s, 25 s) = 25 s: W = 23 s, windows [0,10) and [10,20) fire
  s.ws.progress(0, ms(25000), s.clk.now(), s.out.on_window());
  EXPECT_EQ(s.ws.watermark(), ms(23000));
  ASSERT_EQ(s.out.windows.size(), 2u);
  // window 0: 1..9 s from both partitions, sorted, stable (partition 0 first at equal t)
  std::vector<std::int64_t> w0;
  for (std::int64_t t = 1000; t <= 9000; t += 1000) w0.insert(w0.end(), {t, t});
  EXPECT_EQ(times_ms(s.out.windows[0]), w0);
  EXPECT_EQ(s.out.windows[1].records.size(), 20u);  // 10..19 s, twice
  push_at(1, 22999);  // behind W = 23 s: late
  EXPECT_EQ(s.ws.late(), 1u);
}

TEST(window_sort, end_of_stream_fires_everything_in_window_order) {
  rill::manual_clock clk;
  window_sorter<int> ws{{.length = 10s, .max_delay = 1h}, 2, clk.now()};
  collector out;
  for (std::int64_t t : {35000, -5000, 12000, 1000, 12000})
    ws.push(0, record<int>{static_cast<int>(t), ms(t)}, clk.now(), out.on_window(), out.on_late());
  ws.push(1, record<int>{7, ms(7)}, clk.now(), out.on_window(), out.on_late());
  EXPECT_EQ(ws.open_windows(), 4u);  // [-10000,0) [0,10000) [10000,20000) [30000,40000)
  ws.end(0, out.on_window());
  EXPECT_TRUE(out.windows.empty());  // input 1 still open, W = 7 - 3600000 ms
  ws.end(1, out.on_window());
  EXPECT_EQ(ws.watermark(), rill::event_time_max);
  ASSERT_EQ(out.windows.size(), 4u);
  EXPECT_EQ(times_ms(out.windows[0]), (std::vector<std::int64_t>{-5000}));
  EXPECT_EQ(times_ms(out.windows[1]), (std::vector<std::int64_t>{7, 1000}));
  EXPECT_EQ(times_ms(out.windows[2]), (std::vector<std::int64_t>{12000, 12000}));
  EXPECT_EQ(times_ms(out.windows[3]), (std::vector<std::int64_t>{35000}));
  EXPECT_EQ(ws.buffered(), 0u);
  EXPECT_EQ(ws.open_windows(), 0u);
  // After end of stream everything is late, and still not lost.
  ws.push(0, record<int>{1, ms(100000)}, clk.now(), out.on_window(), out.on_late());
  EXPECT_EQ(ws.late(), 1u);
  EXPECT_EQ(out.late.size(), 1u);
}

// Buffer cap, smallest form. cap 3, delay large so nothing fires on time. Hand-worked:
//   15000, 2000, 25000       buffered: [0,10s){2000} [10s,20s){15000} [20s,30s){25000}
//   26000  full -> oldest [0,10s) fires early {2000}; 26000 joins [20s,30s)
//   3000   not late (W = 26000 - 1 h); full -> oldest open [10s,20s) fires early {15000};
//          3000 starts a new segment of [0,10s)
//   10000  full -> oldest open [0,10s) fires early {3000}; 10000 starts [10s,20s) again
//   end    [10s,20s){10000} and [20s,30s){25000,26000} fire on time
TEST(window_sort, cap_fires_oldest_window_early_in_segments) {
  one_input s{{.length = 10s, .max_delay = 1h, .max_buffered = 3}};
  s.push_ms(15000);
  s.push_ms(2000);
  s.push_ms(25000);
  EXPECT_EQ(s.ws.buffered(), 3u);
  s.push_ms(26000);
  ASSERT_EQ(s.out.windows.size(), 1u);
  EXPECT_TRUE(s.out.windows[0].early);
  EXPECT_EQ(times_ms(s.out.windows[0]), (std::vector<std::int64_t>{2000}));
  EXPECT_EQ(s.ws.buffered(), 3u);
  s.push_ms(3000);
  ASSERT_EQ(s.out.windows.size(), 2u);
  EXPECT_TRUE(s.out.windows[1].early);
  EXPECT_EQ(times_ms(s.out.windows[1]), (std::vector<std::int64_t>{15000}));
  s.push_ms(10000);
  ASSERT_EQ(s.out.windows.size(), 3u);
  EXPECT_TRUE(s.out.windows[2].early);
  EXPECT_EQ(to_ms(s.out.windows[2].start), 0);
  EXPECT_EQ(times_ms(s.out.windows[2]), (std::vector<std::int64_t>{3000}));
  EXPECT_EQ(s.ws.buffered(), 3u);  // 10000, 25000, 26000
  s.end();
  ASSERT_EQ(s.out.windows.size(), 5u);
  EXPECT_FALSE(s.out.windows[3].early);
  EXPECT_EQ(times_ms(s.out.windows[3]), (std::vector<std::int64_t>{10000}));
  EXPECT_FALSE(s.out.windows[4].early);
  EXPECT_EQ(times_ms(s.out.windows[4]), (std::vector<std::int64_t>{25000, 26000}));
  EXPECT_EQ(s.ws.late(), 0u);
  EXPECT_TRUE(s.out.late.empty());
  EXPECT_EQ(s.ws.fired(), 5u);
  EXPECT_EQ(s.ws.early_fired(), 3u);
}

// Buffer full while the pushed record's own window becomes due on that record's
// observation (an idle input comes back with a largest far ahead): the window is
// emitted on time with the record in it, not early, and the record is not lost.
TEST(window_sort, full_buffer_and_own_window_due) {
  rill::manual_clock clk;
  window_sorter<int> ws{{.length = 10s, .idle_timeout = 1s, .max_buffered = 2}, 2, clk.now()};
  collector out;
  auto push = [&](std::size_t input, std::int64_t t) {
    ws.push(input, record<int>{static_cast<int>(t), ms(t)}, clk.now(), out.on_window(),
            out.on_late());
  };
  push(0, 100000);
  push(1, 3000);  // W = min(100000, 3000) = 3000; buffered 2 (full)
  clk.advance(1s);
  ws.tick(clk.now(), out.on_window());  // both idle: W stays 3000
  EXPECT_EQ(ws.watermark(), ms(3000));
  push(0, 5000);  // 5000 >= 3000: in time. p0 active again, alone: W = 100000
  ASSERT_EQ(out.windows.size(), 1u);
  EXPECT_FALSE(out.windows[0].early);
  EXPECT_EQ(times_ms(out.windows[0]), (std::vector<std::int64_t>{3000, 5000}));
  EXPECT_EQ(ws.buffered(), 1u);  // 100000 (its window ends at 110000 > W)
  EXPECT_EQ(ws.late(), 0u);
}

// Checks: every value 0..n-1 appears exactly once across windows and late output, and
// each emitted window is sorted, stable, inside its bounds.
void expect_exactly_once_and_sorted(const collector& out, int n) {
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(n), 0);
  std::uint64_t sum = 0;
  for (const auto& w : out.windows) {
    for (std::size_t i = 0; i < w.records.size(); ++i) {
      const auto& r = w.records[i];
      ASSERT_LE(w.start, r.time);
      ASSERT_LT(r.time, w.end);
      if (i > 0) {
        const auto& p = w.records[i - 1];
        // sorted by time; equal times in arrival order (values are arrival indices)
        ASSERT_TRUE(p.time < r.time || (p.time == r.time && p.value < r.value));
      }
      ++seen[static_cast<std::size_t>(r.value)];
      sum += static_cast<std::uint64_t>(r.value);
    }
  }
  for (const auto& l : out.late) {
    ++seen[static_cast<std::size_t>(l.r.value)];
    sum += static_cast<std::uint64_t>(l.r.value);
  }
  const std::uint64_t un = static_cast<std::uint64_t>(n);
  EXPECT_EQ(sum, un * (un - 1) / 2);  // checksum: 0 + 1 + ... + (n-1)
  EXPECT_EQ(std::count(seen.begin(), seen.end(), std::uint8_t{1}), n);
}

// A window with a million records and max_buffered = 100000.
TEST(window_sort, million_records_one_window_bounded) {
  constexpr int n = 1'000'000;
  constexpr std::size_t cap = 100'000;
  one_input s{{.length = 10s, .max_delay = 10s, .max_buffered = cap}};
  std::mt19937_64 rng{42};
  std::uniform_int_distribution<std::int64_t> ns{0, 999'999'999};  // all in [0, 10 s)
  std::size_t max_seen = 0;
  for (int i = 0; i < n; ++i) {
    s.push(i, at(std::chrono::nanoseconds{ns(rng)}));
    max_seen = std::max(max_seen, s.ws.buffered());
  }
  s.end();
  EXPECT_EQ(max_seen, cap);
  // Records 0..99999 fill the buffer; record 100000 finds it full and cannot fire on
  // time (W <= 1 s - 10 s < 10 s), so [0, 10 s) fires early with the first 100000 and
  // record 100000 starts a new segment; every 100000 records the same happens again.
  // end() fires the 10th segment on time. Nothing is late.
  ASSERT_EQ(s.out.windows.size(), 10u);
  for (std::size_t k = 0; k < 10; ++k) {
    EXPECT_EQ(s.out.windows[k].start, at(0s));
    EXPECT_EQ(s.out.windows[k].records.size(), cap);
    EXPECT_EQ(s.out.windows[k].early, k < 9);
  }
  EXPECT_EQ(s.ws.early_fired(), 9u);
  EXPECT_EQ(s.ws.fired(), 10u);
  EXPECT_EQ(s.ws.late(), 0u);
  EXPECT_TRUE(s.out.late.empty());
  EXPECT_EQ(s.ws.buffered(), 0u);
  expect_exactly_once_and_sorted(s.out, n);
}

// A million records over 1000 windows, watermark lagging far behind: the cap decides.
TEST(window_sort, million_records_many_windows_bounded) {
  constexpr int n = 1'000'000;
  constexpr std::size_t cap = 100'000;
  // record i at max(0, i us - jitter), jitter in [0, 5 us): times in [0, 999999 us], so
  // windows 0..999 of L = 1 ms, 1000 records each (record k*1000+999 is at
  // > k ms + 994 us, inside window k, so none is empty); delay 1 s (1e6 records) is never
  // reached, so until end() only the cap fires windows.
  one_input s{{.length = 1ms, .max_delay = 1s, .max_buffered = cap}};
  std::mt19937_64 rng{7};
  std::uniform_int_distribution<std::int64_t> jitter{0, 4999};
  std::size_t max_seen = 0;
  for (int i = 0; i < n; ++i) {
    const std::int64_t t = std::max<std::int64_t>(0, std::int64_t{i} * 1000 - jitter(rng));
    s.push(i, at(std::chrono::nanoseconds{t}));
    max_seen = std::max(max_seen, s.ws.buffered());
  }
  EXPECT_EQ(max_seen, cap);
  EXPECT_GT(s.ws.early_fired(), 0u);
  s.end();
  // 1000 windows [k ms, (k+1) ms), each emitted once.
  EXPECT_EQ(s.ws.fired(), 1000u);
  ASSERT_EQ(s.out.windows.size(), 1000u);
  for (std::size_t k = 0; k < 1000; ++k) {
    EXPECT_EQ(s.out.windows[k].start, at(std::chrono::milliseconds{k}));
    // early windows form a prefix: the cap fires oldest first; end() fires the rest
    EXPECT_EQ(s.out.windows[k].early, k < s.ws.early_fired());
  }
  // Early-fired windows are about 100 windows (100000 records) behind the newest,
  // and jitter is 5 us: no record can arrive for one of them after it fired.
  EXPECT_EQ(s.ws.late(), 0u);
  expect_exactly_once_and_sorted(s.out, n);
}

// Brute-force reference: random times with random disorder and negative times, compared
// with the rule recomputed from scratch: late iff (largest before) - t > delay; windows
// hold the non-late records sorted by (time, arrival), fire as soon as
// largest - delay >= end, in window order.
TEST(window_sort, matches_brute_force_reference) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng{seed};
    const std::int64_t length = std::uniform_int_distribution<std::int64_t>{1, 50}(rng);
    const std::int64_t delay = std::uniform_int_distribution<std::int64_t>{0, 40}(rng);
    const int n = std::uniform_int_distribution<int>{1, 2000}(rng);
    std::vector<std::int64_t> times(static_cast<std::size_t>(n));
    std::int64_t base = std::uniform_int_distribution<std::int64_t>{-500, 500}(rng);
    for (auto& t : times) {
      base += std::uniform_int_distribution<std::int64_t>{0, 3}(rng);
      t = base - std::uniform_int_distribution<std::int64_t>{0, 60}(rng);  // disorder
    }

    // Reference.
    struct ref_window {
      std::int64_t start;
      std::vector<std::pair<std::int64_t, int>> recs;  // (time, arrival)
      int fired_at = -1;  // arrival index after which it fires; n = at end()
    };
    std::map<std::int64_t, ref_window> ref;
    std::vector<int> ref_late;
    std::int64_t largest = std::numeric_limits<std::int64_t>::min();
    for (int i = 0; i < n; ++i) {
      const std::int64_t t = times[static_cast<std::size_t>(i)];
      const bool late = largest != std::numeric_limits<std::int64_t>::min() && largest - t > delay;
      largest = std::max(largest, t);
      if (late) {
        ref_late.push_back(i);
      } else {
        const std::int64_t start = rill::floor_div(t, length) * length;
        auto& w = ref[start];
        w.start = start;
        w.recs.emplace_back(t, i);
      }
    }
    for (auto& [start, w] : ref) {
      std::stable_sort(w.recs.begin(), w.recs.end(),
                       [](auto& a, auto& b) { return a.first < b.first; });
      // fires right after the first arrival j at which largest_j - delay >= end
      w.fired_at = n;
      std::int64_t lg = std::numeric_limits<std::int64_t>::min();
      for (int j = 0; j < n; ++j) {
        lg = std::max(lg, times[static_cast<std::size_t>(j)]);
        if (lg - delay >= start + length) {
          w.fired_at = j;
          break;
        }
      }
    }

    // Sorter, times in ns.
    rill::manual_clock clk;
    window_sorter<int> ws{
        {.length = std::chrono::nanoseconds{length}, .max_delay = std::chrono::nanoseconds{delay}},
        1,
        clk.now()};
    std::vector<std::pair<window<int>, int>> got;  // window, arrival index when fired
    std::vector<int> got_late;
    int now_index = 0;
    auto on_window = [&](window<int>&& w) { got.emplace_back(std::move(w), now_index); };
    auto on_late = [&](record<int>&& r, event_time, event_time) { got_late.push_back(r.value); };
    for (int i = 0; i < n; ++i) {
      now_index = i;
      ws.push(0, record<int>{i, at(std::chrono::nanoseconds{times[static_cast<std::size_t>(i)]})},
              clk.now(), on_window, on_late);
    }
    now_index = n;
    ws.end(0, on_window);

    SCOPED_TRACE(testing::Message()
                 << "seed " << seed << " L " << length << " delay " << delay << " n " << n);
    EXPECT_EQ(got_late, ref_late);
    EXPECT_EQ(ws.late(), ref_late.size());
    ASSERT_EQ(got.size(), ref.size());
    std::size_t k = 0;
    for (const auto& [start, w] : ref) {
      const auto& [gw, fired_at] = got[k++];
      EXPECT_EQ(gw.start.time_since_epoch().count(), start);
      EXPECT_EQ(gw.end.time_since_epoch().count(), start + length);
      EXPECT_FALSE(gw.early);
      EXPECT_EQ(fired_at, w.fired_at);
      ASSERT_EQ(gw.records.size(), w.recs.size());
      for (std::size_t i = 0; i < w.recs.size(); ++i) {
        EXPECT_EQ(gw.records[i].time.time_since_epoch().count(), w.recs[i].first);
        EXPECT_EQ(gw.records[i].value, w.recs[i].second);
      }
    }
  }
}

TEST(window_sort, event_times_near_the_sentinels_do_not_overflow) {
  one_input s{{.length = 10s, .max_delay = 1s}};
  s.push(1, rill::event_time_min);  // window saturates: [min, first boundary)
  s.push(2, rill::event_time_min + 1ns);
  EXPECT_EQ(s.ws.open_windows(), 1u);   // both in the window of min
  s.push(3, rill::event_time_max);      // W = +infinity - 1 s = +infinity (saturates):
  ASSERT_EQ(s.out.windows.size(), 2u);  // every window fires, max's own included
  EXPECT_EQ(s.out.windows[0].start, rill::event_time_min);
  EXPECT_EQ(values(s.out.windows[0]), (std::vector<int>{1, 2}));
  EXPECT_EQ(s.out.windows[1].end, rill::event_time_max);  // end saturates
  EXPECT_EQ(values(s.out.windows[1]), (std::vector<int>{3}));
}

TEST(window_sort, bad_options_throw_config_error_with_key) {
  auto key_of = [](window_sort_options o, std::size_t inputs = 1) -> std::string {
    try {
      rill::manual_clock clk;
      window_sorter<int> ws{o, inputs, clk.now()};
    } catch (const rill::config_error& e) {
      return e.key();
    }
    return "no throw";
  };
  EXPECT_EQ(key_of({}), "window_sort.length");  // length defaults to 0
  EXPECT_EQ(key_of({.length = -1s}), "window_sort.length");
  EXPECT_EQ(key_of({.length = 1s, .max_delay = -1ns}), "window_sort.max_delay");
  EXPECT_EQ(key_of({.length = 1s, .idle_timeout = -1ns}), "window_sort.idle_timeout");
  EXPECT_EQ(key_of({.length = 1s, .max_buffered = 0}), "window_sort.max_buffered");
  EXPECT_EQ(key_of({.length = 1s}, 0), "window_sort.inputs");
  EXPECT_EQ(key_of({.length = 1s}), "no throw");
  try {
    window_sort_options{}.validate();
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "window_sort.length must be > 0");
  }
}

// A payload that is move-only still works (the sorter never copies records).
TEST(window_sort, move_only_payload) {
  rill::manual_clock clk;
  window_sorter<std::unique_ptr<int>> ws{{.length = 10s}, 1, clk.now()};
  std::vector<int> got;
  auto on_window = [&](window<std::unique_ptr<int>>&& w) {
    for (auto& r : w.records) got.push_back(*r.value);
  };
  auto on_late = [](record<std::unique_ptr<int>>&&, event_time, event_time) {};
  ws.push(0, {std::make_unique<int>(2), at(2s)}, clk.now(), on_window, on_late);
  ws.push(0, {std::make_unique<int>(1), at(1s)}, clk.now(), on_window, on_late);  // late
  ws.push(0, {std::make_unique<int>(3), at(3s)}, clk.now(), on_window, on_late);
  ws.end(0, on_window);
  EXPECT_EQ(got, (std::vector<int>{2, 3}));
  EXPECT_EQ(ws.late(), 1u);
}

}  // namespace

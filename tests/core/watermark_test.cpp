// Tests for rill/core/watermark.hpp: the watermark rule of docs/design.md "Records, time,
// watermarks", the idle-input case (C02), and partition_progress. Processing time comes
// from a manual_clock (no sleeps). Every expected value is worked by hand in the comment
// next to it.
#include "rill/core/watermark.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace {

using namespace std::chrono_literals;
using rill::event_time;
using rill::event_time_max;
using rill::event_time_min;
using rill::watermark_tracker;

constexpr event_time at(std::chrono::nanoseconds d) { return event_time{d}; }

TEST(watermark_tracker, starts_at_minus_infinity) {
  rill::manual_clock clk;
  watermark_tracker wm{1, 2s, 0s, clk.now()};
  EXPECT_EQ(wm.current(), event_time_min);
  EXPECT_FALSE(wm.is_late(event_time_min));  // nothing is older than -infinity
  EXPECT_FALSE(wm.is_late(at(-1000s)));
}

TEST(watermark_tracker, single_input_is_largest_minus_delay) {
  rill::manual_clock clk;
  watermark_tracker wm{1, 2s, 0s, clk.now()};
  wm.observe(0, at(1s), clk.now());
  EXPECT_EQ(wm.current(), at(-1s));  // 1 - 2 = -1 s
  wm.observe(0, at(11s), clk.now());
  EXPECT_EQ(wm.current(), at(9s));  // 11 - 2 = 9 s
  wm.observe(0, at(5s), clk.now());
  EXPECT_EQ(wm.current(), at(9s));  // an older time does not move W (largest stays 11)
  EXPECT_EQ(wm.largest_seen(0), at(11s));
}

TEST(watermark_tracker, lateness_boundary_with_one_input) {
  rill::manual_clock clk;
  watermark_tracker wm{1, 2s, 0s, clk.now()};
  wm.observe(0, at(11s), clk.now());      // W = 11 - 2 = 9 s
  EXPECT_FALSE(wm.is_late(at(9s)));       // 11 - 9 = 2 s = delay: in time
  EXPECT_TRUE(wm.is_late(at(9s) - 1ns));  // 11 - (9 s - 1 ns) = 2 s + 1 ns > delay: late
  EXPECT_FALSE(wm.is_late(at(20s)));
}

TEST(watermark_tracker, never_decreases) {
  rill::manual_clock clk;
  watermark_tracker wm{2, 0s, 0s, clk.now()};
  wm.observe(0, at(10s), clk.now());
  wm.observe(1, at(20s), clk.now());
  EXPECT_EQ(wm.current(), at(10s));  // min(10, 20)
  wm.observe(0, at(30s), clk.now());
  EXPECT_EQ(wm.current(), at(20s));  // min(30, 20)
  wm.observe(0, at(1s), clk.now());  // old time: largest_0 stays 30
  wm.observe(1, at(2s), clk.now());
  EXPECT_EQ(wm.current(), at(20s));
}

TEST(watermark_tracker, several_inputs_take_the_minimum) {
  rill::manual_clock clk;
  watermark_tracker wm{3, 1s, 0s, clk.now()};
  wm.observe(0, at(10s), clk.now());
  wm.observe(1, at(4s), clk.now());
  EXPECT_EQ(wm.current(), event_time_min);  // input 2 has sent nothing: -infinity
  wm.observe(2, at(7s), clk.now());
  EXPECT_EQ(wm.current(), at(3s));  // min(10-1, 4-1, 7-1) = 3 s
  wm.observe(1, at(20s), clk.now());
  EXPECT_EQ(wm.current(), at(6s));  // min(9, 19, 6) = 6 s
  // C02: late only when older than the current watermark, not than the own input's
  // largest - delay: input 1 is at 20 s, yet 6 s is in time (6 >= W = 6).
  EXPECT_FALSE(wm.is_late(at(6s)));
  EXPECT_TRUE(wm.is_late(at(6s) - 1ns));
}

TEST(watermark_tracker, ended_input_no_longer_holds_the_watermark) {
  rill::manual_clock clk;
  watermark_tracker wm{2, 0s, 0s, clk.now()};
  wm.observe(0, at(50s), clk.now());
  wm.observe(1, at(5s), clk.now());
  EXPECT_EQ(wm.current(), at(5s));
  wm.end(1);
  EXPECT_EQ(wm.current(), at(50s));  // input 1 counts as +infinity: min(50, +inf)
  EXPECT_TRUE(wm.has_ended(1));
  wm.observe(1, at(100s), clk.now());  // ignored: end is final
  EXPECT_EQ(wm.largest_seen(1), at(5s));
  wm.end(0);
  EXPECT_EQ(wm.current(), event_time_max);  // all ended: +infinity
  wm.end(0);                                // idempotent
  EXPECT_EQ(wm.current(), event_time_max);
}

TEST(watermark_tracker, end_of_an_input_that_sent_nothing) {
  rill::manual_clock clk;
  watermark_tracker wm{2, 0s, 0s, clk.now()};
  wm.observe(0, at(7s), clk.now());
  EXPECT_EQ(wm.current(), event_time_min);  // input 1: -infinity
  wm.end(1);
  EXPECT_EQ(wm.current(), at(7s));
}

// C02, first form: one of two readers has no partition and never sends.
TEST(watermark_tracker, silent_input_becomes_idle_after_timeout) {
  rill::manual_clock clk;  // t = 0
  watermark_tracker wm{2, 0s, 1s, clk.now()};
  clk.advance(500ms);
  wm.observe(0, at(12s), clk.now());
  EXPECT_EQ(wm.current(), event_time_min);  // input 1 active (not yet idle), sent nothing
  clk.advance(499ms);                       // t = 999 ms
  wm.tick(clk.now());
  EXPECT_FALSE(wm.is_idle(1));  // 999 ms < 1 s since construction
  EXPECT_EQ(wm.current(), event_time_min);
  clk.advance(1ms);  // t = 1 s
  wm.tick(clk.now());
  EXPECT_TRUE(wm.is_idle(1));        // 1 s >= 1 s since construction
  EXPECT_FALSE(wm.is_idle(0));       // last observe at 500 ms: 500 ms < 1 s
  EXPECT_EQ(wm.current(), at(12s));  // min over {input 0} = 12 - 0
}

// C02 variant: p1 sends one event at 0 then goes silent; when it comes back it
// counts again, and its data is late only when older than the current W.
TEST(watermark_tracker, idle_input_comes_back_and_counts_again) {
  rill::manual_clock clk;
  watermark_tracker wm{2, 0s, 1s, clk.now()};
  wm.observe(1, at(0ms), clk.now());  // p1 at t = 0
  wm.observe(0, at(1000ms), clk.now());
  EXPECT_EQ(wm.current(), at(0ms));  // min(1000, 0)
  clk.advance(900ms);
  wm.observe(0, at(12000ms), clk.now());
  EXPECT_EQ(wm.current(), at(0ms));  // p1 still holds it: min(12000, 0)
  clk.advance(100ms);                // t = 1000 ms
  wm.tick(clk.now());
  EXPECT_TRUE(wm.is_idle(1));            // p1 silent 1000 ms >= 1 s
  EXPECT_EQ(wm.current(), at(12000ms));  // min over {p0}
  wm.observe(0, at(25000ms), clk.now());
  EXPECT_EQ(wm.current(), at(25000ms));
  // p1 comes back. 24000 < W = 25000: late. Observing it must not pull W down.
  EXPECT_TRUE(wm.is_late(at(24000ms)));
  wm.observe(1, at(24000ms), clk.now());
  EXPECT_FALSE(wm.is_idle(1));
  EXPECT_EQ(wm.current(), at(25000ms));  // max(25000, min(25000, 24000)): monotone
  EXPECT_FALSE(wm.is_late(at(26000ms)));
  wm.observe(1, at(26000ms), clk.now());
  wm.observe(0, at(32000ms), clk.now());
  EXPECT_EQ(wm.current(), at(26000ms));  // p1 holds W again: min(32000, 26000)
}

TEST(watermark_tracker, all_unfinished_inputs_idle_keeps_the_watermark) {
  rill::manual_clock clk;
  watermark_tracker wm{2, 1s, 1s, clk.now()};
  wm.observe(0, at(10s), clk.now());
  wm.observe(1, at(20s), clk.now());
  EXPECT_EQ(wm.current(), at(9s));  // min(10-1, 20-1)
  clk.advance(5s);
  wm.tick(clk.now());
  EXPECT_TRUE(wm.is_idle(0));
  EXPECT_TRUE(wm.is_idle(1));
  EXPECT_EQ(wm.current(), at(9s));    // nobody active: W stays
  wm.observe(1, at(20s), clk.now());  // p1 back, nothing newer: it alone defines W
  EXPECT_EQ(wm.current(), at(19s));   // max(9, 20-1)
  wm.end(1);
  EXPECT_EQ(wm.current(), at(19s));  // p0 idle, p1 ended: W stays, not +infinity
  wm.end(0);
  EXPECT_EQ(wm.current(), event_time_max);
}

TEST(watermark_tracker, zero_idle_timeout_never_idles) {
  rill::manual_clock clk;
  watermark_tracker wm{2, 0s, 0s, clk.now()};
  wm.observe(0, at(10s), clk.now());
  clk.advance(std::chrono::hours{24 * 365});
  wm.tick(clk.now());
  EXPECT_FALSE(wm.is_idle(1));
  EXPECT_EQ(wm.current(), event_time_min);
}

TEST(watermark_tracker, activity_restarts_the_idle_timer) {
  rill::manual_clock clk;
  watermark_tracker wm{2, 0s, 1s, clk.now()};
  wm.observe(1, at(1s), clk.now());
  clk.advance(800ms);
  wm.observe(1, at(1s), clk.now());  // an old time still counts as activity (t = 800 ms)
  clk.advance(800ms);                // t = 1600 ms: 800 ms since the last observe
  wm.tick(clk.now());
  EXPECT_FALSE(wm.is_idle(1));
  EXPECT_TRUE(wm.is_idle(0));  // never sent: 1600 ms since construction
  EXPECT_EQ(wm.current(), at(1s));
}

TEST(watermark_tracker, subtraction_saturates_at_the_sentinels) {
  using rill::detail::saturating_sub;
  EXPECT_EQ(saturating_sub(event_time_min, 1s), event_time_min);
  EXPECT_EQ(saturating_sub(event_time_max, 1s), event_time_max);  // +inf - finite = +inf
  EXPECT_EQ(saturating_sub(event_time_min + 5ns, 10ns), event_time_min);
  EXPECT_EQ(saturating_sub(event_time_min + 10ns, 10ns), event_time_min);
  EXPECT_EQ(saturating_sub(event_time_min + 11ns, 10ns), event_time_min + 1ns);
  EXPECT_EQ(saturating_sub(at(0ns), std::chrono::nanoseconds::max()),
            event_time_min + 1ns);  // 0 - (2^63 - 1) = -2^63 + 1

  rill::manual_clock clk;
  watermark_tracker wm{1, std::chrono::nanoseconds::max(), 0s, clk.now()};
  wm.observe(0, at(-5s), clk.now());
  EXPECT_EQ(wm.current(), event_time_min);  // -5 s - (2^63 - 1) ns underflows: saturate
  wm.observe(0, event_time_max, clk.now());
  EXPECT_EQ(wm.current(), event_time_max);
}

// One input that never idles (the tracker's sole-input path): W after each observe() of
// a rising time, at the edges where t - delay saturates. Delay 10 ns.
TEST(watermark_tracker, sole_input_saturates_at_the_edges) {
  rill::manual_clock clk;
  watermark_tracker wm{1, 10ns, 0s, clk.now()};
  wm.observe(0, event_time_min + 1ns, clk.now());
  EXPECT_EQ(wm.current(), event_time_min);  // -2^63 + 1 - 10 underflows: -infinity
  wm.observe(0, event_time_min + 9ns, clk.now());
  EXPECT_EQ(wm.current(), event_time_min);  // -2^63 + 9 - 10 underflows
  wm.observe(0, event_time_min + 10ns, clk.now());
  EXPECT_EQ(wm.current(), event_time_min);  // -2^63 + 10 - 10 = -2^63 exactly
  wm.observe(0, event_time_min + 11ns, clk.now());
  EXPECT_EQ(wm.current(), event_time_min + 1ns);
  wm.observe(0, at(5ns), clk.now());
  EXPECT_EQ(wm.current(), at(-5ns));  // 5 - 10
  wm.observe(0, at(3ns), clk.now());
  EXPECT_EQ(wm.current(), at(-5ns));  // an older time does not move W
  wm.observe(0, event_time_max - 1ns, clk.now());
  EXPECT_EQ(wm.current(), event_time_max - 11ns);  // 2^63 - 2 - 10: finite
  wm.observe(0, event_time_max, clk.now());
  EXPECT_EQ(wm.current(), event_time_max);  // +infinity - 10 ns = +infinity

  watermark_tracker zero{1, 0ns, 0s, clk.now()};  // delay 0: W = the largest time itself
  zero.observe(0, event_time_min + 1ns, clk.now());
  EXPECT_EQ(zero.current(), event_time_min + 1ns);
  zero.observe(0, at(-7ns), clk.now());
  EXPECT_EQ(zero.current(), at(-7ns));
}

TEST(watermark_tracker, bad_configuration_throws_config_error_with_key) {
  rill::manual_clock clk;
  auto key_of = [&](auto make) -> std::string {
    try {
      make();
    } catch (const rill::config_error& e) {
      return e.key();
    }
    return "no throw";
  };
  EXPECT_EQ(key_of([&] { watermark_tracker{0, 0s, 0s, clk.now()}; }), "watermark.inputs");
  EXPECT_EQ(key_of([&] { watermark_tracker{1, -1ns, 0s, clk.now()}; }), "watermark.max_delay");
  EXPECT_EQ(key_of([&] { watermark_tracker{1, 0s, -1ns, clk.now()}; }), "watermark.idle_timeout");
  EXPECT_THROW((watermark_tracker{0, 0s, 0s, clk.now()}), std::invalid_argument);
}

// ---- partition_progress: one split holding several partitions ----

// The rule of the class comment, evaluated by a direct scan after every call, against
// the tracker over random calls (observe, end, tick; 1 to 9 inputs, delays 0 and 3 ns,
// idle timeouts 0 and 4 ns). The tracker skips the scan while some active input still
// holds W (observe() and end() are O(1) then); the answers must not change.
TEST(watermark_tracker, matches_a_direct_scan_of_the_rule_on_random_calls) {
  struct model_input {
    event_time largest = event_time_min;
    rill::steady_time last;
    bool idle = false, ended = false;
  };
  std::uint64_t rng = 0x9e3779b97f4a7c15ULL;
  auto next = [&](std::uint64_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng % n;
  };
  for (int round = 0; round < 2000; ++round) {
    rill::manual_clock clk;
    const std::size_t n = 1 + next(9);
    const auto delay = std::chrono::nanoseconds{next(2) * 3};
    const auto idle = std::chrono::nanoseconds{next(2) * 4};
    watermark_tracker wm{n, delay, idle, clk.now()};
    std::vector<model_input> in(n, model_input{event_time_min, clk.now()});
    event_time w = event_time_min;
    auto contribution = [&](const model_input& m) { return rill::detail::saturating_sub(m.largest, delay); };
    auto rescan = [&] {
      bool all_ended = true, any_active = false;
      event_time lo = event_time_max;
      for (const auto& m : in) {
        if (m.ended) continue;
        all_ended = false;
        if (m.idle) continue;
        any_active = true;
        lo = std::min(lo, contribution(m));
      }
      if (all_ended) w = event_time_max;
      else if (any_active) w = std::max(w, lo);
    };
    for (int step = 0; step < 60; ++step) {
      const std::size_t i = next(n);
      switch (next(8)) {
        case 0:
          wm.end(i);
          in[i].ended = true;
          break;
        case 1:
          clk.advance(std::chrono::nanoseconds{1 + next(3)});
          wm.tick(clk.now());
          if (idle.count() > 0)
            for (auto& m : in)
              if (!m.ended && !m.idle && clk.now() - m.last >= idle) m.idle = true;
          break;
        default: {
          const event_time t{std::chrono::nanoseconds{std::int64_t(next(40))}};
          wm.observe(i, t, clk.now());
          if (in[i].ended) break;
          in[i].last = clk.now();
          in[i].idle = false;
          in[i].largest = std::max(in[i].largest, t);
        }
      }
      rescan();
      ASSERT_EQ(wm.current(), w) << "round " << round << " step " << step << " inputs " << n;
    }
  }
}

// An exchange's consumer at end of stream: n inputs, most of which sent nothing, end one
// by one. Each end() is O(1) while another input still holds W, so the n ends take O(n),
// not O(n^2): 100,000 inputs end within 1 s (a scan per end() is 5 * 10^9 input visits).
TEST(watermark_tracker, ending_many_inputs_is_linear) {
  rill::manual_clock clk;
  constexpr std::size_t n = 100'000;
  watermark_tracker wm{n, 0s, 0s, clk.now()};
  wm.observe(7, at(5s), clk.now());
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i + 1 < n; ++i) {
    wm.end(i);
    ASSERT_EQ(wm.current(), event_time_min) << i;  // input n-1 sent nothing yet
  }
  wm.end(n - 1);
  EXPECT_EQ(wm.current(), event_time_max);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

TEST(partition_progress, minimum_over_held_partitions_with_unread_ones_at_minus_infinity) {
  rill::manual_clock clk;
  rill::partition_progress pp{0s};  // never idle
  EXPECT_EQ(pp.current(clk.now()), event_time_min);  // nothing held: no claim
  pp.assign({0, 1}, clk.now());
  pp.observe(0, at(10s), clk.now());
  pp.observe(0, at(20s), clk.now());
  EXPECT_EQ(pp.current(clk.now()), event_time_min);  // partition 1 unread: -inf
  pp.observe(1, at(5s), clk.now());
  EXPECT_EQ(pp.current(clk.now()), at(5s));  // min(20, 5)
  pp.observe(1, at(3s), clk.now());
  EXPECT_EQ(pp.current(clk.now()), at(5s));  // an older record does not lower a partition
  pp.observe(1, at(30s), clk.now());
  EXPECT_EQ(pp.current(clk.now()), at(20s));  // min(20, 30)
}

TEST(partition_progress, assign_keeps_held_state_drops_revoked_and_adds_new_at_minus_infinity) {
  rill::manual_clock clk;
  rill::partition_progress pp{0s};
  pp.assign({0, 1}, clk.now());
  pp.observe(0, at(10s), clk.now());
  pp.observe(1, at(4s), clk.now());
  pp.assign({0}, clk.now());  // 1 revoked: it stops holding progress back
  EXPECT_EQ(pp.current(clk.now()), at(10s));
  EXPECT_EQ(pp.partitions(), 1u);
  pp.assign({0, 2}, clk.now());  // 2 new: -inf until read; 0 keeps its 10 s
  EXPECT_EQ(pp.current(clk.now()), event_time_min);
  pp.observe(2, at(12s), clk.now());
  EXPECT_EQ(pp.current(clk.now()), at(10s));
  pp.observe(7, at(1s), clk.now());  // a record from a partition not listed yet is added
  EXPECT_EQ(pp.partitions(), 3u);
  EXPECT_EQ(pp.current(clk.now()), at(1s));
}

TEST(partition_progress, idle_partitions_leave_the_minimum_and_all_idle_claims_the_maximum) {
  rill::manual_clock clk;
  rill::partition_progress pp{10s};
  pp.assign({0, 1}, clk.now());
  pp.observe(0, at(50s), clk.now());
  pp.observe(1, at(8s), clk.now());
  clk.advance(6s);
  pp.observe(0, at(60s), clk.now());
  EXPECT_EQ(pp.current(clk.now()), at(8s));  // 1 silent 6 s < 10 s: still counts
  clk.advance(4s);
  EXPECT_EQ(pp.current(clk.now()), at(60s));  // 1 silent 10 s: idle; 0 silent 4 s
  clk.advance(6s);
  EXPECT_EQ(pp.current(clk.now()), at(60s));  // both idle: max(60, 8)
  pp.touch(clk.now());  // e.g. the split was blocked: nobody is idle from now
  EXPECT_EQ(pp.current(clk.now()), at(8s));
  clk.advance(9s);
  pp.observe(1, at(9s), clk.now());  // 1 back with a record: counts again
  EXPECT_EQ(pp.current(clk.now()), at(9s));
}

}  // namespace

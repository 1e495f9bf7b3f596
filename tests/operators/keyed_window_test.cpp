// Tests for rill/operators/keyed_window.hpp (rill::keyed_window_aggregator) and the
// window rules of rill/operators/window.hpp, on the aggregator alone (no runtime):
//   - a brute-force reference (keyed_window_model.hpp, written from the rules, sharing no
//     code with the operator) compared with the operator on seeded random streams:
//     50 keys, disorder up to the delay, deliberately late records, negative times, two
//     inputs of which one goes idle (manual_clock ticks) or ends early; tumbling, sliding
//     with a slide that divides the size and one that does not, sessions with merges;
//     allowed lateness 0 and > 0;
//   - hand-worked cases with the arithmetic in the comments;
//   - C19 (FLINK-32828: per-partition inputs and progress markers) and C20 (FLINK-3554,
//     FLINK-2577) (a), (b), (c) at
//     this level (keyed_stream_test.cpp runs C20 through the runtime);
//   - the memory bound: state is O(keys x open windows), never O(records).
// Processing time comes from a manual_clock (no sleeps). Every expected value comes from
// the model or from the hand computation next to it, never from a run of the operator.
#include "rill/operators/keyed_window.hpp"
#include "../support/event_ms.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "keyed_window_model.hpp"

namespace {

using namespace std::chrono_literals;
using rill::event_time;
namespace model = keyed_window_model;

constexpr event_time at(std::chrono::nanoseconds d) { return event_time{d}; }
using rill_test::ms;
using rill_test::to_ms;
constexpr std::int64_t ns(std::chrono::nanoseconds d) { return d.count(); }

// (key, start ns, end ns, value, update) of one result.
template <class K, class R>
using row_t = std::tuple<K, std::int64_t, std::int64_t, R, bool>;

// Drives one aggregator by hand and keeps what it emits, in emission order.
template <class K, class T, class Assigner, class Agg>
struct harness {
  using aggregator = rill::keyed_window_aggregator<K, T, Assigner, Agg>;
  using result_type = typename aggregator::result_type;
  using output = typename aggregator::output;
  struct late_record {
    T value;
    event_time time;
    K key;
    event_time start, end;
  };

  rill::manual_clock clk;
  aggregator a;
  std::vector<rill::record<output>> out;
  std::vector<late_record> late;

  harness(Assigner as, rill::window_options o, Agg g = {}, std::size_t inputs = 1)
      : a{as, o, std::move(g), inputs, clk.now()} {}

  auto on_result() {
    return [this](rill::record<output>&& r) { out.push_back(std::move(r)); };
  }
  auto on_late() {
    return [this](rill::record<T>&& r, const K& k, event_time s, event_time e) {
      late.push_back({std::move(r.value), r.time, k, s, e});
    };
  }
  void push(const K& k, T v, event_time t, std::size_t input = 0,
            std::optional<rill::source_position> pos = std::nullopt) {
    a.push(input, k, rill::record<T>{std::move(v), t, pos, nullptr}, clk.now(), on_result(),
           on_late());
  }
  void progress(std::size_t input, event_time t) { a.progress(input, t, clk.now(), on_result()); }
  void end(std::size_t input = 0) { a.end(input, on_result()); }
  void tick() { a.tick(clk.now(), on_result()); }

  std::vector<row_t<K, result_type>> rows() const {
    std::vector<row_t<K, result_type>> v;
    for (const auto& r : out)
      v.emplace_back(r.value.key, ns(r.value.start.time_since_epoch()),
                     ns(r.value.end.time_since_epoch()), r.value.value, r.value.update);
    return v;
  }
  // Every result's record time is end - 1 ns (keyed_window_result).
  void expect_record_times() const {
    for (const auto& r : out) EXPECT_EQ(r.time, r.value.end - 1ns);
  }
};

// The ids of a window's records (the value of a record is its id): the strongest
// aggregate for a comparison, any misplaced record shows.
struct ids_agg {
  using accumulator = std::vector<int>;
  accumulator init() const { return {}; }
  void add(accumulator& a, const int& id) const { a.push_back(id); }
  void merge(accumulator& a, const accumulator& b) const { a.insert(a.end(), b.begin(), b.end()); }
  accumulator result(const accumulator& a) const {
    accumulator r = a;
    std::sort(r.begin(), r.end());
    return r;
  }
};

// ---------------------------------------------------------------------------------------
// Brute-force reference
// ---------------------------------------------------------------------------------------

struct run_result {
  std::vector<model::row> rows;  // emission order
  std::vector<model::late_row> late;
  std::uint64_t late_count = 0, fired = 0, updates = 0;
  std::size_t state_entries = 0, keys = 0;
  std::size_t bad_record_times = 0;
};

// Feeds `evs` to an aggregator the way keyed_window_model.hpp defines: event i at
// processing time (i + 1) ms, then a tick when idle_timeout > 0.
template <class Assigner>
run_result drive(Assigner as, const rill::window_options& o, std::size_t inputs,
                 const std::vector<model::event>& evs) {
  rill::manual_clock clk;
  rill::keyed_window_aggregator<int, int, Assigner, ids_agg> a{as, o, ids_agg{}, inputs, clk.now()};
  run_result got;
  std::size_t at_event = 0;
  auto on_result = [&](rill::record<rill::keyed_window_result<int, std::vector<int>>>&& r) {
    if (r.time != r.value.end - 1ns) ++got.bad_record_times;
    got.rows.push_back({r.value.key, to_ms(r.value.start), to_ms(r.value.end),
                        std::move(r.value.value), r.value.update, at_event});
  };
  auto on_late = [&](rill::record<int>&& r, const int& key, event_time s, event_time e) {
    got.late.push_back({r.value, key, to_ms(s), to_ms(e)});
  };
  for (std::size_t i = 0; i < evs.size(); ++i) {
    at_event = i;
    clk.advance(1ms);
    const model::event& e = evs[i];
    switch (e.k) {
      case model::event::kind::record:
        a.push(e.input, e.key, rill::record<int>{e.id, ms(e.t), std::nullopt, nullptr}, clk.now(),
               on_result, on_late);
        break;
      case model::event::kind::progress:
        a.progress(e.input, ms(e.t), clk.now(), on_result);
        break;
      case model::event::kind::end:
        a.end(e.input, on_result);
        break;
    }
    if (o.idle_timeout > 0ns) a.tick(clk.now(), on_result);
  }
  got.late_count = a.late();
  got.fired = a.fired();
  got.updates = a.updates();
  got.state_entries = a.state_entries();
  got.keys = a.keys();
  return got;
}

// Sorted `got` equals sorted `want`; on a difference, reports the first one.
template <class Row>
void expect_same_rows(std::vector<Row> got, std::vector<Row> want, const char* what) {
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (!(got[i] == want[i])) {
      ADD_FAILURE() << what << ": first difference at sorted position " << i << ": operator "
                    << got[i] << ", model " << want[i];
      return;
    }
  }
  if (got.size() > want.size())
    ADD_FAILURE() << what << ": operator has more, e.g. " << got[want.size()];
  if (want.size() > got.size())
    ADD_FAILURE() << what << ": model has more, e.g. " << want[got.size()];
}

struct coverage {
  std::size_t late = 0, allowed_late = 0, partly_late = 0, bridges = 0, merges = 0, updates = 0,
              rows = 0;
};

// One assigner over seeds 1..4 x allowed lateness {0, `lateness`} x {input 1 silent for a
// while and idle after 50 ms, input 1 ending at half the stream}.
template <class Assigner>
coverage check_against_model(Assigner as, model::options mo, model::stream_options so,
                             std::int64_t lateness) {
  coverage cov;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    for (std::int64_t al : {std::int64_t{0}, lateness}) {
      for (auto mode : {model::stream_options::second_input::silent_phase,
                        model::stream_options::second_input::ends_early}) {
        so.seed = seed;
        so.mode = mode;
        mo.lateness = al;
        mo.idle_timeout = mode == model::stream_options::second_input::silent_phase ? 50 : 0;
        mo.inputs = so.inputs;
        const auto evs = model::make_stream(so);
        const model::output want = model::run(evs, mo);
        const rill::window_options o{.max_delay = std::chrono::milliseconds{mo.delay},
                                     .allowed_lateness = std::chrono::milliseconds{al},
                                     .idle_timeout = std::chrono::milliseconds{mo.idle_timeout}};
        const run_result got = drive(as, o, so.inputs, evs);
        SCOPED_TRACE(testing::Message()
                     << "seed " << seed << " allowed_lateness " << al << " ms, "
                     << (mo.idle_timeout ? "input 1 idle" : "input 1 ends early"));

        expect_same_rows(got.rows, want.rows, "results (event, key, start, end, update, ids)");
        expect_same_rows(got.late, want.late, "late side output (id, key, window)");
        EXPECT_EQ(got.late_count, want.late.size());
        EXPECT_EQ(got.fired, want.rows.size());
        const auto want_updates = std::size_t(std::count_if(
            want.rows.begin(), want.rows.end(), [](const model::row& r) { return r.update; }));
        EXPECT_EQ(got.updates, want_updates);
        EXPECT_EQ(got.bad_record_times, 0u) << "a result's record time is end - 1 ns";
        EXPECT_EQ(got.state_entries, 0u) << "everything fired and was dropped at end of input";
        EXPECT_EQ(got.keys, 0u);
        if (al == 0) {
          // Exactly one result per (key, window), in non-decreasing window end.
          std::map<std::tuple<int, std::int64_t, std::int64_t>, int> per_window;
          for (const auto& r : got.rows) ++per_window[{r.key, r.start, r.end}];
          for (const auto& [w, n] : per_window)
            EXPECT_EQ(n, 1) << "key " << std::get<0>(w) << " [" << std::get<1>(w) << ", "
                            << std::get<2>(w) << ")";
          for (std::size_t i = 1; i < got.rows.size(); ++i)
            if (got.rows[i - 1].end > got.rows[i].end) {
              ADD_FAILURE() << "result " << i << " out of window-end order: " << got.rows[i - 1]
                            << " then " << got.rows[i];
              break;
            }
        }
        if (mo.idle_timeout > 0) {
          EXPECT_GT(want.idles, 0u) << "input 1 never went idle";
        }
        cov.late += want.late.size();
        cov.allowed_late += want.allowed_late;
        cov.partly_late += want.partly_late;
        cov.bridges += want.bridges;
        cov.merges += want.merges;
        cov.updates += want_updates;
        cov.rows += want.rows.size();
      }
    }
  }
  return cov;
}

// Aligned streams: 3000 records from -20 s, times in whole ms, delay 200 ms, disorder up
// to the delay, 5 % of records 200 ms + U[1 ms, 3 s] behind; input 1 runs 300 ms behind
// input 0 (so while it is idle W jumps ahead, and its records are partly late when it
// comes back); at a quarter of the stream time jumps 4 s (windows pass with no data) and
// half of the next 100 records are late, landing in those windows.
model::stream_options aligned_stream() {
  return {.records = 3000,
          .keys = 50,
          .start = -20000,
          .step = 40,
          .grain = 1,
          .disorder = 200,
          .late_fraction = 0.05,
          .late_span = 3000,
          .inputs = 2,
          .lag1 = 300};
}

TEST(keyed_window, tumbling_matches_reference) {
  const model::options mo{
      .s = model::options::shape::aligned, .size = 1000, .slide = 1000, .delay = 200};
  const coverage c = check_against_model(rill::tumbling{1000ms}, mo, aligned_stream(), 500);
  EXPECT_GT(c.late, 0u);
  EXPECT_GT(c.allowed_late, 0u);
  EXPECT_GT(c.updates, 0u);
  EXPECT_GT(c.rows, 1000u);
}

TEST(keyed_window, sliding_slide_divides_size_matches_reference) {
  const model::options mo{
      .s = model::options::shape::aligned, .size = 1000, .slide = 250, .delay = 200};
  const coverage c =
      check_against_model(rill::sliding{.size = 1000ms, .slide = 250ms}, mo, aligned_stream(), 500);
  EXPECT_GT(c.late, 0u);
  EXPECT_GT(c.partly_late, 0u);  // records late for some of their windows only
  EXPECT_GT(c.updates, 0u);
}

TEST(keyed_window, sliding_slide_not_dividing_size_matches_reference) {
  // size 1000 ms, slide 300 ms: a time is in 3 or 4 windows; slices of gcd = 100 ms.
  const model::options mo{
      .s = model::options::shape::aligned, .size = 1000, .slide = 300, .delay = 200};
  const coverage c =
      check_against_model(rill::sliding{.size = 1000ms, .slide = 300ms}, mo, aligned_stream(), 500);
  EXPECT_GT(c.late, 0u);
  EXPECT_GT(c.partly_late, 0u);
  EXPECT_GT(c.updates, 0u);
}

// Sessions: the model simulates sessions event by event (keyed_window_model.hpp says why
// sorting and splitting at the end is wrong under disorder). Two sets of streams: times
// in whole ms with delay 200 ms, where W sometimes equals a session's end exactly (the
// "closes once W > end" boundary); and even times with an odd delay (199 ms), where it
// never does, with more records exactly `gap` apart.
TEST(keyed_window, session_matches_reference) {
  for (std::int64_t grain : {1, 2}) {
    SCOPED_TRACE(testing::Message() << "grain " << grain << " ms");
    const model::options mo{
        .s = model::options::shape::session, .gap = 800, .delay = grain == 1 ? 200 : 199};
    model::stream_options so = aligned_stream();
    so.grain = grain;
    so.disorder = grain == 1 ? 200 : 198;
    const coverage c = check_against_model(rill::session{800ms}, mo, so, 400);
    EXPECT_GT(c.late, 0u);
    EXPECT_GT(c.merges, 100u);
    EXPECT_GT(c.bridges, 0u);  // records that join two live sessions into one
    EXPECT_GT(c.allowed_late, 0u);
    EXPECT_GT(c.updates, 0u);
  }
}

// The reference itself, on the design example (so a wrong model cannot agree with a wrong
// operator unnoticed): tumbling 10 s, delay 2 s, events 1, 5, 11, 9, 15 s.
TEST(keyed_window, reference_model_on_the_design_example) {
  std::vector<model::event> evs;
  int id = 0;
  for (std::int64_t s : {1, 5, 11, 9, 15})
    evs.push_back({model::event::kind::record, 0, 7, s * 1000, id++});
  evs.push_back({model::event::kind::end, 0, 0, 0, -1});
  const auto out = model::run(
      evs, {.s = model::options::shape::aligned, .size = 10000, .slide = 10000, .delay = 2000});
  // [0, 10 s) = ids 0, 1, 3 fires at event 4 (15 s: W = 13 s); [10 s, 20 s) = ids 2, 4 at end
  // (event 5).
  const std::vector<model::row> want = {{7, 0, 10000, {0, 1, 3}, false, 4},
                                        {7, 10000, 20000, {2, 4}, false, 5}};
  EXPECT_EQ(out.rows, want);
  EXPECT_TRUE(out.late.empty());
}

// ---------------------------------------------------------------------------------------
// Hand-worked cases
// ---------------------------------------------------------------------------------------

using count_harness = harness<std::string, int, rill::tumbling, rill::agg::count>;

// docs/design.md "Keyed windows": tumbling 10 s, delay 2 s, events 1, 5, 11, 9, 15 s.
TEST(keyed_window, design_example_tumbling_count) {
  count_harness h{rill::tumbling{10s}, {.max_delay = 2s}};
  h.push("k", 1, at(1s));    // W = 1 - 2 = -1 s
  h.push("k", 5, at(5s));    // W = 3 s
  h.push("k", 11, at(11s));  // W = 9 s < 10 s: [0, 10 s) stays open
  h.push("k", 9, at(9s));    // W (before) = 9 s < end 10 s: on time, joins [0, 10 s)
  EXPECT_TRUE(h.out.empty());
  EXPECT_EQ(h.a.watermark(), at(9s));
  h.push("k", 15, at(15s));  // W = 13 s >= 10 s: [0, 10 s) fires with 1, 5, 9
  using row = row_t<std::string, std::uint64_t>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{"k", 0, ns(10s), 3, false}}));
  EXPECT_EQ(h.a.state_entries(), 1u);  // [10 s, 20 s) holds 11, 15
  EXPECT_EQ(h.a.peak_state_entries(), 2u);
  h.end();  // W = +inf: [10 s, 20 s) with 11, 15
  EXPECT_EQ(h.rows(),
            (std::vector<row>{{"k", 0, ns(10s), 3, false}, {"k", ns(10s), ns(20s), 2, false}}));
  h.expect_record_times();  // 10 s - 1 ns, 20 s - 1 ns
  EXPECT_EQ(h.a.fired(), 2u);
  EXPECT_EQ(h.a.late(), 0u);
  EXPECT_EQ(h.a.updates(), 0u);
  EXPECT_EQ(h.a.state_entries(), 0u);
  EXPECT_EQ(h.a.keys(), 0u);
}

TEST(keyed_window, window_fires_exactly_when_watermark_reaches_its_end) {
  count_harness h{rill::tumbling{10s}, {.max_delay = 0s}};
  h.push("k", 0, at(10s) - 1ns);  // last instant of [0, 10 s); W = 10 s - 1 ns
  EXPECT_TRUE(h.out.empty());
  h.push("j", 0, at(10s));  // W = 10 s >= end 10 s: fires; 10 s itself is in [10 s, 20 s)
  using row = row_t<std::string, std::uint64_t>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{"k", 0, ns(10s), 1, false}}));
  h.push("k", 0, at(10s) - 1ns);  // W = 10 s = end + 0: late, window [0, 10 s)
  ASSERT_EQ(h.late.size(), 1u);
  EXPECT_EQ(h.late[0].start, at(0s));
  EXPECT_EQ(h.late[0].end, at(10s));
  h.push("k", 0, at(10s));  // W = 10 s: on time for [10 s, 20 s)
  h.end();
  auto rows = h.rows();
  std::sort(rows.begin() + 1, rows.end());  // keys of one end come in no particular order
  EXPECT_EQ(rows, (std::vector<row>{{"k", 0, ns(10s), 1, false},
                                    {"j", ns(10s), ns(20s), 1, false},
                                    {"k", ns(10s), ns(20s), 1, false}}));
}

// Sliding 10 s every 3 s (3 does not divide 10): window k = [3k, 3k + 10) s, a time is in
// 3 or 4 windows. Delay 0, values summed:
//   t =  0 s (value 1):   3k <= 0 < 3k + 10  ->  k = -3..0: [-9,1) [-6,4) [-3,7) [0,10)
//   t =  7 s (value 10):  k = 0..2: [0,10) [3,13) [6,16)
//   t = 11 s (value 100): k = 1..3: [3,13) [6,16) [9,19)
TEST(keyed_window, sliding_slide_not_dividing_size_hand_worked) {
  const auto sum = rill::agg::sum_of<int>([](const int& v) { return v; });
  harness<int, int, rill::sliding, decltype(sum)> h{
      rill::sliding{.size = 10s, .slide = 3s}, {.max_delay = 0s}, sum};
  h.push(1, 1, at(0s));  // W = 0: no window ends at or before 0
  EXPECT_TRUE(h.out.empty());
  h.push(1, 10,
         at(7s));  // W = 7 s: [-9,1) [-6,4) [-3,7) fire, each {0 s} = 1 (7 s is not in [-3,7))
  using row = row_t<int, int>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{1, ns(-9s), ns(1s), 1, false},
                                        {1, ns(-6s), ns(4s), 1, false},
                                        {1, ns(-3s), ns(7s), 1, false}}));
  h.push(1, 100, at(11s));  // W = 11 s: [0,10) = 1 + 10 = 11
  ASSERT_EQ(h.out.size(), 4u);
  EXPECT_EQ(h.rows()[3], (row{1, 0, ns(10s), 11, false}));
  h.end();  // [3,13) = 10 + 100, [6,16) = 10 + 100, [9,19) = 100
  EXPECT_EQ(h.rows(), (std::vector<row>{{1, ns(-9s), ns(1s), 1, false},
                                        {1, ns(-6s), ns(4s), 1, false},
                                        {1, ns(-3s), ns(7s), 1, false},
                                        {1, 0, ns(10s), 11, false},
                                        {1, ns(3s), ns(13s), 110, false},
                                        {1, ns(6s), ns(16s), 110, false},
                                        {1, ns(9s), ns(19s), 100, false}}));
  h.expect_record_times();
  EXPECT_EQ(h.a.late(), 0u);
}

// A record late for some of its sliding windows is folded into the others only; late for
// all of them, it goes to the side output with its latest-ending window.
// Sliding 10 s every 5 s, delay 0: window k = [5k, 5k + 10).
TEST(keyed_window, sliding_record_late_for_some_windows_joins_the_rest) {
  harness<std::string, int, rill::sliding, rill::agg::count> h{
      rill::sliding{.size = 10s, .slide = 5s}, {.max_delay = 0s}};
  h.push("a", 12, at(12s));  // windows [5,15) [10,20); W = 12 s
  h.push("a", 7, at(7s));    // windows [0,10): 10 <= 12 gone; [5,15): 15 > 12 joins
  EXPECT_EQ(h.a.late(), 0u);
  h.push("a", 3, at(3s));  // windows [-5,5) and [0,10): 5, 10 <= 12: late, reported [0, 10)
  ASSERT_EQ(h.late.size(), 1u);
  EXPECT_EQ(h.late[0].value, 3);
  EXPECT_EQ(h.late[0].key, "a");
  EXPECT_EQ(h.late[0].start, at(0s));
  EXPECT_EQ(h.late[0].end, at(10s));
  h.end();
  using row = row_t<std::string, std::uint64_t>;
  // [0,10) never had an on-time record of "a": not emitted. [5,15) = {12, 7}, [10,20) = {12}.
  EXPECT_EQ(h.rows(), (std::vector<row>{{"a", ns(5s), ns(15s), 2, false},
                                        {"a", ns(10s), ns(20s), 1, false}}));
}

// A record with an ack token (a Kafka source's) after the stacks have packed the closed
// slices: from then on windows are merged slice by slice with their tokens, including
// the packed ones. Sliding 4 s every 1 s, delay 0: window k = [k, k + 4).
//   a at 0..5 s, b at 2 s, then a at 6 s with a token:
//   [-3,1) a 1 | [-2,2) a 2 | [-1,3) a 3, b 1 | [0,4) a 4, b 1 | [1,5) a 4, b 1 |
//   [2,6) a 4, b 1 (6 s is not in it: no token) | [3,7) a 4 | [4,8) a 3 | [5,9) a 2 |
//   [6,10) a 1 — the last four with the token.
TEST(keyed_window, sliding_acked_record_after_packed_slices_keeps_counts_and_token) {
  struct token final : rill::ack_token {
    void fail() noexcept override {}
  };
  harness<std::string, int, rill::sliding, rill::agg::count> h{
      rill::sliding{.size = 4s, .slide = 1s}, {.max_delay = 0s}};
  for (int s = 0; s <= 5; ++s) {
    h.push("a", s, at(std::chrono::seconds{s}));
    if (s == 2) h.push("b", s, at(2s));
  }
  const auto tok = std::make_shared<token>();
  h.a.push(0, "a", rill::record<int>{6, at(6s), std::nullopt, tok}, h.clk.now(), h.on_result(), h.on_late());
  h.end();
  using row = row_t<std::string, std::uint64_t>;
  auto got = h.rows();
  std::stable_sort(got.begin(), got.end(), [](const row& x, const row& y) {  // keys of one end: any order
    return std::tie(std::get<2>(x), std::get<0>(x)) < std::tie(std::get<2>(y), std::get<0>(y));
  });
  EXPECT_EQ(got, (std::vector<row>{{"a", ns(-3s), ns(1s), 1, false},
                                   {"a", ns(-2s), ns(2s), 2, false},
                                   {"a", ns(-1s), ns(3s), 3, false},
                                   {"b", ns(-1s), ns(3s), 1, false},
                                   {"a", 0, ns(4s), 4, false},
                                   {"b", 0, ns(4s), 1, false},
                                   {"a", ns(1s), ns(5s), 4, false},
                                   {"b", ns(1s), ns(5s), 1, false},
                                   {"a", ns(2s), ns(6s), 4, false},
                                   {"b", ns(2s), ns(6s), 1, false},
                                   {"a", ns(3s), ns(7s), 4, false},
                                   {"a", ns(4s), ns(8s), 3, false},
                                   {"a", ns(5s), ns(9s), 2, false},
                                   {"a", ns(6s), ns(10s), 1, false}}));
  for (const auto& r : h.out) {
    const bool holds_six = r.value.key == "a" && r.value.end > at(6s);
    EXPECT_EQ(r.ack == tok, holds_six) << r.value.key << " [" << to_ms(r.value.start) << ", "
                                       << to_ms(r.value.end) << ") ms";
  }
  EXPECT_EQ(h.a.state_entries(), 0u);
}

// Allowed lateness on tumbling windows: 10 s windows, delay 0, allowed lateness 5 s.
TEST(keyed_window, tumbling_allowed_lateness_updates_then_late_beyond) {
  count_harness h{rill::tumbling{10s}, {.max_delay = 0s, .allowed_lateness = 5s}};
  using row = row_t<std::string, std::uint64_t>;
  h.push("a", 1, at(1s));
  h.push("a", 3, at(3s));
  h.push("a", 12, at(12s));  // W = 12 s: [0,10) fires {1, 3} = 2
  EXPECT_EQ(h.rows(), (std::vector<row>{{"a", 0, ns(10s), 2, false}}));
  h.push("a", 8, at(8s));  // end 10 <= W 12 < 10 + 5: allowed-late: at once, 3, update
  h.push("b", 7, at(7s));  // allowed-late too, but "b" had no result there: 1, not an update
  EXPECT_EQ(h.rows(), (std::vector<row>{{"a", 0, ns(10s), 2, false},
                                        {"a", 0, ns(10s), 3, true},
                                        {"b", 0, ns(10s), 1, false}}));
  EXPECT_EQ(h.out[1].time, at(10s) - 1ns);
  h.push("a", 16, at(16s));  // W = 16 s >= 10 + 5: [0,10) state is dropped
  h.push("a", 9, at(9s));    // end + lateness = 15 s <= 16 s: late, reported [0, 10 s)
  ASSERT_EQ(h.late.size(), 1u);
  EXPECT_EQ(h.late[0].value, 9);
  EXPECT_EQ(h.late[0].time, at(9s));
  EXPECT_EQ(h.late[0].start, at(0s));
  EXPECT_EQ(h.late[0].end, at(10s));
  EXPECT_EQ(h.out.size(), 3u);  // the late record changed nothing
  h.end();                      // [10,20) = {12, 16}
  EXPECT_EQ(h.rows().back(), (row{"a", ns(10s), ns(20s), 2, false}));
  EXPECT_EQ(h.a.fired(), 4u);
  EXPECT_EQ(h.a.updates(), 1u);
  EXPECT_EQ(h.a.late(), 1u);
  h.expect_record_times();
}

// An allowed-late record in a window that no key had data in: emitted once, at once, not
// as an update. Tumbling 10 s, delay 0, allowed lateness 5 s; nothing has fired yet.
TEST(keyed_window, allowed_late_record_in_an_empty_passed_window_is_emitted_once) {
  count_harness h{rill::tumbling{10s}, {.max_delay = 0s, .allowed_lateness = 5s}};
  h.push("a", 12, at(12s));  // W = 12 s; [10,20) open; [0,10) has passed with no data
  h.push("a", 8, at(8s));    // [0,10): end 10 <= W 12 < 10 + 5: allowed-late, emitted at once
  using row = row_t<std::string, std::uint64_t>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{"a", 0, ns(10s), 1, false}}));
  h.end();
  EXPECT_EQ(h.rows(),
            (std::vector<row>{{"a", 0, ns(10s), 1, false}, {"a", ns(10s), ns(20s), 1, false}}));
  EXPECT_EQ(h.a.fired(), 2u);
}

// Sessions, gap 5 s, delay 0, allowed lateness 20 s: a late-but-allowed record bridges two
// closed sessions of its key; the merged session is emitted at once as an update.
// (A session closes once W > its end.)
TEST(keyed_window, session_bridging_record_within_allowed_lateness_merges_and_updates) {
  harness<std::string, int, rill::session, rill::agg::count> h{
      rill::session{5s}, {.max_delay = 0s, .allowed_lateness = 20s}};
  using row = row_t<std::string, std::uint64_t>;
  h.push("a", 0, at(0s));    // a: [0, 5)
  h.push("a", 8, at(8s));    // [8, 13) does not touch [0, 5) (5 < 8); W = 8 > 5: [0,5) closes
  h.push("b", 14, at(14s));  // W = 14 > 13: [8, 13) closes; b: [14, 19) open
  EXPECT_EQ(h.rows(),
            (std::vector<row>{{"a", 0, ns(5s), 1, false}, {"a", ns(8s), ns(13s), 1, false}}));
  // a at 4 s: [4, 9) touches [0, 5) (5 >= 4) and [8, 13) (8 <= 9): merged [0, 13).
  // 13 + 20 >= W = 14: not late; 13 < W: closed, emitted at once, count 3, update.
  h.push("a", 4, at(4s));
  EXPECT_EQ(h.rows(), (std::vector<row>{{"a", 0, ns(5s), 1, false},
                                        {"a", ns(8s), ns(13s), 1, false},
                                        {"a", 0, ns(13s), 3, true}}));
  EXPECT_EQ(h.a.late(), 0u);
  EXPECT_EQ(h.a.state_entries(), 2u);  // a: [0, 13); b: [14, 19)
  h.push("b", 40, at(40s));  // W = 40: b's [14,19) closes; a's [0,13) dropped (13 + 20 < 40)
  h.push("a", 1, at(1s));    // [1, 6): nothing live to join; 6 + 20 < 40: late, window [1 s, 6 s)
  ASSERT_EQ(h.late.size(), 1u);
  EXPECT_EQ(h.late[0].start, at(1s));
  EXPECT_EQ(h.late[0].end, at(6s));
  h.end();
  EXPECT_EQ(h.rows(), (std::vector<row>{{"a", 0, ns(5s), 1, false},
                                        {"a", ns(8s), ns(13s), 1, false},
                                        {"a", 0, ns(13s), 3, true},
                                        {"b", ns(14s), ns(19s), 1, false},
                                        {"b", ns(40s), ns(45s), 1, false}}));
  EXPECT_EQ(h.a.fired(), 5u);
  EXPECT_EQ(h.a.updates(), 1u);
  h.expect_record_times();
}

// Sessions with allowed lateness 0: an on-time record bridging two open sessions merges
// them before either fires.
TEST(keyed_window, session_on_time_bridge_merges_open_sessions) {
  harness<std::string, int, rill::session, rill::agg::count> h{rill::session{5s},
                                                               {.max_delay = 10s}};
  h.push("a", 0, at(0s));    // [0, 5)
  h.push("a", 12, at(12s));  // [12, 17): 12 > 5, separate; W = 2 s
  h.push("a", 6, at(6s));    // [6, 11): touches neither (5 < 6, 11 < 12)
  EXPECT_EQ(h.a.state_entries(), 3u);
  h.push("a", 9, at(9s));  // [9, 14): touches [6, 11) and [12, 17): merged [6, 17)
  EXPECT_EQ(h.a.state_entries(), 2u);
  h.end();
  using row = row_t<std::string, std::uint64_t>;
  EXPECT_EQ(h.rows(),
            (std::vector<row>{{"a", 0, ns(5s), 1, false}, {"a", ns(6s), ns(17s), 3, false}}));
}

// window.hpp: records exactly `gap` apart form one session (windows that touch merge).
TEST(keyed_window, session_records_exactly_gap_apart_merge) {
  harness<std::string, int, rill::session, rill::agg::count> h{rill::session{10s},
                                                               {.max_delay = 0s}};
  h.push("a", 0, at(0s));         // [0, 10)
  h.push("a", 0, at(10s));        // [10, 20) touches [0, 10) (10 <= 10): [0, 20); W = 10 s
  h.push("a", 0, at(20s) + 1ns);  // 10 s + 1 ns after the last event: [20 s + 1 ns, 30 s + 1 ns)
  h.end();
  using row = row_t<std::string, std::uint64_t>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{"a", 0, ns(20s), 2, false},
                                        {"a", ns(20s) + 1, ns(30s) + 1, 1, false}}));
}

// The session boundary: W reaches a session's end exactly, then an on-time record of
// that key arrives exactly `gap` after the session's last event. Gap 10 s, delay 0:
//   a @ 0          a: [0, 10); W = 0
//   b @ 10 s       W = 10 s: a's [0, 10) does not close (W is not > 10 s)
//   a @ 10 s       on time (10 s is not < W) and exactly gap after a @ 0: touches, a's
//                  records form one session [0, 20) (window.hpp: "records closer than or
//                  exactly gap apart form one session")
//   c @ 0          own [0, 10): end 10 s is not < W = 10 s: not late, c: [0, 10)
//   b @ 20 s + 1 ns  W = 20 s + 1 ns > 20 s: c's [0,10), a's [0,20), b's [10,20) close
//   c @ 9 s        own [9 s, 19 s): 19 s < W and c's [0, 10) is gone: late
TEST(keyed_window, session_record_exactly_gap_after_at_the_watermark_merges) {
  harness<std::string, int, rill::session, rill::agg::count> h{rill::session{10s},
                                                               {.max_delay = 0s}};
  h.push("a", 0, at(0s));
  h.push("b", 0, at(10s));
  EXPECT_TRUE(h.out.empty());
  h.push("a", 0, at(10s));
  h.push("c", 0, at(0s));
  EXPECT_EQ(h.a.late(), 0u);
  EXPECT_TRUE(h.out.empty());
  h.push("b", 0, at(20s) + 1ns);
  using row = row_t<std::string, std::uint64_t>;
  auto rows = h.rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (row{"c", 0, ns(10s), 1, false}));  // end 10 s first
  std::sort(rows.begin() + 1, rows.end());               // keys of one end: any order
  EXPECT_EQ(rows[1], (row{"a", 0, ns(20s), 2, false}));
  EXPECT_EQ(rows[2], (row{"b", ns(10s), ns(20s), 1, false}));
  h.push("c", 0, at(9s));
  ASSERT_EQ(h.late.size(), 1u);
  EXPECT_EQ(h.late[0].start, at(9s));
  EXPECT_EQ(h.late[0].end, at(19s));
  h.end();
  EXPECT_EQ(h.rows().back(), (row{"b", ns(20s) + 1, ns(30s) + 1, 1, false}));
}

// Negative times floor (rill::window_start; C01, FLINK-26334): -1 ns is in [-10 s, 0).
TEST(keyed_window, negative_times_floor) {
  harness<int, int, rill::tumbling, ids_agg> h{rill::tumbling{10s}, {.max_delay = 60s}};
  h.push(0, 1, at(-1ns));        // [-10 s, 0)
  h.push(0, 2, at(-10s));        // start of [-10 s, 0)
  h.push(0, 3, at(-10s) - 1ns);  // [-20 s, -10 s)
  h.push(0, 4, at(0s));          // [0, 10 s)
  h.push(0, 5, at(-15s));        // [-20 s, -10 s)
  EXPECT_TRUE(h.out.empty());    // W = 0 - 60 s
  h.end();
  using row = row_t<int, std::vector<int>>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{0, ns(-20s), ns(-10s), {3, 5}, false},
                                        {0, ns(-10s), 0, {1, 2}, false},
                                        {0, 0, ns(10s), {4}, false}}));
  // Sliding 10 s every 4 s: -1 ns is in k with 4k <= -1 ns < 4k + 10: k = -1, -2:
  // [-4 s, 6 s) and [-8 s, 2 s) (k = -3: [-12 s, -2 s) ends before -1 ns).
  harness<int, int, rill::sliding, ids_agg> s{rill::sliding{.size = 10s, .slide = 4s},
                                              {.max_delay = 0s}};
  s.push(0, 1, at(-1ns));
  s.end();
  EXPECT_EQ(s.rows(),
            (std::vector<row>{{0, ns(-8s), ns(2s), {1}, false}, {0, ns(-4s), ns(6s), {1}, false}}));
}

// Values of every ready aggregate. Input, one key, delay 0, in order:
//   (value 4, 1 s) (value -3, 2 s) (value 10, 5 s) (value 7, 12 s)
template <class Assigner, class Agg>
auto aggregate_rows(Assigner a, Agg g) {
  harness<int, int, Assigner, Agg> h{a, {.max_delay = 0s}, std::move(g)};
  h.push(0, 4, at(1s));
  h.push(0, -3, at(2s));
  h.push(0, 10, at(5s));
  h.push(0, 7, at(12s));
  h.end();
  return h.rows();
}

TEST(keyed_window, aggregate_values_sum_min_max_mean_reduce) {
  const auto id = [](const int& v) { return v; };
  const auto product = [](const int& x, const int& y) { return x * y; };
  using irow = row_t<int, int>;
  using drow = row_t<int, double>;
  // Tumbling 10 s: [0,10) = {4, -3, 10}: sum 11, min -3, max 10, mean 11/3, product -120;
  // [10,20) = {7}.
  const rill::tumbling tw{10s};
  EXPECT_EQ(aggregate_rows(tw, rill::agg::sum_of<int>(id)),
            (std::vector<irow>{{0, 0, ns(10s), 11, false}, {0, ns(10s), ns(20s), 7, false}}));
  EXPECT_EQ(aggregate_rows(tw, rill::agg::min_of<int>(id)),
            (std::vector<irow>{{0, 0, ns(10s), -3, false}, {0, ns(10s), ns(20s), 7, false}}));
  EXPECT_EQ(aggregate_rows(tw, rill::agg::max_of<int>(id)),
            (std::vector<irow>{{0, 0, ns(10s), 10, false}, {0, ns(10s), ns(20s), 7, false}}));
  EXPECT_EQ(
      aggregate_rows(tw, rill::agg::mean_of<int>(id)),
      (std::vector<drow>{{0, 0, ns(10s), 11.0 / 3.0, false}, {0, ns(10s), ns(20s), 7.0, false}}));
  EXPECT_EQ(aggregate_rows(tw, rill::agg::reduce_of<int>(product)),
            (std::vector<irow>{{0, 0, ns(10s), -120, false}, {0, ns(10s), ns(20s), 7, false}}));
  // fold without merge (tumbling only): sum of squares 16 + 9 + 100 = 125; 49.
  EXPECT_EQ(aggregate_rows(tw, rill::agg::fold(0, [](int& a, const int& v) { a += v * v; })),
            (std::vector<irow>{{0, 0, ns(10s), 125, false}, {0, ns(10s), ns(20s), 49, false}}));

  // Sliding 10 s every 5 s (slices of 5 s are merged): windows of 1 s and 2 s: [-5,5)
  // [0,10); of 5 s: [0,10) [5,15); of 12 s: [5,15) [10,20).
  //   [-5,5) = {4, -3}: sum 1, min -3, max 4, mean 0.5, product -12
  //   [0,10) = {4, -3, 10}: 11, -3, 10, 11/3, -120
  //   [5,15) = {10, 7}: 17, 7, 10, 8.5, 70
  //   [10,20) = {7}: 7, 7, 7, 7, 7
  const rill::sliding sw{.size = 10s, .slide = 5s};
  const auto sliding_rows = [](int a, int b, int c, int d) {
    return std::vector<irow>{{0, ns(-5s), ns(5s), a, false},
                             {0, 0, ns(10s), b, false},
                             {0, ns(5s), ns(15s), c, false},
                             {0, ns(10s), ns(20s), d, false}};
  };
  EXPECT_EQ(aggregate_rows(sw, rill::agg::sum_of<int>(id)), sliding_rows(1, 11, 17, 7));
  EXPECT_EQ(aggregate_rows(sw, rill::agg::min_of<int>(id)), sliding_rows(-3, -3, 7, 7));
  EXPECT_EQ(aggregate_rows(sw, rill::agg::max_of<int>(id)), sliding_rows(4, 10, 10, 7));
  EXPECT_EQ(aggregate_rows(sw, rill::agg::reduce_of<int>(product)), sliding_rows(-12, -120, 70, 7));
  EXPECT_EQ(aggregate_rows(sw, rill::agg::mean_of<int>(id)),
            (std::vector<drow>{{0, ns(-5s), ns(5s), 0.5, false},
                               {0, 0, ns(10s), 11.0 / 3.0, false},
                               {0, ns(5s), ns(15s), 8.5, false},
                               {0, ns(10s), ns(20s), 7.0, false}}));

  // Session gap 3 s: 1 s, 2 s (1 s apart), 5 s (3 s apart: touches) -> [1 s, 8 s) =
  // {4, -3, 10}; 12 s (7 s after 5 s) -> [12 s, 15 s) = {7}.
  const rill::session gw{3s};
  EXPECT_EQ(aggregate_rows(gw, rill::agg::sum_of<int>(id)),
            (std::vector<irow>{{0, ns(1s), ns(8s), 11, false}, {0, ns(12s), ns(15s), 7, false}}));
  EXPECT_EQ(aggregate_rows(gw, rill::agg::min_of<int>(id)),
            (std::vector<irow>{{0, ns(1s), ns(8s), -3, false}, {0, ns(12s), ns(15s), 7, false}}));
  EXPECT_EQ(aggregate_rows(gw, rill::agg::max_of<int>(id)),
            (std::vector<irow>{{0, ns(1s), ns(8s), 10, false}, {0, ns(12s), ns(15s), 7, false}}));
  EXPECT_EQ(aggregate_rows(gw, rill::agg::reduce_of<int>(product)),
            (std::vector<irow>{{0, ns(1s), ns(8s), -120, false}, {0, ns(12s), ns(15s), 7, false}}));
  EXPECT_EQ(aggregate_rows(gw, rill::agg::mean_of<int>(id)),
            (std::vector<drow>{{0, ns(1s), ns(8s), 11.0 / 3.0, false},
                               {0, ns(12s), ns(15s), 7.0, false}}));
}

// An idle input stops holding W back (manual clock); when it comes back, its records
// older than W are late. Two inputs, idle timeout 100 ms, tumbling 10 s, delay 0.
TEST(keyed_window, idle_input_stops_holding_the_watermark) {
  harness<int, int, rill::tumbling, rill::agg::count> h{
      rill::tumbling{10s}, {.idle_timeout = 100ms}, {}, 2};
  h.push(0, 1, at(1s), 0);  // processing time 0 (construction too)
  h.clk.advance(99ms);
  h.push(0, 12, at(12s), 0);  // at 99 ms; input 1 has sent nothing: W = -inf
  EXPECT_EQ(h.a.watermark(), rill::event_time_min);
  h.tick();  // input 1 silent for 99 ms < 100 ms: still counted
  EXPECT_TRUE(h.out.empty());
  h.clk.advance(1ms);
  h.tick();  // 100 ms: input 1 idle (input 0 active 1 ms ago), W = 12 s: [0, 10) fires with {1 s}
  EXPECT_EQ(h.a.watermark(), at(12s));
  using row = row_t<int, std::uint64_t>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{0, 0, ns(10s), 1, false}}));
  h.push(0, 5, at(5s), 1);  // input 1 is back; 5 s: end 10 s <= W 12 s: late
  EXPECT_EQ(h.a.late(), 1u);
  h.push(0, 13, at(13s), 1);  // W = max(12, min(12, 13)) = 12 s
  EXPECT_EQ(h.a.watermark(), at(12s));
  h.end(0);
  h.end(1);
  EXPECT_EQ(h.rows(),
            (std::vector<row>{{0, 0, ns(10s), 1, false}, {0, ns(10s), ns(20s), 2, false}}));
}

TEST(keyed_window, bad_options_throw_config_error_with_key) {
  auto key_of = [](auto assigner, rill::window_options o, std::size_t inputs = 1) -> std::string {
    try {
      rill::keyed_window_aggregator<int, int, decltype(assigner), rill::agg::count> a{
          assigner, o, {}, inputs, {}};
    } catch (const rill::config_error& e) {
      return e.key();
    }
    return "no throw";
  };
  EXPECT_EQ(key_of(rill::tumbling{}, {}), "window.size");
  EXPECT_EQ(key_of(rill::tumbling{-1s}, {}), "window.size");
  EXPECT_EQ(key_of(rill::sliding{.size = 0s, .slide = 1s}, {}), "window.size");
  EXPECT_EQ(key_of(rill::sliding{.size = 10s, .slide = 0s}, {}), "window.slide");
  EXPECT_EQ(key_of(rill::sliding{.size = 10s, .slide = 11s}, {}), "window.slide");
  // a record would be in 10^6 + 1 windows (and one result per key for each)
  EXPECT_EQ(key_of(rill::sliding{.size = 1000001ns, .slide = 1ns}, {}), "window.slide");
  EXPECT_EQ(key_of(rill::sliding{.size = 1000000ns, .slide = 1ns}, {}), "no throw");
  EXPECT_EQ(key_of(rill::session{0s}, {}), "window.gap");
  EXPECT_EQ(key_of(rill::tumbling{1s}, {.max_delay = -1ns}), "window.max_delay");
  EXPECT_EQ(key_of(rill::tumbling{1s}, {.allowed_lateness = -1ns}), "window.allowed_lateness");
  EXPECT_EQ(key_of(rill::tumbling{1s}, {.idle_timeout = -1ns}), "window.idle_timeout");
  EXPECT_EQ(key_of(rill::tumbling{1s}, {}, 0), "window.inputs");
  EXPECT_EQ(key_of(rill::sliding{.size = 10s, .slide = 10s}, {}), "no throw");
}

// ---------------------------------------------------------------------------------------
// C19 (FLINK-32828), C20 (FLINK-3554, FLINK-2577) at the aggregator
// ---------------------------------------------------------------------------------------

// C19: partitions p0 and p1 are both assigned from the start (inputs = 2). Their records
// carry a source position, so their own times do not move W (rill::advances_progress):
// only the per-partition progress markers do. Tumbling 10000 ms, delay 1000 ms.
TEST(keyed_window, c19_watermark_waits_for_every_assigned_partition) {
  harness<int, int, rill::tumbling, ids_agg> h{
      rill::tumbling{10000ms}, {.max_delay = 1000ms}, {}, 2};
  const auto p0 = [](std::int64_t off) { return rill::source_position{.partition = 0, .offset = off}; };
  const auto p1 = [](std::int64_t off) { return rill::source_position{.partition = 1, .offset = off}; };
  h.push(0, 12000, ms(12000), 0, p0(0));
  h.push(0, 25000, ms(25000), 0, p0(1));
  EXPECT_EQ(h.a.watermark(), rill::event_time_min);  // positioned records: no progress
  h.progress(0, ms(25000));                          // p0: 25000 - 1000 = 24000; p1: -inf
  EXPECT_EQ(h.a.watermark(), rill::event_time_min);  // not min over p0 alone (= 24000)
  EXPECT_TRUE(h.out.empty());                        // [0,10000), [10000,20000) stay open
  h.push(0, 5000, ms(5000), 1, p1(0));
  h.push(0, 8000, ms(8000), 1, p1(1));
  EXPECT_EQ(h.a.watermark(), rill::event_time_min);
  h.progress(1, ms(8000));  // p1: 7000; W = min(24000, 7000) = 7000
  EXPECT_EQ(h.a.watermark(), ms(7000));
  EXPECT_TRUE(h.out.empty());  // no window ends at or before 7000
  EXPECT_EQ(h.a.late(), 0u);   // 5000 and 8000 were on time
  EXPECT_TRUE(h.late.empty());
  h.end(0);
  h.end(1);  // W = +inf
  using row = row_t<int, std::vector<int>>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{0, 0, ns(10000ms), {5000, 8000}, false},
                                        {0, ns(10000ms), ns(20000ms), {12000}, false},
                                        {0, ns(20000ms), ns(30000ms), {25000}, false}}));
}

// C20 (a): bounded input, 1000, 2000, 12500 ms; window 10000 ms, delay 5000 ms.
TEST(keyed_window, c20a_end_of_input_fires_every_open_window) {
  harness<int, int, rill::tumbling, ids_agg> h{rill::tumbling{10000ms}, {.max_delay = 5000ms}};
  for (int t : {1000, 2000, 12500}) h.push(0, t, ms(t));
  EXPECT_TRUE(h.out.empty());  // W = 12500 - 5000 = 7500 < 10000
  h.end();
  using row = row_t<int, std::vector<int>>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{0, 0, ns(10000ms), {1000, 2000}, false},
                                        {0, ns(10000ms), ns(20000ms), {12500}, false}}));
  EXPECT_EQ(h.a.late(), 0u);
}

// C20 (b) at the aggregator: discard() drops open windows unemitted and counts them.
TEST(keyed_window, c20b_discard_drops_open_windows) {
  harness<int, int, rill::tumbling, ids_agg> h{rill::tumbling{10000ms}, {.max_delay = 5000ms}};
  for (int t : {1000, 2000, 12500}) h.push(0, t, ms(t));
  EXPECT_EQ(h.a.discard(), 2u);  // [0,10000) and [10000,20000)
  EXPECT_EQ(h.a.discarded(), 2u);
  EXPECT_EQ(h.a.state_entries(), 0u);
  h.end();
  EXPECT_TRUE(h.out.empty());
}

// After discard() the aggregator is empty and works on: a record that opens a window
// whose end is the time of a timer discard() dropped must still fire.
// (1000 ms opens [0,10000) with a timer at 10000; discard; 3000 needs a timer at 10000.)
TEST(keyed_window, discard_then_new_records_start_clean) {
  harness<int, int, rill::tumbling, ids_agg> h{rill::tumbling{10000ms}, {.max_delay = 5000ms}};
  h.push(0, 1000, ms(1000));
  EXPECT_EQ(h.a.discard(), 1u);
  h.push(0, 3000, ms(3000));
  h.end();
  using row = row_t<int, std::vector<int>>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{0, 0, ns(10000ms), {3000}, false}}));
}

// C20 (c): two inputs; A (input 0) ends after 3000 ms, B (input 1) continues with 30000
// and 41000 ms. Window 10000 ms, delay 5000 ms. B also has records in [10000, 20000) and
// [20000, 30000), so that those windows exist:
//   A: 1000, 3000           B: 2000, 12000, 25000      W = min(3000, 25000) - 5000 = -2000
//   A ends                  W = 25000 - 5000 = 20000: [0,10000) = {1000, 2000, 3000} and
//                           [10000,20000) = {12000} fire
//   B: 30000                W = 25000
//   B: 41000                W = 36000: [20000,30000) = {25000} fires; [30000,40000) open
TEST(keyed_window, c20c_ended_input_does_not_hold_the_watermark) {
  harness<int, int, rill::tumbling, ids_agg> h{
      rill::tumbling{10000ms}, {.max_delay = 5000ms}, {}, 2};
  h.push(0, 1000, ms(1000), 0);
  h.push(0, 3000, ms(3000), 0);
  h.push(0, 2000, ms(2000), 1);
  h.push(0, 12000, ms(12000), 1);
  h.push(0, 25000, ms(25000), 1);
  EXPECT_EQ(h.a.watermark(), ms(-2000));
  EXPECT_TRUE(h.out.empty());
  h.end(0);
  EXPECT_EQ(h.a.watermark(), ms(20000));
  EXPECT_EQ(h.out.size(), 2u);
  h.push(0, 30000, ms(30000), 1);
  h.push(0, 41000, ms(41000), 1);
  EXPECT_EQ(h.a.watermark(), ms(36000));
  using row = row_t<int, std::vector<int>>;
  EXPECT_EQ(h.rows(), (std::vector<row>{{0, 0, ns(10000ms), {1000, 2000, 3000}, false},
                                        {0, ns(10000ms), ns(20000ms), {12000}, false},
                                        {0, ns(20000ms), ns(30000ms), {25000}, false}}));
  h.end(1);
  EXPECT_EQ(h.out.size(), 5u);  // [30000,40000) = {30000}, [40000,50000) = {41000}
  EXPECT_EQ(h.a.late(), 0u);
}

// ---------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------

// 10,000,000 records (divided by RILL_STRESS_SCALE) over 1,000 keys in time order, one
// every 100 us: each 1 s tumbling window holds 10,000 records, 10 per key. Delay 500 ms:
// while t is in [k s, (k+1) s), W = t - 0.5 s >= k s - 0.5 s, so window k - 2 (end
// (k - 1) s) has fired and been dropped: at most windows k - 1 and k are open per key,
// state <= 2 x 1,000 entries whatever the number of records.
TEST(keyed_window, ten_million_records_state_bounded_by_open_windows) {
  std::int64_t n = 10'000'000;
  if (const char* s = std::getenv("RILL_STRESS_SCALE")) n /= std::max(1L, std::atol(s));
  n -= n % 10'000;  // whole windows
  constexpr int keys = 1000;
  rill::manual_clock clk;
  rill::keyed_window_aggregator<int, int, rill::tumbling, rill::agg::count> a{
      rill::tumbling{1s}, {.max_delay = 500ms}, rill::agg::count{}, 1, clk.now()};
  std::uint64_t total = 0, results = 0, not_ten = 0, out_of_order = 0, late = 0;
  event_time last_end = rill::event_time_min;
  auto on_result = [&](rill::record<rill::keyed_window_result<int, std::uint64_t>>&& r) {
    total += r.value.value;
    ++results;
    if (r.value.value != 10) ++not_ten;
    if (r.value.end < last_end) ++out_of_order;
    last_end = r.value.end;
  };
  auto on_late = [&](rill::record<int>&&, const int&, event_time, event_time) { ++late; };
  for (std::int64_t i = 0; i < n; ++i)
    a.push(0, int(i % keys),
           rill::record<int>{0, at(std::chrono::microseconds{100 * i}), std::nullopt, nullptr},
           clk.now(), on_result, on_late);
  a.end(0, on_result);
  EXPECT_EQ(total, std::uint64_t(n));
  EXPECT_EQ(results, std::uint64_t(n / 10));  // 1,000 keys x n / 10,000 windows
  EXPECT_EQ(not_ten, 0u);
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_EQ(late, 0u);
  EXPECT_LE(a.peak_state_entries(), std::size_t(2 * keys));
  EXPECT_GE(a.peak_state_entries(), std::size_t(keys));  // the bound is not vacuous
  EXPECT_EQ(a.state_entries(), 0u);
  EXPECT_EQ(a.keys(), 0u);
}

}  // namespace

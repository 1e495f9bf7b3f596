// Tests of two-phase (local-global) keyed window aggregation
// (rill/operators/two_phase.hpp) on the real runtime. Expected values come from a
// std::map built here, the brute-force reference (keyed_window_model.hpp), or a hand
// computation in the comment; none from a run of the operator.
#include "rill/operators/two_phase.hpp"

#include "../support/event_ms.hpp"
#include "../support/collected.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "keyed_window_model.hpp"
#include "rill/core/runtime.hpp"

using namespace std::chrono_literals;
namespace model = keyed_window_model;

namespace {

using rill::event_time;
using rill_test::collected;

using rill_test::ms;
using rill_test::to_ms;

struct ev {
  int id;
  int key;
};
auto key_of = [](const ev& e) { return e.key; };

// Graph: vector_source(2 splits, 100,000 records, 200 keys, times out of order by up to
// 200 ms, negative times too) -> two_phase_aggregate(key, tumbling 1000 ms, delay 200 ms,
// count) -> sink, on 2 workers. Each split's disorder stays within the delay, so no
// record is late whatever the interleaving of the two workers: the counts per (key,
// window) are those of a std::map. Each worker sends at most one partial per (key,
// window), so the global stage takes at most 2 x results partials, far fewer than the
// 100,000 records.
TEST(two_phase, tumbling_count_on_two_workers_matches_a_map) {
  constexpr int n = 100000;
  std::mt19937_64 rng{7};
  std::vector<std::vector<rill::record<ev>>> splits(2);
  std::map<std::pair<int, std::int64_t>, std::uint64_t> want;
  for (int i = 0; i < n; ++i) {
    const std::int64_t t = i - std::uniform_int_distribution<std::int64_t>{0, 200}(rng)-5000;
    const int key = int(std::int64_t(i) * 7919 % 200);
    splits[std::size_t(i % 2)].push_back({ev{i, key}, ms(t), std::nullopt, nullptr});
    std::int64_t k = t / 1000;
    if (k * 1000 > t) --k;
    ++want[{key, k * 1000}];
  }
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  using result = rill::keyed_window_result<int, std::uint64_t>;
  auto out = std::make_shared<collected<std::pair<result, std::size_t>>>();
  auto j = rill::two_phase_aggregate(rill::from(rill::vector_source<ev>{splits}), key_of, rill::tumbling{1000ms},
                                     {.max_delay = 200ms}, rill::agg::count{}, "counts")
               .sink([out](result&& r) { out->add({std::move(r), rill::this_worker()->id()}); });
  const auto rep = rt.run(j);
  std::map<std::pair<int, std::int64_t>, std::uint64_t> got;
  std::map<std::size_t, std::int64_t> last_end;  // per worker: results in window-end order
  std::size_t duplicates = 0, out_of_order = 0, bad_bounds = 0, updates = 0;
  for (const auto& [r, w] : out->items) {
    const std::int64_t start = to_ms(r.start);
    if (to_ms(r.end) != start + 1000) ++bad_bounds;
    if (!got.emplace(std::pair{r.key, start}, r.value).second) ++duplicates;
    if (last_end.contains(w) && to_ms(r.end) < last_end[w]) ++out_of_order;
    if (r.update) ++updates;
    last_end[w] = to_ms(r.end);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(duplicates, 0u);
  EXPECT_EQ(out_of_order, 0u);
  EXPECT_EQ(bad_bounds, 0u);
  EXPECT_EQ(updates, 0u);
  EXPECT_EQ(last_end.size(), 2u);  // both workers owned keys
  EXPECT_EQ(rep.stage("counts.local").in, std::uint64_t(n));
  EXPECT_EQ(rep.stage("counts.local").late, 0u);
  EXPECT_GE(rep.stage("counts").in, want.size());
  EXPECT_LE(rep.stage("counts").in, 2 * want.size());
  EXPECT_EQ(rep.stage("counts").out, want.size());
  EXPECT_EQ(rep.stage("counts").late, 0u);
}

// (key, start ms, end ms, ids sorted, update)
using ids_row = std::tuple<int, std::int64_t, std::int64_t, std::vector<int>, bool>;
using ids_result = rill::keyed_window_result<int, std::vector<int>>;
auto add_id = [](std::vector<int>& a, const ev& e) { a.push_back(e.id); };
auto merge_ids = [](std::vector<int>& a, const std::vector<int>& b) { a.insert(a.end(), b.begin(), b.end()); };

// Runs the records of `evs` (one split, so the local watermark is the model's W) on 2
// workers through two_phase_aggregate with the ids of each window, and compares with the
// model: the multiset of (key, start, end, ids, update) and the late count. A record
// late at the local stage reaches the global stage as a partial of its own, and the
// global stage, told the local watermark first, drops it exactly when the model calls it
// late, folds it into a window that is still open, or re-emits a fired window within
// allowed lateness (update).
template <class Assigner>
void check_against_model(Assigner assigner, const model::options& mo, const std::vector<model::event>& evs,
                         const char* what) {
  SCOPED_TRACE(what);
  const model::output want = model::run(evs, mo);
  std::vector<rill::record<ev>> split;
  for (const auto& e : evs)
    if (e.k == model::event::kind::record) split.push_back({ev{e.id, e.key}, ms(e.t), std::nullopt, nullptr});
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores"}};
  auto out = std::make_shared<collected<ids_row>>();
  auto j = rill::two_phase_aggregate(rill::from(rill::vector_source<ev>{split}), key_of, assigner,
                                     {.max_delay = std::chrono::milliseconds{mo.delay},
                                      .allowed_lateness = std::chrono::milliseconds{mo.lateness}},
                                     rill::agg::fold(std::vector<int>{}, add_id, merge_ids), "w")
               .sink([out](ids_result&& r) {
                 std::sort(r.value.begin(), r.value.end());
                 out->add({r.key, to_ms(r.start), to_ms(r.end), std::move(r.value), r.update});
               });
  const auto rep = rt.run(j);
  std::vector<ids_row> got = out->items, expected;
  for (const auto& r : want.rows) expected.emplace_back(r.key, r.start, r.end, r.ids, r.update);
  std::sort(got.begin(), got.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(got.size(), expected.size());
  const auto mismatch = std::mismatch(got.begin(), got.end(), expected.begin(), expected.end());
  if (mismatch.first != got.end() || mismatch.second != expected.end())
    ADD_FAILURE() << "first difference at sorted position " << (mismatch.first - got.begin()) << ": operator "
                  << (mismatch.first != got.end() ? testing::PrintToString(*mismatch.first) : "none") << ", model "
                  << (mismatch.second != expected.end() ? testing::PrintToString(*mismatch.second) : "none");
  EXPECT_GT(want.late.size(), 0u);  // the stream has late records
  EXPECT_EQ(rep.stage("w.local").in, split.size());
  EXPECT_GE(rep.stage("w.local").late, want.late.size());  // handed on, then judged globally
  EXPECT_EQ(rep.stage("w").late, want.late.size());
  EXPECT_EQ(rep.stage("w").out, want.rows.size());
}

// Tumbling 1000 ms, delay 200 ms; 3 % of the records late by more than the delay.
TEST(two_phase, tumbling_with_late_records_matches_reference) {
  check_against_model(rill::tumbling{1000ms}, {.s = model::options::shape::aligned, .size = 1000, .slide = 1000,
                                               .delay = 200},
                      model::make_stream(model::one_input_stream(1, 200)), "tumbling 1000 ms");
}

// Sliding 1000 ms every 300 ms (slices of 100 ms cross the exchange), delay 200 ms.
TEST(two_phase, sliding_with_late_records_matches_reference) {
  check_against_model(rill::sliding{.size = 1000ms, .slide = 300ms},
                      {.s = model::options::shape::aligned, .size = 1000, .slide = 300, .delay = 200},
                      model::make_stream(model::one_input_stream(1, 200)), "sliding 1000/300 ms");
}

// Allowed lateness 1500 ms: records late by up to that much re-emit their windows
// (update = true) from the global stage.
TEST(two_phase, allowed_lateness_updates_match_reference) {
  check_against_model(rill::tumbling{1000ms}, {.s = model::options::shape::aligned, .size = 1000, .slide = 1000,
                                               .delay = 200, .lateness = 1500},
                      model::make_stream(model::one_input_stream(1, 200)), "tumbling 1000 ms, lateness 1500 ms");
}

// Hand-worked, 1 worker: records (key 1, 1 s) (key 1, 3 s) (key 2, 4 s) (key 1, 12 s),
// tumbling 10 s, delay 0. [0, 10) fires when 12 s is read: (1, 2) and (2, 1); at the end
// [10, 20): (1, 1). The local stage sends 3 partials.
TEST(two_phase, hand_worked_count_one_worker) {
  std::vector<rill::record<ev>> recs{{ev{0, 1}, ms(1000), std::nullopt, nullptr},
                                     {ev{1, 1}, ms(3000), std::nullopt, nullptr},
                                     {ev{2, 2}, ms(4000), std::nullopt, nullptr},
                                     {ev{3, 1}, ms(12000), std::nullopt, nullptr}};
  rill::runtime rt{{.workers = 1}};
  using result = rill::keyed_window_result<int, std::uint64_t>;
  auto out = std::make_shared<collected<std::tuple<int, std::int64_t, std::uint64_t>>>();
  auto j = rill::two_phase_aggregate(rill::from(rill::vector_source<ev>{recs}), key_of, rill::tumbling{10s}, {},
                                     rill::agg::count{}, "c")
               .sink([out](result&& r) { out->add({r.key, to_ms(r.start), r.value}); });
  const auto rep = rt.run(j);
  std::sort(out->items.begin(), out->items.end());
  EXPECT_EQ(out->items, (std::vector<std::tuple<int, std::int64_t, std::uint64_t>>{
                            {1, 0, 2}, {1, 10000, 1}, {2, 0, 1}}));
  EXPECT_EQ(rep.stage("c.local").out, 3u);
  EXPECT_EQ(rep.stage("c").in, 3u);
}

// An idle timeout would let the global stage fire windows an idle worker still holds
// partials of: refused when the job is built.
TEST(two_phase, idle_timeout_is_refused) {
  std::vector<rill::record<ev>> recs{{ev{0, 1}, ms(1000), std::nullopt, nullptr}};
  try {
    (void)rill::two_phase_aggregate(rill::from(rill::vector_source<ev>{recs}), key_of, rill::tumbling{10s},
                                    {.idle_timeout = 1s}, rill::agg::count{});
    ADD_FAILURE() << "no config_error";
  } catch (const rill::config_error& e) {
    EXPECT_EQ(e.key(), "window.idle_timeout");
  }
}

}  // namespace

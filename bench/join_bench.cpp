// join_bench — records/s of the interval join and the window join
// (<rill/operators/join.hpp>, their state machines driven directly), side by side with
// the physical floor: hand-written hash-join loops over the same records.
//
//   BM_interval_join         rill::interval_join_state, bounds [-1 s, +1 s],
//                            delay 10 ms; counters: pairs, peak state entries, peak RSS
//   BM_window_join           rill::window_join_state, tumbling 1 s, inner
//   BM_pipeline_interval_join  the same interval join through the runtime (1 worker):
//                            two generator sources -> key_by -> interval_join -> sink;
//                            what the stage adds to the state machine (its fiber calls,
//                            bounded output: <rill/operators/resumable.hpp>)
//   BM_pipeline_window_join  the same for the window join
//   BM_hand_interval_join    the floor: build absl::flat_hash_map key -> right records
//                            (in time order), then probe each left record with a binary
//                            search for [t - 1 s, t + 1 s]; no watermark, no expiry
//   BM_hand_interval_stream  the streaming floor: per side absl::flat_hash_map key ->
//                            std::deque of (time, id); each arrival pops the other side's
//                            list of its key from the front while older than t - 1 s
//                            (records come in time order: never needed again), pairs with
//                            the rest, and appends itself; no watermark, no late check
//   BM_hand_window_join      the floor: one absl::flat_hash_map key -> (lefts, rights) per
//                            window, records in time order; on a new window emit every
//                            key's pairs and clear
//
// Records: 10,000,000 per side, made on the fly (no input arrays, so the peak RSS is the
// state's): left i at i x 100 us, right i at i x 100 us + 37 us, keys mix(i) and
// mix(i + 2^40) mod 20,000 (fixed). Arrival order: left i, then right i (time order).
// Every benchmark checks the number of pairs and a checksum (sum over pairs of
// left id x 1,000,003 + right id, mod 2^64) against the floor's (SkipWithError on a
// mismatch). The rill benchmarks run first, so their peak RSS is not the floor's tables.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include <rill/core/generator_source.hpp>
#include <rill/rill.hpp>

using namespace std::chrono_literals;
namespace {

constexpr std::int64_t n_records = 10'000'000;  // per side
constexpr std::uint32_t n_keys = 20'000;
constexpr std::int64_t step_ns = 100'000;
constexpr std::int64_t right_offset_ns = 37'000;
constexpr std::int64_t bound_ns = 1'000'000'000;   // [-1 s, +1 s]
constexpr std::int64_t window_ns = 1'000'000'000;  // tumbling 1 s

std::uint32_t key_left(std::int64_t i) { return std::uint32_t(rill::detail::mix_hash(std::size_t(i)) % n_keys); }
std::uint32_t key_right(std::int64_t i) {
  return std::uint32_t(rill::detail::mix_hash(std::size_t(i) + (std::size_t(1) << 40)) % n_keys);
}
std::int64_t t_left(std::int64_t i) { return i * step_ns; }
std::int64_t t_right(std::int64_t i) { return i * step_ns + right_offset_ns; }
std::size_t hash_of(std::uint32_t k) { return rill::detail::mix_hash(std::hash<std::uint32_t>{}(k)); }

struct check {
  std::uint64_t pairs = 0, sum = 0;
  void add(std::int64_t a, std::int64_t b) {
    ++pairs;
    sum += std::uint64_t(a) * 1'000'003u + std::uint64_t(b);
  }
  bool operator==(const check&) const = default;
};

// What the state machines emit into (values are the record ids).
struct counting_out {
  static constexpr bool outer = false;
  check c;
  void pair(const std::uint32_t&, const std::int64_t& a, const std::int64_t& b, rill::event_time,
            std::shared_ptr<rill::ack_token>&&) {
    c.add(a, b);
  }
};

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

check hand_interval() {
  struct entry {
    std::int64_t t, id;
  };
  absl::flat_hash_map<std::uint32_t, std::vector<entry>> right;
  for (std::int64_t i = 0; i < n_records; ++i) right[key_right(i)].push_back({t_right(i), i});
  check c;
  for (std::int64_t i = 0; i < n_records; ++i) {
    auto it = right.find(key_left(i));
    if (it == right.end()) continue;
    const std::int64_t t = t_left(i);
    const auto& v = it->second;
    auto p = std::lower_bound(v.begin(), v.end(), t - bound_ns, [](const entry& e, std::int64_t x) { return e.t < x; });
    for (; p != v.end() && p->t <= t + bound_ns; ++p) c.add(i, p->id);
  }
  return c;
}

check hand_interval_stream() {
  struct entry {
    std::int64_t t, id;
  };
  absl::flat_hash_map<std::uint32_t, std::deque<entry>> side[2];
  check c;
  auto arrive = [&](int s, std::uint32_t k, std::int64_t t, std::int64_t id) {
    auto it = side[1 - s].find(k);
    if (it != side[1 - s].end()) {
      auto& d = it->second;
      while (!d.empty() && d.front().t < t - bound_ns) d.pop_front();
      for (const auto& e : d) {  // every e.t is in [t - 1 s, t]: in time order, bounds symmetric
        if (s == 0) c.add(id, e.id);
        else c.add(e.id, id);
      }
    }
    side[s][k].push_back({t, id});
  };
  for (std::int64_t i = 0; i < n_records; ++i) {
    arrive(0, key_left(i), t_left(i), i);
    arrive(1, key_right(i), t_right(i), i);
  }
  return c;
}

check hand_window() {
  struct cell {
    std::vector<std::int64_t> l, r;
  };
  absl::flat_hash_map<std::uint32_t, cell> m;
  std::int64_t window = std::numeric_limits<std::int64_t>::min();
  check c;
  auto flush = [&] {
    for (const auto& [k, x] : m)
      for (auto a : x.l)
        for (auto b : x.r) c.add(a, b);
    m.clear();
  };
  auto add = [&](std::int64_t t, std::uint32_t k, std::int64_t id, bool left) {
    const std::int64_t w = rill::floor_div(t, window_ns);
    if (w != window) {
      flush();
      window = w;
    }
    auto& x = m[k];
    (left ? x.l : x.r).push_back(id);
  };
  for (std::int64_t i = 0; i < n_records; ++i) {
    add(t_left(i), key_left(i), i, true);
    add(t_right(i), key_right(i), i, false);
  }
  flush();
  return c;
}

const check& expected_interval() {
  static const check c = hand_interval();
  return c;
}
const check& expected_window() {
  static const check c = hand_window();
  return c;
}

template <class State>
check drive(State& st) {
  counting_out out;
  const rill::steady_time now{};
  auto late = [](auto&&) {};
  for (std::int64_t i = 0; i < n_records; ++i) {
    const std::uint32_t kl = key_left(i), kr = key_right(i);
    st.push_left(0, kl, hash_of(kl), rill::record<std::int64_t>{i, rill::event_time{std::chrono::nanoseconds{t_left(i)}}},
                 now, out, late);
    st.push_right(0, kr, hash_of(kr),
                  rill::record<std::int64_t>{i, rill::event_time{std::chrono::nanoseconds{t_right(i)}}}, now, out, late);
  }
  st.end(rill::join_side::left, 0, out);
  st.end(rill::join_side::right, 0, out);
  return out.c;
}

void BM_interval_join(benchmark::State& state) {
  check got;
  std::size_t peak = 0;
  for (auto _ : state) {
    rill::interval_join_state<std::uint32_t, std::int64_t, std::int64_t> st(
        -std::chrono::nanoseconds{bound_ns}, std::chrono::nanoseconds{bound_ns}, 10ms, 0ns, 1, 1, {});
    got = drive(st);
    peak = st.peak_state_entries();
  }
  // The process's peak RSS after the first run, before any floor's table existed (later
  // repetitions would see the floor's peak: ru_maxrss never goes down).
  static const double rss_first_run = peak_rss_mib();
  state.counters["peak_rss_MiB"] = rss_first_run;
  state.counters["peak_state"] = double(peak);
  state.counters["pairs"] = double(got.pairs);
  if (!(got == expected_interval())) state.SkipWithError("interval join: pairs or checksum differ from the floor");
  state.SetItemsProcessed(2 * n_records * std::int64_t(state.iterations()));
}

void BM_window_join(benchmark::State& state) {
  check got;
  std::size_t peak = 0;
  for (auto _ : state) {
    rill::window_join_state<std::uint32_t, std::int64_t, std::int64_t, rill::tumbling> st(
        rill::tumbling{std::chrono::nanoseconds{window_ns}}, 10ms, 0ns, 1, 1, {});
    got = drive(st);
    peak = st.peak_state_entries();
  }
  state.counters["peak_state"] = double(peak);
  state.counters["pairs"] = double(got.pairs);
  if (!(got == expected_window())) state.SkipWithError("window join: pairs or checksum differ from the floor");
  state.SetItemsProcessed(2 * n_records * std::int64_t(state.iterations()));
}

// Both sides from generator sources (split 0 of each on the one worker, slices of 256
// records interleaved: one side at most a slice, 25.6 ms of event time, ahead of the
// other, well within the bounds), key_by, the join, a sink that checks pairs.
template <bool Interval>
void run_pipeline(benchmark::State& state) {
  check got;
  for (auto _ : state) {
    state.PauseTiming();
    rill::runtime rt{{.workers = 1, .topology = "", .pin = true, .handle_signals = false, .tick = 50ms}};
    auto out = std::make_shared<check>();
    auto gen = [](auto t_of) {
      return rill::generator_source{{.count = std::uint64_t(n_records)}, [t_of](std::uint64_t i) {
                                      return rill::record<std::int64_t>{
                                          std::int64_t(i), rill::event_time{std::chrono::nanoseconds{t_of(std::int64_t(i))}}};
                                    }};
    };
    auto left = rill::from(gen(t_left), "left").key_by([](const std::int64_t& i) { return key_left(i); });
    auto right = rill::from(gen(t_right), "right").key_by([](const std::int64_t& i) { return key_right(i); });
    auto pair = [](std::int64_t a, std::int64_t b) { return std::pair{a, b}; };
    auto sink = [out](std::pair<std::int64_t, std::int64_t>&& p) { out->add(p.first, p.second); };
    rill::job j = [&] {
      if constexpr (Interval)
        return std::move(left)
            .interval_join(std::move(right), -std::chrono::nanoseconds{bound_ns}, std::chrono::nanoseconds{bound_ns},
                           {.max_delay = 10ms})
            .inner(pair)
            .sink(sink);
      else
        return std::move(left)
            .window_join(std::move(right), rill::tumbling{std::chrono::nanoseconds{window_ns}}, {.max_delay = 10ms})
            .inner(pair)
            .sink(sink);
    }();
    state.ResumeTiming();
    rt.run(j);
    got = *out;
  }
  state.counters["pairs"] = double(got.pairs);
  if (!(got == (Interval ? expected_interval() : expected_window())))
    state.SkipWithError("pipeline join: pairs or checksum differ from the floor");
  state.SetItemsProcessed(2 * n_records * std::int64_t(state.iterations()));
}
void BM_pipeline_interval_join(benchmark::State& state) { run_pipeline<true>(state); }
void BM_pipeline_window_join(benchmark::State& state) { run_pipeline<false>(state); }

// The floors: `Join` run and checked against the build-probe floor (interval) or the
// window loop's first result.
template <check (*Join)(), const check& (*Expected)()>
void run_floor(benchmark::State& state) {
  check got;
  for (auto _ : state) got = Join();
  state.counters["pairs"] = double(got.pairs);
  if (!(got == Expected())) state.SkipWithError("hand join: pairs or checksum differ from the build-probe floor's");
  state.SetItemsProcessed(2 * n_records * std::int64_t(state.iterations()));
}
void BM_hand_interval_join(benchmark::State& state) { run_floor<hand_interval, expected_interval>(state); }
void BM_hand_interval_stream(benchmark::State& state) { run_floor<hand_interval_stream, expected_interval>(state); }
void BM_hand_window_join(benchmark::State& state) { run_floor<hand_window, expected_window>(state); }

}  // namespace

BENCHMARK(BM_interval_join)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_window_join)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_pipeline_interval_join)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_pipeline_window_join)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_hand_interval_join)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_hand_interval_stream)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_hand_window_join)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();

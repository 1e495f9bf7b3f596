// pipeline_bench — records/s of an in-memory pipeline and packets/s of reading a capture,
// side by side with a plain libpcap read loop (the ceiling for any pcap reader here).
//
//   BM_libpcap_read_loop          pcap_next_ex over the file, nothing else
//   BM_pcap_reader_decode         rill::pcap_reader + decode (what the pcap source does)
//   BM_pipeline_in_memory/W/M     vector_source -> map -> key_by -> window_sort -> sink, W workers;
//                                 M = 1: metrics endpoint and stall detector on, 0: both off
//   BM_pipeline_stages/S/W        1 split through a growing chain of S stages (see below)
// The pipelines run unacked records (rill::unacked: value and time, as every source without
// acknowledgements gives); the _acked variants run the same with rill::acked records (the
// layout a Kafka source gives, here with no position and no token).
//
// Capture: $RILL_BENCH_PCAP, default ../shared/data/pcap/echo-connections.pcap.
// Every benchmark checks its count (SkipWithError on mismatch).
#include <benchmark/benchmark.h>
#include <pcap/pcap.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include <rill/pcap.hpp>
#include <rill/rill.hpp>

using namespace std::chrono_literals;
namespace {

std::string capture_path() {
  if (const char* p = std::getenv("RILL_BENCH_PCAP")) return p;
  return std::string(RILL_SHARED_DIR) + "/data/pcap/echo-connections.pcap";
}

std::uint64_t libpcap_count(const std::string& path, std::uint64_t* bytes) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  if (!p) return 0;
  pcap_pkthdr* h;
  const u_char* d;
  std::uint64_t n = 0, b = 0;
  while (pcap_next_ex(p, &h, &d) == 1) {
    ++n;
    b += h->len;
  }
  pcap_close(p);
  *bytes = b;
  return n;
}

void BM_libpcap_read_loop(benchmark::State& state) {
  const auto path = capture_path();
  std::uint64_t n = 0, bytes = 0;
  for (auto _ : state) n = libpcap_count(path, &bytes);
  if (n == 0) state.SkipWithError(("cannot read " + path).c_str());
  state.SetItemsProcessed(std::int64_t(n * state.iterations()));
  state.counters["packets"] = double(n);
}

void BM_pcap_reader_decode(benchmark::State& state) {
  const auto path = capture_path();
  std::uint64_t ref_bytes = 0;
  const auto ref = libpcap_count(path, &ref_bytes);
  std::uint64_t n = 0, bytes = 0;
  for (auto _ : state) {
    auto r = rill::pcap_reader::open(path);
    rill::packet p;
    n = bytes = 0;
    while (r.next(p) == rill::read_status::ok) {
      ++n;
      bytes += p.wire_len;
    }
  }
  if (n != ref || bytes != ref_bytes) state.SkipWithError("count/bytes differ from libpcap's");
  state.SetItemsProcessed(std::int64_t(n * state.iterations()));
}

template <class P>
void pipeline_in_memory(benchmark::State& state) {
  const std::size_t workers = std::size_t(state.range(0));
  const bool metrics = state.range(1) != 0;
  const int n = 1'000'000;
  std::vector<std::vector<rill::record<std::uint64_t, P>>> splits(2);
  for (int i = 0; i < n; ++i) {
    // 1 ms apart, up to 3 ms out of order; 10 s windows, 5 ms delay: nothing late.
    const auto t = std::chrono::milliseconds{i} - std::chrono::milliseconds{(i * 7) % 4};
    splits[i % 2].push_back({std::uint64_t(i), rill::event_time{t}});
  }
  rill::vector_source<std::uint64_t, P> src{splits};
  // Metrics on: an ephemeral-port endpoint is not possible (0 = off), so a fixed loopback
  // port is taken; timing of loop turns and the stall watchdog come with it.
  rill::runtime rt{{.workers = workers, .topology = "1 node x 2 cores",
                    .metrics_port = std::uint16_t(metrics ? 19090 + workers : 0),
                    .stall_threshold = metrics ? 100ms : 0ms}};
  for (auto _ : state) {
    auto count = std::make_shared<std::atomic<std::uint64_t>>(0);
    auto sum = std::make_shared<std::atomic<std::uint64_t>>(0);
    auto job = rill::from(src)
                   .map([](std::uint64_t x) { return x * 3; })
                   .key_by([](const std::uint64_t& x) { return x % 1024; })
                   .window_sort({.length = 10s, .max_delay = 5ms})
                   .sink([count, sum](rill::window<std::uint64_t, P>&& w) {
                     std::uint64_t s = 0;
                     for (auto& r : w.records) s += r.value;
                     count->fetch_add(w.records.size());
                     sum->fetch_add(s);
                   });
    rt.run(job);
    if (count->load() != std::uint64_t(n) || sum->load() != 3ull * n * (n - 1) / 2)
      state.SkipWithError("checksum mismatch");
  }
  state.SetItemsProcessed(std::int64_t(n) * state.iterations());
}

// Per-stage cost: the same 1,000,000 records through a growing chain, 1 split, one
// worker or two. stages = 0: source -> sink; 1: + map; 2: + flat_map(1:1); 3: + window_sort;
// 4: + rebalance before map. ns per record per stage = difference between rows.
template <class P>
void pipeline_stages(benchmark::State& state) {
  const auto stages = state.range(0);
  const std::size_t workers = std::size_t(state.range(1));
  const int n = 1'000'000;
  std::vector<rill::record<std::uint64_t, P>> recs;
  for (int i = 0; i < n; ++i)
    recs.push_back({std::uint64_t(i), rill::event_time{std::chrono::microseconds{i} -
                                                      std::chrono::microseconds{(i * 7) % 4}}});
  rill::vector_source<std::uint64_t, P> src{recs};
  rill::runtime rt{{.workers = workers, .topology = "1 node x 2 cores"}};
  for (auto _ : state) {
    auto count = std::make_shared<std::atomic<std::uint64_t>>(0);
    auto sink_plain = [count](std::uint64_t) { count->fetch_add(1, std::memory_order_relaxed); };
    auto sink_window = [count](rill::window<std::uint64_t, P>&& w) {
      count->fetch_add(w.records.size(), std::memory_order_relaxed);
    };
    auto map = [](std::uint64_t x) { return x + 1; };
    auto fm = [](std::uint64_t x, auto& emit) { emit(x); };
    auto base = stages >= 4 ? rill::from(src).rebalance() : rill::from(src);
    rill::job job = [&]() -> rill::job {
      switch (stages) {
        case 0: return std::move(base).sink(sink_plain);
        case 1: return std::move(base).map(map).sink(sink_plain);
        case 2: return std::move(base).map(map).template flat_map<std::uint64_t>(fm).sink(sink_plain);
        default:
          return std::move(base).map(map).template flat_map<std::uint64_t>(fm)
              .window_sort({.length = std::chrono::milliseconds{10}, .max_delay = std::chrono::microseconds{5}})
              .sink(sink_window);
      }
    }();
    rt.run(job);
    if (count->load() != std::uint64_t(n)) state.SkipWithError("count mismatch");
  }
  state.SetItemsProcessed(std::int64_t(n) * state.iterations());
  state.counters["ns_per_record"] = benchmark::Counter(
      double(n) * double(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_pipeline_stages(benchmark::State& state) { pipeline_stages<rill::unacked>(state); }
void BM_pipeline_stages_acked(benchmark::State& state) { pipeline_stages<rill::acked>(state); }
void BM_pipeline_in_memory(benchmark::State& state) { pipeline_in_memory<rill::unacked>(state); }
void BM_pipeline_in_memory_acked(benchmark::State& state) { pipeline_in_memory<rill::acked>(state); }

}  // namespace

BENCHMARK(BM_pipeline_stages_acked)->ArgsProduct({{0, 1, 2, 3, 4}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_pipeline_in_memory_acked)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();
BENCHMARK(BM_pipeline_stages)->ArgsProduct({{0, 1, 2, 3, 4}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_libpcap_read_loop)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_pcap_reader_decode)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_pipeline_in_memory)
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();  // cpu_time: every thread of the process (bench/metrics_overhead.sh)
BENCHMARK_MAIN();

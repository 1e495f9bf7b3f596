// numa_ring_bench — rill's mpmc_ring / numa_ring against the Debian MPMC queues, the
// core-to-core cache-line floor, and rules 1-3 of docs/design.md "NumaRing" (lesson1..3).
//
//   throughput/<queue>/<bytes>/<P>P<C>C   items/s moving 2^18 items, P producers, C consumers
//   uncontended/<queue>/<bytes>           one thread: 512 pushes then 512 pops (op cost alone)
//   roundtrip/<queue>                     one element A -> B -> A through two queues
//   roundtrip/atomic_pingpong             one atomic flag A -> B -> A: the machine's floor
//   lesson1/<lookup>                      node looked up per operation vs cached in the endpoint
//   lesson2/<counter>                     one shared transfer counter vs per-endpoint counters
//   lesson3 = throughput/rill_ring_backoff vs throughput/rill_ring (retry_policy)
//
// Threads are pinned round robin to the online cores (pthread_setaffinity_np): producer p
// on core p, consumer c on core c + 1. Every run checks the sum of the values it received
// and fails with SkipWithError on a mismatch. All queues hold 1024 elements, except
// moodycamel: it is pre-allocated for 1024 per producer but pushed with enqueue(), which
// allocates when needed (unbounded). Its try_enqueue() livelocks at 2P2C: an explicit
// producer keeps the blocks it used, so once one producer holds every pre-allocated block
// the other's try_enqueue fails forever.
//
// Run: numa_ring_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <atomic_queue/atomic_queue.h>
#include <benchmark/benchmark.h>
#include <concurrentqueue/concurrentqueue.h>
#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <tbb/concurrent_queue.h>

#include <algorithm>
#include <atomic>
#include <boost/lockfree/queue.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rill/core/numa_ring.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t capacity = 1024;
constexpr std::uint64_t items_per_run = 1 << 18;
constexpr std::uint64_t round_trips_per_run = 20'000;

// ---------------------------------------------------------------- elements --
struct msg64 {  // a 64-byte element: the value and 56 bytes of payload
  std::uint64_t value = 0;
  std::uint64_t payload[7] = {};
};
static_assert(sizeof(msg64) == 64);

template <class E>
E make(std::uint64_t v) {
  if constexpr (std::is_same_v<E, std::uint32_t>) {
    return static_cast<std::uint32_t>(v);
  } else {
    return msg64{v, {v, 0, 0, 0, 0, 0, 0}};
  }
}
std::uint64_t value_of(std::uint32_t e) { return e; }
std::uint64_t value_of(const msg64& e) { return e.value; }

// ------------------------------------------------------------------ threads --
unsigned core_count() { return std::max(1u, std::thread::hardware_concurrency()); }

void pin_to_core(unsigned core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % core_count(), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Same waiting for every queue: pause, then yield (2P2C puts two threads on each core).
struct spinner {
  unsigned fails = 0;
  void operator()() {
    if (++fails < 64) {
      rill::detail::cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  void reset() { fails = 0; }
};

// ----------------------------------------------------------------- adapters --
// Each adapter: Q(producers, consumers); q.producer(i) / q.consumer(i) return per-thread
// handles with try_push(E&&) / try_pop(E&).

template <class E, rill::retry_policy R>
struct rill_ring_q {
  rill::mpmc_ring<E, R> ring{capacity};
  rill_ring_q(int, int) {}
  struct handle {
    rill::mpmc_ring<E, R>* r;
    bool try_push(E&& e) { return r->try_push(std::move(e)); }
    bool try_pop(E& e) { return r->try_pop(e); }
  };
  handle producer(int) { return {&ring}; }
  handle consumer(int) { return {&ring}; }
};

// numa_ring through endpoints. Nodes == 1: the real topology of this machine (one node).
// Nodes == 2 ("cross"): producers on synthetic node 0, consumers on node 1, so every item
// crosses nodes in batches of 32. SharedCounter: every operation also bumps one shared
// atomic counter (lesson 2's anti-pattern) instead of only the endpoint's own counters.
template <class E, int Nodes, bool SharedCounter = false>
struct rill_numa_q {
  rill::numa_ring<E> ring{Nodes, capacity, 32};
  alignas(64) std::atomic<std::uint64_t> shared_ops{0};
  rill_numa_q(int, int) {}
  struct handle {
    typename rill::numa_ring<E>::endpoint ep;
    std::atomic<std::uint64_t>* shared;
    bool try_push(E&& e) {
      if (!ep.try_push(std::move(e))) return false;
      if constexpr (SharedCounter) shared->fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    bool try_pop(E& e) {
      if (!ep.try_pop(e)) return false;
      if constexpr (SharedCounter) shared->fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  };
  handle producer(int i) { return {ring.make_endpoint(i, 0), &shared_ops}; }
  handle consumer(int i) { return {ring.make_endpoint(100 + i, Nodes - 1), &shared_ops}; }
};

// Lesson 1's anti-pattern: look the calling thread's node up on every operation.
enum class lookup { sched_getcpu, hwloc };
hwloc_topology_t topology() {
  static hwloc_topology_t topo = [] {
    hwloc_topology_t t;
    hwloc_topology_init(&t);
    hwloc_topology_load(t);
    return t;
  }();
  return topo;
}
template <lookup L>
std::size_t current_node() {
  if constexpr (L == lookup::sched_getcpu) {
    static const std::vector<std::size_t> node_of_cpu = [] {
      std::vector<std::size_t> m(CPU_SETSIZE, 0);
      hwloc_obj_t n = nullptr;
      while ((n = hwloc_get_next_obj_by_type(topology(), HWLOC_OBJ_NUMANODE, n)) != nullptr) {
        int cpu;
        hwloc_bitmap_foreach_begin(cpu, n->cpuset) m[cpu] = n->logical_index;
        hwloc_bitmap_foreach_end();
      }
      return m;
    }();
    return node_of_cpu[static_cast<unsigned>(sched_getcpu()) % CPU_SETSIZE];
  } else {
    thread_local hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_get_last_cpu_location(topology(), set, HWLOC_CPUBIND_THREAD);
    hwloc_obj_t n =
        hwloc_get_next_obj_covering_cpuset_by_type(topology(), set, HWLOC_OBJ_NUMANODE, nullptr);
    return n != nullptr ? n->logical_index : 0;
  }
}
template <class E, lookup L>
struct rill_numa_lookup_q {
  rill::numa_ring<E> ring{1, capacity, 32};
  rill_numa_lookup_q(int, int) {}
  struct handle {  // one endpoint per node, chosen by a lookup on every call
    std::vector<typename rill::numa_ring<E>::endpoint> eps;
    bool try_push(E&& e) { return eps[current_node<L>()].try_push(std::move(e)); }
    bool try_pop(E& e) { return eps[current_node<L>()].try_pop(e); }
  };
  handle make(int id) {
    handle h;
    for (std::size_t n = 0; n < ring.nodes(); ++n) h.eps.push_back(ring.make_endpoint(id, n));
    return h;
  }
  handle producer(int i) { return make(i); }
  handle consumer(int i) { return make(100 + i); }
};

template <class E>
struct boost_q {
  using queue = boost::lockfree::queue<E, boost::lockfree::capacity<capacity>>;
  queue q;
  boost_q(int, int) {}
  struct handle {
    queue* q;
    bool try_push(E&& e) { return q->bounded_push(e); }
    bool try_pop(E& e) { return q->pop(e); }
  };
  handle producer(int) { return {&q}; }
  handle consumer(int) { return {&q}; }
};

template <class E>
struct moodycamel_q {
  moodycamel::ConcurrentQueue<E> q;
  moodycamel_q(int producers, int) : q(capacity * producers, producers, 0) {}
  struct producer_handle {
    moodycamel::ConcurrentQueue<E>* q;
    moodycamel::ProducerToken tok;
    bool try_push(E&& e) { return q->enqueue(tok, std::move(e)); }  // see file comment
  };
  struct consumer_handle {
    moodycamel::ConcurrentQueue<E>* q;
    moodycamel::ConsumerToken tok;
    bool try_pop(E& e) { return q->try_dequeue(tok, e); }
  };
  producer_handle producer(int) { return {&q, moodycamel::ProducerToken(q)}; }
  consumer_handle consumer(int) { return {&q, moodycamel::ConsumerToken(q)}; }
};

template <class E>
struct tbb_q {
  tbb::concurrent_bounded_queue<E> q;
  tbb_q(int, int) { q.set_capacity(capacity); }
  struct handle {
    tbb::concurrent_bounded_queue<E>* q;
    bool try_push(E&& e) { return q->try_push(e); }
    bool try_pop(E& e) { return q->try_pop(e); }
  };
  handle producer(int) { return {&q}; }
  handle consumer(int) { return {&q}; }
};

template <class E>
struct atomic_queue_q {
  // 4-byte: the atomic-element queue (0 is its empty marker; our values start at 1).
  using queue = std::conditional_t<std::is_same_v<E, std::uint32_t>,
                                   atomic_queue::AtomicQueue<std::uint32_t, capacity>,
                                   atomic_queue::AtomicQueue2<E, capacity>>;
  queue q;
  atomic_queue_q(int, int) {}
  struct handle {
    queue* q;
    bool try_push(E&& e) { return q->try_push(std::move(e)); }
    bool try_pop(E& e) { return q->try_pop(e); }
  };
  handle producer(int) { return {&q}; }
  handle consumer(int) { return {&q}; }
};

// --------------------------------------------------------------- throughput --
template <class Q, class E>
void throughput(benchmark::State& state) {
  const int producers = static_cast<int>(state.range(0));
  const int consumers = static_cast<int>(state.range(1));
  const std::uint64_t n = items_per_run;
  const std::uint64_t expected = n * (n + 1) / 2;  // values 1..n
  for (auto _ : state) {
    auto q = std::make_unique<Q>(producers, consumers);
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::atomic<std::uint64_t> received{0}, sum{0};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([&, p] {
        pin_to_core(p);
        auto h = q->producer(p);
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) rill::detail::cpu_relax();
        spinner spin;
        for (std::uint64_t v = 1 + p; v <= n; v += producers) {
          E e = make<E>(v);
          while (!h.try_push(std::move(e))) spin();
          spin.reset();
        }
      });
    }
    for (int c = 0; c < consumers; ++c) {
      threads.emplace_back([&, c] {
        pin_to_core(c + 1);
        auto h = q->consumer(c);
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) rill::detail::cpu_relax();
        spinner spin;
        std::uint64_t mine = 0, s = 0;
        E e{};
        while (received.load(std::memory_order_relaxed) < n) {
          if (h.try_pop(e)) {
            s += value_of(e);
            if (++mine % 256 == 0) received.fetch_add(256, std::memory_order_relaxed);
            spin.reset();
          } else {
            received.fetch_add(mine % 256, std::memory_order_relaxed);  // publish the rest
            mine -= mine % 256;
            spin();
          }
        }
        sum.fetch_add(s);
      });
    }
    while (ready.load() != producers + consumers) std::this_thread::yield();
    const auto start = clock_type::now();
    go.store(true, std::memory_order_release);
    for (auto& t : threads) t.join();
    const auto stop = clock_type::now();
    state.SetIterationTime(std::chrono::duration<double>(stop - start).count());
    if (sum.load() != expected || received.load() != n) {
      state.SkipWithError("checksum mismatch");
      break;
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
}

// ---------------------------------------------------------------- uncontended --
// One thread pushes 512 elements then pops them: the cost of the operations themselves
// with every line in the local cache. The least noise-sensitive number on a shared machine.
template <class Q, class E>
void uncontended(benchmark::State& state) {
  Q q(1, 1);
  auto out = q.producer(0);
  auto in = q.consumer(0);
  constexpr std::uint64_t burst = 512;
  std::uint64_t sum = 0, expected = 0;
  for (auto _ : state) {
    for (std::uint64_t i = 1; i <= burst; ++i) {
      if (!out.try_push(make<E>(i))) state.SkipWithError("unexpected full");
    }
    E e{};
    for (std::uint64_t i = 1; i <= burst; ++i) {
      if (!in.try_pop(e)) state.SkipWithError("unexpected empty");
      sum += value_of(e);
    }
    expected += burst * (burst + 1) / 2;
  }
  if (sum != expected) state.SkipWithError("checksum mismatch");
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * burst));
}

// ------------------------------------------------------------------ latency --
template <class Q>
void roundtrip(benchmark::State& state) {
  using E = std::uint32_t;
  const std::uint64_t r = round_trips_per_run;
  double total_ns = 0;
  for (auto _ : state) {
    Q ping(1, 1), pong(1, 1);
    std::atomic<bool> go{false};
    std::uint64_t echoed_sum = 0;
    std::thread echo([&] {
      pin_to_core(1);
      auto in = ping.consumer(0);
      auto out = pong.producer(0);
      go.store(true, std::memory_order_release);
      for (std::uint64_t i = 0; i < r; ++i) {
        E e{};
        while (!in.try_pop(e)) rill::detail::cpu_relax();
        while (!out.try_push(std::move(e))) rill::detail::cpu_relax();
      }
    });
    pin_to_core(0);
    auto out = ping.producer(0);
    auto in = pong.consumer(0);
    while (!go.load(std::memory_order_acquire)) rill::detail::cpu_relax();
    const auto start = clock_type::now();
    for (std::uint64_t i = 1; i <= r; ++i) {
      E e = static_cast<E>(i);
      while (!out.try_push(std::move(e))) rill::detail::cpu_relax();
      while (!in.try_pop(e)) rill::detail::cpu_relax();
      echoed_sum += e;
    }
    const auto stop = clock_type::now();
    echo.join();
    const double secs = std::chrono::duration<double>(stop - start).count();
    state.SetIterationTime(secs);
    total_ns += secs * 1e9;
    if (echoed_sum != r * (r + 1) / 2) {
      state.SkipWithError("checksum mismatch");
      break;
    }
  }
  state.counters["ns_per_roundtrip"] = total_ns / (static_cast<double>(state.iterations()) * r);
  pin_to_core(0);
}

// The floor: one cache line bouncing between two cores (odd = A's turn done, even = B's).
void atomic_pingpong(benchmark::State& state) {
  const std::uint64_t r = round_trips_per_run;
  double total_ns = 0;
  for (auto _ : state) {
    alignas(64) std::atomic<std::uint64_t> flag{0};
    std::thread echo([&] {
      pin_to_core(1);
      for (std::uint64_t i = 0; i < r; ++i) {
        while (flag.load(std::memory_order_acquire) != 2 * i + 1) rill::detail::cpu_relax();
        flag.store(2 * i + 2, std::memory_order_release);
      }
    });
    pin_to_core(0);
    const auto start = clock_type::now();
    for (std::uint64_t i = 0; i < r; ++i) {
      flag.store(2 * i + 1, std::memory_order_release);
      while (flag.load(std::memory_order_acquire) != 2 * i + 2) rill::detail::cpu_relax();
    }
    const auto stop = clock_type::now();
    echo.join();
    const double secs = std::chrono::duration<double>(stop - start).count();
    state.SetIterationTime(secs);
    total_ns += secs * 1e9;
    if (flag.load() != 2 * r) state.SkipWithError("checksum mismatch");
  }
  state.counters["ns_per_roundtrip"] = total_ns / (static_cast<double>(state.iterations()) * r);
}

// -------------------------------------------------------------- registration --
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

template <class Q, class E>
void add_throughput(const std::string& name, std::initializer_list<std::pair<int, int>> shapes) {
  const std::string bytes = std::to_string(sizeof(E)) + "B";
  for (auto [p, c] : shapes) {
    benchmark::RegisterBenchmark(("throughput/" + name + "/" + bytes + "/" + std::to_string(p) +
                                  "P" + std::to_string(c) + "C")
                                     .c_str(),
                                 throughput<Q, E>)
        ->Args({p, c})
        ->UseManualTime()
        ->Iterations(4)
        ->Unit(benchmark::kMillisecond)
        ->ComputeStatistics("min", min_of)
        ->ComputeStatistics("max", max_of);
  }
}

template <class E>
void add_all_throughput() {
  const auto both = {std::pair{1, 1}, std::pair{2, 2}};
  using rp = rill::retry_policy;
  add_throughput<rill_ring_q<E, rp::immediate>, E>("rill_ring", both);
  add_throughput<rill_ring_q<E, rp::backoff>, E>("rill_ring_backoff", both);
  add_throughput<rill_numa_q<E, 1>, E>("rill_numa_1node", both);
  add_throughput<rill_numa_q<E, 2>, E>("rill_numa_2node_cross", both);
  add_throughput<boost_q<E>, E>("boost_lockfree", both);
  add_throughput<moodycamel_q<E>, E>("moodycamel", both);
  add_throughput<tbb_q<E>, E>("tbb_bounded", both);
  add_throughput<atomic_queue_q<E>, E>("atomic_queue", both);
}

template <class Q>
void add_roundtrip(const std::string& name) {
  benchmark::RegisterBenchmark(("roundtrip/" + name).c_str(), roundtrip<Q>)
      ->UseManualTime()
      ->Iterations(5)
      ->Unit(benchmark::kMillisecond)
      ->ComputeStatistics("min", min_of);
}

template <class Q, class E>
void add_uncontended(const std::string& name) {
  benchmark::RegisterBenchmark(
      ("uncontended/" + name + "/" + std::to_string(sizeof(E)) + "B").c_str(), uncontended<Q, E>)
      ->MinTime(0.2)
      ->ComputeStatistics("max", max_of);
}

template <class E>
void add_all_uncontended() {
  add_uncontended<rill_ring_q<E, rill::retry_policy::immediate>, E>("rill_ring");
  add_uncontended<rill_numa_q<E, 1>, E>("rill_numa_1node");
  add_uncontended<boost_q<E>, E>("boost_lockfree");
  add_uncontended<moodycamel_q<E>, E>("moodycamel");
  add_uncontended<tbb_q<E>, E>("tbb_bounded");
  add_uncontended<atomic_queue_q<E>, E>("atomic_queue");
}

int register_all() {
  add_all_throughput<std::uint32_t>();
  add_all_throughput<msg64>();
  add_all_uncontended<std::uint32_t>();
  add_all_uncontended<msg64>();

  using E = std::uint32_t;
  benchmark::RegisterBenchmark("roundtrip/atomic_pingpong", atomic_pingpong)
      ->UseManualTime()
      ->Iterations(5)
      ->Unit(benchmark::kMillisecond)
      ->ComputeStatistics("min", min_of);
  add_roundtrip<rill_ring_q<E, rill::retry_policy::immediate>>("rill_ring");
  add_roundtrip<rill_numa_q<E, 1>>("rill_numa_1node");
  add_roundtrip<boost_q<E>>("boost_lockfree");
  add_roundtrip<moodycamel_q<E>>("moodycamel");
  add_roundtrip<tbb_q<E>>("tbb_bounded");
  add_roundtrip<atomic_queue_q<E>>("atomic_queue");

  // Lesson 1: node lookup per operation vs cached in the endpoint (1 node, 1P1C and 2P2C).
  const auto both = {std::pair{1, 1}, std::pair{2, 2}};
  add_throughput<rill_numa_q<E, 1>, E>("lesson1_cached", both);
  add_throughput<rill_numa_lookup_q<E, lookup::sched_getcpu>, E>("lesson1_sched_getcpu", both);
  add_throughput<rill_numa_lookup_q<E, lookup::hwloc>, E>("lesson1_hwloc", both);
  // Lesson 2: cross-node traffic, per-endpoint counters vs one shared counter.
  add_throughput<rill_numa_q<E, 2, false>, E>("lesson2_private_counters", both);
  add_throughput<rill_numa_q<E, 2, true>, E>("lesson2_shared_counter", both);
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();

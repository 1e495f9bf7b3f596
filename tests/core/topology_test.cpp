// rill::topology (core/include/rill/core/topology.hpp) against the kernel's own account of
// this machine: the cores discover() finds are the cores of the CPUs in the calling
// thread's affinity mask, as sysfs names them (/sys/devices/system/cpu/cpuN/topology:
// physical_package_id, core_id), with the lowest such CPU of each core as the one to pin
// to; a thread limited to one CPU finds that CPU alone, and a runtime made on it runs its
// workers there (sched_getcpu(3) inside a map), not on the machine's first core.
#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <rill/rill.hpp>

namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

int sysfs_int(int cpu, const char* field) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + field);
  int v = -1;
  in >> v;
  return v;
}

/// The lowest CPU of every core that has a CPU in `cpus`, by sysfs.
std::set<int> first_cpu_per_core(const std::vector<int>& cpus) {
  std::map<std::pair<int, int>, int> core;  // (package, core id) -> lowest cpu
  for (int c : cpus) {
    const auto k = std::pair{sysfs_int(c, "physical_package_id"), sysfs_int(c, "core_id")};
    auto [it, fresh] = core.emplace(k, c);
    if (!fresh) it->second = std::min(it->second, c);
  }
  std::set<int> out;
  for (const auto& [k, c] : core) out.insert(c);
  return out;
}

std::set<int> discovered_cpus(const rill::topology& t) {
  std::set<int> out;
  for (const auto& n : t.nodes()) out.insert(n.cores.begin(), n.cores.end());
  return out;
}

/// Runs f on a new thread whose affinity is {cpu}; joins it.
template <class F>
void on_cpu(int cpu, F f) {
  std::thread th([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
    f();
  });
  th.join();
}

}  // namespace

TEST(topology, discover_finds_the_cores_of_the_cpus_this_thread_may_run_on) {
  const auto cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  const auto t = rill::topology::discover();
  EXPECT_FALSE(t.is_synthetic());
  EXPECT_EQ(discovered_cpus(t), first_cpu_per_core(cpus));
  EXPECT_EQ(t.core_count(), first_cpu_per_core(cpus).size());
}

TEST(topology, a_thread_bound_to_one_cpu_finds_that_cpu_alone) {
  const auto cpus = allowed_cpus();
  // The first, the last and up to 6 between.
  std::set<int> pick{cpus.front(), cpus.back()};
  for (std::size_t i = 0; i < cpus.size(); i += std::max<std::size_t>(1, cpus.size() / 6)) pick.insert(cpus[i]);
  for (int cpu : pick) {
    on_cpu(cpu, [&] {
      const auto t = rill::topology::discover();
      ASSERT_EQ(t.nodes().size(), 1u) << "cpu " << cpu;
      EXPECT_EQ(t.nodes()[0].cores, std::vector<int>{cpu});
      const auto place = t.place(3);
      ASSERT_EQ(place.size(), 3u);
      for (const auto& p : place) EXPECT_EQ(p.cpu, cpu);
    });
  }
}

TEST(topology, synthetic_ignores_the_affinity_mask) {
  const auto cpus = allowed_cpus();
  on_cpu(cpus.back(), [] {
    const auto t = rill::topology::synthetic("2 nodes x 3 cores");
    EXPECT_TRUE(t.is_synthetic());
    EXPECT_EQ(t.nodes().size(), 2u);
    EXPECT_EQ(t.core_count(), 6u);
    for (const auto& p : t.place(4)) EXPECT_EQ(p.cpu, -1);
  });
}

// What a user of `taskset -c N job` sees: every worker on cpu N.
TEST(topology, workers_of_a_runtime_made_on_one_cpu_run_on_that_cpu) {
  const auto cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs to tell the last from the first";
  const int cpu = cpus.back();
  std::mutex mu;
  std::set<int> seen;
  std::size_t records = 0;
  on_cpu(cpu, [&] {
    rill::runtime rt{{.workers = 2}};
    std::vector<std::vector<rill::record<int>>> splits(2);  // one per worker
    for (int i = 0; i < 1000; ++i) splits[i % 2].push_back({i, rill::event_time{std::chrono::milliseconds{i}}});
    auto job = rill::from(rill::vector_source<int>{std::move(splits)}, "numbers")
                   .map([&](int x) {
                     std::lock_guard lk(mu);
                     seen.insert(sched_getcpu());
                     ++records;
                     return x;
                   }, "where")
                   .sink([](int) {}, "drop");
    rt.run(job);
  });
  EXPECT_EQ(records, 1000u);
  EXPECT_EQ(seen, std::set<int>{cpu});
}

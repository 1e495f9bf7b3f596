// rill/core/topology.hpp — NUMA nodes and cores the runtime places its workers on.
//
// Defines rill::topology: the NUMA nodes of the machine (or of a synthetic machine) and
// the cores of each, discovered through hwloc, plus worker placement.
//
// Example (compiled by tests/banner_examples.py):
//   auto real = rill::topology::discover();                  // this machine, via hwloc
//   auto fake = rill::topology::synthetic("2 nodes x 2 cores");
//   for (const auto& n : fake.nodes()) std::cout << n.id << ": " << n.cores.size() << '\n';
//   auto place = fake.place(3);   // 3 workers spread round-robin over nodes
//   // place[i].node is the worker's NUMA node, place[i].cpu the OS cpu (or -1: unpinned)
//
// A synthetic topology (docs/design.md "Runtime") makes NUMA logic testable on a one-node
// machine: routing follows the synthetic nodes while the worker threads run unpinned on
// the real cores. The environment variable HWLOC_SYNTHETIC, when set, is honoured by
// discover() the same way (hwloc reads it), and the result is marked synthetic.
//
// Thread safety: immutable after construction. Distinct objects: safe. Shared objects: safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace rill {

class topology {
 public:
  struct node {
    std::size_t id = 0;         ///< 0-based logical NUMA node index
    std::vector<int> cores;     ///< OS cpu index of one PU per core on this node
  };
  /// Where one worker runs.
  struct placement {
    std::size_t node = 0;  ///< logical NUMA node the worker belongs to (routing follows it)
    int cpu = -1;          ///< OS cpu to pin to; -1 = run unpinned (synthetic topology)
  };

  /// Discovers this machine with hwloc (one PU per core; NUMA nodes by locality),
  /// limited to the cores the calling thread may run on: its CPU affinity mask
  /// (sched_getaffinity(2); set by `taskset`, `numactl --physcpubind`, a parent process)
  /// and the cgroup cpuset (which hwloc applies itself). A core counts when one of its
  /// PUs is in the mask, and that PU is the one workers pin to; a node left without
  /// cores is dropped. So two processes started with `taskset -c 0` and `taskset -c 1`
  /// pin their workers to cpu 0 and cpu 1, not both to the machine's first core.
  /// Any thread; blocks while hwloc reads the machine (sysfs); call it once per run.
  /// Throws std::runtime_error when hwloc cannot load a topology.
  static topology discover();

  /// Builds a synthetic topology from "N nodes x M cores" (also "N node x M core",
  /// spaces optional) or from a raw hwloc synthetic description ("numa:2 core:2 pu:1").
  /// Throws rill::config_error (key "runtime.topology") on a malformed spec or zero counts.
  static topology synthetic(std::string_view spec);

  /// The NUMA nodes, in index order (at least one). Any thread.
  const std::vector<node>& nodes() const noexcept { return nodes_; }
  /// Cores over all nodes. Any thread.
  std::size_t core_count() const noexcept;
  /// True when built by synthetic() or from HWLOC_SYNTHETIC: workers then run unpinned.
  bool is_synthetic() const noexcept { return synthetic_; }

  /// Places `workers` workers: worker i goes to node (i mod nodes) and takes that node's
  /// next core, so consecutive workers alternate nodes. Real topology: cpu is the core's
  /// OS index (pinning), wrapping when workers > cores. Synthetic: cpu = -1.
  /// Precondition: workers > 0.
  std::vector<placement> place(std::size_t workers) const;

  /// "2 nodes x 4 cores (synthetic)" — for logs.
  std::string describe() const;

 private:
  std::vector<node> nodes_;
  bool synthetic_ = false;
  static topology load(const char* synthetic_description);
};

}  // namespace rill

// Topology discovery through hwloc (https://www.open-mpi.org/projects/hwloc/doc/).
#include "rill/core/topology.hpp"

#include <hwloc.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <regex>
#include <stdexcept>

#include "rill/core/error.hpp"

namespace rill {
namespace {
struct topo_deleter {
  void operator()(hwloc_topology* t) const noexcept { hwloc_topology_destroy(t); }
};
using topo_ptr = std::unique_ptr<hwloc_topology, topo_deleter>;
struct bitmap_deleter {
  void operator()(hwloc_bitmap_s* b) const noexcept { hwloc_bitmap_free(b); }
};
using bitmap_ptr = std::unique_ptr<hwloc_bitmap_s, bitmap_deleter>;
}  // namespace

topology topology::load(const char* synthetic_description) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw std::runtime_error("hwloc_topology_init failed");
  topo_ptr topo{raw};
  if (synthetic_description != nullptr &&
      hwloc_topology_set_synthetic(raw, synthetic_description) != 0) {
    throw config_error("runtime.topology", std::string("runtime.topology: hwloc rejects synthetic "
                                                       "description \"") +
                                               synthetic_description + "\"");
  }
  if (hwloc_topology_load(raw) != 0) throw std::runtime_error("hwloc_topology_load failed");

  topology result;
  const char* env = std::getenv("HWLOC_SYNTHETIC");
  result.synthetic_ = synthetic_description != nullptr || (env != nullptr && *env != '\0');

  // The calling thread's CPU affinity (taskset, numactl --physcpubind, sched_setaffinity):
  // a core takes workers only through a PU inside it. hwloc already leaves out the PUs a
  // cgroup cpuset disallows; the affinity mask is the caller's own choice on top of that.
  // A synthetic machine has no real PUs to bind to.
  bitmap_ptr allowed{hwloc_bitmap_alloc()};
  bitmap_ptr usable{hwloc_bitmap_alloc()};
  if (!allowed || !usable) throw std::bad_alloc();
  const bool restrict_to_binding =
      !result.synthetic_ && hwloc_get_cpubind(raw, allowed.get(), HWLOC_CPUBIND_THREAD) == 0 &&
      hwloc_bitmap_intersects(allowed.get(), hwloc_topology_get_allowed_cpuset(raw));

  const int n_numa = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_NUMANODE);
  const int n_cores = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_CORE);
  for (int i = 0; i < std::max(n_numa, 1); ++i) result.nodes_.push_back(node{std::size_t(i), {}});
  for (int c = 0; c < n_cores; ++c) {
    hwloc_obj_t core = hwloc_get_obj_by_type(raw, HWLOC_OBJ_CORE, unsigned(c));
    if (restrict_to_binding) {
      hwloc_bitmap_and(usable.get(), core->cpuset, allowed.get());
    } else {
      hwloc_bitmap_copy(usable.get(), core->cpuset);
    }
    if (hwloc_bitmap_iszero(usable.get())) continue;
    hwloc_obj_t pu = hwloc_get_obj_inside_cpuset_by_type(raw, usable.get(), HWLOC_OBJ_PU, 0);
    std::size_t node_index = 0;
    for (int n = 0; n < n_numa; ++n) {
      hwloc_obj_t numa = hwloc_get_obj_by_type(raw, HWLOC_OBJ_NUMANODE, unsigned(n));
      if (hwloc_bitmap_intersects(numa->cpuset, core->cpuset)) {
        node_index = std::size_t(n);
        break;
      }
    }
    result.nodes_[node_index].cores.push_back(pu != nullptr ? int(pu->os_index) : c);
  }
  // A node without cores (memory-only) takes no workers.
  std::erase_if(result.nodes_, [](const node& n) { return n.cores.empty(); });
  for (std::size_t i = 0; i < result.nodes_.size(); ++i) result.nodes_[i].id = i;
  if (result.nodes_.empty()) throw std::runtime_error("hwloc found no cores");
  return result;
}

topology topology::discover() { return load(nullptr); }

topology topology::synthetic(std::string_view spec) {
  static const std::regex human(R"(^\s*(\d+)\s*nodes?\s*x\s*(\d+)\s*cores?\s*$)",
                                std::regex::icase);
  std::string s{spec};
  std::smatch m;
  std::string description = s;
  if (std::regex_match(s, m, human)) {
    const auto nodes = std::stoul(m[1].str());
    const auto cores = std::stoul(m[2].str());
    if (nodes == 0 || cores == 0 || nodes > 1024 || cores > 4096) {
      throw config_error("runtime.topology",
                         "runtime.topology: node and core counts must be in 1..1024 / 1..4096, got \"" +
                             s + "\"");
    }
    description = "numa:" + std::to_string(nodes) + " core:" + std::to_string(cores) + " pu:1";
  } else if (s.find(':') == std::string::npos) {
    throw config_error("runtime.topology", "runtime.topology: expected \"N nodes x M cores\" or an "
                                           "hwloc synthetic description, got \"" + s + "\"");
  }
  topology t = load(description.c_str());
  t.synthetic_ = true;
  return t;
}

std::size_t topology::core_count() const noexcept {
  std::size_t n = 0;
  for (const auto& nd : nodes_) n += nd.cores.size();
  return n;
}

std::vector<topology::placement> topology::place(std::size_t workers) const {
  std::vector<placement> out;
  out.reserve(workers);
  std::vector<std::size_t> next(nodes_.size(), 0);
  for (std::size_t i = 0; i < workers; ++i) {
    const auto& nd = nodes_[i % nodes_.size()];
    const int cpu = nd.cores[next[nd.id]++ % nd.cores.size()];
    out.push_back(placement{nd.id, synthetic_ ? -1 : cpu});
  }
  return out;
}

std::string topology::describe() const {
  return std::to_string(nodes_.size()) + " nodes x " +
         std::to_string(nodes_.empty() ? 0 : nodes_.front().cores.size()) + " cores" +
         (synthetic_ ? " (synthetic)" : "");
}

}  // namespace rill

// What runtime::prometheus_text() keeps between scrapes (private to core/src).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "rill/core/runtime.hpp"

namespace rill {

/// The previous scrape's per-worker time totals, for the per-second gauges.
struct runtime::scrape_state {
  std::mutex mu;  // prometheus_text() may run on several threads
  std::int64_t at_ns = 0;
  std::vector<std::uint64_t> busy, backpressured;
  const void* run = nullptr;
};

}  // namespace rill

// rill/operators/join_options.hpp — the options of a join of two keyed streams
// (<rill/operators/join.hpp>), in a header of their own because keyed_stream's join
// builders take them by value before join.hpp can be included.
//
// Defines:
//   rill::join_options   max out-of-order delay, idle timeout, what a stop does to state
//
// Example (compiled by tests/banner_examples.py):
//   rill::join_options o{.max_delay = 1s, .on_stop = rill::join_options::stop_policy::fire};
//   o.validate();  // throws rill::config_error("join.max_delay", ...) when max_delay < 0
//
// Thread safety: a plain value; validate() only reads it.
#pragma once

#include <chrono>

#include "rill/core/error.hpp"
#include "rill/operators/window.hpp"

namespace rill {

/// Options of a join stage. Aggregate: `{.max_delay = 1s}`.
struct join_options {
  using stop_policy = window_options::stop_policy;
  /// Max out-of-order delay per side (>= 0): W_side = largest time seen - max_delay.
  std::chrono::nanoseconds max_delay{0};
  /// Processing time after which a silent input is idle (>= 0; 0 = never).
  std::chrono::nanoseconds idle_timeout{0};
  /// What request_stop() does to the state: discard (default) or fire (see
  /// <rill/operators/join.hpp>).
  stop_policy on_stop = stop_policy::discard;
  /// Throws config_error "join.max_delay", "join.idle_timeout" (< 0), "join.on_stop".
  void validate() const {
    if (max_delay < std::chrono::nanoseconds::zero())
      throw config_error("join.max_delay", "join.max_delay must be >= 0");
    if (idle_timeout < std::chrono::nanoseconds::zero())
      throw config_error("join.idle_timeout", "join.idle_timeout must be >= 0");
    if (on_stop != stop_policy::discard && on_stop != stop_policy::fire)
      throw config_error("join.on_stop", "join.on_stop must be discard or fire");
  }
};

}  // namespace rill

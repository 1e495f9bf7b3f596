// rill/core/time.hpp — event time, processing-time clocks, and tumbling-window arithmetic.
//
// Defines:
//   rill::event_time        nanoseconds since the Unix epoch, signed 64-bit (docs/design.md
//                           "Records, time, watermarks")
//   rill::event_time_min / event_time_max   the -infinity / +infinity sentinels
//   rill::steady_time       a processing-time instant (idle timeouts, linger, latency)
//   rill::clock / system_steady_clock / manual_clock   where operators read processing time
//   rill::floor_div, rill::window_start   tumbling-window assignment that floors negative times
//
// Example (compiled by tests/banner_examples.py):
//   using namespace std::chrono_literals;
//   rill::event_time t{-1ns};
//   auto start = rill::window_start(t, 10s);   // -10 s: window [-10 s, 0) holds t = -1 ns
//   rill::manual_clock clk;                    // tests advance time by hand, never sleep
//   clk.advance(1s);
//
// Thread safety: all functions are pure. system_steady_clock is safe from any thread;
// manual_clock is safe from any thread (its instant is an atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace rill {

/// Event time: nanoseconds since 1970-01-01T00:00:00Z, signed 64-bit, so times before
/// the epoch are representable (and windows over them floor, see window_start).
using event_time = std::chrono::sys_time<std::chrono::nanoseconds>;

/// -infinity: "nothing seen yet". +infinity: "end of stream", every window fires.
inline constexpr event_time event_time_min = event_time::min();
inline constexpr event_time event_time_max = event_time::max();

/// Processing time (monotonic). Used for idle timeouts and latency, never for windows.
using steady_time = std::chrono::steady_clock::time_point;

/// Floor division for signed integers: floor_div(-1, 10) == -1 (not 0 as `/` gives).
/// Precondition: d > 0.
constexpr std::int64_t floor_div(std::int64_t n, std::int64_t d) noexcept {
  std::int64_t q = n / d;
  return (n % d != 0 && n < 0) ? q - 1 : q;
}

/// Start of the half-open tumbling window [k*L, (k+1)*L) that holds t.
/// Negative times floor: window_start(-1 ns, 10 s) == -10 s, so start <= t < start + L
/// for every t. Rule: docs/design.md "window_sort" (a signed remainder would put negative
/// times in the window after theirs, as Flink's FLINK-26334 reports).
/// Precondition: length > 0.
constexpr event_time window_start(event_time t, std::chrono::nanoseconds length) noexcept {
  auto k = floor_div(t.time_since_epoch().count(), length.count());
  return event_time{std::chrono::nanoseconds{k * length.count()}};
}

/// Where an operator reads processing time. Workers use system_steady_clock; tests use
/// manual_clock so time-dependent behaviour (idle inputs) is tested without sleeps.
class clock {
 public:
  virtual ~clock() = default;
  /// The current processing time. Never blocks, never throws.
  virtual steady_time now() const noexcept = 0;
};

/// std::chrono::steady_clock. Safe from any thread.
class system_steady_clock final : public clock {
 public:
  steady_time now() const noexcept override { return std::chrono::steady_clock::now(); }
  /// The process-wide instance the workers use. Any thread.
  static system_steady_clock& instance() noexcept {
    static system_steady_clock c;
    return c;
  }
};

/// A clock that moves only when told to. Starts at steady_time{} (epoch of steady_clock).
/// Safe from any thread.
class manual_clock final : public clock {
 public:
  steady_time now() const noexcept override {
    return steady_time{std::chrono::nanoseconds{ns_.load(std::memory_order_acquire)}};
  }
  /// Moves the clock forward by `d` (d >= 0: processing time never goes back). Any thread.
  void advance(std::chrono::nanoseconds d) noexcept {
    ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  }

 private:
  std::atomic<std::int64_t> ns_{0};
};

}  // namespace rill

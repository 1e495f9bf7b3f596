// tests/support/event_ms.hpp — event times written in milliseconds, for operator tests.
//
// Defines rill_test::ms(v): the event time v ms after the epoch (v may be negative), and
// rill_test::to_ms(t): t in whole ms since the epoch (std::chrono::duration_cast: toward
// zero). Pure, constexpr where the standard allows, any thread.
//
// Example:
//   static_assert(rill_test::ms(-1500).time_since_epoch() == std::chrono::milliseconds{-1500});
//   // rill_test::to_ms(rill_test::ms(42)) == 42
#pragma once

#include <chrono>
#include <cstdint>

#include "rill/core/time.hpp"

namespace rill_test {

constexpr rill::event_time ms(std::int64_t v) { return rill::event_time{std::chrono::milliseconds{v}}; }

constexpr std::int64_t to_ms(rill::event_time t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace rill_test

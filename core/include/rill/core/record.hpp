// rill/core/record.hpp — the unit that flows through a pipeline.
//
// Defines rill::record<T>: a user payload of type T, its event time, and (for records
// read from Kafka) the source partition and offset they came from.
//
// Example:
//   rill::record<int> r{42, rill::event_time{std::chrono::seconds{5}}};
//   r.value += 1;
//
// Thread safety: a plain value type. Distinct objects: safe. Shared objects: unsafe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "rill/core/time.hpp"

namespace rill {

/// Where a record was read from, for at-least-once offset tracking (DESIGN.md "Kafka").
struct source_position {
  std::int32_t partition = -1;
  std::int64_t offset = -1;
};

/// One record. `value` is owned; `time` is its event time (ns since the epoch).
template <class T>
struct record {
  T value;
  event_time time{};
  std::optional<source_position> position{};
};

}  // namespace rill

// rill/core/record.hpp — the unit that flows through a pipeline.
//
// Defines:
//   rill::record<T>        a user payload of type T, its event time, and (for records read
//                          from Kafka) the source partition and offset and an ack token
//   rill::source_position  partition and offset a record was read from
//   rill::ack_token        "every output derived from one input is done" (at-least-once)
//   rill::ack_group        one token standing for several (a window's records)
//   rill::join_acks(recs)  the token of a record built from `recs` (window_sort uses it)
//   rill::advances_progress(r)  whether r's time moves its input's watermark (not for
//                          records of a partitioned source: per-partition watermarks)
//
// Example (compiled by tests/banner_examples.py):
//   rill::record<int> r{42, rill::event_time{std::chrono::seconds{5}}};
//   r.value += 1;                                  // r.ack is null: nothing to acknowledge
//   // an operator deriving an output carries the token along:
//   rill::record<long> out{long(r.value) * 2, r.time, r.position, r.ack};
//
// Acknowledgement by ownership (at-least-once, docs/design.md "Kafka"): a source that
// commits input positions (rill::kafka_source) gives each input record a token. Every record
// derived from it holds a copy (map moves it, flat_map copies it into each output,
// window_sort keeps the inputs inside the window and gives the window record an
// ack_group). When the last copy is destroyed the input counts as done: a filter that
// drops a record, a sink lambda that returns, a Kafka sink's delivery report that frees
// it. A sink that fails to deliver calls ack->fail() before releasing it: the input is
// then NOT done (its offset is never committed in this run; it is redelivered after a
// restart). Null for records of sources that need no acks: no refcount traffic there.
//
// Thread safety: record is a plain value type (distinct objects: safe; shared: unsafe).
// An ack_token may be copied, failed and destroyed on any thread; its implementation
// (the source's) is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rill/core/time.hpp"

namespace rill {

/// Where a record was read from, for at-least-once offset tracking (docs/design.md
/// "Kafka").
/// `catching_up`: set by the source driver when the partition's largest event time was
/// still behind the progress its split had already sent (a partition assigned to this
/// split after a rebalance and read again from its committed offset, or one resuming
/// after it was idle); keyed windows give such records their own event-time clock
/// instead of dropping them as late (docs/design.md "Kafka source", catch-up lanes).
/// Aggregate: `{.partition = 3, .offset = 42}`; 16 bytes.
struct source_position {
  std::int32_t partition = -1;
  bool catching_up = false;
  std::int64_t offset = -1;
};

/// The acknowledgement of one input record (or of a group). Destroying the last
/// std::shared_ptr to it acknowledges; fail() first turns that into "not done".
/// Implementations: the source's (destructor posts to the source, any thread, never
/// blocks longer than one mutex), and ack_group.
class ack_token {
 public:
  virtual ~ack_token() = default;
  /// Marks the derived output as failed (delivery failed for good). Any thread; noexcept.
  virtual void fail() noexcept = 0;
};

/// A token holding several tokens: done when it and every other holder of a part are
/// gone; fail() fails every part.
class ack_group final : public ack_token {
 public:
  explicit ack_group(std::vector<std::shared_ptr<ack_token>> parts) : parts_(std::move(parts)) {}
  void fail() noexcept override {
    for (auto& p : parts_) p->fail();
  }
  std::size_t size() const noexcept { return parts_.size(); }
  /// The tokens this group stands for (an exactly-once sink reads the input positions
  /// an output depends on from them). Read-only; the group keeps them alive.
  const std::vector<std::shared_ptr<ack_token>>& parts() const noexcept { return parts_; }

 private:
  std::vector<std::shared_ptr<ack_token>> parts_;
};

/// One record. `value` is owned; `time` is its event time (ns since the epoch); `ack` is
/// null unless the source tracks acknowledgements (see above).
template <class T>
struct record {
  T value;
  event_time time{};
  std::optional<source_position> position{};
  std::shared_ptr<ack_token> ack{};
};

/// Whether record `r`'s own event time counts as progress of the input it arrives on.
///
/// Per-partition watermarks (docs/design.md "Records, time, watermarks"; Flink's
/// per-partition watermarking for its Kafka source): one Kafka consumer reads several
/// partitions whose records interleave in fetch order, not in time order, so the largest
/// time seen over all of them says nothing about a partition that lags behind. A record
/// read from a partitioned source (position set) therefore does not move its input's
/// progress: the source's progress markers do, and rill::kafka_source sends the minimum
/// over its assigned partitions. Records without a position (files, captures, sockets,
/// records a user built from scratch) advance progress by their own time. Used by key_by's
/// and rebalance's frontiers and by window_sort. noexcept, O(1).
template <class T>
constexpr bool advances_progress(const record<T>& r) noexcept {
  return !r.position.has_value();
}

/// The token of an output built from all of `recs` (a window): null when none has one,
/// the single token when they all share one, else an ack_group of the distinct
/// consecutive tokens. O(recs.size()); allocates only in the group case.
template <class T>
std::shared_ptr<ack_token> join_acks(const std::vector<record<T>>& recs) {
  std::vector<std::shared_ptr<ack_token>> parts;
  const ack_token* last = nullptr;
  for (const auto& r : recs)
    if (r.ack && r.ack.get() != last) {
      last = r.ack.get();
      parts.push_back(r.ack);
    }
  if (parts.empty()) return nullptr;
  if (parts.size() == 1) return std::move(parts.front());
  return std::make_shared<ack_group>(std::move(parts));
}

}  // namespace rill

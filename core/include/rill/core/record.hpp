// rill/core/record.hpp — the unit that flows through a pipeline.
//
// Defines:
//   rill::acked, rill::unacked  record policies: whether a record carries provenance
//   rill::record<T, P = acked>  a user payload of type T and its event time; an acked
//                          record also carries the source partition and offset and an ack
//                          token (records read from Kafka)
//   rill::record_policy_of_t<S>  a source's policy (S::record_policy, else acked)
//   rill::join_policy_t<P1, P2>  the policy of a record built from both (acked if either)
//   rill::rebind(r, u)     the record of u derived from r: r's time and provenance
//   rill::to_acked(r)      an unacked record as an acked one (no position, no token)
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
//   // an operator deriving an output carries time and provenance along:
//   rill::record<long> out = rill::rebind(std::move(r), long(r.value) * 2);
//   rill::record<int, rill::unacked> small{7, rill::event_time{}};   // value and time only
//   static_assert(sizeof(small) == 16 && sizeof(rill::record<int>) == 56);
//   rill::record<int> widened = rill::to_acked(std::move(small));   // null position and ack
//
// Record policy (docs/design.md "Record policy"): chosen at compile time by the source. A
// source that commits input positions (rill::kafka_source) is `acked`: its records carry
// the optional source_position and the shared_ptr to an ack token. A source that never
// acknowledges (pcap, pcap frames, generator, TCP, NEXMark's generator) declares
// `using record_policy = rill::unacked;`, and its records are just value and time: no
// envelope to copy through exchanges and rings, no refcount, no position test per record.
// Every operator keeps its input's policy (a window or join output is acked if any input
// is). `acked` is the default, so `record<T>` in user code means what it always did; a
// user function or sink taking `record<T>&&` on an unacked stream receives to_acked(r).
//
// Sizes on x86-64 (libstdc++), checked by static_assert in tests/core/record_test.cpp and
// tests/connectors/packet_test.cpp:
//
//   | T                               | record<T, acked> | record<T, unacked> |
//   |---------------------------------|-----------------:|-------------------:|
//   | int, std::uint64_t              |         56 bytes |           16 bytes |
//   | rill::packet (72 bytes; netflow) |        120 bytes |           80 bytes |
//
// The acked kind adds 40 bytes to value and time: optional<source_position> (24) and
// shared_ptr<ack_token> (16).
//
// Acknowledgement by ownership (at-least-once, docs/design.md "Kafka"): a source that
// commits input positions (rill::kafka_source) gives each input record a token. Every record
// derived from it holds a copy (map moves it, flat_map copies it into each output,
// window_sort keeps the inputs inside the window and gives the window record an
// ack_group). When the last copy is destroyed the input counts as done: a filter that
// drops a record, a sink lambda that returns, a Kafka sink's delivery report that frees
// it. A sink that fails to deliver calls ack->fail() before releasing it: the input is
// then NOT done (its offset is never committed in this run; it is redelivered after a
// restart). Null for acked records of sources that need no acks: no refcount traffic there.
//
// Thread safety: record is a plain value type (distinct objects: safe; shared: unsafe).
// An ack_token may be copied, failed and destroyed on any thread; its implementation
// (the source's) is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
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

/// Record policy: records carry their source position and ack token (at-least-once
/// sources; the default).
struct acked {};
/// Record policy: records carry value and time only (sources that never acknowledge).
struct unacked {};

/// Whether records of policy P carry a position and an ack token.
template <class P>
inline constexpr bool carries_acks_v = std::is_same_v<P, acked>;

/// The policy of a record built from records of policies P1 and P2: acked if either is.
template <class P1, class P2>
using join_policy_t = std::conditional_t<carries_acks_v<P1> || carries_acks_v<P2>, acked, unacked>;

/// A source's record policy: S::record_policy when it declares one, else acked.
template <class S>
struct record_policy_of {
  using type = acked;
};
template <class S>
  requires requires { typename S::record_policy; }
struct record_policy_of<S> {
  using type = typename S::record_policy;
};
template <class S>
using record_policy_of_t = typename record_policy_of<S>::type;

/// One record. `value` is owned; `time` is its event time (ns since the epoch); `ack` is
/// null unless the source tracks acknowledgements (see above). An aggregate.
template <class T, class P = acked>
struct record {
  static_assert(std::is_same_v<P, acked>, "rill::record<T, P>: P is rill::acked or rill::unacked");
  using value_type = T;
  using policy = acked;
  T value;
  event_time time{};
  std::optional<source_position> position{};
  std::shared_ptr<ack_token> ack{};
};

/// One record of a source without acknowledgements: value and time only. An aggregate.
template <class T>
struct record<T, unacked> {
  using value_type = T;
  using policy = unacked;
  T value;
  event_time time{};
};

/// The record of value `u` derived from `r`: r's time, position and ack token (moved).
/// Used by every operator that turns one record into another. noexcept if U's move is.
template <class U, class T>
record<std::decay_t<U>, acked> rebind(record<T, acked>&& r, U&& u) {
  return {std::forward<U>(u), r.time, r.position, std::move(r.ack)};
}
template <class U, class T>
record<std::decay_t<U>, unacked> rebind(record<T, unacked>&& r, U&& u) {
  return {std::forward<U>(u), r.time};
}

/// A record of policy P from its parts; an unacked one drops `position` and `ack` (which
/// are then empty: nothing upstream of an unacked record sets them). `ack` is a
/// std::shared_ptr<ack_token>, copied from an lvalue and moved from an rvalue straight
/// into the record (no by-value parameter in between).
template <class P, class T, class A>
record<T, P> make_record(T&& value, event_time t, const std::optional<source_position>& position,
                         A&& ack) {
  static_assert(std::is_same_v<std::remove_cvref_t<A>, std::shared_ptr<ack_token>> ||
                    std::is_null_pointer_v<std::remove_cvref_t<A>>,
                "make_record: ack is a std::shared_ptr<rill::ack_token> (or nullptr)");
  if constexpr (carries_acks_v<P>)
    return {std::move(value), t, position, std::forward<A>(ack)};
  else
    return {std::move(value), t};
}

/// r's ack token (moved out), or null for an unacked record.
template <class T, class P>
std::shared_ptr<ack_token> take_ack(record<T, P>& r) noexcept {
  if constexpr (carries_acks_v<P>)
    return std::move(r.ack);
  else
    return nullptr;
}
/// r's source position, or none for an unacked record.
template <class T, class P>
std::optional<source_position> position_of(const record<T, P>& r) noexcept {
  if constexpr (carries_acks_v<P>)
    return r.position;
  else
    return std::nullopt;
}

/// An unacked record as an acked one: no position, no token (the input needs no
/// acknowledgement). For user functions and sinks written for record<T>&&.
template <class T>
record<T, acked> to_acked(record<T, unacked>&& r) {
  return {std::move(r.value), r.time};
}
template <class T>
record<T, acked>&& to_acked(record<T, acked>&& r) noexcept {
  return std::move(r);
}

/// Whether record `r`'s own event time counts as progress of the input it arrives on.
///
/// Per-partition watermarks (docs/design.md "Records, time, watermarks"; Flink's
/// per-partition watermarking for its Kafka source): one Kafka consumer reads several
/// partitions whose records interleave in fetch order, not in time order, so the largest
/// time seen over all of them says nothing about a partition that lags behind. A record
/// read from a partitioned source (position set) therefore does not move its input's
/// progress: the source's progress markers do, and rill::kafka_source sends the minimum
/// over its assigned partitions. Records without a position (files, captures, sockets,
/// records a user built from scratch) advance progress by their own time; an unacked
/// record always does. Used by key_by's and rebalance's frontiers and by window_sort.
/// noexcept, O(1).
template <class T>
constexpr bool advances_progress(const record<T, acked>& r) noexcept {
  return !r.position.has_value();
}
template <class T>
constexpr bool advances_progress(const record<T, unacked>&) noexcept {
  return true;
}

/// The token of an output built from all of `recs` (a window): null when none has one,
/// the single token when they all share one, else an ack_group of the distinct
/// consecutive tokens. O(recs.size()); allocates only in the group case. Null at no cost
/// for unacked records.
template <class T>
std::shared_ptr<ack_token> join_acks(const std::vector<record<T, acked>>& recs) {
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
template <class T>
std::shared_ptr<ack_token> join_acks(const std::vector<record<T, unacked>>&) noexcept {
  return nullptr;
}

}  // namespace rill

// rill/connectors/kafka_ack.hpp — how a record read from Kafka is acknowledged, so that
// its input offset can be committed (at-least-once, DESIGN.md "Kafka").
//
// Defines:
//   rill::kafka_ack           a move-only handle: "every output derived from this input
//                             record is done"; done() from any thread, once
//   rill::kafka_take_ack(pos) claims the handle of the record being emitted right now
//
// Example (a custom asynchronous sink that confirms later, from its own thread):
//   .sink([&](rill::record<row>&& r) {
//     auto ack = rill::kafka_take_ack(r.position);     // on the worker, inside the call
//     my_async_write(r.value, [a = std::move(ack)]() mutable { a.done(); });
//   });
//
// Rule (the acknowledgement protocol):
//   - a kafka_source reader emits one input record at a time, synchronously down the chain
//     of its worker. Around that call it opens an "ack scope" for (partition, offset).
//   - any sink that finishes asynchronously (rill::kafka_sink: the delivery report) takes
//     a kafka_ack with kafka_take_ack(record.position) inside that call. Each take adds 1
//     to the input record's outstanding count; each done() subtracts 1.
//   - when the call returns, an input record with no taken acks is done at once: it was
//     dropped (filter, empty flat_map) or consumed synchronously (a plain sink lambda).
//     Otherwise it is done when every taken ack is done.
//   - the source commits, per partition, the lowest offset not yet done (Kafka's "next
//     offset to read"): periodically, on revoke (synchronously) and on shutdown.
// Limits: records that leave the emitting call (key_by exchange, window_sort buffers)
// cannot be tracked by this scope; their input offsets count as done when the call
// returns. kafka_sink counts such records in stats().untracked (see kafka_sink.hpp).
//
// Thread safety: kafka_take_ack on the emitting worker only (thread-local scope);
// kafka_ack::done() from any thread. A handle destroyed without done() does NOT ack
// (the input is redelivered after a restart: at-least-once, never a silent loss).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "rill/core/record.hpp"

namespace rill {

namespace kafka_detail {

/// One acknowledgement: partition id (see kafka_source.hpp), offset, assignment generation.
struct ack_entry {
  std::int32_t pid;
  std::int64_t offset;
  std::uint32_t gen;
};

/// Acks for one source split: pushed from any thread, drained by the split's worker.
class ack_inbox {
 public:
  void push(const ack_entry& a) {
    std::lock_guard<std::mutex> g(mu_);
    acks_.push_back(a);
  }
  /// Moves every pending ack into `out` (cleared first). The split's worker.
  void drain(std::vector<ack_entry>& out) {
    out.clear();
    std::lock_guard<std::mutex> g(mu_);
    out.swap(acks_);
  }

 private:
  std::mutex mu_;
  std::vector<ack_entry> acks_;
};

/// The record being emitted by a kafka_source reader on this thread.
struct ack_scope {
  std::shared_ptr<ack_inbox> inbox;
  std::int32_t pid = -1;
  std::int64_t offset = -1;
  std::uint32_t gen = 0;
  std::uint32_t taken = 0;
};

inline thread_local ack_scope* current_scope = nullptr;

}  // namespace kafka_detail

class kafka_ack {
 public:
  kafka_ack() = default;
  kafka_ack(kafka_ack&& o) noexcept : inbox_(std::move(o.inbox_)), e_(o.e_) {}
  kafka_ack& operator=(kafka_ack&& o) noexcept {
    inbox_ = std::move(o.inbox_);
    e_ = o.e_;
    return *this;
  }
  /// True when this handle tracks an input record (false: nothing to acknowledge).
  bool valid() const noexcept { return inbox_ != nullptr; }
  /// Acknowledges once; later calls do nothing. Any thread; never blocks (one mutex).
  void done() {
    if (inbox_) inbox_->push(e_);
    inbox_.reset();
  }

 private:
  friend kafka_ack kafka_take_ack(const std::optional<source_position>&);
  std::shared_ptr<kafka_detail::ack_inbox> inbox_;
  kafka_detail::ack_entry e_{};
};

/// Claims an ack for the input record being emitted on this thread, if `pos` is that
/// record's position (otherwise returns an invalid handle: nothing to acknowledge, e.g.
/// a record that came through an exchange). On the emitting worker, inside the call.
inline kafka_ack kafka_take_ack(const std::optional<source_position>& pos) {
  kafka_ack a;
  auto* s = kafka_detail::current_scope;
  if (!s || !pos || pos->partition != s->pid || pos->offset != s->offset) return a;
  ++s->taken;
  a.inbox_ = s->inbox;
  a.e_ = {s->pid, s->offset, s->gen};
  return a;
}

}  // namespace rill

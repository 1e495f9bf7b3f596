// rill/connectors/kafka_ack.hpp — how a record read from Kafka is acknowledged, so that
// its input offset can be committed (at-least-once, DESIGN.md "Kafka").
//
// Defines (internals of kafka_source/kafka_sink; users only see record<T>::ack):
//   rill::kafka_detail::ack_entry     partition id, offset, assignment generation, failed
//   rill::kafka_detail::ack_inbox     acks pushed from any thread, drained by the split
//   rill::kafka_detail::offset_token  the rill::ack_token of one input message
//
// Example (a custom asynchronous sink that confirms later, from its own thread):
//   .sink([&](rill::record<row>&& r) {
//     my_async_write(r.value, [a = std::move(r.ack)](bool ok) mutable {
//       if (!ok && a) a->fail();   // not done: the offset is not committed past it
//       a.reset();                 // last holder gone = acknowledged
//     });
//   });
//
// Rule (ownership-based acknowledgement, see <rill/core/record.hpp>):
//   - a kafka_source reader gives each emitted record an offset_token (record.ack) and
//     registers the offset as open in the partition's tracker before emitting it.
//   - every record derived from it holds a copy of the token: through map, flat_map,
//     key_by exchanges, window_sort buffers (the window record holds an ack_group of its
//     records' tokens), enrich. A filter that drops the record destroys it.
//   - the token's destructor (last copy gone, on any thread) pushes {pid, offset, gen,
//     failed} to the split's inbox; the split drains it on its worker and marks the
//     offset done — or, when fail() was called, "failed": the partition's commit stops
//     below it for the rest of this run, and the message is redelivered after a restart.
//   - the source commits, per partition, the lowest offset not yet done (Kafka's "next
//     offset to read"): periodically, on revoke (synchronously) and on shutdown.
//   - acks of a revoked partition carry an old generation and are ignored: its new owner
//     reads from the committed offset (duplicates possible, losses not). Exception: an
//     eager rebalance that hands the partition straight back to the same split keeps the
//     generation, so those acks still count (kafka_source.hpp, "Eager rebalance").
//
// Thread safety: tokens are created on the split's worker and destroyed on any thread;
// ack_inbox push from any thread (one mutex), drain on the split's worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "rill/core/record.hpp"

namespace rill::kafka_detail {

/// One acknowledgement: partition id (see kafka_source.hpp), offset, assignment
/// generation, and whether a sink failed to deliver something derived from it.
struct ack_entry {
  std::int32_t pid;
  std::int64_t offset;
  std::uint32_t gen;
  bool failed;
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

/// The token of one input message. Destroyed on any thread: pushes its entry.
class offset_token final : public ack_token {
 public:
  offset_token(std::shared_ptr<ack_inbox> inbox, const ack_entry& e) : inbox_(std::move(inbox)), e_(e) {}
  ~offset_token() override {
    e_.failed = failed_.load(std::memory_order_relaxed);  // ordered by shared_ptr's release
    inbox_->push(e_);
  }
  void fail() noexcept override { failed_.store(true, std::memory_order_relaxed); }

 private:
  std::shared_ptr<ack_inbox> inbox_;
  ack_entry e_;
  std::atomic<bool> failed_{false};
};

}  // namespace rill::kafka_detail

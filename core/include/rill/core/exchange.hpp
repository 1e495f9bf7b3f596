// rill/core/exchange.hpp — moving records between workers: the bounded inbox and the
// keyed exchange behind `key_by`.
//
// Defines (internals of the DSL, in rill::detail: users write `.key_by(f)`):
//   rill::detail::bounded_inbox<T>  a bounded multi-producer single-consumer FIFO of batches
//   rill::detail::envelope<T>       a record, progress or end marker crossing an exchange
//   rill::detail::exchange<T>       routes records to the worker owning hash(key) % workers
//                                   and broadcasts progress/end markers, with backpressure
//
// Example (compiled by tests/banner_examples.py; what key_by builds, users write
// `.key_by(f)`):
//   rill::detail::exchange<int> ex{/*workers=*/2, /*batch_records=*/256, /*inbox_batches=*/64};
//   rill::stage_in<int>* stage_on_1 = nullptr;       // the stage after key_by on worker 1
//   ex.bind_consumer(1, [](std::function<void()> drain) { /* post to worker 1's loop */ },
//                    stage_on_1, /*inputs=*/2);      // build time, before the run
//   rill::detail::envelope<int> e;                            // producer side, on worker 0:
//   e.rec = rill::record<int>{7, rill::event_time{1s}};
//   ex.push(0, /*to=*/1, std::move(e));
//   if (!ex.flush(0)) { /* worker 1's inbox is full: retry on a timer */ }
//   // consumer side, on worker 1, from the posted wake-up: ex.drain(1)
//
// Backpressure: an inbox holds at most inbox_batches * batch_records envelopes (records
// and markers), in at most max(inbox_batches, workers) batches (rounded up to a power of
// two): room for one batch from every producer, so that the markers every producer
// broadcasts (progress, end of stream: one small batch per producer and consumer) pass in
// one round instead of workers / inbox_batches rounds of retries. An empty inbox takes a
// batch of any size. When a destination's inbox is full, flush() returns false and keeps
// the batch; the source on that worker stops reading and retries on a timer (no thread
// blocks), while the worker keeps draining its own inbox — so two workers full towards
// each other still make progress. Within one operator call, ready(from) is false from the
// moment a full batch could not be sent until it is: an emitter that can stop (flat_map)
// stops there, so a pending batch holds at most batch_records plus what callers that
// cannot stop push (docs/design.md "Bounded emission"). A drain stops before the next
// batch while its consumer stage is not ready, and tries again after `retry` (a timer,
// bind_consumer).
//
// Ordering: per (producer worker, consumer worker) FIFO; records and markers of one input
// arrive in the order that input produced them. Nothing across producers.
//
// Same worker: an envelope a worker routes to itself is handed to its consumer stage at
// once, inside push() (no batch, no queue, no wake-up): the record is processed while it
// is still in the cache, and one worker's key_by costs no hand-off at all. flush() then
// flushes that consumer stage, as a drain does after each batch.
//
// Each destination's inbox is one rill::mpmc_ring of batches (the per-node rings of
// rill::numa_ring are for work that any worker of a node may take: see rebalance.hpp).
//
// Batch buffers circulate: a drained batch, emptied but with its capacity, goes back to
// its destination's ring of spares, and a producer that starts a batch with a record takes
// its buffer from there. A batch started by a marker grows from nothing (a broadcast does
// not take `workers` buffers of batch_records each), and one that never reached
// batch_records is freed after its drain. A producer holds a buffer only for a destination
// it has envelopes for. No batch buffer is freed on the consumer's thread after the first
// round trip, and none is allocated per batch: a 256-record batch is tens of KiB, and
// glibc's free() of a chunk that large from a thread other than its allocator's takes
// the allocating arena's lock and consolidates that arena's fastbins, once per batch
// (bench/RESULTS.md "NEXMark with 2 workers"). Buffers alive per destination: at most the
// batches in flight at once (inbox plus one pending per producer), kept until the exchange
// is destroyed.
//
// Cost: flush() is O(destinations with pending envelopes), not O(workers); broadcast() is
// O(workers). Memory per exchange: O(workers^2) small per-pair state (a pending batch
// header, a frontier per consumer input), plus each inbox's ring of
// max(inbox_batches, workers) 64-byte slots and the buffers in flight.
//
// Thread safety: push()/flush() on producer worker `from` only; drain() on consumer worker
// `to` only; wake-ups are posted to the consumer's io_context.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "rill/core/numa_ring.hpp"
#include "rill/core/record.hpp"
#include "rill/core/stage.hpp"

namespace rill::detail {

/// Bounded FIFO of batches between workers: a rill::mpmc_ring (lock-free, cache-line
/// slots, see <rill/core/numa_ring.hpp>). try_push never blocks (false when full, value
/// untouched); try_pop never blocks (false when empty).
template <class T>
class bounded_inbox {
 public:
  explicit bounded_inbox(std::size_t capacity) : ring_(capacity) {}
  bool try_push(T&& v) noexcept { return ring_.try_push(std::move(v)); }
  bool try_pop(T& out) noexcept { return ring_.try_pop(out); }
  /// Stale snapshot.
  bool was_empty() const noexcept { return ring_.was_empty(); }
  /// Batches queued: a stale snapshot (any thread).
  std::size_t was_size() const noexcept { return ring_.was_size(); }

 private:
  mpmc_ring<T> ring_;
};

/// One item crossing an exchange: a record, a progress marker or an end marker, tagged
/// with the consumer-side input number and the input's frontier at the time it was sent.
template <class T, class P = acked>
struct envelope {
  enum class kind : std::uint8_t { record, progress, end };
  kind k = kind::record;
  std::uint32_t input = 0;
  event_time frontier = event_time_min;
  std::optional<rill::record<T, P>> rec;
};

template <class T, class P = acked>
class exchange {
 public:
  using item = envelope<T, P>;
  using batch = std::vector<item>;

  /// `workers` producers and consumers; batches of `batch_records` (>= 1) records; each
  /// inbox holds at most inbox_batches * batch_records envelopes (see the banner).
  exchange(std::size_t workers, std::size_t batch_records, std::size_t inbox_batches)
      : workers_(workers), batch_records_(batch_records), inbox_envelopes_(inbox_batches * batch_records),
        out_(workers), in_(workers) {
    for (auto& o : out_) {
      o.pending.resize(workers);
      o.state.assign(workers, 0);
    }
    for (auto& i : in_) {
      i.inbox = std::make_unique<bounded_inbox<batch>>(std::max(inbox_batches, workers));
      i.spares = std::make_unique<bounded_inbox<batch>>(inbox_batches);
    }
  }

  /// Consumer wiring (build time): how to wake worker `to` (post to its loop), the
  /// downstream stage its drain feeds, and how to run a drain later on worker `to` when
  /// that stage is not ready (`retry`: a timer on its loop; empty = `post`). At most one
  /// drain of a consumer is scheduled at a time, so `retry` may use one timer.
  void bind_consumer(std::size_t to, std::function<void(std::function<void()>)> post,
                     stage_in<T, P>* downstream, std::size_t inputs,
                     std::function<void(std::function<void()>)> retry = {}) {
    auto& c = in_[to];
    c.retry = retry ? std::move(retry) : post;
    c.post = std::move(post);
    c.down = downstream;
    c.last_frontier.assign(inputs, event_time_min);
  }

  /// Producer side: queue one envelope for worker `to`. Sends the batch when it is full;
  /// a failed send stays pending (see flush()). `to == from`: delivered to the consumer
  /// stage at once (see the banner). Worker `from` only.
  void push(std::size_t from, std::size_t to, item&& e) {
    if (to == from) {
      auto& c = in_[to];
      deliver(c, std::move(e));
      c.delivered_in_place = true;
      return;
    }
    auto& p = out_[from];
    auto& b = p.pending[to];
    if (b.empty()) {
      if (!(p.state[to] & listed)) {
        p.state[to] |= listed;
        p.dirty.push_back(to);
      }
      if (e.k == item::kind::record && b.capacity() < batch_records_ && !in_[to].spares->try_pop(b))
        b.reserve(batch_records_);
    } else if (e.k == item::kind::progress && b.back().k == item::kind::progress && b.back().input == e.input) {
      b.back().frontier = std::max(b.back().frontier, e.frontier);  // supersedes the unsent one
      return;
    }
    b.push_back(std::move(e));
    if (b.size() >= batch_records_) send(from, to);
  }
  /// Whether worker `from` may push without growing a batch past batch_records: no full
  /// batch of it waits for room in an inbox, and the consumer stage on `from` itself
  /// (which push delivers to in place) is ready. Worker `from` only; never blocks.
  bool ready(std::size_t from) {
    return out_[from].stuck == 0 && (!in_[from].down || in_[from].down->ready());
  }
  /// Queue an envelope for every consumer (markers).
  void broadcast(std::size_t from, const item& e) {
    for (std::size_t to = 0; to < workers_; ++to) push(from, to, item{e});
  }
  /// Batches waiting in worker `to`'s inbox: a stale snapshot, any thread (metrics).
  std::size_t inbox_depth(std::size_t to) const noexcept { return in_[to].inbox->was_size(); }
  /// Sends every pending batch of worker `from`, and flushes worker `from`'s own consumer
  /// stage when envelopes were delivered to it in place. Returns false if some inbox (or
  /// that stage) was full (call again later).
  bool flush(std::size_t from) {
    bool all = true;
    auto& p = out_[from];
    std::size_t kept = 0;
    for (const std::size_t to : p.dirty) {
      if (!p.pending[to].empty() && !send(from, to)) {
        all = false;
        p.dirty[kept++] = to;
      } else {
        p.state[to] &= ~listed;
      }
    }
    p.dirty.resize(kept);
    auto& self = in_[from];
    if (self.delivered_in_place) {
      if (self.down->on_flush()) self.delivered_in_place = false;
      else all = false;
    }
    return all;
  }

  /// What drain() stopped at.
  enum class drained : std::uint8_t {
    empty,    ///< inbox found empty: the consumer is marked asleep, the next send wakes it
    more,     ///< max_batches processed, work left: drain again (re-post)
    blocked,  ///< the consumer stage is not ready (stage_in::ready): drain again later
  };
  /// Consumer side, on worker `to`: processes up to `max_batches` batches, each only
  /// while the consumer stage is ready.
  drained drain(std::size_t to, std::size_t max_batches = 16) {
    auto& c = in_[to];
    batch b;
    for (std::size_t n = 0; n < max_batches; ++n) {
      if (!c.down->ready()) {
        c.down->on_flush();
        return drained::blocked;
      }
      if (!c.inbox->try_pop(b)) {
        // Going to sleep without losing a wake-up (see `sleeping`): if send()'s exchange
        // precedes this one, this acquire makes its push visible to was_empty(); if it
        // follows, send() reads true and wakes this worker.
        c.sleeping.exchange(true, std::memory_order_acq_rel);
        if (c.inbox->was_empty()) return drained::empty;
        c.sleeping.exchange(false, std::memory_order_acq_rel);
        continue;
      }
      c.queued.fetch_sub(b.size(), std::memory_order_relaxed);
      for (auto& e : b) deliver(c, std::move(e));
      b.clear();
      // full, or a small marker batch: b keeps its buffer, freed by the next pop
      if (b.capacity() >= batch_records_) c.spares->try_push(std::move(b));
      c.down->on_flush();
    }
    return drained::more;
  }
  /// Schedules drains of worker `to` until its inbox is empty. Any thread.
  void wake(std::size_t to) { in_[to].post([this, to] { drain_on(to); }); }

 private:
  // producer::state bits per destination.
  static constexpr char full = 1;    // a full batch waits for room in its inbox
  static constexpr char listed = 2;  // the destination is in `dirty`
  struct producer {
    std::vector<batch> pending;
    std::vector<char> state;          // per destination: full | listed
    std::vector<std::size_t> dirty;   // destinations that may have pending envelopes
    std::size_t stuck = 0;            // destinations with `full` set
  };
  void drain_on(std::size_t to) {
    switch (drain(to)) {
      case drained::empty: return;
      case drained::more: return wake(to);
      case drained::blocked: return in_[to].retry([this, to] { drain_on(to); });
    }
  }
  struct alignas(64) consumer {
    std::unique_ptr<bounded_inbox<batch>> inbox;
    // Emptied batches with their capacity: pushed by this consumer's drain, popped by
    // the producers that send to it (see the banner).
    std::unique_ptr<bounded_inbox<batch>> spares;
    std::function<void(std::function<void()>)> post, retry;
    stage_in<T, P>* down = nullptr;
    std::vector<event_time> last_frontier;
    bool delivered_in_place = false;  // by push(to == from) since the last flush: worker `to` only
    // Envelopes in the inbox: added by a producer before its push (and taken back when
    // the push fails), subtracted by the drain that pops them. Only bounds the inbox: the
    // batches themselves pass through the ring.
    std::atomic<std::size_t> queued{0};
    // True while no drain of this consumer is scheduled. Every write is an acq_rel
    // exchange, so all writes form one release sequence: a consumer going to sleep
    // either synchronises with the last producer's push or that producer sees `true`
    // and wakes it. Read-modify-writes rather than std::atomic_thread_fence, which
    // ThreadSanitizer does not model.
    std::atomic<bool> sleeping{true};
  };

  bool send(std::size_t from, std::size_t to) {
    auto& p = out_[from];
    auto& b = p.pending[to];
    auto& c = in_[to];
    const std::size_t n = b.size();
    const std::size_t before = c.queued.fetch_add(n, std::memory_order_relaxed);
    if ((before != 0 && before + n > inbox_envelopes_) || !c.inbox->try_push(std::move(b))) {  // b untouched
      c.queued.fetch_sub(n, std::memory_order_relaxed);
      if (n >= batch_records_ && !(p.state[to] & full)) {
        p.state[to] |= full;
        ++p.stuck;
      }
      return false;
    }
    if (p.state[to] & full) {
      p.state[to] &= ~full;
      --p.stuck;
    }
    b = batch{};  // the next record takes a spare buffer (push)
    if (c.sleeping.exchange(false, std::memory_order_acq_rel)) wake(to);
    return true;
  }

  void deliver(consumer& c, item&& e) {
    const auto in = e.input;
    if (e.k != item::kind::end && e.frontier > c.last_frontier[in]) {
      c.last_frontier[in] = e.frontier;
      c.down->on_progress(in, e.frontier);
    }
    if (e.k == item::kind::record) {
      c.down->on_record(in, std::move(*e.rec));
    } else if (e.k == item::kind::end) {
      c.down->on_end(in);
    }
  }

  std::size_t workers_, batch_records_, inbox_envelopes_;
  std::vector<producer> out_;
  std::vector<consumer> in_;
};

}  // namespace rill::detail

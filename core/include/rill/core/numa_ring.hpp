// rill/core/numa_ring.hpp — bounded MPMC rings, one per NUMA node, with batched
// cross-node transfer (docs/design.md "NumaRing").
//
// Defines:
//   rill::retry_policy        what a push/pop does when it loses a CAS race: retry at once or back
//   off rill::mpmc_ring<T, R>     one bounded lock-free multi-producer multi-consumer ring
//   rill::numa_ring<T, R>     one mpmc_ring per NUMA node, used through per-worker endpoints
//
// Example (compiled by tests/banner_examples.py):
//   #include <rill/core/record.hpp>
//   rill::numa_ring<rill::record<int>> ring{/*nodes=*/2, /*capacity_per_node=*/1024,
//                                           /*batch=*/32};
//   auto ep = ring.make_endpoint(/*worker_id=*/0, /*node=*/0);  // once per worker
//   rill::record<int> r{42, rill::event_time{1s}};
//   if (!ep.try_push(std::move(r))) {
//     // every ring was full: reschedule on the loop (backpressure), keep r
//   }
//   rill::record<int> out;
//   if (ep.try_pop(out)) { /* from node 0's ring, or a batch taken from node 1 */ }
//   std::size_t moved = ep.counters().remote_push_items;  // per-endpoint, never shared
//
// Capacity. Both rings round the requested capacity up to a power of two (minimum 2);
// capacity() returns the rounded value. Memory is capacity * 64 bytes (one cache line per
// slot; 128 for an element over 56 bytes), allocated once in the constructor.
//
// Full / empty. try_push returns false when, at the instant it looked, every slot was
// claimed (the element is left untouched in the argument); try_pop returns false when
// every pushed element had already been claimed by a consumer. Neither waits for space or
// data; blocking waits belong to the event loop (docs/design.md "NumaRing"). The answers
// are exact with respect to the caller's own earlier operations: a thread that pushed one
// more element than it popped never sees "empty", and one that popped one more than it
// pushed never sees "full" (the guarantee boostorg/lockfree#119 reports missing from
// boost::lockfree::queue). A plain Vyukov ring cannot promise this: it reports "empty"
// when the oldest slot is claimed but not yet written.
//
// Hazard (as in atomic_queue): a claimed slot is written a few instructions after its
// ticket is taken. A consumer that has claimed that slot spins (then yields) until the
// producer finishes; if the producer is descheduled inside that window the consumer waits
// for it. The same holds for a producer reusing a slot whose consumer is mid-move. Nothing
// else ever waits. Formally the ring is therefore not lock-free, only non-blocking in the
// common sense: no call waits for space, data, a lock or a system call.
//
// FIFO. Within one mpmc_ring, elements leave in ticket order: two elements pushed by the
// same producer are popped in push order (by one consumer, or by several consumers in
// ticket order). Across the rings of a numa_ring there is no order: an element that moves
// to another node in a batch keeps its order only relative to the elements of the same
// batch.
//
// Memory ordering. Each slot carries a sequence number (Vyukov): seq == ticket means
// "free for the producer holding ticket", seq == ticket + 1 means "full for the consumer
// holding ticket". The producer stores the element then publishes seq with release; the
// consumer acquires seq before reading, and publishes the freed slot (seq += capacity) with
// release after moving out. That is the only data hand-off. head_ and tail_ (the ticket
// counters) use acquire loads and acq_rel CAS so that a thread observing another thread's
// pop also observes the push that preceded it; this makes the full/empty answers above
// exact. On x86 every one of these orderings costs nothing extra.
//
// Cache lines. Producers write only the head line, consumers only the tail line. A single
// push first reads its slot's seq (free means "not full") and a single pop reads its
// slot's seq (published means "not empty"), so in the common case each side touches its
// own counter line and the slot line only — the one line that must travel. Batches and
// the slow path consult a relaxed snapshot of the other side's counter kept on the own
// line (always a past value, so it can only under-estimate room or data); "full" and
// "empty" are answered only after re-reading the real counter with acquire.
//
// Thread safety: mpmc_ring — any number of threads may call every member concurrently,
// except the constructor and destructor. numa_ring — make_endpoint and the accessors are
// safe from any thread; an endpoint belongs to one worker thread at a time.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "rill/core/error.hpp"

namespace rill {

/// What a try_push/try_pop does after losing a compare-and-swap race on a ticket counter.
///   immediate — retry at once (the default: under heavy contention a retry that waits
///               loses throughput, docs/design.md "NumaRing"; bench/numa_ring_bench.cpp
///               compares the two, results in bench/RESULTS.md).
///   backoff   — spin 1, 2, 4 ... 64 pause instructions between attempts.
enum class retry_policy { immediate, backoff };

/// The cache line size used for alignment. Fixed at 64 (x86-64, most AArch64) instead of
/// std::hardware_destructive_interference_size, whose value g++ warns may change between
/// compiler versions and so must not shape a type in a public header.
inline constexpr std::size_t cache_line_bytes = 64;

namespace detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// Waits for a slot that a peer has claimed but not yet finished (the hazard in the file
/// comment): spin briefly, then yield so an oversubscribed machine lets the peer run.
template <class Pred>
inline void wait_for_slot(Pred ready) noexcept {
  for (unsigned spins = 0; !ready(); ++spins) {
    if (spins < 256) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

template <retry_policy R>
struct retry_pause {
  unsigned pauses_ = 1;
  void operator()() noexcept {
    if constexpr (R == retry_policy::backoff) {
      for (unsigned i = 0; i < pauses_; ++i) cpu_relax();
      if (pauses_ < 64) pauses_ *= 2;
    }
  }
};

/// One side's ticket counter and its snapshot of the other side's counter, alone on a
/// cache line: producers write only the head line, consumers only the tail line.
struct alignas(cache_line_bytes) ring_side {
  std::atomic<std::size_t> ticket{0};         // next ticket of this side
  std::atomic<std::size_t> peer_snapshot{0};  // a past value of the other side's ticket
};
static_assert(sizeof(ring_side) == cache_line_bytes,
              "head and tail must be a cache line apart to prevent false sharing");

}  // namespace detail

/// A bounded MPMC ring of T (docs/design.md "NumaRing"; tickets as in atomic_queue, per-slot
/// sequence numbers as in D. Vyukov's bounded MPMC queue, cache-line slots as in rigtorp's
/// MPMCQueue).
///
/// Requirements on T: nothrow move construction, nothrow move assignment (try_pop moves
/// into an existing T) and nothrow destruction; the data path is noexcept.
/// Thread Safety: Distinct objects: Safe. Shared objects: Safe for every member except
/// construction and destruction.
template <class T, retry_policy Retry = retry_policy::immediate>
class mpmc_ring {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "T must be nothrow move constructible: a throw after claiming a ticket would "
                "leave a hole that blocks the ring forever");
  static_assert(std::is_nothrow_move_assignable_v<T>,
                "T must be nothrow move assignable: try_pop moves into the caller's T");
  static_assert(std::is_nothrow_destructible_v<T>, "T must be nothrow destructible");

  struct alignas(cache_line_bytes) slot {
    std::atomic<std::size_t> seq;
    alignas(T) unsigned char storage[sizeof(T)];
    T* get() noexcept { return std::launder(reinterpret_cast<T*>(storage)); }
  };
  static_assert(alignof(slot) == cache_line_bytes && sizeof(slot) % cache_line_bytes == 0,
                "slots must be whole cache lines so neighbouring slots never false-share");

 public:
  using value_type = T;
  static constexpr retry_policy retry = Retry;

  /// Builds an empty ring with room for bit_ceil(max(capacity, 2)) elements.
  /// Any thread. Allocates; throws config_error (key mpmc_ring.capacity) if capacity is 0 or above
  /// 2^40, std::bad_alloc if memory runs out.
  explicit mpmc_ring(std::size_t capacity) : mask_(rounded(capacity) - 1) {
    slots_ = static_cast<slot*>(
        ::operator new (sizeof(slot) * (mask_ + 1), std::align_val_t{alignof(slot)}));
    for (std::size_t i = 0; i <= mask_; ++i) {
      ::new (static_cast<void*>(&slots_[i])) slot;
      slots_[i].seq.store(i, std::memory_order_relaxed);
    }
  }

  mpmc_ring(const mpmc_ring&) = delete;
  mpmc_ring& operator=(const mpmc_ring&) = delete;

  /// Destroys the elements still inside. No other thread may be using the ring.
  ~mpmc_ring() {
    const std::size_t head = head_.ticket.load(std::memory_order_acquire);
    for (std::size_t t = tail_.ticket.load(std::memory_order_acquire); t != head; ++t) {
      slots_[t & mask_].get()->~T();
    }
    for (std::size_t i = 0; i <= mask_; ++i) slots_[i].~slot();
    ::operator delete (slots_, std::align_val_t{alignof(slot)});
  }

  /// Pushes one element by move. Producer side; any thread. Never waits for space.
  /// Returns false (value untouched) if the ring was full when looked at.
  bool try_push(T&& value) noexcept {
    return try_push_generate(1, [&](std::size_t) -> T&& { return std::move(value); }) == 1;
  }

  /// Pops the oldest element into `out` by move assignment. Consumer side; any thread.
  /// Never waits for data. Returns false (out untouched) if the ring was empty.
  bool try_pop(T& out) noexcept {
    return try_pop_consume(1, [&](std::size_t, T&& v) { out = std::move(v); }) == 1;
  }

  /// Moves items[0..k) into the ring as one contiguous run of tickets, k = min(size, free
  /// slots); returns k. The k elements are consecutive in the ring (no other producer's
  /// element in between). Producer side; any thread; never waits for space. Elements not
  /// taken (items[k..]) are untouched.
  std::size_t try_push_batch(std::span<T> items) noexcept {
    return try_push_generate(items.size(),
                             [&](std::size_t i) -> T&& { return std::move(items[i]); });
  }

  /// Move-assigns up to out.size() oldest elements into out[0..k) and returns k.
  /// Consumer side; any thread; never waits for data.
  std::size_t try_pop_batch(std::span<T> out) noexcept {
    return try_pop_consume(out.size(), [&](std::size_t i, T&& v) { out[i] = std::move(v); });
  }

  /// Claims k = min(max, free slots) tickets at once and constructs slot i from gen(i)
  /// (gen returns T, T&& or anything T is nothrow-constructible from); returns k.
  /// Producer side; any thread. gen must not throw and must not touch this ring.
  template <class Gen>
  std::size_t try_push_generate(std::size_t max, Gen&& gen) noexcept {
    if (max == 0) return 0;
    detail::retry_pause<Retry> pause;
    std::size_t head = head_.ticket.load(std::memory_order_acquire);
    std::size_t n;
    for (;;) {
      if (max == 1 && slots_[head & mask_].seq.load(std::memory_order_acquire) == head) {
        n = 1;  // fast path: the slot is free, so the ring is not full; tail is not read
      } else {
        // Free slots per the producers' snapshot of tail (a lower bound of the real tail);
        // only when that says "full" is the consumers' line read.
        std::size_t tail = head_.peer_snapshot.load(std::memory_order_relaxed);
        auto free = static_cast<std::ptrdiff_t>(mask_ + 1 - (head - tail));
        if (free <= 0) {
          tail = tail_.ticket.load(std::memory_order_acquire);
          head_.peer_snapshot.store(tail, std::memory_order_relaxed);
          // Signed: a stale head can be behind tail; the CAS below then fails and reloads.
          free = static_cast<std::ptrdiff_t>(mask_ + 1) - static_cast<std::ptrdiff_t>(head - tail);
          if (free <= 0) return 0;
        }
        n = std::min(max, static_cast<std::size_t>(free));
      }
      if (head_.ticket.compare_exchange_weak(head, head + n, std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
        break;
      }
      pause();
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t ticket = head + i;
      slot& s = slots_[ticket & mask_];
      detail::wait_for_slot([&] { return s.seq.load(std::memory_order_acquire) == ticket; });
      ::new (static_cast<void*>(s.storage)) T(gen(i));
      s.seq.store(ticket + 1, std::memory_order_release);
    }
    return n;
  }

  /// Claims k = min(max, elements present) tickets at once and calls sink(i, T&&) for each
  /// element in ticket order, then destroys it; returns k. Consumer side; any thread.
  /// sink must not throw and must not touch this ring.
  template <class Sink>
  std::size_t try_pop_consume(std::size_t max, Sink&& sink) noexcept {
    if (max == 0) return 0;
    detail::retry_pause<Retry> pause;
    std::size_t tail = tail_.ticket.load(std::memory_order_acquire);
    std::size_t n;
    for (;;) {
      if (max == 1 && slots_[tail & mask_].seq.load(std::memory_order_acquire) == tail + 1) {
        n = 1;  // fast path: the slot is published, so the ring is not empty; head not read
      } else {
        std::size_t head = tail_.peer_snapshot.load(std::memory_order_relaxed);
        auto avail = static_cast<std::ptrdiff_t>(head - tail);
        if (avail <= 0) {
          head = head_.ticket.load(std::memory_order_acquire);
          tail_.peer_snapshot.store(head, std::memory_order_relaxed);
          avail = static_cast<std::ptrdiff_t>(head - tail);
          if (avail <= 0) return 0;
        }
        n = std::min(max, static_cast<std::size_t>(avail));
      }
      if (tail_.ticket.compare_exchange_weak(tail, tail + n, std::memory_order_acq_rel,
                                             std::memory_order_acquire)) {
        break;
      }
      pause();
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t ticket = tail + i;
      slot& s = slots_[ticket & mask_];
      detail::wait_for_slot([&] { return s.seq.load(std::memory_order_acquire) == ticket + 1; });
      T* p = s.get();
      sink(i, std::move(*p));
      p->~T();
      s.seq.store(ticket + mask_ + 1, std::memory_order_release);
    }
    return n;
  }

  /// Number of elements claimed by producers and not yet claimed by consumers, at some
  /// instant during the call (a stale snapshot, clamped to [0, capacity()]). Any thread.
  std::size_t was_size() const noexcept {
    const std::size_t tail = tail_.ticket.load(std::memory_order_acquire);
    const std::size_t head = head_.ticket.load(std::memory_order_acquire);
    const auto n = static_cast<std::ptrdiff_t>(head - tail);
    return n <= 0 ? 0 : std::min(static_cast<std::size_t>(n), capacity());
  }
  /// Stale snapshots (was_size() == 0 / == capacity()): true at some instant during the
  /// call, maybe no longer. Any thread.
  bool was_empty() const noexcept { return was_size() == 0; }
  bool was_full() const noexcept { return was_size() == capacity(); }

  /// The rounded capacity (a power of two). Any thread.
  std::size_t capacity() const noexcept { return mask_ + 1; }

 private:
  static std::size_t rounded(std::size_t capacity) {
    if (capacity == 0 || capacity > (std::size_t{1} << 40)) {
      throw config_error("mpmc_ring.capacity", "mpmc_ring.capacity must be in [1, 2^40], got " +
                                                   std::to_string(capacity));
    }
    return std::bit_ceil(std::max<std::size_t>(capacity, 2));
  }

  detail::ring_side head_;  // producers: next push ticket + snapshot of tail
  detail::ring_side tail_;  // consumers: next pop ticket + snapshot of head
  // Read-only after construction; on its own line so counter traffic never evicts it.
  alignas(cache_line_bytes) std::size_t mask_;
  slot* slots_ = nullptr;
};

/// Per-endpoint counters (owned by one worker; plain integers, never shared).
struct numa_ring_counters {
  std::size_t local_push = 0;           // elements pushed into the endpoint's own node ring
  std::size_t local_pop = 0;            // elements popped from the own node ring
  std::size_t remote_push_batches = 0;  // batch transfers into another node's ring
  std::size_t remote_push_items = 0;    // elements moved by those transfers
  std::size_t remote_pop_batches = 0;   // batches taken from another node's ring
  std::size_t remote_pop_items = 0;     // elements taken by those batches
  std::size_t carried = 0;              // elements parked in the endpoint (all rings full)
};

/// One mpmc_ring per NUMA node; workers use it through endpoints (docs/design.md
/// "NumaRing").
///
/// The node of a worker is given once, to make_endpoint, and cached in the endpoint: a
/// per-operation node lookup costs more than the move itself. Batch transfers use the
/// endpoint's private cursor and counters, never a shared counter, which would make every
/// transfer contend on one cache line. Ring memory is first-touch: construct the numa_ring
/// where the runtime wants it, or bind it afterwards; the queue does not call hwloc. Thread
/// Safety: the numa_ring is safe to share; an endpoint is used by one thread at a time. The
/// numa_ring must outlive its endpoints.
template <class T, retry_policy Retry = retry_policy::immediate>
class numa_ring {
 public:
  using ring_type = mpmc_ring<T, Retry>;

  /// `nodes` rings of bit_ceil(capacity_per_node) each; transfers move up to `batch`
  /// elements. Throws config_error (key numa_ring.nodes / numa_ring.batch /
  /// mpmc_ring.capacity) if nodes == 0, batch == 0, batch > the rounded capacity or the
  /// capacity is invalid; std::bad_alloc if memory runs out. Any thread.
  numa_ring(std::size_t nodes, std::size_t capacity_per_node, std::size_t batch) : batch_(batch) {
    if (nodes == 0) throw config_error("numa_ring.nodes", "numa_ring.nodes must be >= 1");
    rings_.reserve(nodes);
    for (std::size_t i = 0; i < nodes; ++i) {
      rings_.push_back(std::make_unique<ring_type>(capacity_per_node));
    }
    if (batch == 0 || batch > rings_[0]->capacity()) {
      throw config_error(
          "numa_ring.batch",
          "numa_ring.batch must be in [1, capacity_per_node], got " + std::to_string(batch));
    }
  }

  class endpoint;

  /// The handle of worker `worker_id` on NUMA node `node` (the node is cached: it is looked
  /// up once, here, never per operation). Any thread; allocates a private buffer of `batch`
  /// elements. Throws config_error (key numa_ring.node) if node >= nodes().
  endpoint make_endpoint(std::size_t worker_id, std::size_t node) {
    if (node >= rings_.size()) {
      throw config_error("numa_ring.node", "numa_ring.node " + std::to_string(node) +
                                               " must be < nodes " + std::to_string(rings_.size()));
    }
    return endpoint(*this, worker_id, node);
  }

  /// Number of node rings, transfer batch size, rounded capacity of each ring. Any
  /// thread (fixed at construction).
  std::size_t nodes() const noexcept { return rings_.size(); }
  std::size_t batch() const noexcept { return batch_; }
  std::size_t capacity_per_node() const noexcept { return rings_[0]->capacity(); }
  /// Direct access to one node's ring (tests, metrics, draining at shutdown). Any thread.
  ring_type& ring(std::size_t node) noexcept { return *rings_[node]; }
  /// Sum of the rings' stale sizes (excludes elements carried by endpoints). Any thread.
  std::size_t was_size() const noexcept {
    std::size_t n = 0;
    for (const auto& r : rings_) n += r->was_size();
    return n;
  }

 private:
  std::vector<std::unique_ptr<ring_type>> rings_;
  std::size_t batch_;
};

/// A worker's handle on a numa_ring. Movable, not copyable; one thread at a time.
template <class T, retry_policy Retry>
class numa_ring<T, Retry>::endpoint {
 public:
  /// Moves the handle (counters, carried elements); the source becomes empty and unusable.
  endpoint(endpoint&& o) noexcept
      : owner_(std::exchange(o.owner_, nullptr)),
        local_(o.local_),
        worker_id_(o.worker_id_),
        node_(o.node_),
        cursor_(o.cursor_),
        counters_(o.counters_),
        buf_(std::move(o.buf_)),
        carry_(std::move(o.carry_)) {}
  /// Flushes this endpoint's carried elements (as the destructor does), then takes o's.
  endpoint& operator=(endpoint&& o) noexcept {
    if (this != &o) {
      if (owner_ != nullptr) flush();
      owner_ = std::exchange(o.owner_, nullptr);
      local_ = o.local_;
      worker_id_ = o.worker_id_;
      node_ = o.node_;
      cursor_ = o.cursor_;
      counters_ = o.counters_;
      buf_ = std::move(o.buf_);
      carry_ = std::move(o.carry_);
    }
    return *this;
  }

  /// Tries to put everything this endpoint carries back into a ring; what still cannot be
  /// placed (every ring full) is destroyed. Call flush() first when that matters.
  ~endpoint() {
    if (owner_ != nullptr) flush();
  }

  /// Pushes `value`. The worker's thread only. Never blocks; noexcept.
  ///  1. Into the own node's ring (counters().local_push).
  ///  2. If that is full: one transfer of the oldest batch()-1 elements of the own ring
  ///     plus `value` into the next other node's ring with room (round robin from this
  ///     endpoint's private cursor; counters().remote_push_batches/_items). The own ring
  ///     then has batch()-1 free slots, so the next pushes are local again.
  ///  3. Returns false (value untouched) only if no ring had room for `value`: the
  ///     caller applies backpressure. Elements taken from the own ring that no ring can
  ///     take back stay carried by this endpoint (counters().carried) and are returned by
  ///     its next try_pop or placed by its next try_push/flush — never dropped. While
  ///     anything is carried and no ring can take it, try_push returns false at once.
  /// FIFO: the moved batch keeps its internal order; it loses order relative to every
  /// element it did not move with (see the file comment).
  bool try_push(T&& value) noexcept {
    if (!carry_.empty() && !flush()) return false;  // every ring full: keeps carry_ <= batch
    if (local_->try_push(std::move(value))) {
      ++counters_.local_push;
      return true;
    }
    return spill(std::move(value));
  }

  /// Pops into `out`. The worker's thread only. Never blocks; noexcept.
  ///  1. An element this endpoint carries, if any.
  ///  2. The own node's ring (counters().local_pop).
  ///  3. If that is empty: one batch of up to batch() elements from the next other node
  ///     with data (round robin, private cursor; counters().remote_pop_batches/_items).
  ///     The first goes to `out`, the rest into the own ring for the node's workers.
  ///  Returns false if every ring was empty when looked at.
  bool try_pop(T& out) noexcept {
    if (!carry_.empty()) {
      out = std::move(carry_.back());
      carry_.pop_back();
      return true;
    }
    if (local_->try_pop(out)) {
      ++counters_.local_pop;
      return true;
    }
    return steal(out);
  }

  /// Places carried elements into the own ring, else any ring. Returns true when nothing
  /// is carried any more. The worker's thread only; never blocks.
  bool flush() noexcept {
    for (std::size_t k = 0; k < owner_->nodes() && !carry_.empty(); ++k) {
      auto& ring = owner_->ring((node_ + k) % owner_->nodes());
      const std::size_t n = carry_.size();
      const std::size_t moved = ring.try_push_generate(
          n, [&](std::size_t i) -> T&& { return std::move(carry_[n - 1 - i]); });
      carry_.resize(n - moved);
    }
    return carry_.empty();
  }

  /// The node and worker given to make_endpoint. Owning thread.
  std::size_t node() const noexcept { return node_; }
  std::size_t worker_id() const noexcept { return worker_id_; }
  /// Elements currently held by this endpoint because every ring was full.
  std::size_t carried() const noexcept { return carry_.size(); }
  /// This endpoint's transfer counters (plain integers, never shared). Owning thread.
  const numa_ring_counters& counters() const noexcept { return counters_; }

 private:
  friend class numa_ring;
  endpoint(numa_ring& owner, std::size_t worker_id, std::size_t node)
      : owner_(&owner),
        local_(&owner.ring(node)),
        worker_id_(worker_id),
        node_(node),
        cursor_(worker_id) {
    buf_.reserve(owner.batch());
    carry_.reserve(owner.batch());
  }

  // The k-th other node in this endpoint's round robin (k = 1 .. nodes-1).
  std::size_t victim(std::size_t k) const noexcept {
    const std::size_t others = owner_->nodes() - 1;
    return (node_ + 1 + (cursor_ + k) % others) % owner_->nodes();
  }

  bool spill(T&& value) noexcept {
    if (owner_->nodes() == 1) return false;
    buf_.clear();
    local_->try_pop_consume(owner_->batch() - 1,
                            [&](std::size_t, T&& v) { buf_.push_back(std::move(v)); });
    buf_.push_back(std::move(value));  // last: the first to be refused
    std::size_t placed = 0;
    for (std::size_t k = 0; k + 1 < owner_->nodes() && placed < buf_.size(); ++k) {
      const std::size_t moved = owner_->ring(victim(k)).try_push_generate(
          buf_.size() - placed, [&](std::size_t i) -> T&& { return std::move(buf_[placed + i]); });
      if (moved != 0) {
        ++counters_.remote_push_batches;
        counters_.remote_push_items += moved;
        cursor_ += k;  // start at the node that had room next time
      }
      placed += moved;
    }
    if (placed == buf_.size()) return true;
    value = std::move(buf_.back());  // refused: hand it back to the caller
    buf_.pop_back();
    // Elements taken from the own ring that found no other ring: back home, else carried.
    const std::size_t back = local_->try_push_generate(
        buf_.size() - placed, [&](std::size_t i) -> T&& { return std::move(buf_[placed + i]); });
    for (std::size_t i = placed + back; i < buf_.size(); ++i) {
      carry_.push_back(std::move(buf_[i]));
      ++counters_.carried;
    }
    buf_.clear();
    return false;
  }

  bool steal(T& out) noexcept {
    for (std::size_t k = 0; k + 1 < owner_->nodes(); ++k) {
      buf_.clear();
      const std::size_t got = owner_->ring(victim(k)).try_pop_consume(
          owner_->batch(), [&](std::size_t, T&& v) { buf_.push_back(std::move(v)); });
      if (got == 0) continue;
      ++counters_.remote_pop_batches;
      counters_.remote_pop_items += got;
      cursor_ += k;
      out = std::move(buf_[0]);
      const std::size_t rest = got - 1;
      const std::size_t back = local_->try_push_generate(
          rest, [&](std::size_t i) -> T&& { return std::move(buf_[1 + i]); });
      for (std::size_t i = 1 + back; i < got; ++i) {
        carry_.push_back(std::move(buf_[i]));
        ++counters_.carried;
      }
      buf_.clear();
      return true;
    }
    return false;
  }

  numa_ring* owner_;
  ring_type* local_;  // cached: the node is never looked up per operation
  std::size_t worker_id_;
  std::size_t node_;
  std::size_t cursor_;  // private round-robin ticket for transfers (no shared counter)
  numa_ring_counters counters_;
  std::vector<T> buf_;    // transfer buffer, capacity batch()
  std::vector<T> carry_;  // elements no ring could take
};

}  // namespace rill

// rill/connectors/detail/kafka_ack.hpp — internal to rill::kafka, not installed: how a
// record read from Kafka is acknowledged, so that its input offset can be committed
// (at-least-once; README, "Kafka"). Included by connectors/src/kafka_source.cpp and its
// test only; users see record<T>::ack (<rill/core/record.hpp>).
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
//   - when the last copy is gone (on any thread) the token's memory block goes back to
//     the split's inbox with {pid, offset, gen, failed}; the split drains it on its worker
//     and marks the offset done — or, when fail() was called, "failed": the partition's
//     commit stops below it for the rest of this run, and the message is redelivered
//     after a restart.
//   - the source commits, per partition, the lowest offset not yet done (Kafka's "next
//     offset to read"): periodically, on revoke (synchronously) and on shutdown.
//   - acks of a revoked partition carry an old generation and are ignored: its new owner
//     reads from the committed offset (duplicates possible, losses not). Exception: an
//     eager rebalance that hands the partition straight back to the same split keeps the
//     generation, so those acks still count (kafka_source.hpp, "Eager rebalance").
//
// Cost per record (the consume -> produce path, bench/RESULTS.md "kafka"): no heap
// allocation and no lock. A token and its shared_ptr control block live in one slot of
// the split's pool (allocate_shared with ack_inbox's allocator); releasing the last copy
// pushes the slot, which carries the ack, onto the inbox's lock-free stack (one CAS);
// the split's drain takes the whole stack with one exchange and reuses the slots.
//
// Thread safety: tokens are created on the split's worker and destroyed on any thread;
// ack_inbox::make_token and drain on the split's worker only; the slot return (the
// token's deallocation) from any thread, lock-free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
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

class ack_inbox;

/// The token of one input message: a view of its pool slot. fail() marks the slot; the
/// ack itself happens when the slot is deallocated (the last shared_ptr copy is gone).
class offset_token;

namespace detail {
struct ack_owner_release {
  void operator()(ack_inbox* p) const noexcept;
};
}  // namespace detail

/// Acks for one source split, and the pool its tokens are allocated from.
///
/// Owned by the split through ack_inbox::owner (unique, released on the split's
/// destruction); each live token's slot also keeps the inbox alive, so a token that
/// outlives its split (a sink still holding it) returns its slot safely, and the last one
/// frees the inbox. Memory: slots come in slabs of slab_slots and are reused, never
/// returned to the heap before the inbox dies: the high-water mark of tokens alive at
/// once (records in flight between the source and the sink's delivery reports) times
/// sizeof(slot) (about 112 bytes).
///
/// Thread safety: make_token() and drain() on the owning split's worker only (not
/// concurrently with each other); the slot return (a token's deallocation) from any
/// thread, lock-free (one CAS on the inbox stack, one atomic decrement).
class ack_inbox {
 public:
  using owner = std::unique_ptr<ack_inbox, detail::ack_owner_release>;
  /// Storage for one shared_ptr control block holding an offset_token (libstdc++ and
  /// libc++ need 40 bytes); checked by a static_assert in the allocator.
  static constexpr std::size_t slot_bytes = 64;
  static constexpr std::size_t slab_slots = 256;
  /// References to the inbox the owner takes per atomic increment (one per live slot).
  static constexpr std::size_t ref_batch = 1024;

  struct slot {
    alignas(std::max_align_t) unsigned char storage[slot_bytes];  ///< the control block
    ack_entry entry;
    std::atomic<bool> failed;
    slot* next;  ///< free list (owner) or inbox stack (any thread)
  };
  static_assert(std::is_standard_layout_v<slot>, "slot_of() casts storage back to its slot");

  /// A new inbox with its owner's reference.
  static owner make() { return owner(new ack_inbox()); }

  /// The token for `e` (e.failed is ignored): its control block and the token live in
  /// one pool slot. Owning worker only. Allocates a slab only when no slot is free.
  std::shared_ptr<ack_token> make_token(const ack_entry& e);

  /// Moves every pending ack into `out` (cleared first), oldest return first (the order
  /// the slots came back in, across threads: no stronger guarantee), and takes their
  /// slots back for reuse. Owning worker only; never blocks.
  void drain(std::vector<ack_entry>& out) {
    out.clear();
    slot* top = done_.exchange(nullptr, std::memory_order_acquire);
    slot* s = nullptr;  // the stack reversed: oldest first
    while (top) {
      slot* n = top->next;
      top->next = s;
      s = top;
      top = n;
    }
    while (s) {
      slot* n = s->next;
      ack_entry a = s->entry;
      a.failed = s->failed.load(std::memory_order_relaxed);
      out.push_back(a);
      s->next = free_;
      free_ = s;
      s = n;
    }
  }

  /// The allocator of allocate_shared<offset_token>: hands out the slot make_token
  /// prepared; deallocate (any thread) pushes the slot, with its ack, onto the inbox.
  template <class T>
  struct allocator {
    using value_type = T;
    ack_inbox* in;
    explicit allocator(ack_inbox* i) noexcept : in(i) {}
    template <class U>
    allocator(const allocator<U>& o) noexcept : in(o.in) {}
    T* allocate(std::size_t n) {
      static_assert(sizeof(T) <= slot_bytes && alignof(T) <= alignof(std::max_align_t),
                    "a shared_ptr control block with an offset_token must fit in one slot: raise slot_bytes");
      if (n != 1 || !in->prepared_) throw std::bad_alloc();
      slot* s = in->prepared_;
      in->prepared_ = nullptr;
      return reinterpret_cast<T*>(s->storage);
    }
    void deallocate(T* p, std::size_t) noexcept { in->returned(reinterpret_cast<slot*>(p)); }
    template <class U>
    bool operator==(const allocator<U>& o) const noexcept { return in == o.in; }
  };

 private:
  friend struct detail::ack_owner_release;
  ack_inbox() = default;
  ~ack_inbox() = default;

  /// A token's slot is free again (any thread): push it with its ack, drop its reference.
  void returned(slot* s) noexcept {
    slot* h = done_.load(std::memory_order_relaxed);
    do {
      s->next = h;
    } while (!done_.compare_exchange_weak(h, s, std::memory_order_release, std::memory_order_relaxed));
    unref(1);
  }
  void unref(std::size_t n) noexcept {
    if (refs_.fetch_sub(n, std::memory_order_acq_rel) == n) delete this;
  }
  void release_owner() noexcept { unref(1 + reserve_); }

  alignas(64) std::atomic<slot*> done_{nullptr};  ///< returned slots: any thread pushes
  alignas(64) std::atomic<std::size_t> refs_{1};  ///< owner + reserve_ + slots in use
  // ---- owning worker only ----
  alignas(64) slot* free_ = nullptr;
  slot* prepared_ = nullptr;  ///< the slot the next allocate() returns
  std::size_t reserve_ = 0;   ///< references taken in advance for future slots
  std::vector<std::unique_ptr<slot[]>> slabs_;
};

inline void detail::ack_owner_release::operator()(ack_inbox* p) const noexcept { p->release_owner(); }

class offset_token final : public ack_token {
 public:
  explicit offset_token(ack_inbox::slot* s) noexcept : s_(s) {}
  /// Any thread (the last holder's release orders it before the slot's return).
  void fail() noexcept override { s_->failed.store(true, std::memory_order_relaxed); }
  /// The input message this token acknowledges (partition id, offset, generation). Any
  /// thread holding the token: the entry is written before the token exists.
  const ack_entry& entry() const noexcept { return s_->entry; }

 private:
  ack_inbox::slot* s_;
};

inline std::shared_ptr<ack_token> ack_inbox::make_token(const ack_entry& e) {
  if (!free_) {
    auto slab = std::make_unique<slot[]>(slab_slots);
    for (std::size_t i = 0; i < slab_slots; ++i) slab[i].next = i + 1 < slab_slots ? &slab[i + 1] : nullptr;
    free_ = &slab[0];
    slabs_.push_back(std::move(slab));
  }
  if (reserve_ == 0) {
    refs_.fetch_add(ref_batch, std::memory_order_relaxed);
    reserve_ = ref_batch;
  }
  slot* s = free_;
  free_ = s->next;
  // The next token is one record away: fetch its slot now (the free list's slots were
  // last touched by drain(); reading s->next cold was most of a token's cost).
  if (free_) __builtin_prefetch(&free_->entry, 1);
  s->entry = e;
  s->failed.store(false, std::memory_order_relaxed);
  s->next = nullptr;
  prepared_ = s;
  --reserve_;  // the slot's reference, dropped by returned()
  return std::allocate_shared<offset_token>(allocator<offset_token>(this), s);
}

}  // namespace rill::kafka_detail

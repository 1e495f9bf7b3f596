// rill/operators/key_table.hpp — the per-slice state table of the keyed windows: key ->
// accumulator, looked up with the hash key_by already computed, prefetchable.
//
// Defines:
//   rill::key_table<K, V, Hash>   an open-addressing hash table (linear probing, power-of-two
//                                 capacity, at most half full) of std::pair<K, V> slots,
//                                 with a one-byte tag per slot in a separate array
//
// Example (compiled by tests/banner_examples.py):
//   rill::key_table<std::uint32_t, std::uint64_t, std::hash<std::uint32_t>> t;
//   const std::uint32_t k = 7;
//   const std::size_t h = t.hash_function()(k);       // key_by's hash of k
//   t.prefetch(h);                                     // a few records ahead of the lookup
//   auto [slot, fresh] = t.try_emplace(k, h, [] { return std::uint64_t{0}; });
//   ++slot->second;                                    // fresh == true: a new entry
//   assert(t.find(k, h)->second == 1 && t.size() == 1);
//   for (auto& [key, count] : t) { /* every entry once, in no particular order */ }
//
// Why not absl::flat_hash_map: a lookup's cache miss is the cost of a keyed window with
// many keys (the slot of a 50,000-key table is not in L2), and it can only be hidden by
// prefetching the slot a few records ahead. Here the slot a key lands in is, in most
// lookups, its home slot (hash >> 12) & (capacity - 1), known from the hash alone; absl's
// matching slot is somewhere in a group of 16 found only by reading the control bytes,
// so its prefetch(key) fetches the group's first slot, rarely the one needed. At most half
// full, linear probing needs 1.5 slot reads per successful lookup on average (Knuth, TAOCP
// vol. 3, 6.4, algorithm L: (1 + 1/(1 - a)) / 2 at load a).
//
// Cost: memory = capacity x (sizeof(std::pair<K, V>) + 1) bytes, capacity the power of two
// >= 2 x size (at least 16); growing doubles it and re-inserts every entry, rehashing its
// key with Hash (amortised O(1) per insert). No erase of one entry: a table is dropped or
// cleared whole (clear() keeps its slots for the next slice) when its slice has fired.
// Iteration visits every slot (O(capacity)).
//
// Thread safety: distinct objects safe, shared objects unsafe (one worker owns a table).
// Errors: allocation throws std::bad_alloc, before anything changed (try_emplace, reserve);
// an exception from Hash or from K's or V's copy/move leaves the table valid with
// unspecified contents (basic guarantee). Nothing blocks.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include <sys/mman.h>

namespace rill {

/// See the banner. K: equality-comparable, movable; V: movable, default-constructible
/// only through try_emplace's factory; Hash: `std::size_t operator()(const K&)` giving
/// the hash key_by gives (a well-mixed 64-bit value: bits 12 and up pick the home slot,
/// the top seven are the tag).
template <class K, class V, class Hash>
class key_table {
 public:
  using value_type = std::pair<K, V>;

  explicit key_table(Hash hash = {}) : hash_(std::move(hash)) {}
  key_table(const key_table&) = delete;
  key_table& operator=(const key_table&) = delete;
  key_table(key_table&& o) noexcept
      : hash_(std::move(o.hash_)), tags_(std::move(o.tags_)), slots_(o.slots_), mask_(o.mask_), size_(o.size_) {
    o.slots_ = nullptr;
    o.mask_ = 0;
    o.size_ = 0;
  }
  key_table& operator=(key_table&& o) noexcept {
    if (this != &o) {
      destroy();
      hash_ = std::move(o.hash_);
      tags_ = std::move(o.tags_);
      slots_ = std::exchange(o.slots_, nullptr);
      mask_ = std::exchange(o.mask_, 0);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~key_table() { destroy(); }

  /// Entries held.
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  /// Slots allocated (0 before the first insert or reserve).
  std::size_t capacity() const noexcept { return slots_ ? mask_ + 1 : 0; }
  /// The hash the table was built with (to hash a key as key_by does).
  const Hash& hash_function() const noexcept { return hash_; }

  /// Makes room for `n` entries without growing again (capacity >= 2n). May allocate.
  void reserve(std::size_t n) {
    const std::size_t want = std::bit_ceil(std::max<std::size_t>(16, 2 * n));
    if (want > capacity()) rehash(want);
  }

  /// Removes every entry and keeps the slots (capacity() unchanged), so a table can be
  /// refilled without allocating: destroys each entry, then zeroes the capacity() + 7 tag
  /// bytes. O(capacity()); noexcept.
  void clear() noexcept {
    if (slots_ == nullptr) return;
    if constexpr (!std::is_trivially_destructible_v<value_type>)
      for (std::size_t i = 0; i <= mask_; ++i)
        if (tags_[i] != 0) slots_[i].~value_type();
    std::memset(tags_.get(), 0, mask_ + 1 + 7);
    size_ = 0;
  }
  /// Hints that `hash` will be looked up soon: fetches its home slot into the cache: its
  /// first and last cache lines, so every line of a slot up to 128 bytes (a 96-byte slot
  /// always spans two: the key in one, most of the value in the other), with no effect on the table's contents; nothing
  /// when it has no slots. The tags are not fetched: at one byte a slot they stay in L2
  /// when the slots do not. O(1).
  void prefetch(std::size_t hash) const noexcept {
    if (slots_ != nullptr) {
      const char* first = reinterpret_cast<const char*>(&slots_[home(hash)]);
      __builtin_prefetch(first);
      if constexpr (sizeof(value_type) > 64) __builtin_prefetch(first + sizeof(value_type) - 1);
    }
  }

  /// The entry of `key`, whose hash is `hash` (hash_function()(key): the caller's, not
  /// recomputed); nullptr when absent. O(1) average.
  [[gnu::always_inline]] value_type* find(const K& key, std::size_t hash) noexcept {
    if (slots_ == nullptr) return nullptr;
    const std::uint64_t pattern = lsb * tag_of(hash);
    for (std::size_t i = home(hash);; i = (i + 8) & mask_) {
      const std::uint64_t w = tags_at(i);
      const std::uint64_t x = w ^ pattern;
      // One bit (0x80) per tag equal to the key's: no carries cross bytes.
      for (std::uint64_t match = ~(((x & ~msb) + ~msb) | x) & msb; match != 0; match &= match - 1) {
        value_type& v = slots_[(i + (lowest_byte(match))) & mask_];
        if (v.first == key) [[likely]] return &v;
      }
      if ((~w & msb) != 0) [[likely]] return nullptr;  // an empty slot ends the probe
    }
  }
  const value_type* find(const K& key, std::size_t hash) const noexcept {
    return const_cast<key_table*>(this)->find(key, hash);
  }

  /// The home slot of `hash` (where its probe starts; the slot prefetch() fetches) and the
  /// slot an entry sits in: for tests and diagnostics. Preconditions: capacity() > 0; `v`
  /// points to an entry of this table.
  std::size_t home_index(std::size_t hash) const noexcept { return home(hash); }
  std::size_t index_of(const value_type* v) const noexcept { return std::size_t(v - slots_); }

  /// The entry of `key` (hash `hash`), inserted as {key, make()} when absent; second =
  /// true when inserted. May grow the table (then earlier pointers are invalid).
  template <class Make>
  [[gnu::always_inline]] std::pair<value_type*, bool> try_emplace(const K& key, std::size_t hash, Make&& make) {
    if (value_type* v = find(key, hash)) [[likely]] return {v, false};
    return {insert_new(key, hash, make()), true};
  }

  /// Iteration over the entries (forward; no particular order). Invalidated by growth.
  template <bool Const>
  class basic_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = key_table::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = std::conditional_t<Const, const value_type*, value_type*>;
    using reference = std::conditional_t<Const, const value_type&, value_type&>;
    basic_iterator() = default;
    reference operator*() const noexcept { return t_->slots_[i_]; }
    pointer operator->() const noexcept { return &t_->slots_[i_]; }
    basic_iterator& operator++() noexcept {
      ++i_;
      skip();
      return *this;
    }
    basic_iterator operator++(int) noexcept {
      auto r = *this;
      ++*this;
      return r;
    }
    friend bool operator==(const basic_iterator& a, const basic_iterator& b) noexcept { return a.i_ == b.i_; }

   private:
    friend class key_table;
    using table = std::conditional_t<Const, const key_table, key_table>;
    basic_iterator(table* t, std::size_t i) noexcept : t_(t), i_(i) { skip(); }
    void skip() noexcept {
      while (i_ < t_->capacity() && t_->tags_[i_] == 0) ++i_;
    }
    table* t_ = nullptr;
    std::size_t i_ = 0;
  };
  using iterator = basic_iterator<false>;
  using const_iterator = basic_iterator<true>;
  iterator begin() noexcept { return {this, 0}; }
  iterator end() noexcept { return {this, capacity()}; }
  const_iterator begin() const noexcept { return {this, 0}; }
  const_iterator end() const noexcept { return {this, capacity()}; }

 private:
  // A slot's tag: 0 = empty; otherwise the hash's top seven bits with the high bit set.
  // Lookups compare eight tags at once, from the home slot on (a 64-bit word; the tag
  // array repeats its first seven bytes after its end, so the word never wraps), so which
  // of the eight holds the key costs no branch.
  static constexpr std::uint64_t lsb = 0x0101010101010101ULL, msb = 0x8080808080808080ULL;
  static std::uint8_t tag_of(std::size_t hash) noexcept { return std::uint8_t(0x80 | (hash >> 57)); }
  // The home slot comes from bits 12 and up: key_by sends a key to worker hash % workers,
  // so on one worker of a power-of-two count (up to 4,096) the low bits of every key's
  // hash are the same, and homes taken from them would use 1/workers of the slots.
  std::size_t home(std::size_t hash) const noexcept { return (hash >> 12) & mask_; }
  std::uint64_t tags_at(std::size_t i) const noexcept {
    std::uint64_t w;
    std::memcpy(&w, &tags_[i], sizeof w);
    if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap64(w);
    return w;
  }
  static std::size_t lowest_byte(std::uint64_t bits) noexcept { return std::size_t(std::countr_zero(bits)) >> 3; }
  void set_tag(std::size_t i, std::uint8_t t) noexcept {
    tags_[i] = t;
    if (i < 7) tags_[mask_ + 1 + i] = t;
  }

  value_type* insert_new(const K& key, std::size_t hash, V&& v) {
    if (2 * (size_ + 1) > capacity()) rehash(std::max<std::size_t>(16, 2 * capacity()));
    const std::size_t i = free_slot(hash);
    ::new (static_cast<void*>(&slots_[i])) value_type(key, std::move(v));
    set_tag(i, tag_of(hash));
    ++size_;
    return &slots_[i];
  }
  std::size_t free_slot(std::size_t hash) const noexcept {
    std::size_t i = home(hash);
    while (tags_[i] != 0) i = (i + 1) & mask_;
    return i;
  }

  void rehash(std::size_t cap) {
    key_table next(hash_);
    next.tags_ = std::make_unique<std::uint8_t[]>(cap + 7);  // zeroed: every slot empty
    next.slots_ = allocate_slots(cap);
    next.mask_ = cap - 1;
    for (std::size_t i = 0; i < capacity(); ++i) {
      if (tags_[i] == 0) continue;
      const std::size_t h = hash_(slots_[i].first);
      const std::size_t j = next.free_slot(h);
      ::new (static_cast<void*>(&next.slots_[j])) value_type(std::move(slots_[i]));
      next.set_tag(j, tag_of(h));
      ++next.size_;
    }
    *this = std::move(next);
  }

  void destroy() noexcept {
    if (slots_ == nullptr) return;
    for (std::size_t i = 0; i <= mask_; ++i)
      if (tags_[i] != 0) slots_[i].~value_type();
    free_slots(slots_, mask_ + 1);
    slots_ = nullptr;
  }

  // Slots are 64-byte aligned, so a slot of 64 bytes or less never straddles two cache
  // lines. An array of 2 MiB or more is 2 MiB aligned and asks for transparent huge pages
  // (madvise(2) MADV_HUGEPAGE; a no-op where THP is off): a lookup into a table of many
  // keys then misses the TLB far less often.
  static constexpr std::size_t huge_page = std::size_t{2} << 20;
  static std::size_t slot_bytes(std::size_t cap) noexcept { return cap * sizeof(value_type); }
  static std::align_val_t slot_align(std::size_t cap) noexcept {
    return std::align_val_t{slot_bytes(cap) >= huge_page ? huge_page : std::max<std::size_t>(64, alignof(value_type))};
  }
  static value_type* allocate_slots(std::size_t cap) {
    const std::size_t bytes = slot_bytes(cap);
    void* p = ::operator new(bytes, slot_align(cap));
    if (bytes >= huge_page) ::madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<value_type*>(p);
  }
  static void free_slots(value_type* p, std::size_t cap) noexcept { ::operator delete(p, slot_align(cap)); }

  [[no_unique_address]] Hash hash_;
  std::unique_ptr<std::uint8_t[]> tags_;
  value_type* slots_ = nullptr;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace rill

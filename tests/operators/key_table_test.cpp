// rill::key_table against std::unordered_map, the reference: seeded random inserts and
// lookups with hashes from well mixed to fully colliding (every key one home slot and one
// tag), growth from empty and from reserve(), iteration, moves, and the slot layout the
// prefetch relies on.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "rill/operators/key_table.hpp"
#include "rill/operators/keyed_window.hpp"  // rill::detail::mix_hash, key_by's finaliser

namespace {

/// key_by's hash of an integer key (std::hash is the identity; key_by mixes it).
struct mixed {
  std::size_t operator()(std::uint64_t k) const noexcept { return rill::detail::mix_hash(k); }
};
/// Only `bits` distinct hashes, all with the same home-slot bits when bits <= 12 (key_by's
/// routing bits): long probe runs, tag matches of other keys, wrap-around at the end.
template <int Bits>
struct colliding {
  std::size_t operator()(std::uint64_t k) const noexcept { return rill::detail::mix_hash(k) & ((1ULL << Bits) - 1); }
};
/// Every key the same hash: one probe run through the whole table.
struct constant {
  std::size_t operator()(std::uint64_t) const noexcept { return 0x9e3779b97f4a7c15ULL; }
};

template <class Hash>
void check_against_unordered_map(std::size_t keys, std::size_t ops, std::uint64_t seed, bool reserve_first) {
  rill::key_table<std::uint64_t, std::uint64_t, Hash> t;
  if (reserve_first) t.reserve(keys);
  const std::size_t reserved = t.capacity();
  std::unordered_map<std::uint64_t, std::uint64_t> ref;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint64_t> pick(0, 2 * keys - 1);  // half of the lookups miss at first
  const Hash h{};
  for (std::size_t i = 0; i < ops; ++i) {
    const std::uint64_t k = pick(rng) * 0x100000001ULL;  // spread over 64 bits
    if (rng() % 3 == 0) {  // lookup only
      const auto* v = t.find(k, h(k));
      const auto r = ref.find(k);
      ASSERT_EQ(v != nullptr, r != ref.end()) << "key " << k << " at op " << i;
      if (v) {
        ASSERT_EQ(v->first, k);
        ASSERT_EQ(v->second, r->second);
      }
      continue;
    }
    auto [v, fresh] = t.try_emplace(k, h(k), [] { return std::uint64_t{100}; });
    auto [r, rfresh] = ref.try_emplace(k, 100);
    ASSERT_EQ(fresh, rfresh) << "key " << k << " at op " << i;
    v->second += i;
    r->second += i;
    ASSERT_EQ(t.size(), ref.size());
    ASSERT_LE(2 * t.size(), t.capacity()) << "at most half full";
    if (reserve_first && t.size() <= keys) {
      ASSERT_EQ(t.capacity(), reserved) << "no growth within the reserved size";
    }
  }
  // Iteration: every entry once, with its value.
  std::size_t seen = 0;
  for (const auto& [k, v] : t) {
    ++seen;
    const auto r = ref.find(k);
    ASSERT_NE(r, ref.end()) << k;
    EXPECT_EQ(v, r->second) << k;
  }
  EXPECT_EQ(seen, ref.size());
  for (const auto& [k, v] : ref) {
    const auto* e = t.find(k, h(k));
    ASSERT_NE(e, nullptr) << k;
    EXPECT_EQ(e->second, v);
  }
}

TEST(key_table, equals_unordered_map_with_mixed_hashes) {
  check_against_unordered_map<mixed>(50'000, 300'000, 1, false);
  check_against_unordered_map<mixed>(1'000, 100'000, 2, true);
}

TEST(key_table, equals_unordered_map_when_hashes_collide) {
  check_against_unordered_map<colliding<12>>(3'000, 30'000, 3, false);  // one home slot
  check_against_unordered_map<colliding<14>>(3'000, 30'000, 4, true);   // four home slots
  check_against_unordered_map<constant>(300, 5'000, 5, false);         // one hash for all
}

TEST(key_table, growth_doubles_from_sixteen_and_reserve_makes_room) {
  rill::key_table<std::uint64_t, int, mixed> t;
  EXPECT_EQ(t.capacity(), 0u);
  EXPECT_EQ(t.find(1, mixed{}(1)), nullptr);  // no slots yet
  t.prefetch(mixed{}(1));                     // no effect without slots
  std::vector<std::size_t> caps;
  for (std::uint64_t k = 0; k < 100; ++k) {
    t.try_emplace(k, mixed{}(k), [] { return 0; });
    if (caps.empty() || caps.back() != t.capacity()) caps.push_back(t.capacity());
  }
  // 2 x size <= capacity: 16 holds 8 entries, 32 holds 16, ..., 256 holds 100.
  EXPECT_EQ(caps, (std::vector<std::size_t>{16, 32, 64, 128, 256}));
  rill::key_table<std::uint64_t, int, mixed> r;
  r.reserve(1000);
  EXPECT_EQ(r.capacity(), 2048u);  // the power of two >= 2,000
  for (std::uint64_t k = 0; k < 1000; ++k) r.try_emplace(k, mixed{}(k), [] { return 0; });
  EXPECT_EQ(r.capacity(), 2048u);  // no growth
}

TEST(key_table, moves_keep_the_entries_and_empty_the_source) {
  rill::key_table<std::uint64_t, std::string, mixed> a;
  for (std::uint64_t k = 0; k < 40; ++k) a.try_emplace(k, mixed{}(k), [k] { return std::to_string(k); });
  rill::key_table<std::uint64_t, std::string, mixed> b(std::move(a));
  EXPECT_EQ(b.size(), 40u);
  EXPECT_EQ(a.size(), 0u);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_EQ(b.find(17, mixed{}(17))->second, "17");
  rill::key_table<std::uint64_t, std::string, mixed> c;
  c.try_emplace(1000, mixed{}(1000), [] { return std::string("x"); });
  c = std::move(b);
  EXPECT_EQ(c.size(), 40u);
  EXPECT_EQ(c.find(1000, mixed{}(1000)), nullptr);
  EXPECT_EQ(c.find(39, mixed{}(39))->second, "39");
}

TEST(key_table, clear_empties_keeps_the_slots_and_refills_like_a_new_table) {
  // Strings: clear() must destroy non-trivial entries (ASan reports a leak otherwise).
  rill::key_table<std::uint64_t, std::string, colliding<12>> t;
  const colliding<12> h{};
  for (std::uint64_t k = 0; k < 300; ++k) t.try_emplace(k, h(k), [k] { return std::string(40, char('a' + k % 26)); });
  const std::size_t cap = t.capacity();
  ASSERT_EQ(cap, 1024u);  // 300 entries: the power of two >= 600
  t.clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.capacity(), cap);
  EXPECT_EQ(t.begin(), t.end());
  for (std::uint64_t k = 0; k < 300; ++k) EXPECT_EQ(t.find(k, h(k)), nullptr) << k;
  // Refilled with other keys (one home slot: the probe runs wrap past the end, through
  // the tags that repeat after it): only the new entries are found.
  for (std::uint64_t k = 1000; k < 1400; ++k) {
    auto [v, fresh] = t.try_emplace(k, h(k), [k] { return std::to_string(k); });
    ASSERT_TRUE(fresh) << k;
  }
  EXPECT_EQ(t.size(), 400u);
  EXPECT_EQ(t.capacity(), cap);  // 400 entries fit 1,024 slots: no growth
  for (std::uint64_t k = 0; k < 300; ++k) EXPECT_EQ(t.find(k, h(k)), nullptr) << k;
  for (std::uint64_t k = 1000; k < 1400; ++k) EXPECT_EQ(t.find(k, h(k))->second, std::to_string(k));
  std::size_t seen = 0;
  for (const auto& e : t) seen += e.first >= 1000 && e.first < 1400;
  EXPECT_EQ(seen, 400u);
  rill::key_table<std::uint64_t, int, mixed> none;
  none.clear();  // no slots yet: nothing to do
  EXPECT_EQ(none.capacity(), 0u);
}

TEST(key_table, slots_are_cache_line_aligned_and_most_keys_sit_at_home) {
  // The prefetch fetches a key's home slot: one cache line for a slot of <= 64 bytes.
  struct wide_key {
    std::array<std::uint8_t, 42> b{};  // the size of rill::flow_key
    bool operator==(const wide_key&) const = default;
  };
  struct wide_hash {
    std::size_t operator()(const wide_key& k) const noexcept {
      std::uint64_t x = 0;
      for (auto c : k.b) x = x * 131 + c;
      return rill::detail::mix_hash(x);
    }
  };
  struct counts {
    std::uint64_t packets = 0, bytes = 0;
  };
  rill::key_table<wide_key, counts, wide_hash> t;
  static_assert(sizeof(std::pair<wide_key, counts>) == 64);
  std::mt19937_64 rng(6);
  std::vector<wide_key> keys(50'000);
  for (auto& k : keys) {
    for (auto& c : k.b) c = std::uint8_t(rng());
    t.try_emplace(k, wide_hash{}(k), [] { return counts{}; });
  }
  std::size_t at_home = 0;
  for (const auto& k : keys) {
    const auto* v = t.find(k, wide_hash{}(k));
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v) % 64, 0u);
    at_home += t.index_of(v) == t.home_index(wide_hash{}(k));
  }
  // Linear probing at load 50,000 / 131,072 = 0.38: a successful lookup needs
  // (1 + 1/(1 - 0.38)) / 2 = 1.31 probes on average (Knuth); well over half start at home.
  EXPECT_GT(at_home, keys.size() * 6 / 10) << at_home;
}

}  // namespace

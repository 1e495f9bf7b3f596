// nexmark/detail/rand08.hpp — the random generator and samplers of Rust's `rand` 0.8 that
// the `nexmark` crate 0.2.0 uses, bit for bit, so that the C++ generator produces the
// crate's events: `SmallRng` (Xoshiro256++ on 64-bit targets, rand 0.8
// src/rngs/xoshiro256plusplus.rs) seeded by `seed_from_u64` (rand_core's PCG32), `gen_range` for
// integers (src/distributions/uniform.rs, `sample_single_inclusive`: Lemire's widening
// multiply with the "conservative" rejection zone for 32- and 64-bit types and the exact
// modulus zone for 8- and 16-bit ones), `gen::<f32>()` (src/distributions/float.rs: the top
// 24 bits of next_u32 times 2^-24) and `choose` (src/seq/mod.rs `gen_index`: a u32 range).
//
// Which sampler a crate call uses follows Rust's type inference: an unsuffixed literal
// range (`gen_range(0..10000)`) is i32 (the u32 sampler), a `usize` range is the u64
// sampler, `b'a'..=b'z'` the u8 one.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace nexmark::detail {

/// Xoshiro256++ (Blackman and Vigna) with rand 0.8's seeding and 32-bit output.
class small_rng {
 public:
  /// `SmallRng::seed_from_u64`: SmallRng does not forward seed_from_u64 to
  /// Xoshiro256PlusPlus, so it is rand_core 0.6's default (src/lib.rs): eight PCG32
  /// outputs, little-endian, are the 32-byte seed given to from_seed.
  static small_rng seed_from_u64(std::uint64_t state) noexcept {
    std::uint32_t out[8];
    for (auto& x : out) {
      state = state * 6364136223846793005ULL + 11634580027462260723ULL;
      const auto xorshifted = static_cast<std::uint32_t>(((state >> 18) ^ state) >> 27);
      x = std::rotr(xorshifted, static_cast<int>(state >> 59));
    }
    small_rng r;
    for (int k = 0; k < 4; ++k) r.s_[k] = out[2 * k] | (std::uint64_t{out[2 * k + 1]} << 32);
    if ((r.s_[0] | r.s_[1] | r.s_[2] | r.s_[3]) == 0) return xoshiro_seed_from_u64(0);
    return r;
  }
  /// Xoshiro256PlusPlus's own seed_from_u64 (four SplitMix64 outputs): what from_seed
  /// uses for an all-zero seed.
  static small_rng xoshiro_seed_from_u64(std::uint64_t state) noexcept {
    small_rng r;
    for (auto& word : r.s_) {
      state += 0x9e3779b97f4a7c15ULL;
      std::uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
    return r;
  }
  /// Words given directly (rand's from_seed with the words in little-endian order).
  static small_rng from_state(std::uint64_t s0, std::uint64_t s1, std::uint64_t s2,
                              std::uint64_t s3) noexcept {
    small_rng r;
    r.s_[0] = s0, r.s_[1] = s1, r.s_[2] = s2, r.s_[3] = s3;
    return r;
  }

  std::uint64_t next_u64() noexcept {
    const std::uint64_t result = std::rotl(s_[0] + s_[3], 23) + s_[0];
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }
  /// The upper half of next_u64 (rand 0.8: the low bits of xoshiro are the weaker ones).
  std::uint32_t next_u32() noexcept { return static_cast<std::uint32_t>(next_u64() >> 32); }

 private:
  small_rng() = default;
  std::uint64_t s_[4] = {};
};

/// `gen_range(low..high)` for u64/usize; requires low < high (the crate panics otherwise).
inline std::uint64_t gen_range_u64(small_rng& rng, std::uint64_t low, std::uint64_t high) noexcept {
  const std::uint64_t range = high - low;  // (high - 1) - low + 1, never 0 here
  const std::uint64_t zone = (range << std::countl_zero(range)) - 1;
  for (;;) {
    const unsigned __int128 m = static_cast<unsigned __int128>(rng.next_u64()) * range;
    if (static_cast<std::uint64_t>(m) <= zone) return low + static_cast<std::uint64_t>(m >> 64);
  }
}

/// `gen_range(low..high)` for u32 and i32 with 0 <= low < high.
inline std::uint32_t gen_range_u32(small_rng& rng, std::uint32_t low, std::uint32_t high) noexcept {
  const std::uint32_t range = high - low;
  const std::uint32_t zone = (range << std::countl_zero(range)) - 1;
  for (;;) {
    const std::uint64_t m = static_cast<std::uint64_t>(rng.next_u32()) * range;
    if (static_cast<std::uint32_t>(m) <= zone) return low + static_cast<std::uint32_t>(m >> 32);
  }
}

/// `gen_range(low..=high)` for u8 (sampled in u32 with the exact modulus zone).
inline std::uint8_t gen_range_u8_inclusive(small_rng& rng, std::uint8_t low,
                                           std::uint8_t high) noexcept {
  const std::uint32_t range = static_cast<std::uint8_t>(high - low + 1);
  const std::uint32_t zone = UINT32_MAX - (UINT32_MAX - range + 1) % range;
  for (;;) {
    const std::uint64_t m = static_cast<std::uint64_t>(rng.next_u32()) * range;
    if (static_cast<std::uint32_t>(m) <= zone)
      return static_cast<std::uint8_t>(low + static_cast<std::uint8_t>(m >> 32));
  }
}

/// `gen::<f32>()`: uniform in [0, 1) with 24 random bits.
inline float gen_f32(small_rng& rng) noexcept {
  constexpr float scale = 1.0f / static_cast<float>(1u << 24);
  return scale * static_cast<float>(rng.next_u32() >> 8);
}

/// `slice.choose(rng)`'s index for a slice of `len` > 0 elements.
inline std::size_t choose_index(small_rng& rng, std::size_t len) noexcept {
  return gen_range_u32(rng, 0, static_cast<std::uint32_t>(len));
}

}  // namespace nexmark::detail

// tests/support/peak_memory.hpp — what the bounded-emission tests measure: the process's
// resident size and its peak, and the sizes they run at.
//
// Defines, in rill_test:
//   sanitized          true under ASan or TSan (shadow memory and quarantines: RSS says
//                      nothing about the program's own memory there)
//   stress_scaled(n)   n divided by RILL_STRESS_SCALE (scripts/test sets it under the
//                      sanitizers), at least 1
//   status_kb(field)   "VmRSS" or "VmHWM" of this process, kB (Linux /proc/self/status)
//   reset_peak()       VmHWM := the current resident size (Linux: "5" > clear_refs)
//   peak_window        reset_peak() and VmRSS at its start; VmHWM above that at its end
//   mix(v)             murmur3's fmix64 finaliser: an order-independent checksum term
//
// Example:
//   rill_test::peak_window pw;            // base = VmRSS now, peak reset
//   run_the_pipeline();
//   if (!rill_test::sanitized && pw.known()) EXPECT_LT(pw.above_base_kb(), 16 * 1024);
//
// Thread safety: the functions may be called from any thread (reset_peak resets the peak
// of the whole process).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "rill/core/sanitizers.hpp"

namespace rill_test {

inline constexpr bool sanitized = RILL_ASAN || RILL_TSAN;

inline std::uint64_t stress_scaled(std::uint64_t n) {
  if (const char* s = std::getenv("RILL_STRESS_SCALE")) n /= std::uint64_t(std::max(1L, std::atol(s)));
  return std::max<std::uint64_t>(n, 1);
}

inline long status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(field);
  while (std::getline(f, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') return std::atol(line.c_str() + n + 1);
  return -1;
}

inline bool reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return bool(f);
}

/// The peak resident size from its construction (or restart()) on, above the resident
/// size then.
class peak_window {
 public:
  peak_window() { restart(); }
  /// Resets the peak and takes the base again.
  void restart() {
    reset_ok_ = reset_peak();
    base_kb_ = status_kb("VmRSS");
  }
  /// Whether the peak could be reset and the base read (Linux).
  bool known() const { return reset_ok_ && base_kb_ > 0; }
  long base_kb() const { return base_kb_; }
  /// VmHWM now minus the base, kB.
  long above_base_kb() const { return status_kb("VmHWM") - base_kb_; }

 private:
  bool reset_ok_ = false;
  long base_kb_ = -1;
};

inline std::uint64_t mix(std::uint64_t v) {
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdULL;
  v ^= v >> 33;
  return v;
}

}  // namespace rill_test

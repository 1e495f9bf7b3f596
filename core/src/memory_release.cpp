// rill/core/memory_release.hpp: glibc's mallinfo2() and malloc_trim(), /proc/self/statm.
#include "rill/core/memory_release.hpp"

#include <unistd.h>

#include <cstdio>

#include "rill/core/sanitizers.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// AddressSanitizer and ThreadSanitizer replace malloc: glibc's counters would describe an
// allocator the program does not use.
#if RILL_ASAN || RILL_TSAN
#define RILL_GLIBC_MALLOC 0
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#define RILL_GLIBC_MALLOC 1
#else
#define RILL_GLIBC_MALLOC 0
#endif

namespace rill {

heap_usage read_heap_usage() noexcept {
#if RILL_GLIBC_MALLOC
  const struct mallinfo2 mi = mallinfo2();
  return {true, mi.uordblks + mi.hblkhd, mi.fordblks};
#else
  return {};
#endif
}

std::size_t resident_bytes() noexcept {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return std::size_t(resident) * std::size_t(sysconf(_SC_PAGESIZE));
}

std::size_t release_free_heap() noexcept {
#if RILL_GLIBC_MALLOC
  const std::size_t before = resident_bytes();
  malloc_trim(0);
  const std::size_t after = resident_bytes();
  return before > after ? before - after : 0;
#else
  return 0;
#endif
}

}  // namespace rill

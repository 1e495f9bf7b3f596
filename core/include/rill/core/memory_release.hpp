// rill/core/memory_release.hpp — giving the allocator's freed memory back to the system.
//
// Defines:
//   rill::heap_usage        bytes the C allocator holds: in use by the program, and free
//   rill::read_heap_usage   glibc's count (mallinfo2), all arenas
//   rill::resident_bytes    the process's resident set size (/proc/self/statm)
//   rill::release_free_heap returns the allocator's free pages to the system (malloc_trim)
//   rill::memory_release_totals  how often, and how much, a runtime released
//
// Example (compiled by tests/banner_examples.py):
//   rill::heap_usage h = rill::read_heap_usage();
//   if (h.supported && h.free_bytes > (std::size_t{16} << 20)) {
//     std::size_t released = rill::release_free_heap();   // RSS bytes given back
//     std::cout << h.in_use_bytes << " in use, " << released << " released\n";
//   }
//
// Why (docs/design.md "Memory release"): glibc's malloc keeps the memory a thread freed in
// that thread's arena, and returns it to the system only from the top of a heap. A burst
// (a Kafka consumer's prefetch after a broker outage, a window that fires a backlog)
// leaves the resident set at the burst's peak long after the bytes in use fell back.
// jemalloc purges such pages after `dirty_decay_ms` (10 s by default); glibc has no such
// timer, so rill::runtime calls release_free_heap() from its control thread when the free
// bytes exceed runtime_options::memory_release_slack (runtime.hpp). malloc_trim(3):
// "since glibc 2.8 this function frees memory in all arenas and in all chunks with whole
// free pages" (madvise(MADV_DONTNEED)).
//
// Other allocators: without glibc (or under AddressSanitizer/ThreadSanitizer, which
// replace malloc), read_heap_usage() says supported = false and release_free_heap()
// returns 0 and does nothing.
//
// Thread safety: every function may be called from any thread; none throws.
// read_heap_usage() and release_free_heap() take each arena's lock in turn, and a thread
// that allocates from that arena meanwhile waits. read_heap_usage() holds it for
// microseconds; release_free_heap() for about 1 ms per MiB it gives back (one madvise
// per free run of pages, and the kernel freeing each page), and for well under 1 ms when
// there is nothing left to give back.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace rill {

/// What the C allocator holds, in bytes, summed over its arenas.
struct heap_usage {
  bool supported = false;     ///< false: the allocator gives no count (fields are 0)
  std::size_t in_use_bytes = 0;  ///< allocated and not freed (mallinfo2 uordblks + hblkhd)
  std::size_t free_bytes = 0;    ///< freed, kept by the allocator (mallinfo2 fordblks),
                                 ///< resident or not: a page given back stays counted here
};

/// glibc's mallinfo2() (glibc >= 2.33). O(free chunks in the fast bins of every arena).
heap_usage read_heap_usage() noexcept;

/// Resident set size of this process in bytes, from /proc/self/statm; 0 if unreadable.
std::size_t resident_bytes() noexcept;

/// malloc_trim(0): gives every whole free page of every arena back to the system.
/// Returns by how many bytes the resident set shrank across the call (0 if it did not,
/// or the allocator is not glibc's). Blocking: about 1 ms per MiB given back.
std::size_t release_free_heap() noexcept;

/// A runtime's releases over its life (runtime_options::memory_release_interval), read by
/// its metrics endpoint: written by the control thread, read anywhere (relaxed atomics).
struct memory_release_totals {
  std::atomic<std::uint64_t> releases{0};        ///< release_free_heap() calls
  std::atomic<std::uint64_t> released_bytes{0};  ///< their results added up, bytes
};

}  // namespace rill

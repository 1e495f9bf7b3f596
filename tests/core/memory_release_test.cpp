// The memory release (core/include/rill/core/memory_release.hpp, runtime_options::
// memory_release_interval): glibc keeps a fragmented heap's free pages resident until
// malloc_trim gives them back. Each test makes such a heap — 64 MiB in 4 KiB blocks,
// every 64th kept — and measures the resident set (/proc/self/statm) around the release.
// Under AddressSanitizer and ThreadSanitizer, which replace malloc, the tests skip.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <rill/core/memory_release.hpp>
#include <rill/core/sanitizers.hpp>
#include <rill/rill.hpp>

using namespace std::chrono_literals;

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;
constexpr std::size_t block = 4096, heap_bytes = 64 * mib, keep_every = 64;

/// Allocates heap_bytes in `block`-byte blocks on a thread of its own (its own glibc
/// arena, as a librdkafka thread has), touches them, and frees all but every 64th: the
/// kept blocks pin the free ones between them. Returns the kept blocks (1 MiB).
std::vector<void*> fragment_heap() {
  std::vector<void*> kept;
  std::thread([&] {
    std::vector<void*> all(heap_bytes / block);
    for (auto& p : all) {
      p = std::malloc(block);
      std::memset(p, 0xab, block);
    }
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (i % keep_every == 0) kept.push_back(all[i]);
      else std::free(all[i]);
    }
  }).join();
  return kept;
}

void free_all(std::vector<void*>& v) {
  for (void* p : v) std::free(p);
  v.clear();
}

bool sanitized() {
#if RILL_ASAN || RILL_TSAN
  return true;
#else
  return !rill::read_heap_usage().supported;
#endif
}

// 63/64 of 64 MiB is free but resident; release_free_heap() gives at least 48 MiB back.
TEST(memory_release, release_free_heap_gives_a_fragmented_heap_back) {
  if (sanitized()) GTEST_SKIP() << "the sanitizer's allocator replaces glibc's";
  ASSERT_GT(rill::resident_bytes(), 0u);
  auto kept = fragment_heap();
  const auto h = rill::read_heap_usage();
  const std::size_t before = rill::resident_bytes();
  EXPECT_GE(h.free_bytes, 60 * mib) << "glibc keeps the freed blocks";
  EXPECT_GE(h.in_use_bytes, heap_bytes / keep_every);
  const std::size_t released = rill::release_free_heap();
  const std::size_t after = rill::resident_bytes();
  EXPECT_GE(released, 48 * mib);
  EXPECT_EQ(released, before - after) << "the result is the resident set's drop";
  EXPECT_GE(rill::read_heap_usage().free_bytes, 60 * mib) << "given back, still counted free";
  free_all(kept);
}

/// `n` records, then silence (a live input gone quiet): the run ends on stop_when_idle.
struct quiet_source {
  using value_type = int;
  std::size_t split_count() const { return 1; }
  struct reader {
    int i = 0;
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t) {
      if (i < 10) emit(rill::record<int>{i++, rill::event_time{std::chrono::milliseconds{i}}});
      return rill::poll_status::idle;
    }
    std::string error() const { return {}; }
  };
  reader open(std::size_t) const { return reader{}; }
};

struct run_result {
  rill::run_report rep;
  std::size_t rss_before, rss_after;
};

run_result run_with(std::chrono::milliseconds interval) {
  auto kept = fragment_heap();
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false,
                    .memory_release_interval = interval, .memory_release_slack = 16 * mib}};
  const std::size_t before = rill::resident_bytes();
  std::atomic<int> seen{0};
  auto rep = rt.run(rill::from(quiet_source{}).sink([&](int) { ++seen; }), {.stop_when_idle = 300ms});
  const std::size_t after = rill::resident_bytes();
  EXPECT_EQ(seen.load(), 10);
  free_all(kept);
  rill::release_free_heap();  // the next run starts from a trimmed heap
  return {std::move(rep), before, after};
}

// The runtime's control thread releases during the run (checks every 20 ms, slack
// 16 MiB): the resident set falls by most of the 63 MiB freed. With the release off it
// does not, and the report counts nothing.
TEST(memory_release, runtime_releases_the_free_heap_during_a_run) {
  if (sanitized()) GTEST_SKIP() << "the sanitizer's allocator replaces glibc's";
  rill::release_free_heap();
  const auto on = run_with(20ms);
  EXPECT_GE(on.rep.memory_releases, 1u);
  EXPECT_GE(on.rep.memory_released_bytes, 48 * mib);
  EXPECT_GE(on.rss_before, on.rss_after + 40 * mib) << "before " << on.rss_before << " after " << on.rss_after;
  const auto off = run_with(0ms);
  EXPECT_EQ(off.rep.memory_releases, 0u);
  EXPECT_EQ(off.rep.memory_released_bytes, 0u);
  EXPECT_LT(off.rss_before, off.rss_after + 8 * mib) << "nothing releases the heap without the timer";
}

// Once released, the same free bytes do not release again on every check: a second
// release needs the resident set to grow by half the slack.
TEST(memory_release, free_bytes_already_given_back_do_not_release_again) {
  if (sanitized()) GTEST_SKIP() << "the sanitizer's allocator replaces glibc's";
  rill::release_free_heap();
  auto kept = fragment_heap();
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false,
                    .memory_release_interval = 10ms, .memory_release_slack = 16 * mib}};
  const auto rep = rt.run(rill::from(quiet_source{}).sink([](int) {}), {.stop_when_idle = 300ms});
  EXPECT_EQ(rep.memory_releases, 1u) << "about 30 checks, one release";
  free_all(kept);
}

}  // namespace

// rill/connectors/file_sink.hpp — fixed-size records to segment files of a fixed size,
// named by the first and last record index they hold.
//
// Defines:
//   rill::segment_file_options  directory, prefix, record size, records per segment
//   rill::segment_file_sink     buffers on the caller's thread, writes on a thread of its own
//
// Example (compiled by tests/banner_examples.py):
//   rill::segment_file_sink files{{.directory = "out/indexer", .record_bytes = 32,
//                                  .records_per_segment = 1 << 20}};        // 32 MiB files
//   std::vector<std::byte> wire(4 * 32);    // 4 records of 32 bytes, back to back
//   files.write_framed(wire, 4);
//   files.close();                          // flush, rename the last segment, join
//   // out/indexer/seg-00000000000000000000-00000000000001048575.seg, ...
//
// Naming: PREFIX-FIRST-LAST.seg, FIRST and LAST the indexes (inclusive, 20 digits, so a
// lexical sort is index order) of the first and last record inside, counted from
// first_index. A segment is written as PREFIX-FIRST.part and renamed when it is full (or
// at close()): a .seg file is always complete. `cat DIR/*.seg` is the stream.
//
// Blocking: by default file I/O happens on the sink's own thread (docs/design.md
// "Runtime": blocking calls get their own thread), never on the caller's; write_framed()
// only copies into a buffer. Bounded: writable() is false while more than buffer_bytes
// wait for the disk. Memory: that, plus the chunk being filled, plus up to 4 written
// chunks kept for reuse. With `write_on_caller`, write_framed() calls write(2) itself,
// straight from the caller's memory: no copy, no thread, no hand-over, and no memory of
// its own, but the caller blocks for the copy into the page cache and, when writeback
// falls behind, for the kernel's dirty-page throttling.
// Errors: a directory that cannot be created throws std::system_error from the
// constructor; a failed write/rename sets error() ("PATH: strerror") and failed(), and
// later records are counted as dropped.
//
// Thread safety: write_framed/writable/close from one thread (the producer); stats and
// error() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace rill {

struct segment_file_options {
  std::string directory = ".";
  std::string prefix = "seg";
  std::size_t record_bytes = 32;
  std::uint64_t records_per_segment = std::uint64_t{1} << 20;
  std::uint64_t first_index = 0;
  /// Soft cap of bytes waiting for the disk thread.
  std::size_t buffer_bytes = std::size_t{64} << 20;
  /// Bytes handed to the disk thread at once (a batch larger than that goes whole). Small
  /// enough to still be in cache when the disk thread copies it into the page cache
  /// (bench/RESULTS.md, "streamed sockets", measures 1 MiB against 128 KiB).
  std::size_t chunk_bytes = std::size_t{128} << 10;
  /// Write on the producer's thread, from the caller's buffer (see the banner: no copy
  /// and no thread, but write_framed() blocks for the page-cache copy). buffer_bytes and
  /// chunk_bytes do not apply.
  bool write_on_caller = false;
};

class segment_file_sink {
 public:
  /// Creates the directory (throws std::system_error naming it on failure); throws
  /// config_error("segment_file.record_bytes"/"records_per_segment") for zeros.
  explicit segment_file_sink(segment_file_options o);
  ~segment_file_sink();  ///< close()s.
  segment_file_sink(const segment_file_sink&) = delete;
  segment_file_sink& operator=(const segment_file_sink&) = delete;

  /// `wire` = `n` whole records (n * record_bytes bytes). Returns false (counted as
  /// dropped) when the sink failed or the size is not n * record_bytes.
  /// Producer thread; copies into the current chunk and never waits for the disk (with
  /// write_on_caller: writes `wire` to the file before it returns).
  bool write_framed(std::span<const std::byte> wire, std::size_t n);
  /// False while more than buffer_bytes wait for the disk (stop producing until true
  /// again), or once the sink failed. Producer thread; never blocks. With
  /// write_on_caller: false only once the sink failed.
  bool writable() const noexcept;
  /// Flushes everything, renames the last segment, joins the thread (if any). Blocks the
  /// caller for the disk time: not from a worker. Idempotent.
  void close();

  /// A write or rename failed; later records are dropped. Any thread.
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  /// "PATH: strerror" of the first failure, empty if none. Any thread.
  std::string error() const;
  /// Records written to disk so far (a stale snapshot while running). Any thread.
  std::uint64_t records_written() const noexcept {
    return written_.load(std::memory_order_relaxed);
  }
  /// Records refused (wrong size, or after a failure). Any thread.
  std::uint64_t records_dropped() const noexcept {
    return dropped_.load(std::memory_order_relaxed);
  }
  /// Completed segment files, in index order. Any thread.
  std::vector<std::string> files() const;

 private:
  /// Appends bytes to the current segment file (PREFIX-FIRST.part), renaming each one
  /// that fills up; finish() renames the last one. Used by one thread at a time: the
  /// disk thread, or the producer with write_on_caller.
  class segment_writer {
   public:
    explicit segment_writer(segment_file_sink& s) : s_(s) {}
    /// Writes all of [p, p + len); false after a failure (error() and failed() are set).
    bool write(const std::byte* p, std::size_t len);
    void finish();

   private:
    void finish_segment();
    void fail(const std::string& path);
    segment_file_sink& s_;
    int fd_ = -1;
    std::string part_;
    std::uint64_t seg_first_ = 0, in_seg_ = 0;
    bool started_ = false;
  };
  void run();
  void hand_over();
  std::vector<std::byte> take_spare();
  static constexpr std::size_t max_spare = 4;  ///< chunk buffers kept for reuse
  segment_file_options o_;
  std::vector<std::byte> cur_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<std::byte>> q_;
  std::vector<std::vector<std::byte>> spare_;  ///< written chunks, recycled (under mu_)
  std::atomic<std::size_t> queued_{0};
  std::atomic<std::uint64_t> written_{0}, dropped_{0};
  std::atomic<bool> failed_{false};
  bool done_ = false, closed_ = false;
  std::string error_;
  std::vector<std::string> files_;
  std::thread thread_;
  std::unique_ptr<segment_writer> caller_writer_;  ///< write_on_caller only
};

}  // namespace rill

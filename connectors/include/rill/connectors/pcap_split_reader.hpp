// rill/connectors/pcap_split_reader.hpp — one of N interleaved splits of a classic pcap
// file, read from a memory map and decoded, so that N workers share one capture.
//
// Defines:
//   rill::pcap_split_reader   pull reader of split i of N: records [c*K, (c+1)*K) for every
//                             chunk c with c % N == i, decoded with rill::decode
//
// Example (compiled by tests/banner_examples.py):
//   std::unordered_map<rill::flow_key, std::uint64_t> bytes_per_flow;
//   if (rill::pcap_split_reader::splittable("big.pcap")) {
//     auto r = rill::pcap_split_reader::open("big.pcap", 1, 2);   // split 1 of 2
//     rill::packet p;
//     rill::read_status s;
//     while ((s = r.next(p)) == rill::read_status::ok) bytes_per_flow[p.key] += p.wire_len;
//     if (s == rill::read_status::error) std::cerr << r.error_message() << '\n';
//   }
//
// Format: classic pcap version 2.4, magics a1b2c3d4 (µs) and a1b23c4d (ns), either byte
// order, on a regular file. Everything else (pcapng, older versions, the modified
// "Kuznetzov" format, FIFOs, /dev/stdin) is not splittable; read it with pcap_reader.
//
// Each split walks the 16-byte record headers from the start of the file (pointer += 16
// + caplen, no copy) and decodes only the records of its own chunks. Splits opened
// together by open_splits() share one mapping and the byte offsets of the chunk
// boundaries: a split walks the headers of its own chunk before it decodes it and
// publishes where the next chunk starts, and jumps over another split's chunk when its
// end is already known (otherwise it walks that chunk's headers, as a split opened alone
// by open() always does). Either way every split finds the same record boundaries, so
// the records a split returns do not depend on the timing of the others. Round-robin chunks
// keep the event times of the N splits close together, so a watermark (the minimum over
// the splits) holds back little state. The union of the N splits is, record by record,
// what pcap_reader::next(packet&) returns for the file: same packets, same truncated
// count, same end.
//
// Errors: open() throws what pcap_reader::open throws (it opens one to validate the file:
// missing, empty, not a capture, unsupported link type; every message names the file).
// A record libpcap would treat specially (header or data cut off by the end of the file,
// caplen above the snapshot length) is read by that pcap_reader, seeked to it, so its
// packet or its error message ("FILE: record at byte offset N is cut off ...") is
// exactly pcap_reader's. The split owning that record returns it, or returns
// read_status::error with that message; the other splits end there with end_of_file. So
// over all splits the error is reported once, and every complete record before it is
// returned once.
//
// Thread safety: a pcap_split_reader belongs to one thread (one worker) at a time.
// Distinct objects, also of the same file and of one open_splits(): safe (the shared
// boundaries are atomics). Shared objects: unsafe. Movable.
//
// Memory: the mapping is released in 8 MiB regions as the reading goes: a region once
// every reader of the mapping (every split of one open_splits()) read past it, on the
// thread of the reader that passed it last; the rest with the last reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "rill/connectors/packet.hpp"
#include "rill/connectors/pcap_filter.hpp"
#include "rill/connectors/pcap_reader.hpp"

namespace rill {

class pcap_split_reader {
 public:
  /// Records per chunk unless open() is told otherwise. Larger chunks skew the splits'
  /// event times further apart (more window state held behind the watermark); smaller
  /// ones cost more walking. netflow on 2 workers runs as fast with 4096 as with 16384
  /// and faster than with 1024 (bench/RESULTS.md "one capture, N splits").
  static constexpr std::size_t default_records_per_chunk = 4096;

  /// True if `path` is a regular file that starts with a classic pcap 2.4 header (any of
  /// the four magics). Blocking (stat + a 24-byte read). Any thread. Never throws: a file
  /// that cannot be read is not splittable (pcap_reader::open then reports why).
  static bool splittable(const std::string& path) noexcept;

  /// Opens split `split` of `splits` (split < splits) with chunks of `records_per_chunk`
  /// (>= 1) records. Maps the file read-only. Blocking. Any thread.
  /// @throws pcap_error as pcap_reader::open; open_failed when the file cannot be mapped
  ///         or is no longer a splittable capture; std::invalid_argument for bad
  ///         split/splits/records_per_chunk.
  static pcap_split_reader open(const std::string& path, std::size_t split, std::size_t splits,
                                std::size_t records_per_chunk = default_records_per_chunk);
  /// Opens all `splits` (>= 1) splits of `path` at once, element i being split i: one
  /// read-only mapping and one table of chunk boundaries for all of them, so each page of
  /// the file is mapped once and a split mostly jumps over the other splits' chunks
  /// instead of walking their headers. The readers may then move to different threads.
  /// Blocking. Any thread. Throws what open() throws.
  static std::vector<pcap_split_reader> open_splits(
      const std::string& path, std::size_t splits,
      std::size_t records_per_chunk = default_records_per_chunk);

  pcap_split_reader(pcap_split_reader&&) noexcept;
  pcap_split_reader& operator=(pcap_split_reader&&) noexcept;
  ~pcap_split_reader();

  /// Returns from now on only this split's records that pass the BPF `expression`, as
  /// pcap_reader::set_filter does for a file (rill::pcap_filter for the file's link type
  /// and snapshot length); rejected records count in counters().filtered. Empty: no
  /// filter. Owning thread only.
  /// @throws pcap_error bad_filter naming the expression and libpcap's reason.
  void set_filter(const std::string& expression);

  /// Next record of this split, decoded as pcap_reader::next(packet&) decodes it. Returns
  /// ok, end_of_file (stays so) or error (stays so; see error_message()). Never `again`.
  /// noexcept, never blocks on I/O other than page faults of the map. Owning thread only.
  read_status next(packet& out) noexcept;

  /// After read_status::error: the pcap_reader error and message, e.g.
  /// "capture.pcap: record at byte offset 1234 is cut off (file ends inside it): ...".
  std::error_code last_error() const noexcept { return probe_.last_error(); }
  const std::string& error_message() const noexcept { return probe_.error_message(); }
  /// Records returned (this split only), truncated/malformed among them, errors (0 or 1),
  /// records the filter rejected.
  pcap_reader_counters counters() const noexcept { return counters_; }
  /// The file path.
  const std::string& name() const noexcept { return probe_.name(); }

 private:
  struct shared_file;  // the mapping and the chunk boundaries of one open()/open_splits()
  pcap_split_reader(pcap_reader probe, std::shared_ptr<shared_file> file, std::size_t split,
                    std::size_t splits, std::size_t records_per_chunk);
  static std::shared_ptr<shared_file> map_file(const std::string& path, std::size_t splits,
                                               std::size_t records_per_chunk);
  enum class step { record, end, special };
  step look(std::uint32_t& caplen) const noexcept;
  bool skip_chunk() noexcept;
  void start_walk() noexcept;
  void walk_some() noexcept;
  void release_passed() noexcept;
  read_status special(packet& out, bool owned, bool& kept) noexcept;

  pcap_reader probe_;  // validates at open; reads the special records
  std::unique_ptr<pcap_filter> filter_;  // set_filter; null: every record
  std::shared_ptr<shared_file> file_;   // owns the mapping; map_ and size_ are its
  const std::byte* map_ = nullptr;
  std::size_t size_ = 0;
  std::size_t pos_ = 24;     // byte offset of the next record header
  std::uint64_t index_ = 0;  // record number of the record at pos_
  std::size_t region_ = 0;   // first region of the map this reader has not passed
  std::size_t split_ = 0, splits_ = 1, per_chunk_ = default_records_per_chunk;
  int linktype_ = 0;
  std::uint32_t snapshot_ = 0;
  bool swapped_ = false, nano_ = false, done_ = false;
  bool shared_ = false;  // other splits read file_: publish the end of each own chunk
  // The walk over an own chunk's headers that publishes where the next chunk starts,
  // a few headers per record returned (walk_some), ahead of the decoding.
  std::size_t walk_pos_ = 0;    // byte offset of the walk's next header
  std::size_t walk_left_ = 0;   // headers it has still to pass; 0: no walk under way
  std::size_t walk_chunk_ = 0;  // the chunk whose start it publishes
  read_status end_ = read_status::end_of_file;
  pcap_reader_counters counters_;
};

}  // namespace rill

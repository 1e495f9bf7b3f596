// rill/connectors/pcap_reader.hpp — reading packets from a capture file or a live interface.
//
// Defines:
//   rill::pcap_errc, rill::pcap_category(), rill::pcap_error   the "pcap" error category
//   rill::pcap_record        one raw record (time, lengths, captured bytes, file offset)
//   rill::read_status        ok / end_of_file / again / error
//   rill::pcap_reader        pull reader over libpcap: open(path) / open_live(interface)
//
// Example (compiled by tests/banner_examples.py):
//   auto r = rill::pcap_reader::open("capture.pcapng");    // throws rill::pcap_error
//   std::unordered_map<rill::flow_key, std::uint64_t> bytes_per_flow;
//   rill::packet p;
//   rill::read_status s;
//   while ((s = r.next(p)) == rill::read_status::ok) {
//     bytes_per_flow[p.key] += p.wire_len;
//   }
//   if (s == rill::read_status::error)
//     std::cerr << r.last_error().message() << ": " << r.error_message() << '\n';
//   std::cout << r.counters().records << " records\n";
//
// Files: classic pcap (µs or ns, either byte order) and pcapng, opened with nanosecond
// precision, so every timestamp is exact. Link types: see rill::is_supported_linktype.
//
// Errors (docs/design.md "Bad input"): opening throws; the data path (next) never throws and
// reports through read_status + last_error() + error_message(); every message names the
// file (or interface), and for a record that cannot be read, its byte offset.
//
// FIFOs and pipes never block: open() opens one without waiting for a writer, and
// next() reads only what has come (O_NONBLOCK), handing libpcap a record (pcapng: the
// blocks up to the next packet block) only once all its bytes are there. Until then
// next() returns `again`, whether no writer has opened the FIFO yet, the header is not all
// written or the writer has stopped inside a record, so the caller can stop at any time.
// The header is read with the first record: its errors (empty_file, not_a_capture,
// unsupported_linktype, and bad_filter for a filter set before it came) come from next(),
// not open(). Byte offsets count the bytes read, as a file's position.
//
// Thread safety: a pcap_reader belongs to one thread (one worker) at a time.
// Distinct objects: safe. Shared objects: unsafe. Movable, not copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>

#include "rill/connectors/packet.hpp"
#include "rill/core/time.hpp"

namespace rill {

/// Errors of the pcap category, by what the caller should do.
enum class pcap_errc {
  open_failed = 1,       ///< missing / unreadable file or not a regular file: fix the path
  empty_file,            ///< zero bytes: nothing to read, do not retry
  not_a_capture,         ///< not pcap/pcapng (bad magic, bad header): do not retry
  unsupported_linktype,  ///< link type decode does not know, e.g. 192 (PPI): do not retry
  truncated_record,  ///< file ends inside a record (cut off mid-write): records before it are good
  read_failed,       ///< malformed record, I/O error, or a pcapng timestamp past 2262-04-11 (the
                     ///< end of rill::event_time's int64 ns) while reading: stop this input
  live_open_failed,  ///< interface missing, no permission, cannot activate
  bad_filter,        ///< a capture filter libpcap cannot compile (pcap_filter): fix the expression
};

/// The "pcap" error category (name() == "pcap"). A process-wide singleton; thread-safe.
const std::error_category& pcap_category() noexcept;
std::error_code make_error_code(pcap_errc e) noexcept;

/// Thrown by pcap_reader::open / open_live. what() names the file or interface.
class pcap_error : public std::runtime_error {
 public:
  pcap_error(std::error_code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  /// The pcap_errc (category "pcap") of the failure; what() names the file.
  const std::error_code& code() const noexcept { return code_; }

 private:
  std::error_code code_;
};

/// One raw record. `data` points into the reader's buffer: valid until the next call to
/// next() or until the reader is destroyed.
struct pcap_record {
  event_time time{};              ///< ns since the epoch
  std::uint32_t cap_len = 0;      ///< bytes captured (= data.size())
  std::uint32_t wire_len = 0;     ///< original length (pcap `len`)
  std::int64_t file_offset = -1;  ///< byte offset of the record (block, for pcapng); -1 live
  std::span<const std::byte> data;
};

/// Result of pcap_reader::next. Never an exception.
enum class read_status {
  ok,           ///< a record/packet was returned
  end_of_file,  ///< clean end of the file (every record returned); stays so
  again,        ///< live, or a FIFO/pipe whose next record is not all written: nothing now; wait on selectable_fd() (or a timer) and call again
  error,        ///< see last_error() / error_message(); the reader stays in error
};

/// Counters since open. Plain snapshot.
struct pcap_reader_counters {
  std::uint64_t records = 0;    ///< records returned by next()
  std::uint64_t truncated = 0;  ///< packets next(packet&) flagged truncated or malformed
  std::uint64_t errors = 0;     ///< next() calls that returned error (0 or 1 for a file)
  /// Records a file's capture filter (set_filter) rejected: read, not returned. Always 0
  /// for live readers, whose filter runs in the kernel.
  std::uint64_t filtered = 0;
};

class pcap_filter;

class pcap_reader {
 public:
  /// Opens a capture file (pcap µs/ns, both byte orders, pcapng) with ns precision.
  /// Blocking for a regular file (opens it, reads its header); a FIFO or pipe is opened
  /// without waiting for a writer and its header is read by next() (see the banner). Any
  /// thread.
  /// @throws pcap_error open_failed (missing/unreadable/not a regular file), empty_file,
  ///         not_a_capture, unsupported_linktype ("unsupported link type 192 (PPI) in F").
  ///         Every message contains `path`.
  static pcap_reader open(const std::string& path);

  /// Opens a live interface: non-promiscuous, immediate mode, snaplen 262144, ns
  /// timestamps where the kernel offers them, then pcap_setnonblock: next() returns
  /// `again` instead of blocking. Wait on selectable_fd() (e.g. with a
  /// boost::asio::posix::stream_descriptor, wait_read) from the owning worker.
  /// Needs CAP_NET_RAW on Linux.
  /// @throws pcap_error live_open_failed naming the interface (missing, no permission),
  ///         unsupported_linktype.
  static pcap_reader open_live(const std::string& interface);

  pcap_reader(pcap_reader&&) noexcept;
  pcap_reader& operator=(pcap_reader&&) noexcept;
  ~pcap_reader();

  /// Next raw record. Data path: noexcept, returns a status. After `error`, records read
  /// before were all complete and already returned. A record stamped after
  /// 2262-04-11T23:47:16.854775807Z (pcapng's 64-bit timestamps reach that far; classic
  /// pcap's end in 2106) is a read_failed error naming the file, the record's byte offset
  /// and its timestamp: it has no event time, and a saturated one would misplace it in
  /// every window. A FIFO or pipe returns `again` while the next record (or the header) is
  /// not all there; it never blocks. Owning thread only.
  read_status next(pcap_record& out) noexcept;

  /// Next record, decoded (rill::decode). Counts truncated/malformed packets. Same
  /// statuses as next(pcap_record&). Owning thread only.
  read_status next(packet& out) noexcept;

  /// Returns from now on only the records that pass the BPF `expression` (pcap-filter(7)),
  /// compiled for this capture's link type and snapshot length. Files: the reader runs it
  /// on every record (rill::pcap_filter, pcap_offline_filter) and counts the rejected ones
  /// in counters().filtered; live: the kernel runs it (pcap_setfilter), and rejected
  /// packets are never seen. An empty expression removes the filter. Blocking for live
  /// readers (a socket option). Owning thread only.
  /// @throws pcap_error bad_filter naming the expression and libpcap's reason (the
  ///         reader is unchanged).
  void set_filter(const std::string& expression);

  /// Link type of the capture (DLT value from pcap_datalink, e.g. 1, 12 for raw IP); -1
  /// for a FIFO or pipe until next() has read its header.
  int linktype() const noexcept;
  /// Snapshot length libpcap applies (pcap_snapshot): the file header's snaplen, or the
  /// link type's maximum when that field is 0 or too large. Bytes. Records with a larger
  /// caplen come back cut to it. -1 when moved from, or a FIFO's header has not come.
  int snapshot() const noexcept;
  /// Classic pcap files only: the next next() reads the record whose 16-byte header
  /// starts at byte `offset` (as pcap_record::file_offset reports it) and continues from
  /// there. Clears nothing: after an error the reader stays in error. Returns false (and
  /// does nothing) for pcapng, live readers, or when fseek fails. Owning thread only.
  bool seek(std::int64_t offset) noexcept;
  /// File path, or interface name for live readers.
  const std::string& name() const noexcept { return name_; }
  /// For live readers and FIFO/pipe inputs: a descriptor that becomes readable when
  /// packets arrive; -1 for regular files (they are always ready).
  int selectable_fd() const noexcept;

  /// After read_status::error: the error and its message, e.g.
  /// "capture.pcap: record at byte offset 1234 cut off: truncated dump file; ...".
  /// Empty before any error.
  std::error_code last_error() const noexcept { return last_error_; }
  const std::string& error_message() const noexcept { return error_message_; }

  /// Records, bytes and error counts so far (a copy). Owning thread.
  pcap_reader_counters counters() const noexcept { return counters_; }

 private:
  struct handle;
  pcap_reader(std::unique_ptr<handle> h, std::string name, bool live);
  read_status fail(pcap_errc code, std::string message) noexcept;
  read_status next_unfiltered(pcap_record& out) noexcept;
  read_status start_pipe() noexcept;

  std::unique_ptr<handle> h_;
  std::string name_;
  bool live_ = false;
  bool done_ = false;
  std::error_code last_error_;
  std::string error_message_;
  pcap_reader_counters counters_;
};

}  // namespace rill

template <>
struct std::is_error_code_enum<rill::pcap_errc> : std::true_type {};

// rill/connectors/pcap_source.hpp — packet captures (files or a live interface) as a
// rill source of decoded packets.
//
// Defines:
//   rill::pcap_source        source_of<packet>: one split per capture file (or N, see
//                            below), or one live split
//   rill::pcap_source_options how many splits a file becomes, and their chunk size
//   rill::pcap_source_stats  totals over all splits: packets, bytes, per protocol, non-IP,
//                            truncated/malformed, read errors, records a filter rejected
//
// Example (compiled by tests/banner_examples.py):
//   #include <rill/operators/stream.hpp>
//   rill::pcap_source src{{"a.pcap", "b.pcapng"}};
//   auto stats = src.stats();                      // shared; read after (or during) the run
//   auto j = rill::from(std::move(src)).sink([](rill::packet&& p) { /* ... */ });
//   rill::runtime{}.run(j);
//   std::cout << stats->packets.load() << '\n';
//
// Event time = capture timestamp (ns); bytes = original wire length (pcap `len`), as tshark
// counts them. Decoding rules: <rill/connectors/packet.hpp>.
//
// Errors: a missing/unreadable/non-capture/empty file or an unsupported link type throws
// rill::pcap_error (naming the file) from runtime::run, before any worker starts (files
// are opened when the job is instantiated). A file cut off mid-record is NOT an
// exception: every complete record before it goes through the pipeline, the split ends,
// and "FILE: ... at byte offset N" lands in run_report::errors (and stats->errors).
// A FIFO or pipe is opened without waiting for a writer and its header is read with its
// records (pcap_reader), so its header's errors land there too, and a stop request ends
// it wherever its writer is.
// A live split never ends by itself: it ends on runtime::request_stop() / SIGINT.
//
// Splitting one file (pcap_source_options::splits_per_file = N >= 1): a classic pcap file
// on disk is mapped and becomes N splits of interleaved chunks of records
// (rill::pcap_split_reader), so N workers decode it; N = 1 (the default) reads it whole
// from the mapping, without libpcap's copy of every record. Same packets (as a multiset;
// each split is in file order), same stats, same errors as libpcap's reader
// (splits_per_file = 0). Files that cannot be split (pcapng, FIFOs, /dev/stdin, older
// pcap versions) and live captures are one split read by libpcap.
//   rill::runtime rt{{.workers = 2}};
//   rill::pcap_source src{{"big.pcap"}, {.splits_per_file = rt.worker_count()}};
//
// Capture filter (pcap_source_options::filter): a BPF expression (pcap-filter(7)) compiled
// for each input's link type when its split opens (rill::pcap_filter); a bad one throws
// rill::pcap_error bad_filter from runtime::run. Files: every record is read and the
// rejected ones are counted in stats->filtered, not emitted; live: the kernel filters
// (pcap_setfilter) and rejected packets are not counted. packets/bytes/by_proto count
// the packets that passed.
//   rill::pcap_source src{{"a.pcap"}, {.filter = "tcp port 80"}};
//
// Thread safety: stats counters are relaxed atomics, updated by the worker reading the
// split once per slice, readable from any thread. split_count() and open() of one
// object are called from one thread (runtime::run does).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rill/connectors/packet.hpp"
#include "rill/connectors/pcap_reader.hpp"
#include "rill/connectors/pcap_split_reader.hpp"
#include "rill/core/source.hpp"

namespace rill {

struct pcap_source_stats {
  std::atomic<std::uint64_t> packets{0}, bytes{0}, truncated{0}, errors{0};
  /// Records of files the capture filter rejected (never counted in the others).
  std::atomic<std::uint64_t> filtered{0};
  /// Indexed by ip_proto: tcp, udp, icmp, icmpv6, other, non_ip. Packets.
  std::array<std::atomic<std::uint64_t>, 6> by_proto{};
};

struct pcap_source_options {
  /// Splits per splittable capture file (pcap_split_reader::splittable), read from a
  /// shared mapping of the file; 0 means one split per file read by libpcap
  /// (rill::pcap_reader), whatever the file. netflow passes the worker count: split i
  /// runs on worker i mod workers.
  std::size_t splits_per_file = 1;
  /// Records per chunk of a split file (see pcap_split_reader). >= 1.
  std::size_t records_per_chunk = pcap_split_reader::default_records_per_chunk;
  /// Capture filter (BPF expression, pcap-filter(7)); empty: every record. See the banner.
  std::string filter{};
};

class pcap_source {
 public:
  using value_type = packet;
  using record_policy = unacked;  // a capture never acknowledges (record.hpp)

  /// Capture files, read as one split each (one input each downstream), or as
  /// `options.splits_per_file` splits each when the file is splittable. Opens nothing.
  explicit pcap_source(std::vector<std::string> files, pcap_source_options options = {})
      : files_(std::move(files)), options_(options),
        stats_(std::make_shared<pcap_source_stats>()) {}
  /// A live interface (libpcap, non-blocking), one split.
  static pcap_source live(std::string interface, std::string filter = {}) {
    pcap_source s{{std::move(interface)}, {.filter = std::move(filter)}};
    s.live_ = true;
    return s;
  }

  /// Number of splits: one per file, or splits_per_file (>= 1) per splittable file (decided
  /// now: stats each file and reads its first 24 bytes, blocking). Remembers the layout
  /// for open(). Not thread-safe against open() on the same object.
  std::size_t split_count() const {
    layout_.clear();
    opened_.v.clear();
    const std::size_t n = live_ ? 0 : options_.splits_per_file;
    for (std::size_t f = 0; f < files_.size(); ++f) {
      if (n == 0 || !pcap_split_reader::splittable(files_[f])) {
        layout_.push_back({f, 0, 1, false});
        continue;
      }
      for (std::size_t i = 0; i < n; ++i) layout_.push_back({f, i, n, true});
    }
    return layout_.size();
  }
  std::shared_ptr<pcap_source_stats> stats() const noexcept { return stats_; }

  class reader {
   public:
    reader(pcap_reader r, std::shared_ptr<pcap_source_stats> s, bool live)
        : r_(std::move(r)), stats_(std::move(s)), live_(live) {}
    /// Split of a file (see pcap_split_reader); r is not read.
    reader(pcap_split_reader sr, std::shared_ptr<pcap_source_stats> s)
        : r_(), split_(std::move(sr)), stats_(std::move(s)), live_(false) {}

    /// Reads up to `max` records, emitting one record<packet, unacked> each. Never blocks (live:
    /// returns idle when nothing is there). On the split's worker.
    template <class Emit>
    poll_status poll(Emit&& emit, std::size_t max) {
      local l;
      poll_status st = poll_status::more;
      const std::uint64_t filtered_before = filtered();
      for (std::size_t n = 0; n < max; ++n) {
        packet p;
        const auto rs = split_ ? split_->next(p) : r_->next(p);
        if (rs == read_status::ok) {
          ++l.packets;
          l.bytes += p.wire_len;
          ++l.by_proto[std::size_t(p.key.proto)];
          if (p.truncated || p.malformed) ++l.truncated;
          const auto t = p.time;
          emit(record<packet, unacked>{std::move(p), t});
          continue;
        }
        if (rs == read_status::again) st = poll_status::idle;
        else if (rs == read_status::end_of_file) st = poll_status::end;
        else {
          st = poll_status::error;
          ++l.errors;
        }
        break;
      }
      l.filtered = filtered() - filtered_before;
      publish(l);
      return st;
    }
    /// After poll() returned error: "FILE: record at byte offset N ...".
    std::string error() const { return split_ ? split_->error_message() : r_->error_message(); }
    /// For live captures: wait on this descriptor before polling again (-1 for files).
    int selectable_fd() const noexcept { return r_ ? r_->selectable_fd() : -1; }

   private:
    std::uint64_t filtered() const noexcept {
      return split_ ? split_->counters().filtered : r_->counters().filtered;
    }
    struct local {
      std::uint64_t packets = 0, bytes = 0, truncated = 0, errors = 0, filtered = 0;
      std::array<std::uint64_t, 6> by_proto{};
    };
    void publish(const local& l) {
      auto add = [](std::atomic<std::uint64_t>& a, std::uint64_t v) {
        if (v) a.fetch_add(v, std::memory_order_relaxed);
      };
      add(stats_->packets, l.packets);
      add(stats_->bytes, l.bytes);
      add(stats_->truncated, l.truncated);
      add(stats_->errors, l.errors);
      add(stats_->filtered, l.filtered);
      for (std::size_t i = 0; i < l.by_proto.size(); ++i) add(stats_->by_proto[i], l.by_proto[i]);
    }
    std::optional<pcap_reader> r_;
    std::optional<pcap_split_reader> split_;
    std::shared_ptr<pcap_source_stats> stats_;
    bool live_;
  };

  /// Opens split i (< split_count()). Blocking: opens the file, reads its header (and maps
  /// it, for a split file), compiles the filter. Throws pcap_error (see the banner). The
  /// splits of one file share one mapping (pcap_split_reader::open_splits): the first
  /// open() of any of them maps the file and keeps the others until their open().
  reader open(std::size_t split) const {
    if (layout_.empty()) split_count();
    const part& p = layout_.at(split);
    const std::string& name = files_.at(p.file);
    if (live_ || !p.mapped) {
      auto r = live_ ? pcap_reader::open_live(name) : pcap_reader::open(name);
      if (!options_.filter.empty()) r.set_filter(options_.filter);
      return reader{std::move(r), stats_, live_};
    }
    // The splits of one file share a mapping (pcap_split_reader::open_splits): opening the
    // first one opens all, and the others wait here for their open().
    auto& opened = opened_.v;
    if (opened.size() != layout_.size()) {
      opened.clear();
      opened.resize(layout_.size());
    }
    if (!opened[split]) {
      auto all = pcap_split_reader::open_splits(name, p.of, options_.records_per_chunk);
      const std::size_t first = split - p.index;
      for (std::size_t i = 0; i < p.of; ++i) opened[first + i] = std::move(all[i]);
    }
    auto r = std::move(*opened[split]);
    opened[split].reset();
    if (!options_.filter.empty()) r.set_filter(options_.filter);
    return reader{std::move(r), stats_};
  }

 private:
  struct part {
    std::size_t file, index, of;  // split `index` of `of` of files_[file]
    bool mapped;                  // pcap_split_reader (else pcap_reader)
  };
  std::vector<std::string> files_;
  pcap_source_options options_;
  std::shared_ptr<pcap_source_stats> stats_;
  bool live_ = false;
  mutable std::vector<part> layout_;  // of the last split_count()
  // Splits opened with a sibling but not yet handed out by open(), by layout position.
  // A copy of the source starts with none (its open() maps the file again).
  struct open_cache {
    std::vector<std::optional<pcap_split_reader>> v;
    open_cache() = default;
    open_cache(const open_cache&) noexcept {}
    open_cache& operator=(const open_cache&) noexcept {
      v.clear();
      return *this;
    }
    open_cache(open_cache&&) noexcept = default;
    open_cache& operator=(open_cache&&) noexcept = default;
    ~open_cache() = default;
  };
  mutable open_cache opened_;
};

}  // namespace rill

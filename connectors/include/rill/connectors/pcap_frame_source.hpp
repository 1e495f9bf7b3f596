// rill/connectors/pcap_frame_source.hpp — packet captures as a rill source of raw frames,
// so that decoding runs after a rebalance, on every worker.
//
// Defines:
//   rill::pcap_frame_source   source_of<pcap_frame>: one split per capture file, or one live
//                             split; reads and copies, does not decode
//   rill::pcap_frame_decoder  a map function: rill::decode plus the per-protocol and
//                             truncated counts of the source's stats
//
// Example (compiled by tests/banner_examples.py; one capture file, decoded on every
// worker):
//   #include <rill/operators/stream.hpp>
//   rill::pcap_frame_source src{{"big.pcap"}};
//   auto stats = src.stats();                    // shared; read after (or during) the run
//   auto j = rill::from(src)                     // copies: the decoder below shares stats
//                .rebalance()                    // frames go to whichever worker is free
//                .map(src.decoder())             // or .map(rill::decode): no counting
//                .key_by([](const rill::packet& p) { return std::hash<rill::flow_key>{}(p.key); })
//                .sink([](rill::packet&& p) { /* ... */ });
//   rill::runtime{{.workers = 2}}.run(j);
//   std::cout << stats->packets.load() << ' ' << stats->by_proto[0].load() << '\n';
//
// With one capture, rill::pcap_source reads and decodes on the one worker of its single
// split; this source only reads (libpcap) and copies each record's first
// pcap_frame::max_bytes (128) bytes, and `rebalance().map(...)` spreads the decoding. The
// packets are the ones pcap_source yields (<rill/connectors/pcap_frame.hpp>: the byte cap).
// Event time = capture timestamp (ns), as pcap_source.
//
// Stats (the same pcap_source_stats, the same meaning once the run is over):
//   packets, bytes, errors   counted by the source when it reads (bytes = wire length);
//   by_proto, truncated      counted by pcap_frame_decoder when it decodes (a pipeline that
//                            decodes with plain rill::decode leaves them 0).
// Each decoder publishes its counts every 256 packets and when it is destroyed (a job's
// stages are destroyed before runtime::run returns), so after the run every counter is
// exact; during the run by_proto and truncated lag by less than 256 per worker.
//
// Errors: as rill::pcap_source. A missing/unreadable/non-capture/empty file or an
// unsupported link type throws rill::pcap_error (naming the file) from runtime::run,
// before any worker starts. A file cut off mid-record is NOT an exception: every complete
// record before it goes through the pipeline, the split ends, and "FILE: ... at byte
// offset N" lands in run_report::errors (and stats->errors). A live split never ends by
// itself: it ends on runtime::request_stop() / SIGINT.
//
// Thread safety: stats counters are relaxed atomics, readable from any thread; a split's
// reader lives on its worker. A pcap_frame_decoder object belongs to one thread (the
// pipeline copies it once per worker): distinct objects: safe; shared objects: unsafe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rill/connectors/packet.hpp"
#include "rill/connectors/pcap_frame.hpp"
#include "rill/connectors/pcap_reader.hpp"
#include "rill/connectors/pcap_source.hpp"
#include "rill/core/source.hpp"

namespace rill {

/// Decodes frames (rill::decode) and counts by_proto and truncated into a
/// pcap_source_stats. Use one object per thread: `stream<pcap_frame>::map(decoder)` copies
/// it once per worker. A copy starts with no unpublished counts; a move takes them along.
class pcap_frame_decoder {
 public:
  /// Packets between two publications of the local counts.
  static constexpr std::uint32_t publish_every = 256;

  explicit pcap_frame_decoder(std::shared_ptr<pcap_source_stats> stats) noexcept
      : stats_(std::move(stats)) {}
  pcap_frame_decoder(const pcap_frame_decoder& o) noexcept : stats_(o.stats_) {}
  pcap_frame_decoder(pcap_frame_decoder&& o) noexcept
      : stats_(std::move(o.stats_)), local_(std::exchange(o.local_, {})) {}
  pcap_frame_decoder& operator=(const pcap_frame_decoder& o) noexcept {
    if (this != &o) {
      publish();
      stats_ = o.stats_;
    }
    return *this;
  }
  pcap_frame_decoder& operator=(pcap_frame_decoder&& o) noexcept {
    if (this != &o) {
      publish();
      stats_ = std::move(o.stats_);
      local_ = std::exchange(o.local_, {});
    }
    return *this;
  }
  /// Publishes what is left. On the thread that used the object last (or after it).
  ~pcap_frame_decoder() { publish(); }

  /// rill::decode(frame), counted. noexcept; owning thread only.
  packet operator()(const pcap_frame& frame) noexcept {
    packet p = decode(frame);
    ++local_.by_proto[static_cast<std::size_t>(p.key.proto)];
    if (p.truncated || p.malformed) ++local_.truncated;
    if (++local_.packets == publish_every) publish();
    return p;
  }

  /// Adds the local counts to the stats and zeroes them. noexcept; owning thread only.
  void publish() noexcept {
    if (local_.packets == 0 || !stats_) return;
    auto add = [](std::atomic<std::uint64_t>& a, std::uint64_t v) {
      if (v) a.fetch_add(v, std::memory_order_relaxed);
    };
    add(stats_->truncated, local_.truncated);
    for (std::size_t i = 0; i < local_.by_proto.size(); ++i)
      add(stats_->by_proto[i], local_.by_proto[i]);
    local_ = {};
  }

 private:
  struct counts {
    std::uint32_t packets = 0, truncated = 0;
    std::array<std::uint32_t, 6> by_proto{};
  };
  std::shared_ptr<pcap_source_stats> stats_;
  counts local_;
};

class pcap_frame_source {
 public:
  using value_type = pcap_frame;
  using record_policy = unacked;  // a capture never acknowledges (record.hpp)

  /// Capture files, read as one split each (one input each downstream). Opened in open().
  /// `filter`: a capture filter as pcap_source_options::filter (files: rejected records
  /// count in stats()->filtered; live: the kernel filters).
  explicit pcap_frame_source(std::vector<std::string> files, std::string filter = {})
      : files_(std::move(files)),
        filter_(std::move(filter)),
        stats_(std::make_shared<pcap_source_stats>()) {}
  /// A live interface (libpcap, non-blocking, see pcap_reader::open_live), one split.
  static pcap_frame_source live(std::string interface, std::string filter = {}) {
    pcap_frame_source s{{std::move(interface)}, std::move(filter)};
    s.live_ = true;
    return s;
  }

  std::size_t split_count() const noexcept { return files_.size(); }
  /// Shared by every copy of this source and by its decoders (see the banner).
  std::shared_ptr<pcap_source_stats> stats() const noexcept { return stats_; }
  /// A decoder counting into stats(). Any thread; allocates nothing.
  pcap_frame_decoder decoder() const noexcept { return pcap_frame_decoder{stats_}; }

  class reader {
   public:
    reader(pcap_reader r, std::shared_ptr<pcap_source_stats> s)
        : r_(std::move(r)), stats_(std::move(s)) {}

    /// Reads up to `max` records, emitting one record<pcap_frame, unacked> each. Never blocks
    /// (live: returns idle when nothing is there). On the split's worker.
    template <class Emit>
    poll_status poll(Emit&& emit, std::size_t max) {
      std::uint64_t packets = 0, bytes = 0;
      poll_status st = poll_status::more;
      const std::uint64_t filtered_before = r_.counters().filtered;
      pcap_record rec;
      for (std::size_t n = 0; n < max; ++n) {
        const auto rs = r_.next(rec);
        if (rs == read_status::ok) {
          ++packets;
          bytes += rec.wire_len;
          record<pcap_frame, unacked> out;  // default-initialised: the byte buffer is not zeroed
          out.time = rec.time;
          if (linktype_ < 0) linktype_ = r_.linktype();
          out.value.assign(linktype_, rec);
          emit(std::move(out));
          continue;
        }
        if (rs == read_status::again)
          st = poll_status::idle;
        else if (rs == read_status::end_of_file)
          st = poll_status::end;
        else {
          st = poll_status::error;
          stats_->errors.fetch_add(1, std::memory_order_relaxed);
        }
        break;
      }
      if (packets) stats_->packets.fetch_add(packets, std::memory_order_relaxed);
      if (bytes) stats_->bytes.fetch_add(bytes, std::memory_order_relaxed);
      if (const auto f = r_.counters().filtered - filtered_before)
        stats_->filtered.fetch_add(f, std::memory_order_relaxed);
      return st;
    }
    /// After poll() returned error: "FILE: record at byte offset N ...".
    std::string error() const { return r_.error_message(); }
    /// For live captures: wait on this descriptor before polling again (-1 for files).
    int selectable_fd() const noexcept { return r_.selectable_fd(); }

   private:
    pcap_reader r_;
    std::shared_ptr<pcap_source_stats> stats_;
    int linktype_ = -1;  // known after the first record (a FIFO's header comes with it)
  };

  /// Opens split i (blocking: opens the file, reads its header). Throws pcap_error (see
  /// the banner).
  reader open(std::size_t split) const {
    auto r = live_ ? pcap_reader::open_live(files_.at(split)) : pcap_reader::open(files_.at(split));
    if (!filter_.empty()) r.set_filter(filter_);
    return reader{std::move(r), stats_};
  }

 private:
  std::vector<std::string> files_;
  std::string filter_;
  std::shared_ptr<pcap_source_stats> stats_;
  bool live_ = false;
};

}  // namespace rill

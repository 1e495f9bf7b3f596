// rill/connectors/pcap_source.hpp — packet captures (files or a live interface) as a
// rill source of decoded packets.
//
// Defines:
//   rill::pcap_source        source_of<packet>: one split per capture file, or one live split
//   rill::pcap_source_stats  totals over all splits: packets, bytes, per protocol, non-IP,
//                            truncated/malformed, read errors
//
// Example:
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
// A live split never ends by itself: it ends on runtime::request_stop() / SIGINT.
//
// Thread safety: stats counters are relaxed atomics, updated by the worker reading the
// split once per slice, readable from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rill/connectors/packet.hpp"
#include "rill/connectors/pcap_reader.hpp"
#include "rill/core/source.hpp"

namespace rill {

struct pcap_source_stats {
  std::atomic<std::uint64_t> packets{0}, bytes{0}, truncated{0}, errors{0};
  /// Indexed by ip_proto: tcp, udp, icmp, icmpv6, other, non_ip. Packets.
  std::array<std::atomic<std::uint64_t>, 6> by_proto{};
};

class pcap_source {
 public:
  using value_type = packet;

  /// Capture files, read as one split each (one input each downstream).
  explicit pcap_source(std::vector<std::string> files)
      : files_(std::move(files)), stats_(std::make_shared<pcap_source_stats>()) {}
  /// A live interface (libpcap, non-blocking), one split.
  static pcap_source live(std::string interface) {
    pcap_source s{{std::move(interface)}};
    s.live_ = true;
    return s;
  }

  std::size_t split_count() const noexcept { return files_.size(); }
  std::shared_ptr<pcap_source_stats> stats() const noexcept { return stats_; }

  class reader {
   public:
    reader(pcap_reader r, std::shared_ptr<pcap_source_stats> s, bool live)
        : r_(std::move(r)), stats_(std::move(s)), live_(live) {}

    template <class Emit>
    poll_status poll(Emit&& emit, std::size_t max) {
      local l;
      poll_status st = poll_status::more;
      for (std::size_t n = 0; n < max; ++n) {
        packet p;
        const auto rs = r_.next(p);
        if (rs == read_status::ok) {
          ++l.packets;
          l.bytes += p.wire_len;
          ++l.by_proto[std::size_t(p.key.proto)];
          if (p.truncated || p.malformed) ++l.truncated;
          const auto t = p.time;
          emit(record<packet>{std::move(p), t, std::nullopt});
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
      publish(l);
      return st;
    }
    std::string error() const { return r_.error_message(); }
    /// For live captures: wait on this descriptor before polling again (-1 for files).
    int selectable_fd() const noexcept { return r_.selectable_fd(); }

   private:
    struct local {
      std::uint64_t packets = 0, bytes = 0, truncated = 0, errors = 0;
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
      for (std::size_t i = 0; i < l.by_proto.size(); ++i) add(stats_->by_proto[i], l.by_proto[i]);
    }
    pcap_reader r_;
    std::shared_ptr<pcap_source_stats> stats_;
    bool live_;
  };

  /// Opens split i. Throws pcap_error (see the banner).
  reader open(std::size_t split) const {
    return reader{live_ ? pcap_reader::open_live(files_.at(split)) : pcap_reader::open(files_.at(split)),
                  stats_, live_};
  }

 private:
  std::vector<std::string> files_;
  std::shared_ptr<pcap_source_stats> stats_;
  bool live_ = false;
};

}  // namespace rill

// rill/connectors/fan_out.hpp — one stream of framed records to several sinks at once,
// each with its own bounded buffer.
//
// Defines:
//   rill::fan_out          the splitter: write(batch) hands the batch to every target
//   rill::fan_out::target  a destination: write + writable, a name and a slow-sink policy
//
// Example (compiled by tests/banner_examples.py; the streamed-sockets indexer: a TCP
// destination, a tap that may fall behind, and disk):
//   #include <rill/connectors/file_sink.hpp>
//   #include <rill/connectors/tcp_sink.hpp>
//   boost::asio::io_context io;
//   auto fixed32 = rill::framing::fixed(32);
//   rill::tcp_sink forwarder{io, {.endpoint = rill::tcp_endpoint::connect("127.0.0.1", 9000),
//                                 .framing = fixed32}};
//   rill::tcp_sink tap{io, {.endpoint = rill::tcp_endpoint::connect("127.0.0.1", 9001),
//                           .framing = fixed32}};
//   rill::segment_file_sink files{{.directory = "out/indexer", .record_bytes = 32}};
//   rill::fan_out out;
//   out.add(rill::fan_out::to(forwarder));                           // backpressure
//   out.add(rill::fan_out::to(tap, rill::fan_out::slow::drop, "tap"));
//   out.add(rill::fan_out::to(files));
//   std::array<std::byte, 64> wire{};                                 // 2 records of 32 bytes
//   if (!out.write(wire, 2)) { /* stop reading the input until out.ready() */ }
//
// Rule: every target has its own bounded buffer (its soft cap). With policy
// backpressure, a full target makes write() return false: the caller stops reading until
// ready() — memory stays bounded by the caps plus one batch, and the slow target sets
// the pace. With policy drop, a batch that finds the target full is not given to it: the
// target's dropped counter rises and its on_drop callback gets a clear message (once per
// episode of being full); the other targets go on at full speed.
//
// Thread safety: a fan_out and its targets are used from one thread (the io_context's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace rill {

class fan_out {
 public:
  enum class slow : std::uint8_t { backpressure, drop };
  struct target {
    std::string name;
    std::function<bool(std::span<const std::byte> wire, std::size_t records)> write;
    std::function<bool()> writable;
    slow policy = slow::backpressure;
    std::uint64_t records_written = 0, records_dropped = 0;
    bool dropping = false;
  };

  /// A target from any sink with write_framed(span, n) and writable() (tcp_sink,
  /// segment_file_sink). `s` must outlive the fan_out.
  template <class Sink>
  static target to(Sink& s, slow policy = slow::backpressure, std::string name = {}) {
    return target{
        name.empty() ? std::string("target") : std::move(name),
        [&s](std::span<const std::byte> w, std::size_t n) { return s.write_framed(w, n); },
        [&s] { return s.writable(); }, policy};
  }

  /// Adds a destination; before the first write(). Same thread as write().
  void add(target t) { targets_.push_back(std::move(t)); }
  /// Called with (target name, message) when a drop-policy target starts dropping (once
  /// per episode of being full), on the thread calling write().
  void on_drop(std::function<void(const std::string&, const std::string&)> f) {
    drop_cb_ = std::move(f);
  }

  /// Gives `records` framed records (`wire`) to every target. Returns ready(): false =
  /// stop reading until ready() is true again. Never blocks.
  bool write(std::span<const std::byte> wire, std::size_t records) {
    for (auto& t : targets_) {
      if (t.policy == slow::drop && !t.writable()) {
        t.records_dropped += records;
        if (!t.dropping && drop_cb_)
          drop_cb_(
              t.name,
              "fan_out: target " + t.name +
                  " is full (slow consumer): dropping records from here on until it catches up");
        t.dropping = true;
        continue;
      }
      t.dropping = false;
      if (t.write(wire, records))
        t.records_written += records;
      else
        t.records_dropped += records;
    }
    return ready();
  }
  /// True when every backpressure target can take more. Never blocks.
  bool ready() const {
    for (const auto& t : targets_)
      if (t.policy == slow::backpressure && !t.writable()) return false;
    return true;
  }
  /// The destinations with their written/dropped counters. Same thread as write().
  const std::vector<target>& targets() const noexcept { return targets_; }

 private:
  std::vector<target> targets_;
  std::function<void(const std::string&, const std::string&)> drop_cb_;
};

}  // namespace rill

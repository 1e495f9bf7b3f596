// rill/connectors/tcp_source.hpp — receives framed records over TCP on an io_context,
// resynchronises after a broken connection and reports the records that never came.
//
// Defines:
//   rill::tcp_source_options  endpoint (listen or connect), framing, handshake, read size,
//                             socket buffer, low-water mark, blocking reads
//   rill::tcp_receiver        the receiver, on one io_context (a rill worker's or your own)
//   rill::tcp_receiver_stats  counters, readable from any thread
//   rill::tcp_message         one received record: sequence index + payload bytes
//   rill::tcp_source          a rill::source_of<tcp_message> (one split) for rill::from()
//
// Example (compiled by tests/banner_examples.py; standalone):
//   boost::asio::io_context io;
//   rill::tcp_receiver rx{io, {.endpoint = rill::tcp_endpoint::listen("127.0.0.1", 9000),
//                              .framing = rill::framing::fixed(32)}};
//   rx.on_records([](std::uint64_t first_seq, std::span<const std::span<const std::byte>> recs) {
//     return true;                        // false = pause reading (backpressure) until resume()
//   });
//   rx.on_gap([](std::uint64_t from, std::uint64_t to) { /* records [from, to) were lost */ });
//   rx.start();
//   io.run();
//
// Resynchronisation rule (README "TCP connectors"): a connection that ends mid-record
// (EOF or error with an incomplete record buffered, or a bad length prefix) has its
// partial record discarded and counted: no corrupt record is ever delivered. Every new
// connection starts at a record boundary with a tcp_hello carrying the sequence index of
// its first record. With E = the next index expected: first > E reports the gap [E, first)
// (on_gap, records_missing); first < E means the sender resent records we already
// have: they are skipped (duplicates_skipped). The first connection sets E. Without the
// handshake the sequence index is the count of records received, and a lost partial
// record can only be counted (partial_discarded), not located.
//
// Thread safety: a tcp_receiver lives on its io_context; every member except stats()
// must be called from the thread running it. stats() from any thread.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "rill/connectors/framing.hpp"
#include "rill/connectors/tcp_endpoint.hpp"
#include "rill/core/source.hpp"

namespace rill {

struct tcp_source_options {
  tcp_endpoint endpoint = tcp_endpoint::listen("127.0.0.1", 0);
  rill::framing framing = rill::framing::fixed(32);
  /// Expect a tcp_hello at the start of every connection (the sender must send it).
  bool handshake = true;
  /// Bytes read per async_read_some (one batch of records per read). The read buffer is
  /// read_bytes, plus one record for fixed framing (the incomplete record kept in front).
  std::size_t read_bytes = std::size_t{256} << 10;
  /// SO_RCVBUF in bytes, set on the socket before connect/listen (it decides the TCP
  /// window scale); 0 = the kernel's default and autotuning (net.ipv4.tcp_rmem; Linux
  /// doubles the value and caps it at net.core.rmem_max).
  std::size_t receive_buffer_bytes = 0;
  /// SO_RCVLOWAT in bytes, set on every connection: the kernel wakes the receiver only
  /// once this many bytes are queued, or the peer closed, or the receive window is
  /// nearly full (socket(7); Linux tcp_poll). Fewer, larger reads for a bulk consumer
  /// off the latency path. 0 or 1 = wake at every arrival (the default). It governs
  /// wake-ups only: a read tried without waiting (a connection's first, and the one Asio
  /// tries straight after each read) takes whatever is queued, so a delivery can still
  /// be smaller. Costs latency: a record waits until enough bytes follow it; a sender
  /// that goes quiet with fewer than this many bytes unread leaves them waiting until it
  /// sends more or closes. Linux caps it at half the receive buffer when
  /// receive_buffer_bytes is set, and otherwise grows the buffer to fit it
  /// (tcp_set_rcvlowat). At most 1 GiB, else the tcp_receiver and tcp_source constructors
  /// throw config_error("<name>.receive_low_water_bytes"). If the kernel refuses the
  /// option, the connection goes on without it and on_error reports it (counted in
  /// errors).
  std::size_t receive_low_water_bytes = 0;
  /// tcp_receiver only. Read with blocking read(2) calls made by the thread running the
  /// io_context, one after another inside one handler, instead of asynchronous reads
  /// through Asio's reactor (which, in Boost 1.74, makes an epoll_wait and a read that
  /// fails with EAGAIN around every read that returns bytes). Each connection's socket is
  /// taken out of the reactor and put in blocking mode; the thread sleeps in the kernel
  /// until bytes arrive, and while it does, **no other handler of the io_context runs**
  /// (no timer, no tcp_sink completion, no accept of a newer connection). The handler
  /// returns to the io_context when a callback pauses (returns false or calls pause()),
  /// at EOF, on an error (then the connection ends as in the asynchronous mode: resync,
  /// reconnect) or after stop(); resume() posts it again. Use it only where everything
  /// else on the io_context can wait for the next bytes: a callback that leaves work on
  /// the loop (a tcp_sink with bytes in flight) returns false and calls resume() once
  /// that work is done (the streamed-sockets relays do). stop() and the callbacks keep
  /// the rules of the class: the thread running the io_context only, so a receiver
  /// blocked in a read ends when its peer sends, closes or resets the connection.
  /// tcp_source refuses it (a worker's loop runs other stages): its constructor throws
  /// config_error("<name>.block_in_read").
  bool block_in_read = false;
  tcp_backoff backoff{};
  std::string name = "tcp_source";  ///< used in error messages
  /// tcp_source (pipeline) only: a clean EOF at a record boundary ends the stream. When
  /// false the source waits for the next connection until runtime::request_stop().
  bool end_on_eof = true;
  /// tcp_source (pipeline) only: records queued between the socket and the pipeline;
  /// at the cap the receiver stops reading (TCP flow control pushes back to the sender).
  std::size_t queue_records = 65536;
};

struct tcp_receiver_stats {
  std::atomic<std::uint64_t> records{0};  ///< delivered
  std::atomic<std::uint64_t> bytes{0};    ///< wire bytes read
  std::atomic<std::uint64_t> connections{0};
  std::atomic<std::uint64_t> broken_mid_record{0};  ///< connections that ended mid-record
  std::atomic<std::uint64_t> partial_bytes_discarded{0};
  std::atomic<std::uint64_t> gaps{0};             ///< gap reports
  std::atomic<std::uint64_t> records_missing{0};  ///< sum of the gaps' lengths
  std::atomic<std::uint64_t> duplicates_skipped{0};
  std::atomic<std::uint64_t> errors{0};  ///< framing/hello errors, failed connects
};

class tcp_receiver {
 public:
  /// Records of one read, in order; sequence indexes first_seq, first_seq+1, ... Spans
  /// are valid during the call only. Return false to pause reading (resume()).
  using records_fn =
      std::function<bool(std::uint64_t first_seq, std::span<const std::span<const std::byte>>)>;
  /// The same records as one contiguous span: `n` records of the fixed size, back to back
  /// (`wire.size() == n * framing.size`), in the receiver's read buffer. Valid during the
  /// call only; the callee may change the bytes in place (stamp a field, say) and pass the
  /// span on, which saves a copy. Return false to pause.
  using batch_fn =
      std::function<bool(std::uint64_t first_seq, std::span<std::byte> wire, std::size_t n)>;
  using gap_fn = std::function<void(std::uint64_t from, std::uint64_t to)>;
  using error_fn = std::function<void(const std::error_code&, const std::string& message)>;

  /// Listen mode binds here (throws std::system_error naming the endpoint). Throws
  /// config_error for a bad framing or receive_low_water_bytes.
  tcp_receiver(boost::asio::io_context& io, tcp_source_options opts,
               std::shared_ptr<tcp_receiver_stats> stats = nullptr);
  ~tcp_receiver();  ///< stop()s.
  tcp_receiver(const tcp_receiver&) = delete;
  tcp_receiver& operator=(const tcp_receiver&) = delete;

  /// Each read's whole records, a span per record. Not called while on_batch is set.
  void on_records(records_fn f);
  /// Fast path for fixed framing (forwarding, bulk checks): each read's whole records as
  /// one span, no per-record work in the receiver. Replaces on_records. Throws
  /// config_error("<name>.on_batch") unless the framing is fixed with a record size <=
  /// read_bytes. (With fixed framing of that size the receiver never copies a record:
  /// an incomplete one stays in the read buffer and the next read lands behind it.)
  void on_batch(batch_fn f);
  /// Records [from, to) were lost (a sequence gap announced by a hello). Counted
  /// (records_missing) before the call.
  void on_gap(gap_fn f);
  /// Lost connections, framing errors (message names the endpoint and byte offset),
  /// failed connects. Counted before the call.
  void on_error(error_fn f);
  /// A connection ended cleanly (EOF at a record boundary).
  void on_eof(std::function<void()> f);

  /// Listens or connects (per the endpoint) and starts reading; set the callbacks first.
  /// Never blocks; errors go to on_error. Once.
  void start();
  /// Stops issuing reads after the current one (TCP flow control then slows the sender).
  void pause();
  /// Reads again after pause() or after on_records returned false. With block_in_read
  /// the reading handler is posted: it never blocks inside resume().
  void resume();
  /// Cancels everything; idempotent.
  void stop();
  /// Listen mode: the bound port (port 0 in the options = a free port); valid after start().
  std::uint16_t port() const noexcept;
  /// Counters (atomics): any thread.
  const tcp_receiver_stats& stats() const noexcept;
  /// Sequence index expected next.
  std::uint64_t next_seq() const noexcept;

  struct impl;

 private:
  std::shared_ptr<impl> p_;
};

/// One received record.
struct tcp_message {
  std::uint64_t seq = 0;
  std::vector<std::byte> payload;
};

/// A rill source of tcp_message, one split. The receiver starts on the worker running the
/// split (on its io_context) at the first poll; listen mode binds then too (a taken port
/// ends the split with an error in run_report::errors). Event time = arrival time
/// (system clock). The split ends at a clean EOF (end_on_eof) or at request_stop().
/// Gaps and connection errors are counted in stats() and listed, in order, by errors()
/// ("tcp_source: gap [a, b): N records lost on a broken connection"): the stream goes on.
class tcp_source {
 public:
  using value_type = tcp_message;
  using record_policy = unacked;  // a socket never acknowledges (record.hpp)
  /// Throws config_error("<name>.framing") for an invalid framing,
  /// config_error("<name>.receive_low_water_bytes") over 1 GiB,
  /// config_error("<name>.block_in_read") when block_in_read is set. Any thread, before
  /// the run.
  explicit tcp_source(tcp_source_options opts);
  /// One split: the one receiver (rill::source_of).
  std::size_t split_count() const noexcept { return 1; }
  /// The source's name in run reports and errors (options.name).
  std::string name() const { return opts_.name; }
  /// Counters of the receiver (shared: valid after the run too).
  std::shared_ptr<const tcp_receiver_stats> stats() const;
  /// The bound port once the receiver started (listen mode, port 0); 0 before.
  std::uint16_t port() const noexcept { return port_->load(); }
  /// Gap reports and connection errors so far (copy; any thread).
  std::vector<std::string> errors() const;

  struct state;
  class reader {
   public:
    explicit reader(std::shared_ptr<state> s) : s_(std::move(s)) {}
    template <class Emit>
    poll_status poll(Emit&& emit, std::size_t max) {
      const auto st = begin_poll();
      if (st != poll_status::more) return st;
      std::size_t n = 0;
      while (n < max && pop_into(scratch_)) {
        emit(record<tcp_message, unacked>{std::move(scratch_),
                                 std::chrono::time_point_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now())});
        ++n;
      }
      return end_poll();
    }
    std::string error() const;

   private:
    poll_status begin_poll();
    bool pop_into(tcp_message& m);
    poll_status end_poll();
    std::shared_ptr<state> s_;
    tcp_message scratch_;
  };
  /// Called by runtime::run on the calling thread before the workers start (rill::source_of).
  reader open(std::size_t split) const;

 private:
  tcp_source_options opts_;
  std::shared_ptr<tcp_receiver_stats> stats_;
  std::shared_ptr<std::atomic<std::uint16_t>> port_;
  struct log;
  std::shared_ptr<log> log_;
};

}  // namespace rill

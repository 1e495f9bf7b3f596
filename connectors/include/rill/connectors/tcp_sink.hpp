// rill/connectors/tcp_sink.hpp — sends framed records over TCP from an io_context, with
// reconnect-with-backoff, resend of the batch a broken connection interrupted, and a
// bounded buffer that tells the writer when to stop.
//
// Defines:
//   rill::tcp_sink_options   endpoint (connect or listen), framing, buffer, policy
//   rill::tcp_sink           the sender, on one io_context (a rill worker's or your own)
//   rill::tcp_sink_stats     counters, readable from any thread
//   rill::tcp_pipeline_sink<T, Encode>   a rill::sink_of<T> for stream<T>::sink(...): owns
//                            an io thread running a tcp_sink; backpressure through flush()
//
// Example (compiled by tests/banner_examples.py; standalone, your own loop):
//   boost::asio::io_context io;
//   rill::tcp_sink sink{io, {.endpoint = rill::tcp_endpoint::connect("127.0.0.1", 9000),
//                            .framing = rill::framing::fixed(32)}};
//   sink.start();                                  // connects; retries until the peer exists
//   std::array<std::byte, 32> rec{};
//   if (sink.writable()) sink.write(rec);          // framed, buffered, sent asynchronously
//   sink.close([&] { io.stop(); });                // drains, then shuts the connection down
//   io.run();
//
// Delivery rule (README "TCP connectors"): each connection starts with a tcp_hello giving
// the sequence index of its first record, so it starts at a record boundary. Records are
// numbered 0, 1, ... in write() order. When a write fails (EPIPE, ECONNRESET, ...) or the
// peer closes, the error is counted and reported, the connection is closed, and with
// policy reconnect the sink reconnects (backoff) and resends the batch that was in
// flight; records that had already left this process but never reached the peer are not
// resent: the receiver sees the jump in sequence indexes and reports the gap. With
// policy fail, the sink stops: write() drops (counted) and failed() is true.
//
// Thread safety: a tcp_sink lives on its io_context; every member except stats() must be
// called from the thread running it (construct anywhere before that). stats() from any
// thread. SIGPIPE: Asio sends with MSG_NOSIGNAL on Linux, so a closed peer is an error
// code, never a signal.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "rill/connectors/framing.hpp"
#include "rill/connectors/tcp_endpoint.hpp"
#include "rill/core/record.hpp"

namespace rill {

struct tcp_sink_options {
  tcp_endpoint endpoint{};
  rill::framing framing = rill::framing::fixed(32);
  /// Send a tcp_hello first on every connection (the receiver must expect it).
  bool handshake = true;
  /// Soft cap of buffered bytes (pending + in flight): writable() is false at or above
  /// it. A writer that checks writable() before each batch overshoots by one batch at most.
  std::size_t buffer_bytes = std::size_t{4} << 20;
  /// TCP_NODELAY (Nagle off): a small batch goes out at once instead of waiting for the
  /// peer's ACK, which matters for latency; throughput does not depend on it.
  bool no_delay = true;
  /// SO_SNDBUF in bytes, set on the socket before connect/listen; 0 = the kernel's
  /// default and autotuning (net.ipv4.tcp_wmem; Linux doubles the value and caps it at
  /// net.core.wmem_max). Bytes in the kernel are queued too: a small value bounds the
  /// queueing delay behind a slow peer, a large one saves wakeups.
  std::size_t send_buffer_bytes = 0;
  enum class policy : std::uint8_t { reconnect, fail } on_error = policy::reconnect;
  tcp_backoff backoff{};
  std::string name = "tcp_sink";  ///< used in error messages
};

/// Monotone counters (relaxed atomics; written by the sink's thread).
struct tcp_sink_stats {
  std::atomic<std::uint64_t> records_accepted{0};  ///< write() calls that took the record
  std::atomic<std::uint64_t> records_sent{0};      ///< handed to the kernel on a live connection
  std::atomic<std::uint64_t> bytes_sent{0};        ///< wire bytes incl. hellos and prefixes
  std::atomic<std::uint64_t> records_resent{0};    ///< resent after a broken connection
  std::atomic<std::uint64_t> records_dropped{
      0};                                        ///< dropped: policy fail, or write() after failure
  std::atomic<std::uint64_t> write_errors{0};    ///< connections lost (write/read errors, EOF)
  std::atomic<std::uint64_t> connect_errors{0};  ///< failed connect/accept attempts
  std::atomic<std::uint64_t> connections{0};     ///< connections established
  std::atomic<int> last_error{0};                ///< errno value of the last error (0 = none)
};

class tcp_sink {
 public:
  using error_fn = std::function<void(const std::error_code&, const std::string& message)>;

  /// Listen mode binds here (throws std::system_error naming the endpoint); throws
  /// config_error for a bad framing. Nothing happens on the network before start().
  tcp_sink(boost::asio::io_context& io, tcp_sink_options opts);
  ~tcp_sink();  ///< stop()s.
  tcp_sink(const tcp_sink&) = delete;
  tcp_sink& operator=(const tcp_sink&) = delete;

  /// Starts connecting (connect mode; retries with backoff until the peer exists) or
  /// accepting (listen mode; a newer connection supersedes the current one).
  void start();

  /// Frames `payload` and buffers it; sending is asynchronous. Returns false (record not
  /// taken, dropped counter +1) only when the sink failed (policy fail) or was stopped,
  /// or when the payload does not fit the framing (wrong size / too long: counted as an
  /// error too). Never blocks. Does NOT check the buffer cap: see writable().
  bool write(std::span<const std::byte> payload);
  /// Appends `n` records that are already framed, back to back in `wire` (fast path for
  /// forwarding: the framing is not re-checked). Same rules as write(). Fixed framing,
  /// connected, nothing buffered, no write in progress: `wire` is sent at once with one
  /// non-blocking send from the caller's memory (no copy) and only what the kernel did not
  /// take is buffered — from the first record it did not take whole, which a reconnect
  /// resends whole.
  bool write_framed(std::span<const std::byte> wire, std::size_t n);
  /// buffered_bytes() < buffer_bytes and not failed.
  bool writable() const noexcept;
  /// Bytes framed and not yet sent (pending + in flight).
  std::size_t buffered_bytes() const noexcept;
  /// A connection is established (and its hello sent, with the handshake).
  bool connected() const noexcept;
  /// Policy fail hit an error, or stop() was called: writes are refused from now on.
  bool failed() const noexcept;

  /// Called (on the sink's thread) once the buffer drops below half of buffer_bytes
  /// after writable() had become false: resume writing.
  void on_writable(std::function<void()> f);
  /// Called after each completed write with the total records_sent (after a direct send
  /// of write_framed: posted, never from inside write_framed).
  void on_sent(std::function<void(std::uint64_t)> f);
  /// Called for every lost connection / failed write (the error the kernel gave:
  /// EPIPE, ECONNRESET, eof...), after it was counted, before reconnecting or failing.
  void on_error(error_fn f);

  /// Graceful: `done` is called once everything buffered was sent and the connection
  /// was shut down — or at once when the sink failed / was stopped (then the rest is
  /// counted as dropped). Never blocks.
  void close(std::function<void()> done);
  /// Abort: closes the socket and cancels every timer and operation; pending handlers
  /// complete promptly with operation_aborted. Idempotent. Buffered records count as dropped.
  void stop();

  /// Listen mode: the bound port (port 0 in the options = a free port).
  std::uint16_t port() const noexcept;
  /// Counters (atomics): any thread.
  const tcp_sink_stats& stats() const noexcept;
  /// Sequence index the next write() gets.
  std::uint64_t next_seq() const noexcept;

  struct impl;

 private:
  std::shared_ptr<impl> p_;
};

/// A rill::sink_of<T>: stream<T>::sink(std::make_shared<tcp_pipeline_sink<T, Encode>>(...)).
/// Runs a tcp_sink on an io thread of its own (so it can drain after the run's workers
/// stopped). `Encode` is `void(const T&, std::vector<std::byte>& payload)` (appends the
/// record's payload). write() is called by workers: encode, then hand over under a mutex.
/// Backpressure: flush(worker) returns false while more than `options.buffer_bytes`
/// are staged or buffered; the source driver then stops reading and retries.
/// end(worker) from every worker closes the connection gracefully; wait() blocks the
/// calling (non-worker) thread until that finished or the timeout passed.
template <class T, class Encode>
class tcp_pipeline_sink {
 public:
  tcp_pipeline_sink(std::size_t workers, tcp_sink_options opts, Encode enc = {})
      : workers_(workers),
        cap_(opts.buffer_bytes),
        enc_(std::move(enc)),
        guard_(io_.get_executor()),
        sink_(io_, std::move(opts)) {
    sink_.on_writable([this] { drain(); });
    sink_.on_sent([this](std::uint64_t) {
      sink_bytes_.store(sink_.buffered_bytes(), std::memory_order_relaxed);
    });
    boost::asio::post(io_, [this] { sink_.start(); });
    thread_ = std::thread([this] { io_.run(); });
  }
  ~tcp_pipeline_sink() {
    boost::asio::post(io_, [this] { sink_.stop(); });
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  void write(std::size_t, record<T>&& r) {
    std::vector<std::byte> payload;
    enc_(static_cast<const T&>(r.value), payload);
    bool kick;
    {
      std::lock_guard lk(mu_);
      staged_bytes_ += payload.size();
      staged_.push_back(std::move(payload));
      kick = !kicked_;
      kicked_ = true;
    }
    if (kick) boost::asio::post(io_, [this] { drain(); });
  }
  void progress(std::size_t, event_time) {}
  void end(std::size_t) {
    std::lock_guard lk(mu_);
    if (++ended_ == workers_) boost::asio::post(io_, [this] { drain(); });
  }
  /// False while the sink is over its buffer cap (backpressure to the source).
  bool flush(std::size_t) {
    std::lock_guard lk(mu_);
    return staged_bytes_ + sink_bytes_.load(std::memory_order_relaxed) < cap_;
  }
  /// Blocks (non-worker thread) until every worker ended and everything was sent (or the
  /// sink failed). Returns false on timeout.
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return closed_; });
  }
  const tcp_sink_stats& stats() const noexcept { return sink_.stats(); }

 private:
  void drain() {  // on io_
    std::deque<std::vector<std::byte>> batch;
    bool all_ended, more;
    {
      std::lock_guard lk(mu_);
      while (!staged_.empty() && (sink_.writable() || sink_.failed())) {
        staged_bytes_ -= staged_.front().size();
        batch.push_back(std::move(staged_.front()));
        staged_.pop_front();
        if (batch.size() >= 4096) break;
      }
      more = kicked_ = !staged_.empty();  // more left: on_writable or the post below continues
      all_ended = ended_ == workers_ && staged_.empty();
    }
    for (auto& b : batch) sink_.write(b);
    sink_bytes_.store(sink_.buffered_bytes(), std::memory_order_relaxed);
    if (more && sink_.writable()) boost::asio::post(io_, [this] { drain(); });
    if (all_ended && !closing_) {
      closing_ = true;
      sink_.close([this] {
        std::lock_guard lk(mu_);
        closed_ = true;
        cv_.notify_all();
      });
    }
  }

  std::size_t workers_, cap_;
  Encode enc_;
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  tcp_sink sink_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<std::byte>> staged_;
  std::size_t staged_bytes_ = 0, ended_ = 0;
  std::atomic<std::size_t> sink_bytes_{0};
  bool kicked_ = false, closing_ = false, closed_ = false;
};

}  // namespace rill

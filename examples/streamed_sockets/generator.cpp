// generator.cpp — streamed_sockets --role generator. See roles.hpp and main.cpp.
//
// Two threads, as bench/tcp_chain_baseline's generator: the main loop builds and sends
// the records; the answers arrive on an io_context of their own, so a request's round
// trip never waits behind the build and send of a 256 KiB chunk, nor behind the main
// thread's scheduling (a thread that only receives answers uses little CPU, and the
// kernel runs it soon after it wakes).
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include "roles.hpp"

namespace streamed_sockets {

int generator(const config& c) {
  asio::io_context io{1}, answers_io{1};
  rill::tcp_sink out{io, sink_opts(c, c.out.at(0), "generator->indexer")};
  rill::tcp_receiver back{answers_io, source_opts(c.back, "generator<-processor")};
  log_errors(out);
  const std::uint64_t total = c.bytes / blob;
  const auto real_every = std::chrono::nanoseconds(std::int64_t(1e9 / c.real_per_s));
  std::uint64_t sent = 0;
  // real_sent: written by the main thread; real_got: by the answers thread. closed: set
  // by the main thread once everything was sent and the connection shut down.
  // answers_ended: set by the answers thread when the processor closed the answer
  // connection, which it does once its own input ended.
  std::atomic<std::uint64_t> real_sent{0}, real_got{0};
  std::atomic<bool> closed{false}, answers_ended{false};
  // Round trip of the real requests, ns (served on --metrics-port while it runs); its
  // cell's one writer is the answers thread.
  auto& m = *c.metrics;
  auto& lat = m.cell(m.add_histogram("rill_generator_round_trip_seconds", "real request round trip", 1e-9), 0);
  std::vector<std::uint64_t> round_trips;  // --latency-out only; the answers thread's
  std::ofstream latency_file;  // opened now: an unwritable path fails before the run
  if (!c.latency_out.empty()) {
    latency_file.open(c.latency_out);
    if (!latency_file) {
      std::fprintf(stderr, "generator: --latency-out %s: %s\n", c.latency_out.c_str(), std::strerror(errno));
      return 2;
    }
  }
  auto& sent_total = m.cell(m.add_counter("rill_generator_records_sent_total", "records sent"), 0);
  std::vector<std::byte> chunk;  // records built in place, handed to the sink at once
  auto t0 = clk::now();  // reset when both connections are up (start_when_connected)
  auto sent_at = t0;     // when the last record was handed to the kernel (the close)
  auto next_real = t0;
  bool closing = false;
  asio::steady_timer tick{io}, deadline{io};

  // Both loops end when the last answer is in after the close and the processor closed
  // the answer connection (or at the deadline). Leaving before that close would look to
  // the processor like a lost connection while records may still be on their way to it:
  // it would hold its input for the reconnect, and the chain would never end. A run in
  // which no answer connection ever came does not wait for it.
  auto all_answered = [&] {
    return closed.load() && real_got.load() == real_sent.load() &&
           (answers_ended.load() || back.stats().connections.load() == 0);
  };
  auto stop_both = [&] {
    io.stop();
    answers_io.stop();
  };
  back.on_records([&](std::uint64_t, std::span<const std::span<const std::byte>> recs) {
    const auto t = now_ns();
    for (auto r : recs) {
      const std::uint64_t ns = t - get64(r.data() + 16);
      lat.record(ns);
      if (!c.latency_out.empty()) round_trips.push_back(ns);
    }
    real_got.fetch_add(recs.size());
    if (all_answered()) stop_both();
    return true;
  });
  back.on_eof([&] {
    answers_ended = true;
    if (all_answered()) stop_both();
  });
  auto finish = [&] {
    closing = true;
    out.close([&] {
      sent_at = clk::now();
      closed = true;
      // An answer that came in before `closed` was set found it false: look again there.
      asio::post(answers_io, [&] {
        if (all_answered()) stop_both();
      });
    });
    deadline.expires_after(c.stall_timeout);  // bound the wait for the last responses
    deadline.async_wait([&](auto ec) {
      if (ec) return;
      std::fprintf(stderr,
                   "generator: %lld s after the last record, %llu of %llu real requests are "
                   "unanswered and the processor has %s the answer connection: stopping\n",
                   (long long)c.stall_timeout.count(),
                   (unsigned long long)(real_sent.load() - real_got.load()),
                   (unsigned long long)real_sent.load(),
                   answers_ended.load() ? "closed" : "not closed");
      stop_both();
    });
  };
  // Writes what is due now: fake records up to rate * elapsed (all of them when rate = 0),
  // one real request whenever its period passed; then sleeps one tick (paced) or yields to
  // the loop (full speed). Records are built in chunks of up to 256 KiB (the write size of
  // bench/tcp_chain_baseline) and handed to the sink with one write_framed() (fixed
  // framing: the record is its own wire format).
  std::function<void()> pump = [&] {
    if (closing) return;
    const auto now = clk::now();
    const double el = std::chrono::duration<double>(now - t0).count();
    const std::uint64_t due =
        c.rate_gbps > 0
            ? std::min<std::uint64_t>(total, std::uint64_t(el * c.rate_gbps * 1e9 / blob) + 1)
            : total;
    while (sent < due && out.writable()) {
      const std::uint64_t n = std::min<std::uint64_t>(due - sent, 8192);
      chunk.assign(n * blob, std::byte{0});
      for (std::uint64_t i = 0; i < n; ++i) {
        std::byte* r = chunk.data() + i * blob;
        if (now >= next_real) {
          r[8] = std::byte{1};
          put64(r + 16, now_ns());
          put64(r + 24, real_sent.fetch_add(1));
          next_real += real_every;
        } else {
          put64(r + 24, sent + i);
        }
      }
      out.write_framed(chunk, n);
      sent += n;
      sent_total.add(n);
    }
    if (sent >= total) return finish();
    if (!out.writable()) return;  // on_writable resumes
    tick.expires_after(c.rate_gbps > 0 ? c.tick : 0us);
    tick.async_wait([&](auto ec) {
      if (!ec) pump();
    });
  };
  out.on_writable([&] { asio::post(io, [&] { pump(); }); });
  // While records are still to go: a run in which the indexer takes none for
  // stall_timeout (it is gone, stopped, or never came) ends instead of waiting forever.
  // Checked once a second. Progress = records the kernel took (the sink's records_sent);
  // a sink with nothing waiting (a slow --rate) is not stalled.
  bool stalled = false;
  asio::steady_timer watchdog{io};
  std::uint64_t taken = 0;
  auto taken_at = clk::now();
  std::function<void()> watch = [&] {
    watchdog.expires_after(1s);
    watchdog.async_wait([&](auto ec) {
      if (ec || closing) return;
      const std::uint64_t now_taken = out.stats().records_sent.load();
      if (now_taken != taken || out.buffered_bytes() == 0) {
        taken = now_taken;
        taken_at = clk::now();
      } else if (clk::now() - taken_at >= c.stall_timeout) {
        std::fprintf(stderr,
                     "generator: no record left for %lld s (%llu of %llu sent; the indexer "
                     "does not read): stopping\n",
                     (long long)c.stall_timeout.count(), (unsigned long long)now_taken,
                     (unsigned long long)total);
        stalled = true;
        return stop_both();
      }
      watch();
    });
  };
  // The clock starts once the records can flow and the answers can come back, as in
  // bench/tcp_chain_baseline, whose generator starts after the whole chain has connected:
  // a request stamped before would measure the connection set-up (sinks retry with a
  // backoff of 10 ms and more), and the rate would owe a burst for the time it waited.
  // After connect_wait it starts anyway (a peer that never comes must not hang the run:
  // the records wait in the sink until the watchdog below gives up, and unanswered
  // requests make the exit status 1).
  constexpr auto connect_wait = 10s;
  asio::steady_timer start{io};
  const auto waiting_since = clk::now();
  std::function<void()> start_when_connected = [&] {
    const bool up = out.connected() && back.stats().connections.load() > 0;
    if (up || clk::now() - waiting_since >= connect_wait) {
      if (!up) {
        const bool indexer = out.connected(), processor = back.stats().connections.load() > 0;
        std::fprintf(stderr, "generator: not connected after %lld s (%s): starting anyway\n",
                     (long long)connect_wait.count(),
                     !indexer && !processor ? "no indexer, no processor's answers"
                     : !indexer             ? "no indexer"
                                            : "no processor's answers");
      }
      t0 = next_real = taken_at = clk::now();
      watch();
      return pump();
    }
    start.expires_after(1ms);
    start.async_wait([&](auto ec) {
      if (!ec) start_when_connected();
    });
  };
  back.start();
  out.start();
  asio::post(io, [&] { start_when_connected(); });
  std::thread answers([&] { answers_io.run(); });
  io.run();
  answers_io.stop();  // io ran out of work without a stop_both(): end the answers loop too
  answers.join();
  const double el = std::chrono::duration<double>((closed ? sent_at : clk::now()) - t0).count();
  auto pct = [&](double p) { return double(lat.quantile(p / 100)) / 1e6; };  // within 3.1%
  std::printf(
      "generator: sent %llu records (%.3f GB) in %.2f s = %.3f GB/s offered; real requests %llu, "
      "answered %llu\n",
      (unsigned long long)sent, double(sent * blob) / 1e9, el, double(sent * blob) / 1e9 / el,
      (unsigned long long)real_sent.load(), (unsigned long long)real_got.load());
  std::printf(
      "latency: average %.3f ms, p1/p10/p50/p90/p99/p99.9 = %.3f/%.3f/%.3f/%.3f/%.3f/%.3f ms (N = "
      "%llu)\n",
      lat.mean() / 1e6, pct(1), pct(10), pct(50), pct(90), pct(99), pct(99.9),
      (unsigned long long)lat.count());
  if (!c.latency_out.empty()) {
    for (auto ns : round_trips) latency_file << ns << '\n';
    if (!latency_file.flush()) {
      std::fprintf(stderr, "generator: --latency-out %s: cannot write\n", c.latency_out.c_str());
      return 1;
    }
  }
  return !stalled && real_got.load() == real_sent.load() ? 0 : 1;
}

}  // namespace streamed_sockets

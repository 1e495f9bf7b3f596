// streamed_sockets — the five-process TCP latency test of issue 6, one binary, one role
// per process:
//
//   generator --> indexer ==> forwarder --> processor --> terminator
//       ^            |  \         |             |
//       |          disk  \tap    disk           | real requests only
//       |                 `--------------------------------> terminator (tap port)
//       `-----------------------------------------------'  (responses)
//
// Records are 32-byte blobs, fixed framing. The generator sends fake traffic at a target
// rate and "real" requests at a fixed rate (byte 8 = 1, bytes 16..23 = its steady-clock
// send time in ns); the indexer stamps bytes 0..7 with the record's 64-bit sequence
// index and fans the stream out to the forwarder, the terminator's tap port and its
// segment files; the forwarder passes it on and keeps its own segment files; the
// processor passes everything to the terminator and answers each real request back to
// the generator, which prints the latency; the terminator prints GB/s. Any start order
// works (sinks connect with retries); scripts/streamed_sockets.sh runs all five.
//
//   streamed_sockets --role indexer --in listen:127.0.0.1:7101
//       --out connect:127.0.0.1:7102 --out connect:127.0.0.1:7105 --dir /tmp/ss/indexer
#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rill/connectors/fan_out.hpp"
#include "rill/connectors/file_sink.hpp"
#include "rill/connectors/tcp_sink.hpp"
#include "rill/connectors/tcp_source.hpp"

#include "cli_checks.hpp"

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

constexpr std::size_t blob = 32;

struct config {
  std::string role, in, back, dir;
  std::vector<std::string> out;
  std::uint64_t bytes = std::uint64_t{1} << 30;
  double rate_gbps = 0;      // generator: fake traffic target, GB/s; 0 = as fast as possible
  double real_per_s = 1000;  // generator: real requests per second
  std::chrono::microseconds tick{250};  // generator, paced: time between two writes
  bool nagle = false, quiet = false;
  std::size_t buffer_bytes = std::size_t{1} << 20;         // per TCP destination (bounded queue)
  std::uint64_t segment_records = std::uint64_t{1} << 20;  // 32 MiB segment files
};

std::uint64_t now_ns() {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now().time_since_epoch()).count());
}
void put64(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
std::uint64_t get64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

rill::tcp_sink_options sink_opts(const config& c, const std::string& ep, const std::string& name) {
  return {.endpoint = rill::tcp_endpoint::parse(ep),
          .framing = rill::framing::fixed(blob),
          .buffer_bytes = c.buffer_bytes,
          .no_delay = !c.nagle,
          .name = name};
}
rill::tcp_source_options source_opts(const std::string& ep, const std::string& name) {
  return {.endpoint = rill::tcp_endpoint::parse(ep),
          .framing = rill::framing::fixed(blob),
          .read_bytes = std::size_t{256} << 10,
          .name = name};
}
void log_errors(rill::tcp_sink& s) {
  s.on_error([](const std::error_code&, const std::string& m) {
    std::fprintf(stderr, "%s\n", m.c_str());
  });
}

// ---------------------------------------------------------------- generator

int generator(const config& c) {
  asio::io_context io{1};
  rill::tcp_sink out{io, sink_opts(c, c.out.at(0), "generator->indexer")};
  rill::tcp_receiver back{io, source_opts(c.back, "generator<-processor")};
  log_errors(out);
  const std::uint64_t total = c.bytes / blob;
  const auto real_every = std::chrono::nanoseconds(std::int64_t(1e9 / c.real_per_s));
  std::uint64_t sent = 0, real_sent = 0, real_got = 0;
  std::vector<double> lat_ms;
  std::vector<std::byte> chunk;  // records built in place, handed to the sink at once
  const auto t0 = clk::now();
  auto next_real = t0;
  bool closing = false, closed = false;  // closed: everything sent, connection shut down
  asio::steady_timer tick{io}, deadline{io};

  back.on_records([&](std::uint64_t, std::span<const std::span<const std::byte>> recs) {
    const auto t = now_ns();
    for (auto r : recs) {
      lat_ms.push_back(double(t - get64(r.data() + 16)) / 1e6);
      ++real_got;
    }
    if (closing && closed && real_got == real_sent) io.stop();
    return true;
  });
  auto finish = [&] {
    closing = true;
    out.close([&] {
      closed = true;
      if (real_got == real_sent) io.stop();
    });
    deadline.expires_after(30s);  // bound the wait for the last responses
    deadline.async_wait([&](auto ec) {
      if (!ec) io.stop();
    });
  };
  // Writes what is due now: fake records up to rate * elapsed (all of them when rate = 0),
  // one real request whenever its period passed; then sleeps one tick (paced) or yields to
  // the loop (full speed). Records are built in chunks of up to 64 KiB and handed to the
  // sink with one write_framed() (fixed framing: the record is its own wire format).
  std::function<void()> pump = [&] {
    if (closing) return;
    const auto now = clk::now();
    const double el = std::chrono::duration<double>(now - t0).count();
    const std::uint64_t due =
        c.rate_gbps > 0
            ? std::min<std::uint64_t>(total, std::uint64_t(el * c.rate_gbps * 1e9 / blob) + 1)
            : total;
    while (sent < due && out.writable()) {
      const std::uint64_t n = std::min<std::uint64_t>(due - sent, 2048);
      chunk.assign(n * blob, std::byte{0});
      for (std::uint64_t i = 0; i < n; ++i) {
        std::byte* r = chunk.data() + i * blob;
        if (now >= next_real) {
          r[8] = std::byte{1};
          put64(r + 16, now_ns());
          put64(r + 24, real_sent++);
          next_real += real_every;
        } else {
          put64(r + 24, sent + i);
        }
      }
      out.write_framed(chunk, n);
      sent += n;
    }
    if (sent >= total) return finish();
    if (!out.writable()) return;  // on_writable resumes
    tick.expires_after(c.rate_gbps > 0 ? c.tick : 0us);
    tick.async_wait([&](auto ec) {
      if (!ec) pump();
    });
  };
  out.on_writable([&] { asio::post(io, [&] { pump(); }); });
  back.start();
  out.start();
  asio::post(io, [&] { pump(); });
  io.run();
  const double el = std::chrono::duration<double>(clk::now() - t0).count();
  std::sort(lat_ms.begin(), lat_ms.end());
  auto pct = [&](double p) {
    return lat_ms.empty()
               ? 0.0
               : lat_ms[std::min(lat_ms.size() - 1, std::size_t(p / 100 * double(lat_ms.size())))];
  };
  double avg = 0;
  for (double v : lat_ms) avg += v;
  avg = lat_ms.empty() ? 0 : avg / double(lat_ms.size());
  std::printf(
      "generator: sent %llu records (%.3f GB) in %.2f s = %.3f GB/s offered; real requests %llu, "
      "answered %llu\n",
      (unsigned long long)sent, double(sent * blob) / 1e9, el, double(sent * blob) / 1e9 / el,
      (unsigned long long)real_sent, (unsigned long long)real_got);
  std::printf(
      "latency: average %.3f ms, p1/p10/p50/p90/p99 = %.3f/%.3f/%.3f/%.3f/%.3f ms (N = %zu)\n", avg,
      pct(1), pct(10), pct(50), pct(90), pct(99), lat_ms.size());
  return real_got == real_sent ? 0 : 1;
}

// ---------------------------------------------------------------- indexer / forwarder / processor

int relay(const config& c) {
  asio::io_context io{1};
  const bool stamp = c.role == "indexer", answer = c.role == "processor";
  rill::tcp_receiver in{io, source_opts(c.in, c.role + "<-")};
  std::vector<std::unique_ptr<rill::tcp_sink>> sinks;
  rill::fan_out out;
  for (std::size_t i = 0; i < c.out.size(); ++i) {
    sinks.push_back(
        std::make_unique<rill::tcp_sink>(io, sink_opts(c, c.out[i], c.role + "->" + c.out[i])));
    log_errors(*sinks.back());
    out.add(rill::fan_out::to(*sinks.back(), rill::fan_out::slow::backpressure, c.out[i]));
  }
  std::unique_ptr<rill::tcp_sink> reply;
  if (answer) {
    reply = std::make_unique<rill::tcp_sink>(io, sink_opts(c, c.back, "processor->generator"));
    log_errors(*reply);
  }
  std::unique_ptr<rill::segment_file_sink> files;
  if (!c.dir.empty()) {
    files = std::make_unique<rill::segment_file_sink>(
        rill::segment_file_options{.directory = c.dir,
                                   .prefix = c.role,
                                   .record_bytes = blob,
                                   .records_per_segment = c.segment_records});
    out.add(rill::fan_out::to(*files, rill::fan_out::slow::backpressure, "disk"));
  }
  in.on_error([](const std::error_code&, const std::string& m) {
    std::fprintf(stderr, "%s\n", m.c_str());
  });
  in.on_gap([&](std::uint64_t a, std::uint64_t b) {
    std::fprintf(stderr, "%s: gap [%llu, %llu)\n", c.role.c_str(), (unsigned long long)a,
                 (unsigned long long)b);
  });
  std::vector<std::byte> batch;
  // Backpressure: a full target pauses the receiver; a TCP sink's on_writable resumes it.
  // The disk has no callback (its thread drains it): a 1 ms timer looks again meanwhile.
  bool paused = false;
  asio::steady_timer retry{io};
  std::function<void()> wait_ready = [&] {
    if (!paused) return;
    if (out.ready()) {
      paused = false;
      retry.cancel();
      in.resume();
      return;
    }
    retry.expires_after(1ms);
    retry.async_wait([&](auto ec) {
      if (!ec) wait_ready();
    });
  };
  for (auto& s : sinks) s->on_writable([&] { wait_ready(); });
  // One call per read: n records back to back in `wire` (the receiver's buffer).
  in.on_batch([&](std::uint64_t first, std::span<const std::byte> wire, std::size_t n) {
    if (stamp) {  // the indexer writes the index into bytes 0..7: a copy it may change
      batch.assign(wire.begin(), wire.end());
      for (std::size_t i = 0; i < n; ++i) put64(batch.data() + i * blob, first + i);
      wire = batch;
    }
    if (answer)
      for (std::size_t off = 0; off < wire.size(); off += blob)
        if (wire[off + 8] == std::byte{1}) reply->write(wire.subspan(off, blob));
    if (out.write(wire, n)) return true;
    paused = true;  // the receiver pauses when this returns; resume after it returned
    asio::post(io, [&] { wait_ready(); });
    return false;
  });
  std::size_t open = sinks.size() + (reply ? 1 : 0);
  in.on_eof([&] {
    in.stop();
    if (open == 0) io.stop();
    for (auto& s : sinks)
      s->close([&] {
        if (--open == 0) io.stop();
      });
    if (reply)
      reply->close([&] {
        if (--open == 0) io.stop();
      });
  });
  in.start();
  for (auto& s : sinks) s->start();
  if (reply) reply->start();
  io.run();
  if (files) files->close();
  std::printf("%s: %llu records in, %llu written to disk%s\n", c.role.c_str(),
              (unsigned long long)in.stats().records.load(),
              (unsigned long long)(files ? files->records_written() : 0),
              files && files->failed() ? (" DISK ERROR " + files->error()).c_str() : "");
  return files && files->failed() ? 1 : 0;
}

// ---------------------------------------------------------------- terminator

int terminator(const config& c) {
  asio::io_context io{1};
  struct input {
    std::unique_ptr<rill::tcp_receiver> rx;
    std::uint64_t index_errors = 0, expect = 0;
    bool eof = false;
    clk::time_point first{}, last{};
  };
  std::vector<input> ins(1 + (c.back.empty() ? 0 : 1));
  std::size_t eofs = 0;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    auto& in = ins[i];
    in.rx = std::make_unique<rill::tcp_receiver>(
        io, source_opts(i == 0 ? c.in : c.back, i == 0 ? "terminator" : "terminator-tap"));
    in.rx->on_batch([&in](std::uint64_t, std::span<const std::byte> wire, std::size_t) {
      if (in.first == clk::time_point{}) in.first = clk::now();
      for (std::size_t off = 0; off < wire.size(); off += blob) {
        if (get64(wire.data() + off) != in.expect) ++in.index_errors;
        in.expect = get64(wire.data() + off) + 1;
      }
      in.last = clk::now();
      return true;
    });
    in.rx->on_eof([&, i] {
      ins[i].rx->stop();
      if (++eofs == ins.size()) io.stop();
    });
    in.rx->start();
  }
  io.run();
  int rc = 0;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    auto& in = ins[i];
    const auto bytes = in.rx->stats().bytes.load();
    const double s = std::chrono::duration<double>(in.last - in.first).count();
    std::printf(
        "terminator%s: %llu records, %.3f GB in %.3f s = %.3f GB/s; index errors %llu, gaps %llu\n",
        i == 0 ? "" : " (tap)", (unsigned long long)in.rx->stats().records.load(),
        double(bytes) / 1e9, s, s > 0 ? double(bytes) / 1e9 / s : 0.0,
        (unsigned long long)in.index_errors, (unsigned long long)in.rx->stats().gaps.load());
    if (in.index_errors || in.rx->stats().gaps.load()) rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // belt and braces: Asio already sends with MSG_NOSIGNAL
  config c;
  std::int64_t tick_us = c.tick.count();
  CLI::App app{"streamed_sockets: one role of the five-process TCP latency test"};
  app.add_option("--role", c.role, "generator | indexer | forwarder | processor | terminator")
      ->required()
      ->check(CLI::IsMember({"generator", "indexer", "forwarder", "processor", "terminator"}));
  app.add_option("--in", c.in, "input endpoint, e.g. listen:127.0.0.1:7101");
  app.add_option("--out", c.out,
                 "output endpoint(s), e.g. connect:127.0.0.1:7102 (repeat to fan out)");
  app.add_option("--back", c.back,
                 "generator: where responses arrive (listen:...); processor: where to send them "
                 "(connect:...); terminator: the tap input (listen:...)");
  app.add_option("--dir", c.dir,
                 "indexer/forwarder: directory for segment files (empty = no disk)");
  // Numeric options: rill_examples checks (the message names the value and the range).
  constexpr std::int64_t pib = std::int64_t{1} << 50;
  app.add_option("--bytes", c.bytes, "generator: bytes to send (multiple of 32)")
      ->check(rill_examples::whole_number(32, pib, "a multiple of 32, at most 1 PiB"));
  app.add_option("--rate", c.rate_gbps,
                 "generator: fake traffic target in GB/s (0 = as fast as possible)")
      ->check(rill_examples::number_in(0, 1000, false, "0 = as fast as possible"));
  app.add_option("--real-rate", c.real_per_s, "generator: real requests per second")
      ->check(rill_examples::number_in(0, 1e6, true));
  app.add_option("--tick", tick_us,
                 "generator, paced (--rate > 0): microseconds between two writes (larger = "
                 "fewer, bigger writes at every hop)")
      ->check(rill_examples::whole_number(1, 1'000'000'000));
  app.add_option("--segment-records", c.segment_records, "records per segment file")
      ->check(rill_examples::whole_number(1, std::int64_t{1} << 40));
  app.add_option("--buffer", c.buffer_bytes,
                 "bytes buffered per TCP destination before backpressure")
      ->check(rill_examples::whole_number(1, pib));
  app.add_flag("--nagle", c.nagle, "leave Nagle's algorithm on (default: TCP_NODELAY)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;      // bad arguments: 2
  }
  if (c.bytes % blob != 0) {
    std::fprintf(stderr, "--bytes: must be a multiple of %zu (the record size), got %llu\n", blob,
                 (unsigned long long)c.bytes);
    return 2;
  }
  // The endpoints each role needs (without them it would fail later with a less clear message).
  auto need = [&](bool ok, const char* what) {
    if (!ok) std::fprintf(stderr, "streamed_sockets: --role %s needs %s\n", c.role.c_str(), what);
    return ok;
  };
  const bool gen = c.role == "generator";
  if (!need(gen || !c.in.empty(), "--in ENDPOINT") || !need(!gen || !c.out.empty(), "--out ENDPOINT") ||
      !need(!(gen || c.role == "processor") || !c.back.empty(), "--back ENDPOINT"))
    return 2;
  c.tick = std::chrono::microseconds{tick_us};
  try {
    if (c.role == "generator") return generator(c);
    if (c.role == "terminator") return terminator(c);
    return relay(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streamed_sockets %s: %s\n", c.role.c_str(), e.what());
    return 2;
  }
}

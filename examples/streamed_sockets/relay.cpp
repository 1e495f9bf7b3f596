// relay.cpp — streamed_sockets --role indexer | forwarder | processor. See roles.hpp and main.cpp.
#include "roles.hpp"

namespace streamed_sockets {

int relay(const config& c) {
  asio::io_context io{1};
  const bool stamp = c.role == "indexer", answer = c.role == "processor";
  auto in_opts = source_opts(c.in, c.role + "<-");
  in_opts.block_in_read = !c.reactor_reads;
  rill::tcp_receiver in{io, in_opts};
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
                                   .records_per_segment = c.segment_records,
                                   .write_on_caller = !c.disk_thread});
    out.add(rill::fan_out::to(*files, rill::fan_out::slow::backpressure, "disk"));
  }
  in.on_error([](const std::error_code&, const std::string& m) {
    std::fprintf(stderr, "%s\n", m.c_str());
  });
  in.on_gap([&](std::uint64_t a, std::uint64_t b) {
    std::fprintf(stderr, "%s: gap [%llu, %llu)\n", c.role.c_str(), (unsigned long long)a,
                 (unsigned long long)b);
  });
  // Backpressure: a full target pauses the receiver; a TCP sink's on_writable resumes it.
  // Disk written on the loop is always ready; on its own thread (--disk-thread) it has no
  // callback (the thread drains it): a 1 ms timer looks again meanwhile.
  // Blocking reads (the default) sleep in read(2) with the loop held, so the receiver
  // also pauses while any TCP destination has bytes in flight (the kernel did not take a
  // whole batch), as the baseline's blocking write does; the sinks' on_sent resumes it.
  // on_sent is set only while paused: set for good, each direct send would post a
  // handler that runs only once the reading handler returns. A destination that is not
  // connected holds the receiver too (its connect retries need the loop), from the start.
  std::vector<rill::tcp_sink*> tcp_outs;
  for (auto& s : sinks) tcp_outs.push_back(s.get());
  if (reply) tcp_outs.push_back(reply.get());
  auto all_connected = [&] {
    return std::all_of(tcp_outs.begin(), tcp_outs.end(),
                       [](const rill::tcp_sink* s) { return s->connected(); });
  };
  auto idle = [&] {
    return !in_opts.block_in_read ||
           (all_connected() &&
            std::all_of(tcp_outs.begin(), tcp_outs.end(),
                        [](const rill::tcp_sink* s) { return s->buffered_bytes() == 0; }));
  };
  bool paused = false;
  asio::steady_timer retry{io};
  std::function<void()> wait_ready;
  auto watch_sent = [&](bool on) {
    for (auto* s : tcp_outs)
      s->on_sent(on ? std::function<void(std::uint64_t)>([&](std::uint64_t) { wait_ready(); })
                    : nullptr);
  };
  wait_ready = [&] {
    if (!paused) return;
    if (out.ready() && idle()) {
      paused = false;
      retry.cancel();
      if (in_opts.block_in_read) watch_sent(false);
      in.resume();
      return;
    }
    if (out.ready() && all_connected()) return;  // bytes in flight: on_sent looks again
    retry.expires_after(1ms);
    retry.async_wait([&](auto ec) {
      if (!ec) wait_ready();
    });
  };
  for (auto& s : sinks) s->on_writable([&] { wait_ready(); });
  // One call per read: n records back to back in `wire` (the receiver's buffer).
  // The indexer writes the index into bytes 0..7 in place, in the receiver's buffer.
  in.on_batch([&](std::uint64_t first, std::span<std::byte> wire, std::size_t n) {
    if (stamp)
      for (std::size_t i = 0; i < n; ++i) put64(wire.data() + i * blob, first + i);
    if (answer)
      for (std::size_t off = 0; off < wire.size(); off += blob)
        if (wire[off + 8] == std::byte{1}) reply->write_framed(wire.subspan(off, blob), 1);
    if (out.write(wire, n) && idle()) return true;
    paused = true;  // the receiver pauses when this returns; resume after it returned
    if (in_opts.block_in_read) watch_sent(true);
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
  if (in_opts.block_in_read) {  // read once every destination is connected
    paused = true;
    in.pause();
    watch_sent(true);
    asio::post(io, [&] { wait_ready(); });
  }
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

}  // namespace streamed_sockets

// relay.cpp — streamed_sockets --role indexer | forwarder | processor. See roles.hpp and main.cpp.
#include "roles.hpp"

namespace streamed_sockets {

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
  // The indexer writes the index into bytes 0..7 in place, in the receiver's buffer.
  in.on_batch([&](std::uint64_t first, std::span<std::byte> wire, std::size_t n) {
    if (stamp)
      for (std::size_t i = 0; i < n; ++i) put64(wire.data() + i * blob, first + i);
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

}  // namespace streamed_sockets

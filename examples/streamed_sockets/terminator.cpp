// terminator.cpp — streamed_sockets --role terminator. See roles.hpp and main.cpp.
//
// With blocking reads (the default) each input has an io_context and a thread of its
// own, as a blocked read holds its loop: one loop for both inputs would stop reading the
// tap while it waits for the main input, and the indexer, held by the full tap, would
// starve the main input. With --reactor-reads both inputs share the main thread's loop.
#include <thread>

#include "roles.hpp"

namespace streamed_sockets {

int terminator(const config& c) {
  const bool own_loops = !c.reactor_reads;
  asio::io_context shared{1};
  struct input {
    std::unique_ptr<asio::io_context> own;  // own_loops: this input's loop
    std::unique_ptr<rill::tcp_receiver> rx;
    std::uint64_t index_errors = 0, expect = 0;
    bool eof = false;
    clk::time_point first{}, last{};
  };
  std::vector<input> ins(1 + (c.back.empty() ? 0 : 1));
  std::size_t eofs = 0;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    auto& in = ins[i];
    auto opts = source_opts(i == 0 ? c.in : c.back, i == 0 ? "terminator" : "terminator-tap");
    // Off the requests' path, the terminator can wait for a full read per wake-up instead
    // of waking at every arrival: fewer wake-ups, context switches and reads that find
    // nothing. The relays cannot: a real request would wait for bulk data behind it.
    opts.receive_low_water_bytes = opts.read_bytes;
    opts.block_in_read = own_loops;
    if (own_loops) in.own = std::make_unique<asio::io_context>(1);
    auto& io = own_loops ? *in.own : shared;
    in.rx = std::make_unique<rill::tcp_receiver>(io, opts);
    in.rx->on_batch([&in](std::uint64_t, std::span<const std::byte> wire, std::size_t) {
      if (in.first == clk::time_point{}) in.first = clk::now();
      for (std::size_t off = 0; off < wire.size(); off += blob) {
        if (get64(wire.data() + off) != in.expect) ++in.index_errors;
        in.expect = get64(wire.data() + off) + 1;
      }
      in.last = clk::now();
      return true;
    });
    in.rx->on_eof([&, i, own_loops] {
      ins[i].rx->stop();
      if (own_loops)
        ins[i].own->stop();
      else if (++eofs == ins.size())
        shared.stop();
    });
    in.rx->start();
  }
  if (own_loops) {
    std::vector<std::thread> loops;
    for (auto& in : ins) loops.emplace_back([&in] { in.own->run(); });
    for (auto& t : loops) t.join();
  } else {
    shared.run();
  }
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

}  // namespace streamed_sockets

// pcap_decode_bench — where decoding runs: on the worker reading the one capture, or,
// after a rebalance, on every worker. Peers, each on 1 and 2 workers:
//   packets         from(pcap_source).sink(count)                 read + decode on the split's
//   worker frames          from(pcap_frame_source).rebalance()           read + copy <= 128 bytes
//   there,
//                     .map(decoder).sink(count)                     decode wherever the ring sends
//                     it
//   frames-vector   the same with a frame holding a std::vector<std::byte> of every captured
//                   byte (one allocation per frame, freed on the decoding worker)
//   packets-rebal   from(pcap_source).rebalance().sink(count)     decode on the reader, then the
//   ring frames-read     from(pcap_frame_source).sink(count)           read + copy only: no decode,
//   no ring
// Rounds interleave the peers (the order rotates by round); each run's checksum (sum over
// packets of the key's words, ports, time, lengths and flags) must equal the packets peer's
// (frames-read, which decodes nothing: its count).
//
//   pcap_decode_bench FILE [ROUNDS [PEER/WORKERS...]]   # default: 5 rounds, every peer on 1 and 2
//   # FILE e.g. the 2 M capture of bench/netflow_peers.sh; PEER/WORKERS e.g. frames/2
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <rill/pcap.hpp>
#include <rill/rill.hpp>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

/// Per-worker running sums, one cache line each (written by one worker, read after run).
struct alignas(64) slot {
  std::atomic<std::uint64_t> packets{0}, sum{0};
};

struct checksum_sink {
  std::shared_ptr<std::vector<slot>> slots;
  void operator()(const rill::pcap_frame&) const {
    auto& s = (*slots)[rill::this_worker()->id()];
    s.packets.store(s.packets.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void operator()(const rill::packet& p) const {
    auto& s = (*slots)[rill::this_worker()->id()];
    // Cheap on purpose (std::hash<flow_key> is FNV-1a byte by byte: it would be the
    // sink's cost, not decoding's): the key's words, ports, time, lengths and flags.
    std::uint64_t w[4];
    std::memcpy(w, p.key.a_addr.data(), 16);
    std::memcpy(w + 2, p.key.b_addr.data(), 16);
    const std::uint64_t v =
        w[0] + 3 * w[1] + 5 * w[2] + 7 * w[3] + (std::uint64_t(p.key.proto) << 8) +
        p.key.ip_version + (std::uint64_t(p.key.a_port.value_or(0)) << 16) +
        (std::uint64_t(p.key.b_port.value_or(0)) << 32) +
        std::uint64_t(p.time.time_since_epoch().count()) + p.wire_len + p.cap_len +
        (p.truncated ? 1u : 0u) + (p.from_a ? 2u : 0u) + (p.malformed ? 4u : 0u);
    s.packets.store(s.packets.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    s.sum.store(s.sum.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
};

// The vector alternative to rill::pcap_frame: every captured byte, on the heap.
struct vector_frame {
  rill::event_time time{};
  std::uint32_t wire_len = 0;
  std::int32_t linktype = 0;
  std::vector<std::byte> bytes;
};
rill::packet decode_vector(const vector_frame& f) {
  auto p = rill::decode(f.linktype, f.bytes, f.wire_len, f.time);
  return p ? *p : rill::packet{};
}
class vector_frame_source {
 public:
  using value_type = vector_frame;
  explicit vector_frame_source(std::string file) : file_(std::move(file)) {}
  std::size_t split_count() const noexcept { return 1; }
  class reader {
   public:
    explicit reader(rill::pcap_reader r) : r_(std::move(r)), linktype_(r_.linktype()) {}
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t max) {
      rill::pcap_record rec;
      for (std::size_t n = 0; n < max; ++n) {
        const auto rs = r_.next(rec);
        if (rs != rill::read_status::ok)
          return rs == rill::read_status::end_of_file ? rill::poll_status::end
                                                      : rill::poll_status::error;
        rill::record<vector_frame> out;
        out.time = rec.time;
        out.value.time = rec.time;
        out.value.wire_len = rec.wire_len;
        out.value.linktype = linktype_;
        out.value.bytes.assign(rec.data.begin(), rec.data.end());
        emit(std::move(out));
      }
      return rill::poll_status::more;
    }
    std::string error() const { return r_.error_message(); }

   private:
    rill::pcap_reader r_;
    int linktype_;
  };
  reader open(std::size_t) const { return reader{rill::pcap_reader::open(file_)}; }

 private:
  std::string file_;
};

struct result {
  double seconds;
  std::uint64_t packets, sum;
};

result run_peer(const std::string& peer, const std::string& file, std::size_t workers) {
  rill::runtime rt{{.workers = workers,
                    .topology = "1 node x " + std::to_string(workers) + " cores",
                    .pin = false}};
  auto slots = std::make_shared<std::vector<slot>>(workers);
  const checksum_sink sink{slots};
  rill::job j = [&] {
    if (peer == "packets") return rill::from(rill::pcap_source{{file}}).sink(sink);
    if (peer == "packets-rebal")
      return rill::from(rill::pcap_source{{file}}).rebalance().sink(sink);
    if (peer == "frames") {
      rill::pcap_frame_source src{{file}};
      return rill::from(src).rebalance().map(src.decoder()).sink(sink);
    }
    if (peer == "frames-read") return rill::from(rill::pcap_frame_source{{file}}).sink(sink);
    if (peer == "frames-vector")
      return rill::from(vector_frame_source{file}).rebalance().map(decode_vector).sink(sink);
    std::cerr << "pcap_decode_bench: unknown peer " << peer << '\n';
    std::exit(2);
  }();
  const auto t0 = clock_type::now();
  const auto rep = rt.run(j);
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (!rep.errors.empty()) {
    std::cerr << "pcap_decode_bench: " << peer << ": " << rep.errors.front() << '\n';
    std::exit(1);
  }
  result r{s, 0, 0};
  for (const auto& sl : *slots) {
    r.packets += sl.packets.load();
    r.sum += sl.sum.load();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: pcap_decode_bench FILE [ROUNDS [PEER/WORKERS...]]\n";
    return 2;
  }
  const std::string file = argv[1];
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<std::string> runs;  // PEER/WORKERS
  for (int i = 3; i < argc; ++i) runs.push_back(argv[i]);
  if (runs.empty()) {
    for (const char* p : {"packets", "frames", "frames-vector", "packets-rebal"})
      for (const char* w : {"/1", "/2"}) runs.push_back(std::string(p) + w);
    runs.push_back("frames-read/1");
  }
  std::map<std::string, std::vector<double>> seconds;
  std::uint64_t want_packets = 0, want_sum = 0;
  {
    const auto ref = run_peer("packets", file, 1);  // reference checksum (and a warm page cache)
    want_packets = ref.packets;
    want_sum = ref.sum;
  }
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const auto& run = runs[(i + std::size_t(round)) % runs.size()];
      const auto slash = run.find('/');
      const std::string peer = run.substr(0, slash);
      const std::size_t w = slash == std::string::npos ? 1 : std::stoul(run.substr(slash + 1));
      const auto r = run_peer(peer, file, w);
      if (r.packets != want_packets || (peer != "frames-read" && r.sum != want_sum)) {
        std::cerr << "pcap_decode_bench: " << run << ": checksum mismatch (" << r.packets
                  << " packets)\n";
        return 1;
      }
      seconds[run].push_back(r.seconds);
    }
  }
  std::cout << want_packets << " packets, " << rounds << " rounds, checksums equal\n\n"
            << "| peer | median s | best s | packets/s (median) | vs packets/1 "
               "|\n|---|---:|---:|---:|---:|\n";
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  const double base = seconds.count("packets/1") ? median(seconds["packets/1"]) : 0;
  for (const auto& run : runs) {
    const auto& v = seconds[run];
    const double m = median(v);
    std::printf("| %s | %.3f | %.3f | %.0f | %.2f |\n", run.c_str(), m,
                *std::min_element(v.begin(), v.end()), double(want_packets) / m, base / m);
  }
}

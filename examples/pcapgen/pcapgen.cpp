// pcapgen — write a synthetic classic pcap: N flows x M packets of Ethernet/IPv4/TCP+UDP,
// with deterministic out-of-order timestamp jitter. Test and benchmark input for the
// pcap source and the netflow job.
//
//   pcapgen                                      # 100 flows x 100 packets -> synthetic.pcap
//   pcapgen --output big.pcap --flows 10000 --packets-per-flow 1000 --jitter 2ms --seed 1
//
// Layout of the file (what a reader can check):
//   - packet i (0-based) belongs to flow i % N and is that flow's packet i / N;
//   - even flows are TCP to 192.168.0.1:80, odd flows UDP to 192.168.0.1:40000; the client of
//     flow f is 10.x.y.z (x.y.z = 1 + f / 50000) port 10000 + f % 50000; even packets go
//     client -> server, odd ones back; so every flow is one conversation of M packets;
//   - timestamp of packet i = start + i * interval + u_i, u_i uniform in [0, jitter], from
//     splitmix64(seed, i): identical bytes for identical arguments on every platform;
//     packets therefore step back in time by up to `jitter` (out of order);
//   - IPv4 header checksums are correct; TCP/UDP checksums are 0 (UDP: "none"; tshark
//     does not verify TCP checksums by default).
// Written with libpcap's pcap_dump API through a 1 MiB stdio buffer: 10 million packets
// take a few seconds and ~0.8 GB.
#include <pcap/pcap.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include "cli_checks.hpp"

namespace {

using namespace std::chrono_literals;
using std::chrono::nanoseconds;

// splitmix64: a stateless, platform-independent random stream (std distributions are not).
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void put16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
void put32(std::uint8_t* p, std::uint32_t v) {
  put16(p, static_cast<std::uint16_t>(v >> 16));
  put16(p + 2, static_cast<std::uint16_t>(v));
}

std::uint16_t ipv4_checksum(const std::uint8_t* h) {  // RFC 791 / RFC 1071
  std::uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(h[i] << 8 | h[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

constexpr std::uint32_t server_ip = 0xc0a80001;  // 192.168.0.1
constexpr std::size_t eth_len = 14, ip_len = 20, tcp_len = 20, udp_len = 8;

// Builds packet `seq` of flow `flow` into `frame`; returns its length.
std::size_t build_frame(std::uint64_t flow, std::uint64_t seq,
                        std::array<std::uint8_t, 256>& frame) {
  const bool is_tcp = flow % 2 == 0;
  const bool to_server = seq % 2 == 0;
  const std::uint32_t client_ip = 0x0a000000u + static_cast<std::uint32_t>(1 + flow / 50000);
  const std::uint16_t client_port = static_cast<std::uint16_t>(10000 + flow % 50000);
  const std::uint16_t server_port = is_tcp ? 80 : 40000;    // 40000: no dissector guesses at it
  const std::size_t payload = (seq * 37 + flow * 11) % 64;  // 0..63 bytes
  const std::size_t l4 = is_tcp ? tcp_len : udp_len;
  const std::size_t total = ip_len + l4 + payload;
  std::uint8_t* p = frame.data();
  // Ethernet: 02:00:00:00:00:01 <-> 02:00:00:00:00:02, IPv4.
  const std::array<std::uint8_t, 6> mac_c{2, 0, 0, 0, 0, 1}, mac_s{2, 0, 0, 0, 0, 2};
  std::copy(to_server ? mac_s.begin() : mac_c.begin(), to_server ? mac_s.end() : mac_c.end(), p);
  std::copy(to_server ? mac_c.begin() : mac_s.begin(), to_server ? mac_c.end() : mac_s.end(),
            p + 6);
  put16(p + 12, 0x0800);
  std::uint8_t* ip = p + eth_len;
  ip[0] = 0x45;
  ip[1] = 0;
  put16(ip + 2, static_cast<std::uint16_t>(total));
  put16(ip + 4, static_cast<std::uint16_t>(seq));
  put16(ip + 6, 0x4000);  // DF
  ip[8] = 64;
  ip[9] = is_tcp ? 6 : 17;
  put16(ip + 10, 0);
  put32(ip + 12, to_server ? client_ip : server_ip);
  put32(ip + 16, to_server ? server_ip : client_ip);
  put16(ip + 10, ipv4_checksum(ip));
  std::uint8_t* t = ip + ip_len;
  put16(t, to_server ? client_port : server_port);
  put16(t + 2, to_server ? server_port : client_port);
  if (is_tcp) {
    put32(t + 4, static_cast<std::uint32_t>(1000 + seq * 64));
    put32(t + 8, seq == 0 ? 0 : static_cast<std::uint32_t>(5000 + seq * 64));
    t[12] = 5 << 4;
    t[13] = seq == 0 ? 0x02 : 0x18;  // SYN, then PSH|ACK
    put16(t + 14, 65535);
    put16(t + 16, 0);
    put16(t + 18, 0);
  } else {
    put16(t + 4, static_cast<std::uint16_t>(udp_len + payload));
    put16(t + 6, 0);
  }
  std::uint8_t* data = t + l4;
  for (std::size_t i = 0; i < payload; ++i)
    data[i] = static_cast<std::uint8_t>('a' + (seq + i) % 26);
  return eth_len + total;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcapgen: synthetic Ethernet/IPv4 TCP+UDP capture with timestamp jitter"};
  std::string output = "synthetic.pcap";
  std::uint64_t flows = 100, per_flow = 100, seed = 1;
  std::string jitter_text = "2ms", interval_text = "10us";
  bool nano = false, quiet = false;
  app.add_option("--output,-o", output, "pcap file to write")->capture_default_str();
  app.add_option("--flows", flows, "number of flows (even: TCP, odd: UDP)")
      ->capture_default_str()
      ->check(rill_examples::whole_number(1, std::int64_t{1} << 32));
  app.add_option("--packets-per-flow", per_flow, "packets in each flow")
      ->capture_default_str()
      ->check(rill_examples::whole_number(1, std::int64_t{1} << 32));
  app.add_option("--jitter", jitter_text, "max timestamp jitter (e.g. 2ms; ns/us/ms/s/m/h, no unit = s), 0 = in order")
      ->capture_default_str();
  app.add_option("--interval", interval_text, "nominal gap between packets (e.g. 10us; ns/us/ms/s/m/h, no unit = s)")
      ->capture_default_str();
  app.add_option("--seed", seed, "jitter seed (same seed, same file)")
      ->capture_default_str()
      ->check(rill_examples::whole_number(0, std::numeric_limits<std::int64_t>::max()));
  app.add_flag("--nanosecond", nano, "write nanosecond timestamps (default microseconds)");
  app.add_flag("--quiet,-q", quiet, "no summary line");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;      // bad arguments: 2
  }

  // netflow's duration syntax; an error names the option and the value (exit 2)
  nanoseconds jitter, interval;
  try {
    jitter = rill_examples::parse_duration(jitter_text, "--jitter");
    interval = rill_examples::parse_duration(interval_text, "--interval");
  } catch (const CLI::Error& e) {
    app.exit(e);
    return 2;
  }

  const int precision = nano ? PCAP_TSTAMP_PRECISION_NANO : PCAP_TSTAMP_PRECISION_MICRO;
  std::unique_ptr<pcap_t, decltype(&pcap_close)> dead(
      pcap_open_dead_with_tstamp_precision(DLT_EN10MB, 262144, precision), &pcap_close);
  if (dead == nullptr) {
    std::cerr << "pcapgen: libpcap cannot make a handle for writing\n";
    return 1;
  }
  // A file that cannot be created is a run-time failure (exit 1), named with the OS error.
  std::FILE* f = std::fopen(output.c_str(), "wb");
  if (f == nullptr) {
    std::cerr << "pcapgen: cannot create --output " << output << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  static char buffer[1 << 20];
  std::setvbuf(f, buffer, _IOFBF, sizeof buffer);
  pcap_dumper_t* dumper = pcap_dump_fopen(dead.get(), f);  // owns f from here
  if (dumper == nullptr) {
    std::cerr << "pcapgen: " << output << ": " << pcap_geterr(dead.get()) << "\n";
    std::fclose(f);
    return 1;
  }

  // 2024-01-01T00:00:00Z: fixed, so equal arguments give equal bytes.
  const std::int64_t start_ns = 1'704'067'200'000'000'000;
  const std::uint64_t total = flows * per_flow;
  const std::uint64_t span = static_cast<std::uint64_t>(jitter.count()) + 1;
  std::array<std::uint8_t, 256> frame{};
  std::uint64_t bytes = 0, back_steps = 0;
  std::int64_t prev = 0;
  for (std::uint64_t i = 0; i < total; ++i) {
    const std::uint64_t flow = i % flows, seq = i / flows;
    const std::int64_t u =
        static_cast<std::int64_t>(splitmix64(seed * 0x100000001b3ull ^ i) % span);
    std::int64_t t = start_ns + static_cast<std::int64_t>(i) * interval.count() + u;
    if (!nano) t -= t % 1000;  // what a µs file can hold, so the summary is exact
    if (i > 0 && t < prev) ++back_steps;
    prev = t;
    pcap_pkthdr h{};
    h.ts.tv_sec = t / 1'000'000'000;
    h.ts.tv_usec = nano ? t % 1'000'000'000 : (t % 1'000'000'000) / 1000;
    h.caplen = h.len = static_cast<bpf_u_int32>(build_frame(flow, seq, frame));
    bytes += h.len;
    pcap_dump(reinterpret_cast<u_char*>(dumper), &h, frame.data());
  }
  const bool write_failed = pcap_dump_flush(dumper) != 0;
  pcap_dump_close(dumper);
  if (write_failed) {
    std::cerr << "pcapgen: write to " << output << " failed (disk full?)\n";
    return 1;
  }
  if (!quiet) {
    std::cout << "pcapgen: wrote " << total << " packets (" << ((flows + 1) / 2) * per_flow
              << " tcp, " << (flows / 2) * per_flow << " udp) in " << flows << " flows, " << bytes
              << " wire bytes, " << back_steps << " timestamp back-steps, to " << output << "\n";
  }
  return 0;
}

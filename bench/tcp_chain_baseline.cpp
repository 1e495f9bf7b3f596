// tcp_chain_baseline — the streamed-sockets topology (issue 6) with no framework: plain
// blocking read()/write() of 256 KiB buffers, one process per role, to measure what this
// machine can do at all. The numbers rill's examples/streamed_sockets is compared against
// (bench/RESULTS.md "streamed sockets").
//
//   generator --> indexer ==> forwarder --> processor --> terminator
//       ^            |  \         |             |
//       |          disk  \tap    disk           | real requests only
//       |                 `--------------------------------> terminator (second socket)
//       `-----------------------------------------------'  (answers)
//
// Same records and the same per-record work as streamed_sockets: 32-byte records, the
// generator marks a "real" request (byte 8 = 1, bytes 16..23 = steady-clock send time in
// ns) every 1/real-rate seconds, the indexer stamps bytes 0..7 with the record index, the
// processor answers real requests, the terminator checks that indexes are consecutive on
// both inputs. Disk = 32 MiB segment files written with write(2) from the relay's thread.
// No hello, no reconnects, no framing layer: this is a floor for the CPU cost, not a
// connector.
//
//   tcp_chain_baseline [--bytes N] [--rate GB/s] [--tick us] [--real-rate N/s] [--no-disk]
//                      [--single] [--dir DIR] [--keep] [--latency-out FILE]
//   --latency-out: write every real request's round trip (ns, one per line, in answer
//           order) to FILE at the end, as streamed_sockets' generator does, so that runs
//           can be pooled.
//   --keep: leave the segment files (DIR/indexer-*.seg, DIR/forwarder-*.seg) for an MD5
//           check; by default DIR is removed at the end.
//   --single: generator --> terminator only (one loopback connection, no disk, no real
//             requests).
//
// The parent forks every role over loopback TCP (listeners are bound
// before the fork, so start order is moot), waits, and prints GB/s at the terminator,
// user/sys CPU seconds of all five processes (getrusage RUSAGE_CHILDREN) and the latency
// percentiles of the real requests.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <rill/core/metrics.hpp>

namespace {

using clk = std::chrono::steady_clock;
constexpr std::size_t blob = 32;
constexpr std::size_t buf_bytes = std::size_t{256} << 10;
constexpr std::uint64_t segment_bytes = std::uint64_t{32} << 20;

std::uint64_t now_ns() {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now().time_since_epoch()).count());
}
void put64(unsigned char* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::_Exit(2);
}

int listen_on(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind");
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  port = ntohs(a.sin_port);
  if (::listen(fd, 4) != 0) die("listen");
  return fd;
}
void no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
int accept_one(int lfd) {
  const int fd = ::accept(lfd, nullptr, nullptr);
  if (fd < 0) die("accept");
  ::close(lfd);
  no_delay(fd);
  return fd;
}
int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  no_delay(fd);
  return fd;
}
void write_all(int fd, const unsigned char* p, std::size_t n) {
  while (n > 0) {
    const auto k = ::write(fd, p, n);
    if (k <= 0) die("write");
    p += k;
    n -= std::size_t(k);
  }
}

/// Segment files of 32 MiB, written from the caller's thread.
struct segments {
  std::string dir, prefix;
  int fd = -1;
  std::uint64_t in_seg = 0, n = 0;
  void write(const unsigned char* p, std::size_t len) {
    if (dir.empty()) return;
    while (len > 0) {
      if (fd < 0) {
        char name[64];
        std::snprintf(name, sizeof name, "/%s-%06llu.seg", prefix.c_str(), (unsigned long long)n++);
        fd = ::open((dir + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) die("open segment");
      }
      const auto take = std::min<std::uint64_t>(len, segment_bytes - in_seg);
      write_all(fd, p, take);
      p += take;
      len -= take;
      in_seg += take;
      if (in_seg == segment_bytes) {
        ::close(fd);
        fd = -1;
        in_seg = 0;
      }
    }
  }
  ~segments() {
    if (fd >= 0) ::close(fd);
  }
};

struct options {
  std::uint64_t bytes = std::uint64_t{256} << 20;
  double rate_gbps = 0, real_per_s = 1000;
  std::chrono::microseconds tick{250};  // paced: sleep between two writes (as streamed_sockets)
  bool disk = true, single = false, keep = false;
  std::string dir = "/tmp/tcp_chain_baseline";
  std::string latency_out;  // empty: none
};

// Reads whole records: `fn(p, n_records)`; keeps a partial record for the next read.
template <class Fn>
void relay_loop(int in, Fn&& fn) {
  std::vector<unsigned char> buf(buf_bytes + blob);
  std::size_t have = 0;
  for (;;) {
    const auto k = ::read(in, buf.data() + have, buf_bytes);
    if (k < 0) die("read");
    if (k == 0) break;
    have += std::size_t(k);
    const std::size_t whole = have / blob * blob;
    if (whole) fn(buf.data(), whole / blob);
    std::memmove(buf.data(), buf.data() + whole, have - whole);
    have -= whole;
  }
}

int generator(const options& o, int out, int back, std::FILE* latency_file) {
  rill::histogram lat;  // round trips, ns; written by the answers thread only
  std::vector<std::uint64_t> all;  // the same, each one, with --latency-out
  std::uint64_t real_sent = 0;
  std::thread answers([&] {
    relay_loop(back, [&](const unsigned char* p, std::size_t n) {
      const auto t = now_ns();
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t ns = t - get64(p + i * blob + 16);
        lat.record(ns);
        if (latency_file != nullptr) all.push_back(ns);
      }
    });
  });
  const std::uint64_t total = o.bytes / blob;
  const auto real_every =
      std::chrono::nanoseconds(o.real_per_s > 0 ? std::int64_t(1e9 / o.real_per_s) : 0);
  std::vector<unsigned char> buf(buf_bytes);
  const auto t0 = clk::now();
  auto next_real = t0;
  std::uint64_t sent = 0;
  while (sent < total) {
    const auto now = clk::now();
    std::uint64_t n = std::min<std::uint64_t>(total - sent, buf_bytes / blob);
    if (o.rate_gbps > 0) {
      const double el = std::chrono::duration<double>(now - t0).count();
      const auto due =
          std::min<std::uint64_t>(total, std::uint64_t(el * o.rate_gbps * 1e9 / blob) + 1);
      n = std::min<std::uint64_t>(n, due - std::min(due, sent));
      if (n == 0) {
        std::this_thread::sleep_for(o.tick);
        continue;
      }
    }
    std::memset(buf.data(), 0, n * blob);
    for (std::uint64_t i = 0; i < n; ++i) {
      unsigned char* r = buf.data() + i * blob;
      put64(r, sent + i);  // the indexer re-stamps it; --single checks it at the terminator
      if (o.real_per_s > 0 && now >= next_real) {
        r[8] = 1;
        put64(r + 16, now_ns());
        put64(r + 24, real_sent++);
        next_real += real_every;
      } else {
        put64(r + 24, sent + i);
      }
    }
    write_all(out, buf.data(), n * blob);
    sent += n;
    if (o.rate_gbps > 0) std::this_thread::sleep_for(o.tick);  // paced: one write per tick
  }
  ::shutdown(out, SHUT_WR);
  answers.join();  // the processor closes the answer socket after its input ended
  const double el = std::chrono::duration<double>(clk::now() - t0).count();
  auto pct = [&](double p) { return double(lat.quantile(p / 100)) / 1e6; };  // within 3.1%
  const auto answered = (unsigned long long)lat.count();
  std::printf(
      "generator: sent %llu records in %.2f s = %.3f GB/s offered; real requests %llu, answered "
      "%llu\n",
      (unsigned long long)sent, el, double(sent * blob) / 1e9 / el, (unsigned long long)real_sent, answered);
  std::printf(
      "latency: average %.3f ms, p1/p10/p50/p90/p99/p99.9 = %.3f/%.3f/%.3f/%.3f/%.3f/%.3f ms (N = "
      "%llu)\n",
      lat.mean() / 1e6, pct(1), pct(10), pct(50), pct(90), pct(99), pct(99.9), answered);
  if (latency_file != nullptr) {
    for (const auto ns : all) std::fprintf(latency_file, "%llu\n", (unsigned long long)ns);
    if (std::fclose(latency_file) != 0) die(("--latency-out " + o.latency_out).c_str());
  }
  return lat.count() == real_sent ? 0 : 1;
}

int terminator(const std::vector<int>& ins) {
  struct input {
    int fd;
    std::vector<unsigned char> buf = std::vector<unsigned char>(buf_bytes + blob);
    std::size_t have = 0;
    std::uint64_t bytes = 0, expect = 0, errors = 0;
    bool eof = false;
    clk::time_point first{}, last{};
  };
  std::vector<input> in;
  for (int fd : ins) in.push_back(input{fd});
  std::size_t open = in.size();
  while (open > 0) {
    std::vector<pollfd> p;
    for (auto& i : in) p.push_back({i.eof ? -1 : i.fd, POLLIN, 0});
    if (::poll(p.data(), p.size(), -1) < 0) die("poll");
    for (std::size_t k = 0; k < in.size(); ++k) {
      auto& i = in[k];
      if (i.eof || !(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const auto r = ::read(i.fd, i.buf.data() + i.have, buf_bytes);
      if (r < 0) die("read");
      if (r == 0) {
        i.eof = true;
        --open;
        continue;
      }
      if (i.first == clk::time_point{}) i.first = clk::now();
      i.bytes += std::size_t(r);
      i.have += std::size_t(r);
      const std::size_t whole = i.have / blob * blob;
      for (std::size_t off = 0; off < whole; off += blob) {
        if (get64(i.buf.data() + off) != i.expect) ++i.errors;
        i.expect = get64(i.buf.data() + off) + 1;
      }
      std::memmove(i.buf.data(), i.buf.data() + whole, i.have - whole);
      i.have -= whole;
      i.last = clk::now();
    }
  }
  int rc = 0;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const auto& i = in[k];
    const double s = std::chrono::duration<double>(i.last - i.first).count();
    std::printf("terminator%s: %.3f GB in %.3f s = %.3f GB/s; index errors %llu\n",
                k == 0 ? "" : " (tap)", double(i.bytes) / 1e9, s,
                s > 0 ? double(i.bytes) / 1e9 / s : 0.0, (unsigned long long)i.errors);
    if (i.errors) rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--bytes")
      o.bytes = std::stoull(next());
    else if (a == "--rate")
      o.rate_gbps = std::stod(next());
    else if (a == "--tick")
      o.tick = std::chrono::microseconds{std::stoll(next())};
    else if (a == "--real-rate")
      o.real_per_s = std::stod(next());
    else if (a == "--dir")
      o.dir = next();
    else if (a == "--keep")
      o.keep = true;
    else if (a == "--latency-out")
      o.latency_out = next();
    else if (a == "--no-disk")
      o.disk = false;
    else if (a == "--single")
      o.single = true, o.disk = false, o.real_per_s = 0;
    else {
      std::fprintf(stderr,
                   "usage: tcp_chain_baseline [--bytes N] [--rate GB/s] [--tick us] "
                   "[--real-rate N/s] [--no-disk] [--single] [--dir DIR] [--keep] [--latency-out FILE]\n");
      return 2;
    }
  }
  o.bytes = o.bytes / blob * blob;
  // Opened before the run (an unwritable path fails at once); the generator's child writes it.
  std::FILE* latency_file = nullptr;
  if (!o.latency_out.empty() && (latency_file = std::fopen(o.latency_out.c_str(), "w")) == nullptr) {
    std::fprintf(stderr, "--latency-out %s: %s\n", o.latency_out.c_str(), std::strerror(errno));
    return 2;
  }
  if (o.disk) {
    std::system(("rm -rf '" + o.dir + "' && mkdir -p '" + o.dir + "'").c_str());
  }
  std::fflush(stdout);
  // Listeners first (in the parent), then fork the roles.
  std::uint16_t p_gen, p_idx, p_fwd, p_proc, p_term, p_tap;
  const int l_gen = listen_on(p_gen), l_idx = listen_on(p_idx), l_fwd = listen_on(p_fwd),
            l_proc = listen_on(p_proc), l_term = listen_on(p_term), l_tap = listen_on(p_tap);
  const int all_l[] = {l_gen, l_idx, l_fwd, l_proc, l_term, l_tap};
  auto close_except = [&](std::initializer_list<int> keep) {
    for (int fd : all_l)
      if (std::find(keep.begin(), keep.end(), fd) == keep.end()) ::close(fd);
  };
  const auto t0 = clk::now();
  std::vector<pid_t> kids;
  auto spawn = [&](auto&& fn) {
    const pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      const int rc = fn();
      std::fflush(stdout);
      std::_Exit(rc);
    }
    kids.push_back(pid);
  };
  if (o.single) {
    spawn([&] {
      close_except({l_term});
      return terminator({accept_one(l_term)});
    });
    spawn([&] {
      close_except({l_gen});
      // No processor: nobody answers; the answer socket is connected to ourselves and closed.
      const int out = connect_to(p_term);
      const int self = connect_to(p_gen);
      const int back = accept_one(l_gen);
      ::close(self);
      return generator(o, out, back, latency_file);
    });
  } else {
    spawn([&] {
      close_except({l_term, l_tap});
      const int a = accept_one(l_term), b = accept_one(l_tap);
      return terminator({a, b});
    });
    spawn([&] {  // processor
      close_except({l_proc});
      const int in = accept_one(l_proc), out = connect_to(p_term), back = connect_to(p_gen);
      std::vector<unsigned char> ans;
      relay_loop(in, [&](const unsigned char* p, std::size_t n) {
        write_all(out, p, n * blob);
        ans.clear();
        for (std::size_t i = 0; i < n; ++i)
          if (p[i * blob + 8] == 1) ans.insert(ans.end(), p + i * blob, p + (i + 1) * blob);
        if (!ans.empty()) write_all(back, ans.data(), ans.size());
      });
      ::close(out);
      ::close(back);
      return 0;
    });
    spawn([&] {  // forwarder
      close_except({l_fwd});
      const int in = accept_one(l_fwd), out = connect_to(p_proc);
      segments disk{o.disk ? o.dir : "", "forwarder"};
      relay_loop(in, [&](const unsigned char* p, std::size_t n) {
        write_all(out, p, n * blob);
        disk.write(p, n * blob);
      });
      ::close(out);
      return 0;
    });
    spawn([&] {  // indexer
      close_except({l_idx});
      const int in = accept_one(l_idx), out = connect_to(p_fwd), tap = connect_to(p_tap);
      segments disk{o.disk ? o.dir : "", "indexer"};
      std::uint64_t index = 0;
      relay_loop(in, [&](const unsigned char* p, std::size_t n) {
        auto* w = const_cast<unsigned char*>(p);
        for (std::size_t i = 0; i < n; ++i) put64(w + i * blob, index++);
        write_all(out, p, n * blob);
        write_all(tap, p, n * blob);
        disk.write(p, n * blob);
      });
      ::close(out);
      ::close(tap);
      return 0;
    });
    spawn([&] {
      close_except({l_gen});
      const int out = connect_to(p_idx);
      const int back = accept_one(l_gen);
      return generator(o, out, back, latency_file);
    });
  }
  close_except({});
  int rc = 0;
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  const double el = std::chrono::duration<double>(clk::now() - t0).count();
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  const double user = double(ru.ru_utime.tv_sec) + double(ru.ru_utime.tv_usec) / 1e6;
  const double sys = double(ru.ru_stime.tv_sec) + double(ru.ru_stime.tv_usec) / 1e6;
  std::printf("baseline %s%s: %.3f GB, real %.2f s, user %.2f s, sys %.2f s = %.2f CPU-s/GB\n",
              o.single ? "single connection" : "five-process chain", o.disk ? " + disk" : "",
              double(o.bytes) / 1e9, el, user, sys, (user + sys) / (double(o.bytes) / 1e9));
  if (o.disk && !o.keep) std::system(("rm -rf '" + o.dir + "'").c_str());
  return rc;
}

// fuzz_pcap_file: any bytes as a capture file, through rill::pcap_reader (libpcap) and,
// when the file is a classic pcap, through rill::pcap_split_reader with 1 and 2 splits.
// Invariants: opening fails only with rill::pcap_error; every raw record's data has
// cap_len bytes; the mapped reader returns the same packets as libpcap's (as a multiset
// of time, lengths and key, pcap_split_reader.hpp) and ends in error exactly when it does.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "check.hpp"

#include "rill/connectors/pcap_reader.hpp"
#include "rill/connectors/pcap_split_reader.hpp"

namespace {

using row = std::tuple<std::int64_t, std::uint32_t, std::uint32_t, rill::flow_key, bool, bool>;

using rill_fuzz::check;

row row_of(const rill::packet& p) {
  return {p.time.time_since_epoch().count(), p.cap_len, p.wire_len, p.key, p.truncated, p.malformed};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int fd = ::memfd_create("fuzz.pcap", 0);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != ssize_t(size)) std::abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  std::vector<row> lib;
  bool lib_error = false;
  try {
    auto r = rill::pcap_reader::open(path);
    rill::packet p;
    rill::read_status st;
    while ((st = r.next(p)) == rill::read_status::ok) lib.push_back(row_of(p));
    lib_error = st == rill::read_status::error;
    check(st != rill::read_status::error || r.error_message().find(path) != std::string::npos,
          "error names the file");
  } catch (const rill::pcap_error&) {
    return 0;
  }
  // The raw API on a second reader: each record's bytes are its cap_len.
  {
    auto r = rill::pcap_reader::open(path);
    rill::pcap_record rec;
    while (r.next(rec) == rill::read_status::ok) check(rec.data.size() == rec.cap_len, "data is cap_len bytes");
  }
  if (!rill::pcap_split_reader::splittable(path)) return 0;
  std::sort(lib.begin(), lib.end());
  for (std::size_t splits : {std::size_t{1}, std::size_t{2}}) {
    std::vector<row> mapped;
    bool mapped_error = false;
    for (std::size_t i = 0; i < splits; ++i) {
      try {
        auto s = rill::pcap_split_reader::open(path, i, splits, 3);
        rill::packet p;
        rill::read_status st;
        while ((st = s.next(p)) == rill::read_status::ok) mapped.push_back(row_of(p));
        mapped_error |= st == rill::read_status::error;
      } catch (const rill::pcap_error&) {
        check(false, "a splittable file opens");
      }
    }
    std::sort(mapped.begin(), mapped.end());
    if (mapped != lib) {
      std::fprintf(stderr, "%zu splits: libpcap %zu packets, mapped %zu\n", splits, lib.size(), mapped.size());
      for (std::size_t i = 0; i < std::min(lib.size(), mapped.size()); ++i)
        if (lib[i] != mapped[i]) {
          std::fprintf(stderr, "first difference at sorted row %zu: time %lld vs %lld, cap %u vs %u, wire %u vs %u\n", i,
                       (long long)std::get<0>(lib[i]), (long long)std::get<0>(mapped[i]), std::get<1>(lib[i]),
                       std::get<1>(mapped[i]), std::get<2>(lib[i]), std::get<2>(mapped[i]));
          break;
        }
      check(false, "mapped reader == libpcap's packets");
    }
    check(mapped_error == lib_error, "mapped reader errs when libpcap does");
  }
  return 0;
}

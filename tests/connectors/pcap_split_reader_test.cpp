// Tests for rill/connectors/pcap_split_reader.hpp and pcap_source_options: a capture read
// as N interleaved splits gives, as a multiset and field by field, the packets, stats,
// end and error text of pcap_source reading it through libpcap (splits_per_file = 0), on
//   1. every capture of shared/data/pcap and the Debian ones (python3-dpkt, sip-tester),
//      N = 1, 2, 3, chunks of 1, 7 and 4096 records;
//   2. real captures cut with `head -c` at record boundaries, inside headers and inside
//      data: every complete record once, the error once, with pcap_source's text;
//   3. hand-built hostile files: caplen above the snaplen, above libpcap's maximum,
//      both byte orders, µs and ns, timestamps past 2038;
//   4. what stays one split: pcapng, pcap 2.3, FIFOs; open errors as pcap_source's;
//   5. a job on 2 workers: splits_per_file = 2 gives libpcap's (splits_per_file = 0) packets and stats,
//      and a cut-off file one run_report error;
//   6. open_splits(): splits that share a mapping and chunk boundaries, read at once on
//      threads of their own, give each split's packets of open(), in order.
#include "rill/connectors/pcap_split_reader.hpp"

#include "captures.hpp"
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <rill/pcap.hpp>
#include <rill/rill.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "frames.hpp"
#include "rill/connectors/pcap_source.hpp"

namespace {

namespace fs = std::filesystem;
using namespace frames;
using rill::poll_status;

static_assert(sizeof(rill::packet) == 72,
              "rill::packet changed: add its new fields to fields() below, then update this size");

auto fields(const rill::packet& p) {
  return std::tie(p.time, p.key, p.wire_len, p.cap_len, p.from_a, p.truncated, p.malformed,
                  p.fragment, p.tcp_flags, p.vlan_outer, p.vlan_inner);
}
bool less(const rill::packet& a, const rill::packet& b) { return fields(a) < fields(b); }

using rill_test::stats_snapshot;

// Every split of a source read to its end, in slices of 256 as the driver reads.
struct drained {
  std::size_t splits = 0;
  std::vector<rill::packet> packets;  // sorted by fields()
  std::vector<std::string> errors;    // one per split that ended in error
  bool in_file_order = true;          // each split's packets in increasing time (if the file is)
};
drained drain_all(const rill::pcap_source& src) {
  drained d;
  d.splits = src.split_count();
  for (std::size_t i = 0; i < d.splits; ++i) {
    auto r = src.open(i);
    poll_status st;
    do {
      st = r.poll(
          [&](rill::record<rill::packet, rill::unacked>&& rec) {
            EXPECT_EQ(rec.time, rec.value.time);
            d.packets.push_back(rec.value);
          },
          256);
    } while (st == poll_status::more);
    EXPECT_TRUE(st == poll_status::end || st == poll_status::error);
    if (st == poll_status::error) d.errors.push_back(r.error());
  }
  std::sort(d.packets.begin(), d.packets.end(), less);
  return d;
}

// Reads `path` with pcap_source as one split and as N splits of chunks of K records, for
// every (N, K) given; expects the same packets, errors and stats.
void expect_same_as_one_split(const std::string& path,
                              const std::vector<std::size_t>& ns = {1, 2, 3},
                              const std::vector<std::size_t>& ks = {1, 7, 4096}) {
  SCOPED_TRACE(path);
  rill::pcap_source whole{{path}, {.splits_per_file = 0}};  // libpcap: the reference
  const auto want = drain_all(whole);
  ASSERT_EQ(want.splits, 1u);
  const bool split = rill::pcap_split_reader::splittable(path);
  for (std::size_t n : ns) {
    for (std::size_t k : ks) {
      SCOPED_TRACE("splits " + std::to_string(n) + ", chunk " + std::to_string(k));
      rill::pcap_source parts{{path}, {.splits_per_file = n, .records_per_chunk = k}};
      const auto got = drain_all(parts);
      EXPECT_EQ(got.splits, split ? n : 1u);
      ASSERT_EQ(got.packets.size(), want.packets.size());
      std::size_t differing = 0;
      for (std::size_t i = 0; i < got.packets.size(); ++i)
        differing += fields(got.packets[i]) != fields(want.packets[i]);
      EXPECT_EQ(differing, 0u);
      EXPECT_EQ(got.errors, want.errors);
      EXPECT_EQ(stats_snapshot(*parts.stats()), stats_snapshot(*whole.stats()));
    }
  }
}

using rill_test::real_captures;

TEST(pcap_split_real, every_capture_gives_pcap_source_packets_with_1_2_3_splits) {
  const auto captures = real_captures();
  if (captures.empty())
    GTEST_SKIP() << "no captures: neither ../shared nor python3-dpkt/sip-tester";
  std::size_t splittable = 0;
  for (const auto& c : captures) {
    splittable += rill::pcap_split_reader::splittable(c);
    expect_same_as_one_split(c);
  }
  EXPECT_GT(splittable, 0u);
  std::cout << "compared " << captures.size() << " captures, " << splittable << " splittable\n";
}

// Split i's packets in the order it returns them, and how it ended.
std::pair<std::vector<rill::packet>, rill::read_status> read_split(rill::pcap_split_reader& r) {
  std::vector<rill::packet> out;
  rill::packet p;
  rill::read_status s;
  while ((s = r.next(p)) == rill::read_status::ok) out.push_back(p);
  return {out, s};
}

TEST(pcap_split_real, open_splits_read_concurrently_give_each_splits_packets_of_open) {
  const auto captures = real_captures();
  if (captures.empty())
    GTEST_SKIP() << "no captures: neither ../shared nor python3-dpkt/sip-tester";
  std::size_t compared = 0;
  for (const auto& c : captures) {
    if (!rill::pcap_split_reader::splittable(c)) continue;
    for (std::size_t n : {2u, 3u}) {
      for (std::size_t k : {1u, 7u, 64u}) {
        SCOPED_TRACE(c + ", splits " + std::to_string(n) + ", chunk " + std::to_string(k));
        auto shared = rill::pcap_split_reader::open_splits(c, n, k);
        ASSERT_EQ(shared.size(), n);
        std::vector<std::pair<std::vector<rill::packet>, rill::read_status>> got(n);
        {
          std::vector<std::jthread> threads;
          for (std::size_t i = 0; i < n; ++i)
            threads.emplace_back([&, i] { got[i] = read_split(shared[i]); });
        }
        for (std::size_t i = 0; i < n; ++i) {
          auto alone = rill::pcap_split_reader::open(c, i, n, k);
          const auto want = read_split(alone);
          EXPECT_EQ(got[i].second, want.second);
          ASSERT_EQ(got[i].first.size(), want.first.size());
          for (std::size_t j = 0; j < want.first.size(); ++j)
            ASSERT_TRUE(fields(got[i].first[j]) == fields(want.first[j])) << "split " << i << " packet " << j;
        }
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0u);
}

class pcap_split_files : public rill_test::scratch_dir_test {};

// Record start offsets of a classic little-endian-or-not pcap file, read with pcap_reader.
std::vector<std::int64_t> record_offsets(const std::string& path) {
  auto r = rill::pcap_reader::open(path);
  std::vector<std::int64_t> out;
  rill::pcap_record rec;
  while (r.next(rec) == rill::read_status::ok) out.push_back(rec.file_offset);
  return out;
}

TEST_F(pcap_split_files, real_capture_cut_with_head_c_gives_the_records_and_error_once) {
  std::vector<std::string> sources;
  for (const auto& c : real_captures())
    if (rill::pcap_split_reader::splittable(c) && fs::file_size(c) > 2000) sources.push_back(c);
  if (sources.empty()) GTEST_SKIP() << "no splittable capture";
  std::size_t cuts = 0;
  for (const auto& src : sources) {
    const auto offs = record_offsets(src);
    if (offs.size() < 12) continue;
    // On a record boundary (a clean end), inside a header, inside data; early and late.
    std::vector<std::int64_t> at = {25,
                                    30,
                                    offs[3],
                                    offs[3] + 9,
                                    offs[3] + 16 + 1,
                                    offs[10] - 1,
                                    offs[offs.size() - 2] + 5,
                                    static_cast<std::int64_t>(fs::file_size(src)) - 1};
    for (std::int64_t n : at) {
      const fs::path cut = dir_ / ("cut_" + std::to_string(n) + ".pcap");
      const std::string cmd =
          "head -c " + std::to_string(n) + " '" + src + "' > '" + cut.string() + "'";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      SCOPED_TRACE(cmd);
      expect_same_as_one_split(cut.string(), {2, 3}, {1, 4});
      rill::pcap_source one{{cut.string()}, {.splits_per_file = 0}};
      const auto want = drain_all(one);
      const bool boundary = std::find(offs.begin(), offs.end(), n) != offs.end();
      EXPECT_EQ(want.errors.size(), boundary ? 0u : 1u);
      if (!want.errors.empty()) {
        EXPECT_NE(want.errors[0].find(cut.string()), std::string::npos) << want.errors[0];
        EXPECT_NE(want.errors[0].find("byte offset"), std::string::npos) << want.errors[0];
      }
      rill::pcap_source parts{{cut.string()}, {.splits_per_file = 2, .records_per_chunk = 2}};
      const auto got = drain_all(parts);
      EXPECT_EQ(got.errors.size(), want.errors.size());
      EXPECT_EQ(parts.stats()->errors.load(), want.errors.size());
      ++cuts;
    }
  }
  EXPECT_GT(cuts, 0u);
}

bytes udp_frame(std::uint16_t sp, std::size_t payload) {
  return eth(eth_ipv4, ipv4(v4(10, 0, 0, 1), v4(10, 0, 0, 2), 17, udp(sp, 53, bytes(payload, 1))));
}

// 20 records, timestamps from 1970 to past 2038 (seconds above 2^31).
std::vector<record> twenty() {
  std::vector<record> recs;
  for (int i = 0; i < 20; ++i)
    recs.push_back(rec(std::int64_t{i} * 200'000'000'000'000'000 + 999 * i,
                       udp_frame(static_cast<std::uint16_t>(1000 + i), 4 + 13 * i)));
  return recs;
}

TEST_F(pcap_split_files, both_byte_orders_us_and_ns_split_the_same) {
  for (bool nano : {false, true}) {
    for (bool be : {false, true}) {
      const auto path = dir_ / ("f" + std::to_string(nano) + std::to_string(be) + ".pcap");
      write_pcap(path, 1, twenty(), file_options{.nano = nano, .big_endian = be});
      ASSERT_TRUE(rill::pcap_split_reader::splittable(path.string()));
      expect_same_as_one_split(path.string(), {1, 2, 3, 5}, {1, 3, 4096});
    }
  }
}

// A file of several 8 MiB regions read by splits of one open_splits() on threads of their
// own: each split gives its packets of open(), although the regions every split passed
// are unmapped during the read; then anonymous mappings made after the read (which may
// reuse released ranges) survive the readers' destruction.
TEST_F(pcap_split_files, open_splits_release_passed_regions_and_nothing_else) {
  std::vector<record> recs;
  for (int i = 0; i < 30'000; ++i)
    recs.push_back(rec(std::int64_t{i} * 1'000'000, udp_frame(static_cast<std::uint16_t>(1000 + i % 500), 1000)));
  const auto path = (dir_ / "big.pcap").string();
  write_pcap(path, 1, recs);
  ASSERT_GT(fs::file_size(path), std::uintmax_t{24} << 20);
  for (std::size_t n : {2u, 3u}) {
    SCOPED_TRACE("splits " + std::to_string(n));
    auto shared = rill::pcap_split_reader::open_splits(path, n, 64);
    std::vector<std::pair<std::vector<rill::packet>, rill::read_status>> got(n);
    {
      std::vector<std::jthread> threads;
      for (std::size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { got[i] = read_split(shared[i]); });
    }
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      auto alone = rill::pcap_split_reader::open(path, i, n, 64);
      const auto want = read_split(alone);
      EXPECT_EQ(got[i].second, rill::read_status::end_of_file);
      ASSERT_EQ(got[i].first.size(), want.first.size());
      for (std::size_t j = 0; j < want.first.size(); ++j)
        ASSERT_TRUE(fields(got[i].first[j]) == fields(want.first[j])) << "split " << i << " packet " << j;
      total += got[i].first.size();
    }
    EXPECT_EQ(total, recs.size());
    // 8 MiB anonymous mappings: the kernel places new mappings in the highest free gap,
    // which the released regions of the capture's mapping (just made) usually are.
    constexpr std::size_t block = std::size_t{8} << 20;
    std::vector<char*> blocks;
    for (int b = 0; b < 16; ++b) {
      void* m = ::mmap(nullptr, block, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(m, MAP_FAILED);
      blocks.push_back(static_cast<char*>(m));
      std::fill_n(blocks.back(), block, char(b + 1));
    }
    shared.clear();  // unmaps what no reader released
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      EXPECT_EQ(blocks[b][block - 1], char(b + 1));  // a fault here: the readers unmapped it
      ::munmap(blocks[b], block);
    }
  }
}

// Patches the caplen field (little-endian file) of record `i` of `content`.
void set_caplen(std::string& content, std::size_t record_offset, std::uint32_t caplen) {
  for (int b = 0; b < 4; ++b)
    content[record_offset + 8 + b] = static_cast<char>((caplen >> (8 * b)) & 0xff);
}

TEST_F(pcap_split_files, caplen_above_snaplen_is_cut_to_it_as_libpcap_does) {
  // snaplen 60: records of 60+ bytes are cut to 60 by libpcap, which skips the rest.
  const auto path = dir_ / "snap.pcap";
  write_pcap(path, 1, twenty(), file_options{.snaplen = 60});
  ASSERT_TRUE(rill::pcap_split_reader::splittable(path.string()));
  expect_same_as_one_split(path.string(), {1, 2, 3}, {1, 2, 4096});
  rill::pcap_source one{{path.string()}};
  const auto d = drain_all(one);
  ASSERT_EQ(d.packets.size(), 20u);
  EXPECT_TRUE(d.errors.empty());
  // ...and the cut of the file's last record is reported at its true offset.
  std::ifstream in(path, std::ios::binary);
  std::string content{std::istreambuf_iterator<char>(in), {}};
  const auto offs = record_offsets(path.string());
  const auto cut_path = dir_ / "snap_cut.pcap";
  write_file(cut_path, content.substr(0, static_cast<std::size_t>(offs.back()) + 20));
  expect_same_as_one_split(cut_path.string(), {1, 2, 3}, {1, 2});
  rill::pcap_source c{{cut_path.string()}};
  const auto dc = drain_all(c);
  ASSERT_EQ(dc.errors.size(), 1u);
  EXPECT_NE(dc.errors[0].find("byte offset " + std::to_string(offs.back())), std::string::npos)
      << dc.errors[0];
}

TEST_F(pcap_split_files, hostile_caplens_give_pcap_source_errors) {
  const std::string good = pcap_bytes(1, twenty());
  const auto offs = [&] {
    const auto p = dir_ / "good.pcap";
    write_file(p, good);
    return record_offsets(p.string());
  }();
  ASSERT_EQ(offs.size(), 20u);
  struct hostile {
    std::string name;
    std::size_t record;
    std::uint32_t caplen;
  };
  // Above libpcap's maximum (an error there), past the end of the file, 0.
  for (const hostile& h : {hostile{"huge", 5, 0x7fffffffu}, hostile{"max_plus_1", 9, 262145},
                           hostile{"past_end", 19, 100000}, hostile{"past_end_early", 2, 200000},
                           hostile{"zero", 7, 0}}) {
    std::string content = good;
    set_caplen(content, static_cast<std::size_t>(offs[h.record]), h.caplen);
    const auto path = dir_ / (h.name + ".pcap");
    write_file(path, content);
    SCOPED_TRACE(h.name);
    expect_same_as_one_split(path.string(), {1, 2, 3, 4}, {1, 3, 4096});
  }
}

TEST_F(pcap_split_files, what_cannot_be_split_stays_one_split) {
  const auto ng = fs::path(RILL_SHARED_DIR) / "data" / "pcap" / "alexa-app.pcapng";
  if (fs::exists(ng)) {
    EXPECT_FALSE(rill::pcap_split_reader::splittable(ng.string()));
    expect_same_as_one_split(ng.string(), {2}, {4096});
  }
  // pcap 2.3: libpcap reads it with other length rules.
  std::string old = pcap_bytes(1, twenty());
  old[6] = 3;
  const auto v23 = dir_ / "v23.pcap";
  write_file(v23, old);
  EXPECT_FALSE(rill::pcap_split_reader::splittable(v23.string()));
  expect_same_as_one_split(v23.string(), {2}, {1});
  // A FIFO: pcap_source reads it as one split (the only reader of the FIFO here).
  const auto fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(rill::pcap_split_reader::splittable(fifo.string()));
  if (!fs::is_regular_file("/dev/stdin")) {
    EXPECT_FALSE(rill::pcap_split_reader::splittable("/dev/stdin"));
  }
  rill::pcap_source live = rill::pcap_source::live("rill-no-such-interface");
  EXPECT_EQ(live.split_count(), 1u);
}

TEST_F(pcap_split_files, open_errors_are_pcap_source_errors) {
  const auto missing = dir_ / "no-such.pcap";
  const auto empty = dir_ / "empty.pcap";
  const auto text = dir_ / "text.pcap";
  const auto ppi = dir_ / "ppi.pcap";
  write_file(empty, "");
  write_file(text, "this is not a capture file, it is text of some length\n");
  write_pcap(ppi, 192, {rec(1, bytes(40, 0))});
  for (const auto& p : {missing, empty, text, ppi}) {
    std::string want, got;
    try {
      (void)rill::pcap_source{{p.string()}, {.splits_per_file = 0}}.open(0);
    } catch (const rill::pcap_error& e) {
      want = e.what();
    }
    try {
      rill::pcap_source s{{p.string()}, {.splits_per_file = 2}};
      for (std::size_t i = 0; i < s.split_count(); ++i) (void)s.open(i);
    } catch (const rill::pcap_error& e) {
      got = e.what();
    }
    EXPECT_FALSE(want.empty()) << p;
    EXPECT_NE(want.find(p.string()), std::string::npos) << want;
    EXPECT_EQ(got, want);
  }
  EXPECT_THROW((void)rill::pcap_split_reader::open(ppi.string(), 2, 2), std::invalid_argument);
}

//
//   pcap_source {splits_per_file = 2}: split 0 (worker 0) ─┐
//                                      split 1 (worker 1) ─┴─> sink     (2 workers)
//   pcap_source (1 split, worker 0) -> sink                              (2 workers)
// Same packets (as a multiset), same stats; a cut-off file: one error in the run report.

std::vector<rill::packet> collect(rill::runtime& rt, rill::pcap_source src,
                                  std::vector<std::string>& errors) {
  auto out = std::make_shared<std::vector<rill::packet>>();
  auto mu = std::make_shared<std::mutex>();
  const auto rep = rt.run(rill::from(std::move(src)).sink([out, mu](rill::packet&& p) {
    std::lock_guard lk(*mu);
    out->push_back(p);
  }));
  errors = rep.errors;
  std::sort(out->begin(), out->end(), less);
  return *out;
}

TEST_F(pcap_split_files, two_workers_read_two_splits_like_one_split) {
  std::vector<std::string> inputs;
  for (const auto& c : real_captures())
    if (rill::pcap_split_reader::splittable(c)) inputs.push_back(c);
  if (inputs.empty()) GTEST_SKIP() << "no splittable capture";
  std::sort(inputs.begin(), inputs.end(),
            [](const auto& a, const auto& b) { return fs::file_size(a) > fs::file_size(b); });
  const std::string big = inputs.front();
  const auto offs = record_offsets(big);
  ASSERT_GT(offs.size(), 4u);
  const auto cut = dir_ / "cut.pcap";
  ASSERT_EQ(std::system(("head -c " + std::to_string(offs[offs.size() / 2] + 7) + " '" + big +
                         "' > '" + cut.string() + "'")
                            .c_str()),
            0);
  rill::runtime rt{{.workers = 2, .topology = "1 node x 2 cores", .pin = false}};
  for (const std::string& path : {big, cut.string()}) {
    SCOPED_TRACE(path);
    rill::pcap_source one{{path}, {.splits_per_file = 0}};
    rill::pcap_source two{{path}, {.splits_per_file = 2, .records_per_chunk = 16}};
    auto one_stats = one.stats(), two_stats = two.stats();
    std::vector<std::string> want_errors, got_errors;
    const auto want = collect(rt, std::move(one), want_errors);
    const auto got = collect(rt, std::move(two), got_errors);
    ASSERT_EQ(got.size(), want.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differing += fields(got[i]) != fields(want[i]);
    EXPECT_EQ(differing, 0u);
    EXPECT_EQ(got_errors, want_errors);
    EXPECT_EQ(got_errors.size(), path == big ? 0u : 1u);
    EXPECT_EQ(stats_snapshot(*two_stats), stats_snapshot(*one_stats));
  }
}

}  // namespace

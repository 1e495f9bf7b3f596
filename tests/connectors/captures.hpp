// tests/connectors/captures.hpp — what the capture tests share: the real captures to
// compare reading paths on, and a scratch directory per test.
//
// Defines:
//   rill_test::real_captures()   every .pcap/.pcapng of ../shared/data/pcap and of
//                                python3-dpkt's examples, and sip-tester's g711a.pcap,
//                                sorted (empty when none is installed: callers skip)
//   rill_test::scratch_dir_test  a GoogleTest fixture with dir_, a fresh directory under
//                                the system temp dir, removed after the test
//   rill_test::stats_snapshot    a pcap_source_stats read once, comparable and printable
//
// Example:
//   class pcap_files : public rill_test::scratch_dir_test {};
//   TEST_F(pcap_files, cut_capture) { write_file(dir_ / "cut.pcap", bytes); ... }
//   for (const auto& c : rill_test::real_captures()) compare_paths(c);
//
// Thread safety: call from the test's thread. RILL_SHARED_DIR comes from the build.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include "rill/connectors/pcap_source.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

namespace rill_test {

inline std::vector<std::string> real_captures() {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& dir : {fs::path(RILL_SHARED_DIR) / "data" / "pcap",
                          fs::path("/usr/share/doc/python3-dpkt/examples/data")}) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const auto ext = e.path().extension();
      if (ext == ".pcap" || ext == ".pcapng") out.push_back(e.path().string());
    }
  }
  if (fs::exists("/usr/share/sip-tester/g711a.pcap")) out.push_back("/usr/share/sip-tester/g711a.pcap");
  std::sort(out.begin(), out.end());
  return out;
}

/// dir_ = TMP/rill_SUITE_PID_TEST, created in SetUp, removed (with its files) in TearDown.
class scratch_dir_test : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("rill_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" +
            info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

/// The counters of a pcap_source_stats at one moment (read after the run).
struct stats_snapshot {
  std::uint64_t packets, bytes, truncated, errors;
  std::array<std::uint64_t, 6> by_proto;
  explicit stats_snapshot(const rill::pcap_source_stats& s)
      : packets(s.packets.load()),
        bytes(s.bytes.load()),
        truncated(s.truncated.load()),
        errors(s.errors.load()),
        by_proto{} {
    for (std::size_t i = 0; i < by_proto.size(); ++i) by_proto[i] = s.by_proto[i].load();
  }
  friend bool operator==(const stats_snapshot&, const stats_snapshot&) = default;
};
inline std::ostream& operator<<(std::ostream& os, const stats_snapshot& s) {
  os << "packets " << s.packets << " bytes " << s.bytes << " truncated " << s.truncated
     << " errors " << s.errors << " by_proto";
  for (auto v : s.by_proto) os << ' ' << v;
  return os;
}

}  // namespace rill_test

// tests/connectors/captures.hpp — what the capture tests share: the real captures to
// compare reading paths on, and a scratch directory per test.
//
// Defines:
//   rill_test::real_captures()   every .pcap/.pcapng of ../shared/data/pcap and of
//                                python3-dpkt's examples, and sip-tester's g711a.pcap,
//                                sorted (empty when none is installed: callers skip)
//   rill_test::scratch_dir_test  a GoogleTest fixture with dir_, a fresh directory under
//                                the system temp dir, removed after the test
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

#include <algorithm>
#include <filesystem>
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

}  // namespace rill_test

// cli_test_util.hpp — runs an example program under bash for the *_cli_test files:
// exit status, stdout and stderr; and the check every bad-argument test makes (exit 2, the
// message names the option and the value).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

namespace cli_test {

namespace fs = std::filesystem;

/// Scratch directory of one test binary (RILL_TEST_BINARY_DIR/<name>_tmp).
inline fs::path scratch_dir(const std::string& name) {
  return fs::path(RILL_TEST_BINARY_DIR) / (name + "_tmp");
}

struct outcome {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Runs `command` under bash (no single quotes in it); stdout and stderr are captured
/// separately, in files under `scratch` named after the running test (ctest -j runs the
/// tests of one binary as parallel processes: they must not share a file).
inline outcome run(const std::string& command, const fs::path& scratch) {
  fs::create_directories(scratch);
  static int calls = 0;
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string base = std::string(test ? test->test_suite_name() : "none") + "." +
                           (test ? test->name() : "none") + "." + std::to_string(calls++);
  const auto out = scratch / (base + ".stdout"), err = scratch / (base + ".stderr");
  const std::string cmd =
      "bash -c '" + command + "' >" + out.string() + " 2>" + err.string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::size_t line_count(const std::string& text) {
  return std::size_t(std::count(text.begin(), text.end(), '\n'));
}

/// A bad argument: exit 2; stderr holds every one of `parts` (the option, the value, why).
inline void expect_usage_error(const std::string& command, std::initializer_list<std::string> parts,
                               const fs::path& scratch) {
  SCOPED_TRACE(command);
  const auto r = run(command, scratch);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const auto& p : parts) EXPECT_TRUE(has(r.err, p)) << "missing \"" << p << "\" in: " << r.err;
}

}  // namespace cli_test

// Unit tests of examples/common/reporting.hpp (progress rate, error digest) and
// examples/common/cli_checks.hpp, on a manual clock: no sleeps.
#include "reporting.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "cli_checks.hpp"

using namespace std::chrono_literals;
using rill_examples::steady;

namespace {

const steady::time_point t0{};

TEST(interval_rate, is_the_rate_over_the_last_interval_not_since_the_start) {
  rill_examples::interval_rate r{0, t0};
  EXPECT_DOUBLE_EQ(r.sample(1000, t0 + 1s), 1000.0);
  EXPECT_DOUBLE_EQ(r.sample(1000, t0 + 2s),
                   0.0);  // nothing in this second (the average would say 500)
  EXPECT_DOUBLE_EQ(r.sample(1500, t0 + 2500ms), 1000.0);  // 500 in 0.5 s
}

TEST(interval_rate, keeps_fractions_and_ignores_empty_intervals) {
  rill_examples::interval_rate r{7, t0};
  EXPECT_DOUBLE_EQ(r.sample(10, t0 + 4s), 0.75);  // 3 in 4 s: not truncated to 0
  EXPECT_DOUBLE_EQ(r.sample(20, t0 + 4s), 0.0);   // no time passed: no sample taken
  EXPECT_DOUBLE_EQ(r.sample(20, t0 + 5s), 10.0);  // so the 10 count in the next one
}

TEST(error_digest, prints_the_first_in_full_then_one_count_line_per_interval) {
  std::ostringstream out;
  rill_examples::error_digest d{"prog", out, 1s};
  for (int i = 0; i < 1000; ++i)
    d.add("record " + std::to_string(i) + ": refused", t0 + i * 2ms);  // 0..1.998 s
  d.finish(t0 + 2s);
  EXPECT_EQ(d.total(), 1000u);
  EXPECT_EQ(
      out.str(),
      "prog: record 0: refused\n"
      "prog: 500 more failed in the last 1.0 s (latest: record 500: refused); 501 in total\n"
      "prog: 499 more failed in the last 1.0 s (latest: record 999: refused); 1000 in total\n");
}

TEST(error_digest, a_single_error_is_one_line) {
  std::ostringstream out;
  rill_examples::error_digest d{"prog", out};
  d.add("boom", t0);
  d.finish(t0 + 5s);
  EXPECT_EQ(out.str(), "prog: boom\n");
  EXPECT_EQ(d.total(), 1u);
}

std::string check(const CLI::Validator& v, std::string text) { return v(text); }

TEST(cli_checks, whole_number_names_the_value_and_the_range) {
  const auto v = rill_examples::whole_number(0, 4096, "0 = one per core");
  EXPECT_EQ(check(v, "0"), "");
  EXPECT_EQ(check(v, "4096"), "");
  EXPECT_EQ(check(v, "4097"), "4097 is out of range: must be in 0..4096 (0 = one per core)");
  EXPECT_EQ(check(v, "99999999999999999999"),
            "99999999999999999999 is out of range: must be in 0..4096 (0 = one per core)");
  EXPECT_EQ(check(v, "-1"), "must be >= 0 (0 = one per core), got -1");
  EXPECT_EQ(check(v, "-99999999999999999999"),
            "must be >= 0 (0 = one per core), got -99999999999999999999");
  EXPECT_EQ(check(v, "1.5"), "expected a whole number in 0..4096 (0 = one per core), got \"1.5\"");
  EXPECT_EQ(check(v, ""), "expected a whole number in 0..4096 (0 = one per core), got \"\"");
}

TEST(cli_checks, number_in_names_the_value_and_the_range) {
  const auto positive = rill_examples::number_in(0, 1e6, true);
  EXPECT_EQ(check(positive, "0.5"), "");
  EXPECT_EQ(check(positive, "0"), "must be > 0, got 0");
  EXPECT_EQ(check(positive, "1e400"), "1e400 is out of range: must be > 0 and <= 1e+06");
  EXPECT_EQ(check(positive, "2e6"), "2e6 is out of range: must be <= 1e+06");
  EXPECT_EQ(check(positive, "inf"), "expected a number > 0, got \"inf\"");
  EXPECT_EQ(check(positive, "nan"), "expected a number > 0, got \"nan\"");
  const auto rate = rill_examples::number_in(0, 10, false, "0 = unthrottled");
  EXPECT_EQ(check(rate, "0"), "");
  EXPECT_EQ(check(rate, "-1"), "must be >= 0 (0 = unthrottled), got -1");
}

}  // namespace

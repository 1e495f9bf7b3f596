// cli_checks.hpp — CLI11 checks for the example programs' numeric options and Kafka topic
// names, the duration parser of their duration options, and same_file() for outputs that
// would overwrite an input or each other, with messages that name the value and the accepted range (CLI11 prefixes the
// option name; the programs turn a CLI11 parse error into exit status 2).
//
//   app.add_option("--workers", workers, "worker threads")
//       ->check(rill_examples::whole_number(0, 4096, "0 = one per core"));
//   // --workers -1                    -> "--workers: must be >= 0 (0 = one per core), got -1"
//   // --workers 99999999999999999999  -> "--workers: 99999999999999999999 is out of range:
//   //                                     must be in 0..4096 (0 = one per core)"
//   // --workers abc                   -> "--workers: expected a whole number in 0..4096
//   //                                     (0 = one per core), got "abc""
//
// Why: CLI11 2.1's own conversion wraps "-1" and saturates a too-large number when it
// converts to an unsigned type, and its NonNegativeNumber/PositiveNumber messages print
// DBL_MAX in full. The text is read with std::from_chars (decimal, no sign "+", no
// spaces), which reports out-of-range values instead of wrapping them; the option's own
// conversion runs afterwards on a value that fits.
//
// Thread safety: the validators are called by CLI::App::parse on its thread.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <regex>
#include <filesystem>
#include <sstream>
#include <string>
#include <sys/stat.h>

namespace rill_examples {

/// A decimal whole number in [lo, hi]. `note` (e.g. "0 = one per core") is appended to
/// every message in parentheses.
inline CLI::Validator whole_number(std::int64_t lo, std::int64_t hi, std::string note = "") {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  const std::string tail = note.empty() ? "" : " (" + note + ")";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        std::int64_t v = 0;
        const char* const end = text.data() + text.size();
        const auto [stop, ec] = std::from_chars(text.data(), end, v);
        const bool negative = !text.empty() && text.front() == '-';
        if (ec == std::errc::result_out_of_range && !negative)
          return text + " is out of range: must be in " + range + tail;
        if (ec == std::errc::result_out_of_range || (ec == std::errc{} && stop == end && v < lo))
          return "must be >= " + std::to_string(lo) + tail + ", got " + text;
        if (ec != std::errc{} || stop != end)
          return "expected a whole number in " + range + tail + ", got \"" + text + "\"";
        if (v > hi) return text + " is out of range: must be in " + range + tail;
        return {};
      },
      range, "whole_number");
}

/// A finite decimal number x with lo <= x <= hi, or lo < x <= hi when `lo_open`. `note`
/// is appended to every message in parentheses.
inline CLI::Validator number_in(double lo, double hi, bool lo_open, std::string note = "") {
  auto show = [](double x) {
    std::ostringstream s;
    s << x;
    return s.str();
  };
  const std::string low = (lo_open ? "> " : ">= ") + show(lo), high = "<= " + show(hi);
  const std::string tail = note.empty() ? "" : " (" + note + ")";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        const char* const end = text.data() + text.size();
        const auto [stop, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc::result_out_of_range)  // beyond double, or below its smallest step
          return text + " is out of range: must be " + low + " and " + high + tail;
        if (ec != std::errc{} || stop != end || !std::isfinite(v))
          return "expected a number " + low + tail + ", got \"" + text + "\"";
        if (lo_open ? !(v > lo) : !(v >= lo)) return "must be " + low + tail + ", got " + text;
        if (v > hi) return text + " is out of range: must be " + high + tail;
        return {};
      },
      low + ", " + high, "number_in");
}

/// A legal Kafka topic name: 1..249 characters of a-z A-Z 0-9 . _ -, and not "." or
/// ".." (Kafka's rule, org.apache.kafka.common.internals.Topic.validate; kafka_source
/// checks the same at start, after contacting the broker).
///   --to "a b"  -> "--to: \"a b\" is not a legal Kafka topic name (1-249 characters of
///                  a-z A-Z 0-9 . _ -, not \".\" or \"..\")"
inline CLI::Validator kafka_topic() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool legal = !text.empty() && text.size() <= 249 && text != "." && text != ".." &&
                           std::all_of(text.begin(), text.end(), [](char c) {
                             return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                           });
        if (legal) return {};
        return "\"" + text + "\" is not a legal Kafka topic name (1-249 characters of a-z A-Z 0-9 . _ -, not \".\" or \"..\")";
      },
      "TOPIC", "kafka_topic");
}

/// A duration option's text -> nanoseconds: a whole number and a unit ns, us, ms, s, m or
/// h; no unit = seconds ("10s", "500ms", "2m", "250us", "100ns", "0", "3"). At most 100
/// years: event time is signed 64-bit ns, and a window start +- a duration must not
/// overflow. Throws CLI::ValidationError naming `option` and the text (exit 2 in the
/// programs): "--max-delay: must not be negative, got \"-1s\"" for a duration with a
/// minus sign, "expected a duration like ..." for anything else it cannot read. Shared by
/// netflow's --window, --max-delay and --idle-exit.
inline std::chrono::nanoseconds parse_duration(const std::string& text, const std::string& option) {
  static const std::regex re(R"(^\s*(\d+)\s*(ns|us|ms|s|m|h)?\s*$)");
  static const std::regex negative(R"(^\s*-\s*\d+\s*(ns|us|ms|s|m|h)?\s*$)");
  std::smatch m;
  if (std::regex_match(text, negative))
    throw CLI::ValidationError(option, "must not be negative, got \"" + text + "\"");
  if (!std::regex_match(text, m, re))
    throw CLI::ValidationError(option, "expected a duration like 10s, 500ms, 2m; got \"" + text + "\"");
  const std::string unit = m[2].matched ? m[2].str() : "s";
  const long long ns_per_unit = unit == "ns"   ? 1LL
                                : unit == "us" ? 1'000LL
                                : unit == "ms" ? 1'000'000LL
                                : unit == "m"  ? 60'000'000'000LL
                                : unit == "h"  ? 3'600'000'000'000LL
                                               : 1'000'000'000LL;
  constexpr long long max_ns = 100LL * 365 * 24 * 3'600'000'000'000LL;
  const std::string digits = m[1].str();
  long long n = 0;
  if (digits.size() > 18 || (n = std::stoll(digits)) > max_ns / ns_per_unit)
    throw CLI::ValidationError(option, "\"" + text + "\" is out of range: too large (limit 100 years)");
  return std::chrono::nanoseconds{n * ns_per_unit};
}

/// True when paths `a` and `b` name one file that writing to one of them would damage
/// for the other: the same regular file, FIFO or socket by (device, inode) ("-" is
/// standard output), or, for paths that do not exist yet, the same lexically normal
/// absolute path. A character device (/dev/null, a terminal) is never "the same": rows
/// and a summary may both go to /dev/null. Empty paths are never the same. stat(2) only:
/// no file is opened or created.
///   same_file("flows.jsonl", "./flows.jsonl") -> true;  same_file("/dev/null", "/dev/null") -> false
inline bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  struct stat sa {}, sb {};
  const bool ea = a == "-" ? ::fstat(1, &sa) == 0 : ::stat(a.c_str(), &sa) == 0;
  const bool eb = b == "-" ? ::fstat(1, &sb) == 0 : ::stat(b.c_str(), &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && !S_ISCHR(sa.st_mode);
  if (ea || eb || a == "-" || b == "-") return false;
  std::error_code e1, e2;
  const auto ca = std::filesystem::absolute(a, e1).lexically_normal();
  const auto cb = std::filesystem::absolute(b, e2).lexically_normal();
  return !e1 && !e2 && ca == cb;
}

}  // namespace rill_examples

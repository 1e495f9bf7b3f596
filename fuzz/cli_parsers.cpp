// fuzz_cli_parsers: the examples' duration parser and whole-number check
// (examples/common/cli_checks.hpp) on any text. A duration is refused only with
// CLI::ValidationError and, when accepted, lies in [0, 100 years]; whole_number(0, 4096)
// accepts exactly the decimal texts of 0..4096.
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto d = rill_examples::parse_duration(text, "--window");
    constexpr long long max_ns = 100LL * 365 * 24 * 3'600'000'000'000LL;
    if (d.count() < 0 || d.count() > max_ns) std::abort();
  } catch (const CLI::ValidationError&) {
  }
  auto check = rill_examples::whole_number(0, 4096);
  std::string copy = text;
  const bool accepted = check(copy).empty();
  long long v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const bool decimal = ec == std::errc{} && end == text.data() + text.size() && v >= 0 && v <= 4096 &&
                       !text.empty() && text[0] != '+';
  if (accepted != decimal) {
    std::fprintf(stderr, "invariant broken: whole_number disagrees with from_chars on \"%s\"\n", text.c_str());
    std::abort();
  }
  return 0;
}

// nexmark_gen — writes NEXMark events (include/nexmark/generator.hpp) as JSON lines (the
// Rust `nexmark` crate's format) or as a binary event file (include/nexmark/event_file.hpp).
//
//   nexmark_gen                                    # 1000 events, JSON lines on stdout
//   nexmark_gen --events 10000000 --format binary --output events.bin
//   nexmark_gen --events 100000 --base-time-ms 1796162582440   # = the crate's run at that time
//
// Exit status: 0 ok; 1 the output cannot be created or written (the message names it and
// the OS error); 2 a bad argument (the message names the option and the value).
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cli_checks.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <nexmark/event_file.hpp>
#include <nexmark/generator.hpp>
#include <optional>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"nexmark_gen: NEXMark events (the Rust nexmark crate 0.2.0's model) to a file"};
  std::uint64_t events = 1000, offset = 0, step = 1, base_time_ms = 1'700'000'000'000;
  std::string output = "-", format = "json", type = "all", shape = "sine";
  nexmark::config cfg;
  constexpr std::int64_t max_i64 = std::numeric_limits<std::int64_t>::max();
  app.add_option("--events,-n", events, "number of events to write")
      ->capture_default_str()
      ->check(rill_examples::whole_number(0, max_i64));
  app.add_option("--output,-o", output, "file to write, - = stdout")->capture_default_str();
  app.add_option("--format", format, "json (JSON lines) or binary")
      ->capture_default_str()
      ->check(CLI::IsMember({"json", "binary"}));
  app.add_option("--type", type, "only events of this kind: all, person, auction, bid")
      ->capture_default_str()
      ->check(CLI::IsMember({"all", "person", "auction", "bid"}));
  app.add_option("--offset", offset, "start at this event (of --type)")
      ->capture_default_str()
      ->check(rill_examples::whole_number(0, max_i64));
  app.add_option("--step", step, "advance by this many events after each")
      ->capture_default_str()
      ->check(rill_examples::whole_number(1, max_i64));
  app.add_option("--base-time-ms", base_time_ms, "time of event 0, ms since the epoch")
      ->capture_default_str()
      ->check(rill_examples::whole_number(0, max_i64 / 2));
  app.add_option("--first-event-id", cfg.first_event_id, "id of event 0: the seed of the stream")
      ->capture_default_str()
      ->check(rill_examples::whole_number(0, max_i64 / 2));
  app.add_option("--rate", cfg.first_rate, "events per second")
      ->capture_default_str()
      ->check(rill_examples::whole_number(1, 1'000'000'000));
  app.add_option("--next-rate", cfg.next_rate, "second rate of the wave (default: --rate)")
      ->check(rill_examples::whole_number(1, 1'000'000'000));
  app.add_option("--rate-shape", shape, "square or sine, when --next-rate differs")
      ->capture_default_str()
      ->check(CLI::IsMember({"square", "sine"}));
  app.add_option("--rate-period", cfg.rate_period, "seconds of one rate wave")
      ->capture_default_str()
      ->check(rill_examples::whole_number(1, 1'000'000'000));
  app.add_option("--out-of-order-group", cfg.out_of_order_group_size,
                 "events shuffled within groups of this many (1 = in order)")
      ->capture_default_str()
      ->check(rill_examples::whole_number(1, 1'000'000'000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (app.count("--next-rate") == 0) cfg.next_rate = cfg.first_rate;
  cfg.shape = shape == "square" ? nexmark::rate_shape::square : nexmark::rate_shape::sine;
  cfg.base_time =
      nexmark::timestamp{std::chrono::milliseconds{static_cast<std::int64_t>(base_time_ms)}};

  std::optional<nexmark::generator> gen;
  try {
    gen.emplace(cfg);
    gen->with_offset(offset).with_step(step);
  } catch (const nexmark::config_error& e) {
    std::cerr << "nexmark_gen: " << e.what() << "\n";
    return 2;
  }
  static const std::map<std::string, nexmark::event_kind> kinds{
      {"person", nexmark::event_kind::person},
      {"auction", nexmark::event_kind::auction},
      {"bid", nexmark::event_kind::bid}};
  if (type != "all") gen->with_type_filter(kinds.at(type));

  std::signal(SIGPIPE, SIG_IGN);  // a reader that goes away is a write error, not a kill
  const bool to_stdout = output == "-";
  std::FILE* f = to_stdout ? stdout : std::fopen(output.c_str(), "wb");
  if (f == nullptr) {
    std::cerr << "nexmark_gen: cannot create --output " << output << ": " << std::strerror(errno)
              << "\n";
    return 1;
  }
  const bool binary = format == "binary";
  std::string buf;
  if (binary) buf.append(nexmark::binary_magic);
  nexmark::event e;
  bool ok = true;
  for (std::uint64_t i = 0; i < events && ok; ++i) {
    gen->next(e);
    binary ? nexmark::append_binary(e, buf) : nexmark::append_json_line(e, buf);
    if (buf.size() >= (1u << 20) || i + 1 == events) {
      ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
      buf.clear();
    }
  }
  if (!buf.empty() && ok) ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  const int saved = errno;
  ok = (std::fflush(f) == 0) && ok;
  if (!to_stdout) ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::cerr << "nexmark_gen: writing --output " << output
              << " failed: " << std::strerror(saved ? saved : errno) << "\n";
    return 1;
  }
  return 0;
}

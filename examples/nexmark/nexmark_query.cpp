// nexmark_query — runs one NEXMark query (include/nexmark/queries.hpp: q0-q2;
// window_queries.hpp: q3, q4, q5, q7, q8, q11) as a rill job over a binary event file
// (nexmark_gen --format binary) or over generated events. The join queries (q3, q4, q8) read
// their input twice, once for persons and once for auctions (stages "source" and
// "source_auctions"; q4: bids from "source"); the summary's events count "source".
//
//   nexmark_query                                   # q0 over 100,000 generated events
//   nexmark_query --query q1 --input events.bin --output rows.jsonl
//   nexmark_query --query q2 --input part0.bin --input part1.bin --workers 2  # a split each
//   nexmark_query --query q5 --input events.bin --max-delay-ms 4000
//
// Output (--output FILE or -): one JSON line per result row (queries.hpp), in arrival
// order. Summary (stderr, one JSON object): query, events, rows, checksum (hex; the sum of
// the rows' FNV-1a, independent of row order), workers, elapsed_s, events_per_s, errors.
// Exit status: 0 ok; 1 the input is truncated or malformed (every event before the bad
// record was processed; the message names the file, byte and event) or --output could
// not be written; 2 a bad argument, an --output that cannot be created (as netflow), or an
// input that cannot be opened or is not an event file.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cinttypes>
#include <cli_checks.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <nexmark/queries.hpp>
#include <nexmark/source.hpp>
#include <nexmark/window_queries.hpp>
#include <rill/rill.hpp>
#include <string>
#include <vector>

namespace {

struct outcome {
  std::uint64_t rows = 0, checksum = 0;
  bool write_failed = false;
  rill::run_report report;
};

// `rows` builds the query's stream of Row.
template <class Row, class Rows>
outcome run_query(Rows rows, std::size_t workers, std::FILE* out) {
  auto sink = std::make_shared<nexmark::row_sink<Row>>(workers, out);
  rill::runtime rt{{.workers = workers}};
  outcome o;
  o.report = rt.run(rows().sink(sink));
  o.rows = sink->rows();
  o.checksum = sink->checksum();
  o.write_failed = sink->write_failed();
  return o;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nexmark_query: one NEXMark query (q0-q5, q7, q8, q11) as a rill job"};
  std::string query = "q0", output;
  std::vector<std::string> inputs;
  std::uint64_t events = 100'000;
  std::size_t workers = 1;
  std::uint64_t max_delay_ms = 4000;
  app.add_option("--query,-q", query, "q0, q1, q2, q3, q4, q5, q7, q8 or q11")
      ->capture_default_str()
      ->check(CLI::IsMember({"q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q11"}));
  app.add_option("--max-delay-ms", max_delay_ms,
                 "windows and joins: max out-of-order delay of the watermark, ms")
      ->capture_default_str()
      ->check(rill_examples::whole_number(0, 100LL * 365 * 86'400'000));
  app.add_option("--input,-i", inputs,
                 "binary event file (nexmark_gen --format binary), one "
                 "split per file (repeat); without it, --events generated events");
  app.add_option("--events,-n", events, "generated events when there is no --input")
      ->capture_default_str()
      ->check(rill_examples::whole_number(0, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--output,-o", output, "rows as JSON lines to FILE, - = stdout (default: none)");
  app.add_option("--workers", workers, "worker threads")
      ->capture_default_str()
      ->check(rill_examples::whole_number(1, std::int64_t(rill::max_workers)));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  std::signal(SIGPIPE, SIG_IGN);
  std::FILE* out = nullptr;
  if (output == "-") {
    out = stdout;
  } else if (!output.empty()) {
    out = std::fopen(output.c_str(), "wb");
    if (out == nullptr) {
      std::cerr << "nexmark_query: cannot create --output " << output << ": "
                << std::strerror(errno) << "\n";
      return 2;
    }
  }

  outcome o;
  try {
    auto events_stream = [&] {
      return inputs.empty()
                 ? rill::from(nexmark::generated_events{{}, events})
                 : rill::from(nexmark::event_file_source{{inputs.begin(), inputs.end()}});
    };
    // The join queries' second read of the same events.
    auto auctions_stream = [&] {
      return inputs.empty() ? rill::from(nexmark::generated_events{{}, events}, "source_auctions")
                            : rill::from(nexmark::event_file_source{{inputs.begin(), inputs.end()}},
                                         "source_auctions");
    };
    const nexmark::window_query_options wo{.max_delay = std::chrono::milliseconds{max_delay_ms}};
    namespace nx = nexmark;
    if (query == "q0")
      o = run_query<nx::q0_row>([&] { return nx::q0(events_stream()); }, workers, out);
    else if (query == "q1")
      o = run_query<nx::q1_row>([&] { return nx::q1(events_stream()); }, workers, out);
    else if (query == "q2")
      o = run_query<nx::q2_row>([&] { return nx::q2(events_stream()); }, workers, out);
    else if (query == "q3")
      o = run_query<nx::q3_row>([&] { return nx::q3(events_stream(), auctions_stream(), wo); },
                                workers, out);
    else if (query == "q4")
      o = run_query<nx::q4_row>([&] { return nx::q4(auctions_stream(), events_stream(), wo); },
                                workers, out);
    else if (query == "q5")
      o = run_query<nx::q5_row>([&] { return nx::q5(events_stream(), wo); }, workers, out);
    else if (query == "q7")
      o = run_query<nx::q7_row>([&] { return nx::q7(events_stream(), wo); }, workers, out);
    else if (query == "q8")
      o = run_query<nx::q8_row>([&] { return nx::q8(events_stream(), auctions_stream(), wo); },
                                workers, out);
    else
      o = run_query<nx::q11_row>([&] { return nx::q11(events_stream(), wo); }, workers, out);
  } catch (const nexmark::event_file_error& e) {
    std::cerr << "nexmark_query: --input " << e.what() << "\n";
    return 2;
  }
  bool write_failed = o.write_failed;
  if (out != nullptr) write_failed = (std::fflush(out) != 0) || write_failed;
  if (out != nullptr && out != stdout) write_failed = (std::fclose(out) != 0) || write_failed;

  const std::uint64_t read = o.report.stage("source").out;
  std::string errors = "[";
  for (std::size_t i = 0; i < o.report.errors.size(); ++i)
    errors += (i ? "," : "") + json_string(o.report.errors[i]);
  errors += "]";
  char checksum[17];
  std::snprintf(checksum, sizeof checksum, "%016" PRIx64, o.checksum);
  const double eps = o.report.elapsed_s > 0 ? static_cast<double>(read) / o.report.elapsed_s : 0;
  std::cerr << "{\"query\":\"" << query << "\",\"events\":" << read << ",\"rows\":" << o.rows
            << ",\"checksum\":\"" << checksum << "\",\"workers\":" << workers
            << ",\"elapsed_s\":" << o.report.elapsed_s << ",\"events_per_s\":" << eps
            << ",\"errors\":" << errors << "}\n";
  for (const auto& e : o.report.errors) std::cerr << "nexmark_query: " << e << "\n";
  if (write_failed) {
    std::cerr << "nexmark_query: writing --output " << output << " failed\n";
    return 1;
  }
  return o.report.errors.empty() ? 0 : 1;
}

// nexmark_query — runs one NEXMark query (include/nexmark/queries.hpp) as a rill job over
// a binary event file (nexmark_gen --format binary) or over generated events.
//
//   nexmark_query                                   # q0 over 100,000 generated events
//   nexmark_query --query q1 --input events.bin --output rows.jsonl
//   nexmark_query --query q2 --input part0.bin --input part1.bin --workers 2  # a split each
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
#include <rill/rill.hpp>
#include <string>
#include <vector>

namespace {

struct outcome {
  std::uint64_t rows = 0, checksum = 0;
  bool write_failed = false;
  rill::run_report report;
};

template <class Row, class Query>
outcome run_query(Query query, rill::stream<nexmark::event>&& events, std::size_t workers,
                  std::FILE* out) {
  auto sink = std::make_shared<nexmark::row_sink<Row>>(workers, out);
  rill::runtime rt{{.workers = workers}};
  outcome o;
  o.report = rt.run(query(std::move(events)).sink(sink));
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
  CLI::App app{"nexmark_query: one NEXMark query (q0, q1, q2) as a rill job"};
  std::string query = "q0", output;
  std::vector<std::string> inputs;
  std::uint64_t events = 100'000;
  std::size_t workers = 1;
  app.add_option("--query,-q", query, "q0, q1 or q2")
      ->capture_default_str()
      ->check(CLI::IsMember({"q0", "q1", "q2"}));
  app.add_option("--input,-i", inputs,
                 "binary event file (nexmark_gen --format binary), one "
                 "split per file (repeat); without it, --events generated events");
  app.add_option("--events,-n", events, "generated events when there is no --input")
      ->capture_default_str()
      ->check(rill_examples::whole_number(0, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--output,-o", output, "rows as JSON lines to FILE, - = stdout (default: none)");
  app.add_option("--workers", workers, "worker threads")
      ->capture_default_str()
      ->check(rill_examples::whole_number(1, 4096));
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
    if (query == "q0")
      o = run_query<nexmark::q0_row>(nexmark::q0, events_stream(), workers, out);
    else if (query == "q1")
      o = run_query<nexmark::q1_row>(nexmark::q1, events_stream(), workers, out);
    else
      o = run_query<nexmark::q2_row>(nexmark::q2, events_stream(), workers, out);
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

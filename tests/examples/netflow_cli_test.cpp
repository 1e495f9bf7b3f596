// examples/netflow on bad arguments and awkward surroundings: each bad value exits 2 with
// a message naming the option and the value; --summary - is stdout; a reader that closes
// the output pipe early is a write error (exit 1), not a death by SIGPIPE.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>

#include "cli_test_util.hpp"

namespace {

namespace fs = std::filesystem;
using cli_test::has;
using cli_test::line_count;
const auto scratch = cli_test::scratch_dir("netflow_cli_test");
cli_test::outcome run(const std::string& command) { return cli_test::run(command, scratch); }
void expect_usage_error(const std::string& command, std::initializer_list<std::string> parts) {
  cli_test::expect_usage_error(command, parts, scratch);
}
const std::string netflow = NETFLOW_BINARY;
/// Writes a pcapgen capture of `flows` flows with 2 packets each to `path`; true on success.
bool make_capture(const fs::path& path, int flows) {
  fs::create_directories(path.parent_path());
  return std::system((std::string(PCAPGEN_BINARY) + " --output " + path.string() + " --flows " +
                      std::to_string(flows) + " --packets-per-flow 2 --quiet")
                         .c_str()) == 0;
}

TEST(netflow_cli, huge_and_negative_workers_name_the_option_and_the_range) {
  expect_usage_error(netflow + " --workers 99999999999999999999",
                     {"--workers", "99999999999999999999", "out of range", "0..1024"});
  expect_usage_error(netflow + " --workers 5000", {"--workers", "5000", "out of range"});
  // rill::max_workers: 1024 runs, 1025 is refused before any worker starts.
  expect_usage_error(netflow + " --workers 1025",
                     {"netflow: --workers: 1025 is out of range: must be in 0..1024 (0 = one per core)"});
  expect_usage_error(netflow + " --workers 4096", {"--workers", "4096", "out of range", "0..1024"});
  expect_usage_error(netflow + " --workers -1",
                     {"--workers: must be >= 0 (0 = one per core), got -1"});
  expect_usage_error(netflow + " --workers abc", {"--workers", "\"abc\"", "whole number"});
}

TEST(netflow_cli, durations_are_reported_under_the_option_typed) {
  for (const char* zero : {"0s", "0", "0ms"}) {
    const auto r = run(netflow + " --window " + zero);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(has(r.err, std::string("--window: must be > 0, got \"") + zero + "\"")) << r.err;
    EXPECT_FALSE(has(r.err, "window_sort")) << "internal name in: " << r.err;
  }
  // a value only the runtime rejects is still named by its option
  {
    const auto r = run(netflow + " --topology bad");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(has(r.err, "netflow: --topology: expected")) << r.err;
    EXPECT_TRUE(has(r.err, "\"bad\"")) << r.err;
    EXPECT_FALSE(has(r.err, "runtime.")) << "internal name in: " << r.err;
  }
  expect_usage_error(netflow + " --max-delay 99999999999999999999s",
                     {"--max-delay", "99999999999999999999s", "too large"});
}

// A duration with a minus sign is refused as negative, not as a bad format.
TEST(netflow_cli, negative_durations_are_refused_as_negative) {
  expect_usage_error(netflow + " --max-delay -1s", {"netflow: --max-delay: must not be negative, got \"-1s\""});
  expect_usage_error(netflow + " --max-delay=-250ms",
                     {"netflow: --max-delay: must not be negative, got \"-250ms\""});
  expect_usage_error(netflow + " --window -5s", {"netflow: --window: must not be negative, got \"-5s\""});
  const auto r = run(netflow + " --max-delay -1s");
  EXPECT_FALSE(has(r.err, "expected a duration")) << r.err;
}

// Every message of the argument parser starts with "netflow: ", as the program's other
// errors do (CLI11's own messages included), and still names the option and the value.
TEST(netflow_cli, argument_errors_start_with_the_program_name) {
  for (const char* args : {" --workers -1", " --workers 5000", " --format xml", " --window 0s", " --no-such-option",
                           " --conversations --window 5s", " --ipfix 127.0.0.1", " --max-delay 5x",
                           " --input /nonexistent.pcap"}) {
    SCOPED_TRACE(args);
    const auto r = run(netflow + args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("netflow: ", 0), 0u) << r.err;
  }
  expect_usage_error(netflow + " --workers -1", {"netflow: --workers: must be >= 0 (0 = one per core), got -1"});
}

TEST(netflow_cli, flow_options_name_the_option_and_the_value) {
  expect_usage_error(netflow + " --ipfix 127.0.0.1", {"--ipfix", "HOST:PORT", "\"127.0.0.1\""});
  expect_usage_error(netflow + " --ipfix 127.0.0.1:0", {"--ipfix", "1..65535", "\"127.0.0.1:0\""});
  expect_usage_error(netflow + " --ipfix :4739", {"--ipfix", "\":4739\""});
  expect_usage_error(netflow + " --ipfix nosuchhost.invalid:4739", {"--ipfix", "nosuchhost.invalid:4739"});
  expect_usage_error(netflow + " --format xml", {"--format", "xml"});
  expect_usage_error(netflow + " --conversations --window 5s", {"--conversations", "--window"});
  expect_usage_error(netflow + " --conversations --report x.html", {"--conversations", "--report"});
  expect_usage_error(netflow + " --filter \"ip and (\"", {"--filter", "ip and (", "syntax error"});
}

// Kafka mode's --idle-exit is checked before any broker is contacted (was "netflow: stoll").
TEST(netflow_cli, kafka_idle_exit_out_of_range_names_the_option_and_the_value) {
  expect_usage_error(
      netflow + " --brokers 127.0.0.1:1 --from a --to b --idle-exit 99999999999999999999s",
      {"--idle-exit", "\"99999999999999999999s\" is out of range"});
  expect_usage_error(netflow + " --brokers 127.0.0.1:1 --from a --to b --idle-exit abc",
                     {"--idle-exit", "\"abc\""});
}

// --idle-exit takes the duration syntax of --window and --max-delay (it took only s and
// ms: "2m" was a usage error). Accepted, the run goes on to the broker, where nothing
// listens on port 1: the analysis' start error (exit 2 after its 10 s wait), not one
// about --idle-exit.
TEST(netflow_cli, kafka_idle_exit_takes_the_other_durations_syntax) {
  const auto r = run(netflow + " --brokers 127.0.0.1:1 --from a --to b --idle-exit 2m");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(has(r.err, "--idle-exit")) << r.err;
  EXPECT_TRUE(has(r.err, "no broker of '127.0.0.1:1' answered")) << r.err;
}

// Topic names Kafka refuses (1..249 of [a-zA-Z0-9._-], not "." or "..") are usage errors
// while parsing, naming the option and the value; no broker is contacted.
TEST(netflow_cli, kafka_illegal_topic_names_name_the_option_and_the_value) {
  const std::string kafka = netflow + " --brokers 127.0.0.1:1";
  expect_usage_error(kafka + " --from \"a b\" --to b",
                     {"--from", "\"a b\"", "not a legal Kafka topic name"});
  expect_usage_error(kafka + " --from a --to ..", {"--to", "\"..\"", "not a legal Kafka topic name"});
  expect_usage_error(kafka + " --from . --to b", {"--from", "\".\"", "not a legal Kafka topic name"});
  expect_usage_error(kafka + " --from a --to \"\"", {"--to", "\"\"", "not a legal Kafka topic name"});
  expect_usage_error(kafka + " --from a --to b/c", {"--to", "\"b/c\"", "not a legal Kafka topic name"});
  const std::string long_name(250, 'x');
  expect_usage_error(kafka + " --probe --topic " + long_name,
                     {"--topic", long_name, "not a legal Kafka topic name"});
}

// The probe against a broker that is down (nothing listens on port 1): it waits for a
// broker as long as the analysis does (10 s, kafka_source's start_timeout), then exits 1
// with one line naming the broker. It used to wait out the 30 s flush, then print the
// summary and "43 records undelivered after flush timeout" (http.pcap), or one line per
// packet when the packets' 30 s delivery timeouts came first. The topic is the longest legal name, of
// every allowed character: the topic check lets it through.
TEST(netflow_cli, probe_with_unreachable_broker_fails_fast_with_one_message) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run(netflow +
                     " --probe --input /usr/share/doc/python3-dpkt/examples/data/http.pcap"
                     " --brokers 127.0.0.1:1 --topic " + std::string(243, 'y') + "zA9._-");
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(took, std::chrono::seconds{20});
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_TRUE(has(r.err, "no broker of '127.0.0.1:1' answered within 10000 ms")) << r.err;
  EXPECT_TRUE(has(r.err, "0 packets published")) << r.err;
}

// pcapgen, netflow's capture generator, the same way.
TEST(netflow_cli, pcapgen_numbers_out_of_range_name_the_option_and_the_value) {
  const std::string gen =
      std::string(PCAPGEN_BINARY) + " --quiet --output " + (scratch / "g.pcap").string();
  expect_usage_error(gen + " --flows 99999999999999999999",
                     {"--flows", "99999999999999999999", "out of range"});
  expect_usage_error(gen + " --packets-per-flow -1", {"--packets-per-flow: must be >= 1, got -1"});
  expect_usage_error(gen + " --seed -1", {"--seed: must be >= 0, got -1"});
}

// pcapgen's durations are netflow's: an error names the option and the value (it said
// "bad duration '5x'", and a too-large one overflowed silently). An --output that cannot
// be created is a run-time failure (exit 1; bad arguments are 2) naming the option, the
// path and the OS error.
TEST(netflow_cli, pcapgen_duration_errors_and_uncreatable_output_are_named) {
  const std::string gen =
      std::string(PCAPGEN_BINARY) + " --quiet --output " + (scratch / "g.pcap").string();
  expect_usage_error(gen + " --jitter 5x", {"--jitter", "\"5x\"", "expected a duration"});
  expect_usage_error(gen + " --interval 99999999999999999s",
                     {"--interval", "\"99999999999999999s\" is out of range"});
  const auto r = run(std::string(PCAPGEN_BINARY) + " --quiet --output /nonexistent-dir/x.pcap");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "pcapgen: cannot create --output /nonexistent-dir/x.pcap: No such file or directory"))
      << r.err;
}

// --summary - is stdout; it cannot share stdout with the rows.
TEST(netflow_cli, summary_dash_is_stdout) {
  const auto rows = scratch / "rows.jsonl";
  const auto r = run(netflow + " --output " + rows.string() + " --summary -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(r.out);  // stdout: exactly the summary
  EXPECT_GT(summary["packets"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(summary["windows_rows"].get<std::size_t>(), line_count(cli_test::slurp(rows)));
  EXPECT_FALSE(has(r.err, "\"packets\"")) << r.err;

  expect_usage_error(netflow + " --summary -", {"--summary -", "stdout", "--output FILE"});
}

// An output on the input is refused before anything is opened (the capture keeps its
// bytes), and so are two outputs on one file (whatever the spelling), with exit 2 and
// both names; /dev/null may take both.
TEST(netflow_cli, an_output_on_the_input_or_on_another_output_is_refused) {
  const auto capture = scratch / "victim.pcap";
  ASSERT_TRUE(make_capture(capture, 10));
  const auto size = fs::file_size(capture);
  const std::string in = netflow + " --input " + capture.string();
  expect_usage_error(in + " --output " + capture.string(), {"--output", "is the input", "victim.pcap"});
  expect_usage_error(in + " --report " + capture.string(), {"--report", "is the input"});
  EXPECT_EQ(fs::file_size(capture), size);
  const auto rows = scratch / "same.txt";
  fs::remove(rows);
  expect_usage_error(in + " --output " + rows.string() + " --summary " + (scratch / "." / "same.txt").string(),
                     {"--output", "--summary", "are the same file"});
  EXPECT_FALSE(fs::exists(rows));
  const auto r = run(in + " --output /dev/null --summary /dev/null");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  fs::remove(capture);
}

// A reader that closes the pipe early (netflow | head -1): no death by SIGPIPE (141); a
// write error, exit 1, named. 3,000 flows in one window make ~600 KB of rows, far more
// than a pipe holds, so the write after head exits fails every time.
TEST(netflow_cli, closed_output_pipe_is_a_write_error_not_sigpipe) {
  const auto capture = scratch / "many_flows.pcap";
  ASSERT_TRUE(make_capture(capture, 3000));
  const auto r =
      run(netflow + " --input " + capture.string() + " | head -1; exit ${PIPESTATUS[0]}");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(line_count(r.out), 1u);
  EXPECT_TRUE(has(r.err, "writing --output - failed: the reader closed the pipe (EPIPE)")) << r.err;
  fs::remove(capture);
}

}  // namespace

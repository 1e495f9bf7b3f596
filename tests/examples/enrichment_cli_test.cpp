// examples/enrichment on bad arguments and with its REST service down: each bad value
// exits 2 with a message naming the option and the value (Kafka-mode options too, checked
// while parsing: no broker needed); a service that is down gives exact error counts and a
// few lines on stderr, not one per record.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

namespace {

using cli_test::has;
using cli_test::line_count;
const auto scratch = cli_test::scratch_dir("enrichment_cli_test");
cli_test::outcome run(const std::string& command) { return cli_test::run(command, scratch); }
void expect_usage_error(const std::string& command, std::initializer_list<std::string> parts) {
  cli_test::expect_usage_error(command, parts, scratch);
}
const std::string enrichment = ENRICHMENT_BINARY;

TEST(enrichment_cli, numbers_out_of_range_name_the_option_and_the_value) {
  expect_usage_error(enrichment + " --batch-size 99999999999999999999",
                     {"--batch-size", "99999999999999999999", "out of range", "1..1000000"});
  expect_usage_error(enrichment + " --max-in-flight 99999999999999999999",
                     {"--max-in-flight", "99999999999999999999", "out of range"});
  expect_usage_error(enrichment + " --latency -1", {"--latency: must be >= 0, got -1"});
  expect_usage_error(enrichment + " --rate 1e400", {"--rate", "1e400", "out of range"});
  expect_usage_error(enrichment + " --seconds 0", {"--seconds: must be > 0, got 0"});
  // Kafka-mode options are checked while parsing: no broker is contacted.
  expect_usage_error(
      enrichment + " --brokers 127.0.0.1:1 --from a --to b --workers 99999999999999999999",
      {"--workers", "99999999999999999999", "out of range", "1..64"});
  expect_usage_error(
      enrichment + " --brokers 127.0.0.1:1 --from a --to b --idle-exit 99999999999999999999s",
      {"--idle-exit", "99999999999999999999s", "out of range"});
  expect_usage_error(enrichment + " --brokers 127.0.0.1:1 --from a --to b --retries 1001",
                     {"--retries", "1001", "out of range", "0..1000"});
}

// The service on its own: a huge --threads used to try to start 2^64-1 threads.
TEST(enrichment_cli, service_numbers_out_of_range_name_the_option_and_the_value) {
  const std::string svc = ENRICHMENT_SERVICE_BINARY;
  expect_usage_error(svc + " --threads 99999999999999999999",
                     {"--threads", "99999999999999999999", "out of range"});
  expect_usage_error(svc + " --port 65536", {"--port", "65536", "out of range", "0..65535"});
  expect_usage_error(svc + " --latency -1", {"--latency: must be >= 0, got -1"});
  // a fault rate is a fraction of the requests, 0..1 (number_in): 1.5 and -0.5 were taken
  // and the service ran (timeout: such a run ends after 5 s with 124, not 2)
  const std::string bounded = "timeout 5 " + svc;
  expect_usage_error(bounded + " --fault 5xx:1.5", {"--fault", "5xx:1.5", "1.5 is out of range", "<= 1"});
  expect_usage_error(bounded + " --fault drop:-0.5", {"--fault", "drop:-0.5", "must be >= 0", "-0.5"});
  expect_usage_error(bounded + " --fault stall:nan", {"--fault", "stall:nan", "\"nan\""});
  // first=N is a count: "-1" was taken as 2^64 - 1 (every request faulted) and the service ran
  expect_usage_error(bounded + " --fault drop:first=-1", {"--fault", "drop:first=-1", "must be >= 0", "-1"});
  expect_usage_error(bounded + " --fault drop:first=x", {"--fault", "drop:first=x", "\"x\""});
}

// Kafka topic names are checked while parsing, as in netflow (Kafka's rule: 1..249 of
// [a-zA-Z0-9._-], not "." or ".."): no broker is contacted.
TEST(enrichment_cli, kafka_illegal_topic_names_name_the_option_and_the_value) {
  expect_usage_error(enrichment + " --brokers 127.0.0.1:1 --from \"a b\" --to b",
                     {"--from", "\"a b\"", "not a legal Kafka topic name"});
  expect_usage_error(enrichment + " --brokers 127.0.0.1:1 --from a --to ..",
                     {"--to", "\"..\"", "not a legal Kafka topic name"});
}

// --from/--to are Kafka mode's: without --brokers they say so (CLI11 needs), not that
// --rate is for the generator mode.
TEST(enrichment_cli, from_and_to_need_brokers) {
  for (const char* args : {" --from a --to b", " --from a --to b --rate 10", " --to b --seconds 1",
                           // the other Kafka-mode options were ignored in the generator mode
                           " --group g --seconds 1", " --idle-exit 3s --seconds 1", " --workers 2 --seconds 1",
                           " --progress --seconds 1", " --retries 3 --seconds 1"}) {
    const auto r = run(enrichment + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_TRUE(has(r.err, "requires --brokers")) << args << ": " << r.err;
    EXPECT_FALSE(has(r.err, "generator mode")) << args << ": " << r.err;
  }
}

// 0s would print a line every loop step; no --progress is how to have none.
TEST(enrichment_cli, progress_interval_must_be_positive) {
  for (const char* zero : {"0s", "0ms", "0"})
    expect_usage_error(
        enrichment + " --brokers 127.0.0.1:1 --from a --to b --progress --progress-interval " +
            zero,
        {std::string("--progress-interval: must be > 0"), std::string("\"") + zero + "\""});
}

// --idle-exit and --progress-interval take the durations netflow's options take
// (rill_examples::parse_duration: ns..h). Before, only s and ms: "1m" was a usage error
// naming --progress-interval. Now it parses, and the run stops at the next check (the
// empty group) before any broker is contacted.
TEST(enrichment_cli, durations_take_the_shared_units) {
  const auto r = run(enrichment + " --brokers 127.0.0.1:1 --from a --to b --group \"\" --idle-exit 2m"
                                  " --progress --progress-interval 1m");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "--group must not be empty")) << r.err;
  EXPECT_FALSE(has(r.err, "--progress-interval")) << r.err;
  expect_usage_error(enrichment + " --brokers 127.0.0.1:1 --from a --to b --progress --progress-interval 3x",
                     {"--progress-interval", "\"3x\"", "expected a duration like 10s, 500ms, 2m"});
}

// The service is down (nothing listens on port 1): every record fails, the count is
// exact, but stderr gets the first failure and a few count lines, not one per record.
TEST(enrichment_cli, service_down_errors_are_aggregated_and_counted_exactly) {
  const auto r = run(enrichment + " --url http://127.0.0.1:1/enrich --rate 0 --seconds 0.02");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto summary = nlohmann::json::parse(r.out);
  EXPECT_EQ(summary["records"], 2000);
  EXPECT_EQ(summary["errors"], 2000);
  EXPECT_EQ(summary["enriched"], 0);
  EXPECT_LE(line_count(r.err), 5u) << r.err;
  EXPECT_TRUE(has(r.err, "refused")) << r.err;
  EXPECT_TRUE(has(r.err, "2000 in total")) << r.err;
}

}  // namespace

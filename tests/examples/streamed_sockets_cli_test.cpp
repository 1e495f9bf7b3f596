// examples/streamed_sockets and scripts/streamed_sockets.sh on bad arguments: each bad
// value exits 2 with a message naming the option and the value (a huge number is "out of
// range", never a shell arithmetic error); a role without the endpoints it needs says so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <iostream>

#include "cli_test_util.hpp"

namespace {

using cli_test::has;
using cli_test::line_count;
const auto scratch = cli_test::scratch_dir("streamed_sockets_cli_test");
cli_test::outcome run(const std::string& command) { return cli_test::run(command, scratch); }
void expect_usage_error(const std::string& command, std::initializer_list<std::string> parts) {
  cli_test::expect_usage_error(command, parts, scratch);
}
const std::string sockets = STREAMED_SOCKETS_BINARY, sockets_script = STREAMED_SOCKETS_SCRIPT;

TEST(streamed_sockets_cli, numbers_out_of_range_name_the_option_and_the_value) {
  const std::string gen =
      sockets + " --role generator --out connect:127.0.0.1:1 --back listen:127.0.0.1:0";
  expect_usage_error(gen + " --bytes 99999999999999999999",
                     {"--bytes", "99999999999999999999", "out of range"});
  expect_usage_error(gen + " --bytes -1", {"--bytes: must be >= 32", "got -1"});
  expect_usage_error(gen + " --bytes 33", {"--bytes", "multiple of 32", "33"});
  expect_usage_error(gen + " --tick 99999999999999999999",
                     {"--tick", "99999999999999999999", "out of range"});
  expect_usage_error(gen + " --real-rate 1e400", {"--real-rate", "1e400", "out of range"});
  // Below one request per 1000 s the period would not fit in 64-bit nanoseconds.
  expect_usage_error(gen + " --real-rate 1e-10", {"--real-rate", "1e-10", ">= 0.001"});
  expect_usage_error(gen + " --stall-timeout 0", {"--stall-timeout", "must be >= 1", "got 0"});
  expect_usage_error(sockets + " --role indexer --in listen:127.0.0.1:0 --buffer -1",
                     {"--buffer: must be >= 1, got -1"});
  expect_usage_error(sockets + " --role generator", {"--role generator needs --out"});
  // Found before the run, not after it.
  expect_usage_error(gen + " --latency-out /proc/no/such/file", {"--latency-out /proc/no/such/file", "No such file"});
}

TEST(streamed_sockets_cli, script_rejects_huge_numbers_without_shell_errors) {
  for (const std::string opt : {"--bytes", "--tick", "--base-port"}) {
    SCOPED_TRACE(opt);
    const auto r = run(sockets_script + " " + opt + " 99999999999999999999 --bin /bin/false");
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(has(r.err, opt + " 99999999999999999999 is out of range")) << r.err;
    EXPECT_FALSE(has(r.err, "integer expression")) << r.err;
  }
  expect_usage_error(sockets_script + " --bytes 33 --bin /bin/false",
                     {"--bytes", "multiple of 32", "'33'"});
  expect_usage_error(sockets_script + " --real-rate 99999999999999999999 --bin /bin/false",
                     {"--real-rate", "99999999999999999999"});
  expect_usage_error(sockets_script + " --real-rate 0.0001 --bin /bin/false",
                     {"--real-rate", "0.001..1000000", "'0.0001'"});
  // Checked before any role starts (the generator itself would find out after the others).
  expect_usage_error(sockets_script + " --latency-out /proc/no/such/file --bin /bin/false",
                     {"--latency-out /proc/no/such/file", "cannot write"});
  expect_usage_error(sockets_script + " --bogus", {"unknown argument --bogus"});
  expect_usage_error(sockets_script + " --bytes", {"--bytes needs a value"});
}

// A role stopped by a signal mid-stream makes the script exit 1 naming that role and its
// status, and leaves no role running: SIGKILL to the generator (the other roles then end
// on their own, which is what made a `wait -n` lose the killed one), and SIGINT to the
// processor (a role sets SIGINT back to its default action: bash starts every background
// job with it ignored). The segment files go, the logs stay. The
// generator starts last, once the others listen; 3 GiB at 0.2 GB/s would run for 15 s.
void signal_a_role(const std::string& signal, const std::string& role, int port_offset,
                   const std::string& status, int base) {
  // "[x]", "[1]": the patterns match the roles' command lines, not this shell's own.
  const std::string who = "--role [" + role.substr(0, 1) + "]" + role.substr(1) + " --" +
                          (role == "generator" ? "out connect" : "in listen") +
                          ":127.0.0.1:" + std::to_string(base + port_offset);
  // The script runs as a background job of this shell, which bash starts with SIGINT
  // ignored; each role sets it back.
  const auto work = scratch / ("signalled-" + role);
  const auto r = run("(" + sockets_script + " --bin " + sockets +
                     " --bytes 3221225472 --rate 0.2 --base-port " + std::to_string(base) +
                     " --work " + work.string() + " & s=$!; " +
                     "for i in $(seq 200); do pgrep -f -- \"--role [g]enerator --out connect:127.0.0.1:" +
                     std::to_string(base + 1) + "\" >/dev/null && break; sleep 0.05; done; " +
                     "pkill -" + signal + " -f -- \"" + who + "\"; wait $s; echo script=$?; sleep 0.2; " +
                     "pgrep -f -- \"[1]27.0.0.1:" + std::to_string(base + 4) + "\" || echo none-left; " +
                     "ls -d " + work.string() + "/indexer " + work.string() + "/forwarder 2>/dev/null || echo no-segments)");
  EXPECT_TRUE(has(r.out, "script=1")) << r.out << r.err;
  EXPECT_TRUE(has(r.err, "the " + role + " exited with status " + status)) << r.err;
  EXPECT_FALSE(has(r.err, "no such job")) << r.err;
  EXPECT_TRUE(has(r.out, "none-left")) << r.out;
  EXPECT_TRUE(has(r.out, "no-segments")) << r.out;  // the logs stay, the segment files go
  EXPECT_TRUE(std::filesystem::exists(work / (role + ".log")));
}

TEST(streamed_sockets_cli, script_names_a_killed_role_and_stops_the_others) {
  signal_a_role("KILL", "generator", 1, "137", 14000 + static_cast<int>(::getpid() % 500) * 6);
}

TEST(streamed_sockets_cli, sigint_stops_a_role_the_script_started) {
  signal_a_role("INT", "processor", 3, "130", 17000 + static_cast<int>(::getpid() % 500) * 6);
}

// The five roles end to end on loopback (8 MiB, disk on): every record arrives at both
// terminator inputs with consecutive indexes (stamped in place by the indexer), every real
// request is answered, and the indexer's and forwarder's segment files (written with
// write(2) on each relay's loop) are equal by MD5 and hold every byte.
// The ports sit below Linux's ephemeral range (32768-60999), where another test's outgoing
// connection could hold one; a port another process listens on is retried with new ports.
// Both ways of reading: blocking reads on each role's loop thread (the default) and
// Asio's reactor (`reads` = "--reactor-reads"). The generator's --latency-out holds one
// round trip per answered real request. Each way has a work directory of its own
// (ctest -j runs both at once, and the script empties its segment directories first).
void five_roles(const std::string& reads) {
  cli_test::outcome r;
  const auto latencies = scratch / ("latencies" + reads);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int base = 20000 + static_cast<int>((::getpid() + attempt * 701) % 2000) * 6;
    r = run(sockets_script + " --bin " + sockets + " --bytes 8388608 --base-port " +
            std::to_string(base) + " --work " + (scratch / ("five_roles" + reads)).string() +
            " --latency-out " + latencies.string() + " " + reads);
    if (r.exit_code == 0 || !has(r.out + r.err, "Address already in use")) break;
    std::cerr << "a port from " << base << " is taken; trying other ports\n";
  }
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "md5: MATCH")) << r.out;
  EXPECT_TRUE(has(r.out, "terminator: 262144 records")) << r.out;
  EXPECT_TRUE(has(r.out, "terminator (tap): 262144 records")) << r.out;
  std::size_t clean = 0;  // terminator lines with no index error and no gap: both inputs
  for (auto at = r.out.find("index errors 0, gaps 0"); at != std::string::npos;
       at = r.out.find("index errors 0, gaps 0", at + 1))
    ++clean;
  EXPECT_EQ(clean, 2u) << r.out;
  // --latency-out: one round trip (ns, a whole number) per answered real request.
  const auto at = r.out.find("answered ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const auto answered = std::stoull(r.out.substr(at + 9));
  EXPECT_GE(answered, 1u) << r.out;
  const std::string lines = cli_test::slurp(latencies);
  EXPECT_EQ(line_count(lines), answered) << lines;
  EXPECT_EQ(lines.find_first_not_of("0123456789\n"), std::string::npos) << lines;
}

TEST(streamed_sockets_cli, five_roles_deliver_everything_and_the_disk_copies_match) {
  five_roles("");
}

TEST(streamed_sockets_cli, five_roles_with_reactor_reads_deliver_everything_and_copies_match) {
  five_roles("--reactor-reads");
}

}  // namespace

// End-to-end tests of examples/netflow: its per-conversation and per-protocol totals
// against the independent tshark ground truth (../shared/data/pcap/NAME.truth.json), its
// output with 1 and 2 workers, and its behaviour on bad input.
//
// Graph under test:
//   pcap_source -> filter(IP) -> key_by(5-tuple) -> window_sort -> flat_map(count) -> ordered_sink
#include <gtest/gtest.h>

#include "rill/core/sanitizers.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path shared_pcaps = fs::path(RILL_SHARED_DIR) / "data" / "pcap";
const fs::path scratch = fs::path(RILL_TEST_BINARY_DIR) / "netflow_test_tmp";

struct result {
  int exit_code = -1;
  std::string stderr_text;
  std::vector<json> lines;
  json summary;
  std::string output_text;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// netflow `args` with --output and --summary in the scratch directory named after `tag`;
/// `prefix` goes before the program (e.g. "timeout -s KILL 60 ").
result run_netflow(const std::string& args, const std::string& tag, const std::string& prefix = "") {
  fs::create_directories(scratch);
  const auto out = scratch / (tag + ".jsonl"), sum = scratch / (tag + ".summary.json"),
             err = scratch / (tag + ".stderr");
  fs::remove(sum);
  const std::string cmd = prefix + std::string(NETFLOW_BINARY) + " " + args + " --output " + out.string() +
                          " --summary " + sum.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.stderr_text = slurp(err);
  r.output_text = slurp(out);
  std::istringstream lines(r.output_text);
  for (std::string line; std::getline(lines, line);) r.lines.push_back(json::parse(line));
  // created at start (an uncreatable --summary is exit 2), so empty when the run failed early
  if (fs::exists(sum) && fs::file_size(sum) > 0) r.summary = json::parse(slurp(sum));
  return r;
}

// Endpoint text as NAME.truth.json writes it: ip:port, [ipv6]:port, or bare address.
std::string endpoint(const json& line, const char* ip, const char* port) {
  const std::string addr = line[ip];
  if (line[port].is_null()) return addr;
  const bool v6 = addr.find(':') != std::string::npos;
  return (v6 ? "[" + addr + "]" : addr) + ":" + std::to_string(int(line[port]));
}

using conv_key = std::tuple<std::string, std::string, std::string>;  // proto, a, b (text-sorted)
conv_key make_key(std::string proto, std::string a, std::string b) {
  if (b < a) std::swap(a, b);
  return {std::move(proto), std::move(a), std::move(b)};
}

class netflow_truth : public ::testing::TestWithParam<std::string> {};

TEST_P(netflow_truth, totals_match_tshark_ground_truth_for_1_and_2_workers) {
  const auto capture = shared_pcaps / GetParam();
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  const json truth = json::parse(slurp(capture.string() + ".truth.json"));

  std::string first_output;
  for (int workers : {1, 2}) {
    SCOPED_TRACE("workers=" + std::to_string(workers));
    auto r = run_netflow("--input " + capture.string() + " --workers " + std::to_string(workers),
                         GetParam() + ".w" + std::to_string(workers));
    ASSERT_EQ(r.exit_code, 0) << r.stderr_text;

    // Per protocol, bytes and non-IP: the summary against the truth totals.
    EXPECT_EQ(r.summary["packets"], truth["packets"]);
    EXPECT_EQ(r.summary["bytes"], truth["bytes"]);
    EXPECT_EQ(r.summary["non_ip"], truth["non_ip"]);
    for (const auto& proto : {"tcp", "udp", "icmp", "icmpv6", "other"}) {
      const std::uint64_t want = truth["by_proto"].value(proto, 0);
      EXPECT_EQ(r.summary["by_proto"][proto].get<std::uint64_t>(), want) << proto;
    }
    EXPECT_EQ(r.summary["late"], 0);

    // Per conversation: output rows summed over windows.
    std::map<conv_key, std::pair<std::uint64_t, std::uint64_t>> got, want;
    for (const auto& line : r.lines) {
      auto& pb = got[make_key(line["proto"], endpoint(line, "a_ip", "a_port"),
                              endpoint(line, "b_ip", "b_port"))];
      pb.first += line["packets"].get<std::uint64_t>();
      pb.second += line["bytes"].get<std::uint64_t>();
      // Every row lies in one tumbling window of 10 s.
      EXPECT_EQ(line["window_end_ns"].get<std::int64_t>() - line["window_start_ns"].get<std::int64_t>(),
                10'000'000'000LL);
    }
    for (const auto& c : truth["conversations"]) {
      want[make_key(c["proto"], c["a"], c["b"])] = {c["packets"], c["bytes"]};
    }
    EXPECT_EQ(got.size(), want.size());
    for (const auto& [k, pb] : want) {
      auto it = got.find(k);
      if (it == got.end()) {
        ADD_FAILURE() << "missing conversation " << std::get<0>(k) << " " << std::get<1>(k) << " "
                      << std::get<2>(k);
        continue;
      }
      EXPECT_EQ(it->second, pb) << std::get<0>(k) << " " << std::get<1>(k) << " " << std::get<2>(k);
    }
    EXPECT_EQ(r.summary["conversations"], want.size());

    // Same bytes out for any number of workers.
    if (workers == 1) first_output = r.output_text;
    else EXPECT_EQ(r.output_text, first_output);
  }
}

INSTANTIATE_TEST_SUITE_P(shared_corpus, netflow_truth,
                         ::testing::Values("bro.org.pcap", "dns_icmp.pcap", "echo-connections.pcap",
                                           "ftp-ipv6.pcap", "icmp6.pcap", "wechat.pcap",
                                           "wikipedia.pcap", "alexa-app.pcapng"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n) if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// NumaRing issue: the output is byte-identical with the stateless part shared through
// the node rings (--rebalance, 2 synthetic nodes) and without.
TEST(netflow, rebalance_output_is_byte_identical) {
  for (const char* name : {"echo-connections.pcap", "wechat.pcap"}) {
    const auto capture = shared_pcaps / name;
    if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
    auto plain = run_netflow("--input " + capture.string() + " --workers 1", std::string(name) + ".plain");
    auto shared = run_netflow("--input " + capture.string() +
                                  " --workers 4 --topology '2 nodes x 2 cores' --rebalance",
                              std::string(name) + ".rebalance");
    ASSERT_EQ(plain.exit_code, 0) << plain.stderr_text;
    ASSERT_EQ(shared.exit_code, 0) << shared.stderr_text;
    EXPECT_FALSE(plain.output_text.empty());
    EXPECT_EQ(shared.output_text, plain.output_text) << name;
    EXPECT_EQ(shared.summary["late"], 0);
  }
}

// Two-phase aggregation (--two-phase) gives the rows that moving every packet to its
// conversation's worker gives, byte for byte, on real captures and with windows that cut
// conversations.
TEST(netflow, two_phase_output_is_byte_identical_to_one_phase) {
  for (const char* name : {"echo-connections.pcap", "wechat.pcap", "bro.org.pcap"}) {
    const auto capture = shared_pcaps / name;
    if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
    const std::string base = "--input " + capture.string() + " --workers 2 --window 1s";
    auto two = run_netflow(base + " --two-phase", std::string(name) + ".two_phase");
    auto one = run_netflow(base, std::string(name) + ".one_phase");
    ASSERT_EQ(two.exit_code, 0) << two.stderr_text;
    ASSERT_EQ(one.exit_code, 0) << one.stderr_text;
    EXPECT_FALSE(one.output_text.empty());
    EXPECT_EQ(two.output_text, one.output_text) << name;
    EXPECT_EQ(two.summary["packets"], one.summary["packets"]) << name;
    EXPECT_EQ(two.summary["late"], 0);
  }
}

// What a signal test through a FIFO leaves: netflow's exit status, its summary and the
// packets its rows count.
struct fifo_run {
  int status = -1;
  json summary;
  std::uint64_t written = 0;
};
// Writes a pcapgen capture of `flows` x `per_flow` packets (--jitter 1ms) to `path`.
bool pcapgen(const fs::path& path, int flows, int per_flow) {
  fs::create_directories(path.parent_path());
  const std::string gen = std::string(PCAPGEN_BINARY) + " --output " + path.string() + " --flows " +
                          std::to_string(flows) + " --packets-per-flow " + std::to_string(per_flow) +
                          " --jitter 1ms --quiet";
  return std::system(gen.c_str()) == 0;
}
// Writes a pcapgen capture of `flows` x `per_flow` packets into a FIFO whose writer (the
// bash `write`, "cat $capture" unless given, then sleep 60) holds it open after the last
// byte, so the input has not ended when a signal comes, however fast the run; an empty
// `write`: nothing ever opens the FIFO for writing. Runs netflow --workers 2 --window 1s
// on it (and the arguments `also`); once the workers run (>= 3 threads: main, control,
// workers) runs the bash `then` as a function ($pid: netflow, $w: the writer; its status,
// or what it returns, is the run's) and kills what is left.
fifo_run run_through_fifo(const std::string& name, int flows, int per_flow, const std::string& then,
                          const std::string& write = "cat \"$capture\"", const std::string& also = "") {
  const auto capture = scratch / (name + ".pcap"), fifo = scratch / (name + ".fifo");
  fifo_run r;
  if (!pcapgen(capture, flows, per_flow)) return r;
  fs::remove(fifo);
  const auto out = scratch / (name + ".jsonl"), sum = scratch / (name + ".summary.json");
  const std::string writer = write.empty() ? "sleep 60 & w=$!; "
                                           : "( " + write + "; exec sleep 60 ) > " + fifo.string() +
                                                 " 2>/dev/null & w=$!; ";
  const std::string cmd = "capture=" + capture.string() + "; mkfifo " + fifo.string() + "; " + writer +
                          std::string(NETFLOW_BINARY) + " --input " + fifo.string() + " " + also +
                          " --workers 2 --window 1s --output " + out.string() + " --summary " + sum.string() +
                          " 2>/dev/null & pid=$!; for i in $(seq 1000); do"
                          " [ $(ls /proc/$pid/task 2>/dev/null | wc -l) -ge 3 ] && break; sleep 0.01; done;"
                          " then_() { " + then + "; }; then_; rc=$?; kill $w $pid 2>/dev/null; wait $w 2>/dev/null; exit $rc";
  r.status = std::system(("bash -c '" + cmd + "'").c_str());
  fs::remove(fifo);
  fs::remove(capture);
  if (!fs::exists(sum) || fs::file_size(sum) == 0) return r;  // none written: netflow failed
  r.summary = json::parse(slurp(sum));
  std::istringstream lines(slurp(out));
  for (std::string line; std::getline(lines, line);) r.written += json::parse(line)["packets"].get<std::uint64_t>();
  return r;
}

// SIGTERM mid-run: sources stop, in-flight packets drain, every window is flushed and the
// exit status is 0. Every packet read is in the output (summary packets == sum of rows).
// SIGTERM 0.5 s after the workers started (a signal before that is a graceful stop too,
// tests/core/run_control_test.cpp); the writer is killed 0.5 s after SIGTERM.
TEST(netflow, sigterm_drains_and_flushes_everything_read) {
  const auto r = run_through_fifo("sigterm", 200, 1000, "sleep 0.5; kill -TERM $pid; sleep 0.5; kill $w; wait $pid");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 0);
  ASSERT_TRUE(r.summary.is_object());
  const auto read = r.summary["packets"].get<std::uint64_t>();
  EXPECT_GT(read, 0u);
  EXPECT_LE(read, 200'000u);
  EXPECT_EQ(r.written + r.summary["late"].get<std::uint64_t>(), read);
}

// SIGINT while the FIFO's writer holds it open with nothing more to write: the reader
// does not wait in read() for bytes that never come (pcap_reader returns `again` on an
// empty pipe), so netflow drains, writes every packet it read and exits 0 within 10 s,
// while the writer still holds the FIFO (it is killed only after netflow ended).
// run_through_fifo's `then`: SIGINT 1 s after the workers started; the exit status is
// netflow's, or 124 when it was still running 10 s after SIGINT.
const std::string sigint_after_1s = "sleep 1; kill -INT $pid; for i in $(seq 100); do"
                                    " kill -0 $pid 2>/dev/null || { wait $pid; return $?; }; sleep 0.1; done; return 124";

TEST(netflow, sigint_stops_a_fifo_input_whose_writer_is_silent) {
  const auto r = run_through_fifo("sigint", 20, 50, sigint_after_1s);
  ASSERT_TRUE(WIFEXITED(r.status));
  ASSERT_EQ(WEXITSTATUS(r.status), 0) << "124: still running 10 s after SIGINT";
  ASSERT_TRUE(r.summary.is_object());
  EXPECT_EQ(r.summary["packets"].get<std::uint64_t>(), 1'000u);  // all written before the signal
  EXPECT_EQ(r.written, 1'000u);
}

// SIGINT while a FIFO input has no writer yet, while its writer has written 10 of the
// header's 24 bytes, and while it has stopped inside the last record (all but its last 10
// bytes written): each is a stop, as on an empty pipe. The FIFO gives its whole records
// (none, none, all but the last), the other input (a 100-packet capture file, read to
// its end meanwhile) all of its, every packet read is in the rows, and the exit status
// is 0 within 10 s of SIGINT.
TEST(netflow, sigint_while_a_fifo_input_opens_or_is_inside_a_record_is_a_stop) {
  const auto other = scratch / "fifo_other.pcap";
  ASSERT_TRUE(pcapgen(other, 5, 20));
  const struct {
    const char* name;
    std::string write;
    std::uint64_t from_fifo;
  } cases[] = {{"fifo_no_writer", "", 0},
               {"fifo_part_header", "head -c 10 \"$capture\"", 0},
               {"fifo_mid_record", "head -c -10 \"$capture\"", 199}};
  for (const auto& c : cases) {
    const auto r = run_through_fifo(c.name, 20, 10, sigint_after_1s, c.write, "--input " + other.string());
    ASSERT_TRUE(WIFEXITED(r.status)) << c.name;
    EXPECT_EQ(WEXITSTATUS(r.status), 0) << c.name << " (2: interrupted open; 124: still running 10 s after SIGINT)";
    ASSERT_TRUE(r.summary.is_object()) << c.name;
    EXPECT_EQ(r.summary["packets"].get<std::uint64_t>(), 100 + c.from_fifo) << c.name;
    EXPECT_EQ(r.written, 100 + c.from_fifo) << c.name;
  }
  fs::remove(other);
}

// Oversubscription: rill::max_workers (1024) workers on a 2-core machine read
// bro.org.pcap (751 packets, one split per worker, most of them empty) and write the
// rows 2 workers write, within 60 s: the key_by mesh has a million producer-consumer
// pairs, and each pair's end-of-stream marker passes in one batch, without polling.
TEST(netflow, max_workers_on_two_cores_give_the_rows_of_two) {
  if (RILL_ASAN || RILL_TSAN) GTEST_SKIP() << "1,024 sanitized threads: the Release run covers it";
  const auto capture = shared_pcaps / "bro.org.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  const auto two = run_netflow("--input " + capture.string() + " --workers 2", "bro.org.pcap.max_workers.w2");
  ASSERT_EQ(two.exit_code, 0) << two.stderr_text;
  const auto t0 = std::chrono::steady_clock::now();
  const auto many = run_netflow("--input " + capture.string() + " --workers 1024 --stall-threshold 0",
                                "bro.org.pcap.max_workers.w1024", "timeout -s KILL 60 ");
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(many.exit_code, 0) << "killed after 60 s, or failed: " << many.stderr_text;
  EXPECT_LT(took, std::chrono::seconds{60});
  EXPECT_FALSE(two.output_text.empty());
  EXPECT_EQ(many.output_text, two.output_text);
  EXPECT_EQ(many.summary["packets"], two.summary["packets"]);
  EXPECT_EQ(many.summary["workers"], 1024);
}

// SIGTERM stops a run of rill::max_workers workers on a 2-core machine promptly, as
// gracefully as with 2 (sigterm_drains_and_flushes_everything_read): exit status 0 and
// every packet read is in the output. netflow runs under `timeout -s KILL 90`; the
// signal comes 1 s after netflow's threads run, mid-run.
TEST(netflow, sigterm_stops_max_workers_promptly) {
  if (RILL_ASAN || RILL_TSAN) GTEST_SKIP() << "1,024 sanitized threads: the Release run covers it";
  fs::create_directories(scratch);
  const auto big = scratch / "sigterm_many.pcap";
  const std::string gen = std::string(PCAPGEN_BINARY) + " --output " + big.string() +
                          " --flows 200 --packets-per-flow 1000 --jitter 1ms --quiet";
  ASSERT_EQ(std::system(gen.c_str()), 0);
  const auto out = scratch / "sigterm_many.jsonl", sum = scratch / "sigterm_many.summary.json";
  fs::remove(sum);
  const std::string cmd = "timeout -s KILL 90 " + std::string(NETFLOW_BINARY) + " --input " + big.string() +
                          " --workers 1024 --stall-threshold 0 --window 1s --output " + out.string() +
                          " --summary " + sum.string() +
                          // $pid is timeout's; SIGTERM goes to it, and it hands the signal to
                          // netflow. Sent once netflow's own threads run (>= 3: main,
                          // control, workers), so its handler is in place on a slow machine
                          // too, and 1 s later, mid-run.
                          " 2>/dev/null & pid=$!; for i in $(seq 3000); do c=$(pgrep -P $pid);"
                          " [ -n \"$c\" ] && [ $(ls /proc/$c/task 2>/dev/null | wc -l) -ge 3 ] && break;"
                          " sleep 0.01; done;"
                          " sleep 1; kill -TERM $pid; wait $pid";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(("bash -c '" + cmd + "'").c_str());
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "137: killed after 90 s";
  EXPECT_LT(took, std::chrono::seconds{60});
  const json summary = json::parse(slurp(sum));
  const auto read = summary["packets"].get<std::uint64_t>();
  EXPECT_LE(read, 200'000u);
  std::uint64_t written = 0;
  std::istringstream lines(slurp(out));
  for (std::string line; std::getline(lines, line);) written += json::parse(line)["packets"].get<std::uint64_t>();
  EXPECT_EQ(written + summary["late"].get<std::uint64_t>(), read);
  fs::remove(big);
}

// --enrich (in-process service): dns_icmp.pcap's DNS conversations are port 53/udp, which
// /etc/services (netbase) names "domain"; 192.168.43.0/24 is private (RFC 1918) and the
// public resolvers 8.8.8.8, 8.8.4.4, 4.2.2.2 and 174.137.42.65 are global. ICMP rows have
// no service. Totals are unchanged.
TEST(netflow, enrich_adds_service_and_address_classes) {
  const auto capture = shared_pcaps / "dns_icmp.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  auto r = run_netflow("--input " + capture.string() + " --workers 2 --enrich", "enrich");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_FALSE(r.lines.empty());
  std::uint64_t packets = 0;
  for (const auto& l : r.lines) {
    packets += l["packets"].get<std::uint64_t>();
    if (l["proto"] == "udp") {
      EXPECT_EQ(l["service"], "domain") << l.dump();
    }
    if (l["proto"] == "icmp") {
      EXPECT_TRUE(l["service"].is_null()) << l.dump();
    }
    for (const char* side : {"a", "b"}) {
      const std::string ip = l[std::string(side) + "_ip"];
      const json cls = l[std::string(side) + "_class"];
      EXPECT_EQ(cls, ip.rfind("192.168.", 0) == 0 ? "private" : "global") << l.dump();
    }
  }
  EXPECT_EQ(packets, 32u);
  EXPECT_EQ(r.summary["enrich_errors"], 0);
}

// An enrichment service that is down: every row is still written (null enrichment), the
// failures are counted, exit status 1, and the run ends (no hang).
TEST(netflow, enrich_service_down_keeps_rows_and_fails_visibly) {
  const auto capture = shared_pcaps / "dns_icmp.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  auto plain = run_netflow("--input " + capture.string(), "enrich-plain");
  auto r = run_netflow("--input " + capture.string() + " --enrich http://127.0.0.1:1/enrich",
                       "enrich-down");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.stderr_text.find("refused"), std::string::npos) << r.stderr_text;
  ASSERT_EQ(r.lines.size(), plain.lines.size());
  EXPECT_EQ(r.summary["enrich_errors"].get<std::size_t>(), plain.lines.size());
  for (const auto& l : r.lines) EXPECT_TRUE(l["service"].is_null());
}

// Windows come out in order, each row's window is 10 s, sorted within a window.
TEST(netflow, rows_are_ordered_by_window) {
  const auto capture = shared_pcaps / "wechat.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  auto r = run_netflow("--input " + capture.string() + " --workers 2", "ordered");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_FALSE(r.lines.empty());
  for (std::size_t i = 1; i < r.lines.size(); ++i)
    EXPECT_LE(r.lines[i - 1]["window_start_ns"].get<std::int64_t>(),
              r.lines[i]["window_start_ns"].get<std::int64_t>());
}

// A capture cut off mid-record: every complete record is counted and written, the error
// names the file and the byte offset, and the exit status is 1.
TEST(netflow, truncated_file_reports_offset_and_keeps_earlier_records) {
  const auto capture = shared_pcaps / "dns_icmp.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  fs::create_directories(scratch);
  const auto cut = scratch / "dns_icmp_cut.pcap";
  std::string bytes = slurp(capture);
  // dns_icmp.pcap: 24-byte file header, then records. Cut 10 bytes into the last record:
  // drop everything after (size - last record length + 10). Records: 32, all complete;
  // the last one is 98 bytes of data + 16 of header (an ICMP echo, frame.len 98).
  bytes.resize(bytes.size() - (16 + 98) + 10);
  std::ofstream(cut, std::ios::binary) << bytes;
  auto r = run_netflow("--input " + cut.string() + " --workers 2", "cut");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.summary["packets"], 31);  // 32 in the truth file, minus the cut one
  EXPECT_NE(r.stderr_text.find(cut.string()), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("offset " + std::to_string(bytes.size() - 10)), std::string::npos)
      << r.stderr_text;
  std::uint64_t written = 0;
  for (const auto& l : r.lines) written += l["packets"].get<std::uint64_t>();
  EXPECT_EQ(written, 31u);
}

TEST(netflow, missing_and_non_pcap_inputs_fail_cleanly) {
  fs::create_directories(scratch);
  auto missing = run_netflow("--input " + (scratch / "no-such.pcap").string(), "missing");
  EXPECT_EQ(missing.exit_code, 2) << missing.stderr_text;
  EXPECT_NE(missing.stderr_text.find("no-such.pcap"), std::string::npos);

  const auto text = scratch / "not-a-capture.pcap";
  std::ofstream(text) << "hello, this is not a capture file at all\n";
  auto bad = run_netflow("--input " + text.string(), "notpcap");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.stderr_text.find(text.string()), std::string::npos) << bad.stderr_text;

  const auto empty = scratch / "empty.pcap";
  std::ofstream{empty};
  auto e = run_netflow("--input " + empty.string(), "empty");
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_NE(e.stderr_text.find(empty.string()), std::string::npos) << e.stderr_text;
}

// Bad arguments exit 2 with a message naming the option; write failures exit 1.
TEST(netflow, bad_arguments_and_write_failures) {
  const auto capture = shared_pcaps / "dns_icmp.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  for (const char* args : {"--window 99999999999999999999s", "--window 9223372036854775808ns",
                           "--max-delay abc", "--window -5s", "--workers abc", "--no-such-option",
                           "--interface lo",  // --interface with --input: one source only
                           "--summary /nonexistent-dir/s.json"}) {  // cannot be created
    auto r = run_netflow("--input " + capture.string() + " " + args, "badarg");
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.stderr_text;
    EXPECT_FALSE(r.stderr_text.empty()) << args;
  }
  const std::string cmd = std::string(NETFLOW_BINARY) + " --input " + capture.string() +
                          " --output /dev/full --summary /dev/null 2>/dev/null";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
}

// A capture in which one window holds far more packets than window_sort's buffer cap
// (2^20 per worker): the window comes out in segments, netflow sums them, and the rows
// equal an independent count of the generated flows: 8 flows x 200,000 packets, all in
// one 10 s window, nothing late, one row per flow with 200,000 packets.
TEST(netflow, window_over_the_buffer_cap_loses_nothing) {
  fs::create_directories(scratch);
  const auto big = scratch / "cap.pcap";
  const std::string gen = std::string(PCAPGEN_BINARY) + " --output " + big.string() +
                          " --flows 8 --packets-per-flow 200000 --interval 1us --jitter 0 --quiet";
  ASSERT_EQ(std::system(gen.c_str()), 0);
  for (int workers : {1, 2}) {
    auto r = run_netflow("--input " + big.string() + " --workers " + std::to_string(workers) +
                             " --window 10s",
                         "cap" + std::to_string(workers));
    ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
    EXPECT_EQ(r.summary["packets"], 1'600'000);
    EXPECT_EQ(r.summary["late"], 0);
    std::uint64_t packets = 0;
    for (const auto& l : r.lines) {
      packets += l["packets"].get<std::uint64_t>();
      EXPECT_EQ(l["packets"], 200'000) << l.dump();
    }
    EXPECT_EQ(packets, 1'600'000u);
    EXPECT_EQ(r.lines.size(), 8u);
  }
  fs::remove(big);
}

// The default job (no --input) reads the Debian-shipped captures; totals are those of
// the three files: dns_icmp.pcap is byte-identical to the shared copy with truth.
TEST(netflow, default_inputs_run) {
  if (!fs::exists("/usr/share/doc/python3-dpkt/examples/data/dns_icmp.pcap"))
    GTEST_SKIP() << "python3-dpkt not installed (scripts/setup installs it)";
  auto r = run_netflow("", "default");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_GT(r.summary["packets"].get<std::uint64_t>(), 32u);
  EXPECT_GE(r.summary["by_proto"]["icmp"].get<std::uint64_t>(), 22u);
}

}  // namespace

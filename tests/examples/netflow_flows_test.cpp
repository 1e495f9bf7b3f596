// examples/netflow as a flow tool: its per-direction flow records (packets, bytes, OR of
// TCP flags per direction; first and last packet time) against the independent tshark
// truth ../shared/data/pcap/NAME.flows.json (made by shared/tools/pcap_flows_truth.py),
// for every capture of the shared corpus, in windows (summed) and with --conversations;
// the CSV output against the JSON output; the summary's top talkers; and --filter, a BPF
// expression compiled by libpcap, against the truth's conversations it selects.
//
// Graph under test:
//   pcap_source (BPF filter) -> filter(IP) -> key_by(5-tuple) -> window(tumbling)
//     -> aggregate(flow_stats) -> ordered_sink
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "cli_test_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path shared_pcaps = fs::path(RILL_SHARED_DIR) / "data" / "pcap";
const fs::path scratch = cli_test::scratch_dir("netflow_flows_test");

struct result {
  int exit_code = -1;
  std::string out, err;
  std::vector<json> rows;
  json summary;
};

/// netflow ARGS with rows on stdout (parsed as JSON lines when `json_rows`) and the
/// summary in a file. Files are named by process and call: ctest runs each test of this
/// binary as a process of its own, in parallel.
result run_netflow(const std::string& args, bool json_rows = true) {
  fs::create_directories(scratch);
  static int calls = 0;
  const std::string base = (scratch / (std::to_string(::getpid()) + "." + std::to_string(calls++))).string();
  const std::string cmd = std::string(NETFLOW_BINARY) + " " + args + " --summary " + base + ".summary.json >" + base +
                          ".stdout 2>" + base + ".stderr </dev/null";
  const int status = std::system(cmd.c_str());
  result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, cli_test::slurp(base + ".stdout"),
           cli_test::slurp(base + ".stderr"), {}, {}};
  const fs::path sum = base + ".summary.json";
  if (json_rows) {
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) r.rows.push_back(json::parse(line));
  }
  if (fs::exists(sum) && fs::file_size(sum) > 0) r.summary = json::parse(cli_test::slurp(sum));
  for (const char* ext : {".summary.json", ".stdout", ".stderr"}) fs::remove(base + ext);
  return r;
}

// Endpoint text as the truth writes it: ip:port, [ipv6]:port, or the bare address.
std::string endpoint(const json& row, const char* ip, const char* port) {
  const std::string addr = row[ip];
  if (row[port].is_null()) return addr;
  const bool v6 = addr.find(':') != std::string::npos;
  return (v6 ? "[" + addr + "]" : addr) + ":" + std::to_string(int(row[port]));
}

/// One conversation as the truth has it: endpoints sorted as text, a_to_b = packets
/// from the text-smaller endpoint.
struct flow {
  std::uint64_t ab_packets = 0, ab_bytes = 0, ba_packets = 0, ba_bytes = 0;
  unsigned ab_flags = 0, ba_flags = 0;
  std::int64_t first_ns = INT64_MAX, last_ns = INT64_MIN;
  bool operator==(const flow&) const = default;
};
std::ostream& operator<<(std::ostream& os, const flow& f) {
  return os << "a->b " << f.ab_packets << "p " << f.ab_bytes << "B flags " << f.ab_flags << ", b->a " << f.ba_packets
            << "p " << f.ba_bytes << "B flags " << f.ba_flags << ", " << f.first_ns << ".." << f.last_ns;
}
using conv_key = std::tuple<std::string, std::string, std::string>;  // proto, a, b (text order)

std::map<conv_key, flow> truth_flows(const fs::path& capture) {
  const json truth = json::parse(cli_test::slurp(capture.string() + ".flows.json"));
  std::map<conv_key, flow> m;
  for (const auto& c : truth["conversations"]) {
    flow f{c["a_to_b"]["packets"], c["a_to_b"]["bytes"], c["b_to_a"]["packets"], c["b_to_a"]["bytes"],
           c["a_to_b"]["tcp_flags"], c["b_to_a"]["tcp_flags"], c["first_ns"], c["last_ns"]};
    m[{c["proto"], c["a"], c["b"]}] = f;
  }
  return m;
}

/// netflow's rows folded per conversation (counts summed over windows, flags ORed, times
/// min/max), with netflow's a/b (address byte order) turned into the truth's text order.
std::map<conv_key, flow> netflow_flows(const std::vector<json>& rows) {
  std::map<conv_key, flow> m;
  for (const auto& r : rows) {
    std::string a = endpoint(r, "a_ip", "a_port"), b = endpoint(r, "b_ip", "b_port");
    flow one{r["a_to_b_packets"], r["a_to_b_bytes"], r["b_to_a_packets"], r["b_to_a_bytes"],
             r["a_to_b_tcp_flags"], r["b_to_a_tcp_flags"], r["first_ns"], r["last_ns"]};
    EXPECT_EQ(r["packets"].get<std::uint64_t>(), one.ab_packets + one.ba_packets);
    EXPECT_EQ(r["bytes"].get<std::uint64_t>(), one.ab_bytes + one.ba_bytes);
    if (b < a) {
      std::swap(a, b);
      std::swap(one.ab_packets, one.ba_packets);
      std::swap(one.ab_bytes, one.ba_bytes);
      std::swap(one.ab_flags, one.ba_flags);
    }
    auto& f = m[{r["proto"], a, b}];
    f.ab_packets += one.ab_packets;
    f.ab_bytes += one.ab_bytes;
    f.ba_packets += one.ba_packets;
    f.ba_bytes += one.ba_bytes;
    f.ab_flags |= one.ab_flags;
    f.ba_flags |= one.ba_flags;
    f.first_ns = std::min(f.first_ns, one.first_ns);
    f.last_ns = std::max(f.last_ns, one.last_ns);
  }
  return m;
}

void expect_same_flows(const std::map<conv_key, flow>& got, const std::map<conv_key, flow>& want) {
  EXPECT_EQ(got.size(), want.size());
  for (const auto& [k, f] : want) {
    const auto it = got.find(k);
    const std::string name = std::get<0>(k) + " " + std::get<1>(k) + " " + std::get<2>(k);
    if (it == got.end()) {
      ADD_FAILURE() << "missing conversation " << name;
      continue;
    }
    EXPECT_EQ(it->second, f) << name;
  }
  for (const auto& [k, f] : got)
    if (!want.contains(k)) ADD_FAILURE() << "conversation not in the truth: " << std::get<0>(k) << " " << std::get<1>(k);
}

class flows_truth : public ::testing::TestWithParam<std::string> {};

// Windows of 1 s (several per conversation in most captures), 1 and 2 workers.
TEST_P(flows_truth, windowed_records_sum_to_the_truth) {
  const auto capture = shared_pcaps / GetParam();
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  const auto want = truth_flows(capture);
  for (int workers : {1, 2}) {
    SCOPED_TRACE("workers=" + std::to_string(workers));
    auto r = run_netflow("--input " + capture.string() + " --window 1s --workers " + std::to_string(workers));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.summary["late"], 0);
    for (const auto& row : r.rows) {  // first/last lie in the row's window
      EXPECT_GE(row["first_ns"].get<std::int64_t>(), row["window_start_ns"].get<std::int64_t>());
      EXPECT_LE(row["first_ns"].get<std::int64_t>(), row["last_ns"].get<std::int64_t>());
      EXPECT_LT(row["last_ns"].get<std::int64_t>(), row["window_end_ns"].get<std::int64_t>());
    }
    expect_same_flows(netflow_flows(r.rows), want);
  }
}

// --conversations: exactly one row per conversation, equal to the truth as it is.
TEST_P(flows_truth, conversations_are_the_truth_one_row_each) {
  const auto capture = shared_pcaps / GetParam();
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  const auto want = truth_flows(capture);
  auto r = run_netflow("--input " + capture.string() + " --conversations --workers 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.rows.size(), want.size());
  for (const auto& row : r.rows) EXPECT_FALSE(row.contains("window_start_ns")) << row.dump();
  expect_same_flows(netflow_flows(r.rows), want);
  EXPECT_EQ(r.summary["conversations"], want.size());
}

INSTANTIATE_TEST_SUITE_P(shared_corpus, flows_truth,
                         ::testing::Values("bro.org.pcap", "dns_icmp.pcap", "echo-connections.pcap",
                                           "ftp-ipv6.pcap", "icmp6.pcap", "wechat.pcap", "wikipedia.pcap",
                                           "alexa-app.pcapng"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

// The summary's top talkers: the 10 largest truth conversations by bytes, largest first.
TEST(netflow_summary, top_talkers_are_the_ten_largest_by_bytes) {
  const auto capture = shared_pcaps / "wechat.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  const json truth = json::parse(cli_test::slurp(capture.string() + ".flows.json"));
  std::vector<std::uint64_t> sizes;
  for (const auto& c : truth["conversations"]) sizes.push_back(c["bytes"]);
  std::sort(sizes.rbegin(), sizes.rend());
  auto r = run_netflow("--input " + capture.string() + " --workers 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto& top = r.summary["top_talkers"];
  ASSERT_EQ(top.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(top[i]["bytes"].get<std::uint64_t>(), sizes[i]) << i;
    std::string a = top[i]["a"], b = top[i]["b"];
    if (b < a) std::swap(a, b);
    bool found = false;
    for (const auto& c : truth["conversations"])
      found |= c["proto"] == top[i]["proto"] && c["a"] == a && c["b"] == b && c["bytes"] == top[i]["bytes"] &&
               c["packets"] == top[i]["packets"];
    EXPECT_TRUE(found) << top[i].dump();
  }
}

// --format csv: a header line, then the JSON run's values field by field.
TEST(netflow_format, csv_holds_the_json_values) {
  const auto capture = shared_pcaps / "dns_icmp.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  auto j = run_netflow("--input " + capture.string());
  auto c = run_netflow("--input " + capture.string() + " --format csv", false);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  ASSERT_EQ(c.exit_code, 0) << c.err;
  std::istringstream lines(c.out);
  std::string header;
  std::getline(lines, header);
  std::vector<std::string> names;
  for (std::istringstream h(header); std::getline(h, names.emplace_back(), ',');) {
  }
  names.pop_back();
  std::size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    ASSERT_LT(n, j.rows.size());
    const auto& row = j.rows[n];
    std::istringstream fields(line);
    std::size_t i = 0;
    for (std::string f; std::getline(fields, f, ','); ++i) {
      ASSERT_LT(i, names.size());
      const auto& v = row[names[i]];
      EXPECT_EQ(f, v.is_null() ? "" : v.is_string() ? v.get<std::string>() : v.dump()) << names[i];
    }
    if (line.back() == ',') ++i;  // a null last field
    EXPECT_EQ(i, row.size());
  }
  EXPECT_EQ(n, j.rows.size());
}

// --filter 'tcp port 80' on bro.org.pcap: exactly the truth's conversations with port 80
// on either side, with the same counts; every packet is read, the rest counted filtered.
TEST(netflow_filter, tcp_port_80_gives_the_port_80_conversations) {
  const auto capture = shared_pcaps / "bro.org.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  std::map<conv_key, flow> want;
  std::uint64_t kept = 0;
  for (const auto& [k, f] : truth_flows(capture)) {
    const auto& [proto, a, b] = k;
    auto port = [](const std::string& ep) { return ep.substr(ep.rfind(':') + 1); };
    if (proto == "tcp" && (port(a) == "80" || port(b) == "80")) {
      want[k] = f;
      kept += f.ab_packets + f.ba_packets;
    }
  }
  ASSERT_FALSE(want.empty());
  const json all = json::parse(cli_test::slurp(capture.string() + ".truth.json"));
  for (int workers : {1, 2}) {
    auto r = run_netflow("--input " + capture.string() + " --conversations --filter \"tcp port 80\" --workers " +
                         std::to_string(workers));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_flows(netflow_flows(r.rows), want);
    EXPECT_EQ(r.summary["packets"].get<std::uint64_t>(), kept);
    EXPECT_EQ(r.summary["filtered"].get<std::uint64_t>() + kept, all["packets"].get<std::uint64_t>());
  }
  // The same through the libpcap reader (pcapng path) and --rebalance (frame source).
  auto lib = run_netflow("--input " + capture.string() + " --conversations --filter \"tcp port 80\" --rebalance");
  ASSERT_EQ(lib.exit_code, 0) << lib.err;
  expect_same_flows(netflow_flows(lib.rows), want);
}

// A filter that matches nothing: no rows, exit 0, every packet counted as filtered. On a
// pcapng file (read by libpcap) too.
TEST(netflow_filter, matching_nothing_gives_no_rows_and_exit_0) {
  for (const char* name : {"dns_icmp.pcap", "alexa-app.pcapng"}) {
    const auto capture = shared_pcaps / name;
    if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
    const json truth = json::parse(cli_test::slurp(capture.string() + ".truth.json"));
    auto r = run_netflow("--input " + capture.string() + " --filter \"tcp port 9\" --workers 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.summary["packets"], 0);
    EXPECT_EQ(r.summary["filtered"], truth["packets"]);
  }
}

// A bad expression: exit 2, libpcap's message and the expression, nothing on stdout.
TEST(netflow_filter, bad_expression_exits_2_with_libpcaps_message) {
  const auto capture = shared_pcaps / "dns_icmp.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  auto r = run_netflow("--input " + capture.string() + " --filter \"tcp port eighty\"");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_TRUE(cli_test::has(r.err, "tcp port eighty")) << r.err;
  EXPECT_TRUE(cli_test::has(r.err, "unknown port 'eighty'")) << r.err;  // libpcap's words (gencode.c)
  EXPECT_TRUE(cli_test::has(r.err, "--filter")) << r.err;
}

// A filter libpcap's optimizer proves empty: refused as tcpdump refuses it (exit 2,
// libpcap's "expression rejects all packets", optimize.c), not run as a filter that
// matches nothing.
TEST(netflow_filter, a_filter_that_rejects_every_packet_exits_2_as_tcpdump) {
  const auto capture = shared_pcaps / "dns_icmp.pcap";
  if (!fs::exists(capture)) GTEST_SKIP() << "shared corpus not found at " << shared_pcaps;
  auto r = run_netflow("--input " + capture.string() + " --filter \"udp and not udp\"");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty());
  EXPECT_TRUE(cli_test::has(r.err, "udp and not udp")) << r.err;
  EXPECT_TRUE(cli_test::has(r.err, "expression rejects all packets")) << r.err;
}

}  // namespace

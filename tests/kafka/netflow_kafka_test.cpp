// netflow in Kafka mode on a real broker: the probe publishes the decoded packets of one
// capture (pcapgen: 50 TCP/UDP flows x 200 packets), the analysis runs Kafka -> Kafka,
// and its flow rows equal the file mode's output lines for the same capture (as
// multisets: Kafka has no global order). Windows 100 ms, max delay 1 h in both modes, so
// no record is late in either (the Kafka partitions interleave differently from the
// file). (The bundled captures are years apart: mixed in partitions they would be late.) The analysis runs one consumer:
// with two, the second's join revokes partitions from the first while their records sit
// in open windows, they are read again, and the counts include those duplicates
// (at-least-once: correct, but not equal).
//
//   netflow --probe -i gen.pcap --topic packets      ->  packets (4 partitions)
//   netflow --from packets --to flows --idle-exit 3s ->  flows (4 partitions)
//   netflow -i gen.pcap -o file.jsonl                ==  flows' values
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>

#include "kafka_env.hpp"

namespace {

int sh(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
std::vector<std::string> lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}
}  // namespace

TEST(NetflowKafka, KafkaToKafkaOutputEqualsFileMode) {
  RILL_NEED_BROKER();
  const auto packets = kt::unique("nf-packets"), flows = kt::unique("nf-flows"), group = kt::unique("nf-g");
  kt::create_topic(packets, 4);
  kt::create_topic(flows, 4);
  const std::string dir = RILL_TEST_BINARY_DIR;
  const std::string nf = NETFLOW_BINARY, file_out = dir + "/nf_file.jsonl", log = dir + "/nf_kafka.log";
  const std::string captures = " -i " + dir + "/nf_gen.pcap";
  ASSERT_EQ(sh(std::string(PCAPGEN_BINARY) + " --output " + dir +
               "/nf_gen.pcap --flows 50 --packets-per-flow 200 --jitter 1ms --quiet"), 0);
  ASSERT_EQ(sh(nf + captures + " --window 100ms --max-delay 1h -w 2 -o " + file_out + " --summary " + dir + "/nf_sum.json"), 0);
  const auto expect = lines(file_out);
  ASSERT_GT(expect.size(), 10u);

  ASSERT_EQ(sh(nf + " --probe" + captures + " --brokers " + kt::brokers() + " --topic " + packets + " -w 2 2>" + log),
            0) << "probe failed, see " << log;
  // every decoded packet was published (the file mode's summary counts them)
  std::ifstream sf(dir + "/nf_sum.json");
  const auto sum = std::string(std::istreambuf_iterator<char>(sf), {});
  const auto at = sum.find("\"packets\":");
  ASSERT_NE(at, std::string::npos);
  const long long n_packets = std::stoll(sum.substr(at + 10));
  const auto in = kt::consume_all(packets, 4, std::size_t(n_packets) + 1, 3000);
  EXPECT_EQ((long long)in.size(), n_packets);
  for (const auto& m : in) {  // keyed by the direction-normalised 5-tuple: one partition per tuple
    ASSERT_TRUE(m.key);
    EXPECT_EQ(m.partition, kt::java_partition(*m.key, 4)) << *m.key;
  }

  ASSERT_EQ(sh(nf + " --brokers " + kt::brokers() + " --from " + packets + " --to " + flows + " --group " + group +
               " --window 100ms --max-delay 1h --idle-exit 3s -w 1 2>>" + log),
            0) << "analysis failed, see " << log;
  const auto got_msgs = kt::consume_all(flows, 4, expect.size() + 1, 3000);
  std::vector<std::string> got;
  for (const auto& m : got_msgs) got.push_back(m.value);
  auto a = expect, b = got;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(b.size(), a.size());
  EXPECT_EQ(b, a);
  // the analysis committed every packet it read (at-least-once, after the flows' delivery)
  const auto c = kt::committed(group, packets, 4);
  std::vector<long long> per(4, 0);
  for (const auto& m : in) ++per[m.partition];
  EXPECT_EQ(c, per);
}

// Crash and graceful-shutdown tests on a real broker, with the pipeline in a child
// process (kafka_pipe): SIGKILL mid-run, restart, SIGTERM. Every input key must be in the
// output (duplicates allowed and counted, losses none); SIGTERM exits 0 with the input
// committed to its end.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <iostream>

#include "kafka_env.hpp"

extern char** environ;
using namespace std::chrono_literals;

namespace {
pid_t spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}
/// Sum of high watermarks of topic partitions 0..n-1.
long long end_offsets(const std::string& topic, int n) {
  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", kt::brokers(), err);
  std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), err));
  long long sum = 0;
  for (int i = 0; i < n; ++i) {
    int64_t lo = 0, hi = 0;
    if (p->query_watermark_offsets(topic, i, &lo, &hi, 5000) == RdKafka::ERR_NO_ERROR) sum += hi;
  }
  return sum;
}
}  // namespace

TEST(KafkaCrash, SigkillMidRunThenRestartLosesNothingAndSigtermCommitsAll) {
  RILL_NEED_BROKER();
  const auto in = kt::unique("crash-in"), out = kt::unique("crash-out"), group = kt::unique("crash-g");
  kt::create_topic(in, 4);
  kt::create_topic(out, 4);
  constexpr int n = 20000;
  std::vector<std::pair<std::string, std::string>> kv;
  for (int i = 0; i < n; ++i) kv.emplace_back("k" + std::to_string(i), std::to_string(i));
  kt::produce(in, kv);
  const std::vector<std::string> cmd{RILL_KAFKA_PIPE, kt::brokers(), in, out, group, "100"};

  pid_t a = spawn(cmd);
  ASSERT_GT(a, 0);
  ASSERT_TRUE(kt::wait_for([&] { return end_offsets(out, 4) >= 3000; }, 60s));
  ASSERT_EQ(::kill(a, SIGKILL), 0);
  int st = 0;
  ::waitpid(a, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st));
  const auto at_kill = end_offsets(out, 4);
  EXPECT_LT(at_kill, n) << "killed too late to be mid-run";

  pid_t b = spawn(cmd);
  ASSERT_GT(b, 0);
  // done when the committed offsets reach the input ends (all input processed and acked)
  std::vector<long long> per(4, 0);
  for (int i = 0; i < n; ++i) ++per[kt::java_partition("k" + std::to_string(i), 4)];
  ASSERT_TRUE(kt::wait_for([&] { return kt::committed(group, in, 4) == per; }, 120s));
  ASSERT_EQ(::kill(b, SIGTERM), 0);
  ::waitpid(b, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(kt::committed(group, in, 4), per);

  const auto got = kt::consume_all(out, 4, std::size_t(-1), 3000);
  std::vector<int> seen(n, 0);
  for (const auto& m : got) {
    ASSERT_TRUE(m.key);
    ++seen[std::stoi(m.key->substr(1))];
  }
  int lost = 0, dup = 0;
  for (int c : seen) { lost += c == 0; dup += c > 1 ? c - 1 : 0; }
  std::cerr << "crash: output " << got.size() << " records at kill " << at_kill << ", duplicates " << dup
            << ", lost " << lost << "\n";
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(got.size(), std::size_t(n + dup));
}

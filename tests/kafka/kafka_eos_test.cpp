// Exactly-once Kafka -> Kafka on a real broker (docs/design.md "Exactly-once"), with the
// pipeline in a child process (kafka_pipe ... eos INSTANCE):
//   (a) consume -> map -> produce, and consume -> key_by -> tumbling 100 ms count ->
//       produce, each SIGKILLed at 20 seeded random points of one run and restarted: a
//       read_committed reader of the output sees every expected result once (per-key
//       values, per-(window, key) counts against a brute-force count of the input);
//   (b) a zombie: a SIGSTOPped process is replaced by a new one with the same instance
//       (its partitions move, its transactional id is taken over); after SIGCONT it is
//       fenced, exits with the error, and nothing it wrote is visible;
//   (c) broker restart mid-transaction: no loss, no duplicate.
// RILL_KAFKA_EOS_OFF=1 runs the same tests with at-least-once: they must then fail
// (duplicates), which shows they can.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "kafka_env.hpp"
#include "kafka_procs.hpp"

using namespace std::chrono_literals;

using kt::feeder;
using kt::reaper;
using kt::spawn;

namespace {

bool eos_off() { return std::getenv("RILL_KAFKA_EOS_OFF") != nullptr; }

std::vector<std::string> pipe_cmd(const std::string& in, const std::string& out, const std::string& group,
                                  const char* slow_us, const char* mode, const std::string& instance) {
  return {RILL_KAFKA_PIPE, kt::brokers(), in, out, group, slow_us, mode, eos_off() ? "alo" : "eos", instance};
}

/// Runs `cmd` and SIGKILLs it `kills` times, restarting it each time, while `feed` writes
/// the input: each run is killed a seeded random 0..1 s after it first wrote to `out`
/// (or after 3 s), so that the kills land while it processes. A run may end by itself
/// before its kill, with exit status 1: a partition it read past its last commit was lost
/// (its static member's session expired while the broker or the process stalled on a
/// loaded machine), which ends an exactly-once run by design (docs/design.md
/// "Exactly-once", Rebalances); it is restarted like a killed one, and at most a quarter
/// of the runs may end so. Then lets the last run go until the group's committed offsets
/// reach `per` (restarting it, as a supervisor would, each time it ends so), at most until
/// `deadline`, and stops it with SIGTERM (exit 0).
void kill_many(const std::vector<std::string>& cmd, const std::string& in, const std::string& out,
               const std::string& group, int kills, unsigned seed, const std::vector<long long>& per,
               feeder& feed, std::chrono::steady_clock::time_point deadline) {
  if (const char* k = std::getenv("RILL_KAFKA_EOS_KILLS")) kills = std::atoi(k);  // shorter runs by hand
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_ms(0, 1000);
  int ended = 0;  // runs that ended by themselves (see above)
  for (int k = 0; k < kills; ++k) {
    const auto written = kt::end_offsets(out, 4);
    reaper r{spawn(cmd)};
    ASSERT_GT(r.p, 0);
    kt::wait_for([&] { return kt::end_offsets(out, 4) > written; }, 3s);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(r.p, SIGKILL);  // fails only when the run already ended by itself
    int st = 0;
    ::waitpid(r.p, &st, 0);
    r.p = -1;
    if (!WIFSIGNALED(st)) {
      ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << "kill " << k << ": the run ended with status " << st;
      ++ended;
    }
  }
  EXPECT_LE(ended, kills / 4) << "runs that ended by themselves (partition lost) instead of being killed";
  feed.join();
  const auto before = kt::committed(group, in, int(per.size()));
  long long left = 0;
  for (std::size_t p = 0; p < per.size(); ++p) left += per[p] - std::max(0LL, before[p]);
  reaper r{spawn(cmd)};
  ASSERT_GT(r.p, 0);
  auto started = std::chrono::steady_clock::now();
  int restarts = 0;  // of the last run, after it ended by itself (see above)
  const bool done = kt::wait_for(
      [&] {
        int st = 0;
        if (::waitpid(r.p, &st, WNOHANG) == r.p) {
          r.p = -1;
          if (!WIFEXITED(st) || WEXITSTATUS(st) != 1) {
            ADD_FAILURE() << "the last run ended with status " << st;
            return true;
          }
          ++restarts;
          r.p = spawn(cmd);
          started = std::chrono::steady_clock::now();
        }
        return kt::committed(group, in, int(per.size())) == per;
      },
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
  EXPECT_TRUE(done) << "committed " << ::testing::PrintToString(kt::committed(group, in, int(per.size())));
  ASSERT_GT(r.p, 0);
  // SIGTERM only once the runtime handles it (it is installed after the sink's
  // init_transactions): a SIGTERM before would kill, not stop.
  std::this_thread::sleep_until(started + 3s);
  ASSERT_EQ(::kill(r.p, SIGTERM), 0);
  int st = 0;
  ::waitpid(r.p, &st, 0);
  r.p = -1;
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  std::cerr << "eos: " << kills - ended << " kills, " << ended << " runs ended by themselves, the last run restarted "
            << restarts << " times; " << left << " inputs were not committed before the last restart\n";
}

/// How long the kills and the last run's catch-up may take in all: ctest's TIMEOUT is
/// 300 s (tests/CMakeLists.txt), and reading the output back afterwards takes seconds.
constexpr auto kill_many_budget = 240s;

/// Per key "k<i>" (i < n) how often `got` has it, with value "v<i>"; {missing, duplicates}.
std::pair<int, int> tally_map(const std::vector<kt::msg>& got, int n) {
  std::vector<int> seen(n, 0);
  for (const auto& m : got) {
    if (!m.key || m.key->rfind("k", 0) != 0) {
      ADD_FAILURE() << "unexpected key";
      continue;
    }
    const int i = std::stoi(m.key->substr(1));
    EXPECT_EQ(m.value, "v" + std::to_string(i));
    ++seen[i];
  }
  int missing = 0, dup = 0;
  for (int c : seen) {
    missing += c == 0;
    dup += c > 1 ? c - 1 : 0;
  }
  return {missing, dup};
}

/// 4 partitions; `kv` produced by key (the Java partitioner); returns records per partition.
std::vector<long long> per_partition(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::vector<long long> per(4, 0);
  for (const auto& [k, v] : kv) ++per[kt::java_partition(k, 4)];
  return per;
}

}  // namespace

// (a) consume -> map -> produce, 20 SIGKILLs, then a clean stop: every input key once.
TEST(KafkaEos, MapSurvives20SigkillsExactlyOnce) {
  RILL_NEED_BROKER();
  const auto deadline = std::chrono::steady_clock::now() + kill_many_budget;
  const auto in = kt::unique("eosm-in"), out = kt::unique("eosm-out"), group = kt::unique("eosm-g");
  kt::create_topic(in, 4);
  kt::create_topic(out, 4);
  constexpr int n = 12000;
  std::vector<std::pair<std::string, std::string>> kv;
  std::vector<std::tuple<std::string, std::string, int>> feed_kv;
  for (int i = 0; i < n; ++i) {
    kv.emplace_back(kt::key(i), std::to_string(i));
    feed_kv.emplace_back(kt::key(i), std::to_string(i), -1);
  }
  const auto per = per_partition(kv);
  // 400 records/s: the input is still being written during most of the kills.
  feeder feed(in, std::move(feed_kv), 400);
  kill_many(pipe_cmd(in, out, group, "0", "map", "m"), in, out, group, 20, 15, per, feed, deadline);
  const auto got = kt::consume_committed(out, 4);
  const auto all = kt::consume_all(out, 4, std::size_t(-1), 1000);
  const auto [missing, dup] = tally_map(got, n);
  std::cerr << "eos(map): read_committed " << got.size() << " records, duplicates " << dup << ", missing "
            << missing << "; written in all (aborted included) " << all.size() << "\n";
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(dup, 0);
  EXPECT_EQ(got.size(), std::size_t(n));
  // Some kill landed inside an open transaction: its writes are in the log, aborted.
  if (!eos_off()) {
    EXPECT_GT(all.size(), got.size());
  }
}

// (a) consume -> key_by -> tumbling 100 ms count -> produce, 20 SIGKILLs: every
// (window, key) once with the count of a brute-force pass over the input. Record i has
// key k<i % 24> and event time i ms; each partition ends with an "end" record at 1 h that
// makes its data windows fire (its own window never does: a clean stop discards it).
TEST(KafkaEos, TumblingCountSurvives20SigkillsExactlyOnce) {
  RILL_NEED_BROKER();
  const auto deadline = std::chrono::steady_clock::now() + kill_many_budget;
  const auto in = kt::unique("eosc-in"), out = kt::unique("eosc-out"), group = kt::unique("eosc-g");
  kt::create_topic(in, 4);
  kt::create_topic(out, 4);
  constexpr int n = 12000, keys = 24;
  std::vector<std::pair<std::string, std::string>> kv;
  std::map<std::pair<long long, std::string>, long long> want;  // (window start ms, key) -> count
  for (int i = 0; i < n; ++i) {
    const auto k = kt::key(i % keys);
    kv.emplace_back(k, std::to_string(i));
    ++want[{i / 100 * 100, k}];
  }
  const auto per = per_partition(kv);
  std::vector<std::tuple<std::string, std::string, int>> feed_kv;
  for (const auto& [k, v] : kv) feed_kv.emplace_back(k, v, -1);
  for (int p = 0; p < 4; ++p) feed_kv.emplace_back("end" + std::to_string(p), "end", p);
  // 400 records/s (event time runs at 0.4x the wall clock): windows fire all along the
  // run, and the input is still being written during most of the kills.
  feeder feed(in, std::move(feed_kv), 400);
  kill_many(pipe_cmd(in, out, group, "0", "count", "c"), in, out, group, 20, 16, per, feed, deadline);
  const auto got = kt::consume_committed(out, 4);
  std::map<std::pair<long long, std::string>, long long> seen;
  int dup = 0, wrong = 0;
  for (const auto& m : got) {
    ASSERT_TRUE(m.key);
    std::istringstream is(m.value);
    long long start = -1, count = -1;
    is >> start >> count;
    const std::pair<long long, std::string> wk{start, *m.key};
    if (seen.count(wk)) ++dup;
    seen[wk] = count;
    const auto it = want.find(wk);
    if (it == want.end() || it->second != count) ++wrong;
  }
  int missing = 0;
  for (const auto& [wk, c] : want) missing += seen.count(wk) == 0;
  std::cerr << "eos(count): read_committed " << got.size() << " results for " << want.size()
            << " (window, key) pairs, duplicates " << dup << ", missing " << missing << ", wrong counts " << wrong
            << "\n";
  EXPECT_EQ(dup, 0);
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(got.size(), want.size());
}

// (b) Zombie: process A (instance z) is SIGSTOPped mid-run; B starts with the same
// instance: B's init_transactions fences A's transactional id (A's open transaction is
// aborted) and B's static member takes A's partitions. B processes everything. After
// SIGCONT, A's producer is fenced (its epoch is old) and its consumer's partitions are
// lost (its static member was replaced): it exits 1 naming the fencing, and the
// read_committed output holds every input once.
TEST(KafkaEos, PausedZombieIsFencedAndItsWritesNeverAppear) {
  RILL_NEED_BROKER();
  const auto in = kt::unique("eosz-in"), out = kt::unique("eosz-out"), group = kt::unique("eosz-g");
  kt::create_topic(in, 4);
  kt::create_topic(out, 4);
  constexpr int n = 6000;
  std::vector<std::pair<std::string, std::string>> kv;
  for (int i = 0; i < n; ++i) kv.emplace_back(kt::key(i), std::to_string(i));
  kt::produce(in, kv);
  const auto per = per_partition(kv);
  const auto cmd = pipe_cmd(in, out, group, "2000", "map", "z");
  const std::string a_err = "/tmp/" + kt::unique("zombie") + ".err";
  reaper a{spawn(cmd, a_err)};
  ASSERT_GT(a.p, 0);
  // A has written some output (its transactions commit every 100 ms).
  ASSERT_TRUE(kt::wait_for([&] { return kt::end_offsets(out, 4) >= 500; }, 60s));
  ASSERT_EQ(::kill(a.p, SIGSTOP), 0);
  const auto at_stop = kt::end_offsets(out, 4);
  reaper b{spawn(cmd)};
  ASSERT_GT(b.p, 0);
  int b_restarts = 0;
  EXPECT_TRUE(kt::wait_for(
      [&] {
        int bst = 0;
        if (::waitpid(b.p, &bst, WNOHANG) == b.p) {  // ended with an error: start it again, as a supervisor
          ++b_restarts;
          b.p = spawn(cmd);
        }
        return kt::committed(group, in, 4) == per;
      },
      90s))
      << "committed " << ::testing::PrintToString(kt::committed(group, in, 4));
  std::this_thread::sleep_for(3s);  // the last restart handles SIGTERM (see kill_many)
  ASSERT_EQ(::kill(a.p, SIGCONT), 0);
  // A wakes up with an open transaction and held outputs: its next transactional call
  // fails (fenced), and it ends the run with the error.
  int st = 0;
  bool a_ended = kt::wait_for([&] { return ::waitpid(a.p, &st, WNOHANG) == a.p; }, 60s);
  ASSERT_TRUE(a_ended) << "the zombie did not stop after SIGCONT";
  a.p = -1;
  std::ifstream ef(a_err);
  const std::string a_log((std::istreambuf_iterator<char>(ef)), std::istreambuf_iterator<char>());
  std::remove(a_err.c_str());
  std::cerr << "zombie's stderr:\n" << a_log;
  if (!eos_off()) {
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << "status " << st;
    // Whichever notices first: the producer (fenced by the new transactional epoch) or the
    // consumer (its static member replaced, its partitions lost).
    EXPECT_NE(a_log.find("fenced"), std::string::npos);
  }
  ASSERT_EQ(::kill(b.p, SIGTERM), 0);
  ::waitpid(b.p, &st, 0);
  b.p = -1;
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  const auto got = kt::consume_committed(out, 4);
  const auto [missing, dup] = tally_map(got, n);
  std::cerr << "eos(zombie): output at SIGSTOP " << at_stop << ", restarts of the new process " << b_restarts
            << ", read_committed " << got.size()
            << ", duplicates " << dup << ", missing " << missing << "\n";
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(dup, 0);
}

// (c) Broker restart mid-transaction (scripts/kafka restart: clean stop, start on the same
// data): the open transaction either commits after the restart or aborts and the process
// exits with the error; then it is started again (as a supervisor would) and replays from
// the committed offsets. Either way: every input once.
TEST(KafkaEos, BrokerRestartMidTransactionExactlyOnce) {
  RILL_NEED_BROKER();
  const auto in = kt::unique("eosb-in"), out = kt::unique("eosb-out"), group = kt::unique("eosb-g");
  kt::create_topic(in, 4);
  kt::create_topic(out, 4);
  constexpr int n = 8000;
  std::vector<std::pair<std::string, std::string>> kv;
  for (int i = 0; i < n; ++i) kv.emplace_back(kt::key(i), std::to_string(i));
  kt::produce(in, kv);
  const auto per = per_partition(kv);
  const auto cmd = pipe_cmd(in, out, group, "1000", "map", "b");
  reaper a{spawn(cmd)};
  ASSERT_GT(a.p, 0);
  ASSERT_TRUE(kt::wait_for([&] { return kt::end_offsets(out, 4) >= 1000; }, 60s));
  const auto b = kt::brokers();
  // A loaded machine may need more than scripts/kafka's default 90 s to start the broker.
  const std::string restart = "RILL_KAFKA_START_TIMEOUT=240 RILL_KAFKA_PORT=" + b.substr(b.rfind(':') + 1) +
                              " " RILL_KAFKA_SCRIPT " restart >/dev/null";
  ASSERT_EQ(std::system(restart.c_str()), 0) << "scripts/kafka restart failed: " << restart;
  int restarts = 0;
  const bool done = kt::wait_for(
      [&] {
        int st = 0;
        if (::waitpid(a.p, &st, WNOHANG) == a.p) {  // ended with an error: start it again
          ++restarts;
          a.p = spawn(cmd);
        }
        return kt::committed(group, in, 4) == per;
      },
      120s);
  EXPECT_TRUE(done) << "committed " << ::testing::PrintToString(kt::committed(group, in, 4));
  ASSERT_EQ(::kill(a.p, SIGTERM), 0);
  int st = 0;
  ::waitpid(a.p, &st, 0);
  a.p = -1;
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  const auto got = kt::consume_committed(out, 4);
  const auto [missing, dup] = tally_map(got, n);
  std::cerr << "eos(broker restart): pipeline restarts " << restarts << ", read_committed " << got.size()
            << ", duplicates " << dup << ", missing " << missing << "\n";
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(dup, 0);
}

// Repartition through Kafka on a real broker (docs/design.md "Repartition through Kafka"):
// three kafka_pipe processes in one consumer group read an input topic partitioned by a
// session key and count per (100 ms window, key) by another key:
//
//   in (6 partitions, keyed by session) --> [process a | b | c]
//     kafka_source -> kafka_repartition "by-key" --> <group>-by-key-repartition (6, keyed by key)
//     --> kafka_source (group <topic>) -> key_by(key) -> tumbling 100 ms count -> kafka_sink --> out
//
// One process is SIGKILLed and restarted with its instance id while the input is being
// written (exactly-once: three times, each process once; at-least-once: once). The counts
// read from the output (read_committed in exactly-once mode) are checked against a
// brute-force count of the input the test wrote; every message of the repartition topic
// sits in the partition Kafka's default partitioner gives its key (murmur2, written out in
// kafka_env.hpp).
// RILL_KAFKA_REPARTITION_OFF=1 runs the same processes with a plain in-process key_by
// (kafka_pipe local-count): each process then counts only what it reads, and the test fails
// with split counts, which shows it can.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "kafka_env.hpp"
#include "kafka_procs.hpp"
#include "rill/connectors/kafka_repartition.hpp"

using namespace std::chrono_literals;

namespace {

bool repartition_off() { return std::getenv("RILL_KAFKA_REPARTITION_OFF") != nullptr; }

constexpr int partitions = 6;

/// a + std::to_string(i), by append (GCC 12's false -Wrestrict on `"k" + std::to_string(i)`:
/// kafka_env.hpp's kt::key).
std::string cat(const char* a, long long i) {
  std::string s = a;
  s += std::to_string(i);
  return s;
}
using window_key = std::pair<long long, std::string>;  // (window start ms, key)

struct outcome {
  std::map<window_key, std::vector<long long>> rows;  // every count the output holds per pair
  std::map<window_key, long long> want;
  int restarts = 0;  // runs that ended by themselves and were started again
  std::string topic;
};

/// Writes `n` records at `per_s` per second while three kafka_pipe processes (mode
/// repartition, or local-count for the control) run in one group; SIGKILLs one of them
/// `kills` times (seeded choice and moment) and restarts it with the same instance id;
/// restarts any that ends by itself (exactly-once ends a run whose partition was revoked
/// past its commit: docs/design.md "Exactly-once", Rebalances). Once the input is
/// committed and the output holds every (window, key), stops all three with SIGTERM.
outcome run_three(const std::string& name, bool eos, int n, int per_s, int kills, unsigned seed) {
  outcome res;
  const auto in = kt::unique(name + "-in"), out = kt::unique(name + "-out"), group = kt::unique(name + "-g");
  kt::create_topic(in, partitions);
  kt::create_topic(out, partitions);
  res.topic = rill::repartition_topic_name(group, "by-key");
  // Record i: input key s<i % 53> (the input's partitioning: by session), aggregation key
  // k<i % 24>, event time 1000 + i ms. Each key's records spread over every input partition.
  std::vector<std::tuple<std::string, std::string, int>> feed_kv;
  std::vector<long long> per(partitions, 0);
  for (int i = 0; i < n; ++i) {
    const auto s = cat("s", i % 53), k = kt::key(i % 24);
    const long long ms = 1000 + i;
    feed_kv.emplace_back(s, cat("", ms) + " " + k, -1);
    ++per[kt::java_partition(s, partitions)];
    ++res.want[{ms / 100 * 100, k}];
  }
  // Each input partition ends with a record at 1 h for every repartition partition (keys
  // e<x> chosen by the partitioner), so that every partition the readers hold moves past
  // the data windows and they fire; the windows at 1 h never do (a stop discards them).
  // They are written once the data is committed: exactly-once commits a repartition
  // partition's offsets only below its first record still in an open window (a 1 h one
  // would hold every result of data written after it: docs/design.md "Exactly-once").
  std::vector<std::tuple<std::string, std::string, int>> end_kv;
  const auto data_per = per;
  for (int j = 0; j < partitions; ++j) {
    int x = 0;
    while (kt::java_partition(cat("e", x), partitions) != j) ++x;
    for (int p = 0; p < partitions; ++p) {
      end_kv.emplace_back("end", cat("3600000 e", x), p);
      ++per[p];
    }
  }
  const char* mode = repartition_off() ? "local-count" : "repartition";
  const std::vector<std::string> ids{"a", "b", "c"};
  auto cmd = [&](int i) {
    return std::vector<std::string>{RILL_KAFKA_PIPE, kt::brokers(), in, out, group, "0", mode,
                                    eos ? "eos" : "alo", ids[i]};
  };
  std::vector<kt::reaper> procs(3);
  for (int i = 0; i < 3; ++i) {
    procs[i].p = kt::spawn(cmd(i));
    EXPECT_GT(procs[i].p, 0);
  }
  // A process that ended by itself is started again, as a supervisor would.
  auto supervise = [&] {
    for (int i = 0; i < 3; ++i) {
      int st = 0;
      if (procs[i].p > 0 && ::waitpid(procs[i].p, &st, WNOHANG) == procs[i].p) {
        std::cerr << "repartition: process " << ids[i] << " ended (status " << st << "), started again\n";
        ++res.restarts;
        procs[i].p = kt::spawn(cmd(i));
      }
    }
  };
  // Input only once both groups are stable with their 3 x 2 consumers: the joins of a
  // group's members revoke every partition (eager protocol), which ends an exactly-once
  // run that has read records.
  const bool settled = kt::wait_for(
      [&] {
        supervise();
        return kt::stable_members(group) == 6 &&
               (repartition_off() || kt::stable_members(res.topic) == 6);
      },
      90s);
  EXPECT_TRUE(settled) << "the groups did not settle with 6 members each";
  {
    kt::feeder feed(in, std::move(feed_kv), per_s);
    std::mt19937 rng(seed);
    // Kill k lands 6 + 8k .. 8 + 8k s into the feed (seeded; the feed lasts n / per_s s):
    // mid-run, with windows open (a window fires 5 s of event time, about 17 s, after its
    // records).
    const auto fed = std::chrono::steady_clock::now();
    for (int k = 0; k < kills; ++k) {
      const auto at = fed + std::chrono::milliseconds(6000 + 8000 * k + int(rng() % 2000));
      kt::wait_for([&] { supervise(); return std::chrono::steady_clock::now() >= at; }, 60s);
      const int victim = int((seed + k) % 3);
      std::cerr << "repartition: SIGKILL " << ids[victim] << " at "
                << std::chrono::system_clock::now().time_since_epoch().count() / 1000000 << " ms wall\n";
      ::kill(procs[victim].p, SIGKILL);
      ::waitpid(procs[victim].p, nullptr, 0);
      procs[victim].p = kt::spawn(cmd(victim));
    }
  }  // the feeder has written the data
  // Repartition: the writers have no windows, so the data's input offsets commit before
  // the end records are written, and the end records' too. local-count: the data's last
  // windows commit only once the end records made them fire, and the end records, in
  // windows that never fire, never do.
  auto committed_to = [&](const std::vector<long long>& want) {
    const bool ok = kt::wait_for(
        [&] {
          supervise();
          return kt::committed(group, in, partitions) == want;
        },
        120s);
    EXPECT_TRUE(ok) << "committed " << ::testing::PrintToString(kt::committed(group, in, partitions)) << ", want "
                    << ::testing::PrintToString(want);
  };
  if (!repartition_off()) committed_to(data_per);
  kt::feeder(in, std::move(end_kv), 1000).join();
  committed_to(repartition_off() ? data_per : per);
  auto read = [&] {
    res.rows.clear();
    const auto msgs =
        eos ? kt::consume_committed(out, partitions) : kt::consume_all(out, partitions, std::size_t(-1), 1000);
    for (const auto& m : msgs) {
      std::istringstream is(m.value);
      long long start = -1, count = -1;
      is >> start >> count;
      res.rows[{start, m.key.value_or("")}].push_back(count);
    }
  };
  const bool complete = kt::wait_for(
      [&] {
        supervise();
        read();
        return res.rows.size() >= res.want.size();
      },
      90s);
  EXPECT_TRUE(complete) << "the output holds " << res.rows.size() << " of " << res.want.size()
                        << " (window, key) pairs";
  // SIGTERM: a graceful stop (each process was started at least 3 s ago, so its runtime
  // handles the signal: see kafka_eos_test's kill_many).
  std::this_thread::sleep_for(3s);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(::kill(procs[i].p, SIGTERM), 0);
    int st = 0;
    ::waitpid(procs[i].p, &st, 0);
    procs[i].p = -1;
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "process " << ids[i] << " status " << st;
  }
  read();
  return res;
}

/// Every message of the repartition topic is in the partition Kafka's default partitioner
/// gives its key; returns how many are not.
int misplaced(const std::string& topic) {
  int bad = 0;
  for (const auto& m : kt::consume_all(topic, partitions, std::size_t(-1), 1000))
    if (!m.key || kt::java_partition(*m.key, partitions) != m.partition) ++bad;
  return bad;
}

}  // namespace

// Exactly-once: every (window, key) once, with the brute-force count.
TEST(KafkaRepartition, ThreeProcessesCountLikeOneExactlyOnceAcrossSigkills) {
  RILL_NEED_BROKER();
  const auto r = run_three("rpe", true, 7500, 300, 3, 7);
  int dup = 0, wrong = 0, missing = 0;
  for (const auto& [wk, counts] : r.rows) {
    dup += int(counts.size()) - 1;
    const auto it = r.want.find(wk);
    for (auto c : counts) wrong += it == r.want.end() || it->second != c;
  }
  for (const auto& [wk, c] : r.want) missing += r.rows.count(wk) == 0;
  std::cerr << "repartition(eos): " << r.rows.size() << " (window, key) pairs in the output for " << r.want.size()
            << ", duplicates " << dup << ", missing " << missing << ", wrong counts " << wrong << ", restarts "
            << r.restarts << "\n";
  EXPECT_EQ(dup, 0);
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(wrong, 0);
  if (!repartition_off()) {
    EXPECT_EQ(rill::kafka_detail::partition_count(kt::brokers(), r.topic, {}, 10s), partitions);
    EXPECT_EQ(misplaced(r.topic), 0);
    // A kill inside an open transaction of a writer leaves its records in the repartition
    // topic, aborted, and the readers skip them (read_committed). Three kills need not
    // land inside one (CI: 7536 of 7536 committed once), so the count is reported, not
    // asserted; kafka_eos_test's 20 kills assert aborted writes.
    const auto all = kt::consume_all(r.topic, partitions, std::size_t(-1), 1000).size();
    const auto committed = kt::consume_committed(r.topic, partitions).size();
    std::cerr << "repartition(eos): the topic holds " << all << " records, " << committed << " committed\n";
    EXPECT_GE(all, committed);
  }
}

// At-least-once: nothing is lost. A pair may be emitted more than once (a window replayed
// after the kill, from the committed offset, possibly with part of its records), and a
// replayed input counts twice; but its largest count covers every input.
TEST(KafkaRepartition, ThreeProcessesLoseNothingAtLeastOnceAcrossSigkill) {
  RILL_NEED_BROKER();
  const auto r = run_three("rpa", false, 6000, 300, 1, 11);
  int missing = 0, short_count = 0, over = 0;
  for (const auto& [wk, c] : r.want) {
    const auto it = r.rows.find(wk);
    if (it == r.rows.end()) {
      ++missing;
      continue;
    }
    const auto most = *std::max_element(it->second.begin(), it->second.end());
    short_count += most < c;
    over += most > c;
  }
  std::cerr << "repartition(alo): " << r.rows.size() << " (window, key) pairs for " << r.want.size() << ", missing "
            << missing << ", largest count short " << short_count << ", over (replayed inputs) " << over
            << ", restarts " << r.restarts << "\n";
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(short_count, 0);
}

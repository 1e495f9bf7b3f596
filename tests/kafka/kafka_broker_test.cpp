// Integration tests of kafka_source / kafka_sink on a real Apache Kafka 4.x broker
// (scripts/kafka start; RILL_KAFKA_BROKERS=127.0.0.1:19092). Skipped without a broker.
// Expected values come from the inputs we produce with a plain librdkafka client and
// from Kafka's Java murmur2 written out in kafka_env.hpp, never from rill's own output.
#include <gtest/gtest.h>

#include <algorithm>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <iostream>
#include <thread>

#include "kafka_env.hpp"
#include "rill/connectors/kafka_sink.hpp"
#include "rill/connectors/kafka_source.hpp"
#include "rill/operators/stream.hpp"

using namespace std::chrono_literals;
using rec = rill::kafka_record<std::string, std::string>;

namespace {

/// Runs `j` on its own thread with a fresh runtime; stop() requests stop and joins.
struct bg_run {
  rill::runtime rt;
  std::thread t;
  rill::run_report rep;
  std::exception_ptr ex;
  bg_run(const rill::job& j, std::size_t workers)
      : rt(rill::runtime_options{.workers = workers, .topology = std::to_string(workers) + " nodes x 1 cores", .pin = false}) {
    t = std::thread([this, j] {
      try {
        rep = rt.run(j);
      } catch (...) {
        ex = std::current_exception();
      }
    });
  }
  void stop() {
    rt.request_stop();
    if (t.joinable()) t.join();
    if (ex) std::rethrow_exception(ex);
  }
  ~bg_run() {
    rt.request_stop();
    if (t.joinable()) t.join();
  }
};

rill::kafka_source_options src_opts(const std::string& group, const std::string& topic) {
  return {.brokers = kt::brokers(), .group = group, .topics = {topic}};
}

}  // namespace

// Round trip: 100,000 records through a 4-partition topic, map, sink to a second
// 4-partition topic. Every key present exactly once on a clean run, output partition =
// Java murmur2(key) % 4, per-partition order kept, and the committed offsets are the ends.
// Once everything is committed, the consumer lag (kafka_source::lag(), the metric
// rill_kafka_consumer_records_lag) lists the 4 partitions with high watermark = records
// produced to each (counted here with Java's murmur2) and lag 0.
TEST(KafkaBroker, RoundTrip100kFourPartitions) {
  RILL_NEED_BROKER();
  const auto in = kt::unique("rt-in"), out = kt::unique("rt-out"), group = kt::unique("rt-g");
  kt::create_topic(in, 4);
  kt::create_topic(out, 4);
  constexpr int n = 100000;
  std::vector<std::pair<std::string, std::string>> kv;
  for (int i = 0; i < n; ++i) kv.emplace_back(kt::key(i), std::to_string(i));
  kt::produce(in, kv);
  // committed offsets at the end = number of input records per partition (Java murmur2)
  std::vector<long long> per(4, 0);
  for (int i = 0; i < n; ++i) ++per[kt::java_partition(kt::key(i), 4)];

  auto sink = std::make_shared<rill::kafka_sink<rec>>(rill::kafka_sink_options{.brokers = kt::brokers(), .topic = out});
  rill::kafka_source<> source{src_opts(group, in)};
  const auto source_stats = source.stats();
  const rill::kafka_source<> watch = source;  // a copy shares the splits' state: lag()
  auto job = rill::from(std::move(source))
                 .map([](rec&& r) { r.value = "v" + r.value; return std::move(r); })
                 .sink(sink);
  std::uint64_t rebalances_at_first = 0, rebalances_at_end = 0;
  {
    bg_run run(job, 2);
    ASSERT_TRUE(kt::wait_for([&] { return sink->stats().delivered.load() > 0; }, 60s));
    rebalances_at_first = source_stats->rebalances.load();
    // Every input record processed: its offset committed (delivered alone counts
    // duplicates too).
    ASSERT_TRUE(kt::wait_for(
        [&] { return sink->stats().delivered.load() >= n && kt::committed(group, in, 4) == per; }, 120s))
        << "delivered " << sink->stats().delivered.load();
    rebalances_at_end = source_stats->rebalances.load();
    // The split's position reaches the end once its fetch of the last records is taken:
    // committed == ends implies it.
    auto lag = watch.lag();
    std::sort(lag.begin(), lag.end(), [](const auto& a, const auto& b) { return a.partition < b.partition; });
    ASSERT_EQ(lag.size(), 4u);
    for (int p = 0; p < 4; ++p) {
      EXPECT_EQ(lag[p].partition, p);
      EXPECT_EQ(lag[p].high_watermark, per[p]);
      EXPECT_EQ(lag[p].lag, 0);
    }
    run.stop();
    EXPECT_TRUE(run.rep.errors.empty());
  }
  // At-least-once: a rebalance after records flowed (a member of a loaded machine missing
  // its session timeout) hands partitions over at their committed offsets, so records
  // read since the last commit come again. Exactly once each only when none happened.
  const bool rebalanced_midway = rebalances_at_end != rebalances_at_first;
  EXPECT_EQ(sink->undelivered(), 0u);
  EXPECT_EQ(sink->stats().failed.load(), 0u);
  EXPECT_EQ(sink->stats().untracked.load(), 0u);

  const auto got = kt::consume_all(out, 4, rebalanced_midway ? 2 * n : n + 1, 3000);
  if (!rebalanced_midway) {
    ASSERT_EQ(got.size(), std::size_t(n));
  }
  ASSERT_GE(got.size(), std::size_t(n));
  std::vector<int> seen(n, 0);
  std::map<int, int> last;  // output partition -> last i
  for (const auto& m : got) {
    ASSERT_TRUE(m.key);
    const int i = std::stoi(m.key->substr(1));
    ASSERT_EQ(m.value, "v" + std::to_string(i));
    ++seen[i];
    EXPECT_EQ(m.partition, kt::java_partition(*m.key, 4)) << *m.key;
    auto it = last.find(m.partition);
    if (it != last.end() && !rebalanced_midway) {
      EXPECT_LT(it->second, i) << "order broken in partition " << m.partition;
    }
    last[m.partition] = i;
  }
  for (int i = 0; i < n; ++i) {
    if (rebalanced_midway) {
      ASSERT_GE(seen[i], 1) << "key k" << i << " lost";
    } else {
      ASSERT_EQ(seen[i], 1) << "key k" << i;
    }
  }
  EXPECT_EQ(kt::committed(group, in, 4), per);
}

// C09: linger 100 ms, librdkafka queue capped at 1000 so most records wait in our own
// hand-off buffer; end of stream right after the last write. Shutdown waits for all
// 10,000 delivery reports; a consumer reads exactly 10,000.
TEST(KafkaBroker, C09ShutdownWaitsForEveryDeliveryReport) {
  RILL_NEED_BROKER();
  const auto out = kt::unique("c09");
  kt::create_topic(out, 2);
  std::vector<rill::record<int>> recs;
  for (int i = 0; i < 10000; ++i) recs.push_back({i, rill::event_time{std::chrono::milliseconds{1000 + i}}});
  auto sink = std::make_shared<rill::kafka_sink<int>>(
      rill::kafka_sink_options{.brokers = kt::brokers(), .topic = out, .linger = 100ms,
                               .config = {{"queue.buffering.max.messages", "1000"}}},
      [](const int& i) { return rill::kafka_message_out{std::to_string(i), "x" + std::to_string(i)}; });
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  const auto rep = rt.run(rill::from(rill::vector_source<int>{recs}).sink(sink));
  EXPECT_GT(sink->stats().buffered.load() + 1, 0u);
  EXPECT_EQ(sink->undelivered(), 0u);
  EXPECT_EQ(sink->stats().delivered.load(), 10000u);
  EXPECT_TRUE(sink->errors().empty());
  const auto got = kt::consume_all(out, 2, 10001, 2000);
  EXPECT_EQ(got.size(), 10000u);
  std::set<std::string> keys;
  for (const auto& m : got) keys.insert(*m.key);
  EXPECT_EQ(keys.size(), 10000u);
  EXPECT_EQ(got.front().ts >= 1000, true);  // event time became the message timestamp
}

// C09, timeout branch: nobody listens on the broker port; the flush timeout (300 ms) ends
// first, and the sink reports exactly how many records are undelivered.
TEST(KafkaBroker, C09FlushTimeoutReportsUndelivered) {
  RILL_NEED_BROKER();
  std::vector<rill::record<int>> recs;
  for (int i = 0; i < 10000; ++i) recs.push_back({i, rill::event_time{}});
  auto sink = std::make_shared<rill::kafka_sink<int>>(
      rill::kafka_sink_options{.brokers = "127.0.0.1:1", .topic = "nowhere", .linger = 100ms,
                               .flush_timeout = 300ms,
                               .config = {{"queue.buffering.max.messages", "1000"}}},
      [](const int& i) { return rill::kafka_message_out{std::nullopt, std::to_string(i)}; });
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  const auto t0 = std::chrono::steady_clock::now();
  rt.run(rill::from(rill::vector_source<int>{recs}).sink(sink));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(sink->undelivered(), 10000u);
  ASSERT_EQ(sink->errors().size(), 1u);
  EXPECT_NE(sink->errors()[0].find("10000 records undelivered after flush timeout 300 ms"), std::string::npos)
      << sink->errors()[0];
}

// Broker unreachable at start: a clear error after the configured wait, not a hang.
TEST(KafkaBroker, UnreachableBrokerFailsFastWithClearError) {
  RILL_NEED_BROKER();
  rill::kafka_source<> src{{.brokers = "127.0.0.1:1", .group = "g", .topics = {"t"},
                            .start_timeout = 500ms}};
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    rt.run(rill::from(std::move(src)).sink([](rec&&) {}));
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no broker of '127.0.0.1:1' answered within 500 ms"),
              std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// The sink's start_timeout (netflow's probe uses it): the same bounded wait for a broker
// as the source's, a clear error at construction instead of one failed delivery per
// record after delivery_timeout. 0 (the default) stays lazy: C09 above.
TEST(KafkaBroker, SinkStartTimeoutFailsFastWithClearError) {
  RILL_NEED_BROKER();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    rill::kafka_sink<int> sink{{.brokers = "127.0.0.1:1", .topic = "t", .start_timeout = 500ms},
                               [](const int& i) { return rill::kafka_message_out{std::nullopt, std::to_string(i)}; }};
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("kafka_sink: no broker of '127.0.0.1:1' answered within 500 ms"),
              std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  // a broker that answers: constructed
  rill::kafka_sink<int> ok{{.brokers = kt::brokers(), .topic = "t", .start_timeout = 10s},
                           [](const int& i) { return rill::kafka_message_out{std::nullopt, std::to_string(i)}; }};
  EXPECT_EQ(ok.undelivered(), 0u);
}

// A named topic with an illegal name, or one the cluster does not have, is an error at
// start naming it (as Kafka Streams' missing source topic error), not a silent empty run;
// with require_topics = false a missing topic is waited for (run ends by stop request).
TEST(KafkaBroker, IllegalOrMissingTopicFailsAtStartNamingIt) {
  RILL_NEED_BROKER();
  const auto missing = kt::unique("missing");
  for (const auto& [topic, want] : std::vector<std::pair<std::string, std::string>>{
           {"bad topic name!", "'bad topic name!' is not a legal Kafka topic name"},
           {std::string(250, 'x'), "is not a legal Kafka topic name"},
           {"", "'' is not a legal Kafka topic name"},
           {missing, "topic '" + missing + "' does not exist on '" + kt::brokers() + "'"}}) {
    rill::kafka_source<> src{{.brokers = kt::brokers(), .group = kt::unique("g"), .topics = {topic}}};
    rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
    try {
      rt.run(rill::from(std::move(src)).sink([](rec&&) {}));
      ADD_FAILURE() << "no error for " << topic;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  rill::kafka_source<> waits{{.brokers = kt::brokers(), .group = kt::unique("g"), .topics = {missing},
                              .require_topics = false}};
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  std::thread stopper([&] {
    std::this_thread::sleep_for(2s);
    rt.request_stop();
  });
  EXPECT_NO_THROW(rt.run(rill::from(std::move(waits)).sink([](rec&&) {})));
  stopper.join();
}

// Poison message: an undecodable value goes to the error side output with topic,
// partition and offset; the partition goes on and its offset is committed past it.
TEST(KafkaBroker, PoisonMessageGoesToErrorOutputAndIsCommittedPast) {
  RILL_NEED_BROKER();
  const auto in = kt::unique("poison"), group = kt::unique("poison-g");
  kt::create_topic(in, 1);
  kt::produce(in, {{"a", "1"}, {"b", "2"}, {"c", "not-a-number"}, {"d", "4"}}, 0);
  std::mutex mu;
  std::vector<long long> values;
  std::vector<rill::kafka_bad_message> bad;
  rill::kafka_source<std::string, long long> src{
      src_opts(group, in), nullptr, [](std::string_view s) {
        std::size_t used = 0;
        const auto v = std::stoll(std::string(s), &used);
        if (used != s.size()) throw std::invalid_argument("trailing bytes");
        return v;
      }};
  src.on_error([&](const rill::kafka_bad_message& m) { std::lock_guard g(mu); bad.push_back(m); });
  {
    bg_run run(rill::from(std::move(src)).sink([&](rill::kafka_record<std::string, long long>&& r) {
      std::lock_guard g(mu);
      values.push_back(r.value);
    }), 1);
    ASSERT_TRUE(kt::wait_for([&] { std::lock_guard g(mu); return values.size() == 3; }, 30s));
    run.stop();
  }
  EXPECT_EQ(values, (std::vector<long long>{1, 2, 4}));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].topic, in);
  EXPECT_EQ(bad[0].partition, 0);
  EXPECT_EQ(bad[0].offset, 2);
  EXPECT_EQ(bad[0].value, "not-a-number");
  EXPECT_EQ(bad[0].what.rfind("value: ", 0), 0u) << bad[0].what;
  EXPECT_EQ(kt::committed(group, in, 1), std::vector<long long>{4});
}

// C07: 2 partitions x 100 records; A (commit interval 5 s) processes all 200, then B joins
// at ~2 s. On revoke A commits synchronously, so B starts at offset 100 on each partition:
// no duplicates, no losses (checked with 10 more records per partition after the rebalance).
class KafkaC07 : public ::testing::TestWithParam<bool> {};
TEST_P(KafkaC07, RevokeCommitsSoNewOwnerStartsAfterProcessedRecords) {
  RILL_NEED_BROKER();
  const bool coop = GetParam();
  if (coop && RdKafka::version() < 0x020a0000)
    GTEST_SKIP() << "librdkafka " << RdKafka::version_str() << " < 2.10: a commit inside a cooperative "
                 << "revoke fails with ILLEGAL_GENERATION (confluentinc/librdkafka#4059, fixed by #4908)";
  const auto in = kt::unique("c07"), group = kt::unique("c07-g");
  kt::create_topic(in, 2);
  std::vector<std::pair<std::string, std::string>> kv;
  for (int i = 0; i < 100; ++i) kv.emplace_back(kt::key(i), std::to_string(i));
  kt::produce(in, kv, 0);
  kt::produce(in, kv, 1);
  std::mutex mu;
  std::map<std::pair<int, long long>, int> seen_a, seen_b;
  auto make = [&](std::map<std::pair<int, long long>, int>& seen, std::shared_ptr<rill::kafka_source_stats>& st) {
    auto o = src_opts(group, in);
    o.commit_interval = 5s;
    o.cooperative = coop;
    rill::kafka_source<> s{o};
    st = s.stats();
    return rill::from(std::move(s)).sink([&mu, &seen](rec&& r) {
      std::lock_guard g(mu);
      ++seen[{r.partition, r.offset}];
    });
  };
  std::shared_ptr<rill::kafka_source_stats> sa, sb;
  const auto t0 = std::chrono::steady_clock::now();
  bg_run a(make(seen_a, sa), 1);
  ASSERT_TRUE(kt::wait_for([&] { std::lock_guard g(mu); return seen_a.size() == 200; }, 30s));
  std::this_thread::sleep_until(t0 + 2s);  // the case's timeline: B joins at t = 2 s
  bg_run b(make(seen_b, sb), 1);
  ASSERT_TRUE(kt::wait_for([&] { return sa->assigned.load() == 1 && sb->assigned.load() == 1; }, 30s))
      << "a " << sa->assigned.load() << " b " << sb->assigned.load();
  kv.clear();
  for (int i = 100; i < 110; ++i) kv.emplace_back(kt::key(i), std::to_string(i));
  kt::produce(in, kv, 0);
  kt::produce(in, kv, 1);
  auto total = [&] { std::lock_guard g(mu); return seen_a.size() + seen_b.size(); };
  ASSERT_TRUE(kt::wait_for([&] { return total() >= 220; }, 30s)) << total();
  b.stop();
  a.stop();
  std::lock_guard g(mu);
  std::cerr << "A: rebalances " << sa->rebalances << " commits " << sa->commits << " commit_errors "
            << sa->commit_errors << " errors " << sa->transient_errors << "; B: rebalances "
            << sb->rebalances << " commits " << sb->commits << " seen " << seen_b.size() << "\n";
  for (const auto& [k, c] : seen_b) EXPECT_GE(k.second, 100) << "B replayed p" << k.first << " @" << k.second;
  std::set<std::pair<int, long long>> all;
  for (const auto& [k, c] : seen_a) { all.insert(k); EXPECT_EQ(c, 1) << "A p" << k.first << " @" << k.second; }
  for (const auto& [k, c] : seen_b) { EXPECT_TRUE(all.insert(k).second) << "duplicate"; EXPECT_EQ(c, 1); }
  EXPECT_EQ(all.size(), 220u);  // 0 losses
  EXPECT_FALSE(seen_b.empty());
  EXPECT_EQ(kt::committed(group, in, 2), (std::vector<long long>{110, 110}));
}
INSTANTIATE_TEST_SUITE_P(Assignors, KafkaC07, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? "CooperativeSticky" : "Eager"; });

// librdkafka keeps a partition's application pause across an eager revoke and a later
// assign (it resets only its own library pause; confluentinc/librdkafka#1849). A split
// paused for backpressure whose partitions are revoked, whose backpressure ends while it
// holds none, and which then gets a partition back must read it. Timeline on one split
// (its calls by hand, no runtime): 2 partitions x 10 records; the split reads all 20 and
// pauses; consumer B joins the group (the split's revoke); the split resumes while it
// holds nothing; the rebalance gives it one partition; 10 more records go to each
// partition, and the 10 of its partition must reach it.
TEST(KafkaBroker, PartitionPausedWhenRevokedIsReadWhenItComesBack) {
  RILL_NEED_BROKER();
  const auto in = kt::unique("pause-rb"), group = kt::unique("pause-rb-g");
  kt::create_topic(in, 2);
  auto batch = [](const char* v) {
    std::vector<std::pair<std::string, std::string>> kv;
    for (int i = 0; i < 10; ++i) kv.emplace_back(kt::key(i), v);
    return kv;
  };
  kt::produce(in, batch("old"), 0);
  kt::produce(in, batch("old"), 1);
  auto o = src_opts(group, in);
  o.config["session.timeout.ms"] = "6000";
  auto stats = std::make_shared<rill::kafka_source_stats>();
  rill::kafka_detail::split_core a(o, rill::kafka_detail::make_topic_table(), stats,
                                   [](const rill::kafka_bad_message&) {}, 0);
  rill::kafka_detail::message_view m;
  std::map<int, int> old_read, new_read;  // partition -> records
  auto read_all = [&] {
    while (a.next(m)) ++(m.value == "new" ? new_read : old_read)[m.partition];
  };
  ASSERT_TRUE(kt::wait_for([&] { read_all(); return old_read[0] + old_read[1] == 20; }, 30s));
  a.pause_all();
  ASSERT_TRUE(a.paused());

  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", kt::brokers(), err);
  c->set("group.id", group, err);
  c->set("session.timeout.ms", "6000", err);
  std::unique_ptr<RdKafka::KafkaConsumer> b(RdKafka::KafkaConsumer::create(c.get(), err));
  ASSERT_TRUE(b) << err;
  ASSERT_EQ(b->subscribe({in}), RdKafka::ERR_NO_ERROR);
  auto serve_b = [&] { std::unique_ptr<RdKafka::Message> x(b->consume(0)); };

  const auto v0 = a.assignment_version();
  ASSERT_TRUE(kt::wait_for([&] { a.keepalive(); serve_b(); return a.assignment_version() != v0; }, 30s));
  ASSERT_EQ(stats->rebalances.load(), 2u) << "the first assignment, then the revoke; not yet the new assignment";
  a.resume_paused();  // backpressure ended while the split holds nothing
  ASSERT_FALSE(a.paused());
  const auto v1 = a.assignment_version();
  ASSERT_TRUE(kt::wait_for([&] { read_all(); serve_b(); return a.assignment_version() != v1; }, 30s));
  ASSERT_EQ(stats->assigned.load(), 1u);
  std::vector<std::int32_t> held;
  a.held_partitions(held);
  ASSERT_EQ(held.size(), 1u);
  const int mine = held[0] & 0xffff;

  kt::produce(in, batch("new"), 0);
  kt::produce(in, batch("new"), 1);
  EXPECT_TRUE(kt::wait_for([&] { read_all(); serve_b(); return new_read[mine] == 10; }, 30s))
      << "partition " << mine << ": " << new_read[mine] << " of its 10 new records read";
  EXPECT_EQ(new_read[1 - mine], 0);
  b->close();
  a.shutdown();
}

// C02 (Kafka part): 1 partition, source on 2 workers in one group (one worker gets no
// partition); window 10 s, delay 0, idle timeout 1 s; events on p0 at 1000, 5000, 12000,
// 25000 ms. [0,10000) (2 records) and [10000,20000) (1 record) are released while the
// run goes on: the empty reader is idle and does not hold the watermark back.
TEST(KafkaBroker, C02ReaderWithoutPartitionsDoesNotBlockWindows) {
  RILL_NEED_BROKER();
  const auto in = kt::unique("c02"), group = kt::unique("c02-g");
  kt::create_topic(in, 1);
  {
    std::string err;
    std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    c->set("bootstrap.servers", kt::brokers(), err);
    std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), err));
    for (long long t : {1000, 5000, 12000, 25000}) {
      const auto v = std::to_string(t);
      p->produce(in, 0, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(v.data()), v.size(), "k", 1, t, nullptr);
    }
    ASSERT_EQ(p->flush(10000), RdKafka::ERR_NO_ERROR);
  }
  std::mutex mu;
  std::vector<std::pair<long long, std::size_t>> windows;  // start ms, records
  auto job = rill::from(rill::kafka_source<>{src_opts(group, in)})
                 .key_by([](const rec&) { return 0; })
                 .window_sort({.length = 10s, .max_delay = 0s, .idle_timeout = 1s})
                 .sink([&](rill::window<rec>&& w) {
                   std::lock_guard g(mu);
                   windows.emplace_back(std::chrono::duration_cast<std::chrono::milliseconds>(
                                            w.start.time_since_epoch()).count(), w.records.size());
                 });
  bg_run run(job, 2);
  ASSERT_TRUE(kt::wait_for([&] { std::lock_guard g(mu); return windows.size() >= 2; }, 30s));
  {
    std::lock_guard g(mu);
    EXPECT_EQ(windows, (std::vector<std::pair<long long, std::size_t>>{{0, 2}, {10000, 1}}));
  }
  run.stop();
}

// kafka_source -> ... -> kafka_sink on librdkafka's in-process mock cluster
// (rdkafka_mock.h): fast, no broker. Checks the acknowledgement rules of detail/kafka_ack.hpp and
// record.hpp with committed offsets read back by a plain consumer of the group:
//   1. source -> filter -> sink: dropped and delivered records both let offsets commit
//   2. source -> key_by -> window_sort -> flat_map -> sink: windows fire at the end, the
//      source waits for their delivery reports, then commits the input ends
//   3. a delivery that fails (message too large) holds the partition's commit below it
//   4. per-partition watermarks: one consumer reading two partitions in fetch order makes
//      no record late, and windows hold both partitions' records
//   5. sink backpressure (max_pending): pending stays bounded behind a slow broker, and
//      every record is still delivered and committed
//   6. a dead-letter kafka_sink written from another sink's on_error: each sink counts
//      only its own delivery reports
//   7. a stop request while the sink is full ends within the sink's flush_timeout (a
//      kafka_source and any other source)
//   8. metrics: consumer lag per partition = produced - taken at a point where the split
//      stopped reading; commit latency of the final commit; the sink's pending records
//      while the broker is down and its delivery latencies once it is back; all of them
//      on a run's Prometheus text
//   9. C22: the final commit covers only the partitions still assigned, last processed + 1
//  10. C30: 100 create/consume/commit/stop cycles end within 5 s each and leave no
//      librdkafka thread behind
//  11. exactly-once: the source and the transactional sink must be linked; a keyed count
//      through transactions reaches a read_committed reader once per (key, window); an
//      output librdkafka refuses (at produce, or in its delivery report) fails the run
//      and its transaction is aborted
//  12. kafka_repartition: the topic's name and its checks; a keyed count through the
//      repartition topic equals a brute-force count, every message of the topic sits in
//      the partition of Kafka's default partitioner (murmur2 of its key); an existing
//      topic with another partition count is refused; a stream that does not start at a
//      Kafka source (at-least-once only)
//  13. exactly-once backpressure: while the broker stalls each transaction's commit, the
//      sink's held and undelivered outputs stay near max_pending; every input reaches a
//      read_committed reader once
//  14. exactly-once backpressure never waits for a window: with max_pending 1 and every
//      window's result interleaving with the next one's offsets (all held until the end),
//      the input still flows and every result reaches the reader once
//  15. a final offset commit the coordinator never confirms is the run's error
//  16. partitions_behind counts assigned partitions until their split took the partition
//      EOF; stop_when_idle on rill::kafka_input_activity waits for partitions whose
//      fetches are slow, where a plain consumed counter stops before they are read
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <atomic>
#include <filesystem>
#include <optional>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

#include "../kafka/kafka_env.hpp"  // kt::java_partition: Kafka's partitioner, written from the Java source
#include "rill/connectors/kafka_repartition.hpp"
#include "rill/connectors/kafka_sink.hpp"
#include "rill/connectors/kafka_source.hpp"
#include "rill/operators/stream.hpp"

using namespace std::chrono_literals;
using rec = rill::kafka_record<std::string, std::string>;

namespace {

class KafkaMock : public ::testing::Test {
 protected:
  void SetUp() override {
    char err[256];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    ASSERT_EQ(rd_kafka_conf_set(conf, "test.mock.num.brokers", "1", err, sizeof err), RD_KAFKA_CONF_OK);
    holder_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ASSERT_NE(holder_, nullptr) << err;
    mc_ = rd_kafka_handle_mock_cluster(holder_);
    ASSERT_NE(mc_, nullptr);
    brokers_ = rd_kafka_mock_cluster_bootstraps(mc_);
  }
  void TearDown() override {
    if (holder_) rd_kafka_destroy(holder_);
  }
  void topic(const char* name, int partitions) {
    ASSERT_EQ(rd_kafka_mock_topic_create(mc_, name, partitions, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  /// Produces value v_i = values[i] with key = value to partition part(i), in one batch
  /// per partition. The mock broker answers a fetch with one batch (librdkafka 2.0.2's
  /// rdkafka_mock_handlers.c, Fetch: the message set at the fetch offset), so input sent
  /// a message per batch reaches a consumer one record per fetch round trip. That is what
  /// a producer does whose topic metadata arrives while flush() already waits: it moves
  /// the messages queued for the unknown topic to their partition one at a time, and the
  /// flushing broker thread sends each as it comes (seen on a loaded machine: 308 batches
  /// for 3,000 records). Hence the metadata first, then linger.ms to hold every message
  /// until flush(), which sends them at once.
  template <class Part>
  void produce(const char* t, const std::vector<std::string>& values, Part part) {
    std::string e;
    std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    c->set("bootstrap.servers", brokers_, e);
    ASSERT_EQ(c->set("linger.ms", "60000", e), RdKafka::Conf::CONF_OK) << e;
    std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), e));
    ASSERT_TRUE(p) << e;
    std::unique_ptr<RdKafka::Topic> topic(RdKafka::Topic::create(p.get(), t, nullptr, e));
    ASSERT_TRUE(topic) << e;
    RdKafka::Metadata* md = nullptr;
    ASSERT_EQ(p->metadata(false, topic.get(), &md, 10000), RdKafka::ERR_NO_ERROR);
    delete md;
    for (std::size_t i = 0; i < values.size(); ++i)
      p->produce(t, part(i), RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(values[i].data()),
                 values[i].size(), values[i].data(), std::min<std::size_t>(values[i].size(), 16), 0, nullptr);
    ASSERT_EQ(p->flush(10000), RdKafka::ERR_NO_ERROR);
  }
  std::vector<long long> committed(const std::string& group, const char* t, int n) {
    std::string e;
    std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    c->set("bootstrap.servers", brokers_, e);
    c->set("group.id", group, e);
    std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), e));
    std::vector<RdKafka::TopicPartition*> tps;
    for (int p = 0; p < n; ++p) tps.push_back(RdKafka::TopicPartition::create(t, p));
    EXPECT_EQ(k->committed(tps, 10000), RdKafka::ERR_NO_ERROR);
    std::vector<long long> out;
    for (auto* tp : tps) out.push_back(tp->offset());
    RdKafka::TopicPartition::destroy(tps);
    k->close();
    return out;
  }
  /// Runs `j` on 2 workers until `done()` (or 30 s), then stops it.
  template <class Done>
  rill::run_report run_until(const rill::job& j, Done done) {
    rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
    std::thread stopper([&] {
      const auto end = std::chrono::steady_clock::now() + 30s;
      while (std::chrono::steady_clock::now() < end && !done()) std::this_thread::sleep_for(5ms);
      rt.request_stop();
    });
    rill::run_report rep;
    try {
      rep = rt.run(j);
    } catch (...) {
      rt.request_stop();
      stopper.join();
      throw;
    }
    stopper.join();
    return rep;
  }
  /// session.timeout.ms 6000: the mock's group coordinator (librdkafka 2.0.2, still so in
  /// 2.x) waits session.timeout.ms - 1 s for members to rejoin once a rebalance starts in
  /// state Up. One does start when the leader's SyncGroup reaches it before the follower's
  /// (the mock then answers the follower INVALID_REQUEST and the follower rejoins): with
  /// the 45 s default that wait outlasts run_until's 30 s.
  rill::kafka_source_options src(const std::string& group) {
    return {.brokers = brokers_, .group = group, .topics = {"in"}, .config = {{"session.timeout.ms", "6000"}}};
  }
  rill::kafka_sink_options out() { return {.brokers = brokers_, .topic = "out"}; }
  /// Exactly-once: src(group) with one split (one member: the mock's SyncGroup quirk, see
  /// src(), revokes a follower mid-run) and a static instance id.
  rill::kafka_source_options eos_src(const std::string& group, const std::string& instance) {
    auto o = src(group);
    o.splits = 1;
    o.instance_id = instance;
    o.guarantee = rill::processing_guarantee::exactly_once;
    return o;
  }
  rill::kafka_sink_options eos_out() {
    auto o = out();
    o.guarantee = rill::processing_guarantee::exactly_once;
    return o;
  }
  /// A read_committed consumer of "out" in `group`, from the earliest offset.
  std::unique_ptr<RdKafka::KafkaConsumer> committed_reader(const std::string& group) {
    std::string e;
    std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    c->set("bootstrap.servers", brokers_, e);
    c->set("group.id", group, e);
    c->set("isolation.level", "read_committed", e);
    c->set("auto.offset.reset", "earliest", e);
    std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), e));
    k->subscribe({"out"});
    return k;
  }
  /// The values a read_committed reader of partition 0 of `t` sees from its start up to
  /// the partition EOF (the last stable offset): assigned, no group to join. nullopt when
  /// the EOF does not come within 10 s.
  std::optional<std::vector<std::string>> committed_values(const char* t) {
    std::string e;
    std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    c->set("bootstrap.servers", brokers_, e);
    c->set("group.id", std::string("eof-reader-") + t, e);
    c->set("isolation.level", "read_committed", e);
    c->set("enable.partition.eof", "true", e);
    std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), e));
    std::vector<RdKafka::TopicPartition*> tps{
        RdKafka::TopicPartition::create(t, 0, RdKafka::Topic::OFFSET_BEGINNING)};
    const auto assigned = k->assign(tps);
    RdKafka::TopicPartition::destroy(tps);
    std::vector<std::string> out;
    bool at_end = false;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (assigned == RdKafka::ERR_NO_ERROR && !at_end && std::chrono::steady_clock::now() < until) {
      std::unique_ptr<RdKafka::Message> m(k->consume(100));
      if (m && m->err() == RdKafka::ERR__PARTITION_EOF) at_end = true;
      if (!m || m->err()) continue;
      out.emplace_back(static_cast<const char*>(m->payload()), m->len());
    }
    k->close();
    if (!at_end) return std::nullopt;
    return out;
  }

  rd_kafka_t* holder_ = nullptr;
  rd_kafka_mock_cluster_t* mc_ = nullptr;
  std::string brokers_;
};

std::vector<std::string> numbers(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(std::to_string(i));
  return v;
}

}  // namespace

// kafka_record::topic: an interned name (one copy per distinct name in the process),
// read and compared like a string.
TEST(KafkaTopic, InternedNameReadsAndComparesLikeAString) {
  const std::string name = "a-topic-name-longer-than-15-bytes";
  const rill::kafka_topic a{name}, b{name.c_str()}, c{std::string_view(name)}, other{"other"};
  EXPECT_EQ(a.c_str(), b.c_str());  // the same interned storage: copies are pointers
  EXPECT_EQ(a.c_str(), c.c_str());
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a == name);
  EXPECT_TRUE(a == name.c_str());
  EXPECT_TRUE(a == std::string_view(name));
  EXPECT_TRUE(name == a);
  EXPECT_FALSE(a == other);
  EXPECT_TRUE(a != "other");
  const std::string& s = a;
  EXPECT_EQ(s, name);
  EXPECT_EQ(a.size(), name.size());
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), name);
  const rill::kafka_topic none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.str(), "");
  EXPECT_TRUE(rill::kafka_topic("") == none);
  rec r;
  EXPECT_TRUE(r.topic.empty());
  r.topic = "in";
  rec copy = r;
  EXPECT_EQ(copy.topic.str(), "in");
}

TEST_F(KafkaMock, FilterDropsAndSinkDeliveriesBothCommit) {
  topic("in", 2);
  topic("out", 2);
  produce("in", numbers(1000), [](std::size_t i) { return int(i % 2); });
  auto sink = std::make_shared<rill::kafka_sink<rec>>(out());
  rill::kafka_source<> s{src("g")};
  auto st = s.stats();
  std::atomic<int> other_topic{0};
  run_until(rill::from(std::move(s))
                .filter([&](const rec& r) {
                  if (r.topic != "in" || r.partition != int(std::stoi(r.value) % 2)) other_topic.fetch_add(1);
                  return std::stoi(r.value) % 2 == 0;
                })
                .sink(sink),
            [&] { return st->consumed.load() >= 1000 && sink->stats().delivered.load() >= 500; });
  EXPECT_EQ(other_topic.load(), 0);  // every record names its topic and partition
  EXPECT_EQ(st->consumed.load(), 1000u);
  EXPECT_EQ(sink->stats().delivered.load(), 500u);
  EXPECT_EQ(sink->undelivered(), 0u);
  // 500 per partition: every even value delivered (partition 0), every odd dropped (1)
  EXPECT_EQ(committed("g", "in", 2), (std::vector<long long>{500, 500}));
}

// Graph: kafka_source(in, 2 partitions) -> key_by(key) -> window_sort(100 ms) ->
// flat_map(window -> records) -> kafka_sink(out). Event time = value ms.
// Two splits = two group members. When the mock answers the follower's SyncGroup with
// INVALID_REQUEST (see src()), the follower rejoins and the leader's partition is revoked
// with its 500 records in open windows, then handed straight back: the split keeps their
// acks and reads on from offset 500 (kafka_source.hpp, "Eager rebalance"), so the values
// below hold then too (before, it re-read from offset 0 and stopped early).
TEST_F(KafkaMock, WindowsBehindKeyByCommitAfterTheirDeliveryReports) {
  topic("in", 2);
  topic("out", 2);
  produce("in", numbers(1000), [](std::size_t i) { return int(i % 2); });
  auto sink = std::make_shared<rill::kafka_sink<rec>>(out());
  rill::kafka_source<> s{src("gw")};
  s.event_time_from([](const rec& r) { return rill::event_time{std::chrono::milliseconds{std::stoll(r.value)}}; });
  auto st = s.stats();
  const auto rep = run_until(rill::from(std::move(s))
                                 .key_by([](const rec& r) { return r.key; })
                                 .window_sort({.length = 100ms, .max_delay = 1s})
                                 .flat_map<rec>([](rill::window<rec>&& w, auto& emit) {
                                   for (auto& r : w.records) emit(std::move(r.value));
                                 })
                                 .sink(sink),
                             [&] { return st->consumed.load() >= 1000; });
  EXPECT_EQ(rep.stage("window_sort").late, 0u);
  EXPECT_EQ(sink->stats().delivered.load(), 1000u);  // windows fired at the end, delivered
  EXPECT_EQ(sink->stats().untracked.load(), 0u);
  EXPECT_EQ(committed("gw", "in", 2), (std::vector<long long>{500, 500}));
}

// message.max.bytes = 1000 on the sink: the 2,000-byte value at offset 5 fails at produce
// (error output, stats().failed). Its input is not done, so partition 0 stays committed
// at 5 although offsets 6..9 were delivered.
TEST_F(KafkaMock, FailedDeliveryHoldsTheCommitBelowIt) {
  topic("in", 1);
  topic("out", 1);
  auto values = numbers(10);
  values[5] = std::string(2000, 'x');
  produce("in", values, [](std::size_t) { return 0; });
  auto o = out();
  o.config["message.max.bytes"] = "1000";
  auto sink = std::make_shared<rill::kafka_sink<rec>>(o);
  std::mutex mu;
  std::vector<rill::kafka_failed_delivery> failed;
  sink->on_error([&](const rill::kafka_failed_delivery& d) { std::lock_guard g(mu); failed.push_back(d); });
  rill::kafka_source<> s{src("gf")};
  auto st = s.stats();
  run_until(rill::from(std::move(s)).sink(sink),
            [&] { return sink->stats().delivered.load() + sink->stats().failed.load() >= 10 && st->held.load() >= 1; });
  EXPECT_EQ(sink->stats().delivered.load(), 9u);
  EXPECT_EQ(sink->stats().failed.load(), 1u);
  EXPECT_EQ(st->held.load(), 1u);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].value.size(), 2000u);
  EXPECT_EQ(committed("gf", "in", 1), std::vector<long long>{5});
}

// Per-partition watermarks (kafka_source.hpp). One split reads both partitions of `in`;
// each holds event times 0..2999 ms in order (value = ms), so librdkafka hands them over
// in fetch order: a run of one partition, then of the other, far apart in time. With
// max_delay 0 and W = largest over both (before), the second partition's records behind
// the first's were all late. Per-partition: W = min over both, so none is late and each
// 100 ms window holds its 100 times from each partition: 30 windows x 200 records, each
// sorted. Expected values by hand from the data.
TEST_F(KafkaMock, OneConsumerTwoPartitionsInFetchOrderNothingLate) {
  topic("in", 2);
  auto v = numbers(3000);
  const auto again = v;
  v.insert(v.end(), again.begin(), again.end());  // 0..2999 to partition 0, then to 1
  produce("in", v, [](std::size_t i) { return int(i / 3000); });
  auto o = src("gp");
  o.splits = 1;
  rill::kafka_source<> s{o};
  s.event_time_from([](const rec& r) { return rill::event_time{std::chrono::milliseconds{std::stoll(r.value)}}; });
  auto st = s.stats();
  std::mutex mu;
  std::vector<std::vector<long long>> windows;
  std::atomic<std::size_t> got{0};
  const auto rep = run_until(rill::from(std::move(s))
                                 .window_sort({.length = 100ms, .max_delay = 0ms})
                                 .sink([&](const rill::window<rec>& w) {
                                   std::vector<long long> t;
                                   for (const auto& r : w.records) t.push_back(std::stoll(r.value.value));
                                   std::lock_guard g(mu);
                                   windows.push_back(std::move(t));
                                   got += w.records.size();
                                 }),
                             [&] { return st->consumed.load() >= 6000; });
  EXPECT_EQ(rep.stage("window_sort").late, 0u);
  EXPECT_EQ(got.load(), 6000u);
  std::lock_guard g(mu);
  ASSERT_EQ(windows.size(), 30u);
  std::sort(windows.begin(), windows.end());
  for (std::size_t k = 0; k < windows.size(); ++k) {
    std::vector<long long> want;
    for (long long t = 100 * long(k); t < 100 * long(k + 1); ++t) want.insert(want.end(), {t, t});
    EXPECT_EQ(windows[k], want) << "window " << k;
  }
}

// kafka_sink_options::max_pending (backpressure). The mock broker answers every request
// after 100 ms, so without it the source would hand all 3,000 records to the producer
// before the first delivery report (pending ~3,000: the sink had no backpressure before).
// With max_pending = 200 the pipeline checks the sink before each source slice (a poll
// batch of at most 256 records), so pending never exceeds 200 + 256 - 1, and every record
// is still delivered and committed.
TEST_F(KafkaMock, SinkBackpressureBoundsPendingAndDeliversAll) {
  topic("in", 1);
  topic("out", 1);
  produce("in", numbers(3000), [](std::size_t) { return 0; });
  ASSERT_EQ(rd_kafka_mock_broker_set_rtt(mc_, 1, 100), RD_KAFKA_RESP_ERR_NO_ERROR);
  auto o = out();
  o.max_pending = 200;
  auto sink = std::make_shared<rill::kafka_sink<rec>>(o);
  auto so = src("gb");
  so.splits = 1;
  rill::kafka_source<> s{so};
  auto st = s.stats();
  std::atomic<bool> sampling{true};
  std::atomic<std::uint64_t> peak{0};
  // What the run did each 500 ms (consumed, accepted, delivered, pending, pauses,
  // rebalances), shown when the counts are wrong.
  std::string timeline;
  std::thread sampler([&] {
    auto next = std::chrono::steady_clock::now();
    while (sampling.load()) {
      peak.store(std::max(peak.load(), sink->undelivered()));
      if (std::chrono::steady_clock::now() >= next) {
        next += 500ms;
        const auto& k = sink->stats();
        timeline += " [" + std::to_string(st->consumed.load()) + " " + std::to_string(k.accepted.load()) + " " +
                    std::to_string(k.delivered.load()) + " " + std::to_string(sink->undelivered()) + " " +
                    std::to_string(st->pauses.load()) + " " + std::to_string(st->rebalances.load()) + "]";
      }
      std::this_thread::sleep_for(200us);
    }
  });
  run_until(rill::from(std::move(s)).sink(sink), [&] { return sink->stats().delivered.load() >= 3000; });
  sampling = false;
  sampler.join();
  EXPECT_EQ(sink->stats().delivered.load(), 3000u)
      << "every 500 ms [consumed accepted delivered pending pauses rebalances]:" << timeline;
  EXPECT_GT(peak.load(), 0u);
  EXPECT_LT(peak.load(), 200u + 256u);
  EXPECT_EQ(committed("gb", "in", 1), std::vector<long long>{3000});
  // The check itself: full at max_pending, free again once the reports are in.
  auto o2 = out();
  o2.max_pending = 10;
  rill::kafka_sink<rec> direct(o2);
  for (int i = 0; i < 10; ++i) {
    rill::record<rec> r;
    r.value.value = std::to_string(i);
    direct.write(0, std::move(r));
  }
  EXPECT_FALSE(direct.flush(std::size_t{0}));  // 10 pending, the first report 100 ms away
  EXPECT_EQ(direct.flush(10s), 0u);
  EXPECT_TRUE(direct.flush(std::size_t{0}));
}

// A dead-letter sink written from another sink's on_error. Delivery reports run inside
// a poll; the successful ones wait in a per-thread list until that poll returns. A write
// to the dead-letter sink from on_error (a failed report, inside the first sink's poll)
// serves the dead-letter sink's reports on the same thread (every 64 writes of a thread):
// that nested poll must release only its own reports, not the first sink's successes
// still waiting in the list. Before the fix it took them as its own: the first sink's
// pending count stayed at 1 (flush timed out) and the dead-letter sink's went 1 short.
// Each round: two produce requests answered back to back (the first OK after 30 ms, the
// second at once with a permanent error), so one poll serves a success, then a failure.
TEST_F(KafkaMock, DeadLetterSinkWrittenInOnErrorKeepsBothSinksCounts) {
  topic("out", 1);
  topic("dlq", 1);
  // The dead-letter sink's broker does not answer: its records stay pending, so its
  // count shows exactly what it took for its own (and the mock's error stack is left
  // to the first sink's requests).
  rill::kafka_sink<rec> dlq({.brokers = "127.0.0.1:1", .topic = "dlq"});
  std::atomic<std::uint64_t> dead{0};
  constexpr int rounds = 10;
  for (int k = 0; k < rounds; ++k) {
    // A new producer each round: after the permanent error librdkafka fails the topic's
    // later messages too.
    // One message per produce request, whatever the timing (a sleep between the writes
    // let a loaded machine batch both into one request).
    auto o = out();
    o.config["batch.num.messages"] = "1";
    rill::kafka_sink<rec> first(o);
    first.on_error([&](const rill::kafka_failed_delivery& f) {
      for (int i = 0; i < 64; ++i) {  // 64 writes of this thread: one serves dlq's reports
        rill::record<rec> r;
        r.value.value = f.value;
        dlq.write(0, std::move(r));
        dead.fetch_add(1);
      }
    });
    ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(mc_, 1, 0 /* Produce */, 2, RD_KAFKA_RESP_ERR_NO_ERROR, 30,
                                                           RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, 0),
              RD_KAFKA_RESP_ERR_NO_ERROR);
    for (int i = 0; i < 2; ++i) {
      rill::record<rec> r;
      r.value.value = std::to_string(k) + "/" + std::to_string(i);
      first.write(0, std::move(r));
    }
    EXPECT_EQ(first.flush(3s), 0u) << "round " << k << ": first sink pending " << first.undelivered();
    EXPECT_EQ(first.stats().delivered.load(), 1u) << "round " << k;
    EXPECT_EQ(first.stats().failed.load(), 1u) << "round " << k;
  }
  EXPECT_EQ(dead.load(), 64u * rounds);
  EXPECT_EQ(dlq.stats().delivered.load(), 0u);
  EXPECT_EQ(dlq.undelivered(), dead.load());
}

// A stop request while the sink is full (max_pending reached, its broker down) ends the
// run within the sink's flush_timeout (1 s here), not its delivery timeout (6 s): before,
// the source waited for room before looking at the stop request (11.2 s measured in
// review with these settings). The undelivered records are reported, none committed.
TEST_F(KafkaMock, StopWhileSinkIsFullEndsWithinFlushTimeout) {
  topic("in", 1);
  produce("in", numbers(100), [](std::size_t) { return 0; });
  auto sink = std::make_shared<rill::kafka_sink<rec>>(rill::kafka_sink_options{
      .brokers = "127.0.0.1:1", .topic = "out", .flush_timeout = 1s, .delivery_timeout = 6s, .max_pending = 10});
  auto so = src("gs");
  so.splits = 1;
  rill::kafka_source<> s{so};
  auto st = s.stats();
  std::chrono::steady_clock::time_point asked{};
  run_until(rill::from(std::move(s)).sink(sink), [&] {
    if (sink->undelivered() < 10) return false;
    asked = std::chrono::steady_clock::now();
    return true;
  });
  const auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_LT(took, 4s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  EXPECT_EQ(sink->stats().delivered.load(), 0u);
  EXPECT_LE(committed("gs", "in", 1).at(0), 0);  // no offset committed past a record (-1001 = none, 0 = start)
}

// The same for any source (core/source.hpp's driver), e.g. netflow's probe, a capture
// read into a kafka_sink: a stop request while the sink is full ends the run within the
// sink's flush_timeout, not its delivery timeout (6 s).
TEST_F(KafkaMock, StopWhileSinkIsFullEndsWithinFlushTimeoutForAnySource) {
  std::vector<rill::record<rec>> recs(100000);  // many source slices
  for (std::size_t i = 0; i < recs.size(); ++i) recs[i].value.value = std::to_string(i);
  auto sink = std::make_shared<rill::kafka_sink<rec>>(rill::kafka_sink_options{
      .brokers = "127.0.0.1:1", .topic = "out", .flush_timeout = 1s, .delivery_timeout = 6s, .max_pending = 10});
  std::chrono::steady_clock::time_point asked{};
  run_until(rill::from(rill::vector_source<rec>{std::move(recs)}).sink(sink), [&] {
    if (sink->undelivered() < 10) return false;
    asked = std::chrono::steady_clock::now();
    return true;
  });
  const auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_LT(took, 4s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  EXPECT_EQ(sink->stats().delivered.load(), 0u);
}

namespace {
/// The value of gauge_fn `name` registered on `m` (-1 if none).
double gauge(const rill::job_metrics& m, const std::string& name) {
  for (const auto& g : m.gauge_fns())
    if (g.name == name) return g.read();
  return -1;
}
/// The value of the series `series` (name and labels as written) in `text`; -1 if absent.
double sample_value(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}
/// Serves split reader `r` until it is ready (its partitions assigned) or `deadline`;
/// whether it is ready.
template <class Reader>
bool serve_until_ready(Reader& r, std::chrono::steady_clock::time_point deadline) {
  while (!r.ready() && std::chrono::steady_clock::now() < deadline) {
    r.serve();
    std::this_thread::sleep_for(1ms);
  }
  return r.ready();
}
}  // namespace

// Consumer lag (kafka_source.hpp "Metrics"): 1000 records in partition 0, 600 in 1. One
// split takes 1200 (more than either partition holds, so both partitions were read from)
// and stops: each partition's lag is what was produced to it minus what the split took
// from it, counted from the records themselves. The gauge family on the metrics endpoint
// reads the same. The only commit is the final synchronous one (commit_interval 1 h): one
// commit latency, no longer than close() took as timed here; afterwards no lag is listed.
TEST_F(KafkaMock, ConsumerLagIsProducedMinusTakenPerPartition) {
  topic("in", 2);
  produce("in", numbers(1600), [](std::size_t i) { return int(i < 1000 ? 0 : 1); });
  auto so = src("glag");
  so.commit_interval = std::chrono::hours{1};
  rill::kafka_source<> s{so};
  rill::job_metrics jm{1};
  s.add_metrics(jm, "kin");
  auto r = s.open(0);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  ASSERT_TRUE(serve_until_ready(r, deadline));
  std::size_t taken[2] = {0, 0}, total = 0;
  while (total < 1200 && std::chrono::steady_clock::now() < deadline) {
    r.poll([&](rill::record<rec>&& x) { ++taken[x.value.partition]; ++total; }, 1200 - total);
    std::this_thread::sleep_for(100us);
  }
  ASSERT_EQ(total, 1200u);
  ASSERT_GT(taken[0], 0u);
  ASSERT_GT(taken[1], 0u);

  auto lag = s.lag();
  ASSERT_EQ(lag.size(), 2u);
  std::sort(lag.begin(), lag.end(), [](const auto& a, const auto& b) { return a.partition < b.partition; });
  const std::int64_t produced[2] = {1000, 600};
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(lag[p].topic, "in");
    EXPECT_EQ(lag[p].partition, p);
    EXPECT_EQ(lag[p].high_watermark, produced[p]);
    EXPECT_EQ(lag[p].position, std::int64_t(taken[p]));
    EXPECT_EQ(lag[p].lag, produced[p] - std::int64_t(taken[p]));
  }
  ASSERT_EQ(jm.gauge_family_fns().size(), 1u);
  std::vector<rill::job_metrics::gauge_sample> series;
  jm.gauge_family_fns()[0].read(series);
  ASSERT_EQ(series.size(), 2u);
  double sum = 0;
  for (const auto& g : series) {
    EXPECT_EQ(g.labels.size(), 3u);
    EXPECT_EQ(g.labels[0], (std::pair<std::string, std::string>{"operator", "kin"}));
    sum += g.value;
  }
  EXPECT_EQ(sum, 1600.0 - 1200.0);  // Flink's pendingRecords of this source
  EXPECT_EQ(gauge(jm, "rill_kafka_consumer_assigned_partitions"), 2.0);

  EXPECT_EQ(s.stats()->commit_latency.count(), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  r.close();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.stats()->commit_latency.count(), 1u);
  EXPECT_GT(s.stats()->commit_latency.max(), 0u);
  EXPECT_LE(s.stats()->commit_latency.max(), std::uint64_t(std::chrono::nanoseconds(took).count()));
  const std::vector<long long> ends{static_cast<long long>(taken[0]), static_cast<long long>(taken[1])};
  EXPECT_EQ(committed("glag", "in", 2), ends);
  EXPECT_TRUE(s.lag().empty());
}

// The sink's pending records and delivery latency (kafka_sink.hpp "Metrics"): with the
// broker down, 100 writes stay pending (the gauge reads 100); brought back up, all 100
// are delivered, the gauge reads 0, and the latency histogram holds 100 values, none
// shorter than the time the broker was down after the last write and none longer than
// from the first write to the end of the flush (both timed here).
TEST_F(KafkaMock, SinkPendingWhileBrokerDownThenDeliveryLatencies) {
  topic("out", 1);
  auto o = out();
  o.config["reconnect.backoff.ms"] = "10";
  o.config["reconnect.backoff.max.ms"] = "50";
  ASSERT_EQ(rd_kafka_mock_broker_set_down(mc_, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  auto sink = std::make_shared<rill::kafka_sink<std::string>>(
      o, [](const std::string& v) { return rill::kafka_message_out{std::nullopt, v}; });
  rill::job_metrics jm{1};
  sink->add_metrics(jm, "kout");
  const auto first = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) sink->write(0, rill::record<std::string>{std::to_string(i), rill::event_time{}});
  const auto last = std::chrono::steady_clock::now();
  EXPECT_EQ(gauge(jm, "rill_kafka_producer_pending_records"), 100.0);
  std::this_thread::sleep_for(50ms);  // a down time to measure against, not a wait for a result
  const auto up = std::chrono::steady_clock::now();
  ASSERT_EQ(rd_kafka_mock_broker_set_up(mc_, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(sink->flush(20s), 0u);
  const auto done = std::chrono::steady_clock::now();
  EXPECT_EQ(gauge(jm, "rill_kafka_producer_pending_records"), 0.0);
  EXPECT_EQ(sink->stats().delivered.load(), 100u);
  ASSERT_EQ(jm.summary_fns().size(), 1u);
  const rill::histogram h = jm.summary_fns()[0].read();
  EXPECT_EQ(h.count(), 100u);
  const auto ns = [](auto d) { return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()); };
  // quantile(0) is at least the smallest value (the top of its bucket, histogram's rule).
  EXPECT_GE(h.quantile(0.0), ns(up - last));
  EXPECT_LE(h.max(), ns(done - first));
}

// The same metrics on a run's Prometheus text (stream::sink and rill::from call
// add_metrics): source -> sink of 1000 records; afterwards nothing is pending, the
// delivery latency summary counts every delivered record, and at least the final commit
// was timed.
TEST_F(KafkaMock, RunExposesKafkaMetrics) {
  topic("in", 2);
  topic("out", 2);
  produce("in", numbers(1000), [](std::size_t i) { return int(i % 2); });
  auto sink = std::make_shared<rill::kafka_sink<rec>>(out());
  rill::kafka_source<> s{src("gm")};
  auto st = s.stats();
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  std::thread stopper([&] {
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < end && sink->stats().delivered.load() < 1000)
      std::this_thread::sleep_for(5ms);
    rt.request_stop();
  });
  rt.run(rill::from(std::move(s), "kin").sink(sink, "kout"));
  stopper.join();
  const std::string text = rt.prometheus_text();
  EXPECT_EQ(sink->stats().delivered.load(), 1000u);
  EXPECT_EQ(sample_value(text, "rill_kafka_producer_pending_records{operator=\"kout\"}"), 0.0) << text;
  EXPECT_EQ(sample_value(text, "rill_kafka_producer_delivery_latency_seconds_count{operator=\"kout\"}"), 1000.0)
      << text;
  EXPECT_GE(sample_value(text, "rill_kafka_consumer_commit_latency_seconds_count{operator=\"kin\"}"), 1.0) << text;
  EXPECT_EQ(double(st->commit_latency.count()),
            sample_value(text, "rill_kafka_consumer_commit_latency_seconds_count{operator=\"kin\"}"));
  EXPECT_NE(text.find("# TYPE rill_end_to_end_latency_seconds summary"), std::string::npos) << text;
}

namespace {
/// Threads of this process now (/proc/self/task entries).
std::size_t process_threads() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

/// A plain group member for the C22 cases: a KafkaConsumer of `group` on topic `in`,
/// auto commit off, polled by the test thread.
std::unique_ptr<RdKafka::KafkaConsumer> member(const std::string& brokers, const std::string& group,
                                               bool cooperative) {
  std::string e;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers, e);
  c->set("group.id", group, e);
  c->set("client.id", "c2", e);
  c->set("enable.auto.commit", "false", e);
  c->set("session.timeout.ms", "6000", e);
  // Where C1's commit on revoke has not reached the group coordinator when C2 asks for
  // the committed offset, C2 starts at the beginning (not at the end, librdkafka's
  // default, which would skip the records produced to it next); C22 is about C1's final
  // commit, not about where C2 starts.
  c->set("auto.offset.reset", "earliest", e);
  if (cooperative) c->set("partition.assignment.strategy", "cooperative-sticky", e);
  std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), e));
  return k;
}

}  // namespace

// C22 (../shared/cases/CASES.md): the final commit on shutdown covers only the partitions
// still assigned, with last processed + 1.
//   C1 (a kafka_source, one split) starts with p0 and p1 and processes offsets 0..40 of
//   both. C2 joins the group and takes one of them (pm; the assignor picks which); C1
//   keeps the other (pk). C1 processes pk up to offset 99, C2 processes pm's 41..59 and
//   commits 60. C1 shuts down gracefully.
// Expected: pk committed at 100 (lag 0, never -1), pm still at 60: C1 never writes 41 to
// a partition it no longer owns. Graph: kafka_source(in, 2 partitions) -> sink(count).
void final_commit_after_rebalance(const std::string& brokers, bool cooperative,
                                  const std::string& group) {
  auto produce_to = [&](int partition, int from, int to) {
    std::string e;
    std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    c->set("bootstrap.servers", brokers, e);
    std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), e));
    for (int i = from; i < to; ++i) {
      const auto v = std::to_string(i);
      p->produce("in", partition, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(v.data()), v.size(), nullptr, 0,
                 0, nullptr);
    }
    ASSERT_EQ(p->flush(10000), RdKafka::ERR_NO_ERROR);
  };
  produce_to(0, 0, 41);
  produce_to(1, 0, 41);
  rill::kafka_source_options o{.brokers = brokers, .group = group, .topics = {"in"}, .splits = 1,
                               .commit_interval = 100ms, .cooperative = cooperative,
                               .config = {{"session.timeout.ms", "6000"}}};
  rill::kafka_source<> s{o};
  auto st = s.stats();
  std::array<std::atomic<long long>, 2> last{-1, -1};  // last offset C1 processed, per partition
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  auto j = rill::from(std::move(s)).sink([&](const rec& r) { last[std::size_t(r.partition)] = r.offset; });
  std::thread runner([&] { rt.run(j); });
  const auto deadline = std::chrono::steady_clock::now() + 40s;
  auto wait = [&](auto pred) {
    while (!pred() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    return pred();
  };
  auto c2 = member(brokers, group, cooperative);
  bool ok = wait([&] { return last[0] == 40 && last[1] == 40; });
  EXPECT_TRUE(ok) << "C1 processed p0 to " << last[0] << ", p1 to " << last[1];
  ASSERT_EQ(c2->subscribe({"in"}), RdKafka::ERR_NO_ERROR);
  // C2 polls until it holds one partition and C1 holds the other.
  int pm = -1;
  ok = wait([&] {
    std::unique_ptr<RdKafka::Message> m(c2->consume(20));
    std::vector<RdKafka::TopicPartition*> a;
    c2->assignment(a);
    if (a.size() == 1) pm = a[0]->partition();
    RdKafka::TopicPartition::destroy(a);
    return pm >= 0 && st->assigned.load() == 1;
  });
  ASSERT_TRUE(ok) << "no rebalance: C2 holds " << pm << ", C1 " << st->assigned.load() << " partitions";
  const int pk = 1 - pm;
  produce_to(pk, 41, 100);
  produce_to(pm, 41, 60);
  long long c2_last = -1;
  ok = wait([&] {
    std::unique_ptr<RdKafka::Message> m(c2->consume(20));
    if (m->err() == RdKafka::ERR_NO_ERROR) c2_last = m->offset();
    return c2_last == 59;
  });
  EXPECT_TRUE(ok) << "C2 processed pm to " << c2_last;
  std::vector<RdKafka::TopicPartition*> mine{RdKafka::TopicPartition::create("in", pm, 60)};
  EXPECT_EQ(c2->commitSync(mine), RdKafka::ERR_NO_ERROR);
  RdKafka::TopicPartition::destroy(mine);
  ok = wait([&] { return last[std::size_t(pk)] == 99; });
  EXPECT_TRUE(ok) << "C1 processed pk to " << last[std::size_t(pk)];
  rt.request_stop();
  runner.join();
  EXPECT_EQ(last[std::size_t(pm)].load(), 40);  // C1 never read pm after the rebalance
  // Read back while C2 is still a member (its close below commits nothing).
  std::string e;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers, e);
  c->set("group.id", group, e);
  std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), e));
  std::vector<RdKafka::TopicPartition*> tps{RdKafka::TopicPartition::create("in", pk),
                                            RdKafka::TopicPartition::create("in", pm)};
  ASSERT_EQ(k->committed(tps, 10000), RdKafka::ERR_NO_ERROR);
  EXPECT_EQ(tps[0]->offset(), 100) << "kept partition p" << pk;
  EXPECT_EQ(tps[1]->offset(), 60) << "moved partition p" << pm;
  std::int64_t low = -1, high = -1;
  ASSERT_EQ(k->query_watermark_offsets("in", pk, &low, &high, 10000), RdKafka::ERR_NO_ERROR);
  EXPECT_EQ(high - tps[0]->offset(), 0) << "lag of the kept partition";
  RdKafka::TopicPartition::destroy(tps);
  k->close();
  c2->close();
}

TEST_F(KafkaMock, FinalCommitCoversOnlyAssignedPartitionsEager) {
  topic("in", 2);
  final_commit_after_rebalance(brokers_, false, "c22e");
}

TEST_F(KafkaMock, FinalCommitCoversOnlyAssignedPartitionsCooperative) {
  topic("in", 2);
  final_commit_after_rebalance(brokers_, true, "c22c");
}

// A final offset commit the coordinator never confirms is the run's error, not a silent
// short commit. 100 records in one partition; no periodic commit (commit_interval 1 h);
// once the sink has all 100, every OffsetCommit request (API key 8) is answered
// NOT_COORDINATOR, then the run is stopped. drain_timeout 2 s.
// Expected (kafka_source.hpp "At-least-once"): one run error naming the group, the
// reason ("no reply" while librdkafka still retries the refused commit, else its error)
// and "in/0 (done to 100"; the group has no committed offset; the stop ends within
// drain_timeout + 5 s (a commitSync waited 6-15 s past drain_timeout for librdkafka's own
// retries). Control: the same run without the injected errors reports nothing and
// commits 100. Its drain_timeout is the default 30 s: the sink can have all 100 records
// while the group still rebalances for the second split's join (the mock's coordinator
// waits session.timeout.ms - 1 s = 5 s for members to rejoin), and the final commit is
// answered REBALANCE_IN_PROGRESS until it completes.
TEST_F(KafkaMock, FinalCommitNotConfirmedIsARunError) {
  topic("in", 1);
  produce("in", numbers(100), [](std::size_t) { return 0; });
  auto run = [&](const std::string& group, bool refuse) {
    auto o = src(group);
    o.commit_interval = std::chrono::hours{1};
    o.drain_timeout = refuse ? 2s : 30s;
    std::atomic<int> got{0};
    std::chrono::steady_clock::time_point stop_at{};
    auto rep = run_until(rill::from(rill::kafka_source<>{o}).sink([&](rec&&) {
      if (got.fetch_add(1) + 1 == 100 && refuse) {
        std::vector<rd_kafka_resp_err_t> errs(2000, RD_KAFKA_RESP_ERR_NOT_COORDINATOR);
        rd_kafka_mock_push_request_errors_array(mc_, 8 /* OffsetCommit */, errs.size(), errs.data());
      }
    }), [&] {
      if (got.load() < 100) return false;
      stop_at = std::chrono::steady_clock::now();
      return true;
    });
    EXPECT_LT(std::chrono::steady_clock::now() - stop_at, o.drain_timeout + 5s) << group;
    rd_kafka_mock_clear_request_errors(mc_, 8);
    EXPECT_EQ(got.load(), 100) << group;
    return rep;
  };
  const auto bad = run("refused", true);
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].find("group 'refused': final offset commit not confirmed within drain_timeout (2000 ms)"),
            std::string::npos) << bad.errors[0];
  EXPECT_NE(bad.errors[0].find("in/0 (done to 100"), std::string::npos) << bad.errors[0];  // ", lost" when the
  // refused commits also cost the consumer its assignment
  EXPECT_TRUE(bad.errors[0].find("drain_timeout (2000 ms): no reply;") != std::string::npos ||
              bad.errors[0].find("drain_timeout (2000 ms): Broker: ") != std::string::npos)
      << bad.errors[0];
  EXPECT_EQ(committed("refused", "in", 1), std::vector<long long>{RdKafka::Topic::OFFSET_INVALID});
  const auto good = run("confirmed", false);
  EXPECT_TRUE(good.errors.empty()) << good.errors.front();
  EXPECT_EQ(committed("confirmed", "in", 1), std::vector<long long>{100});
}

// C30 (../shared/cases/CASES.md, librdkafka #3796): shutdown never hangs on a librdkafka
// reference, and leaves no librdkafka object behind. 100 cycles, in 10 lanes run side by
// side (the mock's group coordinator takes 3-5 s to form a group; lanes keep the test near
// a minute). A cycle of lane L: a kafka_source (auto offset store off, as rill always sets
// it) in group c30-L reads the 1000 messages produced for the cycle to topic c30-L,
// commits, and stops through runtime::request_stop(). In odd cycles the sink still holds
// the last record (with its ack token) when the stop begins and releases it only after the
// runtime and the consumer were destroyed.
// Expected: every stop ends within 5 s; the committed offset is last processed + 1, which
// in a holding cycle is the held record's offset (not done: the next cycle reads it
// again); after all cycles and the producers' destruction the process's thread count and
// librdkafka's own (rd_kafka_thread_cnt) are what they were before the test's first
// client: every consumer was destroyed.
TEST_F(KafkaMock, StopNeverHangsAndLeavesNoLibrdkafkaObjects) {
  constexpr int lanes = 10, cycles = 10;
  for (int L = 0; L < lanes; ++L) topic(("c30-" + std::to_string(L)).c_str(), 1);
  // The baseline before any client of the test exists. The mock's holder (a producer)
  // starts a thread per broker when a metadata reply first names it, and a librdkafka
  // thread counts itself in rd_kafka_thread_cnt() only once it runs: on a loaded machine
  // the count read straight after SetUp was 3 of the holder's 5 threads (CI). So: one
  // metadata round trip (every thread the holder will have is then created), then wait
  // until both counts held still for 500 ms.
  const rd_kafka_metadata_t* md = nullptr;
  ASSERT_EQ(rd_kafka_metadata(holder_, 1, nullptr, &md, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_metadata_destroy(md);
  std::size_t threads0 = process_threads();
  int rdk_threads0 = rd_kafka_thread_cnt();
  for (auto still = std::chrono::steady_clock::now(), end = still + 10s;
       std::chrono::steady_clock::now() - still < 500ms && std::chrono::steady_clock::now() < end;) {
    std::this_thread::sleep_for(10ms);
    if (process_threads() != threads0 || rd_kafka_thread_cnt() != rdk_threads0) {
      threads0 = process_threads();
      rdk_threads0 = rd_kafka_thread_cnt();
      still = std::chrono::steady_clock::now();
    }
  }
  std::vector<std::unique_ptr<RdKafka::Producer>> producers;
  for (int L = 0; L < lanes; ++L) {
    std::string e;
    std::unique_ptr<RdKafka::Conf> pc(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    pc->set("bootstrap.servers", brokers_, e);
    producers.emplace_back(RdKafka::Producer::create(pc.get(), e));
  }
  auto lane = [&](int L) {
    const std::string name = "c30-" + std::to_string(L);
    long long produced = 0;
    for (int k = 0; k < cycles; ++k) {
      for (int i = 0; i < 1000; ++i) {
        const auto v = std::to_string(produced + i);
        producers[std::size_t(L)]->produce(name, 0, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(v.data()),
                                           v.size(), nullptr, 0, 0, nullptr);
      }
      EXPECT_EQ(producers[std::size_t(L)]->flush(10000), RdKafka::ERR_NO_ERROR);
      produced += 1000;
      const bool hold = k % 2 == 1;
      std::optional<rill::record<rec>> held;
      std::atomic<long long> last{-1};
      std::atomic<std::chrono::steady_clock::time_point> asked{};
      std::chrono::steady_clock::duration stop_took{};
      std::string errors;  // the run's, for the failure messages
      {
        rill::kafka_source<> s{{.brokers = brokers_, .group = name, .topics = {name}, .splits = 1,
                                .drain_timeout = 1s, .config = {{"session.timeout.ms", "6000"}}}};
        rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
        auto j = rill::from(std::move(s)).sink([&](rill::record<rec>&& r) {
          const auto off = r.value.offset;
          if (hold) held = std::move(r);  // the previous one is released (done)
          last = off;
        });
        std::thread stopper([&] {
          const auto end = std::chrono::steady_clock::now() + 60s;  // a loaded machine forms groups slowly
          while (last.load() != produced - 1 && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(2ms);
          asked = std::chrono::steady_clock::now();
          rt.request_stop();
        });
        for (const auto& e : rt.run(j).errors) errors += " [" + e + "]";
        stop_took = std::chrono::steady_clock::now() - asked.load();
        stopper.join();
      }  // runtime and job gone: the consumer is destroyed
      held.reset();  // the token outlives its consumer: its ack goes nowhere
      EXPECT_EQ(last.load(), produced - 1) << name << " cycle " << k << errors;
      EXPECT_LT(stop_took, 5s) << name << " cycle " << k << ": stop took "
                               << std::chrono::duration_cast<std::chrono::milliseconds>(stop_took).count() << " ms"
                               << errors;
      EXPECT_EQ(committed(name, name.c_str(), 1), std::vector<long long>{hold ? produced - 1 : produced})
          << name << " cycle " << k << errors;
    }
  };
  std::vector<std::thread> ts;
  for (int L = 0; L < lanes; ++L) ts.emplace_back(lane, L);
  for (auto& t : ts) t.join();
  producers.clear();  // rd_kafka_destroy joins their threads
  EXPECT_EQ(rd_kafka_thread_cnt(), rdk_threads0);
  EXPECT_EQ(process_threads(), threads0);
}

// Exactly-once wiring (docs/design.md "Exactly-once"): the sink needs the source, the
// source needs a sink, both need exactly_once, and a transactional id must be derivable.
TEST_F(KafkaMock, ExactlyOnceNeedsASourceAndSinkLinked) {
  topic("in", 1);
  topic("out", 1);
  auto eos_src = src("ge");
  eos_src.guarantee = rill::processing_guarantee::exactly_once;
  auto eos_out = out();
  eos_out.guarantee = rill::processing_guarantee::exactly_once;
  EXPECT_THROW(rill::kafka_sink<rec>{eos_out}, std::invalid_argument);  // no source to commit for
  {
    rill::kafka_source<> alo{src("ga")};
    EXPECT_THROW((rill::kafka_sink<rec>{eos_out, alo}), std::invalid_argument);  // source is at-least-once
  }
  {
    rill::kafka_source<> s{eos_src};  // no instance_id, no transactional_id
    EXPECT_THROW((rill::kafka_sink<rec>{eos_out, s}), std::invalid_argument);
  }
  {
    rill::kafka_source<> s{eos_src};  // no sink: nobody would commit its offsets
    rill::runtime rt{{.workers = 1}};
    EXPECT_THROW(rt.run(rill::from(std::move(s)).sink([](rec&&) {})), std::invalid_argument);
  }
}

// Graph: kafka_source(in, 2 partitions, exactly-once) -> key_by(value % 4) -> tumbling
// 100 ms count -> kafka_sink(out, transactional). Event time = value ms; one "end"
// record per partition at 1 h makes every data window fire (its own never does: the stop
// discards it). Every result reaches a read_committed reader once, its count the
// brute-force one.
TEST_F(KafkaMock, ExactlyOnceKeyedCountReachesAReadCommittedReaderOnce) {
  topic("in", 2);
  topic("out", 1);
  auto vals = numbers(1000);
  produce("in", vals, [](std::size_t i) { return int(i % 2); });
  produce("in", {"end", "end"}, [](std::size_t i) { return int(i); });
  rill::kafka_source<> s{eos_src("gx", "x")};
  s.event_time_from([](const rec& r) {
    return rill::event_time{std::chrono::milliseconds{r.value == "end" ? 3600000 : std::stoll(r.value)}};
  });
  auto sink = std::make_shared<rill::kafka_sink<rec>>(eos_out(), s);  // transactional.id "gx-x"
  auto j = rill::from(std::move(s))
               .key_by([](const rec& r) { return r.value == "end" ? -1 : std::stoi(r.value) % 4; })
               .window(rill::tumbling{100ms}, {.max_delay = 0ms})
               .count()
               .map([](rill::keyed_window_result<int, std::uint64_t>&& r) {
                 rec m;
                 m.key = std::to_string(r.key);
                 m.value = std::to_string(r.start.time_since_epoch().count() / 1000000) + " " + std::to_string(r.value);
                 return m;
               })
               .sink(sink);
  const auto rep = run_until(j, [&] { return sink->stats().delivered.load() >= 40; });
  EXPECT_TRUE(rep.errors.empty()) << rep.errors.front();
  EXPECT_FALSE(sink->failed());
  // No committed offsets to compare: librdkafka 2.0.2's mock answers TxnOffsetCommit
  // without storing the offsets (tests/kafka/kafka_eos_test.cpp checks them on a broker).
  const auto k = committed_reader("reader");
  std::map<std::pair<std::string, std::string>, int> seen;  // (key, window start) -> results
  long long total = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (total < 1000 && std::chrono::steady_clock::now() < until) {
    std::unique_ptr<RdKafka::Message> m(k->consume(100));
    if (!m || m->err()) continue;
    const std::string v(static_cast<const char*>(m->payload()), m->len());
    const auto sp = v.find(' ');
    ++seen[{*m->key(), v.substr(0, sp)}];
    EXPECT_EQ(v.substr(sp + 1), "25");  // 100 ms of values, a quarter of them per key
    total += std::stoll(v.substr(sp + 1));
  }
  k->close();
  EXPECT_EQ(total, 1000);
  EXPECT_EQ(seen.size(), 40u);
  for (const auto& [kw, n] : seen) EXPECT_EQ(n, 1) << kw.first << " " << kw.second;
}

// Exactly-once: an output librdkafka refuses for good fails the run (docs/design.md
// "Exactly-once", Abort on error). Graph: kafka_source(in, 1 partition, inputs 0..19,
// exactly-once) -> map (the output of the input at offset 5 is 2,000 bytes) ->
// kafka_sink(out, transactional, message.max.bytes 1000), so produce() refuses that output
// (MSG_SIZE_TOO_LARGE). Committing the transaction past it would lose it: a restart
// replays from the committed offsets, above 5. Expected, as Kafka Streams' default
// production exception handler: the run ends by itself within 20 s (the mock's group
// forms in 3-5 s), with an error naming the topic and librdkafka's error; the open
// transaction is aborted, so a read_committed reader of out sees at most a prefix of the
// outputs of inputs 0..4 and nothing at or after 5; the refused output is in
// stats().failed (outputs already produced into the aborted transaction may fail with
// it, hence >= 1); the committed input offset stays <= 5. Seen: the run ends after about
// 3 s with the refusal as its error and failed = 6 (the refused output and the five
// purged by the abort); the reader sees nothing. A sink that skips the refused output
// ends with no error, and the reader sees 0..4 and 6..19.
TEST_F(KafkaMock, ExactlyOnceRefusedOutputFailsTheRunInsteadOfSkippingIt) {
  topic("in", 1);
  topic("out", 1);
  constexpr int n = 20;
  produce("in", numbers(n), [](std::size_t) { return 0; });
  rill::kafka_source<> s{eos_src("grf", "rf")};
  auto so = eos_out();
  so.config["message.max.bytes"] = "1000";
  auto sink = std::make_shared<rill::kafka_sink<rec>>(so, s);
  std::atomic<int> reported{0};
  sink->on_error([&](const rill::kafka_failed_delivery&) { reported.fetch_add(1); });
  auto j = rill::from(std::move(s))
               .map([](rec&& r) {
                 if (r.offset == 5) r.value = std::string(2000, 'x');
                 return std::move(r);
               })
               .sink(sink);
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  std::atomic<bool> ended{false};
  // Stops a run that goes on: after 30 s, or once every other output was delivered (the
  // refused one skipped).
  std::thread stopper([&] {
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (!ended.load() && std::chrono::steady_clock::now() < end &&
           sink->stats().delivered.load() < std::uint64_t(n - 1))
      std::this_thread::sleep_for(5ms);
    if (!ended.load()) rt.request_stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto rep = rt.run(j);
  const auto took = std::chrono::steady_clock::now() - t0;
  ended = true;
  stopper.join();
  EXPECT_FALSE(rep.errors.empty()) << "the run skipped the refused output and went on";
  const auto named = std::find_if(rep.errors.begin(), rep.errors.end(), [](const std::string& e) {
    return e.find("kafka_sink out") != std::string::npos &&
           e.find("Message size too large") != std::string::npos;
  });
  EXPECT_TRUE(named != rep.errors.end()) << (rep.errors.empty() ? "no run error" : rep.errors.front());
  EXPECT_LT(took, 20s);
  EXPECT_TRUE(sink->failed());
  EXPECT_GE(sink->stats().failed.load(), 1u);
  EXPECT_EQ(reported.load(), int(sink->stats().failed.load()));
  // A read_committed reader of out up to its end: a prefix of 0..4, nothing at or after 5.
  const auto values = committed_values("out");
  ASSERT_TRUE(values.has_value()) << "no partition EOF";
  std::vector<int> seen;
  for (const auto& v : *values) seen.push_back(v.size() > 16 ? -1 : std::stoi(v));
  std::vector<int> prefix(std::min<std::size_t>(seen.size(), 5));
  std::iota(prefix.begin(), prefix.end(), 0);
  EXPECT_EQ(seen, prefix);
  std::cerr << "run ended after " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms, failed " << sink->stats().failed.load() << ", read_committed saw " << seen.size()
            << "; first run error: " << (rep.errors.empty() ? "none" : rep.errors.front()) << "\n";
  // No input offset committed past the refused output's input (librdkafka 2.0.2's mock
  // does not store transactional offsets: there it reads as none).
  EXPECT_LE(committed("grf", "in", 1)[0], 5);
}

// The same rule for a refusal in a delivery report. Graph: kafka_source(in, 1 partition,
// inputs 0..19, exactly-once) -> kafka_sink(out, transactional); the mock broker answers
// the sink's first Produce request MSG_SIZE_TOO_LARGE, which librdkafka does not retry:
// the outputs in it fail in their delivery reports. Expected: the run ends by itself
// within 20 s with an error naming the topic and librdkafka's error, and a read_committed
// reader of out sees nothing (every output was in the aborted transaction). librdkafka
// makes that transaction abortable itself (its next transactional call fails), so this
// holds whether the sink or librdkafka notices first.
TEST_F(KafkaMock, ExactlyOnceOutputRefusedInItsDeliveryReportFailsTheRun) {
  topic("in", 1);
  topic("out", 1);
  constexpr int n = 20;
  produce("in", numbers(n), [](std::size_t) { return 0; });
  rill::kafka_source<> s{eos_src("grd", "rd")};
  auto sink = std::make_shared<rill::kafka_sink<rec>>(eos_out(), s);
  rd_kafka_mock_push_request_errors(mc_, 0 /* Produce */, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  std::atomic<bool> ended{false};
  std::thread stopper([&] {  // stops a run that goes on, after 30 s
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (!ended.load() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(5ms);
    if (!ended.load()) rt.request_stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto rep = rt.run(rill::from(std::move(s)).sink(sink));
  const auto took = std::chrono::steady_clock::now() - t0;
  ended = true;
  stopper.join();
  ASSERT_FALSE(rep.errors.empty());
  EXPECT_NE(rep.errors.front().find("kafka_sink out"), std::string::npos) << rep.errors.front();
  EXPECT_NE(rep.errors.front().find("Message size too large"), std::string::npos) << rep.errors.front();
  EXPECT_LT(took, 20s);
  EXPECT_TRUE(sink->failed());
  EXPECT_GE(sink->stats().failed.load(), 1u);
  const auto values = committed_values("out");
  ASSERT_TRUE(values.has_value()) << "no partition EOF";
  EXPECT_TRUE(values->empty()) << values->size() << " outputs of the aborted transaction visible";
}

// 12. "<group>-<name>-repartition", as Kafka Streams names its repartition topics; names
// Kafka would refuse are refused before any broker is asked.
TEST(KafkaRepartitionName, GroupNameRepartitionAndOnlyLegalNames) {
  EXPECT_EQ(rill::repartition_topic_name("clicks-app", "by-user"), "clicks-app-by-user-repartition");
  EXPECT_EQ(rill::repartition_topic_name("g.1", "n_2"), "g.1-n_2-repartition");
  EXPECT_THROW(rill::repartition_topic_name("", "n"), std::invalid_argument);
  EXPECT_THROW(rill::repartition_topic_name("g", ""), std::invalid_argument);
  EXPECT_THROW(rill::repartition_topic_name("g", "by user"), std::invalid_argument);
  EXPECT_THROW(rill::repartition_topic_name("g", "by/user"), std::invalid_argument);
  EXPECT_NO_THROW(rill::repartition_topic_name("g", std::string(249 - 14, 'x')));  // 249 characters
  EXPECT_THROW(rill::repartition_topic_name("g", std::string(249 - 13, 'x')), std::invalid_argument);
}

// 12. Graph (one process, 2 workers):
//   kafka_source(in, 4 partitions, keyed by i % 7) -> kafka_repartition "agg" (by i % 5)
//   --> g12-agg-repartition (4 partitions) --> kafka_source(group g12-agg-repartition)
//   -> key_by(i % 5) -> tumbling 100 ms count -> collect
// Record i: value "<i> <i % 5>", event time i ms. A stop fires the open windows
// (stop_policy::fire) once the reader has read every record back. The reader takes the
// event time from the value (event_time_from): record 0's time, 0 ms, cannot be a
// message timestamp (librdkafka stamps the produce time instead).
TEST_F(KafkaMock, RepartitionCountsLikeBruteForceAndPlacesKeysByMurmur2) {
  topic("in", 4);
  topic("g12-agg-repartition", 4);  // the mock cluster has no CreateTopics: made here
  constexpr int n = 2000;
  std::vector<std::string> vals;
  std::map<std::pair<long long, std::string>, std::uint64_t> want;
  for (int i = 0; i < n; ++i) {
    vals.push_back(std::to_string(i) + " " + std::to_string(i % 5));
    ++want[{i / 100 * 100, std::to_string(i % 5)}];
  }
  produce("in", vals, [](std::size_t i) { return int(i % 7 % 4); });
  auto o = src("g12");
  o.splits = 1;  // one member per group: the mock's SyncGroup quirk (src())
  rill::kafka_source<> s{o};
  s.event_time_from([](const rec& r) { return rill::event_time{std::chrono::milliseconds{std::stoll(r.value)}}; });
  rill::kafka_repartition_options ro{.name = "agg"};
  ro.reader.splits = 1;
  ro.reader.config = o.config;
  rill::kafka_repartition<std::string> rp{ro, s};  // std::string: the value is the message
  rp.event_time_from([](const std::string& v) { return rill::event_time{std::chrono::milliseconds{std::stoll(v)}}; });
  EXPECT_EQ(rp.topic(), "g12-agg-repartition");
  EXPECT_EQ(rp.partitions(), 4);  // the input topic's count
  std::mutex mu;
  std::map<std::pair<long long, std::string>, std::vector<std::uint64_t>> got;
  auto key = [](const std::string& v) { return v.substr(v.find(' ') + 1); };
  auto j = rp.key_by(rill::from(std::move(s)).map([](rec&& r) { return std::move(r.value); }), key)
               .window(rill::tumbling{100ms}, {.max_delay = 0ms, .on_stop = rill::window_options::stop_policy::fire})
               .count()
               .sink([&](rill::keyed_window_result<std::string, std::uint64_t>&& r) {
                 std::lock_guard<std::mutex> g(mu);
                 got[{r.start.time_since_epoch().count() / 1000000, r.key}].push_back(r.value);
               });
  auto read_back = rp.source().stats();
  const auto rep = run_until(j, [&] { return read_back->consumed.load() >= std::uint64_t(n); });
  EXPECT_TRUE(rep.errors.empty()) << rep.errors.front();
  EXPECT_EQ(rp.writer().stats().delivered.load(), std::uint64_t(n));
  EXPECT_EQ(read_back->consumed.load(), std::uint64_t(n));
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [wk, c] : want) {
    ASSERT_EQ(got[wk].size(), 1u) << wk.first << " " << wk.second;
    EXPECT_EQ(got[wk][0], c) << wk.first << " " << wk.second;
  }
  // The topic as a plain consumer reads it: key = the aggregation key, value = the record,
  // timestamp = the event time (ms), partition = toPositive(murmur2(key)) % 4.
  std::string e;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers_, e);
  c->set("group.id", "check12", e);
  c->set("auto.offset.reset", "earliest", e);
  std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), e));
  k->subscribe({"g12-agg-repartition"});
  int read = 0, misplaced = 0, wrong = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (read < n && std::chrono::steady_clock::now() < until) {
    std::unique_ptr<RdKafka::Message> m(k->consume(100));
    if (!m || m->err()) continue;
    ++read;
    const std::string v(static_cast<const char*>(m->payload()), m->len());
    if (!m->key() || kt::java_partition(*m->key(), 4) != m->partition()) ++misplaced;
    const auto ts = m->timestamp().timestamp;
    if (!m->key() || *m->key() != key(v) || (std::stoll(v) > 0 ? ts != std::stoll(v) : ts < 1000000000000)) ++wrong;
  }
  k->close();
  EXPECT_EQ(read, n);
  EXPECT_EQ(misplaced, 0);
  EXPECT_EQ(wrong, 0);
}

// 12. A repartition topic that exists with another partition count than the input's is
// refused by the constructor (its keys would live in other partitions than before).
TEST_F(KafkaMock, RepartitionRefusesATopicWithAnotherPartitionCount) {
  topic("in", 4);
  topic("g13-agg-repartition", 3);
  rill::kafka_source<> s{src("g13")};
  try {
    rill::kafka_repartition<std::string> rp{{.name = "agg", .start_timeout = 5s}, s};
    ADD_FAILURE() << "constructed";
  } catch (const std::runtime_error& x) {
    EXPECT_NE(std::string(x.what()).find("exists with 3 partitions, not 4"), std::string::npos) << x.what();
  }
  // Told the count, it is fine.
  EXPECT_NO_THROW((rill::kafka_repartition<std::string>{{.name = "agg", .partitions = 3}, s}));
}

// 12. A stream that does not start at a Kafka source: vector_source (unacked records) ->
// kafka_repartition "v" (group and brokers from the reader's options, partitions given)
// -> key_by -> tumbling count. Exactly-once is refused without the input source.
TEST_F(KafkaMock, RepartitionOfAStreamWithoutKafkaInput) {
  topic("g14-v-repartition", 3);
  rill::kafka_repartition_options ro{.name = "v", .partitions = 3};
  ro.reader = src("g14");
  ro.reader.splits = 1;  // the mock's SyncGroup quirk (src())
  ro.reader.guarantee = rill::processing_guarantee::exactly_once;
  EXPECT_THROW((rill::kafka_repartition<std::string>{ro, nullptr, nullptr}), std::invalid_argument);
  ro.reader.guarantee = rill::processing_guarantee::at_least_once;
  rill::kafka_repartition<std::string> rp{ro, [](const std::string& v) { return v; },
                                          [](std::string_view v) { return std::string(v); }};
  EXPECT_EQ(rp.topic(), "g14-v-repartition");
  constexpr int n = 600;
  std::vector<rill::record<std::string, rill::unacked>> in;
  std::map<std::pair<long long, std::string>, std::uint64_t> want;
  for (int i = 1; i <= n; ++i) {
    in.push_back({std::to_string(i % 3), rill::event_time{std::chrono::milliseconds{i}}});
    ++want[{i / 100 * 100, std::to_string(i % 3)}];
  }
  std::mutex mu;
  std::map<std::pair<long long, std::string>, std::uint64_t> got;
  auto same = [](const std::string& v) { return v; };
  auto j = rp.key_by(rill::from(rill::vector_source<std::string, rill::unacked>{in}), same)
               .window(rill::tumbling{100ms}, {.on_stop = rill::window_options::stop_policy::fire})
               .count()
               .sink([&](rill::keyed_window_result<std::string, std::uint64_t>&& r) {
                 std::lock_guard<std::mutex> g(mu);
                 got[{r.start.time_since_epoch().count() / 1000000, r.key}] += r.value;
               });
  auto read_back = rp.source().stats();
  const auto rep = run_until(j, [&] { return read_back->consumed.load() >= std::uint64_t(n); });
  EXPECT_TRUE(rep.errors.empty()) << rep.errors.front();
  EXPECT_EQ(read_back->consumed.load(), std::uint64_t(n));
  EXPECT_EQ(got, want);
}

// 13. partitions_behind (kafka_source.hpp): one split over 2 partitions (1000 and 600
// records). Both count from their assignment; after all 1600 are taken and the partition
// EOFs with them, none; a new record taken alone (poll of 1) makes its partition count
// again until its EOF is taken; after close, nothing is assigned and nothing counts.
TEST_F(KafkaMock, PartitionsBehindCountsUntilThePartitionEofIsTaken) {
  topic("in", 2);
  produce("in", numbers(1600), [](std::size_t i) { return int(i < 1000 ? 0 : 1); });
  rill::kafka_source<> s{src("gbehind")};
  const auto st = s.stats();
  auto r = s.open(0);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  ASSERT_TRUE(serve_until_ready(r, deadline));
  ASSERT_EQ(st->assigned.load(), 2u);
  EXPECT_EQ(st->partitions_behind.load(), 2u);
  std::size_t total = 0;
  auto take = [&](std::size_t max) {
    return r.poll([&](rill::record<rec>&&) { ++total; }, max);
  };
  while (total < 1200 && std::chrono::steady_clock::now() < deadline) take(1200 - total);
  ASSERT_EQ(total, 1200u);
  EXPECT_GE(st->partitions_behind.load(), 1u);  // 400 records are still to be taken
  while ((total < 1600 || st->partitions_behind.load() > 0) && std::chrono::steady_clock::now() < deadline) {
    take(100);
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(total, 1600u);
  EXPECT_EQ(st->partitions_behind.load(), 0u);

  produce("in", {"late"}, [](std::size_t) { return 1; });
  while (total < 1601 && std::chrono::steady_clock::now() < deadline) {
    take(1);
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(total, 1601u);
  EXPECT_EQ(st->partitions_behind.load(), 1u);  // taken; its EOF not yet
  while (st->partitions_behind.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    take(100);
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(st->partitions_behind.load(), 0u);
  EXPECT_EQ(total, 1601u);
  r.close();
  EXPECT_EQ(st->partitions_behind.load(), 0u);
  EXPECT_EQ(st->assigned.load(), 0u);
}

// stop_when_idle on a Kafka input with partitions whose fetches are slow: 2 mock brokers,
// partitions 0 and 1 led by broker 1, 2 and 3 by broker 2, which answers every request
// after 3 s (a loaded broker); 50 records per partition, in one batch each; one split
// reads all 4 (one group member: the mock's coordinator rebalances a two-member group
// erratically, see KafkaMock::src). Clients bootstrap from broker 1, the group's
// coordinator.
// stop_when_idle = 1 s:
//   - activity = consumed records: partitions 0 and 1 are read within a second, the
//     first fetch of 2 and 3 needs several 3 s round trips, so the run stops with 100
//     (this shows the setup can fail);
//   - activity = rill::kafka_input_activity: the run waits until every partition was
//     read to its end: all 200 records, and the group commits each partition's end.
TEST(KafkaMockSlowBroker, IdleStopWaitsForPartitionsWhoseFetchesAreSlow) {
  char err[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  ASSERT_EQ(rd_kafka_conf_set(conf, "test.mock.num.brokers", "2", err, sizeof err), RD_KAFKA_CONF_OK);
  std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)> holder(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err),
                                                                   &rd_kafka_destroy);
  ASSERT_NE(holder, nullptr) << err;
  rd_kafka_mock_cluster_t* mc = rd_kafka_handle_mock_cluster(holder.get());
  ASSERT_NE(mc, nullptr);
  const std::string all = rd_kafka_mock_cluster_bootstraps(mc);
  const std::string first = all.substr(0, all.find(','));
  ASSERT_EQ(rd_kafka_mock_topic_create(mc, "in", 4, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  for (int p = 0; p < 4; ++p) ASSERT_EQ(rd_kafka_mock_partition_set_leader(mc, "in", p, p < 2 ? 1 : 2), RD_KAFKA_RESP_ERR_NO_ERROR);
  {
    std::string e;
    std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    c->set("bootstrap.servers", all, e);
    // The mock broker answers a fetch with one message set (the batch one produce request
    // appended), so each slow partition's batches cost a 3 s round trip each. A linger
    // longer than the produce loop puts each partition's 50 records into one batch, however
    // loaded the machine; flush() sends them without waiting for it.
    c->set("linger.ms", "5000", e);
    std::unique_ptr<RdKafka::Producer> prod(RdKafka::Producer::create(c.get(), e));
    for (int i = 0; i < 200; ++i) {
      const auto v = std::to_string(i);
      prod->produce("in", i % 4, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(v.data()), v.size(), nullptr, 0, 0,
                    nullptr);
    }
    ASSERT_EQ(prod->flush(10000), RdKafka::ERR_NO_ERROR);
  }
  ASSERT_EQ(rd_kafka_mock_broker_set_rtt(mc, 2, 3000), RD_KAFKA_RESP_ERR_NO_ERROR);

  auto run = [&](const std::string& group, bool behind_counts) {
    EXPECT_EQ(rd_kafka_mock_coordinator_set(mc, "group", group.c_str(), 1), RD_KAFKA_RESP_ERR_NO_ERROR);
    rill::kafka_source<> s{{.brokers = first, .group = group, .topics = {"in"}, .splits = 1,
                            .commit_interval = 200ms, .config = {{"session.timeout.ms", "6000"}}}};
    const auto st = s.stats();
    rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
    std::atomic<bool> ended{false};
    std::thread guard([&] {  // a run that never idles ends the test, not the suite
      const auto end = std::chrono::steady_clock::now() + 90s;
      while (!ended && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
      rt.request_stop();
    });
    std::function<std::uint64_t()> activity = [st] { return st->consumed.load(); };
    if (behind_counts) activity = rill::kafka_input_activity(st);
    rt.run(rill::from(std::move(s)).sink([](rec&&) {}), {.stop_when_idle = 1s, .activity = activity});
    ended = true;
    guard.join();
    return st->consumed.load();
  };
  EXPECT_EQ(run("slow-plain", false), 100u) << "the slow partitions were read before the idle stop: the test shows nothing";
  EXPECT_EQ(run("slow-behind", true), 200u);
  // committed by the group: every partition's end
  std::string e;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", first, e);
  c->set("group.id", "slow-behind", e);
  std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), e));
  std::vector<RdKafka::TopicPartition*> tps;
  for (int p = 0; p < 4; ++p) tps.push_back(RdKafka::TopicPartition::create("in", p));
  EXPECT_EQ(k->committed(tps, 30000), RdKafka::ERR_NO_ERROR);
  for (auto* tp : tps) EXPECT_EQ(tp->offset(), 50) << "partition " << tp->partition();
  RdKafka::TopicPartition::destroy(tps);
  k->close();
}

// Exactly-once backpressure (docs/design.md "Exactly-once", Backpressure). Graph:
// kafka_source(in, 1 partition, 20,000 records, exactly-once) -> map -> kafka_sink(out,
// transactional, max_pending 500), on one worker (the sink is asked before each source
// slice of 256). The mock broker answers each of the first 4 EndTxn requests (the
// transaction commits) after 2 s: the transaction thread waits in commit_transaction
// while the map goes on writing. A thread samples undelivered() (held + produced, not yet
// delivered) every millisecond. Expected: it stays within max_pending + 8 slices, far
// below the unbounded run's thousands. Seen: 768 (Release, max_pending + 1 slice as the
// design says, plus the one the check races with), 1,024-1,280 under ASan at -O0 (up to
// three slices more, not yet explained); without the bound the
// source reads on and the held outputs grow with the input (RILL_TEST_EOS_NO_BOUND=1 sets
// max_pending 0: the test then fails with some thousands). Every value reaches a
// read_committed reader once.
TEST_F(KafkaMock, ExactlyOnceBackpressureBoundsHeldOutputsWhileCommitsStall) {
  topic("in", 1);
  topic("out", 1);
  constexpr int n = 20000;
  produce("in", numbers(n), [](std::size_t) { return 0; });
  rill::kafka_source<> s{eos_src("gbp", "bp")};
  auto so = eos_out();
  so.max_pending = std::getenv("RILL_TEST_EOS_NO_BOUND") ? 0 : 500;
  auto sink = std::make_shared<rill::kafka_sink<rec>>(so, s);
  // EndTxn (Kafka protocol ApiKey 26): each of the first 4 answered after 2 s.
  ASSERT_EQ(rd_kafka_mock_broker_push_request_error_rtts(mc_, 1, 26, 4, RD_KAFKA_RESP_ERR_NO_ERROR, 2000,
                                                         RD_KAFKA_RESP_ERR_NO_ERROR, 2000, RD_KAFKA_RESP_ERR_NO_ERROR,
                                                         2000, RD_KAFKA_RESP_ERR_NO_ERROR, 2000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  std::atomic<bool> sampling{true};
  std::atomic<std::uint64_t> most{0};
  std::thread sampler([&] {
    while (sampling.load()) {
      const auto u = sink->undelivered();
      if (u > most.load()) most.store(u);
      std::this_thread::sleep_for(1ms);
    }
  });
  auto j = rill::from(std::move(s)).map([](rec&& r) { return std::move(r); }).sink(sink);
  rill::runtime rt{{.workers = 1, .pin = false}};
  std::thread stopper([&] {
    const auto end = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < end && sink->stats().delivered.load() < std::uint64_t(n))
      std::this_thread::sleep_for(5ms);
    rt.request_stop();
  });
  const auto rep = rt.run(j);
  stopper.join();
  sampling = false;
  sampler.join();
  EXPECT_TRUE(rep.errors.empty()) << rep.errors.front();
  EXPECT_FALSE(sink->failed());
  EXPECT_EQ(sink->stats().delivered.load(), std::uint64_t(n));
  std::cerr << "most undelivered while commits stalled: " << most.load() << "\n";
  EXPECT_LE(most.load(), 500u + 8 * 256u);
  // read_committed reader of out: every value once
  const auto k = committed_reader("reader-bp");
  std::vector<int> seen(n, 0);
  int total = 0;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (total < n && std::chrono::steady_clock::now() < until) {
    std::unique_ptr<RdKafka::Message> m(k->consume(100));
    if (!m || m->err()) continue;
    const int v = std::stoi(std::string(static_cast<const char*>(m->payload()), m->len()));
    ASSERT_GE(v, 0);
    ASSERT_LT(v, n);
    ++seen[std::size_t(v)];
    ++total;
  }
  k->close();
  EXPECT_EQ(total, n);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n);
}

// Exactly-once backpressure must not wait for a window (docs/design.md "Exactly-once",
// Backpressure). Graph: kafka_source(in, 1 partition, exactly-once) -> key_by(one key)
// -> tumbling 100 ms count (max delay 5 ms) -> kafka_sink(transactional, max_pending 1),
// on one worker. Record i has event time i ms, except that at each window end the two
// records i = 100k - 1 and 100k swap times: every window's result reads an offset of the
// next window, so the cut keeps every result until the input ends (the "end" record at
// 1 h). Counting those held results towards max_pending would stop the input after the
// first one and no later window could fire (a flush() on pending() alone ends the run at
// the stopper's 30 s with no result delivered). Expected: the 10 windows' counts (a
// brute-force count of the times), each once at a read_committed reader.
TEST_F(KafkaMock, ExactlyOnceBackpressureNeverWaitsForAWindow) {
  topic("in", 1);
  topic("out", 1);
  constexpr int n = 1000;
  std::vector<long long> t(n);
  for (int i = 0; i < n; ++i) t[std::size_t(i)] = i;
  for (int i = 99; i + 1 < n; i += 100) std::swap(t[std::size_t(i)], t[std::size_t(i) + 1]);
  std::map<long long, long long> want;  // window start ms -> count
  for (auto x : t) ++want[x / 100 * 100];
  std::vector<std::string> vals;
  for (auto x : t) vals.push_back(std::to_string(x));
  vals.push_back("end");
  produce("in", vals, [](std::size_t) { return 0; });
  rill::kafka_source<> s{eos_src("gbw", "bw")};
  s.event_time_from([](const rec& r) {
    return rill::event_time{std::chrono::milliseconds{r.value == "end" ? 3600000 : std::stoll(r.value)}};
  });
  auto so = eos_out();
  so.max_pending = 1;
  auto sink = std::make_shared<rill::kafka_sink<rec>>(so, s);
  auto j = rill::from(std::move(s))
               .key_by([](const rec&) { return 0; })
               .window(rill::tumbling{100ms}, {.max_delay = 5ms})
               .count()
               .map([](rill::keyed_window_result<int, std::uint64_t>&& r) {
                 rec m;
                 m.key = "k";
                 m.value = std::to_string(r.start.time_since_epoch().count() / 1000000) + " " + std::to_string(r.value);
                 return m;
               })
               .sink(sink);
  rill::runtime rt{{.workers = 1, .pin = false}};
  std::thread stopper([&] {
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < end && sink->stats().delivered.load() < want.size())
      std::this_thread::sleep_for(5ms);
    rt.request_stop();
  });
  const auto rep = rt.run(j);
  stopper.join();
  EXPECT_TRUE(rep.errors.empty()) << rep.errors.front();
  EXPECT_EQ(sink->stats().delivered.load(), want.size());
  const auto k = committed_reader("reader-bw");
  std::map<long long, long long> got;
  int results = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (results < int(want.size()) && std::chrono::steady_clock::now() < until) {
    std::unique_ptr<RdKafka::Message> m(k->consume(100));
    if (!m || m->err()) continue;
    const std::string v(static_cast<const char*>(m->payload()), m->len());
    const auto sp = v.find(' ');
    const long long start = std::stoll(v.substr(0, sp));
    EXPECT_EQ(got.count(start), 0u) << "window " << start << " twice";
    got[start] = std::stoll(v.substr(sp + 1));
    ++results;
  }
  k->close();
  EXPECT_EQ(got, want);
}

// tests/kafka/kafka_env.hpp — helpers for the integration tests on a real broker:
// broker address from RILL_KAFKA_BROKERS (set by scripts/test after `scripts/kafka start`),
// topic creation, raw librdkafka produce/consume (the independent peer), committed offsets,
// and the Java client's murmur2 partitioner written out from Kafka's Utils.murmur2.
#pragma once

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace kt {

inline std::string brokers() {
  const char* b = std::getenv("RILL_KAFKA_BROKERS");
  return b ? b : "";
}
#define RILL_NEED_BROKER()                                                              \
  do {                                                                                  \
    if (kt::brokers().empty()) GTEST_SKIP() << "RILL_KAFKA_BROKERS not set (scripts/kafka start)"; \
  } while (0)

inline std::string unique(const std::string& base) {
  static int n = 0;
  return "rill-" + base + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000000) +
         "-" + std::to_string(n++);
}

/// Creates a topic (replication 1, retention.ms=-1) and waits for it. Throws on failure.
inline void create_topic(const std::string& name, int partitions) {
  char err[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers().c_str(), err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!rk) throw std::runtime_error(err);
  rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(name.c_str(), partitions, 1, err, sizeof err);
  // No time-based retention: the tests write event times of 1970 and of old captures as
  // message timestamps, and the broker deleted such segments mid-test (NetflowKafka read
  // 93 of 543 rows: the partitions' first segments, offsets 0..80, 0..107, ..., were gone).
  rd_kafka_NewTopic_set_config(nt, "retention.ms", "-1");
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, &nt, 1, nullptr, q);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 30000);
  std::string problem;
  if (!ev) problem = "timeout";
  else {
    const auto* res = rd_kafka_event_CreateTopics_result(ev);
    size_t n = 0;
    const auto** ts = rd_kafka_CreateTopics_result_topics(res, &n);
    if (n != 1 || rd_kafka_topic_result_error(ts[0]) != RD_KAFKA_RESP_ERR_NO_ERROR)
      problem = n ? rd_kafka_topic_result_error_string(ts[0]) : "no result";
    rd_kafka_event_destroy(ev);
  }
  rd_kafka_NewTopic_destroy(nt);
  rd_kafka_queue_destroy(q);
  // wait until metadata shows every partition with a leader
  for (int i = 0; i < 100 && problem.empty(); ++i) {
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_topic_t* t = rd_kafka_topic_new(rk, name.c_str(), nullptr);
    if (rd_kafka_metadata(rk, 0, t, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 &&
        md->topics[0].partition_cnt == partitions && md->topics[0].err == 0) {
      bool ok = true;
      for (int p = 0; p < partitions; ++p) ok = ok && md->topics[0].partitions[p].leader >= 0;
      rd_kafka_metadata_destroy(md);
      rd_kafka_topic_destroy(t);
      if (ok) break;
    } else {
      if (md) rd_kafka_metadata_destroy(md);
      rd_kafka_topic_destroy(t);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  rd_kafka_destroy(rk);
  if (!problem.empty()) throw std::runtime_error("create_topic " + name + ": " + problem);
}

struct msg {
  int partition;
  long long offset;
  std::optional<std::string> key;
  std::string value;
  long long ts;
};

/// Produces with a plain librdkafka producer (partition -1 = by key, murmur2_random).
inline void produce(const std::string& topic, const std::vector<std::pair<std::string, std::string>>& kv,
                    int partition = -1) {
  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers(), err);
  c->set("partitioner", "murmur2_random", err);
  c->set("linger.ms", "5", err);
  std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), err));
  for (const auto& [k, v] : kv) {
    while (p->produce(topic, partition < 0 ? RdKafka::Topic::PARTITION_UA : partition,
                      RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(v.data()), v.size(),
                      k.data(), k.size(), 0, nullptr) == RdKafka::ERR__QUEUE_FULL)
      p->poll(10);
    p->poll(0);
  }
  if (p->flush(30000) != RdKafka::ERR_NO_ERROR) throw std::runtime_error("produce: flush timed out");
}

/// Reads every partition of `topic` from the beginning (no group). Stops when `want`
/// messages arrived, or when every partition has been read up to its end offset (high
/// watermark, asked at the call) and then `idle_ms` passed without a message (so extra
/// messages, e.g. duplicates, are still seen), or after 120 s. End offsets instead of
/// only an idle gap: a consumer on a loaded machine sometimes paused over 3 s between
/// fetches (a test read 93 of 543 messages). Independent of rill.
inline std::vector<msg> consume_all(const std::string& topic, int partitions, std::size_t want,
                                    int idle_ms = 3000) {
  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers(), err);
  c->set("isolation.level", "read_uncommitted", err);  // every message written, committed or not
  // A transaction marker takes an offset but is never delivered: a partition that ends
  // with one is at its end when the consumer says so (partition EOF).
  c->set("enable.partition.eof", "true", err);
  c->set("group.id", unique("reader"), err);
  c->set("enable.auto.commit", "false", err);
  std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), err));
  std::vector<std::int64_t> end(partitions, -1), next(partitions, 0);
  std::vector<bool> eof(partitions, false);
  for (int p = 0; p < partitions; ++p) {
    std::int64_t lo = 0, hi = 0;
    for (int attempt = 0; attempt < 5 && end[p] < 0; ++attempt)
      if (k->query_watermark_offsets(topic, p, &lo, &hi, 5000) == RdKafka::ERR_NO_ERROR) end[p] = hi;
    if (end[p] < 0) throw std::runtime_error("consume_all " + topic + ": no end offset for partition " + std::to_string(p));
  }
  std::vector<RdKafka::TopicPartition*> tps;
  for (int p = 0; p < partitions; ++p)
    tps.push_back(RdKafka::TopicPartition::create(topic, p, RdKafka::Topic::OFFSET_BEGINNING));
  k->assign(tps);
  RdKafka::TopicPartition::destroy(tps);
  std::vector<msg> out;
  auto at_end = [&] {
    for (int p = 0; p < partitions; ++p)
      if (next[p] < end[p] && !eof[p]) return false;
    return true;
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto last = std::chrono::steady_clock::now();
  while (out.size() < want && std::chrono::steady_clock::now() < give_up &&
         !(at_end() && std::chrono::steady_clock::now() - last >= std::chrono::milliseconds(idle_ms))) {
    std::unique_ptr<RdKafka::Message> m(k->consume(100));
    if (m && m->err() == RdKafka::ERR__PARTITION_EOF && m->partition() >= 0 && m->partition() < partitions)
      eof[m->partition()] = true;
    if (!m || m->err()) continue;
    last = std::chrono::steady_clock::now();
    if (m->partition() >= 0 && m->partition() < partitions) {
      next[m->partition()] = std::max<std::int64_t>(next[m->partition()], m->offset() + 1);
      eof[m->partition()] = false;
    }
    std::optional<std::string> key;
    if (m->key()) key = *m->key();
    out.push_back({m->partition(), m->offset(), key,
                   std::string(static_cast<const char*>(m->payload()), m->len()), m->timestamp().timestamp});
  }
  k->close();
  return out;
}

/// Reads every partition of `topic` from the beginning as a read_committed consumer
/// (KIP-98: messages of committed transactions only; aborted ones and transaction markers
/// are skipped). Stops once every partition reported its end (the last stable offset,
/// enable.partition.eof) and `idle_ms` passed without a message, or after 120 s. Call it
/// when no transaction on the topic is open, else it stops at the first one.
inline std::vector<msg> consume_committed(const std::string& topic, int partitions, int idle_ms = 1000) {
  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers(), err);
  c->set("group.id", unique("reader"), err);
  c->set("enable.auto.commit", "false", err);
  c->set("isolation.level", "read_committed", err);
  c->set("enable.partition.eof", "true", err);
  std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), err));
  std::vector<RdKafka::TopicPartition*> tps;
  for (int p = 0; p < partitions; ++p)
    tps.push_back(RdKafka::TopicPartition::create(topic, p, RdKafka::Topic::OFFSET_BEGINNING));
  k->assign(tps);
  RdKafka::TopicPartition::destroy(tps);
  std::vector<msg> out;
  std::vector<bool> eof(partitions, false);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto last = std::chrono::steady_clock::now();
  auto all_eof = [&] { return std::all_of(eof.begin(), eof.end(), [](bool b) { return b; }); };
  while (std::chrono::steady_clock::now() < give_up &&
         !(all_eof() && std::chrono::steady_clock::now() - last >= std::chrono::milliseconds(idle_ms))) {
    std::unique_ptr<RdKafka::Message> m(k->consume(100));
    if (!m) continue;
    if (m->err() == RdKafka::ERR__PARTITION_EOF) {
      if (m->partition() >= 0 && m->partition() < partitions) eof[m->partition()] = true;
      continue;
    }
    if (m->err()) continue;
    last = std::chrono::steady_clock::now();
    if (m->partition() >= 0 && m->partition() < partitions) eof[m->partition()] = false;
    std::optional<std::string> key;
    if (m->key()) key = *m->key();
    out.push_back({m->partition(), m->offset(), key,
                   std::string(static_cast<const char*>(m->payload()), m->len()), m->timestamp().timestamp});
  }
  k->close();
  return out;
}

/// Committed offsets of `group` for partitions 0..n-1 (-1001 = none, or no answer within
/// three attempts of 10 s).
inline std::vector<long long> committed(const std::string& group, const std::string& topic, int n) {
  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers(), err);
  c->set("group.id", group, err);
  std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), err));
  std::vector<RdKafka::TopicPartition*> tps;
  for (int p = 0; p < n; ++p) tps.push_back(RdKafka::TopicPartition::create(topic, p));
  // A loaded broker may not answer in time: asked again, up to three times.
  RdKafka::ErrorCode e = RdKafka::ERR__TIMED_OUT;
  for (int attempt = 0; attempt < 3 && e == RdKafka::ERR__TIMED_OUT; ++attempt) e = k->committed(tps, 10000);
  std::vector<long long> out;
  for (auto* tp : tps) out.push_back(tp->offset());
  RdKafka::TopicPartition::destroy(tps);
  k->close();
  return out;
}

/// Members of consumer group `group` when it is Stable (no rebalance under way), else -1
/// (also when the broker does not answer within 10 s). DescribeConsumerGroups (KIP-518's
/// admin API in librdkafka 2.0).
inline int stable_members(const std::string& group) {
  char err[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers().c_str(), err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!rk) throw std::runtime_error(err);
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  const char* groups[] = {group.c_str()};
  rd_kafka_DescribeConsumerGroups(rk, groups, 1, nullptr, q);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 10000);
  int members = -1;
  if (ev) {
    const auto* res = rd_kafka_event_DescribeConsumerGroups_result(ev);
    size_t n = 0;
    const auto** gs = res ? rd_kafka_DescribeConsumerGroups_result_groups(res, &n) : nullptr;
    if (n == 1 && !rd_kafka_ConsumerGroupDescription_error(gs[0]) &&
        rd_kafka_ConsumerGroupDescription_state(gs[0]) == RD_KAFKA_CONSUMER_GROUP_STATE_STABLE)
      members = int(rd_kafka_ConsumerGroupDescription_member_count(gs[0]));
    rd_kafka_event_destroy(ev);
  }
  rd_kafka_queue_destroy(q);
  rd_kafka_destroy(rk);
  return members;
}

/// Sum of the high watermarks (end offsets) of `topic`'s partitions 0..n-1, asked through
/// `p`; a partition the broker does not answer for within three attempts of 5 s counts 0.
inline long long end_offsets(RdKafka::Producer& p, const std::string& topic, int n) {
  long long sum = 0;
  for (int i = 0; i < n; ++i) {
    int64_t lo = 0, hi = 0;
    RdKafka::ErrorCode e = RdKafka::ERR__TIMED_OUT;
    for (int attempt = 0; attempt < 3 && e == RdKafka::ERR__TIMED_OUT; ++attempt)
      e = p.query_watermark_offsets(topic, i, &lo, &hi, 5000);
    if (e == RdKafka::ERR_NO_ERROR) sum += hi;
  }
  return sum;
}
/// A client for repeated end_offsets() polls: a poll then costs the round trips only,
/// not a client's set-up and teardown (seconds on a loaded machine).
inline std::unique_ptr<RdKafka::Producer> offsets_client() {
  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers(), err);
  return std::unique_ptr<RdKafka::Producer>(RdKafka::Producer::create(c.get(), err));
}
inline long long end_offsets(const std::string& topic, int n) { return end_offsets(*offsets_client(), topic, n); }

/// Kafka's Java Utils.murmur2 (seed 0x9747b28c), and the default partitioner's choice
/// toPositive(murmur2(key)) % partitions — written from the Java source, not librdkafka.
/// The test key of record i, "k<i>". Built by append: GCC 12 at -O3 reports a false
/// -Wrestrict inside `"k" + std::to_string(i)` (GCC bug 105651).
inline std::string key(int i) {
  std::string k = "k";
  k += std::to_string(i);
  return k;
}

inline int java_partition(const std::string& key, int partitions) {
  const auto* data = reinterpret_cast<const unsigned char*>(key.data());
  const int length = int(key.size());
  const std::uint32_t seed = 0x9747b28c, m = 0x5bd1e995;
  const int r = 24;
  std::uint32_t h = seed ^ std::uint32_t(length);
  const int length4 = length / 4;
  for (int i = 0; i < length4; i++) {
    const int i4 = i * 4;
    std::uint32_t k = (data[i4 + 0] & 0xffu) + ((data[i4 + 1] & 0xffu) << 8) +
                      ((data[i4 + 2] & 0xffu) << 16) + ((data[i4 + 3] & 0xffu) << 24);
    k *= m; k ^= k >> r; k *= m; h *= m; h ^= k;
  }
  switch (length % 4) {
    case 3: h ^= std::uint32_t(data[(length & ~3) + 2] & 0xff) << 16; [[fallthrough]];
    case 2: h ^= std::uint32_t(data[(length & ~3) + 1] & 0xff) << 8; [[fallthrough]];
    case 1: h ^= std::uint32_t(data[length & ~3] & 0xff); h *= m;
  }
  h ^= h >> 13; h *= m; h ^= h >> 15;
  return int((h & 0x7fffffffu) % std::uint32_t(partitions));
}

/// Polls `cond` every 10 ms until true or `timeout`; returns cond().
template <class F>
bool wait_for(F cond, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace kt

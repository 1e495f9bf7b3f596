// bench/kafka_bench_util.hpp — what the Kafka benchmarks (kafka_bench, kafka_eos_bench)
// share: topic setup and the 100-byte record values. Setup only, never timed.
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

namespace rill_bench {

/// Creates `name` with `partitions` partitions (replication 1) on `brokers` through the
/// admin API, waits up to 30 s for the answer and 1 s more for the leaders. Throws
/// std::runtime_error on a timeout.
inline void create_topic(const std::string& brokers, const std::string& name, int partitions) {
  char err[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers.c_str(), err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(name.c_str(), partitions, 1, err, sizeof err);
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, &nt, 1, nullptr, q);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 30000);
  if (ev) rd_kafka_event_destroy(ev);
  rd_kafka_NewTopic_destroy(nt);
  rd_kafka_queue_destroy(q);
  rd_kafka_destroy(rk);
  if (!ev) throw std::runtime_error("create_topic " + name + ": timeout");
  std::this_thread::sleep_for(std::chrono::seconds(1));
}

/// The value of record i: 100 bytes, i as 11 decimal digits, 'x', then one letter.
inline std::string value_of(int i) {
  std::string v(100, char('a' + i % 26));
  std::snprintf(v.data(), 12, "%011d", i);
  v[11] = 'x';
  return v;
}

}  // namespace rill_bench

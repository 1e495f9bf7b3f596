// kafka_source -> filter -> kafka_sink on librdkafka's in-process mock cluster
// (rdkafka_mock.h): fast, no broker. Checks the acknowledgement rule of kafka_ack.hpp:
// records dropped by the filter and records delivered by the sink both let the offset be
// committed; the committed offsets equal the input ends (1000 records, 2 partitions).
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <librdkafka/rdkafkacpp.h>

#include <thread>

#include "rill/connectors/kafka_sink.hpp"
#include "rill/connectors/kafka_source.hpp"
#include "rill/operators/stream.hpp"

using namespace std::chrono_literals;
using rec = rill::kafka_record<std::string, std::string>;

TEST(KafkaMock, FilterDropsAndSinkDeliveriesBothCommit) {
  char err[256];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  ASSERT_EQ(rd_kafka_conf_set(conf, "test.mock.num.brokers", "1", err, sizeof err), RD_KAFKA_CONF_OK);
  rd_kafka_t* holder = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  ASSERT_NE(holder, nullptr) << err;
  rd_kafka_mock_cluster_t* mc = rd_kafka_handle_mock_cluster(holder);
  ASSERT_NE(mc, nullptr);
  const std::string brokers = rd_kafka_mock_cluster_bootstraps(mc);
  ASSERT_EQ(rd_kafka_mock_topic_create(mc, "in", 2, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  ASSERT_EQ(rd_kafka_mock_topic_create(mc, "out", 2, 1), RD_KAFKA_RESP_ERR_NO_ERROR);
  long long per[2] = {0, 0};
  {
    std::string e;
    std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    c->set("bootstrap.servers", brokers, e);
    std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), e));
    for (int i = 0; i < 1000; ++i) {
      const auto v = std::to_string(i);
      p->produce("in", i % 2, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(v.data()), v.size(),
                 v.data(), v.size(), 0, nullptr);
      ++per[i % 2];
    }
    ASSERT_EQ(p->flush(10000), RdKafka::ERR_NO_ERROR);
  }
  auto sink = std::make_shared<rill::kafka_sink<rec>>(rill::kafka_sink_options{.brokers = brokers, .topic = "out"});
  rill::kafka_source<> src{{.brokers = brokers, .group = "g", .topics = {"in"}}};
  auto st = src.stats();
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  std::thread stopper([&] {
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < end &&
           !(st->consumed.load() >= 1000 && sink->stats().delivered.load() >= 500))
      std::this_thread::sleep_for(5ms);
    rt.request_stop();
  });
  rt.run(rill::from(std::move(src)).filter([](const rec& r) { return std::stoi(r.value) % 2 == 0; }).sink(sink));
  stopper.join();
  EXPECT_EQ(st->consumed.load(), 1000u);
  EXPECT_EQ(sink->stats().delivered.load(), 500u);
  EXPECT_EQ(sink->undelivered(), 0u);
  // committed offsets, read back with a plain consumer of the same group
  std::string e;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers, e);
  c->set("group.id", "g", e);
  std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), e));
  std::vector<RdKafka::TopicPartition*> tps{RdKafka::TopicPartition::create("in", 0),
                                            RdKafka::TopicPartition::create("in", 1)};
  ASSERT_EQ(k->committed(tps, 10000), RdKafka::ERR_NO_ERROR);
  EXPECT_EQ(tps[0]->offset(), per[0]);  // 500: every even value delivered, every odd dropped
  EXPECT_EQ(tps[1]->offset(), per[1]);
  RdKafka::TopicPartition::destroy(tps);
  k->close();
  k.reset();
  sink.reset();
  rd_kafka_destroy(holder);
}

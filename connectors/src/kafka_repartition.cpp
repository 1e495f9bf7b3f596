// The broker side of rill::kafka_repartition: the topic's name, its partition count, and
// its creation through the admin API (rd_kafka_CreateTopics). Runs on the thread that
// constructs the repartition, before the run; every call is bounded by a timeout.
#include "rill/connectors/kafka_repartition.hpp"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <cctype>
#include <thread>
#include <tuple>

namespace rill {

std::string repartition_topic_name(const std::string& group, const std::string& name) {
  if (group.empty() || name.empty())
    throw std::invalid_argument(
        "kafka_repartition: group and name must not be empty (topic <group>-<name>-repartition)");
  std::string t = group + "-" + name + "-repartition";
  const bool legal = t.size() <= 249 && std::all_of(t.begin(), t.end(), [](char ch) {
                       return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
                     });
  if (!legal)
    throw std::invalid_argument("kafka_repartition: '" + t +
                                "' is not a legal Kafka topic name (1-249 characters of a-z A-Z 0-9 . _ -): "
                                "choose a group and name of those characters");
  return t;
}

namespace kafka_detail {
namespace {

/// A producer handle for admin and metadata requests (no message is produced).
struct admin_handle {
  rd_kafka_t* rk = nullptr;
  admin_handle(const std::string& brokers, const std::map<std::string, std::string>& client_config) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    auto set = [&](const std::string& k, const std::string& v) {
      if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        throw std::invalid_argument("kafka_repartition: config " + k + "=" + v + ": " + err);
      }
    };
    set("bootstrap.servers", brokers);
    // A metadata request for a missing topic must not create it with the broker's
    // defaults (auto.create.topics.enable; librdkafka's producer asks for that by default).
    set("allow.auto.create.topics", "false");
    // Security and client settings the writer needs reach the admin requests too; the
    // producer-only ones (linger.ms, acks, ...) are harmless on this idle handle.
    for (const auto& [k, v] : client_config)
      if (k != "transactional.id") set(k, v);
    rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);  // owns conf on success
    if (!rk) {
      rd_kafka_conf_destroy(conf);
      throw std::runtime_error(std::string("kafka_repartition: cannot create admin client: ") + err);
    }
  }
  ~admin_handle() { rd_kafka_destroy(rk); }
  admin_handle(const admin_handle&) = delete;
  admin_handle& operator=(const admin_handle&) = delete;

  /// Partition count of `topic` and whether every partition has a leader; -1 when the
  /// broker says the topic does not exist. Throws on no answer within `timeout`.
  std::pair<std::int32_t, bool> describe(const std::string& topic, const std::string& brokers,
                                         std::chrono::milliseconds timeout) {
    rd_kafka_topic_t* t = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    const auto e = rd_kafka_metadata(rk, 0, t, &md, int(timeout.count()));
    rd_kafka_topic_destroy(t);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (md) rd_kafka_metadata_destroy(md);
      throw std::runtime_error("kafka_repartition: no broker of '" + brokers + "' answered a metadata request for '" +
                               topic + "' within " + std::to_string(timeout.count()) + " ms: " + rd_kafka_err2str(e));
    }
    std::pair<std::int32_t, bool> r{-1, false};
    if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR && md->topics[0].partition_cnt > 0) {
      r.first = md->topics[0].partition_cnt;
      r.second = std::all_of(md->topics[0].partitions, md->topics[0].partitions + md->topics[0].partition_cnt,
                             [](const rd_kafka_metadata_partition_t& p) { return p.leader >= 0; });
    }
    rd_kafka_metadata_destroy(md);
    return r;
  }
};

}  // namespace

std::int32_t partition_count(const std::string& brokers, const std::string& topic,
                             const std::map<std::string, std::string>& client_config,
                             std::chrono::milliseconds timeout) {
  admin_handle h(brokers, client_config);
  const std::int32_t n = h.describe(topic, brokers, timeout).first;
  if (n < 0)
    throw std::runtime_error("kafka_repartition: input topic '" + topic + "' does not exist on '" + brokers + "'");
  return n;
}

void ensure_topic(const std::string& brokers, const std::string& topic, std::int32_t partitions,
                  std::int16_t replication_factor, const std::map<std::string, std::string>& topic_config,
                  const std::map<std::string, std::string>& client_config, std::chrono::milliseconds timeout) {
  admin_handle h(brokers, client_config);
  std::int32_t have = -1;
  bool led = false;
  std::tie(have, led) = h.describe(topic, brokers, timeout);
  if (have < 0) {
    char err[512];
    rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(topic.c_str(), partitions, replication_factor, err, sizeof err);
    if (!nt) throw std::invalid_argument("kafka_repartition: topic '" + topic + "': " + err);
    for (const auto& [k, v] : topic_config) rd_kafka_NewTopic_set_config(nt, k.c_str(), v.c_str());
    rd_kafka_AdminOptions_t* ao = rd_kafka_AdminOptions_new(h.rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_request_timeout(ao, int(timeout.count()), err, sizeof err);
    rd_kafka_AdminOptions_set_operation_timeout(ao, int(timeout.count()), err, sizeof err);
    rd_kafka_queue_t* q = rd_kafka_queue_new(h.rk);
    rd_kafka_CreateTopics(h.rk, &nt, 1, ao, q);
    rd_kafka_event_t* ev = rd_kafka_queue_poll(q, int(timeout.count()) + 5000);
    std::string problem;
    if (!ev) {
      problem = "no answer within " + std::to_string(timeout.count()) + " ms";
    } else {
      const auto* res = rd_kafka_event_CreateTopics_result(ev);
      std::size_t n = 0;
      const rd_kafka_topic_result_t** ts = res ? rd_kafka_CreateTopics_result_topics(res, &n) : nullptr;
      if (!res) problem = rd_kafka_event_error_string(ev) ? rd_kafka_event_error_string(ev) : "no result";
      else if (n != 1) problem = "no result";
      else if (const auto e = rd_kafka_topic_result_error(ts[0]);
               e != RD_KAFKA_RESP_ERR_NO_ERROR && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
        problem = rd_kafka_topic_result_error_string(ts[0]) ? rd_kafka_topic_result_error_string(ts[0])
                                                             : rd_kafka_err2str(e);
      rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(q);
    rd_kafka_AdminOptions_destroy(ao);
    rd_kafka_NewTopic_destroy(nt);
    if (!problem.empty())
      throw std::runtime_error("kafka_repartition: cannot create topic '" + topic + "': " + problem);
    have = -1;
  }
  // Until the metadata shows the topic with a leader for every partition (a topic just
  // created, here or by another process of the group, takes a moment).
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (have < 0 || !led) {
    std::tie(have, led) = h.describe(topic, brokers, timeout);
    if (have >= 0 && led) break;
    if (std::chrono::steady_clock::now() > give_up)
      throw std::runtime_error("kafka_repartition: topic '" + topic + "' has no leader for every partition after " +
                               std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (have != partitions)
    throw std::runtime_error("kafka_repartition: topic '" + topic + "' exists with " + std::to_string(have) +
                             " partitions, not " + std::to_string(partitions) +
                             " (a changed partition count moves keys between processes: delete the topic, or set "
                             "partitions to its count)");
}

}  // namespace kafka_detail
}  // namespace rill

// rill/connectors/kafka_repartition.hpp — key_by across the processes of a consumer group,
// through a Kafka repartition topic.
//
// Defines:
//   rill::kafka_repartition_options  name, partitions, replication and config of the topic;
//                                    the producer's and the consumer's own options
//   rill::kafka_repartition<T>       creates the topic, and turns a stream<T> into a keyed
//                                    stream whose every key lives in exactly one process
//   rill::repartition_topic_name     "<group>-<name>-repartition" (Kafka Streams' naming)
//
// Example (processes started with the same group and their own instance ids count clicks
// per user although the input topic is partitioned by session; the message value is the
// user id; compiled by tests/banner_examples.py):
//   #include <rill/connectors/kafka_sink.hpp>
//   rill::kafka_source_options in{.brokers = "127.0.0.1:19092", .group = "g", .topics = {"clicks"}};
//   rill::kafka_source<> src{in};
//   rill::kafka_repartition<std::string> rp{{.name = "by-user"}, src};  // topic g-by-user-repartition
//   auto out = std::make_shared<rill::kafka_sink<rill::kafka_record<>>>(
//       rill::kafka_sink_options{.brokers = "127.0.0.1:19092", .topic = "counts"});
//   auto user = [](rill::kafka_record<>&& r) { return std::move(r.value); };
//   rill::job j = rp.key_by(rill::from(std::move(src)).map(user), [](const std::string& u) { return u; })
//                     .window(rill::tumbling{1s}, {.max_delay = 5s})  // covers the writers' skew
//                     .count()
//                     .map([](rill::keyed_window_result<std::string, std::uint64_t>&& c) {
//                       rill::kafka_record<> m;
//                       m.key = c.key;
//                       m.value = std::to_string(c.value);
//                       return m;
//                     })
//                     .sink(out);
//
// What it does (docs/design.md "Repartition through Kafka"):
//   - Two halves, each an existing source/sink pair. Writer: the stream's records, each as
//     a message keyed by key_text(key(value)) with value serialise(value) and timestamp the
//     record's event time (ms), go through a kafka_sink into the topic; Kafka's default
//     partitioner picks the partition, toPositive(murmur2(key bytes)) % partitions (the
//     Java client's; librdkafka's murmur2_random). Reader: a kafka_source of the topic in
//     consumer group `<topic>` (the topic's own name), value deserialise(bytes), event time
//     the message timestamp; then key_by(key) routes inside the process as usual. A key
//     maps to one partition, a partition to one consumer of the group, so every key lives
//     in exactly one process.
//   - Topic: "<group>-<name>-repartition", created by the constructor if missing
//     (CreateTopics) with `partitions` (0: the input topic's count), replication_factor,
//     and topic_config (default retention.ms=-1: the records' event times are their
//     timestamps, so time retention could delete them unread). An existing topic with a
//     different partition count is an error (as Kafka Streams'). Records are not purged.
//   - Guarantees: those of the input source (kafka_source_options::guarantee). at_least_once:
//     each hop commits its input offsets after the next hop acknowledged; duplicates after
//     a crash, no loss. exactly_once: the writer is a transactional kafka_sink linked to
//     the input source (transactional.id "<group>-<instance_id>"), the reader reads with
//     read_committed and its offsets are committed by the job's final kafka_sink, which
//     must be constructed with source() (transactional.id "<topic>-<instance_id>"). The
//     input source then cannot have another exactly-once sink. A repartition partition
//     interleaves the writers, so a result is committed once the windows of the records
//     interleaved with its own fired too (docs/design.md "Exactly-once", the cut).
//   - Event time: milliseconds through the topic (Kafka timestamps); an event time below
//     1 ms after the epoch is stamped with the produce time instead (librdkafka's 0).
//     The reader's watermark is per partition, and each partition mixes the records of
//     every writing process: the window after the repartition needs a max_delay of at
//     least the event-time lag of the slowest writer behind the others (a restarted
//     process catching up, too); later records are late (counted, late side output).
//
// Costs: one more produce, broker round trip and consume per record, and the serialised
// record on the broker's disk; exactly-once adds up to one commit interval of latency per
// hop (the writer's transaction must commit before the reader sees it).
//
// Thread safety: build-time object. Construct it on the thread that builds the job, before
// runtime::run (the constructor blocks on the broker: metadata, CreateTopics, and in
// exactly-once mode init_transactions). source() and topic() from any thread.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "rill/connectors/kafka_sink.hpp"
#include "rill/connectors/kafka_source.hpp"
#include "rill/operators/stream.hpp"

namespace rill {

struct kafka_repartition_options {
  /// The operator's name (required): names the topic "<group>-<name>-repartition", the
  /// reader's consumer group (the topic's name) and the two stages in the run report.
  std::string name{};
  /// Partitions of the topic; 0 = the input source's first named topic's count.
  std::int32_t partitions = 0;
  /// Replication factor of a topic the constructor creates (1: a test broker; 3 in
  /// production, as Kafka Streams' replication.factor advice).
  std::int16_t replication_factor = 1;
  /// Topic configuration of a topic the constructor creates (Kafka's topic configs).
  std::map<std::string, std::string> topic_config{{"retention.ms", "-1"}};
  /// Bound on each broker request of the constructor (metadata, CreateTopics, the wait
  /// for the new topic's leaders). Expired: std::runtime_error naming the broker.
  std::chrono::milliseconds start_timeout{30000};
  /// The writer's producer. brokers, topic, guarantee and timestamps (event_time) are
  /// set by the repartition; transactional_id too unless given. The rest is yours.
  /// writer.config (but transactional.id) also configures the constructor's admin client:
  /// put the cluster's security settings there.
  kafka_sink_options writer{};
  /// The reader's consumer. brokers, group (the topic's name), topics, guarantee,
  /// offset_reset ("earliest": the group's first run reads what was written before it
  /// joined) are set by the repartition; instance_id too unless given (else the input
  /// source's). The rest (splits, commit_interval, idle_partition_timeout, config) is yours.
  kafka_source_options reader{};
};

/// "<group>-<name>-repartition", as Kafka Streams' "<application.id>-<name>-repartition".
/// Throws std::invalid_argument naming it when the result is not a legal topic name
/// (1-249 characters of a-z A-Z 0-9 . _ -) or group or name is empty. Any thread.
std::string repartition_topic_name(const std::string& group, const std::string& name);

namespace kafka_detail {

/// Partitions of `topic` on `brokers`; throws std::runtime_error when no broker answers
/// within `timeout` or the topic does not exist. Blocks (one metadata request).
std::int32_t partition_count(const std::string& brokers, const std::string& topic,
                             const std::map<std::string, std::string>& client_config,
                             std::chrono::milliseconds timeout);

/// Creates `topic` with `partitions` unless it exists, and waits until every partition has
/// a leader. Another process creating it at the same time is fine (TOPIC_ALREADY_EXISTS).
/// Throws std::runtime_error when it exists with another partition count, when the broker
/// refuses, or after `timeout` per request. Blocks.
void ensure_topic(const std::string& brokers, const std::string& topic, std::int32_t partitions,
                  std::int16_t replication_factor, const std::map<std::string, std::string>& topic_config,
                  const std::map<std::string, std::string>& client_config, std::chrono::milliseconds timeout);

/// The message key of a key: the string itself, or std::to_string of an integer.
struct default_key_text {
  template <class K>
  std::string operator()(const K& k) const {
    if constexpr (std::is_convertible_v<const K&, std::string_view>)
      return std::string(std::string_view(k));
    else {
      static_assert(std::is_integral_v<K>,
                    "rill::kafka_repartition::key_by(stream, key): a key that is not a string or an "
                    "integer needs key_by(stream, key, key_text) with std::string key_text(const K&)");
      return std::to_string(k);
    }
  }
};

}  // namespace kafka_detail

/// T: the records' value type, default constructible (the reader's kafka_record<std::string,
/// T> holds one) and move constructible.
template <class T>
class kafka_repartition {
 public:
  using serialiser = std::function<std::string(const T&)>;
  using deserialiser = std::function<T(std::string_view)>;
  /// The reader: what an exactly-once job's final kafka_sink is constructed with.
  using source_type = kafka_source<std::string, T>;
  using writer_type = kafka_sink<kafka_record<std::string, std::string>>;

  /// The repartition of a stream that starts at `input`: brokers, group, guarantee and
  /// instance id come from input.options(). Blocks: a metadata request (partitions = 0),
  /// CreateTopics when the topic is missing, and in exactly-once mode the writer's
  /// init_transactions (construct it before runtime::run, like every kafka_sink).
  /// serialise/deserialise may be omitted for T = std::string. Throws
  /// std::invalid_argument for a missing name or codec, partitions < 0 or an illegal topic name,
  /// std::runtime_error for the broker's refusals and timeouts (naming the topic), and
  /// what kafka_sink(options, source) throws (exactly-once: input already has a sink).
  template <class K, class V>
  kafka_repartition(kafka_repartition_options o, const kafka_source<K, V>& input, serialiser s = nullptr,
                    deserialiser d = nullptr)
      : o_(std::move(o)), ser_(std::move(s)) {
    const auto& in = input.options();
    if (o_.partitions == 0) {
      for (const auto& t : in.topics)
        if (!t.empty() && t[0] != '^') {
          o_.partitions = kafka_detail::partition_count(in.brokers, t, o_.writer.config, o_.start_timeout);
          break;
        }
      if (o_.partitions == 0)
        throw std::invalid_argument("kafka_repartition " + o_.name +
                                    ": partitions = 0 and the input source has no named topic to take the count from");
    }
    if (o_.partitions < 0)
      throw std::invalid_argument("kafka_repartition " + o_.name + ": partitions must be >= 0");
    if (o_.reader.instance_id.empty()) o_.reader.instance_id = in.instance_id;
    init(in.brokers, in.group, in.guarantee, std::move(d));
    writer_ = in.guarantee == processing_guarantee::exactly_once ? std::make_shared<writer_type>(o_.writer, input)
                                                                  : std::make_shared<writer_type>(o_.writer);
  }

  /// The repartition of a stream that does not start at a kafka_source (at-least-once
  /// only): brokers and group from options().reader (its group names the topic), and
  /// options().partitions > 0. Throws as the other constructor, and std::invalid_argument
  /// for exactly_once (the writer's transactions need the input source).
  kafka_repartition(kafka_repartition_options o, serialiser s, deserialiser d) : o_(std::move(o)), ser_(std::move(s)) {
    if (o_.reader.guarantee == processing_guarantee::exactly_once)
      throw std::invalid_argument("kafka_repartition " + o_.name +
                                  ": exactly_once needs the input kafka_source "
                                  "(kafka_repartition(options, source, ...))");
    if (o_.partitions <= 0)
      throw std::invalid_argument("kafka_repartition " + o_.name + ": partitions must be > 0 without an input source");
    init(o_.reader.brokers, o_.reader.group, processing_guarantee::at_least_once, std::move(d));
    writer_ = std::make_shared<writer_type>(o_.writer);
  }

  /// Event time of a record read back, from its value, instead of the message timestamp
  /// (ms): for nanosecond event times, or times before 1970-01-01T00:00:00.001. Call it
  /// before key_by (which copies the reader into the job). Build time only.
  kafka_repartition& event_time_from(std::function<event_time(const T&)> f) {
    src_->event_time_from([f = std::move(f)](const kafka_record<std::string, T>& r) { return f(r.value); });
    return *this;
  }

  /// The topic's name, "<group>-<name>-repartition"; also the reader's consumer group.
  const std::string& topic() const noexcept { return topic_; }
  std::int32_t partitions() const noexcept { return o_.partitions; }
  /// The reader. Exactly-once: construct the job's final sink as
  /// kafka_sink(options, rp.source()) (its transactions commit the reader's offsets).
  const source_type& source() const noexcept { return *src_; }
  /// The writer (the kafka_sink into the topic): stats(), undelivered(), errors(),
  /// failed(), as kafka_sink documents them. Any thread.
  const writer_type& writer() const noexcept { return *writer_; }

  /// `in`.key_by(key) across processes: returns the keyed stream of the reader, routed
  /// inside the process by key as stream::key_by does. The message key is key_text(key(v))
  /// (a string key as is, an integer by std::to_string; another K needs the three-argument
  /// form); equal keys must give equal text. KeyFn: K key(const T&). The returned stream,
  /// when built into a job, builds `in` ending in the writer as well: one job, one run.
  /// Call it once per kafka_repartition.
  template <class P, class KeyFn, class KeyText = kafka_detail::default_key_text>
  auto key_by(stream<T, P>&& in, KeyFn key, KeyText key_text = {}) const {
    static_assert(std::is_invocable_v<KeyFn&, const T&>,
                  "rill::kafka_repartition<T>::key_by(stream, key): accepted signature is K key(const T&)");
    using K = std::remove_cvref_t<std::invoke_result_t<KeyFn&, const T&>>;
    static_assert(std::is_invocable_r_v<std::string, KeyText&, const K&>,
                  "rill::kafka_repartition<T>::key_by(stream, key, key_text): accepted is std::string "
                  "key_text(const K&)");
    const job upstream =
        std::move(in)
            .map(
                [key, key_text, ser = ser_](const T& v) {
                  kafka_record<std::string, std::string> m;
                  m.key = key_text(key(v));
                  m.value = ser(v);
                  return m;
                },
                o_.name + ".write")
            .sink(writer_, o_.name);
    auto read = from(source_type(*src_), o_.name)
                    .map([](kafka_record<std::string, T>&& r) { return std::move(r.value); }, o_.name + ".read");
    stream<T, acked> both([upstream, inner = read.attach()](job_builder& b, stage_factory<T, acked> down) {
      upstream.build(b);
      inner(b, std::move(down));
    });
    return std::move(both).key_by(std::move(key));
  }

 private:
  void init(const std::string& brokers, const std::string& group, processing_guarantee g, deserialiser d) {
    if (o_.name.empty()) throw std::invalid_argument("kafka_repartition: name is empty");
    topic_ = repartition_topic_name(group, o_.name);
    if constexpr (std::is_same_v<T, std::string>) {
      if (!ser_) ser_ = [](const std::string& v) { return v; };
      if (!d) d = [](std::string_view v) { return std::string(v); };
    }
    if (!ser_ || !d)
      throw std::invalid_argument("kafka_repartition " + o_.name + ": serialiser or deserialiser missing");
    kafka_detail::ensure_topic(brokers, topic_, o_.partitions, o_.replication_factor, o_.topic_config,
                               o_.writer.config, o_.start_timeout);
    o_.writer.brokers = brokers;
    o_.writer.topic = topic_;
    o_.writer.guarantee = g;
    o_.writer.timestamps = kafka_sink_options::timestamp_source::event_time;
    o_.reader.brokers = brokers;
    o_.reader.group = topic_;
    o_.reader.topics = {topic_};
    o_.reader.guarantee = g;
    o_.reader.offset_reset = "earliest";
    src_ = std::make_shared<source_type>(o_.reader, nullptr, std::move(d));
  }

  kafka_repartition_options o_;
  serialiser ser_;
  std::string topic_;
  std::shared_ptr<source_type> src_;   ///< copied into the job by key_by (a copy shares its state)
  std::shared_ptr<writer_type> writer_;
};

}  // namespace rill

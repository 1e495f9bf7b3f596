// rill/connectors/kafka_source.hpp — read Kafka topics with consumer-group scaling and
// at-least-once offset commits.
//
// Defines:
//   rill::processing_guarantee   at_least_once (default) or exactly_once
//   rill::kafka_source_options   brokers, group, topics, commit interval, timeouts
//   rill::kafka_record<K, V>     one message: key, value, topic, partition, offset, timestamp
//   rill::kafka_topic            a record's topic name: interned, copied as a pointer
//   rill::kafka_bad_message      what the error side output receives for an undecodable one
//   rill::kafka_source_stats     counters and the commit latency (read from any thread)
//   rill::kafka_partition_lag    consumer lag of one partition (kafka_source::lag())
//   rill::kafka_input_activity   run_options::activity for stop_when_idle on a Kafka input
//   rill::kafka_source<K, V>     a rill::source_of<kafka_record<K, V>>, one split per worker;
//                                its stream is rill::from(src) (core's source_driver)
//
// Example (topic -> filter -> topic; compiled by tests/banner_examples.py):
//   #include <rill/connectors/kafka_sink.hpp>
//   rill::kafka_source_options in;
//   in.brokers = "127.0.0.1:19092";
//   in.group = "g";
//   in.topics = {"in"};
//   rill::kafka_source<> src{in};
//   src.on_error([](const rill::kafka_bad_message& m) { std::cerr << m.what << '\n'; });
//   rill::kafka_sink_options out_opts;
//   out_opts.brokers = "127.0.0.1:19092";
//   out_opts.topic = "out";
//   auto out = std::make_shared<rill::kafka_sink<rill::kafka_record<>>>(out_opts);
//   auto keep = [](const rill::kafka_record<>& r) { return !r.value.empty(); };
//   rill::runtime rt{{.workers = 2, .handle_signals = true}};
//   rt.run(rill::from(std::move(src)).filter(keep).sink(out));   // until SIGTERM
//
// Rules (the reasons are in docs/design.md "Kafka source"):
//   - Group: each split is one librdkafka KafkaConsumer in `group`; Kafka spreads the
//     partitions over splits and processes (scale-out = start more processes).
//     `cooperative` selects the cooperative-sticky assignor (incremental rebalances).
//   - Polling: consume(0) on the worker loop, never blocking. Under backpressure the
//     split stops consuming; blocked for pause_after or longer, it pauses its partitions
//     and keeps calling consume(0) (the member is not evicted by max.poll.interval.ms and
//     rebalances are served), then resumes exactly the partitions it paused; a
//     partition revoked while paused is resumed as it leaves.
//   - Start: no split emits a record until every split of the source in this process had
//     its first assignment, or start_timeout passed; meanwhile they serve the group.
//   - Event time: the message timestamp (ms, CreateTime or LogAppendTime), or
//     event_time_from(f). record.position = {pid, offset}: pid is the Kafka partition
//     for the source's first topic; topic number n (in first-seen order) adds n << 16.
//   - Per-partition watermarks: a split's progress is rill::partition_progress over the
//     partitions it holds (core/watermark.hpp), with idle_partition_timeout; a record's
//     own time does not advance progress (rill::advances_progress).
//   - At-least-once (record.hpp's ack tokens): auto commit and auto offset store are off.
//     An offset is done when the last record derived from it is gone (filter drop, sink
//     done, Kafka delivery report); a partition's committed offset is the lowest offset
//     not done. A failed delivery (ack->fail()) is never done (stats().held): the message
//     is redelivered after a restart. Commits: every commit_interval (async), on revoke
//     (sync, before the partitions are given up), and at the end (after waiting up to
//     drain_timeout for what is in flight downstream: async, its confirmation awaited
//     for at most drain_timeout more). A refused commit is sent again by the next one;
//     the final one every 500 ms. A final commit still not confirmed then (e.g. 'Waiting
//     for coordinator' throughout, or "no reply" while librdkafka retries a refused
//     request itself) is an error of the run (run_report errors) naming each assigned
//     partition left behind: nothing is lost, a restart reads those records again. The
//     close that follows sends no further commit, so shutdown blocks for at most about
//     twice drain_timeout plus the group leave.
//   - Exactly-once (guarantee = exactly_once; docs/design.md "Exactly-once"): the source
//     reads with isolation.level=read_committed and commits nothing itself; the
//     kafka_sink constructed with it (kafka_sink(options, source)) commits its offsets
//     inside its transactions. open() throws std::invalid_argument without such a sink.
//     A partition revoked or lost after records were read from it past its last
//     transactional commit ends the split with poll_status::error naming it (restart the
//     process: it replays from the committed offsets); so does a failed transaction.
//   - Eager rebalance: a revoked partition that the next assignment hands straight back
//     to the same split, with the broker's committed offset still the one this split
//     last had confirmed, keeps its in-flight records (one OffsetFetch, up to 5 s, on the
//     worker). Any other partition starts from the committed offset: duplicates, never
//     losses.
//   - Bad messages: a deserialiser that throws sends the message to the error side output
//     (topic, partition, offset, reason), counts it in stats().bad, and its offset is done.
//   - Errors: open() throws std::runtime_error naming the brokers when no broker answers
//     a metadata request within start_timeout, naming the topic when a named topic has an
//     illegal name or (require_topics) does not exist. Later broker errors are retried by
//     librdkafka and counted in stats().transient_errors; fatal ones end the split with
//     poll_status::error (message in report.errors).
//   - Metrics (rill::metrics_provider; docs/design.md "Metrics"): on the metrics endpoint
//     rill_kafka_consumer_records_lag{operator,topic,partition} (Kafka's consumer
//     records-lag: the partition's high watermark as of the last fetch response minus the
//     split's position; summed over partitions it is Flink KafkaSource's pendingRecords),
//     rill_kafka_consumer_commit_latency_seconds{operator} (a summary of offset-commit
//     round trips, Kafka's commit-latency-avg/max) and
//     rill_kafka_consumer_assigned_partitions{operator}. The lag is read when scraped, from
//     librdkafka's own bookkeeping (rd_kafka_position, rd_kafka_get_watermark_offsets:
//     local reads under a partition lock, no broker request): nothing is added to the
//     data path, and the statistics JSON (statistics.interval.ms: the whole client's
//     state serialised every interval and parsed on the worker) is not needed.
//
// Thread safety: a reader (split) lives on one worker. stats() and lag() from any thread
// (lag() takes each split's view mutex, never held across a blocking call).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rill/core/metrics.hpp"
#include "rill/core/record.hpp"
#include "rill/core/source.hpp"
#include "rill/core/stage.hpp"
#include "rill/operators/stream.hpp"

namespace rill {

/// What a Kafka source -> ... -> Kafka sink job guarantees about its output after a crash
/// (docs/design.md "Kafka" and "Exactly-once"; Kafka Streams' processing.guarantee).
///   at_least_once: every input's outputs reach the output topic at least once; after a
///     crash or rebalance some are written again (duplicates). The default.
///   exactly_once: the sink writes the outputs and commits the input offsets they account
///     for in one Kafka transaction (KIP-98, KIP-447); a read_committed consumer of the
///     output sees each result once, across crashes. Costs up to one commit_interval of
///     latency. Needs a kafka_sink constructed with the source
///     (kafka_sink(options, source)).
enum class processing_guarantee { at_least_once, exactly_once };

struct kafka_source_options {
  std::string brokers{};               ///< bootstrap.servers, "host:port,..."
  std::string group{};                 ///< group.id (required)
  std::vector<std::string> topics{};   ///< names; an entry starting with '^' is a regex
  std::size_t splits = 0;              ///< consumers in this process; 0 = one per worker
  std::chrono::milliseconds commit_interval{5000};  ///< periodic async commit
  std::chrono::milliseconds start_timeout{10000};   ///< broker must answer metadata by then
  std::chrono::milliseconds drain_timeout{30000};   ///< end: wait for in-flight acks
  /// Backpressure lasting this long pauses the partitions (shorter: consumption waits; a
  /// rebalance or periodic commit waits at most this long while blocked).
  std::chrono::milliseconds pause_after{1000};
  /// Per-partition watermarks: a held partition that delivers no record for this long
  /// (while the split is not blocked by backpressure) stops holding the split's progress
  /// back, like Flink's WatermarkStrategy::withIdleness; it counts again from its next
  /// record. 0 = a partition never goes idle (an empty or finished partition then stops
  /// windows from firing until the end of the stream).
  std::chrono::milliseconds idle_partition_timeout{10000};
  /// Every named topic (not a '^' pattern) must exist when the source starts, else the
  /// constructor throws std::runtime_error naming it (as Kafka Streams' missing source topic
  /// error). false: wait for it to be created. An illegal name always throws.
  bool require_topics = true;
  std::string offset_reset = "earliest";            ///< auto.offset.reset without commit
  bool cooperative = false;            ///< partition.assignment.strategy=cooperative-sticky
  /// Static membership (KIP-345): non-empty = group.instance.id "<instance_id>-<split>".
  /// A process restarted with the same id within the session timeout gets its partitions
  /// back without a rebalance; a second live process with the same id fences the first
  /// (FENCED_INSTANCE_ID). Give each process of a group its own id.
  std::string instance_id{};
  /// at_least_once (default): the source commits offsets itself (commit_interval).
  /// exactly_once: isolation.level=read_committed, the source commits nothing itself;
  /// the linked transactional kafka_sink commits its offsets (docs/design.md
  /// "Exactly-once"). A partition revoked while records read from it are not yet
  /// committed ends the run with an error (the in-memory state that holds them cannot be
  /// handed over): restart the process, it replays from the committed offsets.
  processing_guarantee guarantee = processing_guarantee::at_least_once;
  /// Extra librdkafka properties, applied after rill's own (so they win): rill sets
  /// queued.min.messages=1000000 (a deeper prefetch: bench/RESULTS.md "kafka") and
  /// enable.auto.commit / enable.auto.offset.store = false (turning those on breaks the
  /// at-least-once guarantee).
  std::map<std::string, std::string> config{};
};

/// A topic name as a kafka_record carries it: a pointer to the name in a process-wide
/// table of interned names (a name, once interned, lives until the process exits; a
/// process sees few distinct topics). Copying it costs no allocation, where a
/// std::string of a name over 15 bytes allocated per record. Reads as a std::string
/// (str(), implicit const std::string&) or std::string_view; compares with strings.
/// Constructing one from a name takes a mutex (the source does so once per topic change).
class kafka_topic {
 public:
  kafka_topic() noexcept = default;  ///< ""
  kafka_topic(std::string_view name) : s_(intern(name)) {}  // NOLINT: implicit, like std::string
  kafka_topic(const std::string& name) : s_(intern(name)) {}  // NOLINT
  kafka_topic(const char* name) : s_(intern(name)) {}  // NOLINT
  const std::string& str() const noexcept { return s_ ? *s_ : none(); }
  operator const std::string&() const noexcept { return str(); }  // NOLINT
  std::string_view view() const noexcept { return str(); }
  const char* c_str() const noexcept { return str().c_str(); }
  const char* data() const noexcept { return str().data(); }
  std::size_t size() const noexcept { return str().size(); }
  bool empty() const noexcept { return str().empty(); }
  friend bool operator==(const kafka_topic& a, const kafka_topic& b) noexcept { return a.str() == b.str(); }
  friend bool operator==(const kafka_topic& a, const std::string& b) noexcept { return a.str() == b; }
  friend bool operator==(const kafka_topic& a, std::string_view b) noexcept { return a.view() == b; }
  friend bool operator==(const kafka_topic& a, const char* b) noexcept { return a.view() == b; }
  friend std::ostream& operator<<(std::ostream& os, const kafka_topic& t) { return os << t.str(); }

 private:
  static const std::string& none() noexcept {
    static const std::string e;
    return e;
  }
  /// The table's copy of `name` (added on first use). Any thread (a mutex).
  static const std::string* intern(std::string_view name);
  const std::string* s_ = nullptr;  ///< null: ""
};

template <class K = std::string, class V = std::string>
struct kafka_record {
  K key{};
  V value{};
  kafka_topic topic;  ///< interned: copying a record copies a pointer
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  std::int64_t timestamp_ms = -1;      ///< -1 when the message has none
};

/// What the error side output receives. `key`/`value`: the raw bytes.
struct kafka_bad_message {
  std::string topic;
  std::int32_t partition = -1;
  std::int64_t offset = -1;
  std::string what;                    ///< "key: <exception text>" or "value: <...>"
  std::string key, value;
};

/// Consumer lag of one assigned partition, as Kafka's consumer metric records-lag: the
/// high watermark of the partition's last fetch response minus the position (the offset
/// after the last message the split took from librdkafka; a paused split's few
/// keep-alive messages count as taken). Not listed until both are known (the first fetch
/// response, the first message taken); a partition no fetch has reached since the
/// producer wrote more shows the lag as of that fetch, as Kafka's does.
struct kafka_partition_lag {
  std::string topic;
  std::int32_t partition = -1;
  std::int64_t position = -1;        ///< next offset the split reads
  std::int64_t high_watermark = -1;  ///< offset after the last fully replicated message
  std::int64_t lag = 0;              ///< high_watermark - position, records (>= 0)
};

/// Counters of one source (all splits). Relaxed atomics: read from any thread.
struct kafka_source_stats {
  std::atomic<std::uint64_t> consumed{0};   ///< messages emitted into the pipeline
  std::atomic<std::uint64_t> bad{0};        ///< sent to the error side output
  std::atomic<std::uint64_t> commits{0};    ///< successful commit requests
  std::atomic<std::uint64_t> commit_errors{0};
  std::atomic<std::uint64_t> transient_errors{0};  ///< librdkafka error events
  std::atomic<std::uint64_t> assigned{0};   ///< partitions currently assigned (all splits)
  std::atomic<std::uint64_t> rebalances{0}; ///< assign + revoke callbacks
  std::atomic<std::uint64_t> pauses{0};     ///< backpressure pauses
  std::atomic<std::uint64_t> held{0};       ///< acks that came back failed (not committed past)
  /// Assigned partitions (all splits) not read to their end: one counts from its
  /// assignment and from every message its split takes, until the split takes the
  /// partition EOF librdkafka delivers after the last message of the broker's end as of
  /// that fetch (enable.partition.eof, which the source sets; a user config that turns
  /// it off leaves every partition counted). 0 with partitions assigned: everything
  /// written so far was read. A run's stop_when_idle can wait for 0 (netflow's
  /// --idle-exit): a split whose first fetch is slow to come is not idle.
  std::atomic<std::uint64_t> partitions_behind{0};
  /// Offset-commit round trips, ns: a synchronous commit from the call to its return, an
  /// asynchronous one from the request to its offset_commit_cb (served on the worker).
  /// Failed commits are included (Kafka's commit-latency counts every commit request).
  histogram commit_latency;
};

/// An activity counter for run_options::activity (core/run_control.hpp): the source's
/// consumed and bad messages, plus, once the first of them came, one more at every
/// sample while some assigned partition is behind (kafka_source_stats::partitions_behind).
/// With it, stop_when_idle = D stops once every assigned partition was read to its end
/// and D passed without a new message: a split whose first fetch comes seconds after the
/// other split read all of its partitions (a loaded broker) is input still to come, not
/// idleness. Until the first message the counter stays 0, so first_record_grace applies
/// (a rebalance between the first assignment and the first fetch leaves nothing
/// assigned, and so nothing behind, for a while).
///   rt.run(job, {.stop_when_idle = 3s, .activity = rill::kafka_input_activity(src.stats())});
/// Called on the runtime's control thread only (the counter of "behind" samples is not
/// shared); reads relaxed atomics, never blocks.
inline std::function<std::uint64_t()> kafka_input_activity(std::shared_ptr<kafka_source_stats> st) {
  return [st = std::move(st), behind_samples = std::uint64_t{0}]() mutable {
    const auto read = st->consumed.load(std::memory_order_relaxed) + st->bad.load(std::memory_order_relaxed);
    if (read > 0 && st->partitions_behind.load(std::memory_order_relaxed) > 0) ++behind_samples;
    return read + behind_samples;
  };
}

namespace kafka_detail {

/// A raw message as the split core hands it to the typed reader.
struct message_view {
  std::string_view topic, key, value;
  kafka_topic topic_name;  ///< the same name, interned (kafka_record::topic)
  bool has_key = false;
  std::int32_t partition = -1, pid = -1;
  std::int64_t offset = -1, timestamp_ms = -1;
};

struct topic_table;
struct txn_link;
/// The exactly-once link of a source (null for at_least_once); see kafka_common.hpp.
std::shared_ptr<txn_link> make_txn_link();
/// Shared by the splits of one source (mutex inside): topic name <-> number table, and
/// the group leave: no split closes its consumer (leaving the group, which revokes the
/// others' partitions) before every split of the source made its final commit.
std::shared_ptr<topic_table> make_topic_table();
/// Lag of every partition the splits of `t` hold (kafka_source::lag()). Any thread.
std::vector<kafka_partition_lag> lag_of(topic_table& t);

/// One consumer of the group (implemented in kafka_source.cpp, no librdkafka types here).
/// Every method on the split's worker.
class split_core {
 public:
  split_core(const kafka_source_options& o, std::shared_ptr<topic_table> topics,
             std::shared_ptr<kafka_source_stats> stats,
             std::function<void(const kafka_bad_message&)> on_bad, std::size_t index,
             std::shared_ptr<txn_link> link = nullptr);
  ~split_core();
  split_core(const split_core&) = delete;
  split_core& operator=(const split_core&) = delete;

  /// Drains acks and commits when commit_interval passed. Returns false after a fatal error.
  bool service();
  /// Next message (stash first, then consume(0)); false = nothing now. Valid until next().
  bool next(message_view& m);
  /// Registers the current message's offset as open and returns its ack token.
  std::shared_ptr<ack_token> track(const message_view& m);
  /// Adds the messages track() registered since the last call to stats().consumed (once
  /// per poll batch rather than an atomic add per record). Also done by shutdown().
  void publish() noexcept;
  /// Drains acks; true when no emitted offset of an assigned partition is still open.
  bool settled();
  /// Sends the current message to the error side output; its offset is done.
  void bad(const message_view& m, std::string what);
  void pause_all();
  void resume_paused();
  bool paused() const noexcept;
  /// Keeps the membership alive while paused: consume(0), stashing what arrives.
  void keepalive();
  /// Start gate: true once every split of this source in this process has had its first
  /// assignment (possibly empty), or start_timeout after this split was created; then
  /// true for good. Until then the driver only serves the group (keepalive()). Owning
  /// worker only (takes the source's table mutex until the gate opens).
  bool started();
  /// Changes whenever a rebalance assigns or revokes partitions of this split (the
  /// callbacks run inside next() and keepalive()). Owning worker only; noexcept.
  std::uint64_t assignment_version() const noexcept { return *version_; }
  /// Appends to `out` the pids this split holds: assigned, plus those of the last eager
  /// revoke kept for a hand-back to this split (see "Eager rebalance"). Owning worker only.
  void held_partitions(std::vector<std::int32_t>& out) const;
  /// Drains acks and commits synchronously; closes the consumer once every split of the
  /// source did so (the last one closes all; else the last split's destructor). Idempotent.
  /// Blocks: the commit round trip, and up to drain_timeout more while a refused commit
  /// waits for a rebalance to complete.
  void shutdown();
  const std::string& error() const noexcept;

 private:
  struct impl;
  std::shared_ptr<impl> p_;  // shared with topic_table until the deferred close
  const std::uint64_t* version_;  ///< impl's assignment version (read per record, inline)
};

inline std::string identity_deserialiser(std::string_view s) { return std::string(s); }

}  // namespace kafka_detail

template <class K = std::string, class V = std::string>
class kafka_source {
 public:
  using value_type = kafka_record<K, V>;
  using key_fn = std::function<K(std::string_view)>;
  using value_fn = std::function<V(std::string_view)>;

  /// Deserialisers run on the worker and throw on bad input (any std::exception).
  /// Throws config_error-like std::invalid_argument when brokers/group/topics are empty.
  explicit kafka_source(kafka_source_options o, key_fn k = nullptr, value_fn v = nullptr)
      : o_(std::move(o)), key_(std::move(k)), value_(std::move(v)),
        topics_(kafka_detail::make_topic_table()),
        stats_(std::make_shared<kafka_source_stats>()) {
    if (o_.brokers.empty()) throw std::invalid_argument("kafka_source: brokers is empty");
    if (o_.group.empty()) throw std::invalid_argument("kafka_source: group is empty");
    if (o_.topics.empty()) throw std::invalid_argument("kafka_source: no topics");
    if constexpr (std::is_same_v<K, std::string>)
      if (!key_) key_ = kafka_detail::identity_deserialiser;
    if constexpr (std::is_same_v<V, std::string>)
      if (!value_) value_ = kafka_detail::identity_deserialiser;
    if (!key_ || !value_) throw std::invalid_argument("kafka_source: deserialiser missing");
    if (o_.guarantee == processing_guarantee::exactly_once) link_ = kafka_detail::make_txn_link();
  }

  /// Error side output for undecodable messages (called on the worker). Default: none
  /// (still counted in stats().bad).
  kafka_source& on_error(std::function<void(const kafka_bad_message&)> f) {
    on_bad_ = std::move(f);
    return *this;
  }
  /// Event time from the record instead of the message timestamp.
  kafka_source& event_time_from(std::function<event_time(const value_type&)> f) {
    time_ = std::move(f);
    return *this;
  }

  /// Consumers (splits) on a runtime of `workers` workers: options().splits, or one per
  /// worker when it is 0 (rill::split_count_of).
  std::size_t split_count(std::size_t workers) const noexcept { return o_.splits ? o_.splits : workers; }
  const kafka_source_options& options() const noexcept { return o_; }
  std::shared_ptr<kafka_source_stats> stats() const { return stats_; }
  std::string name() const { return "kafka_source"; }

  /// Consumer lag of every partition the splits of this source hold now, in no
  /// particular order (kafka_partition_lag says what is listed). Any thread, while the
  /// source runs or after; empty once the splits closed. Blocks on each split's small
  /// mutex (held by a rebalance callback for a few map operations) and on librdkafka's
  /// partition locks; makes no broker request. Allocates.
  std::vector<kafka_partition_lag> lag() const { return kafka_detail::lag_of(*topics_); }

  /// rill::metrics_provider: called by rill::from() while a run is built, on the thread
  /// calling runtime::run (see "Metrics" in the file banner for the names and units).
  /// The registered functions keep this source's shared state (not its splits'
  /// consumers) alive and run on the endpoint's thread: the lag takes each split's view
  /// mutex, the others read atomics. Allocates; throws only std::bad_alloc.
  void add_metrics(job_metrics& m, const std::string& op) const {
    const metric_labels l{{"operator", op}};
    m.add_gauge_family_fn("rill_kafka_consumer_records_lag",
                          "Kafka consumer records-lag: high watermark minus position, records, per partition",
                          [t = topics_, op](std::vector<job_metrics::gauge_sample>& out) {
                            for (auto& p : kafka_detail::lag_of(*t))
                              out.push_back({{{"operator", op}, {"topic", p.topic},
                                              {"partition", std::to_string(p.partition)}},
                                             double(p.lag)});
                          });
    m.add_summary_fn("rill_kafka_consumer_commit_latency_seconds",
                     "Kafka consumer offset-commit round trip (commit-latency-avg/max), seconds", l,
                     [st = stats_] { return histogram(st->commit_latency); }, 1e-9);
    m.add_gauge_fn("rill_kafka_consumer_assigned_partitions", "Partitions assigned to this process's consumers", l,
                   [st = stats_] { return double(st->assigned.load(std::memory_order_relaxed)); });
  }

  class reader {
   public:
    template <class Emit>
    poll_status poll(Emit&& emit, std::size_t max) {
      if (!core_->service()) return poll_status::error;
      std::size_t n = 0;
      kafka_detail::message_view m;
      while (n < max && core_->next(m)) {
        ++n;
        value_type r;
        r.topic = m.topic_name;
        r.partition = m.partition;
        r.offset = m.offset;
        r.timestamp_ms = m.timestamp_ms;
        try {
          r.key = (*key_)(m.key);
        } catch (const std::exception& e) {
          core_->bad(m, std::string("key: ") + e.what());
          continue;
        }
        try {
          r.value = (*value_)(m.value);
        } catch (const std::exception& e) {
          core_->bad(m, std::string("value: ") + e.what());
          continue;
        }
        const event_time t = *time_ ? (*time_)(r)
                                    : event_time{std::chrono::milliseconds{std::max<std::int64_t>(m.timestamp_ms, 0)}};
        emit(record<value_type>{std::move(r), t, source_position{.partition = m.pid, .offset = m.offset}, core_->track(m)});
      }
      core_->publish();
      return n == max ? poll_status::more : poll_status::idle;
    }
    std::string error() const { return core_->error(); }

    // Capabilities used by rill::source_driver (core/source.hpp); owning worker only.
    /// Start gate ("Start" above): false until every split of the source in this process
    /// had its first assignment or start_timeout passed; serve() keeps the membership.
    bool ready() { return core_->started(); }
    void serve() { core_->keepalive(); }
    /// Backpressure ("Polling" above): blocked for pause_after or longer, pause the
    /// assigned partitions and keep serving the group; resume exactly those paused.
    void on_backpressure(std::chrono::nanoseconds blocked_for) {
      if (core_->paused() || blocked_for >= pause_after_) {
        core_->pause_all();
        core_->keepalive();
      }
    }
    void on_resume() {
      if (core_->paused()) core_->resume_paused();
    }
    /// Per-partition watermarks ("Per-partition watermarks" above).
    std::uint64_t assignment_version() const noexcept { return core_->assignment_version(); }
    void held_partitions(std::vector<std::int32_t>& out) const { core_->held_partitions(out); }
    std::chrono::nanoseconds partition_idle_timeout() const noexcept { return idle_partition_; }
    /// Drain and final commit ("At-least-once" above). close() blocks: the commit round
    /// trip, and up to drain_timeout more while a refused commit waits for a rebalance.
    bool settled() { return core_->settled(); }
    void close() { core_->shutdown(); }
    std::chrono::nanoseconds drain_timeout() const noexcept { return drain_; }

   private:
    friend class kafka_source;
    std::chrono::nanoseconds pause_after_{}, idle_partition_{}, drain_{};
    std::unique_ptr<kafka_detail::split_core> core_;
    std::shared_ptr<key_fn> key_;
    std::shared_ptr<value_fn> value_;
    std::shared_ptr<std::function<event_time(const value_type&)>> time_;
  };

  /// Creates split i's consumer and subscribes. On the thread calling runtime::run.
  /// Throws std::runtime_error when no broker answers within start_timeout, and (for
  /// exactly_once) std::invalid_argument when no kafka_sink was constructed with this
  /// source.
  reader open(std::size_t i) const {
    reader r;
    r.core_ = std::make_unique<kafka_detail::split_core>(o_, topics_, stats_, on_bad_, i, link_);
    r.pause_after_ = o_.pause_after;
    r.idle_partition_ = o_.idle_partition_timeout;
    r.drain_ = o_.drain_timeout;
    r.key_ = std::make_shared<key_fn>(key_);
    r.value_ = std::make_shared<value_fn>(value_);
    r.time_ = std::make_shared<std::function<event_time(const value_type&)>>(time_);
    return r;
  }

 private:
  kafka_source_options o_;
  key_fn key_;
  value_fn value_;
  std::function<void(const kafka_bad_message&)> on_bad_;
  std::function<event_time(const value_type&)> time_;
  std::shared_ptr<kafka_detail::topic_table> topics_;
  std::shared_ptr<kafka_source_stats> stats_;
  std::shared_ptr<kafka_detail::txn_link> link_;  ///< exactly_once only
  template <class T>
  friend class kafka_sink;  // takes link_ (kafka_sink(options, source))
};

}  // namespace rill

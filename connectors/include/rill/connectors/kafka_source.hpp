// rill/connectors/kafka_source.hpp — read Kafka topics with consumer-group scaling and
// at-least-once offset commits (DESIGN.md "Kafka").
//
// Defines:
//   rill::kafka_source_options   brokers, group, topics, commit interval, timeouts
//   rill::kafka_record<K, V>     one message: key, value, topic, partition, offset, timestamp
//   rill::kafka_topic            a record's topic name: interned, copied as a pointer
//   rill::kafka_bad_message      what the error side output receives for an undecodable one
//   rill::kafka_source_stats     counters (atomics, read from any thread)
//   rill::kafka_source<K, V>     a rill::source_of<kafka_record<K, V>>, one split per worker
//   rill::from(kafka_source)     its stream, with a driver that keeps polling under backpressure
//
// Example (topic -> map -> topic; see kafka_sink.hpp):
//   rill::kafka_source<> src{{.brokers = "127.0.0.1:19092", .group = "g", .topics = {"in"}}};
//   src.on_error([](const rill::kafka_bad_message& m) { std::cerr << m.what << '\n'; });
//   auto out = std::make_shared<rill::kafka_sink<rill::kafka_record<>>>(
//       rill::kafka_sink_options{.brokers = "127.0.0.1:19092", .topic = "out"});
//   rill::runtime rt{{.workers = 2, .handle_signals = true}};
//   rt.run(rill::from(std::move(src)).filter(keep).sink(out));   // until SIGTERM
//
// Rules:
//   - Group: every split is one librdkafka KafkaConsumer in `group`; Kafka spreads the
//     partitions over splits and over processes (scale-out = start more processes).
//     `cooperative` selects the cooperative-sticky assignor (incremental rebalances).
//   - Polling: consume(0) from the worker loop, never blocking; `idle` when nothing came.
//     Under backpressure (on_flush() == false) the driver of rill::from(kafka_source)
//     first just stops consuming (re-checking every 500 µs). Blocked for pause_after or
//     longer, it pauses the split's assigned partitions and keeps calling consume(0), so
//     the member is not evicted by max.poll.interval.ms and rebalances are served; it
//     resumes exactly the partitions it paused. Why not pause at once: a pause drops
//     librdkafka's prefetched messages for those partitions and a resume waits for a new
//     fetch, 0.3-0.6 s on the broker here — with enrich at 100 ms per request, pausing on
//     every short stall held throughput at about a third (examples/enrichment Kafka mode).
//     (With the generic rill::from(source_of) driver there is no polling while blocked.)
//   - Event time: the message timestamp (ms, CreateTime or LogAppendTime), or
//     event_time_from(f). record.position = {pid, offset}: pid is the Kafka partition
//     for the source's first topic; topic number n (in first-seen order) adds n << 16.
//   - Start: the splits of one source in one process join the group one after the other;
//     a split that read records before the others joined would lose those partitions at
//     the rebalance their joins cause, and the new owner would read the records again
//     (duplicates; with the broker's default group.initial.rebalance.delay.ms = 3 s it
//     rarely happens; with 0, our test broker, 1 run in 3 of a test). So no split emits
//     a record until every split of the source in this process has had its first
//     assignment, or start_timeout passed; meanwhile they serve the group (keepalive).
//   - Per-partition watermarks (Flink's Kafka source does the same): a split's progress
//     marker is the minimum, over the partitions it holds, of the largest event time read
//     from each; a record's own time does not advance progress (rill::advances_progress).
//     So a partition read behind the others (fetch order is not time order) does not make
//     its records late downstream. A partition held but not read from yet counts as
//     -infinity; one silent for idle_partition_timeout stops counting until its next
//     record; when all are silent, the split claims the largest time read from any (the
//     last windows fire). Revoked partitions stop counting at once.
//   - At-least-once (kafka_ack.hpp, record.hpp): auto commit and auto offset store are
//     off. Each emitted record carries an ack token (record.ack); every record derived
//     from it (map, flat_map, key_by, window_sort windows, enrich) holds a copy, and the
//     offset is done when the last copy is gone (filter drop, sink done, Kafka delivery
//     report). A partition's committed offset is the lowest offset not done (or last
//     done + 1). A failed delivery (ack->fail()) is never done: the partition is not
//     committed past it in this run (stats().held) and the message is redelivered after
//     a restart. Commits: every commit_interval (async), on revoke (sync, before the
//     partitions are given up; in-flight records of revoked partitions are forgotten and
//     redelivered to the new owner), and on shutdown (sync, after waiting up to
//     drain_timeout for what is in flight downstream, e.g. behind a key_by). A commit
//     that fails (rebalance in progress, coordinator away during a broker restart) is
//     sent again by the next one; the final one is retried while the group finishes a
//     rebalance (the consumer is served meanwhile), for at most drain_timeout.
//   - Eager rebalance (the default protocol revokes every partition at each member join
//     or leave): a revoked partition (not lost) that the next assignment hands straight
//     back to the same split, with the broker's committed offset still the one this split
//     last had confirmed, keeps its generation and its in-flight records, and the split
//     reads on from its position: records sitting in open windows are not replayed.
//     Checking that costs one OffsetFetch (up to 5 s, on the worker) in that assignment.
//     Any other partition starts from the committed offset (duplicates, never losses).
//   - Bad messages: a key/value deserialiser that throws sends the message to the error
//     side output (topic, partition, offset, reason), counts it in stats().bad, and the
//     offset is done: the partition goes on and is committed past it.
//   - Errors: open() throws std::runtime_error naming the brokers when no broker answers
//     a metadata request within start_timeout, naming the topic when a named topic has an
//     illegal name or (require_topics, the default) does not exist. Later broker errors are retried by
//     librdkafka and counted in stats().transient_errors; fatal ones end the split with
//     poll_status::error (message in report.errors).
//
// Thread safety: a reader (split) lives on one worker. stats() from any thread.
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

#include "rill/connectors/kafka_ack.hpp"
#include "rill/core/record.hpp"
#include "rill/core/source.hpp"
#include "rill/operators/stream.hpp"

namespace rill {

struct kafka_source_options {
  std::string brokers;                 ///< bootstrap.servers, "host:port,..."
  std::string group;                   ///< group.id (required)
  std::vector<std::string> topics;     ///< names; an entry starting with '^' is a regex
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
  /// Extra librdkafka properties, applied after rill's own (so they win): rill sets
  /// queued.min.messages=1000000 (prefetch; librdkafka's 100,000 throttled consume ->
  /// produce, bench/RESULTS.md "kafka") and enable.auto.commit / enable.auto.offset.store
  /// = false (turning those on breaks the at-least-once guarantee).
  std::map<std::string, std::string> config;
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
};

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
/// Shared by the splits of one source (mutex inside): topic name <-> number table, and
/// the group leave: no split closes its consumer (leaving the group, which revokes the
/// others' partitions) before every split of the source made its final commit.
std::shared_ptr<topic_table> make_topic_table();

/// One consumer of the group (implemented in kafka_source.cpp, no librdkafka types here).
/// Every method on the split's worker.
class split_core {
 public:
  split_core(const kafka_source_options& o, std::shared_ptr<topic_table> topics,
             std::shared_ptr<kafka_source_stats> stats,
             std::function<void(const kafka_bad_message&)> on_bad, std::size_t index);
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

  std::size_t split_count() const noexcept { return o_.splits ? o_.splits : 1; }
  std::size_t configured_splits() const noexcept { return o_.splits; }
  const kafka_source_options& options() const noexcept { return o_; }
  std::shared_ptr<kafka_source_stats> stats() const { return stats_; }
  std::string name() const { return "kafka_source"; }

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
        emit(record<value_type>{std::move(r), t, source_position{m.pid, m.offset}, core_->track(m)});
      }
      core_->publish();
      return n == max ? poll_status::more : poll_status::idle;
    }
    std::string error() const { return core_->error(); }
    kafka_detail::split_core& core() { return *core_; }

   private:
    friend class kafka_source;
    std::unique_ptr<kafka_detail::split_core> core_;
    std::shared_ptr<key_fn> key_;
    std::shared_ptr<value_fn> value_;
    std::shared_ptr<std::function<event_time(const value_type&)>> time_;
  };

  /// Creates split i's consumer and subscribes. On the thread calling runtime::run.
  /// Throws std::runtime_error when no broker answers within start_timeout.
  reader open(std::size_t i) const {
    reader r;
    r.core_ = std::make_unique<kafka_detail::split_core>(o_, topics_, stats_, on_bad_, i);
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
};

namespace kafka_detail {

/// Drives one kafka split on a worker: like source_driver, plus pause/keep-polling under
/// backpressure and a synchronous final commit after end of stream reached the sink.
template <class Reader, class T>
class driver : public std::enable_shared_from_this<driver<Reader, T>> {
 public:
  driver(Reader r, stage_in<T>* head, std::size_t input, runtime& rt, worker& w,
         stage_counters& c, std::chrono::milliseconds drain_timeout,
         std::chrono::milliseconds pause_after, std::chrono::milliseconds idle_partition)
      : r_(std::move(r)), head_(head), input_(input), rt_(rt), w_(w), c_(c), timer_(w.context()),
        drain_timeout_(drain_timeout), pause_after_(pause_after), idle_partition_(idle_partition) {}
  void start() { step(); }

 private:
  void step() {
    if (ended_) return drain();
    // A stop request ends the input even while downstream is full: else a sink that
    // cannot deliver (broker down, max_pending reached) held the stop for its whole
    // delivery timeout instead of its flush_timeout at end().
    if (rt_.stop_requested()) return finish();
    if (!head_->on_flush()) {  // backpressure: wait; if it lasts, pause and keep polling
      const auto now = std::chrono::steady_clock::now();
      if (!blocked_) {
        blocked_ = true;
        blocked_since_ = now;
      }
      if (r_.core().paused() || now - blocked_since_ >= pause_after_) {
        r_.core().pause_all();
        r_.core().keepalive();
      }
      return later(std::chrono::microseconds{500});
    }
    const auto now = std::chrono::steady_clock::now();
    if (blocked_) {  // time spent blocked does not make partitions idle
      for (auto& l : lanes_) l.last = now;
      blocked_ = false;
    }
    if (r_.core().paused()) r_.core().resume_paused();
    if (!r_.core().started()) {  // start gate (header comment, "Start")
      r_.core().keepalive();
      return later(std::chrono::milliseconds{1});
    }
    std::size_t n = 0;
    const auto st = r_.poll(
        [&](record<T>&& rec) {
          lane& l = lane_of(rec.position ? rec.position->partition : -1, now);
          if (rec.time > l.largest) l.largest = rec.time;
          l.last = now;
          ++n;
          head_->on_record(input_, std::move(rec));
        },
        256);
    c_.add(c_.out, n);
    const auto p = progress(now);
    if (p > sent_) {
      sent_ = p;
      head_->on_progress(input_, p);
    }
    switch (st) {
      case poll_status::more:
        boost::asio::post(w_.context(), [self = this->shared_from_this()] { self->step(); });
        return;
      case poll_status::idle:
        return later(std::chrono::milliseconds{1});
      default:
        c_.add(c_.errors);
        rt_.report_error(r_.error());
        return finish();
    }
  }
  // ---- per-partition watermarks (see the header comment) ----
  struct lane {
    std::int32_t pid;
    event_time largest;                          // -infinity until its first record
    std::chrono::steady_clock::time_point last;  // last record, assignment, or unblock
  };
  /// Lanes follow the split's held partitions: kept, added (-infinity) or dropped when the
  /// assignment changed. Then the lane of `pid` (added if a record comes from a partition
  /// not listed, which the callbacks' order should not allow).
  lane& lane_of(std::int32_t pid, std::chrono::steady_clock::time_point now) {
    sync_lanes(now);
    if (hit_ < lanes_.size() && lanes_[hit_].pid == pid) return lanes_[hit_];
    for (hit_ = 0; hit_ < lanes_.size(); ++hit_)
      if (lanes_[hit_].pid == pid) return lanes_[hit_];
    lanes_.push_back({pid, event_time_min, now});
    return lanes_.back();  // hit_ == old size == its index
  }
  void sync_lanes(std::chrono::steady_clock::time_point now) {
    const auto v = r_.core().assignment_version();
    if (v == version_) return;
    version_ = v;
    held_.clear();
    r_.core().held_partitions(held_);
    std::erase_if(lanes_, [&](const lane& l) { return std::find(held_.begin(), held_.end(), l.pid) == held_.end(); });
    for (const auto pid : held_)
      if (std::none_of(lanes_.begin(), lanes_.end(), [&](const lane& l) { return l.pid == pid; }))
        lanes_.push_back({pid, event_time_min, now});
  }
  /// Minimum of the largest times over lanes that are not idle. When every lane is idle
  /// (the split has caught up with all its partitions), the maximum over them: nothing
  /// is arriving, so the last windows fire instead of waiting for new data. -infinity
  /// (no claim) without lanes.
  event_time progress(std::chrono::steady_clock::time_point now) {
    sync_lanes(now);
    event_time m = event_time_max, all = event_time_min;
    bool any = false;
    for (const auto& l : lanes_) {
      all = std::max(all, l.largest);
      if (idle_partition_.count() > 0 && now - l.last >= idle_partition_) continue;
      any = true;
      m = std::min(m, l.largest);
    }
    return any ? m : all;
  }

  void finish() {
    ended_ = true;
    drain_until_ = std::chrono::steady_clock::now() + drain_timeout_;
    head_->on_end(input_);
    drain();
  }
  // After the end: push buffers on, then wait (bounded) until every emitted offset is
  // acknowledged downstream (another worker's sink, behind a key_by) before the final
  // synchronous commit. If the run ends first, the split's destructor commits instead.
  void drain() {
    if (!head_->on_flush()) return later(std::chrono::microseconds{200});
    if (!r_.core().settled() && std::chrono::steady_clock::now() < drain_until_)
      return later(std::chrono::milliseconds{1});
    r_.core().shutdown();
  }
  void later(std::chrono::nanoseconds d) {
    timer_.expires_after(d);
    timer_.async_wait([self = this->shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->step();
    });
  }

  Reader r_;
  stage_in<T>* head_;
  std::size_t input_;
  runtime& rt_;
  worker& w_;
  stage_counters& c_;
  boost::asio::steady_timer timer_;
  event_time sent_ = event_time_min;
  std::vector<lane> lanes_;
  std::vector<std::int32_t> held_;
  std::size_t hit_ = 0;
  std::uint64_t version_ = ~std::uint64_t{0};
  std::chrono::milliseconds drain_timeout_, pause_after_, idle_partition_;
  std::chrono::steady_clock::time_point drain_until_{}, blocked_since_{};
  bool blocked_ = false;
  bool ended_ = false;
};

}  // namespace kafka_detail

/// The stream of a Kafka source: split i on worker i (splits = options.splits, or one per
/// worker when 0). Preferred over the generic from(): keeps polling under backpressure
/// and commits synchronously after the end of stream went through the chain.
template <class K, class V>
stream<kafka_record<K, V>> from(kafka_source<K, V> src, std::string name = "kafka_source") {
  using T = kafka_record<K, V>;
  auto shared = std::make_shared<kafka_source<K, V>>(std::move(src));
  return stream<T>([shared, name](job_builder& b, stage_factory<T> down) {
    const auto idx = b.metrics().add_stage(name);
    const std::size_t n = b.workers();
    const std::size_t splits = shared->configured_splits() ? shared->configured_splits() : n;
    for (std::size_t w = 0; w < n && w < splits; ++w) {
      std::vector<std::size_t> mine;
      for (std::size_t i = w; i < splits; i += n) mine.push_back(i);
      auto ctx = b.context(w, mine.size());
      auto* head = down(ctx);
      for (std::size_t li = 0; li < mine.size(); ++li) {
        using R = typename kafka_source<K, V>::reader;
        auto d = std::make_shared<kafka_detail::driver<R, T>>(shared->open(mine[li]), head, li,
                                                              b.rt(), *ctx.w, ctx.metrics->at(idx, w),
                                                              shared->options().drain_timeout,
                                                              shared->options().pause_after,
                                                              shared->options().idle_partition_timeout);
        b.on_start(w, [d] { d->start(); });
      }
    }
  });
}

}  // namespace rill

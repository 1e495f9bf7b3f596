// rill/connectors/kafka_sink.hpp — write records to a Kafka topic with idempotent,
// acks=all delivery; delivery reports drive the at-least-once acknowledgements.
//
// Defines:
//   rill::kafka_sink_options   brokers, topic, linger, flush timeout, extra config
//   rill::kafka_message_out    what a serialiser returns: optional key, value
//   rill::kafka_failed_delivery  what the error side output receives
//   rill::kafka_sink_stats     counters and the delivery latency (any thread)
//   rill::kafka_sink<T>        a shared rill::sink_of<T>: `stream.sink(ptr)`
//
// Exactly-once (docs/design.md "Exactly-once"; a fragment, brokers and topics as below):
//   rill::kafka_source<> src{{.brokers = b, .group = "g", .topics = {"in"}, .instance_id = "node-1",
//                             .guarantee = rill::processing_guarantee::exactly_once}};
//   auto out = std::make_shared<rill::kafka_sink<rill::kafka_record<>>>(
//       rill::kafka_sink_options{.brokers = b, .topic = "out",
//                                .guarantee = rill::processing_guarantee::exactly_once},
//       src);   // transactional.id "g-node-1"; made before the run opens the source
//   rt.run(rill::from(std::move(src)).map(f).sink(out));
//
// Example (compiled by tests/banner_examples.py; squares to the topic "squares", keyed
// by the number):
//   #include <rill/operators/stream.hpp>
//   rill::kafka_sink_options o;
//   o.brokers = "127.0.0.1:19092";
//   o.topic = "squares";
//   auto out = std::make_shared<rill::kafka_sink<int>>(o, [](const int& x) {
//     return rill::kafka_message_out{std::to_string(x), std::to_string(x * x)};
//   });
//   out->on_error([](const rill::kafka_failed_delivery& d) { std::cerr << d.error << '\n'; });
//   rill::vector_source<int> src{{{1, rill::event_time{1s}}, {2, rill::event_time{2s}}}};
//   rill::runtime{}.run(rill::from(std::move(src)).sink(out));
//   if (out->undelivered() != 0) { /* flush timed out: records not confirmed */ }
//
// Rules:
//   - Producer: enable.idempotence=true, acks=all, partitioner=murmur2_random (the Java
//     client's default key partitioning; null keys go to a random partition).
//     The message timestamp (options.timestamps): the record's event time in ms (the
//     default, as Kafka Streams forwards record timestamps; 0 when <= 0: "now"), or the
//     produce time. A broker deletes records by their timestamp (retention.ms, 7 days by
//     default): records with old event times (a capture replayed years later) can be
//     deleted before anyone reads them; produce_time avoids that, with the event time
//     kept in the value (netflow does so).
//   - Acks: write() keeps the record's ack token (record.ack; for a window record the
//     ack_group of every record inside) until the delivery report, then releases it:
//     after a success the input offsets count as done. A failure calls ack->fail() first:
//     the inputs are NOT done, the source does not commit past them in this run (they
//     are redelivered after a restart: at-least-once), and the record goes to the error
//     side output and stats().failed.
//   - Pending = our own hand-off buffer (records librdkafka refused with QUEUE_FULL,
//     retried by the sink's poll thread) + librdkafka's queue and in-flight requests.
//     end(worker) waits until pending is 0 or flush_timeout passed; after a timeout
//     undelivered() tells how many records were not confirmed and errors() says so.
//   - Backpressure: at options.max_pending pending records the sink reports itself full
//     (flush(worker) == false) and the pipeline's sources wait before their next slice;
//     a kafka_source pauses its partitions when that lasts (kafka_source.hpp). Only for
//     a sink on the source's own worker: a worker draining a key_by/rebalance exchange
//     does not wait for a full sink (exchange.hpp drain), so behind an exchange the
//     pending count can pass max_pending (bounded there by librdkafka's
//     queue.buffering.max.messages and our hand-off buffer).
//   - Delivery reports are served by the writing workers (every 64 writes of a thread,
//     and when flush(worker) finds the sink full) and, while no worker writes for 5 ms,
//     by the sink's poll thread: a consume -> produce pipeline then releases each ack
//     token on the worker that made it, as a plain librdkafka loop serves its own reports.
//   - Copies: librdkafka copies key and value into its own message (RD_KAFKA_MSG_F_COPY), so
//     the kafka_message_out is freed by the worker that wrote it. Without a serialiser
//     (kafka_record<std::string, std::string>) the record's key and value are moved into
//     the kafka_message_out, not copied. The ack token waits for the delivery report in
//     a pooled holder: per record, the sink itself allocates nothing another thread frees.
//   - Exactly-once (options.guarantee = exactly_once, constructed with the source): a
//     transactional producer (transactional.id = options.transactional_id, or
//     "<group>-<instance_id>" of the source). write() holds the serialised output with
//     the input offsets its ack token stands for and releases the token; a thread of the
//     sink's own (replacing the poll thread) every 5 ms cuts the source's offsets so that
//     no held output straddles the cut, produces the outputs below it into the open
//     transaction, and every commit_interval sends the cut (send_offsets_to_transaction,
//     each split's group metadata) and commits. Errors: a fenced producer (a newer
//     instance with the same transactional id), an abortable error (aborted first), or
//     a partition leaving the process while the open transaction reads it, is recorded
//     in errors() and failed() and ends the source's splits with the error; retriable
//     errors are retried for max(delivery_timeout, 60 s). An output librdkafka refuses
//     for good (at produce, e.g. larger than message.max.bytes, or in its delivery
//     report) goes to on_error and stats().failed, then aborts the open transaction and
//     ends the run the same way, naming the topic and librdkafka's error: committing
//     would commit the input offsets past the output without it (Kafka Streams' default
//     production exception handler fails the task likewise). Outputs already produced
//     into the aborted transaction are reported failed too (purged). end() does not
//     flush: the source's close asks for the final commit. Backpressure: flush(worker)
//     reports full while the outputs held or produced and not yet delivered, less those
//     the last cut kept because an input of theirs is not covered yet (a window still to
//     fire), reach max_pending: a commit the broker stalls stops the input instead of
//     growing the held outputs, and a result waiting for a window never stops it
//     (docs/design.md "Exactly-once", Backpressure; the same exchange caveat as above
//     applies).
//   - A delivery that fails for good (message.timeout.ms, non-retriable broker error)
//     goes to on_error, counts in stats().failed, and is in errors(): never silent.
//     At-least-once the run goes on (its inputs are not committed); exactly-once it
//     fails (above).
//   - Records that carry a source position but no ack token count in stats().untracked
//     (an operator that dropped the token: a bug to report; always 0 with rill's own).
//   - Metrics (rill::metrics_provider; docs/design.md "Metrics"): on the metrics endpoint
//     rill_kafka_producer_pending_records{operator} (undelivered(), the gauge the
//     backpressure rule above compares with max_pending) and
//     rill_kafka_producer_delivery_latency_seconds{operator} (a summary from librdkafka's
//     produce call to the delivery report being served, successful deliveries only; time
//     in our hand-off buffer before librdkafka took a record is not included). The
//     latency is librdkafka's own per-message stamp (rd_kafka_message_latency, µs): the
//     sink reads no clock per record.
//
// Thread safety: write/flush/progress/end from any worker (one mutex around the
// hand-off); delivery reports run inside write() and flush(worker) on a worker, or on the
// sink's poll thread: on_error is called on any of these threads, one call at a time
// (under the sink's mutex). stats(), undelivered() and the metrics functions
// (add_metrics) from any thread: atomic reads and histogram reads, no lock.
// Blocking: write() never blocks; end() blocks its worker up to flush_timeout (shutdown).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "rill/connectors/kafka_source.hpp"
#include "rill/core/metrics.hpp"
#include "rill/core/record.hpp"
#include "rill/core/stage.hpp"

namespace rill {

struct kafka_sink_options {
  std::string brokers{};                          ///< bootstrap.servers
  std::string topic{};                            ///< destination topic
  std::chrono::milliseconds linger{5};            ///< linger.ms
  std::chrono::milliseconds flush_timeout{30000}; ///< end(): wait for delivery reports
  std::chrono::milliseconds delivery_timeout{30000};  ///< message.timeout.ms
  std::map<std::string, std::string> config{};    ///< extra librdkafka properties
  /// > 0: the constructor waits up to this long for a broker to answer a metadata request
  /// (as kafka_source_options::start_timeout does) and throws std::runtime_error naming
  /// the brokers if none does. 0 (the default): connect lazily; an unreachable broker then
  /// shows only as failed deliveries after delivery_timeout.
  std::chrono::milliseconds start_timeout{0};
  /// Kafka message timestamp: the record's event time, or the produce time ("now").
  enum class timestamp_source { event_time, produce_time };
  timestamp_source timestamps = timestamp_source::event_time;
  /// Backpressure: while more records than this were accepted and not yet confirmed
  /// (pending(): our hand-off buffer + librdkafka's queue + in flight), the sink tells the
  /// pipeline it is full and the sources wait (a kafka_source pauses its partitions when
  /// that lasts). Exactly-once: held outputs count too, except those the last cut kept
  /// waiting for a window (see the file banner). 0 = no limit (then only librdkafka's queue.buffering.max.messages
  /// bounds librdkafka's queue and our hand-off buffer grows). The default is not
  /// larger because a deeper producer queue makes the same job slower (bench/RESULTS.md
  /// "kafka").
  std::uint64_t max_pending = 50000;
  /// at_least_once (default): idempotent producer, delivery reports release the inputs.
  /// exactly_once: a transactional producer that commits the outputs together with the
  /// input offsets of the source it was constructed with (kafka_sink(options, source);
  /// docs/design.md "Exactly-once"). Outputs are held in memory until a consistent cut of
  /// the source's offsets covers every input they depend on, then produced inside the
  /// open transaction; the transaction commits every commit_interval.
  processing_guarantee guarantee = processing_guarantee::at_least_once;
  /// exactly_once: transactional.id (KIP-98). Empty: "<group>-<instance_id>" of the
  /// source (kafka_source_options::instance_id must then be set). The id of one process
  /// instance: a process restarted with the same id fences its predecessor (its open
  /// transaction is aborted, its later writes are refused); two live processes must not
  /// share one.
  std::string transactional_id{};
  /// exactly_once: how often the open transaction commits (Kafka Streams' EOS
  /// commit.interval.ms default, 100 ms). The latency a read_committed consumer sees is
  /// at least this.
  std::chrono::milliseconds commit_interval{100};
};

struct kafka_message_out {
  std::optional<std::string> key;   ///< nullopt: no key (random partition)
  std::string value;
};

struct kafka_failed_delivery {
  std::string topic;
  std::optional<std::string> key;
  std::string value;
  std::string error;                ///< librdkafka's error text
};

/// Counters. The writers' (accepted, untracked: per write()) and the delivery reports'
/// (delivered, failed, completed) sit on separate cache lines, so a worker and the poll
/// thread do not take one line from each other on every record. Any thread reads them.
struct kafka_sink_stats {
  alignas(64) std::atomic<std::uint64_t> accepted{0};    ///< write() calls
  std::atomic<std::uint64_t> untracked{0};   ///< position set but no ack token
  std::atomic<std::uint64_t> buffered{0};    ///< records currently in our hand-off buffer
  alignas(64) std::atomic<std::uint64_t> delivered{0};   ///< successful delivery reports
  std::atomic<std::uint64_t> failed{0};      ///< failed delivery reports (error output)
  std::atomic<std::uint64_t> transient_errors{0};  ///< librdkafka error events
  /// Records done with: delivered, failed, or refused for good at hand-off.
  std::atomic<std::uint64_t> completed{0};
  /// Successful deliveries, ns from librdkafka's produce call to the delivery report
  /// being served (librdkafka measures it in µs: values are multiples of 1,000).
  alignas(64) histogram delivery_latency;

  /// Records accepted and not yet completed (kafka_sink::undelivered()). completed is
  /// read first: every completion follows its acceptance, so this never underflows.
  std::uint64_t pending() const noexcept {
    const auto done = completed.load(std::memory_order_acquire);
    return accepted.load(std::memory_order_acquire) - done;
  }
};

namespace kafka_detail {

/// Attaches a sink to the exactly-once link of a source (kafka_sink(options, source)):
/// returns the link, with its transactional id set from `o` or the source's group and
/// instance id. Throws std::invalid_argument when the source is not exactly_once, when
/// the link already has a sink, or when no transactional id can be made.
std::shared_ptr<txn_link> attach_sink(const std::shared_ptr<txn_link>& link, const kafka_sink_options& o,
                                      const kafka_source_options& src);

/// The producer (implemented in kafka_sink.cpp). All methods: any thread.
class producer_core {
 public:
  /// `link` non-null: exactly-once (transactional producer; init_transactions blocks up
  /// to max(start_timeout, 30 s) and throws std::runtime_error when it fails).
  explicit producer_core(const kafka_sink_options& o, std::shared_ptr<txn_link> link = nullptr);
  /// Exactly-once: keeps `m` until a consistent cut covers the inputs `ack` stands for,
  /// then releases `ack` (the inputs count as handed to the sink). Never blocks.
  void hold(kafka_message_out&& m, std::int64_t ts_ms, std::shared_ptr<ack_token>&& ack);
  /// Exactly-once: true once the transaction failed for good (fenced, aborted, an output
  /// refused); the run's sources end with the error. Any thread.
  bool failed() const noexcept;
  ~producer_core();
  producer_core(const producer_core&) = delete;
  producer_core& operator=(const producer_core&) = delete;
  void produce(kafka_message_out&& m, std::int64_t ts_ms, std::shared_ptr<ack_token>&& ack);
  /// Serves the delivery reports that are ready, on the calling thread (never blocks).
  void serve_reports();
  /// Exactly-once backpressure count: pending() (held + produced, not yet delivered)
  /// minus the held outputs the last cut kept because an input of theirs is not yet
  /// covered (a window still to fire). Any thread; relaxed reads, never blocks.
  std::uint64_t eos_backlog() const noexcept;
  /// Waits until pending() == 0 or the timeout; returns pending() then. Blocks.
  std::uint64_t flush(std::chrono::milliseconds timeout);
  std::uint64_t pending() const noexcept;
  void on_error(std::function<void(const kafka_failed_delivery&)> f);
  kafka_sink_stats& stats() noexcept;
  /// The same object, shared: it outlives the producer while someone holds it.
  std::shared_ptr<const kafka_sink_stats> shared_stats() const;
  std::vector<std::string> errors() const;
  void add_error(std::string e);

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace kafka_detail

template <class T>
class kafka_sink {
 public:
  using serialiser = std::function<kafka_message_out(const T&)>;

  /// Connects lazily (librdkafka), unless options.start_timeout > 0: then blocks up to
  /// that long for a broker and throws std::runtime_error when none answers. Throws
  /// std::invalid_argument for a bad option.
  /// For T = kafka_record<std::string, std::string> the serialiser may be omitted: the
  /// record's key and value are then moved into the message, not copied (write() owns
  /// the record).
  explicit kafka_sink(kafka_sink_options o, serialiser s = nullptr)
      : o_(std::move(o)), ser_(std::move(s)) {
    if (o_.guarantee == processing_guarantee::exactly_once)
      throw std::invalid_argument("kafka_sink: guarantee = exactly_once needs the source whose offsets it "
                                  "commits: kafka_sink(options, source, serialiser)");
    init();
  }
  /// Exactly-once (options.guarantee = exactly_once, and the source's too): a
  /// transactional producer that commits `source`'s offsets with the outputs
  /// (docs/design.md "Exactly-once"). Construct it before the run opens the source: the
  /// constructor's init_transactions fences a predecessor with the same transactional id
  /// and waits until its open transaction was aborted or committed, so the source then
  /// reads stable committed offsets. Blocks up to max(start_timeout, 30 s); throws
  /// std::runtime_error when the broker does not answer, std::invalid_argument when
  /// either side is not exactly_once or the source already has a sink.
  template <class K, class V>
  kafka_sink(kafka_sink_options o, const kafka_source<K, V>& source, serialiser s = nullptr)
      : o_(std::move(o)), ser_(std::move(s)) {
    if (o_.guarantee != processing_guarantee::exactly_once)
      throw std::invalid_argument("kafka_sink: constructed with a source but guarantee is not exactly_once");
    link_ = kafka_detail::attach_sink(source.link_, o_, source.options());
    init();
  }

  /// Error side output for failed deliveries (called under the sink's mutex, on the
  /// thread serving the delivery report: a writing worker or the poll thread).
  /// Exactly-once, a failed delivery also fails the run (file banner), and the outputs
  /// its aborted transaction held are reported here too.
  kafka_sink& on_error(std::function<void(const kafka_failed_delivery&)> f) {
    core_->on_error(std::move(f));
    return *this;
  }

  // ---- rill::sink_of<T> ----
  /// Serialises and hands the record to the producer. Never blocks. Any worker.
  /// A serialiser exception propagates (fail policy: the run stops with it).
  void write(std::size_t, record<T>&& r) {
    if (!r.ack && r.position) core_->stats().untracked.fetch_add(1, std::memory_order_relaxed);
    if (link_) return hold(std::move(r));
    const auto ms = o_.timestamps == kafka_sink_options::timestamp_source::event_time
                        ? std::chrono::duration_cast<std::chrono::milliseconds>(r.time.time_since_epoch()).count()
                        : 0;  // 0: librdkafka stamps the produce time
    if constexpr (is_raw) {
      if (move_raw_) {
        core_->produce(kafka_message_out{std::move(r.value.key), std::move(r.value.value)}, ms > 0 ? ms : 0,
                       std::move(r.ack));
        return;
      }
    }
    core_->produce(ser_(static_cast<const T&>(r.value)), ms > 0 ? ms : 0, std::move(r.ack));
  }
  /// The pipeline's backpressure check, before each source slice (any worker): false
  /// while pending() >= options.max_pending. The asking worker first serves the
  /// delivery reports that are ready, so a waiting pipeline keeps draining.
  /// Exactly-once: false while the outputs held or produced and not yet delivered, less
  /// those the last cut kept waiting for a window, reach max_pending.
  bool flush(std::size_t) {
    // Exactly-once: held outputs a cut kept for a window do not count (docs/design.md
    // "Exactly-once", Backpressure).
    if (link_) return o_.max_pending == 0 || core_->eos_backlog() < o_.max_pending;
    if (o_.max_pending == 0 || core_->pending() < o_.max_pending) return true;
    core_->serve_reports();
    return core_->pending() < o_.max_pending;
  }
  void progress(std::size_t, event_time) {}
  /// One worker's input ended: waits (blocking that worker, up to flush_timeout) until
  /// every record accepted so far was confirmed or failed.
  void end(std::size_t) {
    if (link_) return;  // exactly-once: the source's close asks for the final commit
    const auto left = core_->flush(o_.flush_timeout);
    if (left)
      core_->add_error("kafka_sink " + o_.topic + ": " + std::to_string(left) +
                       " records undelivered after flush timeout " +
                       std::to_string(o_.flush_timeout.count()) + " ms");
  }

  /// Records accepted but not yet confirmed (own buffer + librdkafka). Any thread.
  std::uint64_t undelivered() const noexcept { return core_->pending(); }
  /// Waits up to `timeout` for pending() == 0; returns what is left. Blocks.
  std::uint64_t flush(std::chrono::milliseconds timeout) { return core_->flush(timeout); }
  const kafka_sink_stats& stats() const noexcept { return core_->stats(); }

  /// rill::metrics_provider: called by stream::sink() while a run is built, on the thread
  /// calling runtime::run (see "Metrics" in the file banner for the names and units).
  /// The registered functions hold the stats (not the producer, so a sink destroyed
  /// while a scrape runs is fine) and read their atomics on the endpoint's thread.
  /// Allocates; throws only std::bad_alloc.
  void add_metrics(job_metrics& m, const std::string& op) const {
    const metric_labels l{{"operator", op}};
    auto st = core_->shared_stats();
    m.add_gauge_fn("rill_kafka_producer_pending_records",
                   "Kafka sink: records accepted and not yet confirmed by a delivery report", l,
                   [st] { return double(st->pending()); });
    m.add_summary_fn("rill_kafka_producer_delivery_latency_seconds",
                     "Kafka sink: produce call to delivery report, successful deliveries, seconds", l,
                     [st] { return histogram(st->delivery_latency); }, 1e-9);
  }
  /// Failed deliveries and flush timeouts, as text, in order; exactly-once: also why the
  /// transaction failed (fenced, aborted, an output refused).
  std::vector<std::string> errors() const { return core_->errors(); }
  /// Exactly-once: true once the transactional producer failed for good (fenced by a
  /// newer instance with the same transactional id, or a transaction aborted, as after
  /// an output librdkafka refused). Any thread.
  bool failed() const noexcept { return core_->failed(); }

 private:
  void init() {
    core_ = std::make_unique<kafka_detail::producer_core>(o_, link_);
    if constexpr (is_raw)
      if (!ser_) move_raw_ = true;
    if (!ser_ && !move_raw_) throw std::invalid_argument("kafka_sink: serialiser missing");
  }
  void hold(record<T>&& r) {
    const auto ms = o_.timestamps == kafka_sink_options::timestamp_source::event_time
                        ? std::chrono::duration_cast<std::chrono::milliseconds>(r.time.time_since_epoch()).count()
                        : 0;
    if constexpr (is_raw) {
      if (move_raw_) {
        core_->hold(kafka_message_out{std::move(r.value.key), std::move(r.value.value)}, ms > 0 ? ms : 0,
                    std::move(r.ack));
        return;
      }
    }
    core_->hold(ser_(static_cast<const T&>(r.value)), ms > 0 ? ms : 0, std::move(r.ack));
  }

  static constexpr bool is_raw = std::is_same_v<T, kafka_record<std::string, std::string>>;
  kafka_sink_options o_;
  serialiser ser_;
  bool move_raw_ = false;  ///< no serialiser given for a raw record: move key and value
  std::shared_ptr<kafka_detail::txn_link> link_;  ///< exactly_once only
  std::unique_ptr<kafka_detail::producer_core> core_;
};

}  // namespace rill

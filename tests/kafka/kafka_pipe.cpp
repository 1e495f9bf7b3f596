// kafka_pipe — the pipeline process the crash/SIGTERM tests start, kill and restart:
//   kafka_pipe BROKERS IN OUT GROUP SLOW_US [map|window|count|repartition|local-count]
//              [eos INSTANCE | alo INSTANCE]
// map (default):
//   kafka_source(IN, GROUP) -> map(value = "v" + value, SLOW_US µs of simulated work)
//   -> kafka_sink(OUT)
// window (at-least-once through an exchange and open windows):
//   kafka_source(IN, GROUP, event time = value ms, "end" = 1 h)
//   -> map(SLOW_US µs) -> key_by(key) -> window_sort(1 s, max delay 2 s; late records go
//   straight to the sink with their ack) -> flat_map(window -> its records, value "w" + value)
//   -> kafka_sink(OUT)
// count (a keyed tumbling aggregation through an exchange):
//   kafka_source(IN, GROUP, event time = value ms, "end" = 1 h) -> map(SLOW_US µs)
//   -> key_by(key) -> tumbling 100 ms, max delay 0, count
//   -> kafka_sink(OUT): key = key, value = "<window start ms> <count>"
// repartition (counts by a key the input is not partitioned by, across processes):
//   kafka_source(IN, GROUP; value "<event ms> <key>", key = anything) -> map(SLOW_US µs)
//   -> kafka_repartition "by-key" (topic GROUP-by-key-repartition, keyed by <key>)
//   -> key_by(<key>) -> tumbling 100 ms, max delay 5 s, count
//   -> kafka_sink(OUT): key = <key>, value = "<window start ms> <count>"
// local-count: the same without the repartition topic (plain key_by: each process counts
//   the records it reads; the control of tests/kafka/kafka_repartition_test.cpp).
// eos INSTANCE: processing_guarantee::exactly_once on source and sink, static membership
//   and transactional id from INSTANCE (a restart with the same INSTANCE fences the old
//   process); alo INSTANCE: the same static membership, at-least-once (the tests' control).
// 2 workers, until SIGTERM/SIGINT (graceful: drain, windows fire, flush, commit).
// Exit 0 when everything accepted was delivered and committed, 1 otherwise.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "rill/connectors/kafka_repartition.hpp"
#include "rill/connectors/kafka_sink.hpp"
#include "rill/connectors/kafka_source.hpp"
#include "rill/operators/stream.hpp"

using namespace std::chrono_literals;
using rec = rill::kafka_record<std::string, std::string>;

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7 && argc != 9) {
    std::cerr << "usage: kafka_pipe BROKERS IN OUT GROUP SLOW_US [map|window|count|repartition|local-count] "
                 "[eos|alo INSTANCE]\n";
    return 2;
  }
  const std::string brokers = argv[1];
  const auto slow = std::chrono::microseconds{std::atoll(argv[5])};
  const std::string mode = argc >= 7 ? argv[6] : "map";
  const bool eos = argc == 9 && std::string(argv[7]) == "eos";
  const std::string instance = argc == 9 ? argv[8] : "";
  const auto guarantee = eos ? rill::processing_guarantee::exactly_once : rill::processing_guarantee::at_least_once;
  // Without INSTANCE, a killed member is noticed after 6 s (the broker's minimum), not
  // 45 s. With INSTANCE (static membership) a restart with the same INSTANCE takes the
  // killed member's place at once, so the session timeout only decides how long the
  // broker or this process may stall before the member's partitions are lost (which ends
  // an exactly-once run): 20 s rides out the stalls of a loaded machine.
  const char* session_timeout_ms = instance.empty() ? "6000" : "20000";
  rill::kafka_source_options so{.brokers = brokers, .group = argv[4], .topics = {argv[2]},
                                .commit_interval = std::chrono::milliseconds{200},
                                .instance_id = instance,
                                .guarantee = guarantee,
                                .config = {{"session.timeout.ms", session_timeout_ms}}};
  // count and window: small fetches, so the partitions' records arrive interleaved and
  // windows fire as the run goes (one 1 MB fetch per partition would hand over one
  // partition's whole backlog, seconds of SLOW_US work, before the next partition's first
  // record; per-partition watermarks then hold every window until the last partition is
  // read, and a crash test's kill lands after all output was written).
  if (mode == "count" || mode == "window") so.config["max.partition.fetch.bytes"] = "4096";
  const bool by_key = mode == "repartition" || mode == "local-count";
  if (by_key) {
    so.config["max.partition.fetch.bytes"] = "4096";
    // Three processes with two consumers each per group, and librdkafka clients that take a
    // while to start on a loaded machine: a restart must come back within the session.
    so.config["session.timeout.ms"] = "15000";
  }
  rill::kafka_source<> src{so};
  // repartition: the topic, the writer into it (exactly-once: linked to src) and the reader.
  std::unique_ptr<rill::kafka_repartition<rec>> rp;
  if (mode == "repartition") {
    rill::kafka_repartition_options ro{.name = "by-key"};
    ro.reader.commit_interval = so.commit_interval;
    ro.reader.config = so.config;
    rp = std::make_unique<rill::kafka_repartition<rec>>(
        ro, src, [](const rec& r) { return r.value; },
        [](std::string_view v) {
          rec r;
          r.value = std::string(v);
          return r;
        });
  }
  const rill::kafka_sink_options sink_options{.brokers = brokers, .topic = argv[3],
                                              // outlives a broker restart (BrokerRestart test):
                                              // scripts/kafka restart may take 30 s (clean stop)
                                              // + 90 s (start) on a loaded machine, and messages
                                              // produced just before the stop wait all of it plus
                                              // the reconnect backoff (librdkafka's default, 300 s)
                                              .delivery_timeout = std::chrono::milliseconds{300000},
                                              .guarantee = guarantee};
  // Exactly-once: the sink is made before the run opens the source (its init_transactions
  // fences the previous incarnation first).
  // After a repartition the job's sink commits the reader's offsets, not src's.
  auto sink = !eos ? std::make_shared<rill::kafka_sink<rec>>(sink_options)
              : rp ? std::make_shared<rill::kafka_sink<rec>>(sink_options, rp->source())
                   : std::make_shared<rill::kafka_sink<rec>>(sink_options, src);
  auto st = src.stats();
  auto work = [slow](rec&& r) {
    if (slow.count()) std::this_thread::sleep_for(slow);  // simulated work
    return std::move(r);
  };
  // The keyed modes: a record's value is its event time in ms; "end" is an hour on.
  auto value_is_event_time = [&] {
    src.event_time_from([](const rec& r) {
      return rill::event_time{r.value == "end" ? std::chrono::milliseconds{3600000}
                                               : std::chrono::milliseconds{std::stoll(r.value)}};
    });
  };
  // by_key modes: value "<event ms> <key>".
  auto key_of = [](const rec& r) { return r.value.substr(r.value.find(' ') + 1); };
  auto format = [](rill::keyed_window_result<std::string, std::uint64_t>&& r) {
    rec out;
    out.key = r.key;
    out.value =
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(r.start.time_since_epoch()).count()) +
        " " + std::to_string(r.value);
    return out;
  };
  // The max delay covers the event-time lag of one process behind the others that write
  // the same repartition partition (a restarted one catching up): docs/design.md
  // "Repartition through Kafka".
  const rill::window_options by_key_window{.max_delay = 5s};
  rill::job job = [&] {
    if (by_key) {
      src.event_time_from(
          [](const rec& r) { return rill::event_time{std::chrono::milliseconds{std::stoll(r.value)}}; });
      auto in = rill::from(std::move(src)).map(work);
      // A late record is printed (the wall clock and its time): the lag it shows is what
      // by_key_window's max_delay must cover.
      auto late = [](rill::record<rec>&& r, const std::string& k, rill::event_time, rill::event_time end) {
        std::cerr << "kafka_pipe: late at " << std::chrono::system_clock::now().time_since_epoch().count() / 1000000
                  << " ms wall: key " << k << " time "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(r.time.time_since_epoch()).count()
                  << " ms, window end "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(end.time_since_epoch()).count() << " ms\n";
      };
      if (rp)
        return rp->key_by(std::move(in), key_of)
            .window(rill::tumbling{100ms}, by_key_window)
            .late(late)
            .name("window")
            .count()
            .map(format)
            .sink(sink);
      return std::move(in)
          .key_by(key_of)
          .window(rill::tumbling{100ms}, by_key_window)
          .name("window")
          .count()
          .map(format)
          .sink(sink);
    }
    if (mode == "count") {
      value_is_event_time();
      return rill::from(std::move(src))
          .map(work)
          .key_by([](const rec& r) { return r.key; })
          .window(rill::tumbling{100ms}, {.max_delay = 0ms})
          .name("window")
          .count()
          .map([](rill::keyed_window_result<std::string, std::uint64_t>&& r) {
            rec out;
            out.key = r.key;
            out.value = std::to_string(
                            std::chrono::duration_cast<std::chrono::milliseconds>(r.start.time_since_epoch()).count()) +
                        " " + std::to_string(r.value);
            return out;
          })
          .sink(sink);
    }
    if (mode == "window") {
      value_is_event_time();
      return rill::from(std::move(src))
          .map(work)
          .key_by([](const rec& r) { return r.key; })
          .window_sort({.length = 1s, .max_delay = 2s},
                       [sink](rill::record<rec>&& late, rill::event_time, rill::event_time) {
                         late.value.value = "w" + late.value.value;
                         sink->write(0, std::move(late));  // keeps its ack: at-least-once
                       })
          .flat_map<rec>([](rill::window<rec>&& w, auto& emit) {
            for (auto& r : w.records) {
              r.value.value = "w" + r.value.value;
              emit(std::move(r.value));
            }
          })
          .sink(sink);
    }
    return rill::from(std::move(src))
        .map([work](rec&& r) {
          r = work(std::move(r));
          r.value = "v" + r.value;
          return std::move(r);
        })
        .sink(sink);
  }();
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false, .handle_signals = true}};
  if (by_key)
    std::cerr << "kafka_pipe(" << mode << ", " << instance << "): running at "
              << std::chrono::system_clock::now().time_since_epoch().count() / 1000000 << " ms wall\n";
  const auto rep = rt.run(job);
  std::cerr << "kafka_pipe(" << mode << (eos ? ", exactly-once" : "") << "): consumed " << st->consumed << " delivered "
            << sink->stats().delivered << " undelivered " << sink->undelivered() << " late "
            << rep.stage("window_sort").late + rep.stage("window").late << " commits " << st->commits << " errors "
            << rep.errors.size() + sink->errors().size() << "\n";
  if (rp)
    std::cerr << "kafka_pipe: repartition " << rp->topic() << ": delivered " << rp->writer().stats().delivered
              << " undelivered " << rp->writer().undelivered() << " errors " << rp->writer().errors().size()
              << "; read back " << rp->source().stats()->consumed << "\n";
  if (rp && !rp->writer().errors().empty())
    std::cerr << "kafka_pipe: first repartition error: " << rp->writer().errors().front() << "\n";
  if (!sink->errors().empty()) std::cerr << "kafka_pipe: first error: " << sink->errors().front() << "\n";
  if (!rep.errors.empty()) std::cerr << "kafka_pipe: first run error: " << rep.errors.front() << "\n";
  const bool rp_ok = !rp || (rp->writer().undelivered() == 0 && rp->writer().errors().empty());
  return rp_ok && sink->undelivered() == 0 && sink->errors().empty() && rep.errors.empty() ? 0 : 1;
}

// kafka_mode.cpp — netflow's Kafka mode: the probe (pcap -> topic) and the analysis
// (topic -> key_by(5-tuple) -> tumbling window count -> topic). See kafka_mode.hpp.
#include "kafka_mode.hpp"
#include "cli_checks.hpp"
#include "flow_row.hpp"
#include "packet_codec.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <iostream>
#include <unordered_map>

#include <rill/connectors/kafka_sink.hpp>
#include <rill/connectors/kafka_source.hpp>
#include <rill/pcap.hpp>
#include <rill/rill.hpp>

using namespace std::chrono_literals;

namespace netflow_kafka {
namespace {

/// The message key: direction-normalised 5-tuple as text.
std::string tuple_key(const rill::flow_key& k) {
  return std::string(rill::to_string(k.proto)) + " " + k.a_endpoint() + " " + k.b_endpoint();
}

using netflow::flow_row;
using netflow::row_json;

/// A sink's errors without one line per record (a broker lost mid-run fails every record
/// it held): the first in full, how many more, and the last (the flush timeout's count of
/// undelivered records, when there is one). The summary counts them exactly.
void print_errors(const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  std::cerr << "netflow: " << errors.front() << '\n';
  if (errors.size() > 2)
    std::cerr << "netflow: " << errors.size() - 2 << " more errors like it (\"failed\" in the summary counts the records)\n";
  if (errors.size() > 1) std::cerr << "netflow: " << errors.back() << '\n';
}

int probe(const options& o, const std::vector<std::string>& inputs, rill::runtime& rt) {
  if (o.topic.empty()) {
    std::cerr << "netflow: --probe needs --topic\n";
    return 2;
  }
  std::shared_ptr<rill::kafka_sink<rill::packet>> sink;
  try {
    sink = std::make_shared<rill::kafka_sink<rill::packet>>(
        // Kafka timestamp = produce time, the capture time stays in the value: a broker
        // deletes records by timestamp (retention.ms), and a capture may be years old.
        // start_timeout: the analysis' wait for a broker (kafka_source's default, 10 s),
        // so an unreachable broker fails here, not after a delivery timeout per packet.
        rill::kafka_sink_options{.brokers = o.brokers, .topic = o.topic,
                                 .start_timeout = rill::kafka_source_options{}.start_timeout,
                                 .timestamps = rill::kafka_sink_options::timestamp_source::produce_time},
        [](const rill::packet& p) { return rill::kafka_message_out{tuple_key(p.key), encode(p)}; });
  } catch (const std::runtime_error& e) {  // no broker answered: a run-time failure
    std::cerr << "netflow: --probe: " << e.what() << "; the capture was not read, 0 packets published\n";
    return 1;
  }
  rill::pcap_source src{inputs};
  auto stats = src.stats();
  const auto rep = rt.run(rill::from(std::move(src)).sink(sink, "kafka_sink"));
  std::cerr << nlohmann::json{{"packets", stats->packets.load()},
                              {"published", sink->stats().delivered.load()},
                              {"failed", sink->stats().failed.load()},
                              {"undelivered", sink->undelivered()},
                              {"errors", rep.errors}}
                   .dump()
            << '\n';
  print_errors(sink->errors());
  return rep.errors.empty() && sink->errors().empty() && sink->undelivered() == 0 ? 0 : 1;
}

int analyse(const options& o, std::chrono::nanoseconds window, std::chrono::nanoseconds delay,
            rill::runtime& rt) {
  if (o.from.empty() || o.to.empty()) {
    std::cerr << "netflow: Kafka analysis needs --from TOPIC and --to TOPIC (or --probe)\n";
    return 2;
  }
  // --idle-exit takes the syntax of --window and --max-delay.
  const auto idle = rill_examples::parse_duration(o.idle_exit, "--idle-exit");
  using in_rec = rill::kafka_record<std::string, rill::packet>;
  const auto guarantee =
      o.exactly_once ? rill::processing_guarantee::exactly_once : rill::processing_guarantee::at_least_once;
  rill::kafka_source<std::string, rill::packet> src{{.brokers = o.brokers,
                                                     .group = o.group,
                                                     .topics = {o.from},
                                                     .commit_interval = 1s,
                                                     .instance_id = o.exactly_once ? o.instance : std::string{},
                                                     .guarantee = guarantee},
                                                    nullptr,
                                                    decode};
  src.event_time_from([](const in_rec& r) { return r.value.time; });
  std::atomic<std::uint64_t> bad{0};
  src.on_error([&bad](const rill::kafka_bad_message& m) {
    // The first 10 are named (topic, partition, offset), as enrichment does; the report's
    // "bad" has the total (it named only the first one).
    const auto n = bad.fetch_add(1);
    if (n < 10)
      std::cerr << "netflow: " << m.topic << " partition " << m.partition << " offset " << m.offset << ": "
                << m.what << '\n';
    else if (n == 10)
      std::cerr << "netflow: more bad records: only the first 10 are named, \"bad\" in the report counts all\n";
  });
  auto stats = src.stats();
  const rill::kafka_sink_options sink_options{
      .brokers = o.brokers, .topic = o.to,  // produce time: as the probe's
      .timestamps = rill::kafka_sink_options::timestamp_source::produce_time, .guarantee = guarantee};
  auto to_message = [](const flow_row& r) { return rill::kafka_message_out{tuple_key(r.key), row_json(r)}; };
  // Exactly-once: the transactional sink commits the source's offsets; made before the run
  // opens the source (init_transactions fences a predecessor with the same instance).
  auto sink = o.exactly_once ? std::make_shared<rill::kafka_sink<flow_row>>(sink_options, src, to_message)
                             : std::make_shared<rill::kafka_sink<flow_row>>(sink_options, to_message);
  auto job = netflow::count_flows(rill::from(std::move(src)).map([](in_rec&& r) { return std::move(r.value); }),
                                  window, delay)
                 .sink(sink, "kafka_sink");
  // --idle-exit: a bounded run for tests and benchmarks (graceful stop: windows fire,
  // flows are delivered, offsets committed) once every assigned partition was read to its
  // end and nothing came for that long; 10x as long before the first record (the
  // runtime's default grace). A bad message is input too (rill::kafka_input_activity).
  const auto rep = rt.run(job, {.stop_when_idle = idle, .activity = rill::kafka_input_activity(stats)});
  std::cerr << nlohmann::json{{"packets", stats->consumed.load()},
                              {"bad", stats->bad.load()},
                              {"late", rep.stage("window").late},
                              {"catch_up", rep.stage("window").catch_up},
                              {"rows", sink->stats().accepted.load()},
                              {"delivered", sink->stats().delivered.load()},
                              {"failed", sink->stats().failed.load()},
                              {"undelivered", sink->undelivered()},
                              {"commits", stats->commits.load()},
                              {"elapsed_s", rep.elapsed_s},
                              {"errors", rep.errors}}
                   .dump()
            << '\n';
  print_errors(sink->errors());
  return rep.errors.empty() && sink->errors().empty() && sink->undelivered() == 0 ? 0 : 1;
}

}  // namespace

void add_options(CLI::App& app, options& o) {
  app.add_flag("--probe", o.probe, "Kafka: publish the decoded packets of --input to --topic");
  app.add_option("--brokers", o.brokers, "Kafka bootstrap servers HOST:PORT (Kafka mode)");
  // Topic names are checked while parsing (exit 2 naming the option), not by the broker.
  app.add_option("--topic", o.topic, "Kafka: --probe's destination topic")->check(rill_examples::kafka_topic());
  app.add_option("--from", o.from, "Kafka: topic of packets to analyse")->check(rill_examples::kafka_topic());
  app.add_option("--to", o.to, "Kafka: topic the flow rows (JSON) go to")->check(rill_examples::kafka_topic());
  app.add_option("--group", o.group, "Kafka: consumer group of the analysis (default netflow)");
  app.add_option("--idle-exit", o.idle_exit,
                 "Kafka: stop after this long without input, e.g. 3s, 500ms, 2m (0 = run until SIGTERM)");
  app.add_flag("--exactly-once", o.exactly_once,
               "Kafka: commit the flows and the input offsets together in transactions (read_committed readers "
               "see each flow once, across crashes)");
  app.add_option("--instance", o.instance,
                 "Kafka, --exactly-once: this process's id in the group (static membership and transactional id; "
                 "a restart with the same id fences the old process)");
}

int run(const options& o, const std::vector<std::string>& inputs, std::chrono::nanoseconds window,
        std::chrono::nanoseconds delay, std::size_t workers, const std::string& topology) {
  if (o.brokers.empty()) {
    std::cerr << "netflow: Kafka mode needs --brokers HOST:PORT\n";
    return 2;
  }
  try {
    rill::runtime rt{{.workers = workers, .topology = topology, .handle_signals = true}};
    return o.probe ? probe(o, inputs, rt) : analyse(o, window, delay, rt);
  } catch (const CLI::Error& e) {
    std::cerr << "netflow: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {  // broker unreachable, bad capture, bad config
    std::cerr << "netflow: " << e.what() << '\n';
    return 2;
  }
}

}  // namespace netflow_kafka

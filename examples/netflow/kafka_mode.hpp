// kafka_mode.hpp — netflow's Kafka mode, kept apart from the file mode in
// netflow.cpp:
//   netflow --probe --input FILE --brokers HOST:PORT --topic packets
//       publishes every decoded packet (binary, kafka_mode.cpp) keyed by its
//       direction-normalised 5-tuple ("tcp 10.0.0.1:80 10.0.0.2:5000"); Kafka timestamp =
//       produce time (the capture time is in the value)
//   netflow --brokers HOST:PORT --from packets --to flows [--group G] [--idle-exit 3s]
//       the file mode's analysis from Kafka to Kafka: one message per conversation and
//       window, key = 5-tuple, value = the same JSON line the file mode writes;
//       at-least-once (offsets committed after the flows' delivery reports); with
//       --exactly-once [--instance ID] the flows and the input offsets commit together in
//       Kafka transactions (transactional.id "<group>-<ID>", static member "<ID>-<worker>";
//       read the flows with isolation.level=read_committed)
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace netflow_kafka {

struct options {
  bool probe = false;
  std::string brokers, topic, from, to, group = "netflow";
  /// analysis: stop after this long without input (10x that before the first record;
  /// 0 = run until SIGTERM); the syntax of --window ("3s", "500ms", "2m")
  std::string idle_exit = "0";
  /// analysis: rill::processing_guarantee::exactly_once (docs/design.md "Exactly-once")
  bool exactly_once = false;
  /// analysis: this process's instance in the group (static membership, transactional id)
  std::string instance = "1";
  bool active() const { return !brokers.empty() || probe; }
};

/// Adds --probe, --brokers, --topic, --from, --to, --group, --idle-exit, --exactly-once,
/// --instance to `app`.
void add_options(CLI::App& app, options& o);

/// Runs the probe or the analysis. Returns the exit status: 0 ok; 1 delivery/read errors,
/// or (probe) no broker answering within 10 s; 2 bad arguments, or (analysis) no broker
/// answering within 10 s.
int run(const options& o, const std::vector<std::string>& inputs, std::chrono::nanoseconds window,
        std::chrono::nanoseconds delay, std::size_t workers, const std::string& topology);

}  // namespace netflow_kafka

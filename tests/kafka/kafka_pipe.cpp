// kafka_pipe — the pipeline process the crash/SIGTERM tests start, kill and restart:
//   kafka_pipe BROKERS IN OUT GROUP SLOW_US [map|window]
// map (default):
//   kafka_source(IN, GROUP) -> map(value = "v" + value, SLOW_US µs of simulated work)
//   -> kafka_sink(OUT)
// window (at-least-once through an exchange and open windows):
//   kafka_source(IN, GROUP, event time = value ms, "end" = 1 h)
//   -> map(SLOW_US µs) -> key_by(key) -> window_sort(1 s, max delay 2 s; late records go
//   straight to the sink with their ack) -> flat_map(window -> its records, value "w" + value)
//   -> kafka_sink(OUT)
// 2 workers, until SIGTERM/SIGINT (graceful: drain, windows fire, flush, commit).
// Exit 0 when everything accepted was delivered and committed, 1 otherwise.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "rill/connectors/kafka_sink.hpp"
#include "rill/connectors/kafka_source.hpp"
#include "rill/operators/stream.hpp"

using namespace std::chrono_literals;
using rec = rill::kafka_record<std::string, std::string>;

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::cerr << "usage: kafka_pipe BROKERS IN OUT GROUP SLOW_US [map|window]\n";
    return 2;
  }
  const std::string brokers = argv[1];
  const auto slow = std::chrono::microseconds{std::atoll(argv[5])};
  const std::string mode = argc == 7 ? argv[6] : "map";
  auto sink = std::make_shared<rill::kafka_sink<rec>>(rill::kafka_sink_options{.brokers = brokers, .topic = argv[3],
                                                            // outlives a broker restart (BrokerRestart test):
                                                            // scripts/kafka restart may take 30 s (clean stop)
                                                            // + 90 s (start) on a loaded machine, and messages
                                                            // produced just before the stop wait all of it plus
                                                            // the reconnect backoff (librdkafka's default, 300 s)
                                                            .delivery_timeout = std::chrono::milliseconds{300000}});
  rill::kafka_source<> src{{.brokers = brokers, .group = argv[4], .topics = {argv[2]},
                            .commit_interval = std::chrono::milliseconds{200},
                            // a killed member is noticed after 6 s (broker minimum), not 45 s
                            .config = {{"session.timeout.ms", "6000"}}}};
  auto st = src.stats();
  auto work = [slow](rec&& r) {
    if (slow.count()) std::this_thread::sleep_for(slow);  // simulated work
    return std::move(r);
  };
  rill::job job = [&] {
    if (mode == "window") {
      src.event_time_from([](const rec& r) {
        return rill::event_time{r.value == "end" ? std::chrono::milliseconds{3600000}
                                                 : std::chrono::milliseconds{std::stoll(r.value)}};
      });
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
  const auto rep = rt.run(job);
  std::cerr << "kafka_pipe(" << mode << "): consumed " << st->consumed << " delivered "
            << sink->stats().delivered << " undelivered " << sink->undelivered() << " late "
            << rep.stage("window_sort").late << " commits " << st->commits << " errors "
            << rep.errors.size() + sink->errors().size() << "\n";
  if (!sink->errors().empty()) std::cerr << "kafka_pipe: first error: " << sink->errors().front() << "\n";
  return sink->undelivered() == 0 && sink->errors().empty() && rep.errors.empty() ? 0 : 1;
}

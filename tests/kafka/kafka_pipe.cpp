// kafka_pipe — the pipeline process the crash/SIGTERM tests start, kill and restart:
//   kafka_pipe BROKERS IN OUT GROUP SLOW_US
// kafka_source(IN, GROUP) -> map(value = "v" + value, SLOW_US µs of simulated work)
// -> kafka_sink(OUT), 2 workers, until SIGTERM/SIGINT (graceful: drain, flush, commit).
// Exit 0 when everything accepted was delivered and committed, 1 otherwise.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "rill/connectors/kafka_sink.hpp"
#include "rill/connectors/kafka_source.hpp"
#include "rill/operators/stream.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: kafka_pipe BROKERS IN OUT GROUP SLOW_US\n";
    return 2;
  }
  using rec = rill::kafka_record<std::string, std::string>;
  const std::string brokers = argv[1];
  const auto slow = std::chrono::microseconds{std::atoll(argv[5])};
  auto sink = std::make_shared<rill::kafka_sink<rec>>(rill::kafka_sink_options{.brokers = brokers, .topic = argv[3]});
  rill::kafka_source<> src{{.brokers = brokers, .group = argv[4], .topics = {argv[2]},
                            .commit_interval = std::chrono::milliseconds{200},
                            // a killed member is noticed after 6 s (broker minimum), not 45 s
                            .config = {{"session.timeout.ms", "6000"}}}};
  auto st = src.stats();
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false, .handle_signals = true}};
  const auto rep = rt.run(rill::from(std::move(src))
                              .map([slow](rec&& r) {
                                if (slow.count()) std::this_thread::sleep_for(slow);  // simulated work
                                r.value = "v" + r.value;
                                return std::move(r);
                              })
                              .sink(sink));
  std::cerr << "kafka_pipe: consumed " << st->consumed << " delivered " << sink->stats().delivered
            << " undelivered " << sink->undelivered() << " commits " << st->commits << " errors "
            << rep.errors.size() + sink->errors().size() << "\n";
  return sink->undelivered() == 0 && sink->errors().empty() && rep.errors.empty() ? 0 : 1;
}

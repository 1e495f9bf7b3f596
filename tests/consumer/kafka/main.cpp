// Built against an installed rill with rill::kafka: constructs a kafka_sink (a librdkafka
// producer; it connects in the background, so no broker is needed) and checks that
// librdkafka itself rejects an unknown property through rill's configuration path.
// Prints "ok" and exits 0.
#include <rill/connectors/kafka_sink.hpp>
#include <rill/rill.hpp>

#include <iostream>
#include <stdexcept>
#include <string>

int main() {
  using sink_t = rill::kafka_sink<rill::kafka_record<std::string, std::string>>;
  {
    sink_t sink{{.brokers = "127.0.0.1:1", .topic = "rill-consumer"}};
  }
  try {
    sink_t bad{{.brokers = "127.0.0.1:1", .topic = "rill-consumer",
                .config = {{"no.such.property", "1"}}}};
    std::cerr << "kafka_consumer: librdkafka accepted no.such.property\n";
    return 1;
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).find("no.such.property") == std::string::npos) {
      std::cerr << "kafka_consumer: unexpected error: " << e.what() << '\n';
      return 1;
    }
  }
  std::cout << "ok\n";
  return 0;
}

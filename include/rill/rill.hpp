// rill/rill.hpp — the pipeline author's umbrella: runtime, sources, the DSL and its
// operators (core and operators layers), and ordered_sink (event-time ordered output,
// no domain type). Target rill::rill. Domain connectors have their own headers:
// <rill/pcap.hpp> (packets and captures), <rill/connectors/...> (TCP, files),
// <rill/connectors/kafka_source.hpp>, kafka_sink.hpp, kafka_repartition.hpp (rill::kafka), and
// <rill/operators/enrich.hpp> with a transport from <rill/connectors/http_transport.hpp>
// (rill::http or rill::cpprest).
//
// Example (namespace scope; bytes per user and 10 s tumbling window; compiled by
// tests/banner_examples.py, its output checked by tests/operators/banner_examples_test.cpp):
//   #include <rill/rill.hpp>
//   using namespace std::chrono_literals;
//   struct click { std::string user; std::uint64_t bytes; };
//   int main() {
//     std::vector<rill::record<click>> in{{{"ann", 100}, rill::event_time{1s}},
//                                         {{"bob", 20}, rill::event_time{3s}},
//                                         {{"ann", 5}, rill::event_time{12s}}};
//     rill::runtime rt{{.workers = 2}};
//     rt.run(rill::from(rill::vector_source<click>{in})
//                .key_by([](const click& c) { return c.user; })
//                .window(rill::tumbling{10s}, {.max_delay = 2s})
//                .sum([](const click& c) { return c.bytes; })
//                .sink([](rill::keyed_window_result<std::string, std::uint64_t>&& r) {
//                  // (ann, 0 s, 10 s, 100), (bob, 0 s, 10 s, 20), (ann, 10 s, 20 s, 5):
//                  // r.key, r.start, r.end, r.value; one call per (key, window)
//                }));
//   }
#pragma once

#include "rill/core/error.hpp"
#include "rill/core/record.hpp"
#include "rill/core/metrics.hpp"
#include "rill/core/prometheus_server.hpp"
#include "rill/core/runtime.hpp"
#include "rill/core/source.hpp"
#include "rill/core/time.hpp"
#include "rill/core/topology.hpp"
#include "rill/core/watermark.hpp"
#include "rill/operators/join.hpp"
#include "rill/operators/stream.hpp"
#include "rill/operators/two_phase.hpp"
#include "rill/operators/window_sort.hpp"
#include "rill/connectors/ordered_sink.hpp"

// rill/rill.hpp — everything a pipeline author needs: runtime, DSL, operators, connectors.
//
// Example (packets and bytes per conversation and 10 s tumbling window; the same code is
// compiled by tests/operators/banner_examples_test.cpp):
//   #include <rill/rill.hpp>
//   using namespace std::chrono_literals;
//   struct bytes_and_packets {
//     struct accumulator { std::uint64_t packets = 0, bytes = 0; };
//     accumulator init() const { return {}; }
//     void add(accumulator& a, const rill::packet& p) const { ++a.packets; a.bytes += p.wire_len; }
//     accumulator result(const accumulator& a) const { return a; }
//   };
//   int main() {
//     rill::runtime rt{{.workers = 2}};
//     auto j = rill::from(rill::pcap_source{{"capture.pcap"}})
//                  .key_by([](const rill::packet& p) { return p.key; })
//                  .window(rill::tumbling{10s}, {.max_delay = 2s})
//                  .aggregate(bytes_and_packets{})
//                  .sink([](rill::keyed_window_result<rill::flow_key,
//                                                     bytes_and_packets::accumulator>&& r) {
//                    /* r.key, r.start, r.end, r.value.packets, r.value.bytes */
//                  });
//     rt.run(j);
//   }
#pragma once

#include "rill/core/error.hpp"
#include "rill/core/record.hpp"
#include "rill/core/runtime.hpp"
#include "rill/core/source.hpp"
#include "rill/core/time.hpp"
#include "rill/core/topology.hpp"
#include "rill/core/watermark.hpp"
#include "rill/operators/stream.hpp"
#include "rill/operators/window_sort.hpp"
#include "rill/connectors/packet.hpp"
#include "rill/connectors/pcap_reader.hpp"
#include "rill/connectors/ordered_sink.hpp"
#include "rill/connectors/pcap_source.hpp"
#include "rill/connectors/pcap_frame.hpp"
#include "rill/connectors/pcap_frame_source.hpp"

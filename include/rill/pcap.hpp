// rill/pcap.hpp — packets and captures: rill::packet and rill::flow_key (decoded
// Ethernet/IP headers), pcap_filter (BPF capture filters), pcap_reader, pcap_source (a
// capture file or a live interface), pcap_frame and pcap_frame_source (undecoded
// frames). Target rill::rill (libpcap).
//
// Example (namespace scope; packets and bytes per conversation and 10 s tumbling window;
// compiled by tests/banner_examples.py, run by tests/operators/banner_examples_test.cpp):
//   #include <rill/pcap.hpp>
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

#include "rill/connectors/packet.hpp"
#include "rill/connectors/pcap_filter.hpp"
#include "rill/connectors/pcap_frame.hpp"
#include "rill/connectors/pcap_frame_source.hpp"
#include "rill/connectors/pcap_reader.hpp"
#include "rill/connectors/pcap_source.hpp"

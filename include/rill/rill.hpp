// rill/rill.hpp — everything a pipeline author needs: runtime, DSL, operators, connectors.
//
// Example:
//   #include <rill/rill.hpp>
//   using namespace std::chrono_literals;
//   int main() {
//     rill::runtime rt{{.workers = 2}};
//     auto j = rill::from(rill::pcap_source{{"capture.pcap"}})
//                  .key_by([](const rill::packet& p) { return p.key; })
//                  .window_sort({.length = 10s, .max_delay = 2s})
//                  .sink([](rill::window<rill::packet>&& w) { /* ... */ });
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

// report.hpp — netflow --report FILE.html: one self-contained page (inline SVG and CSS, a
// five-line inline script; no network fetch) with packets/s and bytes/s by protocol over
// time, the top-20 conversations by bytes, and the run's summary.
//
//   netflow::traffic_report rep{window};
//   rep.add(row);                          // every output row (the sink's lock held)
//   rep.write_html(out, summary_json);     // after the run
//
// Rates come from the rows: a window's packets (bytes) of one protocol divided by the
// window length, plotted at the window's start. Thread safety: add() from one thread at a
// time (netflow calls it inside ordered_sink's writer); write_html() after the run.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <ostream>

#include "flow_row.hpp"

namespace netflow {

class traffic_report {
 public:
  explicit traffic_report(std::chrono::nanoseconds window) : window_(window) {}
  /// One output row (window, conversation, packets, bytes).
  void add(const flow_row& r);
  /// The page, UTF-8 HTML5. `summary`: netflow's summary object (printed as a table).
  void write_html(std::ostream& out, const nlohmann::json& summary) const;

 private:
  static constexpr std::size_t protos = 5;  // tcp, udp, icmp, icmpv6, other
  struct totals {
    std::array<std::uint64_t, protos> packets{}, bytes{};
  };
  std::chrono::nanoseconds window_;
  std::map<std::int64_t, totals> by_window_;  // window start, ns since the epoch
  std::map<rill::flow_key, std::pair<std::uint64_t, std::uint64_t>> conversations_;  // packets, bytes
};

}  // namespace netflow

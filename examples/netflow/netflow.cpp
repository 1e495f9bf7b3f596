// netflow — the main job: per-window, per-conversation flow records of packet captures.
//
//   pcap_source (--filter: BPF; a classic pcap file: one split per worker; pcapng, FIFO,
//     --interface: one split; --rebalance: pcap_frame_source -> rebalance -> decode)
//     -> filter(IP only) -> key_by(5-tuple)
//     -> window(tumbling --window, --max-delay; --conversations: one window)
//     -> aggregate(flow_stats: packets, bytes, TCP flags per direction; first, last)
//     (--two-phase, capture files on 2 or more workers: folded on the decoding worker
//     first and merged per flow after key_by, rill::two_phase_aggregate)
//     -> ordered_sink (JSON lines or CSV, sorted by window then conversation)
//
// Run with no arguments it reads real captures that Debian packages ship (python3-dpkt's
// http.pcap and dns_icmp.pcap, sip-tester's g711a.pcap) as three inputs merged by
// capture time. Output lines (flow_row.hpp's row_fields): window_start_ns, window_end_ns
// (not with --conversations), proto, a_ip, a_port, b_ip, b_port, packets, bytes,
// a_to_b_packets, a_to_b_bytes, b_to_a_packets, b_to_a_bytes, a_to_b_tcp_flags,
// b_to_a_tcp_flags, first_ns, last_ns. --format csv writes them as CSV after a header
// line. The summary (stderr, --summary FILE, or --summary - for stdout when --output is a
// file) is one JSON object, with the packets --filter rejected ("filtered") and the top
// 10 conversations by bytes ("top_talkers").
// Exit status: 0 on success; 1 when a capture had a read error (every record before it
// was still processed and written), an enrichment lookup failed for good (the row is
// written with null enrichment fields) or writing --output/--summary failed (a closed
// output pipe too: SIGPIPE is ignored, EPIPE stops the run); 2 on bad arguments (the
// message names the option and the value; a --filter libpcap cannot compile, with its
// message) or an unreadable input (a FIFO's header is read with its records: a FIFO that
// carries no capture is a read error, 1).
// --enrich [URL] adds "service" (IANA name of the lower port, /etc/services) and
// "a_class"/"b_class" (IANA special-purpose address registries) to every row, through
// three batched enrich stages; without URL an enrichment service runs in-process.
// --metrics-port PORT serves the runtime's metrics to Prometheus on 127.0.0.1 while it runs;
// --report FILE.html writes a self-contained page of the traffic (report.hpp);
// --progress prints packets and packets/s every second: one updating line on a terminal,
// plain lines when stderr is not one.
//
// The Kafka modes (kafka_mode.hpp) stay in this program: they take the same --input,
// --window, --max-delay, --workers and --topology, and run the same pipeline
// (flow_row.hpp's count_flows), so the flow types and the job exist once.
#include <CLI/CLI.hpp>
#include <absl/container/btree_map.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <rill/connectors/http_transport.hpp>
#include <rill/pcap.hpp>
#include <rill/rill.hpp>
#include <rill/operators/enrich.hpp>

#include "cli_checks.hpp"
#include "enrichment_service.hpp"
#include "flow_row.hpp"
#include "ipfix_export.hpp"
#include "report.hpp"
#include "reporting.hpp"
#include "kafka_mode.hpp"  // --probe / --brokers: Kafka mode

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::vector<std::string> default_inputs = {
    "/usr/share/doc/python3-dpkt/examples/data/http.pcap",
    "/usr/share/doc/python3-dpkt/examples/data/dns_icmp.pcap",
    "/usr/share/sip-tester/g711a.pcap",
};

using rill_examples::parse_duration;
using netflow::flow_row;

/// Key of the service lookup: "PORT/PROTO" of the lower port (the usual server side) for
/// TCP/UDP; "" (answered null) otherwise.
std::string service_key(const flow_row& r) {
  if (!r.key.a_port || (r.key.proto != rill::ip_proto::tcp && r.key.proto != rill::ip_proto::udp))
    return "";
  return std::to_string(std::min(*r.key.a_port, *r.key.b_port)) + "/" +
         std::string(rill::to_string(r.key.proto));
}

/// Rows of one window by conversation key. The sink sorts a window's rows by the keys'
/// order_words (rill::keyed_order), which order them as `<` does.
struct by_key {
  bool operator()(const flow_row& a, const flow_row& b) const { return a.key < b.key; }
  std::array<std::uint64_t, 5> sort_key(const flow_row& r) const noexcept { return r.key.order_words(); }
};
static_assert(rill::keyed_order<by_key, flow_row>);

/// A conversation's packets and bytes over every window (the summary's top talkers).
struct conversation_totals {
  std::uint64_t packets = 0, bytes = 0;
};
using conversation_map = absl::btree_map<rill::flow_key, conversation_totals>;

/// One worker's conversation totals, ordered by key. The sink formats a worker's rows of
/// a window in key order, so a row's entry is the one after the last row's, or a new one
/// just before it: with that position as the hint, btree_map's try_emplace finds or
/// inserts it in amortized O(1) and walks the tree front to back, where a hash map
/// missed the cache on nearly every row. Rows out of that order cost a search (O(log n)).
struct conversation_counts {
  conversation_map totals;
  conversation_map::iterator next;  ///< after the last entry added to; valid once totals holds one
  void add(const flow_row& r) {
    auto it = totals.try_emplace(totals.empty() ? totals.end() : next, r.key);
    it->second.packets += r.packets;
    it->second.bytes += r.bytes;
    next = std::next(it);  // an insert invalidates iterators: taken after it
  }
};

/// Formats one line per row (JSON or CSV) and counts each conversation's totals, on the
/// worker that made the row (or on the sink's writer thread: ordered_sink_options::
/// sort_on_workers); writes the lines in order on the ordered_sink's writer thread, one
/// row at a time. The aggregation gives exactly one row per (window, conversation).
struct line_writer {
  std::ostream* out;
  std::vector<conversation_counts>* conversations;  ///< per worker: format() for w adds to [w]
  std::size_t* lines;
  netflow::traffic_report* report;  ///< --report: every row; null otherwise
  netflow::row_format fields;
  bool csv = false;
  netflow::ipfix_exporter* ipfix;  ///< --ipfix: every row, flushed at each new window; null otherwise
  rill::event_time* ipfix_window;  ///< window start of the rows ipfix holds
  /// Called once, at the first failed write (e.g. EPIPE: the reader of a pipe closed it),
  /// with that write's errno: there is no point reading on.
  std::function<void(int)> on_write_error;
  /// Appends row `r`'s line to `bytes`; counts it in worker `worker`'s conversation totals
  /// (the sink never calls this for one worker on two threads at once).
  void format(std::size_t worker, rill::event_time, const flow_row& r, std::string& bytes) const {
    if (csv) netflow::append_row_csv(bytes, r, fields);
    else netflow::append_row_json(bytes, r, fields);
    bytes += '\n';
    (*conversations)[worker].add(r);
  }
  void operator()(rill::event_time, const flow_row& r, std::string_view line) const {
    const bool was_ok = bool(*out);
    errno = 0;
    out->write(line.data(), std::streamsize(line.size()));
    if (was_ok && !*out && on_write_error) on_write_error(errno);
    ++*lines;
    if (ipfix) {
      if (r.window_start != *ipfix_window) ipfix->flush();  // the previous window is complete
      *ipfix_window = r.window_start;
      ipfix->add(r);
    }
    if (report) report->add(r);
  }
};

/// The command-line option behind a rill::config_error key, so that a value the checks
/// below let through is still reported under the name the user typed.
std::string option_of(const std::string& key) {
  static const std::map<std::string, std::string> names = {
      {"window.size", "--window"}, {"window.max_delay", "--max-delay"},
      {"runtime.workers", "--workers"},   {"runtime.topology", "--topology"},
      {"runtime.metrics_port", "--metrics-port"}};
  const auto it = names.find(key);
  return it == names.end() ? key : it->second;
}
/// netflow's command line; parse() returns the exit status when the program should
/// exit without running (help: 0, bad arguments: 2).
struct cli {
  std::vector<std::string> inputs;
  std::string interface, output = "-", summary_path, topology, enrich_url, report_path, format = "jsonl", filter;
  std::string ipfix_host, ipfix_port;  ///< --ipfix HOST:PORT
  std::chrono::nanoseconds window{}, delay{};
  std::size_t workers = 0;
  std::uint16_t metrics_port = 0;
  std::int64_t stall_ms = 100;
  bool progress = false, rebalance = false, enrich = false, conversations = false, two_phase = false;
  netflow_kafka::options kafka;

  std::optional<int> parse(int argc, char** argv) {
    CLI::App app{"netflow: per-window, per-conversation packet/byte counts of packet captures"};
    // Every message starts "netflow: ", as the program's other errors do.
    app.failure_message([](const CLI::App* self, const CLI::Error& e) {
      return "netflow: " + CLI::FailureMessage::simple(self, e);
    });
    std::string window_text = "10s", delay_text = "2s";
    auto* input_opt =
        app.add_option("--input,-i", inputs, "capture file (pcap or pcapng); repeat for several inputs")
            ->check(CLI::ExistingFile);
    // One source or the other: both given is a usage error (exit 2), not a silent choice.
    app.add_option("--interface", interface, "capture live from this interface instead (libpcap)")
        ->excludes(input_opt);
    app.add_option("--filter", filter,
                   "capture filter: a BPF expression (pcap-filter(7), as tcpdump's), e.g. \"tcp port 80\"");
    std::string ipfix_text;
    app.add_option("--ipfix", ipfix_text,
                   "send every flow record as IPFIX over UDP to this collector when its window closes, "
                   "e.g. 127.0.0.1:4739 or [::1]:4739 (nfcapd -p PORT)");
    app.add_option("--window", window_text, "tumbling window length (e.g. 10s, 500ms)");
    app.add_option("--max-delay", delay_text, "maximum out-of-order delay (watermark lag)");
    app.add_option("--output,-o", output, "output file (one row per line), or - for stdout");
    app.add_option("--format", format, "output rows as JSON lines (jsonl, the default) or CSV with a header line (csv)")
        ->check(CLI::IsMember({"jsonl", "csv"}));
    auto* conv_opt = app.add_flag("--conversations", conversations,
                                  "one row per conversation over the whole capture (no windows), as tshark -z conv");
    app.add_option("--summary", summary_path,
                   "write the summary JSON here; - for stdout (then --output must be a file); "
                   "default: stderr");
    app.add_option("--workers,-w", workers,
                   "worker threads (default or 0: one per core; more workers than cores share the "
                   "cores, slower)")
        ->check(rill_examples::whole_number(0, std::int64_t(rill::max_workers), "0 = one per core"));
    app.add_option("--topology", topology, "synthetic topology, e.g. \"2 nodes x 2 cores\"");
    app.add_option("--report", report_path,
                   "write an HTML page (self-contained: charts of packets/s and bytes/s by protocol, "
                   "top-20 conversations, the summary) here after the run");
    app.add_option("--metrics-port", metrics_port,
                   "serve Prometheus metrics on 127.0.0.1:PORT/metrics while running (0 = off)");
    app.add_option("--stall-threshold", stall_ms,
                   "report a worker loop turn longer than this many ms on stderr (0 = off)")
        ->check(rill_examples::whole_number(0, 3'600'000, "0 = off"));
    app.add_flag("--progress", progress,
                 "print a progress line on stderr every second (packets, packets/s over that second)");
    auto* enrich_opt = app.add_option("--enrich", enrich_url,
                                      "add service name and address classes from the enrichment "
                                      "service at URL (POST JSON array); without URL: start one "
                                      "in-process on 127.0.0.1")
                           ->expected(0, 1);
    app.add_flag("--rebalance", rebalance,
                 "decode on every worker: the reader hands raw frames to the workers of its NUMA "
                 "node (numa_ring)");
    app.add_flag("--two-phase", two_phase,
                 "files on 2 or more workers: aggregate on the decoding worker first and move one "
                 "accumulator per flow and window to the flow's worker, not every packet (pays "
                 "with many packets per flow and window; bench/RESULTS.md)");
    netflow_kafka::add_options(app, kafka);
    // Kafka-only options need --brokers; file-mode-only options are refused in Kafka mode,
    // and --input in the analysis (CLI11 needs/excludes: exit 2 naming both).
    auto* brokers_opt = app.get_option("--brokers");
    for (const char* k : {"--probe", "--topic", "--from", "--to", "--group", "--idle-exit"})
      app.get_option(k)->needs(brokers_opt);
    for (const char* f : {"--output", "--summary", "--progress", "--rebalance", "--enrich", "--interface",
                          "--metrics-port", "--report", "--stall-threshold", "--format", "--conversations",
                          "--filter", "--ipfix", "--two-phase"})
      app.get_option(f)->excludes(brokers_opt);
    // The report plots rates per window: one window of the whole capture has none.
    conv_opt->excludes(app.get_option("--report"));
    input_opt->excludes(app.get_option("--from"));
    try {
      app.parse(argc, argv);
      if (conv_opt->count() > 0 && app.get_option("--window")->count() > 0)
        throw CLI::ValidationError("--conversations", "has no windows: leave out --window");
      if (!ipfix_text.empty()) {
        // HOST:PORT, the host of an IPv6 address in brackets; the port a number 1..65535.
        const auto colon = ipfix_text.rfind(':');
        std::string host = colon == std::string::npos ? "" : ipfix_text.substr(0, colon);
        if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
        const std::string port = colon == std::string::npos ? "" : ipfix_text.substr(colon + 1);
        const bool port_ok = !port.empty() && port.size() <= 5 &&
                             port.find_first_not_of("0123456789") == std::string::npos && std::stoi(port) >= 1 &&
                             std::stoi(port) <= 65535;
        if (host.empty() || !port_ok)
          throw CLI::ValidationError("--ipfix", "expected HOST:PORT with a port 1..65535, got \"" + ipfix_text + "\"");
        ipfix_host = host;
        ipfix_port = port;
      }
      window = parse_duration(window_text, "--window");
      delay = parse_duration(delay_text, "--max-delay");
      if (window <= 0ns) throw CLI::ValidationError("--window", "must be > 0, got \"" + window_text + "\"");
    } catch (const CLI::ParseError& e) {
      const int code = app.exit(e);  // prints help or the error
      return code == 0 ? 0 : 2;      // bad arguments: 2, as documented
    } catch (const CLI::Error& e) {
      app.exit(e);
      return 2;
    }
    // "-" is stdout for both files; they cannot share it (the rows and the summary would mix).
    if (summary_path == "-" && output == "-") {
      std::cerr << "netflow: --summary - writes the summary to stdout, which the rows use: give --output FILE "
                   "(or leave --summary out: the summary goes to stderr)\n";
      return 2;
    }
    if (inputs.empty() && interface.empty()) inputs = default_inputs;
    // An output on an input would truncate the capture before it is read; two outputs on
    // one file overwrite each other's bytes. Refused before any file is opened.
    const std::vector<std::pair<const char*, const std::string*>> outs = {
        {"--output", &output}, {"--summary", &summary_path}, {"--report", &report_path}};
    for (std::size_t i = 0; i < outs.size(); ++i) {
      for (const auto& in : inputs)
        if (in != "-" && rill_examples::same_file(*outs[i].second, in)) {  // "-": stdin
          std::cerr << "netflow: " << outs[i].first << " " << *outs[i].second << " is the input " << in
                    << ": writing it would destroy the capture\n";
          return 2;
        }
      for (std::size_t j = i + 1; j < outs.size(); ++j)
        if (rill_examples::same_file(*outs[i].second, *outs[j].second)) {
          std::cerr << "netflow: " << outs[i].first << " " << *outs[i].second << " and " << outs[j].first << " "
                    << *outs[j].second << " are the same file: give each its own\n";
          return 2;
        }
    }
    enrich = enrich_opt->count() > 0;
    if (conversations) window = netflow::whole_capture;
    return std::nullopt;
  }
};

/// Opens `path` for writing unless it is `dash_is` ("-" = stdout); false (message on
/// stderr naming `option` and the OS error) when it cannot be created. Created before the
/// job runs: one that cannot be created is a bad argument (exit 2); a later write is exit 1.
bool open_file(std::ofstream& f, const std::string& path, const char* option) {
  if (path.empty() || path == "-") return true;
  f.open(path);
  if (f) return true;
  std::cerr << "netflow: cannot create " << option << " " << path << ": " << std::strerror(errno) << '\n';
  return false;
}

/// The rows through three enrich stages (service name, a's and b's address class); a
/// failed lookup goes to `keep`.
template <class Rows, class Keep>
auto enriched(Rows&& rows, const std::string& url, Keep keep) {
  rill::enrich_options o{.url = url, .batch_size = 256, .max_in_flight = 4, .cache_entries = 4096,
                         .transport = rill::make_beast_transport};
  auto with_service = rill::enrich(
      std::forward<Rows>(rows), o, service_key,
      [](flow_row&& r, nlohmann::json&& v) { r.service = std::move(v); return std::move(r); }, keep);
  auto with_a = rill::enrich(
      std::move(with_service), o, [](const flow_row& r) { return r.key.a_ip_string(); },
      [](flow_row&& r, nlohmann::json&& v) { r.a_class = std::move(v); return std::move(r); }, keep);
  return rill::enrich(
      std::move(with_a), o, [](const flow_row& r) { return r.key.b_ip_string(); },
      [](flow_row&& r, nlohmann::json&& v) { r.b_class = std::move(v); return std::move(r); }, keep);
}

/// Every worker's conversations together: how many distinct ones, and the top talkers.
struct conversation_summary {
  std::size_t conversations = 0;
  json top_talkers = json::array();
};

/// Merges the workers' totals (each ordered by key; one key's totals on several workers
/// are added up) in one pass, keeping the `top` conversations by bytes (ties: by key),
/// largest first, as summary objects. O(n log workers + n log top) for n entries.
conversation_summary summarize(const std::vector<conversation_counts>& per_worker, std::size_t top) {
  using entry = std::pair<rill::flow_key, conversation_totals>;
  auto larger = [](const entry& x, const entry& y) {
    return x.second.bytes != y.second.bytes ? x.second.bytes > y.second.bytes : x.first < y.first;
  };
  std::vector<entry> best;  // a heap of the best so far, under `larger`: the worst on top
  auto offer = [&](const entry& e) {
    if (best.size() < top) {
      best.push_back(e);
      std::push_heap(best.begin(), best.end(), larger);
    } else if (top > 0 && larger(e, best.front())) {
      std::pop_heap(best.begin(), best.end(), larger);
      best.back() = e;
      std::push_heap(best.begin(), best.end(), larger);
    }
  };
  using cursor = std::pair<conversation_map::const_iterator, conversation_map::const_iterator>;
  auto after = [](const cursor& a, const cursor& b) { return b.first->first < a.first->first; };
  std::vector<cursor> heap;  // each worker's next entry, the smallest key on top
  for (const auto& w : per_worker)
    if (!w.totals.empty()) heap.emplace_back(w.totals.begin(), w.totals.end());
  std::make_heap(heap.begin(), heap.end(), after);
  conversation_summary out;
  std::optional<entry> cur;  // the key being added up
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    auto& c = heap.back();
    const auto& [k, t] = *c.first;
    if (cur && cur->first == k) {
      cur->second.packets += t.packets;
      cur->second.bytes += t.bytes;
    } else {
      if (cur) offer(*cur);
      cur = entry{k, t};
      ++out.conversations;
    }
    if (++c.first == c.second) heap.pop_back();
    else std::push_heap(heap.begin(), heap.end(), after);
  }
  if (cur) offer(*cur);
  std::sort_heap(best.begin(), best.end(), larger);
  for (const auto& [k, t] : best)
    out.top_talkers.push_back({{"proto", rill::to_string(k.proto)}, {"a", k.a_endpoint()}, {"b", k.b_endpoint()},
                               {"packets", t.packets}, {"bytes", t.bytes}});
  return out;
}

/// The summary object (see the banner). `late`: packets dropped as late (the window
/// stage's counter with one phase; the packets of the late partial aggregates with two).
json summary_of(const rill::pcap_source_stats& stats, const rill::run_report& rep,
                const conversation_summary& conversations, std::size_t lines, std::uint64_t enrich_errors, std::size_t workers, std::uint64_t late) {
  const auto p = stats.packets.load();
  json by_proto;
  for (auto proto : {rill::ip_proto::tcp, rill::ip_proto::udp, rill::ip_proto::icmp, rill::ip_proto::icmpv6,
                     rill::ip_proto::other})
    by_proto[std::string(rill::to_string(proto))] = stats.by_proto[std::size_t(proto)].load();
  return {{"packets", p},
          {"bytes", stats.bytes.load()},
          {"by_proto", by_proto},
          {"non_ip", stats.by_proto[std::size_t(rill::ip_proto::non_ip)].load()},
          {"truncated", stats.truncated.load()},
          {"filtered", stats.filtered.load()},
          {"late", late},
          {"conversations", conversations.conversations},
          {"windows_rows", lines},
          {"top_talkers", conversations.top_talkers},
          {"errors", rep.errors},
          {"enrich_errors", enrich_errors},
          {"workers", workers},
          {"elapsed_s", rep.elapsed_s},
          {"packets_per_s", rep.elapsed_s > 0 ? double(p) / rep.elapsed_s : 0.0}};
}

/// Flushes `out`; false (message on stderr) when a write to it failed.
bool finish_output(std::ostream& out, const std::string& name, int write_errno) {
  if (out) {
    errno = 0;
    out.flush();
    if (!out) write_errno = errno;
  }
  if (out) return true;
  std::cerr << "netflow: error: writing --output " << name << " failed"
            << (write_errno == EPIPE ? ": the reader closed the pipe (EPIPE)"
                : write_errno    ? std::string(": ") + std::strerror(write_errno)
                                 : std::string())
            << '\n';
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // A closed output pipe (netflow ... | head -1) is a write error (EPIPE: exit 1 with a
  // message, see line_writer), not a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  cli a;
  if (auto code = a.parse(argc, argv)) return *code;
  if (a.kafka.active()) return netflow_kafka::run(a.kafka, a.inputs, a.window, a.delay, a.workers, a.topology);
  std::ofstream file, summary_file, report_file;
  if (!open_file(file, a.output, "--output") || !open_file(summary_file, a.summary_path, "--summary") ||
      !open_file(report_file, a.report_path, "--report"))
    return 2;
  std::ostream& out = a.output == "-" ? std::cout : file;
  std::ostream& summary_out = a.summary_path.empty() ? std::cerr : a.summary_path == "-" ? std::cout : summary_file;

  try {
    // 1. The pipeline.
    rill::runtime rt{{.workers = a.workers, .topology = a.topology, .handle_signals = true,
                      .metrics_port = a.metrics_port,
                      .stall_threshold = std::chrono::milliseconds{a.stall_ms}}};
    // Capture files: each splittable file is read as one split per worker (interleaved
    // chunks of records), so every worker decodes. --rebalance reads them whole.
    auto src = !a.interface.empty() ? rill::pcap_source::live(a.interface, a.filter)
               : a.rebalance       ? rill::pcap_source{a.inputs, {.filter = a.filter}}
                                   : rill::pcap_source{a.inputs, {.splits_per_file = rt.worker_count(), .filter = a.filter}};
    // --rebalance on files: read raw frames, rebalance, decode on every worker (one
    // capture file is one split). Not the default: handing a frame to another worker
    // costs about what decoding it does (bench/RESULTS.md "decoding after a rebalance").
    rill::pcap_frame_source frames{a.inputs, a.filter};
    const bool spread = a.interface.empty() && a.rebalance;
    auto stats = spread ? frames.stats() : src.stats();
    std::unique_ptr<rill::svc::enrichment_service> local_service;
    if (a.enrich && a.enrich_url.empty()) {
      local_service = std::make_unique<rill::svc::enrichment_service>();
      local_service->start();
      a.enrich_url = local_service->url();
    }
    std::vector<conversation_counts> conversations(rt.worker_count());
    std::size_t lines = 0;
    int write_errno = 0;  // of the first failed write to --output
    netflow::traffic_report report{a.window};
    std::unique_ptr<netflow::ipfix_exporter> ipfix;
    if (!a.ipfix_host.empty()) {
      try {
        ipfix = std::make_unique<netflow::ipfix_exporter>(a.ipfix_host, a.ipfix_port);
      } catch (const std::runtime_error& e) {
        std::cerr << "netflow: --ipfix: " << e.what() << '\n';
        return 2;
      }
    }
    rill::event_time ipfix_window = rill::event_time::min();
    const netflow::row_format format{.windows = !a.conversations, .enriched = a.enrich};
    if (a.format == "csv") out << netflow::csv_header(format) << '\n';
    const line_writer writer{&out, &conversations, &lines, a.report_path.empty() ? nullptr : &report, format,
                             a.format == "csv", ipfix.get(), &ipfix_window, [&](int err) {
                               write_errno = err;
                               rt.request_stop();  // nothing more can be written: stop reading
                             }};
    // Rows are written on the sink's thread while the workers read on: the worker that
    // closes a window does not stop for its rows. With one worker the sink's thread also
    // sorts and formats them, on the core the worker leaves idle; with more, each worker
    // sorts and formats its own rows, in parallel, and the sink's thread merges and writes.
    auto sink = std::make_shared<rill::ordered_sink<flow_row, by_key, line_writer>>(
        rt.worker_count(), by_key{}, writer,
        rill::ordered_sink_options{.writer_thread = true,
                                   .sort_on_workers = rt.worker_count() > 1});
    auto packets = spread      ? rill::from(frames).rebalance().map(frames.decoder())
                   : a.rebalance ? rill::from(std::move(src)).rebalance()
                                 : rill::from(std::move(src));
    // Files end by themselves; a quiet live interface must not hold the watermark. (Idle
    // on files would make the output depend on read speed.)
    // Two phases only where asked and possible: several workers, no idle timeout (files).
    const bool two_phase = a.two_phase && a.interface.empty() && rt.worker_count() > 1;
    auto late_packets = std::make_shared<std::atomic<std::uint64_t>>(0);
    auto rows = netflow::count_flows(std::move(packets), a.window, a.delay, a.interface.empty() ? 0s : 5s, two_phase,
                                     late_packets);
    // A failed lookup keeps the row (null fields) and is counted: nothing is lost (the
    // error side output hands the row to the sink as it is, on the same worker).
    auto enrich_errors = std::make_shared<std::atomic<std::uint64_t>>(0);
    auto keep = [enrich_errors, sink](rill::record<flow_row>&& r, const rill::enrich_error& e) {
      if (enrich_errors->fetch_add(1) == 0) std::cerr << "netflow: enrich: " << e.reason << '\n';
      sink->write(rill::this_worker()->id(), std::move(r));
    };
    auto job = a.enrich ? enriched(std::move(rows), a.enrich_url, keep).sink(sink) : std::move(rows).sink(sink);

    // 2. Run it; --progress: packets/s over the last second, from the runtime's control thread.
    rill_examples::interval_rate rate{0, std::chrono::steady_clock::now()};
    const bool tty = ::isatty(STDERR_FILENO) == 1;
    auto progress = [&](const rill::run_progress&) {
      if (ipfix) ipfix->flush();  // a live capture's rows go out within a second
      if (!a.progress) return;
      const auto n = stats->packets.load();
      std::cerr << (tty ? "\r" : "") << "netflow: " << n << " packets, "
                << std::uint64_t(rate.sample(n, std::chrono::steady_clock::now()) + 0.5) << " packets/s"
                << (tty ? "\033[K" : "\n") << std::flush;
    };
    const auto rep =
        rt.run(job, {.progress = a.progress || ipfix ? std::function(progress) : nullptr});
    if (a.progress && tty) std::cerr << '\n';  // end the updating line

    // 3. The report.
    const bool output_ok = finish_output(out, a.output, write_errno);
    json summary = summary_of(*stats, rep, summarize(conversations, 10), lines,
                              enrich_errors->load(), rt.worker_count(),
                              two_phase ? late_packets->load() : rep.stage("window").late);
    bool ipfix_ok = true;
    if (ipfix) {
      ipfix->flush();
      const auto x = ipfix->stats();
      summary["ipfix"] = {{"records", x.records}, {"errors", x.errors}};
      if (x.errors > 0) {
        std::cerr << "netflow: error: --ipfix " << a.ipfix_host << ":" << a.ipfix_port << ": " << x.errors
                  << " failed sends, the first: " << x.first_error << '\n';
        ipfix_ok = false;
      }
    }
    bool summary_ok = true;
    if (a.summary_path.empty()) {
      std::cerr << summary.dump() << '\n';
    } else {
      summary_out << summary.dump(1) << '\n';
      summary_out.flush();
      if (!(summary_ok = bool(summary_out)))
        std::cerr << "netflow: error: writing --summary " << a.summary_path << " failed\n";
    }
    if (!a.report_path.empty()) {
      report.write_html(report_file, summary);
      report_file.flush();
      if (!report_file) {
        std::cerr << "netflow: error: writing --report " << a.report_path << " failed\n";
        summary_ok = false;
      }
    }
    for (const auto& e : rep.errors) std::cerr << "netflow: error: " << e << '\n';
    return rep.errors.empty() && enrich_errors->load() == 0 && output_ok && summary_ok && ipfix_ok ? 0 : 1;
  } catch (const rill::pcap_error& e) {
    const bool filter = e.code() == rill::pcap_errc::bad_filter;
    std::cerr << "netflow: " << (filter ? "--filter: " : "") << e.what() << '\n';
    return 2;
  } catch (const rill::config_error& e) {  // named by the option the user typed
    // what() starts with the key ("runtime.topology: expected ..."): the option replaces it
    const std::string what = e.what(), option = option_of(e.key());
    std::cerr << "netflow: "
              << (what.rfind(e.key(), 0) == 0 ? option + what.substr(e.key().size()) : option + ": " + what)
              << '\n';
    return 2;
  } catch (const std::exception& e) {  // e.g. an exception from a worker, rethrown by run()
    std::cerr << "netflow: error: " << e.what() << '\n';
    return 1;
  }
}

// netflow — the main job: per-window, per-conversation packet and byte counts of packet
// captures.
//
//   pcap_source (a classic pcap file: one split per worker; pcapng, FIFO, --interface:
//     one split; --rebalance: pcap_frame_source -> rebalance -> decode)
//     -> filter(IP only) -> key_by(5-tuple)
//     -> window(tumbling --window, --max-delay) -> aggregate(packets, bytes)
//     -> ordered_sink (JSON lines, sorted by window then conversation)
//
// Run with no arguments it reads real captures that Debian packages ship (python3-dpkt's
// http.pcap and dns_icmp.pcap, sip-tester's g711a.pcap) as three inputs merged by
// capture time. Output lines: window_start_ns, window_end_ns, proto, a_ip, a_port, b_ip,
// b_port, packets, bytes. The summary (stderr, --summary FILE, or --summary - for stdout
// when --output is a file) is one JSON object.
// Exit status: 0 on success; 1 when a capture had a read error (every record before it
// was still processed and written), an enrichment lookup failed for good (the row is
// written with null enrichment fields) or writing --output/--summary failed (a closed
// output pipe too: SIGPIPE is ignored, EPIPE stops the run); 2 on bad arguments (the
// message names the option and the value) or an unreadable input.
// --enrich [URL] adds "service" (IANA name of the lower port, /etc/services) and
// "a_class"/"b_class" (IANA special-purpose address registries) to every row, through
// three batched enrich stages; without URL an enrichment service runs in-process.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>
#include <unordered_map>

#include <rill/rill.hpp>
#include <rill/operators/enrich.hpp>

#include "cli_checks.hpp"
#include "enrichment_service.hpp"
#include "flow_row.hpp"
#include "reporting.hpp"
#include "kafka_mode.hpp"  // --probe / --brokers: Kafka mode (issue 5)

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

struct by_key {
  bool operator()(const flow_row& a, const flow_row& b) const { return a.key < b.key; }
};

/// Writes one JSON line per row and remembers totals for the summary. Called under the
/// ordered_sink's lock; the aggregation gives exactly one row per (window, conversation).
struct line_writer {
  std::ostream* out;
  std::set<rill::flow_key>* conversations;
  std::size_t* lines;
  bool enriched = false;
  /// Called once, at the first failed write (e.g. EPIPE: the reader of a pipe closed it),
  /// with that write's errno: there is no point reading on.
  std::function<void(int)> on_write_error;
  void operator()(rill::event_time, const flow_row& r) const {
    const bool was_ok = bool(*out);
    errno = 0;
    *out << netflow::row_json(r, enriched) << '\n';
    if (was_ok && !*out && on_write_error) on_write_error(errno);
    ++*lines;
    conversations->insert(r.key);
  }
};

/// The command-line option behind a rill::config_error key, so that a value the checks
/// below let through is still reported under the name the user typed.
std::string option_of(const std::string& key) {
  static const std::map<std::string, std::string> names = {
      {"window.size", "--window"}, {"window.max_delay", "--max-delay"},
      {"runtime.workers", "--workers"},   {"runtime.topology", "--topology"}};
  const auto it = names.find(key);
  return it == names.end() ? key : it->second;
}

}  // namespace

int main(int argc, char** argv) {
  // A closed output pipe (netflow ... | head -1) is a write error (EPIPE: exit 1 with a
  // message, see line_writer), not a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"netflow: per-window, per-conversation packet/byte counts of packet captures"};
  std::vector<std::string> inputs;
  std::string interface, window_text = "10s", delay_text = "2s", output = "-", summary_path,
                         topology;
  std::size_t workers = 0;
  bool progress = false, rebalance = false;
  std::string enrich_url;
  auto* input_opt =
      app.add_option("--input,-i", inputs, "capture file (pcap or pcapng); repeat for several inputs")
          ->check(CLI::ExistingFile);
  // One source or the other: both given is a usage error (exit 2), not a silent choice.
  app.add_option("--interface", interface, "capture live from this interface instead (libpcap)")
      ->excludes(input_opt);
  app.add_option("--window", window_text, "tumbling window length (e.g. 10s, 500ms)");
  app.add_option("--max-delay", delay_text, "maximum out-of-order delay (watermark lag)");
  app.add_option("--output,-o", output, "JSON lines output file, or - for stdout");
  app.add_option("--summary", summary_path,
                 "write the summary JSON here; - for stdout (then --output must be a file); "
                 "default: stderr");
  app.add_option("--workers,-w", workers, "worker threads (default or 0: one per core)")
      ->check(rill_examples::whole_number(0, 4096, "0 = one per core"));
  app.add_option("--topology", topology, "synthetic topology, e.g. \"2 nodes x 2 cores\"");
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
  netflow_kafka::options kafka;
  netflow_kafka::add_options(app, kafka);
  // Kafka-only options need --brokers; file-mode-only options are refused in Kafka mode,
  // and --input in the analysis (CLI11 needs/excludes: exit 2 naming both; they used to
  // be ignored silently, exit 0).
  auto* brokers_opt = app.get_option("--brokers");
  for (const char* k : {"--probe", "--topic", "--from", "--to", "--group", "--idle-exit"})
    app.get_option(k)->needs(brokers_opt);
  for (const char* f : {"--output", "--summary", "--progress", "--rebalance", "--enrich", "--interface"})
    app.get_option(f)->excludes(brokers_opt);
  input_opt->excludes(app.get_option("--from"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;       // bad arguments: 2, as documented
  }

  std::chrono::nanoseconds window, delay;
  try {
    window = parse_duration(window_text, "--window");
    delay = parse_duration(delay_text, "--max-delay");
    if (window <= 0ns) throw CLI::ValidationError("--window", "must be > 0, got \"" + window_text + "\"");
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
  if (kafka.active()) return netflow_kafka::run(kafka, inputs, window, delay, workers, topology);

  // Both files are created before the job runs: one that cannot be created is a bad
  // argument (exit 2, with the OS error); a write that fails later is exit 1.
  std::ofstream file, summary_file;
  std::ostream* out = &std::cout;
  if (output != "-") {
    file.open(output);
    if (!file) {
      std::cerr << "netflow: cannot create --output " << output << ": " << std::strerror(errno) << '\n';
      return 2;
    }
    out = &file;
  }
  std::ostream* summary_out = summary_path.empty() ? &std::cerr : summary_path == "-" ? &std::cout : &summary_file;
  if (!summary_path.empty() && summary_path != "-") {
    summary_file.open(summary_path);
    if (!summary_file) {
      std::cerr << "netflow: cannot create --summary " << summary_path << ": " << std::strerror(errno) << '\n';
      return 2;
    }
  }

  try {
    rill::runtime rt{{.workers = workers, .topology = topology, .handle_signals = true}};
    // Capture files: each splittable file is read as one split per worker (interleaved
    // chunks of records), so every worker decodes. --rebalance reads them whole.
    auto src = !interface.empty() ? rill::pcap_source::live(interface)
               : rebalance       ? rill::pcap_source{inputs}
                                 : rill::pcap_source{inputs, {.splits_per_file = rt.worker_count()}};
    // --rebalance on files: read raw frames, rebalance, decode on every worker (one
    // capture file is one split). Not the default: handing a frame to another worker
    // costs about what decoding it does (bench/RESULTS.md "decoding after a rebalance").
    rill::pcap_frame_source frames{inputs};
    const bool spread = interface.empty() && rebalance;
    auto stats = spread ? frames.stats() : src.stats();
    std::set<rill::flow_key> conversations;
    const bool enrich = enrich_opt->count() > 0;
    std::unique_ptr<rill::svc::enrichment_service> local_service;
    if (enrich && enrich_url.empty()) {
      local_service = std::make_unique<rill::svc::enrichment_service>();
      local_service->start();
      enrich_url = local_service->url();
    }
    std::size_t lines = 0;
    int write_errno = 0;  // of the first failed write to --output
    const line_writer writer{out, &conversations, &lines, enrich, [&](int err) {
                               write_errno = err;
                               rt.request_stop();  // nothing more can be written: stop reading
                             }};
    auto sink = std::make_shared<rill::ordered_sink<flow_row, by_key, line_writer>>(
        rt.worker_count(), by_key{}, writer);
    auto enrich_errors = std::make_shared<std::atomic<std::uint64_t>>(0);

    auto packets = spread      ? rill::from(frames).rebalance().map(frames.decoder())
                   : rebalance ? rill::from(std::move(src)).rebalance()
                               : rill::from(std::move(src));
    // Files end by themselves; a quiet live interface must not hold the watermark. (Idle
    // on files would make the output depend on read speed.)
    auto rows_stream = netflow::count_flows(std::move(packets), window, delay, interface.empty() ? 0s : 5s);
    // A failed lookup keeps the row (null fields) and is counted: nothing is lost.
    // (the error side output hands the row to the sink as it is, on the same worker).
    auto keep = [enrich_errors, sink](rill::record<flow_row>&& r, const rill::enrich_error& e) {
      if (enrich_errors->fetch_add(1) == 0) std::cerr << "netflow: enrich: " << e.reason << '\n';
      sink->write(rill::this_worker()->id(), std::move(r));
    };
    auto enriched_rows = [&](auto&& rows) {
      rill::enrich_options o{.url = enrich_url, .batch_size = 256, .max_in_flight = 4,
                             .cache_entries = 4096};
      auto with_service = rill::enrich(
          std::move(rows), o, service_key,
          [](flow_row&& r, nlohmann::json&& v) { r.service = std::move(v); return std::move(r); }, keep);
      auto with_a = rill::enrich(
          std::move(with_service), o, [](const flow_row& r) { return r.key.a_ip_string(); },
          [](flow_row&& r, nlohmann::json&& v) { r.a_class = std::move(v); return std::move(r); }, keep);
      return rill::enrich(
          std::move(with_a), o, [](const flow_row& r) { return r.key.b_ip_string(); },
          [](flow_row&& r, nlohmann::json&& v) { r.b_class = std::move(v); return std::move(r); }, keep);
    };
    auto job = enrich ? enriched_rows(std::move(rows_stream)).sink(sink) : std::move(rows_stream).sink(sink);

    std::atomic<bool> running{true};
    std::thread reporter;
    if (progress) {
      // packets/s over the last second (not the average since the start)
      reporter = std::thread([&] {
        auto last = std::chrono::steady_clock::now();
        rill_examples::interval_rate rate{stats->packets.load(), last};
        while (running.load()) {
          std::this_thread::sleep_for(200ms);
          const auto now = std::chrono::steady_clock::now();
          if (now - last < 1s) continue;
          last = now;
          const auto packets = stats->packets.load();
          std::cerr << "netflow: " << packets << " packets, " << std::uint64_t(rate.sample(packets, now) + 0.5)
                    << " packets/s\n";
        }
      });
    }
    const auto rep = rt.run(job);
    running = false;
    if (reporter.joinable()) reporter.join();
    if (*out) {
      errno = 0;
      out->flush();
      if (!*out) write_errno = errno;
    }
    const bool output_failed = !*out;
    if (output_failed)
      std::cerr << "netflow: error: writing --output " << output << " failed"
                << (write_errno == EPIPE ? ": the reader closed the pipe (EPIPE)"
                    : write_errno    ? std::string(": ") + std::strerror(write_errno)
                                     : std::string())
                << '\n';

    const auto p = stats->packets.load();
    json by_proto;
    for (auto proto : {rill::ip_proto::tcp, rill::ip_proto::udp, rill::ip_proto::icmp,
                       rill::ip_proto::icmpv6, rill::ip_proto::other}) {
      by_proto[std::string(rill::to_string(proto))] = stats->by_proto[std::size_t(proto)].load();
    }
    json summary = {{"packets", p},
                    {"bytes", stats->bytes.load()},
                    {"by_proto", by_proto},
                    {"non_ip", stats->by_proto[std::size_t(rill::ip_proto::non_ip)].load()},
                    {"truncated", stats->truncated.load()},
                    {"late", rep.stage("window").late},
                    {"conversations", conversations.size()},
                    {"windows_rows", lines},
                    {"errors", rep.errors},
                    {"enrich_errors", enrich_errors->load()},
                    {"workers", rt.worker_count()},
                    {"elapsed_s", rep.elapsed_s},
                    {"packets_per_s", rep.elapsed_s > 0 ? double(p) / rep.elapsed_s : 0.0}};
    bool summary_failed = false;
    if (summary_path.empty()) {
      std::cerr << summary.dump() << '\n';
    } else {
      auto& f = *summary_out;
      f << summary.dump(1) << '\n';
      f.flush();
      if (!f) {
        summary_failed = true;
        std::cerr << "netflow: error: writing --summary " << summary_path << " failed\n";
      }
    }
    for (const auto& e : rep.errors) std::cerr << "netflow: error: " << e << '\n';
    return rep.errors.empty() && enrich_errors->load() == 0 && !output_failed && !summary_failed ? 0 : 1;
  } catch (const rill::pcap_error& e) {
    std::cerr << "netflow: " << e.what() << '\n';
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

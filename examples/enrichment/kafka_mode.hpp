// kafka_mode.hpp — the enrichment example's Kafka mode, kept apart from the
// generator mode in enrichment.cpp:
//
//   enrichment --brokers HOST:PORT --from TOPIC --to TOPIC [--group G] [--idle-exit 3s]
//              [--url URL | --latency MS] [--batch-size N] [--max-in-flight N] [--retries N]
//              [--progress]
//
//   kafka_source(--from, group --group) -> enrich(value -> IANA name / address class)
//     -> kafka_sink(--to)
//
// Input message: value = the lookup key as text, "PORT/PROTO" ("443/tcp") or an IPv4/IPv6
// address ("10.1.2.3"); the message key is carried over. Output message: same key (none
// when the input key is empty), timestamp = the input's, value = one JSON object
//   {"key":"443/tcp","enriched":"https","partition":2,"offset":17}
// where "enriched" is the service's answer (null when unknown) and partition/offset name
// the input message (at-least-once: a consumer of --to drops duplicates by them).
//
// At-least-once (docs/design.md "Kafka"): an input offset is committed only after the delivery
// report of its enriched record (the record's ack token travels through enrich to the
// sink). A failed attempt is retried up to --retries times (default 10) after a backoff
// that starts at 100 ms and doubles up to 4 s (enrich's equal jitter: 11 to 22 s in all),
// so a service that restarts within about 10 s loses nothing and holds nothing back. A
// batch that still fails after its retries is counted, its records are marked failed
// (ack->fail()): their partition is not committed past them in this run, they are read
// again after a restart, and the exit status is 1.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace enrichment_kafka {

struct options {
  std::string brokers, from, to, group = "enrichment";
  /// stop after this long without input (10x that before the first record; "0" = run
  /// until SIGTERM/SIGINT). "3s", "500ms".
  std::string idle_exit = "0";
  std::size_t workers = 1;  ///< consumers (one per worker) in this process
  /// enrich attempts after the first, backoff 100 ms doubling up to 4 s: 10 ride out a
  /// service restart of about 10 s (bench/soak_enrich.sh SIGKILLs and restarts it)
  std::size_t retries = 10;
  bool progress = false;    ///< a progress line on stderr every progress_interval
  std::string progress_interval = "1s";  ///< "250ms", "2s"; > 0 (checked while parsing)
  bool active() const { return !brokers.empty() || !from.empty() || !to.empty(); }
};

/// What enrich gets from the generator mode's options (enrichment.cpp).
struct enrich_settings {
  std::string url;  ///< "" = start the enrichment service in-process on 127.0.0.1
  std::chrono::milliseconds latency{100};  ///< the in-process service's artificial latency
  std::size_t batch_size = 200, max_in_flight = 4;
  bool cpprest = false;  ///< transport: cpprestsdk instead of Boost.Beast
  std::uint16_t metrics_port = 0;  ///< Prometheus endpoint on 127.0.0.1 (0 = off)
};

/// Adds --brokers, --from, --to, --group, --idle-exit, --workers, --retries, --progress,
/// --progress-interval to `app`.
void add_options(CLI::App& app, options& o);

/// Runs topic -> enrich -> topic until SIGTERM/SIGINT or --idle-exit; prints the summary
/// (one JSON object) on stdout, errors and --progress lines on stderr. Blocks the calling
/// thread (call it from main; the runtime handles SIGINT/SIGTERM during the run). Returns
/// the exit status: 0 everything consumed was enriched, delivered and committed; 1 an
/// enrichment or a delivery failed for good, or records were left undelivered; 2 bad
/// arguments, no broker answering within 10 s, or a service URL that does not answer
/// POST [] with a JSON array within 5 s.
int run(const options& o, const enrich_settings& e);

}  // namespace enrichment_kafka

// kafka_mode.cpp — enrichment from Kafka to Kafka: topic -> enrich (batched REST) -> topic,
// at-least-once. See kafka_mode.hpp.
#include "kafka_mode.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <optional>

#include <rill/connectors/http_transport.hpp>
#include <rill/connectors/kafka_sink.hpp>
#include <rill/connectors/kafka_source.hpp>
#include <rill/operators/enrich.hpp>
#include <rill/rill.hpp>

#include "enrichment_service.hpp"
#include "cli_checks.hpp"
#include "reporting.hpp"

using namespace std::chrono_literals;
using nlohmann::json;
using steady = std::chrono::steady_clock;

namespace enrichment_kafka {
namespace {

using in_rec = rill::kafka_record<std::string, std::string>;

/// One input message on its way through enrich.
struct item {
  std::string key;     ///< the message key ("" = none)
  std::string lookup;  ///< the message value: "443/tcp", "10.1.2.3", ...
  std::int32_t partition;
  std::int64_t offset;
  steady::time_point consumed;  ///< when the source read it (latency start)
};

/// The output message, serialised once on the worker.
struct out_row {
  std::optional<std::string> key;
  std::string value;  ///< {"key":..,"enriched":..,"partition":..,"offset":..}
  steady::time_point consumed;
};

/// Latency from "read from Kafka" to "delivery report of the output" (rill::histogram of
/// ns: a quantile is within 3.1%), plus the active span. Written from the sink's poll
/// thread and the workers (record_shared); relaxed atomics.
struct latency_stats {
  rill::histogram ns;
  std::atomic<std::int64_t> first_ns{0}, last_ns{0};  ///< steady clock: first read, last delivery

  void add(steady::duration d) {
    ns.record_shared(std::uint64_t(std::max<std::int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(), 0)));
    const auto now = steady::now().time_since_epoch().count();
    auto cur = last_ns.load(std::memory_order_relaxed);
    while (cur < now && !last_ns.compare_exchange_weak(cur, now, std::memory_order_relaxed)) {}
  }
  double quantile_ms(double q) const { return double(ns.quantile(q)) / 1e6; }
  double active_s() const {
    const auto a = first_ns.load(), b = last_ns.load();
    return a && b > a ? double(b - a) / 1e9 : 0.0;
  }
};

/// Wraps a record's ack token: when the kafka_sink releases it at the delivery report
/// (any thread), the latency is recorded, then the input's own token is released. The
/// ack token is where the delivery report of one record becomes visible (kafka_sink
/// counts deliveries, it has no per-record callback), so the latency is taken here.
class timed_ack final : public rill::ack_token {
 public:
  timed_ack(std::shared_ptr<rill::ack_token> inner, steady::time_point t0, std::shared_ptr<latency_stats> st)
      : inner_(std::move(inner)), t0_(t0), st_(std::move(st)) {}
  ~timed_ack() override {
    if (!failed_.load(std::memory_order_relaxed)) st_->add(steady::now() - t0_);
  }
  void fail() noexcept override {
    failed_.store(true, std::memory_order_relaxed);
    if (inner_) inner_->fail();
  }

 private:
  std::shared_ptr<rill::ack_token> inner_;
  steady::time_point t0_;
  std::shared_ptr<latency_stats> st_;
  std::atomic<bool> failed_{false};
};

/// rill::sink_of<out_row>: the kafka_sink, with the latency-recording ack around each record.
struct timed_sink {
  std::shared_ptr<rill::kafka_sink<out_row>> kafka;
  std::shared_ptr<latency_stats> lat;
  void write(std::size_t w, rill::record<out_row>&& r) {
    r.ack = std::make_shared<timed_ack>(std::move(r.ack), r.value.consumed, lat);
    kafka->write(w, std::move(r));
  }
  void progress(std::size_t w, rill::event_time t) { kafka->progress(w, t); }
  void end(std::size_t w) { kafka->end(w); }
};

/// A duration option -> whole milliseconds (rill_examples::parse_duration: ns, us, ms, s,
/// m or h, no unit = s; a rest below 1 ms is dropped). Throws CLI::ValidationError naming
/// `option`.
std::chrono::milliseconds parse_ms(const std::string& text, const std::string& option) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(rill_examples::parse_duration(text, option));
}

/// POSTs an empty batch once, so that a wrong --url fails at start with a clear message
/// instead of sending every record to the error path. Blocks up to 5 s. "" = it answered.
std::string check_service(const std::string& url) {
  boost::asio::io_context ioc;
  auto t = rill::make_beast_transport(ioc, {.endpoint = rill::http_endpoint::parse(url), .max_connections = 1});
  std::string problem = "no answer";
  t->post({.body = "[]", .timeout = 5s}, [&](rill::http_result&& r) {
    if (r.ec) problem = r.ec.message() + " (" + r.detail + ")";
    else if (r.status < 200 || r.status > 299) problem = "HTTP " + std::to_string(r.status);
    else if (auto v = json::parse(r.body, nullptr, false); v.is_discarded() || !v.is_array())
      problem = "the answer to [] is not a JSON array";
    else problem.clear();
  });
  ioc.run();
  return problem;
}

int pipeline(const options& o, const enrich_settings& e, const std::string& url, bool in_process) {
  const auto idle = parse_ms(o.idle_exit, "--idle-exit");
  const auto every = parse_ms(o.progress_interval, "--progress-interval");  // > 0: checked at parse
  rill::kafka_source<> src{{.brokers = o.brokers, .group = o.group, .topics = {o.from},
                            .commit_interval = 1s,
                            // a SIGKILLed instance's partitions move to a new one after 10 s, not 45 s
                            .config = {{"session.timeout.ms", "10000"}}}};
  auto sst = src.stats();
  auto lat = std::make_shared<latency_stats>();
  auto kafka = std::make_shared<rill::kafka_sink<out_row>>(
      rill::kafka_sink_options{.brokers = o.brokers, .topic = o.to},
      [](const out_row& r) { return rill::kafka_message_out{r.key, r.value}; });
  auto m = std::make_shared<rill::enrich_metrics>();
  std::atomic<std::uint64_t> failed{0}, undecodable{0};

  auto items = rill::from(std::move(src)).map([lat](in_rec&& r) {
    const auto now = steady::now();
    std::int64_t zero = 0;
    lat->first_ns.compare_exchange_strong(zero, now.time_since_epoch().count(), std::memory_order_relaxed);
    return item{std::move(r.key), std::move(r.value), r.partition, r.offset, now};
  });
  auto job = rill::enrich(
                 std::move(items),
                 {.url = url, .batch_size = e.batch_size, .linger = 5ms, .max_in_flight = e.max_in_flight,
                  .timeout = 5s, .retries = o.retries, .backoff = 100ms, .max_backoff = 4s,
                  .transport = rill::http_transport_for(e.cpprest ? rill::http_transport_kind::cpprest : rill::http_transport_kind::beast),
                  .metrics = m},
                 [](const item& it) { return it.lookup; },
                 [](item&& it, json&& v) {
                   const json j = {{"key", it.lookup}, {"enriched", std::move(v)},
                                   {"partition", it.partition}, {"offset", it.offset}};
                   return out_row{it.key.empty() ? std::nullopt : std::optional{std::move(it.key)}, j.dump(),
                                  it.consumed};
                 },
                 // failed for good: not committed past in this run, read again after a restart
                 [&failed, &undecodable, &o](rill::record<item>&& r, const rill::enrich_error& err) {
                   // A key that cannot be encoded (invalid UTF-8) fails the same way on every
                   // read: like a poison message, it is reported with its position, counted,
                   // and committed past (its ack is released as done), so the partition goes on.
                   if (err.code == rill::http_errc::bad_key) {
                     if (undecodable.fetch_add(1) < 10)
                       std::cerr << "enrichment: " << o.from << " partition " << r.value.partition << " offset "
                                 << r.value.offset << ": " << err.reason << " (counted as undecodable, skipped)\n";
                     return;
                   }
                   if (r.ack) r.ack->fail();
                   if (failed.fetch_add(1) == 0)
                     std::cerr << "enrichment: " << r.value.lookup << " (partition " << r.value.partition
                               << " offset " << r.value.offset << "): " << err.reason << '\n';
                 })
                 .sink(std::make_shared<timed_sink>(timed_sink{kafka, lat}), "kafka_sink");

  rill::runtime rt{{.workers = o.workers, .handle_signals = true, .metrics_port = e.metrics_port}};
  // --idle-exit: the runtime stops gracefully (outstanding batches finish, deliveries,
  // final commit) once every assigned partition was read to its end and nothing was
  // consumed for that long (10x before the first record; rill::kafka_input_activity).
  // --progress: a line on stderr every --progress-interval, from the runtime's control thread.
  rill_examples::interval_rate delivered_rate{0, steady::now()};
  const rill::run_options run_opts{
      .stop_when_idle = idle,
      .activity = rill::kafka_input_activity(sst),
      .progress = !o.progress ? std::function<void(const rill::run_progress&)>{} : [&](const rill::run_progress&) {
        const auto d = kafka->stats().delivered.load();
        std::ostringstream line;  // records delivered per second over this interval, fractional (3 in 4 s: 0.8)
        line << "enrichment: progress consumed=" << sst->consumed.load() << " enriched=" << m->enriched.load()
             << " delivered=" << d << " in_flight=" << m->in_flight.load() << " undelivered=" << kafka->undelivered()
             << " failed=" << failed.load() << " commits=" << sst->commits.load() << " pauses=" << sst->pauses.load()
             << " records_per_s=" << std::fixed << std::setprecision(1) << delivered_rate.sample(d, steady::now());
        std::cerr << line.str() << std::endl;
      },
      .progress_interval = every};
  const auto rep = rt.run(job, run_opts);

  const double active = lat->active_s();
  const auto delivered = kafka->stats().delivered.load();
  json summary = {{"consumed", sst->consumed.load()}, {"enriched", m->enriched.load()},
                  {"delivered", delivered}, {"enrich_failed", failed.load()}, {"undecodable", undecodable.load()},
                  {"delivery_failed", kafka->stats().failed.load()}, {"undelivered", kafka->undelivered()},
                  {"commits", sst->commits.load()}, {"held", sst->held.load()}, {"pauses", sst->pauses.load()},
                  {"active_s", active}, {"records_per_s", active > 0 ? double(delivered) / active : 0.0},
                  {"latency_ms_p50", lat->quantile_ms(0.5)}, {"latency_ms_p99", lat->quantile_ms(0.99)},
                  {"requests", m->requests.load()}, {"retries", m->retries.load()},
                  {"failed_batches", m->failures.load()}, {"timeouts", m->timeouts.load()},
                  {"timeout_unknown", m->timeout_unknown.load()}, {"failed_unsent", m->failed_unsent.load()},
                  {"expired_unsent", m->expired_unsent.load()},
                  {"request_ms_p50", double(m->latency_quantile_us(0.5)) / 1000.0},
                  {"request_ms_p99", double(m->latency_quantile_us(0.99)) / 1000.0},
                  {"batch_size", e.batch_size}, {"max_in_flight", e.max_in_flight},
                  {"transport", e.cpprest ? "cpprest" : "beast"}, {"workers", o.workers},
                  {"service_in_process", in_process}, {"elapsed_s", rep.elapsed_s}, {"errors", rep.errors}};
  std::cout << summary.dump() << std::endl;
  for (const auto& err : kafka->errors()) std::cerr << "enrichment: " << err << '\n';
  const bool ok = rep.errors.empty() && kafka->errors().empty() && kafka->undelivered() == 0 && failed == 0;
  return ok ? 0 : 1;
}

}  // namespace

void add_options(CLI::App& app, options& o) {
  app.footer(
      "Kafka mode: enrichment --brokers 127.0.0.1:19092 --from keys --to enriched [--group G] [--progress]\n"
      "  reads lookup keys (message value \"443/tcp\", \"10.1.2.3\") from --from, enriches them in batches\n"
      "  through the service (--url, or in-process with --latency), writes {\"key\":\"443/tcp\",\n"
      "  \"enriched\":\"https\",\"partition\":P,\"offset\":O} to --to with the input's key; commits an\n"
      "  input offset after the delivery report of its output (at-least-once). Runs until SIGTERM or\n"
      "  --idle-exit; summary JSON on stdout. Exit 0 ok, 1 enrichment (after --retries) or delivery\n"
      "  failed, 2 bad arguments, broker or service unreachable.");
  auto* brokers = app.add_option("--brokers", o.brokers, "Kafka mode: bootstrap servers HOST:PORT");
  // --from/--to without --brokers: CLI11 says "--from requires --brokers" (exit 2); it
  // used to fall through to "--rate is for the generator mode".
  app.add_option("--from", o.from, "Kafka mode: input topic; message value = lookup key (\"443/tcp\", \"10.1.2.3\")")
      ->check(rill_examples::kafka_topic())
      ->needs(brokers);
  app.add_option("--to", o.to, "Kafka mode: output topic; value {\"key\",\"enriched\",\"partition\",\"offset\"}")
      ->check(rill_examples::kafka_topic())
      ->needs(brokers);
  // The other Kafka-mode options need --brokers too: in the generator mode they were
  // accepted and silently ignored (exit 0).
  app.add_option("--group", o.group, "Kafka mode: consumer group (default enrichment)")->needs(brokers);
  app.add_option("--idle-exit", o.idle_exit, "Kafka mode: stop after this long without input, e.g. 3s (0 = until SIGTERM); "
                 "before the first record 10x as long (joining the group takes seconds)")
      ->needs(brokers);
  app.add_option("--workers", o.workers, "Kafka mode: consumers in this process (default 1)")
      ->check(rill_examples::whole_number(1, 64))
      ->needs(brokers);
  app.add_option("--retries", o.retries,
                 "Kafka mode: attempts after the first for a failed enrich request, backoff 100 ms "
                 "doubling up to 4 s (default 10: a service restart of about 10 s loses nothing)")
      ->check(rill_examples::whole_number(0, 1000))
      ->needs(brokers);
  app.add_flag("--progress", o.progress, "Kafka mode: a progress line on stderr every --progress-interval")
      ->needs(brokers);
  app.add_option("--progress-interval", o.progress_interval,
                 "Kafka mode: e.g. 250ms (default 1s; must be > 0: without --progress there are no "
                 "progress lines)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              if (parse_ms(text, "--progress-interval").count() <= 0)
                return "must be > 0 (leave --progress out for no progress lines), got \"" + text + "\"";
            } catch (const CLI::ValidationError& e) {
              return std::string(e.what()).substr(std::string("--progress-interval: ").size());
            }
            return {};
          },
          "DURATION > 0", "duration"));
}

int run(const options& o, const enrich_settings& e) {
  if (o.brokers.empty() || o.from.empty() || o.to.empty()) {
    std::cerr << "enrichment: Kafka mode needs --brokers HOST:PORT, --from TOPIC and --to TOPIC\n";
    return 2;
  }
  if (o.group.empty()) {
    std::cerr << "enrichment: --group must not be empty\n";
    return 2;
  }
  try {
    parse_ms(o.idle_exit, "--idle-exit");
    parse_ms(o.progress_interval, "--progress-interval");
    std::optional<rill::svc::enrichment_service> svc;
    std::string url = e.url;
    if (url.empty()) {
      svc.emplace(rill::svc::service_options{.latency = e.latency});
      svc->start();
      url = svc->url();
    }
    if (const auto problem = check_service(url); !problem.empty()) {
      std::cerr << "enrichment: enrichment service " << url << ": " << problem << '\n';
      return 2;
    }
    return pipeline(o, e, url, svc.has_value());
  } catch (const std::exception& ex) {  // bad --url or --idle-exit, broker unreachable
    std::cerr << "enrichment: " << ex.what() << '\n';
    return 2;
  }
}

}  // namespace enrichment_kafka

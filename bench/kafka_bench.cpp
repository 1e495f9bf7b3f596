// kafka_bench — consume -> map -> produce on a real broker, records/s, side by side:
//   raw      librdkafka's KafkaConsumer + Producer in one loop, no framework (ours, below):
//            manual async commits every second, idempotent acks=all producer, linger 5 ms
//   rill/1   rill::from(kafka_source) -> map -> kafka_sink, 1 worker (at-least-once acks)
//   rill/2   the same on 2 workers
// Input: N records (key "k<i>", 100-byte value) in a 4-partition topic, produced before
// timing. Each run reads it with a fresh group, maps value -> value with its first byte
// upper-cased, and writes a 4-partition topic; the clock stops at the N-th delivery
// report. Checksum: N delivered, and the byte sum of the delivered values, checked.
// CPU: the process's user+sys (CLOCK_PROCESS_CPUTIME_ID: every thread, librdkafka's
// included) over the same interval, as seconds per million records.
//
//   scripts/kafka start
//   build-release/bench/kafka_bench --brokers 127.0.0.1:19092 --records 200000 --runs 3
//
// bench/kafka_peers.sh (the Kafka Streams peer on the same input) uses:
//   kafka_bench --make-input TOPIC --records N       create + fill TOPIC, exit
//   kafka_bench --in TOPIC --records N --runs 1 [--peers raw,rill/1,rill/2] [--prime 1]
// and reads the "RESULT peer=P records=N seconds=S cpu=C ok=0|1" line of each run.
// --prime 1: before the clock, each peer's producer sends one record (key "prime", empty
// value) to its output topic and waits for its delivery report. librdkafka (2.0.2 here)
// delivers the first messages to a topic its producer has not seen yet only after about
// 1 s; without priming both peers pay that second inside the timed interval (the Java
// producer of Kafka Streams does not). The prime record is not counted.
// --consumer-config k=v[,k=v]: extra librdkafka consumer properties for both peers (raw's
// consumer and kafka_source's .config), e.g. queued.min.messages=1000000: with librdkafka
// 2.0.2's default (100000 per partition) a consume -> produce loop over 1 M records is
// throttled to a constant rate (about 160,000 records/s here; 1 M in 1.3 s with 1000000).
// --producer-config k=v[,k=v]: the same for both peers' producers (raw's producer and
// kafka_sink's .config), applied after the peers' own settings.
// --max-pending N: the rill peers' kafka_sink_options::max_pending (0 = no backpressure).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kafka_bench_util.hpp"
#include "rill/connectors/kafka_sink.hpp"
#include "rill/connectors/kafka_source.hpp"
#include "rill/operators/stream.hpp"

using namespace std::chrono_literals;
using rec = rill::kafka_record<std::string, std::string>;
using clk = std::chrono::steady_clock;

namespace {

std::string brokers = "127.0.0.1:19092";

using rill_bench::value_of;
void create_topic(const std::string& name, int partitions) { rill_bench::create_topic(brokers, name, partitions); }

void produce_input(const std::string& topic, int n) {
  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers, err);
  c->set("linger.ms", "20", err);
  std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), err));
  for (int i = 0; i < n; ++i) {
    std::string k = "k";  // appended: GCC 12 -O3 reports a false -Wrestrict in "k" + s (GCC bug 105651)
    k += std::to_string(i);
    auto v = value_of(i);
    while (p->produce(topic, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY, v.data(), v.size(),
                      k.data(), k.size(), 0, nullptr) == RdKafka::ERR__QUEUE_FULL)
      p->poll(10);
    p->poll(0);
  }
  if (p->flush(60000) != RdKafka::ERR_NO_ERROR) throw std::runtime_error("input flush timed out");
}

std::uint64_t expected_sum(int n) {
  std::uint64_t s = 0;
  for (int i = 0; i < n; ++i) {
    auto v = value_of(i);
    v[0] = char(std::toupper(v[0]));
    for (char ch : v) s += std::uint8_t(ch);
  }
  return s;
}

void map_value(std::string& v) {
  if (!v.empty()) v[0] = char(std::toupper(v[0]));
}

struct result {
  double seconds;
  std::uint64_t delivered, sum;
  double cpu = 0;  // process user+sys seconds over the timed interval
};

double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// ---- raw librdkafka loop ----
struct raw_dr : RdKafka::DeliveryReportCb {
  std::uint64_t delivered = 0, sum = 0, failed = 0;
  void dr_cb(RdKafka::Message& m) override {
    if (m.err()) { ++failed; return; }
    ++delivered;
    const auto* p = static_cast<const unsigned char*>(m.payload());
    for (std::size_t i = 0; i < m.len(); ++i) sum += p[i];
  }
};

bool prime = false;
const std::string prime_key = "prime";
std::map<std::string, std::string> consumer_config, producer_config;
long long max_pending = -1;  // --max-pending: kafka_sink_options::max_pending of the rill peers (-1: its default)

result run_raw(const std::string& in, const std::string& out, int n) {
  std::string err;
  raw_dr dr;
  std::unique_ptr<RdKafka::Conf> pc(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  pc->set("bootstrap.servers", brokers, err);
  pc->set("enable.idempotence", "true", err);
  pc->set("acks", "all", err);
  pc->set("linger.ms", "5", err);
  pc->set("partitioner", "murmur2_random", err);
  pc->set("dr_cb", &dr, err);
  for (const auto& [k, v] : producer_config)
    if (pc->set(k, v, err) != RdKafka::Conf::CONF_OK) throw std::runtime_error("producer config " + k + ": " + err);
  std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(pc.get(), err));
  if (prime) {
    p->produce(out, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY, nullptr, 0, prime_key.data(),
               prime_key.size(), 0, nullptr);
    while (dr.delivered + dr.failed == 0) p->poll(10);
    if (dr.failed) throw std::runtime_error("raw: prime record failed");
    dr.delivered = 0;  // the empty value added nothing to dr.sum
  }
  std::unique_ptr<RdKafka::Conf> cc(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  cc->set("bootstrap.servers", brokers, err);
  cc->set("group.id", "bench-raw-" + std::to_string(::getpid()) + "-" + out, err);
  cc->set("enable.auto.commit", "false", err);
  cc->set("auto.offset.reset", "earliest", err);
  for (const auto& [k, v] : consumer_config)
    if (cc->set(k, v, err) != RdKafka::Conf::CONF_OK) throw std::runtime_error("consumer config " + k + ": " + err);
  std::unique_ptr<RdKafka::KafkaConsumer> c(RdKafka::KafkaConsumer::create(cc.get(), err));
  c->subscribe({in});
  clk::time_point t0{};  // the first consumed record (group join excluded, as for rill)
  auto last_commit = clk::now();
  bool started = false;
  double cpu0 = 0;
  while (dr.delivered + dr.failed < std::uint64_t(n)) {
    std::unique_ptr<RdKafka::Message> m(c->consume(1));
    if (m && m->err() == RdKafka::ERR_NO_ERROR) {
      if (!started) { started = true; t0 = clk::now(); cpu0 = cpu_now(); }
      std::string v(static_cast<const char*>(m->payload()), m->len());
      map_value(v);
      while (p->produce(out, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY, v.data(), v.size(),
                        m->key_pointer(), m->key_len(), m->timestamp().timestamp, nullptr) ==
             RdKafka::ERR__QUEUE_FULL)
        p->poll(1);
    }
    p->poll(0);
    if (clk::now() - last_commit > 1s) {
      c->commitAsync();
      last_commit = clk::now();
    }
  }
  const double s = std::chrono::duration<double>(clk::now() - t0).count();
  const double cpu = cpu_now() - cpu0;
  c->commitSync();
  c->close();
  return {s, dr.delivered, dr.sum, cpu};
}

// ---- rill ----
result run_rill(const std::string& in, const std::string& out, int n, std::size_t workers) {
  rill::kafka_sink_options so{.brokers = brokers, .topic = out, .config = producer_config};
  if (max_pending >= 0) so.max_pending = std::uint64_t(max_pending);
  auto sink = std::make_shared<rill::kafka_sink<rec>>(so);
  const std::uint64_t primed = prime ? 1 : 0;
  if (prime) {  // through the sink's own producer, before the job starts
    rill::record<rec> r;
    r.value.key = prime_key;
    sink->write(0, std::move(r));
    if (sink->flush(30s) != 0 || sink->stats().delivered.load() != 1) throw std::runtime_error("rill: prime record failed");
  }
  rill::kafka_source<> src{{.brokers = brokers, .group = "bench-rill-" + std::to_string(::getpid()) + "-" + out,
                            .topics = {in}, .commit_interval = 1s, .config = consumer_config}};
  rill::runtime rt{{.workers = workers, .topology = std::to_string(workers) + " nodes x 1 cores", .pin = false}};
  std::atomic<std::uint64_t> sum{0};
  clk::time_point t0{}, t1{};
  double cpu0 = 0, cpu1 = 0;
  // Checks every 1 ms: at 100 us, its ~10,000 wake-ups a second were about 25,000 context
  // switches per 1 M-record run, CPU the raw loop (which checks inline) does not pay. The
  // clock stops at most 1 ms late (under 0.1% of a 1 M-record run).
  std::thread stopper([&] {
    while (sink->stats().delivered.load() == 0 && sink->stats().accepted.load() == 0) std::this_thread::sleep_for(1ms);
    while (sink->stats().delivered.load() < std::uint64_t(n) + primed) std::this_thread::sleep_for(1ms);
    t1 = clk::now();
    cpu1 = cpu_now();
    rt.request_stop();
  });
  // The clock starts at the first consumed record (group join excluded, as for raw).
  std::atomic<bool> started{false};
  auto job = rill::from(std::move(src))
                 .map([&](rec&& r) {
                   if (!started.exchange(true, std::memory_order_relaxed)) { t0 = clk::now(); cpu0 = cpu_now(); }
                   map_value(r.value);
                   std::uint64_t s = 0;
                   for (char ch : r.value) s += std::uint8_t(ch);
                   sum.fetch_add(s, std::memory_order_relaxed);
                   return std::move(r);
                 })
                 .sink(sink);
  rt.run(job);
  stopper.join();
  return {std::chrono::duration<double>(t1 - t0).count(), sink->stats().delivered.load() - primed, sum.load(),
          cpu1 - cpu0};
}

}  // namespace

int main(int argc, char** argv) {
  int n = 200000, runs = 3;
  std::string in_topic, make_input, peers = "raw,rill/1,rill/2";
  if (const char* b = std::getenv("RILL_KAFKA_BROKERS")) brokers = b;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--brokers") brokers = argv[i + 1];
    else if (a == "--records") n = std::atoi(argv[i + 1]);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else if (a == "--in") in_topic = argv[i + 1];
    else if (a == "--make-input") make_input = argv[i + 1];
    else if (a == "--peers") peers = "," + std::string(argv[i + 1]) + ",";
    else if (a == "--prime") prime = std::atoi(argv[i + 1]) != 0;
    else if (a == "--max-pending") max_pending = std::atoll(argv[i + 1]);
    else if (a == "--consumer-config" || a == "--producer-config") {
      std::string list = argv[i + 1];
      for (std::size_t at = 0; at < list.size();) {
        auto end = list.find(',', at);
        if (end == std::string::npos) end = list.size();
        const auto kv = list.substr(at, end - at);
        const auto eq = kv.find('=');
        if (eq == std::string::npos) { std::cerr << a << ": expected k=v, got " << kv << "\n"; return 2; }
        (a == "--consumer-config" ? consumer_config : producer_config)[kv.substr(0, eq)] = kv.substr(eq + 1);
        at = end + 1;
      }
    }
    else {
      std::cerr << "usage: kafka_bench [--brokers B] [--records N] [--runs R] [--in TOPIC] [--peers raw,rill/1,rill/2]"
                   " [--prime 0|1] [--consumer-config k=v,...] [--producer-config k=v,...] [--max-pending N]\n"
                   "       kafka_bench --make-input TOPIC [--brokers B] [--records N]\n";
      return 2;
    }
  }
  if (peers.front() != ',') peers = "," + peers + ",";
  if (!make_input.empty()) {  // for bench/kafka_peers.sh: the input of every peer
    create_topic(make_input, 4);
    produce_input(make_input, n);
    return 0;
  }
  const auto tag = std::to_string(::getpid());
  const auto in = in_topic.empty() ? "bench-in-" + tag : in_topic;
  if (in_topic.empty()) {
    create_topic(in, 4);
    produce_input(in, n);
  }
  const auto want = expected_sum(n);
  std::printf("consume -> map -> produce, %d records x 100 B, 4 partitions, broker %s, best of %d\n", n,
              brokers.c_str(), runs);
  std::printf("%-8s %12s %10s %12s\n", "peer", "records/s", "seconds", "cpu s/M rec");
  int bad = 0;
  auto report = [&](const char* name, auto fn) {
    if (peers.find("," + std::string(name) + ",") == std::string::npos) return;
    result best{1e30, 0, 0};
    for (int r = 0; r < runs; ++r) {
      const auto out = std::string("bench-out-") + name + "-" + tag + "-" + std::to_string(r);
      for (char& ch : const_cast<std::string&>(out)) if (ch == '/') ch = '_';
      create_topic(out, 4);
      const auto res = fn(out);
      const bool ok = res.delivered == std::uint64_t(n) && res.sum == want;
      std::fprintf(stderr, "RESULT peer=%s records=%d seconds=%.3f cpu=%.3f ok=%d\n", name, n, res.seconds, res.cpu,
                   ok ? 1 : 0);
      if (!ok) {
        std::fprintf(stderr, "%s: checksum mismatch: delivered %llu sum %llu (want %d, %llu)\n", name,
                     (unsigned long long)res.delivered, (unsigned long long)res.sum, n, (unsigned long long)want);
        ++bad;
      }
      if (res.seconds < best.seconds) best = res;
    }
    std::printf("%-8s %12.0f %10.3f %12.2f\n", name, n / best.seconds, best.seconds, best.cpu * 1e6 / n);
    std::fflush(stdout);
  };
  report("raw", [&](const std::string& out) { return run_raw(in, out, n); });
  report("rill/1", [&](const std::string& out) { return run_rill(in, out, n, 1); });
  report("rill/2", [&](const std::string& out) { return run_rill(in, out, n, 2); });
  return bad ? 1 : 0;
}

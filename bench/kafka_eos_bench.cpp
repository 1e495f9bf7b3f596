// kafka_eos_bench — consume -> map -> produce on a real broker, at-least-once against
// exactly-once (docs/design.md "Exactly-once"), side by side in one process run:
//   rill/alo   rill::from(kafka_source) -> map -> kafka_sink, 2 workers (the default guarantee)
//   rill/eos   the same with processing_guarantee::exactly_once on source and sink
//   ks/eos     Kafka Streams 4.1.1, the same job with processing.guarantee=exactly_once_v2
//              and its EOS commit interval, 100 ms (bench/kafka-streams Pipe, 2 stream
//              threads, a JVM of its own started per run; --ks-cp CLASSPATH, skipped
//              without it; --ks-producer-config k=v,k=v adds producer properties)
// Two measurements per peer and round, the peers' order alternating by round:
//   throughput  N records (key "k<i>", 100-byte value, 4 partitions) produced before the
//               clock; records/s from the first consumed record (Kafka Streams: its state
//               RUNNING, printed by Pipe) until a read_committed reader in this process
//               has seen all N output records (for at-least-once that is their delivery;
//               for exactly-once, the commit that makes them visible). Checked: N
//               records, the byte sum of the mapped values. Also the steady rate: 0.8 N
//               over the time between the reader's 10 % and 90 % marks, which leaves out
//               start-up (rill's clock starts at its first record, and the second split
//               joining the group can then cost a rebalance; Kafka Streams' starts after
//               its rebalance) and the tail (the last commit interval).
//   latency     a producer thread writes RATE records/s for SECONDS into a fresh input
//               topic while the job runs; the reader takes, per output record, the wall
//               clock at arrival minus the record's Kafka timestamp (the input's
//               CreateTime, which kafka_sink keeps as the event time): end-to-end latency
//               as a read_committed consumer sees it, ms; p50 and p99 over the records
//               produced from 1 s after the first output arrived. The feed starts once
//               the job is ready (rill: all 4 partitions assigned and no rebalance for
//               1 s; Kafka Streams: 1 s after RUNNING, which it reaches only after its
//               rebalance), so start-up is left out. Checked: every record arrives.
// Medians over the rounds are printed; every run's line goes to stderr as
//   RESULT peer=P kind=throughput records=N seconds=S mid80_seconds=M pauses=K ok=0|1
// (pauses: the rill source's backpressure pauses, kafka_source_stats::pauses; --max-pending N
// sets kafka_sink_options::max_pending of both rill peers)
//   RESULT peer=P kind=latency records=N p50_ms=X p99_ms=Y ok=0|1
//
//   RILL_KAFKA_PORT=49092 scripts/kafka start
//   build-release/bench/kafka_eos_bench --brokers 127.0.0.1:49092 --records 200000
//       --rate 20000 --seconds 10 --rounds 3
//       [--ks-cp 'bench/kafka-streams/target/rill-kafka-streams-bench.jar:bench/kafka-streams/target/lib/*']
//       [--ks-producer-config k=v,k=v] [--peers rill/eos]   (--peers: only these, comma-separated)
//       [--max-pending N]
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
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
extern char** environ;

namespace {

std::string brokers = "127.0.0.1:49092";
int run_no = 0;
std::uint64_t max_pending = rill::kafka_sink_options{}.max_pending;  ///< --max-pending

using rill_bench::value_of;
void create_topic(const std::string& name, int partitions) { rill_bench::create_topic(brokers, name, partitions); }

/// Writes records [0, n) to `topic`; with rate > 0 at that many records per second.
void produce(const std::string& topic, int n, int rate) {
  std::string err;
  std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  c->set("bootstrap.servers", brokers, err);
  c->set("linger.ms", rate > 0 ? "1" : "20", err);
  std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), err));
  const auto start = clk::now();
  for (int i = 0; i < n; ++i) {
    if (rate > 0 && i % 100 == 0) std::this_thread::sleep_until(start + std::chrono::microseconds(std::int64_t(i) * 1000000 / rate));
    std::string k = "k";
    k += std::to_string(i);
    auto v = value_of(i);
    while (p->produce(topic, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY, v.data(), v.size(),
                      k.data(), k.size(), 0, nullptr) == RdKafka::ERR__QUEUE_FULL)
      p->poll(10);
    p->poll(0);
  }
  if (p->flush(60000) != RdKafka::ERR_NO_ERROR) throw std::runtime_error("input flush timed out");
}

std::uint64_t byte_sum(const std::string& v) {
  std::uint64_t s = 0;
  for (char ch : v) s += std::uint8_t(ch);
  return s;
}

/// A read_committed consumer of `topic` (4 partitions, from the beginning) on a thread of
/// its own: counts records, sums their bytes, and keeps each record's latency (wall
/// clock at arrival minus its timestamp, ms) when it arrives after `measure_from`.
struct reader {
  std::atomic<std::uint64_t> seen{0}, sum{0};
  std::atomic<bool> stop{false};
  clk::time_point last_at{};
  /// When the 10 % and the 90 % mark of `expect` records were read: the rate between the
  /// two leaves out start-up (group join, a rebalance as the second split joins) and the
  /// tail (the last transaction's commit interval), which the end-to-end time includes.
  std::uint64_t expect = 0;
  clk::time_point at10{}, at90{};
  std::vector<long long> latencies_ms;
  std::chrono::system_clock::time_point measure_from = std::chrono::system_clock::time_point::max();
  bool latency = false;
  std::thread t;
  reader(const std::string& topic, bool lat, std::uint64_t n) : expect(n), latency(lat) {
    t = std::thread([this, topic] {
      std::string err;
      std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
      c->set("bootstrap.servers", brokers, err);
      c->set("group.id", "bench-reader-" + topic, err);
      c->set("isolation.level", "read_committed", err);
      c->set("enable.auto.commit", "false", err);
      c->set("fetch.wait.max.ms", "10", err);
      std::unique_ptr<RdKafka::KafkaConsumer> k(RdKafka::KafkaConsumer::create(c.get(), err));
      std::vector<RdKafka::TopicPartition*> tps;
      for (int p = 0; p < 4; ++p) tps.push_back(RdKafka::TopicPartition::create(topic, p, RdKafka::Topic::OFFSET_BEGINNING));
      k->assign(tps);
      RdKafka::TopicPartition::destroy(tps);
      while (!stop.load()) {
        std::unique_ptr<RdKafka::Message> m(k->consume(5));
        if (!m || m->err()) continue;
        const auto now = std::chrono::system_clock::now();
        if (latency && seen.load() == 0) measure_from = now + 1s;
        const auto ts = m->timestamp().timestamp;
        const auto sent = std::chrono::system_clock::time_point(std::chrono::milliseconds(ts));
        if (sent >= measure_from)
          latencies_ms.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(now - sent).count());
        sum.fetch_add(byte_sum(std::string(static_cast<const char*>(m->payload()), m->len())));
        last_at = clk::now();
        const auto k = seen.fetch_add(1) + 1;
        if (k == expect / 10) at10 = last_at;
        if (k == expect * 9 / 10) at90 = last_at;
      }
      k->close();
    });
  }
  /// Stops the thread; its fields may be read after this.
  void finish() {
    stop = true;
    if (t.joinable()) t.join();
  }
  ~reader() { finish(); }
};

struct job_result {
  double seconds = 0;      ///< first record processed (rill) or RUNNING (Kafka Streams) to the last read
  double mid_seconds = 0;  ///< the 10 % to the 90 % mark of the records read
  bool ok = false;
  double p50 = 0, p99 = 0;
  std::size_t samples = 0;
  std::uint64_t pauses = 0;  ///< rill: the source's backpressure pauses (kafka_source_stats::pauses)
};

/// The p50 and p99 of `ms` (one sample per record read) into `res`.
void set_latency(job_result& res, std::vector<long long> ms) {
  std::sort(ms.begin(), ms.end());
  res.samples = ms.size();
  if (ms.empty()) return;
  res.p50 = double(ms[ms.size() / 2]);
  res.p99 = double(ms[std::min(ms.size() - 1, ms.size() * 99 / 100)]);
}

/// One run of the map job; `rate` = 0: throughput over a backlog of n, else latency.
job_result run(bool eos, int n, int rate, int seconds) {
  const auto tag = std::to_string(::getpid()) + "-" + std::to_string(run_no++);
  const auto in = "eosb-in-" + tag, out = "eosb-out-" + tag;
  create_topic(in, 4);
  create_topic(out, 4);
  if (rate == 0) produce(in, n, 0);
  const auto guarantee = eos ? rill::processing_guarantee::exactly_once : rill::processing_guarantee::at_least_once;
  rill::kafka_source<> src{{.brokers = brokers, .group = "eosb-g-" + tag, .topics = {in},
                            .commit_interval = 1s, .instance_id = eos ? "i" + tag : "", .guarantee = guarantee}};
  const rill::kafka_sink_options so{.brokers = brokers, .topic = out, .max_pending = max_pending, .guarantee = guarantee};
  auto st = src.stats();
  auto sink = eos ? std::make_shared<rill::kafka_sink<rec>>(so, src) : std::make_shared<rill::kafka_sink<rec>>(so);
  std::atomic<bool> started{false};
  clk::time_point t0{};
  auto job = rill::from(std::move(src))
                 .map([&](rec&& r) {
                   if (!started.exchange(true, std::memory_order_relaxed)) t0 = clk::now();
                   if (!r.value.empty()) r.value[0] = char(std::toupper(r.value[0]));
                   return std::move(r);
                 })
                 .sink(sink);
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 cores", .pin = false}};
  reader rd(out, rate > 0, std::uint64_t(n));
  std::uint64_t want_sum = 0;
  for (int i = 0; i < n; ++i) {
    auto v = value_of(i);
    v[0] = char(std::toupper(v[0]));
    want_sum += byte_sum(v);
  }
  std::thread feeder;
  if (rate > 0)
    feeder = std::thread([&] {
      // Once the group settled: all 4 partitions assigned and no rebalance callback for
      // 1 s. The first split can hold all 4 before the second joins; the rebalance that
      // follows stops the input for as long as it lasts (seconds on a loaded machine),
      // which would count as latency of the records written meanwhile.
      const auto until = clk::now() + 60s;
      auto last = st->rebalances.load();
      auto still = clk::now();
      while (clk::now() < until && (st->assigned.load() < 4 || clk::now() - still < 1s)) {
        std::this_thread::sleep_for(10ms);
        if (const auto r = st->rebalances.load(); r != last) {
          last = r;
          still = clk::now();
        }
      }
      produce(in, n, rate);
    });
  job_result res;
  std::thread stopper([&] {
    const auto give_up = clk::now() + std::chrono::seconds(120 + seconds);
    while (rd.seen.load() < std::uint64_t(n) && clk::now() < give_up) std::this_thread::sleep_for(1ms);
    rt.request_stop();
  });
  const auto rep = rt.run(job);
  for (const auto& e : rep.errors) std::fprintf(stderr, "run error (%s): %s\n", eos ? "rill/eos" : "rill/alo", e.c_str());
  stopper.join();
  if (feeder.joinable()) feeder.join();
  rd.finish();
  res.seconds = std::chrono::duration<double>(rd.last_at - t0).count();
  res.mid_seconds = std::chrono::duration<double>(rd.at90 - rd.at10).count();
  res.ok = rd.seen.load() == std::uint64_t(n) && rd.sum.load() == want_sum;
  res.pauses = st->pauses.load();
  if (rate > 0) set_latency(res, rd.latencies_ms);
  return res;
}

std::uint64_t want_sum_of(int n) {
  std::uint64_t s = 0;
  for (int i = 0; i < n; ++i) {
    auto v = value_of(i);
    v[0] = char(std::toupper(v[0]));
    s += byte_sum(v);
  }
  return s;
}

/// The Kafka Streams peer: the same measurements around a Pipe process.
job_result run_ks(const std::string& cp, const std::string& producer_config, int n, int rate) {
  const auto tag = std::to_string(::getpid()) + "-" + std::to_string(run_no++);
  const auto in = "eosb-in-" + tag, out = "eosb-out-" + tag;
  create_topic(in, 4);
  create_topic(out, 4);
  if (rate == 0) produce(in, n, 0);
  reader rd(out, rate > 0, std::uint64_t(n));
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<std::string> args{"/usr/bin/java", "-cp", cp, "dev.rill.bench.Pipe", "--brokers", brokers, "--in", in,
                                "--out", out, "--eos", "1", "--threads", "2", "--tag", tag};
  if (!producer_config.empty()) {
    args.push_back("--producer-config");
    args.push_back(producer_config);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) throw std::runtime_error("spawn java");
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  std::string line;
  char ch;
  while (::read(fds[0], &ch, 1) == 1) {  // until "RUNNING"
    if (ch != '\n') { line += ch; continue; }
    if (line == "RUNNING") break;
    line.clear();
  }
  const auto t0 = clk::now();
  std::thread feeder;
  if (rate > 0)
    feeder = std::thread([&] {  // 1 s after RUNNING
      std::this_thread::sleep_for(1s);
      produce(in, n, rate);
    });
  const auto give_up = clk::now() + 180s;
  while (rd.seen.load() < std::uint64_t(n) && clk::now() < give_up) std::this_thread::sleep_for(1ms);
  if (feeder.joinable()) feeder.join();
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  ::close(fds[0]);
  rd.finish();
  job_result res;
  res.seconds = std::chrono::duration<double>(rd.last_at - t0).count();
  res.mid_seconds = std::chrono::duration<double>(rd.at90 - rd.at10).count();
  res.ok = rd.seen.load() == std::uint64_t(n) && rd.sum.load() == want_sum_of(n);
  if (rate > 0) set_latency(res, rd.latencies_ms);
  return res;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int n = 200000, rate = 20000, seconds = 10, rounds = 3;
  std::string ks_cp, ks_producer_config, only;
  if (const char* b = std::getenv("RILL_KAFKA_BROKERS")) brokers = b;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--brokers") brokers = argv[i + 1];
    else if (a == "--records") n = std::atoi(argv[i + 1]);
    else if (a == "--rate") rate = std::atoi(argv[i + 1]);
    else if (a == "--seconds") seconds = std::atoi(argv[i + 1]);
    else if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (a == "--ks-cp") ks_cp = argv[i + 1];
    else if (a == "--ks-producer-config") ks_producer_config = argv[i + 1];
    else if (a == "--peers") only = argv[i + 1];
    else if (a == "--max-pending") max_pending = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::cerr << "usage: kafka_eos_bench [--brokers B] [--records N] [--rate R] [--seconds S] [--rounds K]"
                   " [--ks-cp CLASSPATH] [--ks-producer-config k=v,k=v] [--peers rill/alo,rill/eos,ks/eos]"
                   " [--max-pending N]\n";
      return 2;
    }
  }
  struct peer {
    const char* name;
    int kind;  // 0 rill at-least-once, 1 rill exactly-once, 2 Kafka Streams exactly_once_v2
    std::vector<double> rps, mid_rps, p50, p99;
  };
  std::vector<peer> peers{{"rill/alo", 0, {}, {}, {}, {}}, {"rill/eos", 1, {}, {}, {}, {}}};
  if (!ks_cp.empty()) peers.push_back({"ks/eos", 2, {}, {}, {}, {}});
  if (!only.empty())  // e.g. "rill/eos" alone, for a profile
    std::erase_if(peers, [&](const peer& p) { return ("," + only + ",").find("," + std::string(p.name) + ",") == std::string::npos; });
  auto go = [&](const peer& p, int records, int r_rate, int secs) {
    return p.kind == 2 ? run_ks(ks_cp, ks_producer_config, records, r_rate) : run(p.kind == 1, records, r_rate, secs);
  };
  int bad = 0;
  const std::size_t np = peers.size();
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t j = 0; j < np; ++j) {
      auto& p = peers[(j + std::size_t(r)) % np];  // rotate who goes first
      const auto t = go(p, n, 0, 0);
      std::fprintf(stderr, "RESULT peer=%s kind=throughput records=%d seconds=%.3f mid80_seconds=%.3f pauses=%llu ok=%d\n",
                   p.name, n, t.seconds, t.mid_seconds, (unsigned long long)t.pauses, t.ok ? 1 : 0);
      bad += !t.ok;
      p.rps.push_back(n / t.seconds);
      p.mid_rps.push_back(0.8 * n / t.mid_seconds);
      const int ln = rate * seconds;
      const auto l = go(p, ln, rate, seconds);
      std::fprintf(stderr, "RESULT peer=%s kind=latency records=%d rate=%d samples=%zu p50_ms=%.0f p99_ms=%.0f ok=%d\n",
                   p.name, ln, rate, l.samples, l.p50, l.p99, l.ok ? 1 : 0);
      bad += !l.ok;
      p.p50.push_back(l.p50);
      p.p99.push_back(l.p99);
    }
  }
  std::printf("consume -> map -> produce, 2 workers, 4 partitions, 100 B values, broker %s, median of %d rounds\n",
              brokers.c_str(), rounds);
  std::printf("%-10s %12s %16s   latency at %d rec/s: %8s %8s\n", "peer", "records/s", "10-90 % rec/s", rate,
              "p50 ms", "p99 ms");
  for (const auto& p : peers)
    std::printf("%-10s %12.0f %16.0f   %28.0f %8.0f\n", p.name, median(p.rps), median(p.mid_rps), median(p.p50),
                median(p.p99));
  return bad ? 1 : 0;
}

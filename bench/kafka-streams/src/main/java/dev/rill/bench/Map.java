package dev.rill.bench;

import java.nio.file.Files;
import java.util.Map.Entry;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams peer of bench/kafka_bench: consume -> upper-case the first byte of the value
 * -> produce, at-least-once (the default processing guarantee), commit every 1 s, producer
 * linger 5 ms (acks=all and idempotence are the client defaults), as the raw loop and rill.
 *
 * <p>The clock runs from the first record seen by the map to the N-th acknowledged send
 * (a producer interceptor counts acks: kafka_bench stops at the N-th delivery report). CPU is
 * this JVM's user+sys over the same interval. After the run (not timed) the output topic is
 * read back: record count and byte sum of the values must equal the input's, mapped.
 *
 * <pre>
 * java -cp 'target/rill-kafka-streams-bench.jar:target/lib/*' dev.rill.bench.Map \
 *   --brokers 127.0.0.1:49092 --in TOPIC --records 200000 [--threads 1,2] [--warmup 1] [--runs 1]
 * </pre>
 * Prints one line per measured run: {@code RESULT peer=kstreams/T records=N seconds=S cpu=C ok=1}.
 */
public final class Map {
  static volatile long target;
  static volatile long t0, cpu0, t1, cpu1;
  static final AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
  static volatile CountDownLatch done;
  static final AtomicLong started = new AtomicLong();

  /** Counts acknowledged sends; the N-th stops the clock. */
  public static final class AckCounter implements ProducerInterceptor<byte[], byte[]> {
    @Override public ProducerRecord<byte[], byte[]> onSend(ProducerRecord<byte[], byte[]> r) { return r; }
    @Override public void onAcknowledgement(RecordMetadata m, Exception e) {
      if (e != null) { failed.incrementAndGet(); return; }
      if (acked.incrementAndGet() == target) {
        t1 = System.nanoTime();
        cpu1 = Common.cpuNanos();
        done.countDown();
      }
    }
    @Override public void close() {}
    @Override public void configure(java.util.Map<String, ?> configs) {}
  }

  /** std::toupper in the "C" locale, as kafka_bench's map: a-z only. */
  static void mapValue(byte[] v) {
    if (v.length > 0 && v[0] >= 'a' && v[0] <= 'z') v[0] = (byte) (v[0] - 'a' + 'A');
  }

  public static void main(String[] argv) throws Exception {
    var a = Common.args(argv, "Map --brokers B --in TOPIC --records N [--threads 1,2] [--warmup 1] [--runs 1] [--tag T]");
    String brokers = Common.need(a, "brokers"), in = Common.need(a, "in");
    long n = Long.parseLong(Common.need(a, "records"));
    int warmup = Integer.parseInt(a.getOrDefault("warmup", "1")), runs = Integer.parseInt(a.getOrDefault("runs", "1"));
    String tag = a.getOrDefault("tag", Long.toString(ProcessHandle.current().pid()));
    String[] threads = a.getOrDefault("threads", "1").split(",");

    // expected checksum: the input's values, mapped (read once, not timed)
    long[] want = new long[2];
    Common.readAll(brokers, in, (k, v) -> {
      byte[] c = v.clone();
      mapValue(c);
      want[0]++;
      for (byte b : c) want[1] += b & 0xff;
    });
    if (want[0] != n) throw new IllegalStateException(in + " holds " + want[0] + " records, not " + n);

    int bad = 0, seq = 0;
    for (String th : threads) {
      for (int r = -warmup; r < runs; ++r) {
        String out = "ks-map-out-" + tag + "-" + th + "-" + (seq++);
        Common.createTopic(brokers, out, 4);
        double[] res = run(brokers, in, out, n, Integer.parseInt(th), tag + "-" + seq);
        long[] got = new long[2];
        Common.readAll(brokers, out, (k, v) -> {
          got[0]++;
          for (byte b : v) got[1] += b & 0xff;
        });
        boolean ok = got[0] == want[0] && got[1] == want[1] && failed.get() == 0;
        if (!ok) {
          ++bad;
          System.err.printf("kstreams/%s: checksum mismatch: %d records, sum %d (want %d, %d), %d failed sends%n",
              th, got[0], got[1], want[0], want[1], failed.get());
        }
        if (r < 0) {
          System.out.printf("warmup peer=kstreams/%s records=%d seconds=%.3f cpu=%.3f ok=%d%n", th, n, res[0], res[1], ok ? 1 : 0);
        } else {
          System.out.printf("RESULT peer=kstreams/%s records=%d seconds=%.3f cpu=%.3f ok=%d%n", th, n, res[0], res[1], ok ? 1 : 0);
        }
        System.out.flush();
      }
    }
    System.exit(bad == 0 ? 0 : 1);
  }

  /** One run with a fresh application id (fresh group: reads the input from the start). */
  static double[] run(String brokers, String in, String out, long n, int threads, String id) throws Exception {
    target = n;
    acked.set(0);
    failed.set(0);
    started.set(0);
    done = new CountDownLatch(1);
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, "ks-map-" + id);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
    java.nio.file.Path stateDir = Files.createTempDirectory("ks-map");
    p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
    p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
    p.put(StreamsConfig.producerPrefix(ProducerConfig.INTERCEPTOR_CLASSES_CONFIG), AckCounter.class.getName());
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    StreamsBuilder b = new StreamsBuilder();
    b.stream(in, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .mapValues(v -> {
          if (started.get() == 0 && started.compareAndSet(0, 1)) {
            t0 = System.nanoTime();
            cpu0 = Common.cpuNanos();
          }
          mapValue(v); // in place: the deserializer's fresh array
          return v;
        })
        .to(out, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    try (KafkaStreams ks = new KafkaStreams(b.build(), p)) {
      ks.start();
      if (!done.await(300, TimeUnit.SECONDS))
        throw new IllegalStateException("only " + acked.get() + " of " + n + " acked in 300 s");
      ks.close(java.time.Duration.ofSeconds(60));
    }
    Common.deleteTree(stateDir);
    return new double[] {(t1 - t0) / 1e9, (cpu1 - cpu0) / 1e9};
  }
}

package dev.rill.bench;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * Kafka Streams reference for netflow's Kafka job (examples/netflow/kafka_mode.cpp): reads the
 * packet topic written by {@code netflow --probe} (key: direction-normalised 5-tuple as text;
 * value: netflow's 64-byte packet record), drops non-IP packets, and counts packets and wire
 * bytes per 5-tuple per tumbling event-time window (event time = the packet's capture time,
 * bytes 0-7 of the value), with the same window length and allowed lateness (grace =
 * netflow's --max-delay). Output: one JSON value per (window, 5-tuple) update, keyed by the
 * 5-tuple; the statestore cache (default 10 MB) and the commit interval coalesce updates,
 * so the last record per (window, 5-tuple) holds the count.
 *
 * <p>{@code --eos 0} (default): at-least-once, commit every 1 s (netflow's source commits
 * every 1 s). {@code --eos 1}: processing.guarantee=exactly_once_v2 with Kafka Streams' EOS
 * default commit interval, 100 ms (as Pipe; netflow's {@code --exactly-once}): the output
 * is transactional, read it with isolation.level=read_committed.
 *
 * <p>Stops like {@code netflow --idle-exit}: once records were read and none came for
 * --idle-exit-ms, close() (flushes the caches, delivers, commits). Prints a summary line on
 * stdout: consumed records, in-process seconds and CPU from the first record to the end of
 * close() (the idle wait is subtracted from the seconds, not from the CPU).
 * --warmup N first runs the same job N times in this JVM (application id ID-warmup-i, output
 * OUT-warmup), so the measured run has a warm JIT; the summary line is the last run's.
 *
 * <pre>
 * java -cp 'target/rill-kafka-streams-bench.jar:target/lib/*' dev.rill.bench.FlowCount \
 *   --brokers B --in packets --out flows --window-ms 1000 --grace-ms 2000 [--threads 1]
 *   [--idle-exit-ms 3000] [--store rocksdb|memory] [--app-id ID] [--eos 0|1] [--warmup 0]
 *   [--producer-config k=v,k=v]
 * </pre>
 */
public final class FlowCount {
  static final AtomicLong consumed = new AtomicLong();
  static volatile long t0, cpu0;

  /** Counts records handed to the stream threads; the first one starts the clock. */
  public static final class Counter implements ConsumerInterceptor<byte[], byte[]> {
    @Override public ConsumerRecords<byte[], byte[]> onConsume(ConsumerRecords<byte[], byte[]> rs) {
      if (!rs.isEmpty() && consumed.getAndAdd(rs.count()) == 0) {
        t0 = System.nanoTime();
        cpu0 = Common.cpuNanos();
      }
      return rs;
    }
    @Override public void onCommit(java.util.Map<TopicPartition, OffsetAndMetadata> offsets) {}
    @Override public void close() {}
    @Override public void configure(java.util.Map<String, ?> configs) {}
  }

  static boolean ours(byte[] v) {
    return v != null && v.length == 64 && v[60] == 'R' && v[61] == 'P' && v[62] == '1' && v[63] == 0;
  }

  /** Event time: the packet's capture time (ns, little-endian i64 at 0), in ms. */
  public static final class PacketTime implements TimestampExtractor {
    @Override public long extract(ConsumerRecord<Object, Object> r, long partitionTime) {
      byte[] v = (byte[]) r.value();
      if (!ours(v)) return Math.max(partitionTime, 0);
      return Math.floorDiv(ByteBuffer.wrap(v).order(ByteOrder.LITTLE_ENDIAN).getLong(0), 1_000_000L);
    }
  }

  /** (packets, bytes) as two big-endian longs. */
  static final Serde<long[]> PAIR = Serdes.serdeFrom(
      (topic, p) -> p == null ? null : ByteBuffer.allocate(16).putLong(p[0]).putLong(p[1]).array(),
      (topic, b) -> {
        if (b == null) return null;
        ByteBuffer bb = ByteBuffer.wrap(b);
        return new long[] {bb.getLong(), bb.getLong()};
      });

  public static void main(String[] argv) throws Exception {
    var a = Common.args(argv, "FlowCount --brokers B --in TOPIC --out TOPIC --window-ms W --grace-ms G "
        + "[--threads 1] [--idle-exit-ms 3000] [--store rocksdb|memory] [--app-id ID] [--eos 0|1] [--warmup 0] "
        + "[--producer-config k=v,k=v]");
    String brokers = Common.need(a, "brokers"), in = Common.need(a, "in"), out = Common.need(a, "out");
    long windowMs = Long.parseLong(Common.need(a, "window-ms")), graceMs = Long.parseLong(Common.need(a, "grace-ms"));
    long idleMs = Long.parseLong(a.getOrDefault("idle-exit-ms", "3000"));
    String store = a.getOrDefault("store", "rocksdb");
    String appId = a.getOrDefault("app-id", "ks-flowcount-" + ProcessHandle.current().pid());
    int warmup = Integer.parseInt(a.getOrDefault("warmup", "0"));
    if (warmup > 0) Common.createTopic(brokers, out + "-warmup", 4, java.util.Map.of("retention.ms", "-1"));
    boolean clean = true;
    for (int i = 0; i < warmup; ++i)
      clean &= run(a, brokers, in, out + "-warmup", windowMs, graceMs, idleMs, store, appId + "-warmup-" + i, true);
    clean &= run(a, brokers, in, out, windowMs, graceMs, idleMs, store, appId, false);
    System.exit(clean ? 0 : 1);
  }

  static boolean run(java.util.Map<String, String> a, String brokers, String in, String out, long windowMs, long graceMs,
      long idleMs, String store, String appId, boolean warm) throws Exception {
    consumed.set(0);

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(a.getOrDefault("threads", "1")));
    boolean eos = a.getOrDefault("eos", "0").equals("1");
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, eos ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, eos ? 100 : 1000);
    java.nio.file.Path stateDir = Files.createTempDirectory("ks-flowcount");
    p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
    p.put(StreamsConfig.DEFAULT_TIMESTAMP_EXTRACTOR_CLASS_CONFIG, PacketTime.class.getName());
    p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5); // rill's kafka_sink
    p.put(StreamsConfig.mainConsumerPrefix("interceptor.classes"), Counter.class.getName());
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    Common.producerConfig(p, a.getOrDefault("producer-config", ""));

    Duration window = Duration.ofMillis(windowMs), grace = Duration.ofMillis(graceMs);
    Materialized<Bytes, long[], WindowStore<Bytes, byte[]>> mat = store.equals("memory")
        ? Materialized.<Bytes, long[]>as(Stores.inMemoryWindowStore("flows", window.plus(grace), window, false))
        : Materialized.<Bytes, long[], WindowStore<Bytes, byte[]>>as("flows");
    mat = mat.withKeySerde(Serdes.Bytes()).withValueSerde(PAIR);

    StreamsBuilder b = new StreamsBuilder();
    b.stream(in, Consumed.with(Serdes.Bytes(), Serdes.ByteArray()))
        .filter((k, v) -> ours(v) && v[16] != 5) // 5 = rill::ip_proto::non_ip: netflow's filter
        .groupByKey(Grouped.with(Serdes.Bytes(), Serdes.ByteArray())) // the probe keyed by 5-tuple: no repartition
        .windowedBy(TimeWindows.ofSizeAndGrace(window, grace))
        .aggregate(() -> new long[2],
            (k, v, agg) -> new long[] {agg[0] + 1,
                agg[1] + (ByteBuffer.wrap(v).order(ByteOrder.LITTLE_ENDIAN).getInt(8) & 0xffffffffL)},
            mat)
        .toStream()
        .map((wk, c) -> {
          String key = new String(wk.key().get(), StandardCharsets.UTF_8);
          String json = "{\"window_start_ns\":" + wk.window().start() * 1_000_000L + ",\"window_end_ns\":"
              + wk.window().end() * 1_000_000L + ",\"key\":\"" + key + "\",\"packets\":" + c[0] + ",\"bytes\":" + c[1] + "}";
          return KeyValue.pair(wk.key().get(), json.getBytes(StandardCharsets.UTF_8));
        })
        .to(out, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams ks = new KafkaStreams(b.build(), p);
    ks.start();
    long last = 0, since = System.nanoTime();
    while (true) {
      Thread.sleep(20);
      long c = consumed.get(), now = System.nanoTime();
      if (c != last) {
        last = c;
        since = now;
      } else if (now - since >= (c > 0 ? idleMs : 10 * idleMs) * 1_000_000L) {
        break;
      }
    }
    long closeStart = System.nanoTime();
    double dropped = 0;
    for (var m : ks.metrics().entrySet())
      if (m.getKey().name().equals("dropped-records-total")) dropped += ((Number) m.getValue().metricValue()).doubleValue();
    boolean clean = ks.close(Duration.ofSeconds(60));
    Common.deleteTree(stateDir);
    long t1 = System.nanoTime(), cpu1 = Common.cpuNanos();
    double busy = (since - t0) / 1e9 + (t1 - closeStart) / 1e9;
    System.out.printf("%s consumed=%d dropped=%.0f seconds=%.3f cpu=%.3f clean=%b store=%s guarantee=%s%n",
        warm ? "warmup" : "FLOWCOUNT", consumed.get(), dropped, busy, (cpu1 - cpu0) / 1e9, clean, store,
        p.get(StreamsConfig.PROCESSING_GUARANTEE_CONFIG));
    System.out.flush();
    return clean;
  }
}

package dev.rill.bench;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.function.BiConsumer;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/** Shared helpers: arguments, process CPU time, topic creation, reading a whole topic. */
final class Common {
  private Common() {}

  static Map<String, String> args(String[] argv, String usage) {
    Map<String, String> m = new HashMap<>();
    for (int i = 0; i < argv.length; i += 2) {
      if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
        System.err.println("usage: " + usage);
        System.exit(2);
      }
      m.put(argv[i].substring(2), argv[i + 1]);
    }
    return m;
  }

  /**
   * Deletes `dir` and everything under it (a Kafka Streams state dir made with
   * Files.createTempDirectory), after the KafkaStreams instance using it closed, so that
   * runs leave no /tmp/ks-* behind. Errors are ignored: a dir left over is only litter.
   */
  static void deleteTree(java.nio.file.Path dir) {
    try (var paths = java.nio.file.Files.walk(dir)) {
      paths.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
    } catch (java.io.IOException | java.io.UncheckedIOException e) {
      // litter only
    }
  }

  static String need(Map<String, String> a, String k) {
    String v = a.get(k);
    if (v == null) {
      System.err.println("missing --" + k);
      System.exit(2);
    }
    return v;
  }

  /**
   * Adds "k=v,k=v" (a --producer-config argument; empty: nothing) to `p` as Kafka Streams
   * producer properties (StreamsConfig.producerPrefix).
   */
  static void producerConfig(Properties p, String kvs) {
    for (String kv : kvs.split(","))
      if (!kv.isEmpty())
        p.put(org.apache.kafka.streams.StreamsConfig.producerPrefix(kv.substring(0, kv.indexOf('='))), kv.substring(kv.indexOf('=') + 1));
  }

  /** user + sys CPU time of this JVM (all threads: stream threads, clients, GC, JIT), ns. */
  static long cpuNanos() {
    return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime();
  }

  static Admin admin(String brokers) {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    return Admin.create(p);
  }

  static void createTopic(String brokers, String topic, int partitions) throws Exception {
    createTopic(brokers, topic, partitions, Map.of());
  }

  static void createTopic(String brokers, String topic, int partitions, Map<String, String> configs) throws Exception {
    try (Admin a = admin(brokers)) {
      a.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(configs))).all().get();
    } catch (ExecutionException e) {
      if (!(e.getCause() instanceof TopicExistsException)) throw e;
    }
    Thread.sleep(1000); // leaders elected (setup only, not timed), as kafka_bench does
  }

  /**
   * Reads every record of every partition of `topic` from the beginning to the end offsets,
   * as a read_committed consumer: a transactional writer's committed records only (its
   * aborted records and commit markers take offsets but are not records), and everything of
   * a non-transactional writer. Ends when every partition's position reached its end offset
   * (for read_committed, the last stable offset: a transaction still open is not read).
   */
  static long readAll(String brokers, String topic, BiConsumer<byte[], byte[]> fn) {
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    long n = 0;
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      List<TopicPartition> tps = new ArrayList<>();
      c.partitionsFor(topic, Duration.ofSeconds(30)).forEach(pi -> tps.add(new TopicPartition(topic, pi.partition())));
      c.assign(tps);
      c.seekToBeginning(tps);
      Map<TopicPartition, Long> end = c.endOffsets(tps);
      long idle = System.nanoTime();
      while (!atEnd(c, tps, end)) {
        var recs = c.poll(Duration.ofMillis(200));
        if (recs.isEmpty() && System.nanoTime() - idle > 30_000_000_000L)
          throw new IllegalStateException(topic + ": read " + n + " records, then nothing for 30 s before the end offsets " + end);
        if (!recs.isEmpty()) idle = System.nanoTime();
        for (ConsumerRecord<byte[], byte[]> r : recs) {
          fn.accept(r.key(), r.value());
          ++n;
        }
      }
    }
    return n;
  }

  static boolean atEnd(KafkaConsumer<byte[], byte[]> c, List<TopicPartition> tps, Map<TopicPartition, Long> end) {
    for (TopicPartition tp : tps)
      if (c.position(tp) < end.get(tp)) return false;
    return true;
  }
}

package dev.rill.bench;

import java.nio.file.Files;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams peer of bench/kafka_eos_bench: Map's job (consume -> upper-case the first
 * byte of the value -> produce) as a long-running process that the C++ benchmark starts,
 * measures from outside with its own read_committed reader, and stops with SIGTERM.
 * {@code --eos 1}: processing.guarantee=exactly_once_v2 with Kafka Streams' EOS default
 * commit interval (100 ms); {@code --eos 0}: at-least-once, commit every 1 s (as Map).
 *
 * <pre>
 * java -cp 'target/rill-kafka-streams-bench.jar:target/lib/*' dev.rill.bench.Pipe \
 *   --brokers 127.0.0.1:49092 --in IN --out OUT --eos 1 [--threads 2] [--tag T]
 *   [--producer-config k=v,k=v]
 * </pre>
 * Prints {@code RUNNING} once the streams client is running.
 */
public final class Pipe {
  static void mapValue(byte[] v) {
    if (v.length > 0 && v[0] >= 'a' && v[0] <= 'z') v[0] = (byte) (v[0] - 'a' + 'A');
  }

  public static void main(String[] argv) throws Exception {
    var a = Common.args(argv, "Pipe --brokers B --in TOPIC --out TOPIC --eos 0|1 [--threads 2] [--tag T] "
        + "[--producer-config k=v,k=v]");
    String brokers = Common.need(a, "brokers"), in = Common.need(a, "in"), out = Common.need(a, "out");
    boolean eos = a.getOrDefault("eos", "1").equals("1");
    int threads = Integer.parseInt(a.getOrDefault("threads", "2"));
    String tag = a.getOrDefault("tag", Long.toString(ProcessHandle.current().pid()));
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, "ks-pipe-" + tag);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, eos ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, eos ? 100 : 1000);
    java.nio.file.Path stateDir = Files.createTempDirectory("ks-pipe");
    p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
    p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    Common.producerConfig(p, a.getOrDefault("producer-config", ""));
    StreamsBuilder b = new StreamsBuilder();
    b.stream(in, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .mapValues(v -> {
          mapValue(v);
          return v;
        })
        .to(out, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    CountDownLatch stop = new CountDownLatch(1);
    KafkaStreams ks = new KafkaStreams(b.build(), p);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      ks.close(java.time.Duration.ofSeconds(30));
      Common.deleteTree(stateDir);
      stop.countDown();
    }));
    ks.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING) {
        System.out.println("RUNNING");
        System.out.flush();
      }
    });
    ks.start();
    stop.await();
  }
}

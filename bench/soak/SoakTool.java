// rill: the Kafka side of bench/soak.sh and bench/soak_enrich.sh, a single-file source
// program run with the broker's jars (java -cp 'LIBS/*' SoakTool.java ...):
//   create BROKERS TOPIC PARTITIONS   create the topic (retention.ms=-1: rows carry capture
//                                     times as timestamps, which time retention would delete)
//   dump BROKERS TOPIC                every value of every partition, one per line on stdout,
//                                     from the beginning until 10 s pass with nothing new
//   dump-positions BROKERS TOPIC      the same, each line "PARTITION OFFSET VALUE"
//   produce BROKERS TOPIC RATE SECONDS VALUE...
//                                     RATE messages per second for SECONDS, message n to
//                                     partition n % partitions with value VALUE[n % count];
//                                     idempotent (acks=all), each send retried for up to
//                                     5 min, so a broker restart delays messages, does not
//                                     lose them. Ends with a JSON line on stdout
//                                     {"sent","acked","failed","partitions","elapsed_s"};
//                                     the first 10 failures on stderr.
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SoakTool {
  public static void main(String[] a) throws Exception {
    if (a.length >= 4 && a[0].equals("create")) {
      Properties p = new Properties();
      p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a[1]);
      try (Admin admin = Admin.create(p)) {
        NewTopic t = new NewTopic(a[2], Integer.parseInt(a[3]), (short) 1).configs(Map.of("retention.ms", "-1"));
        admin.createTopics(List.of(t)).all().get();
      }
      return;
    }
    if (a.length >= 6 && a[0].equals("produce")) {
      produce(a[1], a[2], Double.parseDouble(a[3]), Double.parseDouble(a[4]), Arrays.copyOfRange(a, 5, a.length));
      return;
    }
    if (a.length >= 3 && (a[0].equals("dump") || a[0].equals("dump-positions"))) {
      final boolean positions = a[0].equals("dump-positions");
      Properties p = new Properties();
      p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a[1]);
      p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
      p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
      p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000");
      try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
        List<TopicPartition> tps = new ArrayList<>();
        c.partitionsFor(a[2]).forEach(i -> tps.add(new TopicPartition(a[2], i.partition())));
        c.assign(tps);
        c.seekToBeginning(tps);
        long idleSince = System.currentTimeMillis();
        StringBuilder out = new StringBuilder();
        while (System.currentTimeMillis() - idleSince < 10000) {
          ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(500));
          if (rs.isEmpty()) continue;
          idleSince = System.currentTimeMillis();
          for (ConsumerRecord<String, String> r : rs) {
            if (positions) out.append(r.partition()).append(' ').append(r.offset()).append(' ');
            out.append(r.value()).append('\n');
          }
          System.out.print(out);
          out.setLength(0);
        }
      }
      return;
    }
    System.err.println("usage: SoakTool create BROKERS TOPIC PARTITIONS | dump BROKERS TOPIC"
                       + " | dump-positions BROKERS TOPIC | produce BROKERS TOPIC RATE SECONDS VALUE...");
    System.exit(2);
  }

  // Paced in 10 ms steps: by time t, RATE * t messages are handed to send(), which blocks
  // (max.block.ms) while the broker is away and the buffer is full; the pace then catches up.
  static void produce(String brokers, String topic, double rate, double seconds, String[] values) throws Exception {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
    p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
    p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "300000");
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "300000");
    AtomicLong acked = new AtomicLong(), failed = new AtomicLong();
    long sent = 0;
    int partitions;
    final long t0 = System.nanoTime();
    try (KafkaProducer<String, String> pr = new KafkaProducer<>(p)) {
      partitions = pr.partitionsFor(topic).size();
      final long total = (long) (rate * seconds);
      while (sent < total) {
        final double t = (System.nanoTime() - t0) / 1e9;
        final long due = Math.min(total, (long) (rate * t));
        for (; sent < due; sent++) {
          pr.send(new ProducerRecord<>(topic, (int) (sent % partitions), null, values[(int) (sent % values.length)]),
                  (md, e) -> {
                    if (e == null) { acked.incrementAndGet(); return; }
                    if (failed.incrementAndGet() <= 10) System.err.println("SoakTool produce: " + e);
                  });
        }
        Thread.sleep(10);
      }
      pr.flush();
    }
    System.out.printf("{\"sent\":%d,\"acked\":%d,\"failed\":%d,\"partitions\":%d,\"elapsed_s\":%.1f}%n",
                      sent, acked.get(), failed.get(), partitions, (System.nanoTime() - t0) / 1e9);
  }
}

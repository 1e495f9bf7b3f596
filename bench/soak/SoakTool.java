// rill: the Kafka side of bench/soak.sh, a single-file source program run with the broker's
// jars (java -cp 'LIBS/*' SoakTool.java ...):
//   create BROKERS TOPIC PARTITIONS   create the topic (retention.ms=-1: rows carry capture
//                                     times as timestamps, which time retention would delete)
//   dump BROKERS TOPIC                every value of every partition, one per line on stdout,
//                                     from the beginning until 10 s pass with nothing new
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

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
    if (a.length >= 3 && a[0].equals("dump")) {
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
          for (ConsumerRecord<String, String> r : rs) out.append(r.value()).append('\n');
          System.out.print(out);
          out.setLength(0);
        }
      }
      return;
    }
    System.err.println("usage: SoakTool create BROKERS TOPIC PARTITIONS | dump BROKERS TOPIC");
    System.exit(2);
  }
}

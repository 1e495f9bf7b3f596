// rill: readiness probe used by scripts/kafka. Asks the broker for cluster metadata
// (AdminClient.describeCluster + listTopics) and exits 0 when it answers, 1 otherwise.
// Run as a single-file source program: java -cp 'LIBS/*' Probe.java 127.0.0.1:PORT TIMEOUT_MS
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;

public class Probe {
  public static void main(String[] a) {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a[0]);
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "2000");
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "3000");
    long deadline = System.currentTimeMillis() + Long.parseLong(a.length > 1 ? a[1] : "60000");
    try (Admin admin = Admin.create(p)) {
      while (System.currentTimeMillis() < deadline) {
        try {
          int n = admin.describeCluster().nodes().get(3, TimeUnit.SECONDS).size();
          admin.listTopics().names().get(3, TimeUnit.SECONDS);
          if (n > 0) { System.out.println("probe: " + n + " broker(s) answer metadata"); System.exit(0); }
        } catch (Exception e) {
          Thread.sleep(200);
        }
      }
    } catch (Exception e) {
      System.err.println("probe: " + e);
    }
    System.exit(1);
  }
}

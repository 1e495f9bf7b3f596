package dev.rill.bench;

import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Helpers of bench/kafka_peers.sh (outside the timing).
 * <pre>
 *   Tool create --brokers B --topic T --partitions 4 [--config k=v,k=v]
 *   Tool count  --brokers B --topic T
 *   Tool ping   --brokers B            (exit 0 when a broker answers within 10 s)
 *   Tool flows  --brokers B --topic T --mode sum|latest [--dump FILE]
 * </pre>
 * flows reads a topic of flow rows (JSON values with window_start_ns, packets, bytes; the
 * message key is the 5-tuple) and prints totals. mode sum adds every row (netflow: one row
 * per window and 5-tuple, or several segments that add up); mode latest keeps the last row
 * per (window, 5-tuple) (Kafka Streams: each row is the running count). --dump writes
 * "window_start_ns key packets bytes" lines, sorted, for a diff.
 */
public final class Tool {
  static final Pattern START = Pattern.compile("\"window_start_ns\":(-?\\d+)");
  static final Pattern PACKETS = Pattern.compile("\"packets\":(\\d+)");
  static final Pattern BYTES = Pattern.compile("\"bytes\":(\\d+)");

  static long num(Pattern p, String s) {
    Matcher m = p.matcher(s);
    if (!m.find()) throw new IllegalArgumentException("no " + p + " in " + s);
    return Long.parseLong(m.group(1));
  }

  public static void main(String[] argv) throws Exception {
    if (argv.length < 1) {
      System.err.println("usage: Tool create|count|flows --brokers B --topic T ...");
      System.exit(2);
    }
    String cmd = argv[0];
    if (cmd.equals("ping")) {
      var a = Common.args(java.util.Arrays.copyOfRange(argv, 1, argv.length), "Tool ping --brokers B");
      try (var admin = Common.admin(Common.need(a, "brokers"))) {
        admin.describeCluster().nodes().get(10, java.util.concurrent.TimeUnit.SECONDS);
      }
      return;
    }
    var a = Common.args(java.util.Arrays.copyOfRange(argv, 1, argv.length), "Tool " + cmd + " --brokers B --topic T ...");
    String brokers = Common.need(a, "brokers"), topic = Common.need(a, "topic");
    switch (cmd) {
      case "create" -> {
        java.util.Map<String, String> configs = new java.util.HashMap<>();
        for (String kv : a.getOrDefault("config", "").split(","))
          if (!kv.isEmpty()) configs.put(kv.substring(0, kv.indexOf('=')), kv.substring(kv.indexOf('=') + 1));
        Common.createTopic(brokers, topic, Integer.parseInt(a.getOrDefault("partitions", "4")), configs);
      }
      case "count" -> System.out.println(Common.readAll(brokers, topic, (k, v) -> {}));
      case "flows" -> {
        boolean latest = Common.need(a, "mode").equals("latest");
        TreeMap<String, long[]> cells = new TreeMap<>();
        long rows = Common.readAll(brokers, topic, (k, v) -> {
          String s = new String(v, StandardCharsets.UTF_8), key = new String(k, StandardCharsets.UTF_8);
          String cell = String.format("%020d %s", num(START, s), key);
          long[] c = cells.computeIfAbsent(cell, x -> new long[2]);
          long pk = num(PACKETS, s), by = num(BYTES, s);
          if (latest) { c[0] = pk; c[1] = by; } else { c[0] += pk; c[1] += by; }
        });
        long packets = 0, bytes = 0;
        Set<String> conv = new HashSet<>();
        for (var e : cells.entrySet()) {
          packets += e.getValue()[0];
          bytes += e.getValue()[1];
          conv.add(e.getKey().substring(21));
        }
        System.out.printf("rows=%d cells=%d conversations=%d packets=%d bytes=%d%n", rows, cells.size(), conv.size(), packets, bytes);
        if (a.containsKey("dump")) {
          try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(Path.of(a.get("dump"))))) {
            for (var e : cells.entrySet()) w.println(e.getKey() + " " + e.getValue()[0] + " " + e.getValue()[1]);
          }
        }
      }
      default -> {
        System.err.println("unknown command " + cmd);
        System.exit(2);
      }
    }
  }
}

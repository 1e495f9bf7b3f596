// NexmarkFlink — the Flink peer of rill's nexmark_query (bench/nexmark.sh): NEXMark q0, q1,
// q2 as DataStream programs over the JSON-lines event files nexmark_gen writes, run in a
// local MiniCluster in this JVM. Each file is one split (as each --input of nexmark_query).
//
//   java -cp ... rill.nexmark.NexmarkFlink --query q1 --parallelism 2 --output rows.jsonl \
//        part0.jsonl part1.jsonl
//
// Rows: the same JSON lines as nexmark_query (examples/nexmark/queries.cpp), byte for byte.
// Summary (stderr, one JSON object, as nexmark_query's): query, events, rows, checksum (the
// sum mod 2^64 of each row line's FNV-1a, '\n' included), parallelism, elapsed_s, events_per_s.
package rill.nexmark;

import java.io.BufferedOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.RichFilterFunction;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

public final class NexmarkFlink {
  // Totals over every sink subtask (MiniCluster: the subtasks run in this JVM).
  static final AtomicLong ROWS = new AtomicLong(), CHECKSUM = new AtomicLong(),
      EVENTS = new AtomicLong();

  /** A bid parsed from a JSON line of nexmark_gen ({"Bid":{...}}). */
  public static final class Bid {
    public long auction, bidder, price, dateTime;
    public String extra;
  }

  // --- a minimal parser for the generator's flat JSON objects ---
  static int valueStart(String s, String key, int from) {
    int i = s.indexOf("\"" + key + "\":", from);
    if (i < 0) throw new IllegalArgumentException("no field " + key + " in " + s);
    return i + key.length() + 3;
  }
  static long longAt(String s, int i) {
    long v = 0;
    boolean neg = false;
    if (s.charAt(i) == '-') { neg = true; ++i; }
    for (; i < s.length(); ++i) {
      char c = s.charAt(i);
      if (c < '0' || c > '9') break;
      v = v * 10 + (c - '0');
    }
    return neg ? -v : v;
  }
  static String stringAt(String s, int i) {
    if (s.charAt(i) != '"') throw new IllegalArgumentException("not a string in " + s);
    StringBuilder b = new StringBuilder();
    for (++i; ; ++i) {
      char c = s.charAt(i);
      if (c == '"') return b.toString();
      if (c == '\\') {
        char e = s.charAt(++i);
        switch (e) {
          case 'n': b.append('\n'); break;
          case 't': b.append('\t'); break;
          case 'r': b.append('\r'); break;
          case 'b': b.append('\b'); break;
          case 'f': b.append('\f'); break;
          case 'u': b.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16)); i += 4; break;
          default: b.append(e);
        }
      } else {
        b.append(c);
      }
    }
  }
  static Bid parseBid(String line) {
    Bid b = new Bid();
    b.auction = longAt(line, valueStart(line, "auction", 7));
    b.bidder = longAt(line, valueStart(line, "bidder", 7));
    b.price = longAt(line, valueStart(line, "price", 7));
    b.dateTime = longAt(line, valueStart(line, "date_time", 7));
    b.extra = stringAt(line, valueStart(line, "extra", 7));
    return b;
  }

  // --- the rows' JSON, as examples/nexmark/queries.cpp writes it ---
  static void str(StringBuilder out, String s) {
    out.append('"');
    for (int k = 0; k < s.length(); ++k) {
      char c = s.charAt(k);
      if (c == '"' || c == '\\') out.append('\\').append(c);
      else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
      else out.append(c);
    }
    out.append('"');
  }
  static String q0(Bid b) {
    StringBuilder o = new StringBuilder(160);
    o.append("{\"auction\":").append(b.auction).append(",\"bidder\":").append(b.bidder)
        .append(",\"price\":").append(b.price).append(",\"date_time\":").append(b.dateTime)
        .append(",\"extra\":");
    str(o, b.extra);
    return o.append("}\n").toString();
  }
  static String q1(Bid b) {
    // 0.908 * price as Flink's DECIMAL: exactly price * 908 thousandths.
    long t = b.price * 908;
    long frac = t % 1000;
    StringBuilder o = new StringBuilder(160);
    o.append("{\"auction\":").append(b.auction).append(",\"bidder\":").append(b.bidder)
        .append(",\"price\":").append(t / 1000).append('.')
        .append((char) ('0' + frac / 100)).append((char) ('0' + frac / 10 % 10))
        .append((char) ('0' + frac % 10)).append(",\"date_time\":").append(b.dateTime)
        .append(",\"extra\":");
    str(o, b.extra);
    return o.append("}\n").toString();
  }
  static String q2(Bid b) {
    return "{\"auction\":" + b.auction + ",\"price\":" + b.price + "}\n";
  }

  static long fnv1a64(byte[] s) {
    long h = 0xcbf29ce484222325L;
    for (byte c : s) h = (h ^ (c & 0xff)) * 0x100000001b3L;
    return h;
  }

  /** Counts rows, sums their FNV-1a, writes them to `path` (null: nowhere). */
  public static final class RowSink implements Sink<String> {
    final String path;
    RowSink(String path) { this.path = path; }
    @Override
    public SinkWriter<String> createWriter(WriterInitContext ctx) throws IOException {
      final int sub = ctx.getTaskInfo().getIndexOfThisSubtask();
      final OutputStream out = path == null ? null
          : new BufferedOutputStream(new FileOutputStream(path + "." + sub), 1 << 20);
      return new SinkWriter<String>() {
        long rows, sum;
        @Override public void write(String line, Context c) throws IOException {
          byte[] b = line.getBytes(StandardCharsets.UTF_8);
          ++rows;
          sum += fnv1a64(b);
          if (out != null) out.write(b);
        }
        @Override public void flush(boolean endOfInput) throws IOException {
          if (out != null) out.flush();
        }
        @Override public void close() throws IOException {
          if (out != null) out.close();
          ROWS.addAndGet(rows);
          CHECKSUM.addAndGet(sum);
        }
      };
    }
  }

  public static void main(String[] args) throws Exception {
    String query = "q0", output = null;
    int parallelism = 1;
    List<Path> inputs = new ArrayList<>();
    for (int i = 0; i < args.length; ++i) {
      switch (args[i]) {
        case "--query": query = args[++i]; break;
        case "--parallelism": parallelism = Integer.parseInt(args[++i]); break;
        case "--output": output = args[++i]; break;
        default: inputs.add(new Path(args[i]));
      }
    }
    if (inputs.isEmpty()) {
      System.err.println("usage: NexmarkFlink --query q0|q1|q2 [--parallelism N] [--output PREFIX] FILE.jsonl...");
      System.exit(2);
    }
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(parallelism);
    FileSource<String> src =
        FileSource.forRecordStreamFormat(new TextLineInputFormat(), inputs.toArray(new Path[0])).build();
    DataStream<String> lines = env.fromSource(src, WatermarkStrategy.noWatermarks(), "events");
    DataStream<Bid> bids = lines.filter(new BidLines()).map(NexmarkFlink::parseBid);
    DataStream<String> rows;
    switch (query) {
      case "q0": rows = bids.map(NexmarkFlink::q0); break;
      case "q1": rows = bids.map(NexmarkFlink::q1); break;
      case "q2": rows = bids.filter(b -> b.auction % 123 == 0).map(NexmarkFlink::q2); break;
      default: System.err.println("unknown --query " + query); System.exit(2); return;
    }
    rows.sinkTo(new RowSink(output)).name("rows");
    long t0 = System.nanoTime();
    env.execute("nexmark " + query);
    double s = (System.nanoTime() - t0) / 1e9;
    long events = EVENTS.get();
    System.err.printf("{\"query\":\"%s\",\"events\":%d,\"rows\":%d,\"checksum\":\"%016x\","
        + "\"parallelism\":%d,\"elapsed_s\":%.3f,\"events_per_s\":%.0f}%n",
        query, events, ROWS.get(), CHECKSUM.get(), parallelism, s, events / s);
  }

  /** Keeps the bid lines; counts every event line (added to EVENTS at close). */
  public static final class BidLines extends RichFilterFunction<String> {
    long events;
    @Override public boolean filter(String l) {
      ++events;
      return l.startsWith("{\"Bid\":");
    }
    @Override public void close() { EVENTS.addAndGet(events); }
  }
}

// NexmarkFlink — the Flink peer of rill's nexmark_query (bench/nexmark.sh): NEXMark q0, q1,
// q2, q3, q4, q5, q7, q8, q11 as DataStream programs over the JSON-lines event files nexmark_gen
// writes, run in a local MiniCluster in this JVM. Each file is one split (as each --input of
// nexmark_query).
//
//   java -cp ... rill.nexmark.NexmarkFlink --query q1 --parallelism 2 --output rows.jsonl \
//        part0.jsonl part1.jsonl        # rows in rows.jsonl.0, rows.jsonl.1 (one per sink subtask)
// q3, q4, q5, q7, q8, q11: event time = date_time, --max-delay-ms (default 4000) bounded
// out-of-orderness; the plans are those of examples/nexmark/include/nexmark/window_queries.hpp
// (q3, q4: interval joins as rill's, bounds 1 h and 10 s; q4's aggregates in windows that only
// the end of input fires; q8: a window join; q11: session windows).
// One source subtask reads its files one after the other: with parallelism 1 give an
// event-time query the stream as one file, or the second file is behind the watermark (a
// window or interval join drops its records as late).
//
// Rows: the same JSON lines as nexmark_query (examples/nexmark/queries.cpp), byte for byte.
// Summary (stderr, one JSON object, as nexmark_query's): query, events, rows, checksum (the
// sum mod 2^64 of each row line's FNV-1a, '\n' included), parallelism, elapsed_s (env.execute:
// the MiniCluster's start included), events_per_s, from_first_event_s (first event read to the end).
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
import java.time.Duration;
import java.util.HashSet;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.CoGroupFunction;
import org.apache.flink.streaming.api.functions.co.ProcessJoinFunction;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.api.common.functions.RichFilterFunction;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
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
  // When the first event was read (any subtask): the run without the MiniCluster's start.
  static final AtomicLong FIRST = new AtomicLong(Long.MAX_VALUE);

  /** A bid parsed from a JSON line of nexmark_gen ({"Bid":{...}}). */
  public static final class Bid {
    public long auction, bidder, price, dateTime;
    public String extra;
  }

  /** A person (the fields q3 and q8 use) parsed from {"Person":{...}}. */
  public static final class Person {
    public long id, dateTime;
    public String name, city, state;
  }
  /** An auction (the fields q3, q4 and q8 use) parsed from {"Auction":{...}}. */
  public static final class Auction {
    public long id, dateTime, expires, seller, category;
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

  // Fields are searched in the order the generator writes them (event_file.cpp).
  static Person parsePerson(String line) {
    Person p = new Person();
    int i = valueStart(line, "id", 10);
    p.id = longAt(line, i);
    p.name = stringAt(line, i = valueStart(line, "name", i));
    p.city = stringAt(line, i = valueStart(line, "city", i));
    p.state = stringAt(line, i = valueStart(line, "state", i));
    p.dateTime = longAt(line, valueStart(line, "date_time", i));
    return p;
  }
  static Auction parseAuction(String line) {
    Auction a = new Auction();
    int i = valueStart(line, "id", 11);
    a.id = longAt(line, i);
    a.dateTime = longAt(line, i = valueStart(line, "date_time", i));
    a.expires = longAt(line, i = valueStart(line, "expires", i));
    a.seller = longAt(line, i = valueStart(line, "seller", i));
    a.category = longAt(line, valueStart(line, "category", i));
    return a;
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
    long maxDelayMs = 4000;
    List<Path> inputs = new ArrayList<>();
    for (int i = 0; i < args.length; ++i) {
      switch (args[i]) {
        case "--query": query = args[++i]; break;
        case "--parallelism": parallelism = Integer.parseInt(args[++i]); break;
        case "--output": output = args[++i]; break;
        case "--max-delay-ms": maxDelayMs = Long.parseLong(args[++i]); break;
        default: inputs.add(new Path(args[i]));
      }
    }
    if (inputs.isEmpty()) {
      System.err.println("usage: NexmarkFlink --query q0|q1|q2|q3|q4|q5|q7|q8|q11 [--parallelism N] [--max-delay-ms 4000] [--output PREFIX] FILE.jsonl...");
      System.exit(2);
    }
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setParallelism(parallelism);
    FileSource<String> src =
        FileSource.forRecordStreamFormat(new TextLineInputFormat(), inputs.toArray(new Path[0])).build();
    DataStream<String> lines = env.fromSource(src, WatermarkStrategy.noWatermarks(), "events");
    // Every event line counted once; the join queries split the lines by kind after that.
    final boolean join = query.equals("q3") || query.equals("q4") || query.equals("q8");
    DataStream<String> events = lines.filter(new EventLines(join ? "" : "{\"Bid\":"));
    DataStream<Bid> bids = join ? bidsOf(events) : events.map(NexmarkFlink::parseBid);
    DataStream<String> rows;
    switch (query) {
      case "q0": rows = bids.map(NexmarkFlink::q0); break;
      case "q1": rows = bids.map(NexmarkFlink::q1); break;
      case "q2": rows = bids.filter(b -> b.auction % 123 == 0).map(NexmarkFlink::q2); break;
      case "q3": rows = q3(withTime(personsOf(events), p -> p.dateTime, maxDelayMs),
                           withTime(auctionsOf(events), a -> a.dateTime, maxDelayMs)); break;
      case "q4": rows = q4(withTime(auctionsOf(events), a -> a.dateTime, maxDelayMs),
                           withTime(bids, b -> b.dateTime, maxDelayMs)); break;
      case "q5": rows = q5(withTime(bids, maxDelayMs)); break;
      case "q7": rows = q7(withTime(bids, maxDelayMs)); break;
      case "q8": rows = q8(withTime(personsOf(events), p -> p.dateTime, maxDelayMs),
                           withTime(auctionsOf(events), a -> a.dateTime, maxDelayMs)); break;
      case "q11": rows = q11(withTime(bids, maxDelayMs)); break;
      default: System.err.println("unknown --query " + query); System.exit(2); return;
    }
    rows.sinkTo(new RowSink(output)).name("rows");
    long t0 = System.nanoTime();
    env.execute("nexmark " + query);
    long t1 = System.nanoTime();
    double s = (t1 - t0) / 1e9, fromFirst = (t1 - Math.min(FIRST.get(), t1)) / 1e9;
    long read = EVENTS.get();
    System.err.printf("{\"query\":\"%s\",\"events\":%d,\"rows\":%d,\"checksum\":\"%016x\","
        + "\"parallelism\":%d,\"elapsed_s\":%.3f,\"events_per_s\":%.0f,\"from_first_event_s\":%.3f}%n",
        query, read, ROWS.get(), CHECKSUM.get(), parallelism, s, read / s, fromFirst);
  }

  // --- windowed queries: event time = date_time, bounded out-of-orderness (rill's
  // --max-delay-ms), epoch-aligned half-open windows, each result once when its window closes.
  static DataStream<Bid> withTime(DataStream<Bid> bids, long maxDelayMs) {
    return withTime(bids, b -> b.dateTime, maxDelayMs);
  }
  /** Event time of each record of `s` = `time` (ms), watermark = the largest - maxDelayMs. */
  static <T> DataStream<T> withTime(DataStream<T> s, TimeOf<T> time, long maxDelayMs) {
    return s.assignTimestampsAndWatermarks(
        WatermarkStrategy.<T>forBoundedOutOfOrderness(Duration.ofMillis(maxDelayMs))
            .withTimestampAssigner((e, t) -> time.of(e)));
  }
  @FunctionalInterface
  public interface TimeOf<T> extends java.io.Serializable { long of(T e); }

  static DataStream<Person> personsOf(DataStream<String> events) {
    return events.filter(l -> l.startsWith("{\"Person\":")).map(NexmarkFlink::parsePerson);
  }
  static DataStream<Auction> auctionsOf(DataStream<String> events) {
    return events.filter(l -> l.startsWith("{\"Auction\":")).map(NexmarkFlink::parseAuction);
  }
  static DataStream<Bid> bidsOf(DataStream<String> events) {
    return events.filter(l -> l.startsWith("{\"Bid\":")).map(NexmarkFlink::parseBid);
  }

  /** q7: the bids with the highest price of each tumbling 10 s window. */
  public static final class MaxBids {
    public long price = -1;
    public ArrayList<Bid> bids = new ArrayList<>();
  }
  static DataStream<String> q7(DataStream<Bid> bids) {
    return bids.windowAll(TumblingEventTimeWindows.of(Duration.ofSeconds(10)))
        .aggregate(new AggregateFunction<Bid, MaxBids, MaxBids>() {
          public MaxBids createAccumulator() { return new MaxBids(); }
          public MaxBids add(Bid b, MaxBids a) {
            if (b.price > a.price) { a.price = b.price; a.bids.clear(); }
            if (b.price == a.price) a.bids.add(b);
            return a;
          }
          public MaxBids getResult(MaxBids a) { return a; }
          public MaxBids merge(MaxBids a, MaxBids b) { throw new UnsupportedOperationException(); }
        })
        .flatMap((MaxBids a, Collector<String> out) -> { for (Bid b : a.bids) out.collect(q0(b)); })
        .returns(Types.STRING);
  }

  /** q5: bids per auction in sliding 10 s / 2 s windows; per window the auctions of the max. */
  public static final class Count {
    public long auction, num, start, end;
  }
  public static final class MaxCounts {
    public long num = -1;
    public ArrayList<Count> rows = new ArrayList<>();
  }
  static DataStream<String> q5(DataStream<Bid> bids) {
    DataStream<Count> counts = bids.keyBy(b -> b.auction)
        .window(SlidingEventTimeWindows.of(Duration.ofSeconds(10), Duration.ofSeconds(2)))
        .aggregate(new AggregateFunction<Bid, long[], Long>() {
          public long[] createAccumulator() { return new long[1]; }
          public long[] add(Bid b, long[] a) { ++a[0]; return a; }
          public Long getResult(long[] a) { return a[0]; }
          public long[] merge(long[] a, long[] b) { a[0] += b[0]; return a; }
        }, new ProcessWindowFunction<Long, Count, Long, TimeWindow>() {
          public void process(Long key, Context ctx, Iterable<Long> n, Collector<Count> out) {
            Count c = new Count();
            c.auction = key;
            c.num = n.iterator().next();
            c.start = ctx.window().getStart();
            c.end = ctx.window().getEnd();
            out.collect(c);
          }
        });
    // A count's timestamp is its window's end - 1 ms: one 2 s tumbling window per sliding one.
    return counts.keyBy(c -> c.start)
        .window(TumblingEventTimeWindows.of(Duration.ofSeconds(2)))
        .aggregate(new AggregateFunction<Count, MaxCounts, MaxCounts>() {
          public MaxCounts createAccumulator() { return new MaxCounts(); }
          public MaxCounts add(Count c, MaxCounts a) {
            if (c.num > a.num) { a.num = c.num; a.rows.clear(); }
            if (c.num == a.num) a.rows.add(c);
            return a;
          }
          public MaxCounts getResult(MaxCounts a) { return a; }
          public MaxCounts merge(MaxCounts a, MaxCounts b) { throw new UnsupportedOperationException(); }
        })
        .flatMap((MaxCounts a, Collector<String> out) -> {
          for (Count c : a.rows)
            out.collect("{\"auction\":" + c.auction + ",\"num\":" + c.num + ",\"window_start\":"
                + c.start + ",\"window_end\":" + c.end + "}\n");
        })
        .returns(Types.STRING);
  }

  // All of event time up to 2069 (epoch-aligned): windows that only the end of input fires.
  static final Duration ALL_TIME = Duration.ofDays(365L * 100);
  // rill's window_query_options: q3_bound, q4_bound.
  static final Duration Q3_BOUND = Duration.ofHours(1), Q4_BOUND = Duration.ofSeconds(10);

  /** q3: persons in "or", "id" or "ca" interval-joined on id = seller with the auctions of
   *  category 10 within ±1 h of them (bounds inclusive); each pair once. */
  static DataStream<String> q3(DataStream<Person> persons, DataStream<Auction> auctions) {
    DataStream<Person> sellers = persons.filter(
        p -> p.state.equals("or") || p.state.equals("id") || p.state.equals("ca"));
    return sellers.keyBy(p -> p.id)
        .intervalJoin(auctions.filter(a -> a.category == 10).keyBy(a -> a.seller))
        .between(Q3_BOUND.negated(), Q3_BOUND)
        .process(new ProcessJoinFunction<Person, Auction, String>() {
          public void processElement(Person p, Auction a, Context ctx, Collector<String> out) {
            StringBuilder o = new StringBuilder(96);
            o.append("{\"name\":");
            str(o, p.name);
            o.append(",\"city\":");
            str(o, p.city);
            o.append(",\"state\":");
            str(o, p.state);
            out.collect(o.append(",\"id\":").append(a.id).append("}\n").toString());
          }
        });
  }

  /** q4: a bid closes on an auction if it comes within [date_time, expires] (the interval join
   *  [a.date_time, a.date_time + 10 s], then <= expires); per auction the highest such price,
   *  per category the average of those (truncated), both at the end of input. */
  public static final class Closing {
    public long auction, category, price;
  }
  public static final class Mean {
    public long category, sum, n;
  }
  static DataStream<String> q4(DataStream<Auction> auctions, DataStream<Bid> bids) {
    return auctions.keyBy(a -> a.id)
        .intervalJoin(bids.keyBy(b -> b.auction))
        .between(Duration.ZERO, Q4_BOUND)
        .process(new ProcessJoinFunction<Auction, Bid, Closing>() {
          public void processElement(Auction a, Bid b, Context ctx, Collector<Closing> out) {
            if (b.dateTime > a.expires) return;
            Closing c = new Closing();
            c.auction = a.id;
            c.category = a.category;
            c.price = b.price;
            out.collect(c);
          }
        })
        .keyBy(c -> c.auction)
        .window(TumblingEventTimeWindows.of(ALL_TIME))
        .reduce((x, y) -> x.price >= y.price ? x : y)
        .keyBy(c -> c.category)
        .window(TumblingEventTimeWindows.of(ALL_TIME))
        .aggregate(new AggregateFunction<Closing, Mean, String>() {
          public Mean createAccumulator() { return new Mean(); }
          public Mean add(Closing c, Mean m) { m.category = c.category; m.sum += c.price; ++m.n; return m; }
          public String getResult(Mean m) {
            return "{\"category\":" + m.category + ",\"avg_final\":" + m.sum / m.n + "}\n";
          }
          public Mean merge(Mean a, Mean b) { a.sum += b.sum; a.n += b.n; return a; }
        });
  }

  /** q8: persons and the sellers of auctions in the same 10 s tumbling window (a window join
   *  on id = seller), one row per (person, window). */
  static DataStream<String> q8(DataStream<Person> persons, DataStream<Auction> auctions) {
    return persons.coGroup(auctions)
        .where(p -> p.id).equalTo(a -> a.seller)
        .window(TumblingEventTimeWindows.of(Duration.ofSeconds(10)))
        .apply(new CoGroupFunction<Person, Auction, String>() {
          public void coGroup(Iterable<Person> ps, Iterable<Auction> as, Collector<String> out) {
            if (!as.iterator().hasNext()) return;
            HashSet<String> seen = new HashSet<>();
            for (Person p : ps) {
              if (!seen.add(p.name)) continue;
              StringBuilder o = new StringBuilder(64);
              o.append("{\"id\":").append(p.id).append(",\"name\":");
              str(o, p.name);
              out.collect(o.append(",\"window_start\":").append(p.dateTime - Math.floorMod(p.dateTime, 10000L))
                  .append("}\n").toString());
            }
          }
        }, Types.STRING);
  }

  /** q11: bids per bidder session, gap 10 s: [first bid, last bid + 10 s). */
  static DataStream<String> q11(DataStream<Bid> bids) {
    return bids.keyBy(b -> b.bidder)
        .window(EventTimeSessionWindows.withGap(Duration.ofSeconds(10)))
        .aggregate(new AggregateFunction<Bid, long[], Long>() {
          public long[] createAccumulator() { return new long[1]; }
          public long[] add(Bid b, long[] a) { ++a[0]; return a; }
          public Long getResult(long[] a) { return a[0]; }
          public long[] merge(long[] a, long[] b) { a[0] += b[0]; return a; }
        }, new ProcessWindowFunction<Long, String, Long, TimeWindow>() {
          public void process(Long bidder, Context ctx, Iterable<Long> n, Collector<String> out) {
            out.collect("{\"bidder\":" + bidder + ",\"bid_count\":" + n.iterator().next()
                + ",\"window_start\":" + ctx.window().getStart() + ",\"window_end\":"
                + ctx.window().getEnd() + "}\n");
          }
        });
  }

  /** Keeps the lines that start with `prefix` ("": all); counts every event line (added to
   *  EVENTS at close). */
  public static final class EventLines extends RichFilterFunction<String> {
    final String prefix;
    long events;
    EventLines(String prefix) { this.prefix = prefix; }
    @Override public boolean filter(String l) {
      if (events++ == 0) FIRST.accumulateAndGet(System.nanoTime(), Math::min);
      return l.startsWith(prefix);
    }
    @Override public void close() { EVENTS.addAndGet(events); }
  }
}

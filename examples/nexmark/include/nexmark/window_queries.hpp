// nexmark/window_queries.hpp — the windowed and join NEXMark queries (q3, q5, q7, q8,
// q11) as rill pipelines of the library's operators (key_by, keyed windows with
// aggregate/count, window_join, interval_join, flat_map) and their result rows.
//
// Example (compiled by tests/banner_examples.py):
//   #include <nexmark/source.hpp>
//   #include <rill/rill.hpp>
//   auto rows = std::make_shared<nexmark::row_sink<nexmark::q7_row>>(1, nullptr);
//   auto events = [] { return rill::from(nexmark::generated_events{{}, 200'000}); };
//   rill::runtime rt{{.workers = 1}};
//   rt.run(nexmark::q7(events()).sink(rows));  // the highest bids of each 10 s window
//
// The definitions are those of Flink's nexmark project (nexmark-flink/src/main/resources/
// queries/q*.sql). Event time is the event's date_time (source.hpp); every window is
// aligned on the Unix epoch and half-open, [start, end). The watermark is the largest
// date_time seen minus `max_delay` (default 4 s: the `dateTime - INTERVAL '4' SECOND` of
// Flink's nexmark DDL; the generator's own out-of-orderness is out_of_order_group_size
// events, none with its default of 1, so no record is late with any max_delay >= 0).
//   q3  persons in OR, ID or CA joined with the auctions of category 10 they sell:
//       (name, city, state, auction id). The crate's generator writes states in lower
//       case ("or"), Flink's Java generator in upper case, so the filter is on "or",
//       "id", "ca" (Flink's SQL: 'OR', 'ID', 'CA'; the same persons). Flink: a regular
//       (unbounded) join with continuous output. rill: an interval join,
//       |auction time - person time| <= q3_bound (default 1 h), emitting each pair when
//       its second record arrives. Equal to the regular join on any input where a
//       seller's person event and its auctions are less than the bound apart (a seller
//       is one of the last active_people persons or up to person_id_lead ahead: seconds
//       apart at the generator's default rate); state is bounded by the bound instead of
//       growing with the stream.
//   q4  average closing price per category: each auction joined with its bids from its
//       date_time to its expires (both inclusive), the highest price per auction (auctions
//       with a bid only), then the average of those per category: (category, avg_final).
//       Flink: an updating result (every new bid may retract and re-emit a category's
//       average). rill: an interval join of bids within [a.date_time, a.date_time +
//       q4_bound] filtered to <= expires, then two keyed windows over all event time
//       (tumbling, 100 years from the epoch: they fire at end of input), so one row per
//       category at the end: Flink's final table. The oracle is that final table.
//   q5  hot items: bids per auction in sliding windows of 10 s every 2 s; per window, the
//       auctions whose count is the window's maximum: (auction, num, window_start,
//       window_end). Flink's q5 selects (auction, num); the window's bounds are added here
//       so a row names its window. Emitted once per window when it closes.
//   q7  highest bid: per 10 s tumbling window, the bids whose price is the window's
//       maximum (all of them on a tie): (auction, bidder, price, date_time, extra).
//       Flink's SQL joins the max with `B.dateTime BETWEEN window_end - 10 s AND
//       window_end`, both ends inclusive, so a bid at exactly window_end with that price
//       would match two windows; here a bid belongs to its own [start, end) window only.
//   q8  new users: persons and the auctions they open in the same 10 s tumbling window
//       (window join on person id = seller), one row per (person, window) whatever the
//       number of auctions: (id, name, window_start), as Flink's GROUP BY on both sides.
//   q11 bids per bidder session, gap 10 s: (bidder, bid_count, window_start, window_end),
//       a session [first bid, last bid + 10 s) (bids at most 10 s apart are one session,
//       Flink's TimeWindow.intersects). Flink emits a session when it closes, as here.
// Form: rill emits every window result once, when the watermark passes the window's end
// (end of input fires the rest); Flink's windowed SQL does the same (q5, q7, q8, q11), and
// its q3 emits inserts only (append-only inner join), as here; q4 is the exception above.
// No query emits updates.
//
// Thread safety: the query functions build streams (one thread).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <nexmark/event.hpp>
#include <nexmark/queries.hpp>
#include <rill/operators/join.hpp>
#include <rill/operators/keyed_stream.hpp>
#include <rill/operators/stream.hpp>
#include <string>
#include <utility>
#include <vector>

namespace nexmark {

/// Window options of every windowed query: max out-of-order delay (see the banner).
struct window_query_options {
  std::chrono::nanoseconds max_delay = std::chrono::seconds{4};
  std::chrono::nanoseconds q3_bound = std::chrono::hours{1};  ///< q3's interval join bound
  /// q4: the longest auction (expires - date_time) the join waits for; the generator's are
  /// at most 2 x the time of in_flight_auctions x 50 / 3 events (334 ms at its default rate).
  std::chrono::nanoseconds q4_bound = std::chrono::seconds{10};
};

/// q3's row.
struct q3_row {
  std::string name, city, state;
  std::uint64_t id = 0;  ///< the auction's id
  bool operator==(const q3_row&) const = default;
};
/// q4's row: the average closing price of the auctions of `category` (cents, truncated
/// toward zero: Flink's AVG over BIGINT is a BIGINT).
struct q4_row {
  std::uint64_t category = 0, avg_final = 0;
  bool operator==(const q4_row&) const = default;
};
/// q5's row: `num` bids on `auction` in [window_start, window_end) (ms), the maximum.
struct q5_row {
  std::uint64_t auction = 0, num = 0;
  timestamp window_start{}, window_end{};
  bool operator==(const q5_row&) const = default;
};
/// q7's row: a bid with the highest price of its window.
using q7_row = q0_row;
/// q8's row.
struct q8_row {
  std::uint64_t id = 0;
  std::string name;
  timestamp window_start{};
  bool operator==(const q8_row&) const = default;
};
/// q11's row: a bidder's session [window_start, window_end) (ms) with bid_count bids.
struct q11_row {
  std::uint64_t bidder = 0, bid_count = 0;
  timestamp window_start{}, window_end{};
  bool operator==(const q11_row&) const = default;
};

/// JSON lines, keys as the struct's fields, times in ms.
void append_json_line(const q3_row& r, std::string& out);
void append_json_line(const q4_row& r, std::string& out);
void append_json_line(const q5_row& r, std::string& out);
void append_json_line(const q8_row& r, std::string& out);
void append_json_line(const q11_row& r, std::string& out);

namespace detail {
inline timestamp ms_of(rill::event_time t) {
  return timestamp{std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch())};
}
}  // namespace detail

/// q7 over a stream of events. The window is global (one key): its instance runs on one
/// worker, as Flink's global aggregation at parallelism 1.
template <class P>
auto q7(rill::stream<event, P>&& events, window_query_options o = {}) {
  struct acc {
    std::uint64_t price = 0;
    std::vector<q7_row> bids;  // every bid of the window with that price
  };
  return std::move(events)
      .filter(is_bid)
      .map([](event&& e) {
        bid& b = std::get<bid>(e);
        return q7_row{b.auction, b.bidder, b.price, b.date_time, std::move(b.extra)};
      })
      .key_by([](const q7_row&) { return std::uint32_t{0}; })
      .window(rill::tumbling{std::chrono::seconds{10}}, {.max_delay = o.max_delay})
      .name("q7_max")
      .aggregate(acc{},
                 [](acc& a, const q7_row& b) {
                   if (a.bids.empty() || b.price > a.price) {
                     a.price = b.price;
                     a.bids.clear();
                   }
                   if (b.price == a.price) a.bids.push_back(b);
                 })
      .template flat_map<q7_row>([](rill::keyed_window_result<std::uint32_t, acc>&& r, auto& emit) {
        for (auto& b : r.value.bids) emit(std::move(b));
      });
}

/// q4 over two streams of the same events (one read for auctions, one for bids): see the
/// banner. State: the join's bounded state plus one accumulator per auction and per
/// category until the end (Flink's q4 keeps as much: its aggregates are never retired).
template <class PA, class PB>
auto q4(rill::stream<event, PA>&& auctions, rill::stream<event, PB>&& bids,
               window_query_options o = {}) {
  struct item {
    std::uint64_t id, category;
    timestamp expires;
  };
  struct closing {
    std::uint64_t auction, category, price;
    bool in_time;  // the bid came before the auction expired
  };
  struct best {
    std::uint64_t category = 0, price = 0;
  };
  struct mean {
    std::uint64_t sum = 0, n = 0;
  };
  // All of event time up to 2069 (int64 ns): windows that only the end of input fires.
  const rill::tumbling all_time{std::chrono::hours{24 * 365 * 100}};
  auto items = std::move(auctions)
                   .filter([](const event& e) { return kind_of(e) == event_kind::auction; })
                   .map([](const event& e) {
                     const auction& a = std::get<auction>(e);
                     return item{a.id, a.category, a.expires};
                   })
                   .key_by([](const item& a) { return a.id; });
  struct offer {
    std::uint64_t auction, price;
    timestamp date_time;
  };
  auto offers = std::move(bids)
                    .filter(is_bid)
                    .map([](const event& e) {
                      const bid& b = std::get<bid>(e);
                      return offer{b.auction, b.price, b.date_time};
                    })
                    .key_by([](const offer& b) { return b.auction; });
  return std::move(items)
      .interval_join(std::move(offers), std::chrono::nanoseconds{0}, o.q4_bound,
                     {.max_delay = o.max_delay})
      .name("q4_join")
      .inner([](const item& a, const offer& b) {
        return closing{a.id, a.category, b.price, b.date_time <= a.expires};
      })
      .filter([](const closing& c) { return c.in_time; })
      .key_by([](const closing& c) { return c.auction; })
      .window(all_time, {.max_delay = o.max_delay})
      .name("q4_final")
      .aggregate(best{},
                 [](best& a, const closing& c) {
                   a.category = c.category;
                   a.price = std::max(a.price, c.price);
                 })
      .key_by(
          [](const rill::keyed_window_result<std::uint64_t, best>& r) { return r.value.category; })
      .window(all_time, {.max_delay = o.max_delay})
      .name("q4_average")
      .aggregate(mean{},
                 [](mean& m, const rill::keyed_window_result<std::uint64_t, best>& r) {
                   m.sum += r.value.price;
                   ++m.n;
                 })
      .map([](rill::keyed_window_result<std::uint64_t, mean>&& r) {
        return q4_row{r.key, r.value.sum / r.value.n};
      });
}

/// q5 over a stream of events: count per auction and sliding window, then per window
/// (keyed by its start) the auctions with the largest count. The second window is a
/// tumbling 2 s one over the counts, whose record time is their window's end - 1 ns: each
/// 2 s window holds the counts of exactly one sliding window.
template <class P>
auto q5(rill::stream<event, P>&& events, window_query_options o = {}) {
  using std::chrono::seconds;
  using count_result = rill::keyed_window_result<std::uint64_t, std::uint64_t>;
  struct acc {
    std::uint64_t num = 0;
    std::vector<q5_row> rows;
  };
  // Only the auction id crosses to the key's worker (Flink's planner projects the same way).
  return std::move(events)
      .filter(is_bid)
      .map([](const event& e) { return std::get<bid>(e).auction; })
      .key_by([](const std::uint64_t& auction) { return auction; })
      .window(rill::sliding{.size = seconds{10}, .slide = seconds{2}}, {.max_delay = o.max_delay})
      .name("q5_count")
      .count()
      .key_by([](const count_result& r) { return r.start.time_since_epoch().count(); })
      .window(rill::tumbling{seconds{2}}, {.max_delay = o.max_delay})
      .name("q5_max")
      .aggregate(
          acc{},
          [](acc& a, const count_result& r) {
            if (a.rows.empty() || r.value > a.num) {
              a.num = r.value;
              a.rows.clear();
            }
            if (r.value == a.num)
              a.rows.push_back({r.key, r.value, detail::ms_of(r.start), detail::ms_of(r.end)});
          })
      .template flat_map<q5_row>([](rill::keyed_window_result<std::int64_t, acc>&& r, auto& emit) {
        for (auto& row : r.value.rows) emit(std::move(row));
      });
}

/// q11 over a stream of events: bids per bidder session (gap 10 s).
template <class P>
auto q11(rill::stream<event, P>&& events, window_query_options o = {}) {
  // Only the bidder id crosses to the key's worker (Flink's planner projects the same way).
  return std::move(events)
      .filter(is_bid)
      .map([](const event& e) { return std::get<bid>(e).bidder; })
      .key_by([](const std::uint64_t& bidder) { return bidder; })
      .window(rill::session{std::chrono::seconds{10}}, {.max_delay = o.max_delay})
      .name("q11_sessions")
      .count()
      .map([](rill::keyed_window_result<std::uint64_t, std::uint64_t>&& r) {
        return q11_row{r.key, r.value, detail::ms_of(r.start), detail::ms_of(r.end)};
      });
}

/// q8 over two streams of the same events (one read for persons, one for auctions): a
/// window join on person id = seller in 10 s tumbling windows, then one row per (person,
/// window): a tumbling window over the pairs (time window end - 1 ns) keeps the first.
template <class PA, class PB>
auto q8(rill::stream<event, PA>&& persons, rill::stream<event, PB>&& auctions,
               window_query_options o = {}) {
  using std::chrono::seconds;
  struct new_person {
    std::uint64_t id;
    std::string name;
  };
  auto people = std::move(persons)
                    .filter([](const event& e) { return kind_of(e) == event_kind::person; })
                    .map([](event&& e) {
                      person& p = std::get<person>(e);
                      return new_person{p.id, std::move(p.name)};
                    })
                    .key_by([](const new_person& p) { return p.id; });
  auto sellers = std::move(auctions)
                     .filter([](const event& e) { return kind_of(e) == event_kind::auction; })
                     .map([](const event& e) { return std::get<auction>(e).seller; })
                     .key_by([](const std::uint64_t& seller) { return seller; });
  return std::move(people)
      .window_join(std::move(sellers), rill::tumbling{seconds{10}}, {.max_delay = o.max_delay})
      .name("q8_join")
      .inner([](const new_person& p, const std::uint64_t&) { return p; })
      .key_by([](const new_person& p) { return p.id; })
      .window(rill::tumbling{seconds{10}}, {.max_delay = o.max_delay})
      .name("q8_distinct")
      .aggregate(std::string{},
                 [](std::string& name, const new_person& p) {
                   if (name.empty()) name = p.name;
                 })
      .map([](rill::keyed_window_result<std::uint64_t, std::string>&& r) {
        return q8_row{r.key, std::move(r.value), detail::ms_of(r.start)};
      });
}

/// q3 over two streams of the same events: persons in "or", "id" or "ca", interval-joined on
/// id = seller with the auctions of category 10 within ±o.q3_bound (see the banner).
template <class PA, class PB>
auto q3(rill::stream<event, PA>&& persons, rill::stream<event, PB>&& auctions,
               window_query_options o = {}) {
  struct seller {
    std::uint64_t id;
    std::string name, city, state;
  };
  auto people = std::move(persons)
                    .filter([](const event& e) {
                      if (kind_of(e) != event_kind::person) return false;
                      const std::string& s = std::get<person>(e).state;
                      return s == "or" || s == "id" || s == "ca";
                    })
                    .map([](event&& e) {
                      person& p = std::get<person>(e);
                      return seller{p.id, std::move(p.name), std::move(p.city), std::move(p.state)};
                    })
                    .key_by([](const seller& s) { return s.id; });
  struct item {
    std::uint64_t id, seller;
  };
  auto items =
      std::move(auctions)
          .filter([](const event& e) {
            return kind_of(e) == event_kind::auction && std::get<auction>(e).category == 10;
          })
          .map([](const event& e) {
            const auction& a = std::get<auction>(e);
            return item{a.id, a.seller};
          })
          .key_by([](const item& a) { return a.seller; });
  return std::move(people)
      .interval_join(std::move(items), -o.q3_bound, o.q3_bound, {.max_delay = o.max_delay})
      .name("q3_join")
      .inner([](const seller& p, const item& a) {
        return q3_row{p.name, p.city, p.state, a.id};
      });
}

}  // namespace nexmark

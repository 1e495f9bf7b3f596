// nexmark/queries.hpp — NEXMark queries as rill pipelines of the library's operators
// (filter, map), their result rows, and a shared sink that writes rows as JSON lines and
// keeps a row count and an order-independent checksum.
//
// Example (compiled by tests/banner_examples.py):
//   #include <nexmark/source.hpp>
//   #include <rill/rill.hpp>
//   auto rows = std::make_shared<nexmark::row_sink<nexmark::q2_row>>(1, nullptr);  // count only
//   rill::runtime rt{{.workers = 1}};
//   rt.run(nexmark::q2(rill::from(nexmark::generated_events{{}, 200'000})).sink(rows));
//   std::printf("%llu rows, checksum %016llx\n", (unsigned long long)rows->rows(),
//               (unsigned long long)rows->checksum());
//
// The queries, as the NEXMark queries of Apache Beam and Flink's nexmark project
// (nexmark-flink/src/main/resources/queries/q*.sql) define them:
//   q0  pass-through:        SELECT auction, bidder, price, dateTime, extra FROM bid
//   q1  currency conversion: SELECT auction, bidder, 0.908 * price AS price, dateTime,
//                                   extra FROM bid
//   q2  selection:           SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0
// q1's price is a decimal with three places, exact: price * 908 thousandths (Flink's
// DECIMAL result of 0.908 * BIGINT); its JSON number has three decimals ("1234.567").
//
// Thread safety: the query functions build streams (one thread). row_sink: write, progress
// and end from any worker at once (one mutex around the file write, per-worker buffers);
// rows() and checksum() once the run returned.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <nexmark/event.hpp>
#include <rill/core/record.hpp>
#include <rill/operators/stream.hpp>
#include <string>
#include <utility>
#include <vector>

namespace nexmark {

/// q0's row: a bid without channel and url.
struct q0_row {
  std::uint64_t auction = 0, bidder = 0, price = 0;  ///< price in cents
  timestamp date_time{};
  std::string extra;
  bool operator==(const q0_row&) const = default;
};
/// q1's row: price_thousandths = 908 x the bid's price in cents (0.908 x price, exactly).
struct q1_row {
  std::uint64_t auction = 0, bidder = 0, price_thousandths = 0;
  timestamp date_time{};
  std::string extra;
  bool operator==(const q1_row&) const = default;
};
/// q2's row.
struct q2_row {
  std::uint64_t auction = 0, price = 0;  ///< price in cents
  bool operator==(const q2_row&) const = default;
};

/// The JSON line of a row ('\n'-terminated): {"auction":..,"bidder":..,"price":..,
/// "date_time":<ms>,"extra":".."}; q1's price with three decimals; q2 {"auction","price"}.
void append_json_line(const q0_row& r, std::string& out);
void append_json_line(const q1_row& r, std::string& out);
void append_json_line(const q2_row& r, std::string& out);

inline bool is_bid(const event& e) noexcept { return kind_of(e) == event_kind::bid; }

/// q0 over a stream of events: every bid.
template <class P>
rill::stream<q0_row, P> q0(rill::stream<event, P>&& events) {
  return std::move(events).filter(is_bid).map([](event&& e) {
    bid& b = std::get<bid>(e);
    return q0_row{b.auction, b.bidder, b.price, b.date_time, std::move(b.extra)};
  });
}

/// q1 over a stream of events: every bid, its price times 0.908.
template <class P>
rill::stream<q1_row, P> q1(rill::stream<event, P>&& events) {
  return std::move(events).filter(is_bid).map([](event&& e) {
    bid& b = std::get<bid>(e);
    return q1_row{b.auction, b.bidder, b.price * 908, b.date_time, std::move(b.extra)};
  });
}

/// q2 over a stream of events: the bids on auctions whose id is a multiple of 123.
template <class P>
rill::stream<q2_row, P> q2(rill::stream<event, P>&& events) {
  return std::move(events)
      .filter([](const event& e) { return is_bid(e) && std::get<bid>(e).auction % 123 == 0; })
      .map([](const event& e) {
        const bid& b = std::get<bid>(e);
        return q2_row{b.auction, b.price};
      });
}

/// 64-bit FNV-1a of `s` (the row checksum's hash of one JSON line).
inline std::uint64_t fnv1a64(std::string_view s) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

/// A rill::sink_of<Row> for `workers` workers: counts rows, sums (mod 2^64) the FNV-1a
/// of each row's JSON line (so the checksum does not depend on the order rows arrive in,
/// nor on the number of workers), and writes the lines to `out` unless it is null. Each
/// worker fills its own 1 MiB buffer; a full buffer is written under the mutex (stdio,
/// buffered: the rows file is for checks; a benchmark passes nullptr).
/// Errors: a failed write sets write_failed(); later rows are still counted.
template <class Row>
class row_sink {
 public:
  row_sink(std::size_t workers, std::FILE* out) : out_(out), per_(workers) {}

  void write(std::size_t worker, rill::record<Row>&& r) {
    per_worker& w = per_[worker];
    const std::size_t before = w.buf.size();
    append_json_line(r.value, w.buf);
    ++w.rows;
    w.checksum += fnv1a64(std::string_view(w.buf).substr(before));
    if (!out_)
      w.buf.clear();
    else if (w.buf.size() >= (1u << 20))
      flush(w);
  }
  void progress(std::size_t, rill::event_time) {}
  void end(std::size_t worker) {
    if (out_) flush(per_[worker]);
  }

  std::uint64_t rows() const noexcept {
    std::uint64_t n = 0;
    for (const auto& w : per_) n += w.rows;
    return n;
  }
  std::uint64_t checksum() const noexcept {
    std::uint64_t c = 0;
    for (const auto& w : per_) c += w.checksum;
    return c;
  }
  bool write_failed() const {
    std::lock_guard lock(mu_);
    return failed_;
  }

 private:
  struct alignas(64) per_worker {
    std::string buf;
    std::uint64_t rows = 0, checksum = 0;
  };
  void flush(per_worker& w) {
    std::lock_guard lock(mu_);
    if (!w.buf.empty() && std::fwrite(w.buf.data(), 1, w.buf.size(), out_) != w.buf.size())
      failed_ = true;
    w.buf.clear();
  }

  std::FILE* out_;
  std::vector<per_worker> per_;
  mutable std::mutex mu_;
  bool failed_ = false;
};

}  // namespace nexmark

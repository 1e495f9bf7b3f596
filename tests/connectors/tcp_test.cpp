// Tests for framing.hpp, tcp_sink.hpp, tcp_source.hpp, fan_out.hpp, file_sink.hpp.
//
// Every network test runs on 127.0.0.1 with its own io_context on one thread and waits
// for events with a bounded condition wait (no sleeps used as clocks). Peers that must
// misbehave (close at once, break a connection mid-record) are written here with raw
// Asio calls, independent of the code under test.
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include "rill/connectors/fan_out.hpp"
#include "rill/connectors/file_sink.hpp"
#include "rill/connectors/framing.hpp"
#include "rill/connectors/tcp_sink.hpp"
#include "rill/connectors/tcp_source.hpp"
#include "rill/rill.hpp"

using namespace std::chrono_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int x : v) out.push_back(std::byte(x));
  return out;
}
std::string str(std::span<const std::byte> s) {
  return {reinterpret_cast<const char*>(s.data()), s.size()};
}

/// A record of 8 bytes: its index, little-endian (so any corruption shows).
std::array<std::byte, 8> rec8(std::uint64_t i) {
  std::array<std::byte, 8> r;
  for (int k = 0; k < 8; ++k) r[k] = std::byte(i >> (8 * k));
  return r;
}
std::uint64_t val8(std::span<const std::byte> r) {
  std::uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= std::uint64_t(r[k]) << (8 * k);
  return v;
}

/// An io_context on its own thread; run(f) posts f there.
struct loop {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard{io.get_executor()};
  std::thread t{[this] { io.run(); }};
  ~loop() { join(); }
  void post(std::function<void()> f) { asio::post(io, std::move(f)); }
  /// Runs f on the loop and waits for it.
  template <class F>
  auto call(F f) {
    std::promise<decltype(f())> p;
    auto fut = p.get_future();
    post([&] {
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        p.set_value();
      } else {
        p.set_value(f());
      }
    });
    return fut.get();
  }
  void join() {
    guard.reset();
    if (t.joinable()) t.join();
  }
};

/// Waits (bounded) until pred() holds; pred is evaluated under the mutex.
struct waiter {
  std::mutex mu;
  std::condition_variable cv;
  template <class P>
  bool wait(P pred, std::chrono::milliseconds limit = 5000ms) {
    // Re-checks every millisecond too: some conditions are counters updated without notify.
    const auto end = std::chrono::steady_clock::now() + limit;
    std::unique_lock lk(mu);
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= end) return false;
      cv.wait_for(lk, 1ms);
    }
    return true;
  }
  template <class F>
  void update(F f) {
    {
      std::lock_guard lk(mu);
      f();
    }
    cv.notify_all();
  }
};

std::uint16_t free_port() {
  asio::io_context io;
  tcp::acceptor a{io, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}};
  return a.local_endpoint().port();
}

}  // namespace

// ---------------------------------------------------------------- framing

TEST(framing, length_prefixed_wire_format_by_hand) {
  const auto f = rill::framing::length_prefixed(16);
  std::vector<std::byte> wire;
  ASSERT_FALSE(rill::frame_encoder{f}.append(wire, rill::as_bytes_view("hello")));
  ASSERT_FALSE(rill::frame_encoder{f}.append(wire, rill::as_bytes_view("")));
  // u32 big-endian 5, "hello", then u32 0.
  EXPECT_EQ(wire, bytes({0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o', 0, 0, 0, 0}));
  EXPECT_TRUE(rill::frame_encoder{f}.append(wire, rill::as_bytes_view("seventeen bytes!!")));
}

TEST(framing, round_trip_in_every_chunking) {
  for (auto f : {rill::framing::fixed(3), rill::framing::length_prefixed(100)}) {
    std::vector<std::string> in = {"abc", "def", "ghi", "jkl"};
    if (f.k == rill::framing::kind::length_prefixed) in = {"a", "", "longer record", "xyz"};
    std::vector<std::byte> wire;
    for (auto& s : in) ASSERT_FALSE(rill::frame_encoder{f}.append(wire, rill::as_bytes_view(s)));
    for (std::size_t chunk = 1; chunk <= wire.size(); ++chunk) {
      rill::frame_decoder dec{f};
      std::vector<std::string> out;
      for (std::size_t i = 0; i < wire.size(); i += chunk) {
        const auto part = std::span(wire).subspan(i, std::min(chunk, wire.size() - i));
        ASSERT_FALSE(dec.feed(part, [&](std::span<const std::byte> r) { out.push_back(str(r)); }));
      }
      EXPECT_EQ(out, in) << "chunk " << chunk;
      EXPECT_EQ(dec.partial_bytes(), 0u);
    }
  }
}

TEST(framing, bad_length_names_the_offset_and_partial_is_discarded) {
  const auto f = rill::framing::length_prefixed(4);
  // record "ab" (6 bytes on the wire), then a prefix of 9 > 4 at byte offset 6.
  auto wire = bytes({0, 0, 0, 2, 'a', 'b', 0, 0, 0, 9, 'x'});
  rill::frame_decoder dec{f};
  std::vector<std::string> out;
  const auto ec = dec.feed(wire, [&](std::span<const std::byte> r) { out.push_back(str(r)); });
  EXPECT_EQ(ec, rill::make_error_code(rill::framing_errc::bad_length));
  EXPECT_EQ(dec.offset(), 6u);
  EXPECT_EQ(out, std::vector<std::string>{"ab"});
  rill::frame_decoder d2{rill::framing::fixed(4)};
  ASSERT_FALSE(d2.feed(bytes({1, 2, 3, 4, 5, 6}), [](auto) {}));
  EXPECT_EQ(d2.partial_bytes(), 2u);
  EXPECT_EQ(d2.reset(), 2u);
}

TEST(framing, hello_round_trip_and_endpoint_parse) {
  const auto b = rill::tcp_hello{0x0102030405060708ULL}.encode();
  EXPECT_EQ(std::memcmp(b.data(), "RILLSEQ1", 8), 0);
  EXPECT_EQ(b[8], std::byte{0x08});  // little-endian
  rill::tcp_hello h;
  ASSERT_TRUE(rill::tcp_hello::decode(b, h));
  EXPECT_EQ(h.first_seq, 0x0102030405060708ULL);
  const auto ep = rill::tcp_endpoint::parse("listen::9000");
  EXPECT_EQ(ep.r, rill::tcp_endpoint::role::listen);
  EXPECT_EQ(ep.host, "0.0.0.0");
  EXPECT_EQ(ep.port, 9000);
  EXPECT_THROW(rill::tcp_endpoint::parse("connect:localhost:1"), rill::config_error);
  EXPECT_THROW(rill::tcp_endpoint::parse("dial:1.2.3.4:1"), rill::config_error);
}

// ---------------------------------------------------------------- C13

// C13 (chriskohlhoff/asio#1664): a peer that accepts and closes at once. The sink sends 10
// records as chained async writes; the write fails with EPIPE/ECONNRESET within 1 s, the
// error is surfaced and counted, the policy runs, SIGPIPE does not kill the process
// (this test leaves SIGPIPE at its default action), stop() returns and the loop thread
// joins within 1 s.
class c13 : public ::testing::TestWithParam<rill::tcp_sink_options::policy> {};

TEST_P(c13, closed_peer_write_fails_fast_and_shutdown_does_not_hang) {
  // The mock server: accept, close at once, forever, on its own thread.
  asio::io_context mock_io;
  tcp::acceptor acc{mock_io, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}};
  const auto port = acc.local_endpoint().port();
  std::function<void()> accept_one = [&] {
    acc.async_accept([&](const boost::system::error_code& ec, tcp::socket s) {
      if (ec) return;
      s.close();
      accept_one();
    });
  };
  accept_one();
  std::thread mock{[&] { mock_io.run(); }};

  auto lp = std::make_unique<loop>();
  waiter w;
  std::vector<int> errs;
  std::uint64_t sent = 0;
  std::unique_ptr<rill::tcp_sink> sink;
  lp->call([&] {
    sink = std::make_unique<rill::tcp_sink>(
        lp->io, rill::tcp_sink_options{.endpoint = rill::tcp_endpoint::connect("127.0.0.1", port),
                                       .framing = rill::framing::fixed(8),
                                       .on_error = GetParam()});
    sink->on_error([&](const std::error_code& ec, const std::string&) {
      w.update([&] { errs.push_back(ec.value()); });
    });
    // chained: the next record is written when the previous write completed
    sink->on_sent([&](std::uint64_t n) {
      sent = n;
      if (sink->next_seq() < 10) sink->write(rec8(sink->next_seq()));
    });
    sink->start();
    sink->write(rec8(0));
  });
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(w.wait([&] { return !errs.empty(); }, 1000ms)) << "no write error within 1 s";
  const auto t_err = std::chrono::steady_clock::now() - t0;
  {
    std::lock_guard lk(w.mu);
    EXPECT_TRUE(errs[0] == EPIPE || errs[0] == ECONNRESET) << "errno " << errs[0];
  }
  const auto& st = sink->stats();
  EXPECT_GE(st.write_errors.load(), 1u);
  const int last = st.last_error.load();
  EXPECT_TRUE(last == EPIPE || last == ECONNRESET) << last;
  if (GetParam() == rill::tcp_sink_options::policy::fail) {
    EXPECT_TRUE(lp->call([&] { return sink->failed(); }));
    EXPECT_FALSE(lp->call([&] { return sink->write(rec8(99)); }));
  }
  // stop() and join within 1 s
  const auto t1 = std::chrono::steady_clock::now();
  lp->call([&] { sink->stop(); });
  lp->join();
  const auto t_stop = std::chrono::steady_clock::now() - t1;
  EXPECT_LT(t_err, 1s);
  EXPECT_LT(t_stop, 1s);
  sink.reset();
  lp.reset();
  acc.close();
  mock_io.stop();
  mock.join();
}

INSTANTIATE_TEST_SUITE_P(policies, c13,
                         ::testing::Values(rill::tcp_sink_options::policy::fail,
                                           rill::tcp_sink_options::policy::reconnect));

// ---------------------------------------------------------------- resynchronisation

/// A hand-written sender: connection 1 sends hello(0), records 0..2 and half of record 3,
/// then closes; connection 2 sends hello(first2) and records first2..9. The receiver must
/// deliver only whole records, never a corrupt one, and report the gap / skip duplicates.
struct resync_case {
  std::uint64_t first2;
  std::vector<std::uint64_t> expect;
  std::uint64_t gaps, missing, dups;
  bool block_in_read = false;  // blocking reads on the loop thread instead of the reactor
};
class resync : public ::testing::TestWithParam<resync_case> {};

TEST_P(resync, broken_mid_record_then_reconnect) {
  const auto c = GetParam();
  loop lp;
  waiter w;
  std::vector<std::uint64_t> got;  // seq and value must agree
  std::vector<std::pair<std::uint64_t, std::uint64_t>> gaps;
  std::unique_ptr<rill::tcp_receiver> rx;
  const auto port = lp.call([&] {
    rx = std::make_unique<rill::tcp_receiver>(
        lp.io, rill::tcp_source_options{.endpoint = rill::tcp_endpoint::listen("127.0.0.1", 0),
                                        .framing = rill::framing::fixed(8),
                                        .block_in_read = c.block_in_read});
    rx->on_records([&](std::uint64_t first, std::span<const std::span<const std::byte>> recs) {
      w.update([&] {
        for (auto r : recs) {
          EXPECT_EQ(val8(r), first) << "record content differs from its sequence index";
          got.push_back(first++);
        }
      });
      return true;
    });
    rx->on_gap(
        [&](std::uint64_t a, std::uint64_t b) { w.update([&] { gaps.emplace_back(a, b); }); });
    rx->start();
    return rx->port();
  });

  asio::io_context io;
  auto send = [&](std::vector<std::byte> data) {
    tcp::socket s{io};
    s.connect(tcp::endpoint{asio::ip::make_address("127.0.0.1"), port});
    asio::write(s, asio::buffer(data));
    s.shutdown(tcp::socket::shutdown_both);
    s.close();
  };
  std::vector<std::byte> c1;
  auto h = rill::tcp_hello{0}.encode();
  c1.insert(c1.end(), h.begin(), h.end());
  for (std::uint64_t i = 0; i < 3; ++i) {
    auto r = rec8(i);
    c1.insert(c1.end(), r.begin(), r.end());
  }
  auto r3 = rec8(3);
  c1.insert(c1.end(), r3.begin(), r3.begin() + 4);  // half a record
  send(c1);
  ASSERT_TRUE(w.wait([&] { return got.size() == 3; }));
  ASSERT_TRUE(w.wait([&] { return rx->stats().broken_mid_record.load() == 1; }));
  std::vector<std::byte> c2;
  h = rill::tcp_hello{c.first2}.encode();
  c2.insert(c2.end(), h.begin(), h.end());
  for (std::uint64_t i = c.first2; i < 10; ++i) {
    auto r = rec8(i);
    c2.insert(c2.end(), r.begin(), r.end());
  }
  send(c2);
  ASSERT_TRUE(w.wait([&] { return !got.empty() && got.back() == 9; }));
  lp.call([&] { rx->stop(); });
  std::lock_guard lk(w.mu);
  EXPECT_EQ(got, c.expect);
  EXPECT_EQ(gaps.size(), c.gaps);
  if (c.gaps) {
    EXPECT_EQ(gaps[0], std::make_pair(std::uint64_t{3}, c.first2));
  }
  EXPECT_EQ(rx->stats().records_missing.load(), c.missing);
  EXPECT_EQ(rx->stats().duplicates_skipped.load(), c.dups);
  EXPECT_EQ(rx->stats().partial_bytes_discarded.load(), 4u);
}

INSTANTIATE_TEST_SUITE_P(cases, resync,
                         ::testing::Values(
                             // sender lost records 3 and 4: gap [3, 5) reported, nothing corrupt
                             resync_case{5, {0, 1, 2, 5, 6, 7, 8, 9}, 1, 2, 0},
                             // sender resent from 3 (the broken record): no gap at all
                             resync_case{3, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 0, 0},
                             // sender resent from 1: records 1 and 2 are duplicates, skipped
                             resync_case{1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 0, 2},
                             // the same three with blocking reads on the loop thread
                             resync_case{5, {0, 1, 2, 5, 6, 7, 8, 9}, 1, 2, 0, true},
                             resync_case{3, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 0, 0, true},
                             resync_case{1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 0, 2, true}));

// ---------------------------------------------------------------- start order, reconnect

// The sink starts first and retries until the receiver exists; then the receiver goes
// away and comes back on the same port: every record arrives in order, or the missing
// range is reported as a gap — never a corrupt record.
TEST(tcp, start_order_does_not_matter_and_reconnect_after_peer_restart) {
  const auto port = free_port();
  loop lp;
  waiter w;
  std::uint64_t next = 0, missing = 0;
  bool bad = false;
  auto make_rx = [&] {
    auto rx = std::make_unique<rill::tcp_receiver>(
        lp.io, rill::tcp_source_options{.endpoint = rill::tcp_endpoint::listen("127.0.0.1", port),
                                        .framing = rill::framing::fixed(8)});
    rx->on_records([&](std::uint64_t first, std::span<const std::span<const std::byte>> recs) {
      w.update([&] {
        for (auto r : recs) {
          if (val8(r) != first || first < next) bad = true;
          next = ++first;
        }
      });
      return true;
    });
    rx->on_gap([&](std::uint64_t a, std::uint64_t b) { w.update([&] { missing += b - a; }); });
    rx->start();
    return rx;
  };
  std::unique_ptr<rill::tcp_sink> sink;
  lp.call([&] {
    sink = std::make_unique<rill::tcp_sink>(
        lp.io, rill::tcp_sink_options{.endpoint = rill::tcp_endpoint::connect("127.0.0.1", port),
                                      .framing = rill::framing::fixed(8),
                                      .backoff = {.initial = 1ms, .max = 20ms}});
    sink->start();
    for (std::uint64_t i = 0; i < 1000; ++i) sink->write(rec8(i));
  });
  // no receiver yet: connects fail and are retried
  ASSERT_TRUE(w.wait([&] { return sink->stats().connect_errors.load() >= 2; }));
  std::unique_ptr<rill::tcp_receiver> rx = lp.call([&] { return make_rx(); });
  ASSERT_TRUE(w.wait([&] { return next == 1000; }));
  // receiver restarts (its state is new: the first connection sets its base)
  lp.call([&] { rx.reset(); });
  lp.call([&] { rx = make_rx(); });
  // keep writing until the sink noticed and reconnected, bounded
  std::uint64_t written = 1000;
  for (int round = 0; round < 2000 && sink->stats().connections.load() < 2; ++round) {
    lp.call([&] {
      for (int k = 0; k < 10; ++k) sink->write(rec8(written++));
    });
    std::this_thread::yield();
  }
  ASSERT_GE(sink->stats().connections.load(), 2u);
  lp.call([&] {
    for (int k = 0; k < 100; ++k) sink->write(rec8(written++));
  });
  ASSERT_TRUE(w.wait([&] { return next == written; })) << next << " of " << written;
  lp.call([&] {
    sink->stop();
    rx->stop();
  });
  std::lock_guard lk(w.mu);
  EXPECT_FALSE(bad) << "a record's content did not match its sequence index, or went backwards";
  EXPECT_GE(sink->stats().write_errors.load(), 1u);
}

// ---------------------------------------------------------------- low-water mark

// receive_low_water_bytes = 4096: 50 records (416 bytes with the hello) stay in the
// kernel; once 600 more follow, the first delivery holds at least 4096 bytes' worth of
// records (510), from record 0; a tail below the mark arrives when the peer closes.
TEST(tcp, receive_low_water_mark_batches_reads_and_the_tail_arrives_at_close) {
  constexpr std::size_t low_water = 4096;
  loop lp;
  waiter w;
  std::vector<std::size_t> batches;  // records per delivery
  std::uint64_t next = 0;
  bool bad = false, eof = false;
  std::unique_ptr<rill::tcp_receiver> rx;
  const auto port = lp.call([&] {
    rx = std::make_unique<rill::tcp_receiver>(
        lp.io, rill::tcp_source_options{.endpoint = rill::tcp_endpoint::listen("127.0.0.1", 0),
                                        .framing = rill::framing::fixed(8),
                                        .receive_low_water_bytes = low_water});
    rx->on_records([&](std::uint64_t first, std::span<const std::span<const std::byte>> recs) {
      w.update([&] {
        batches.push_back(recs.size());
        for (auto r : recs) {
          if (val8(r) != first || first != next) bad = true;
          next = ++first;
        }
      });
      return true;
    });
    rx->on_eof([&] { w.update([&] { eof = true; }); });
    rx->start();
    return rx->port();
  });
  asio::io_context io;
  tcp::socket s{io};
  s.connect(tcp::endpoint{asio::ip::make_address("127.0.0.1"), port});
  ASSERT_TRUE(w.wait([&] { return rx->stats().connections.load() == 1; }));
  // The accept handler has returned: the first read was tried (nothing there) and waits.
  lp.call([] {});
  auto send = [&](std::uint64_t from, std::uint64_t to, bool hello) {
    std::vector<std::byte> out;
    if (hello) {
      const auto h = rill::tcp_hello{0}.encode();
      out.insert(out.end(), h.begin(), h.end());
    }
    for (std::uint64_t i = from; i < to; ++i) {
      const auto r = rec8(i);
      out.insert(out.end(), r.begin(), r.end());
    }
    asio::write(s, asio::buffer(out));
  };
  send(0, 50, true);  // 416 bytes: below the mark, not delivered
  send(50, 650, false);
  ASSERT_TRUE(w.wait([&] { return next == 650; })) << next;
  send(650, 660, false);  // 80 bytes, then the close: delivered at the close
  s.shutdown(tcp::socket::shutdown_send);
  ASSERT_TRUE(w.wait([&] { return eof; }));
  lp.call([&] { rx->stop(); });
  s.close();
  std::lock_guard lk(w.mu);
  EXPECT_FALSE(bad) << "records out of order or not matching their index";
  EXPECT_EQ(next, 660u);
  ASSERT_FALSE(batches.empty());
  EXPECT_GE(batches.front(), (low_water - rill::tcp_hello::size) / 8)
      << "the first delivery came before " << low_water << " bytes were queued";
  EXPECT_EQ(rx->stats().errors.load(), 0u);
}

TEST(tcp, receive_low_water_mark_over_1_gib_is_a_config_error) {
  try {
    rill::tcp_source src{{.framing = rill::framing::fixed(8),
                          .receive_low_water_bytes = std::size_t{2} << 30,
                          .name = "in"}};
    FAIL() << "no config_error";
  } catch (const rill::config_error& e) {
    EXPECT_EQ(std::string(e.key()), "in.receive_low_water_bytes");
  }
}

// ---------------------------------------------------------------- blocking reads

// block_in_read, connect mode (the receiver connects to a listening sink): every
// delivery runs on the thread running the receiver's io_context. The first delivery
// returns false: the reading handler returns to the loop (a handler posted there runs,
// and no record is delivered meanwhile), the receiver stops reading and the sink gets
// stuck at its cap (TCP flow control). After resume() all 1,000,000 records arrive,
// in order, each once.
TEST(tcp, block_in_read_delivers_on_the_loop_thread_and_a_pause_holds_the_sender) {
  loop sender, receiver;
  waiter w;
  const std::uint64_t total = 1000000;  // 8 MB: more than the socket buffers hold
  const std::size_t cap = 64 << 10;
  std::uint64_t got = 0, next = 0, deliveries = 0;
  bool bad_order = false, off_thread = false;
  std::unique_ptr<rill::tcp_sink> sink;
  std::unique_ptr<rill::tcp_receiver> rx;
  std::uint64_t written = 0;
  std::function<void()> pump = [&] {
    while (written < total && sink->writable()) sink->write(rec8(written++));
  };
  const auto port = sender.call([&] {
    sink = std::make_unique<rill::tcp_sink>(
        sender.io,
        rill::tcp_sink_options{.endpoint = rill::tcp_endpoint::listen("127.0.0.1", 0),
                               .framing = rill::framing::fixed(8),
                               .buffer_bytes = cap});
    sink->on_writable([&] { pump(); });
    sink->start();
    pump();
    return sink->port();
  });
  const auto receiver_thread = receiver.t.get_id();
  receiver.call([&] {
    rx = std::make_unique<rill::tcp_receiver>(
        receiver.io,
        rill::tcp_source_options{.endpoint = rill::tcp_endpoint::connect("127.0.0.1", port),
                                 .framing = rill::framing::fixed(8),
                                 .read_bytes = 4096,
                                 .block_in_read = true});
    rx->on_records([&](std::uint64_t first, std::span<const std::span<const std::byte>> recs) {
      w.update([&] {
        if (std::this_thread::get_id() != receiver_thread) off_thread = true;
        ++deliveries;
        for (auto r : recs) {
          if (val8(r) != first || first != next) bad_order = true;
          next = ++first;
          ++got;
        }
      });
      return deliveries > 1;  // the first delivery pauses
    });
    rx->start();
  });
  ASSERT_TRUE(w.wait([&] { return deliveries == 1; }));
  // The sink fills up: records are left to write, it holds at least half its cap, and
  // neither moves for 100 ms (the kernel takes no more). Not "not writable": a write the
  // kernel finished part of can leave the sink a few bytes under its cap, writable, with
  // nothing to resume the writer until it drains to half (on_writable's rule). Bounded
  // wait for the state, as in slow_receiver_backpressure_keeps_memory_bounded.
  bool stuck = false;
  std::pair<std::uint64_t, std::size_t> seen{~std::uint64_t{0}, 0};
  auto seen_at = std::chrono::steady_clock::now();
  for (const auto end = std::chrono::steady_clock::now() + 10s;
       !stuck && std::chrono::steady_clock::now() < end;) {
    const auto now = sender.call([&] { return std::pair{written, sink->buffered_bytes()}; });
    if (now != seen) {
      seen = now;
      seen_at = std::chrono::steady_clock::now();
    }
    stuck = now.first < total && now.second >= cap / 2 &&
            std::chrono::steady_clock::now() - seen_at >= 100ms;
    if (!stuck) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(stuck) << "written " << sender.call([&] { return written; }) << " of " << total
                     << ", sink buffered " << sender.call([&] { return sink->buffered_bytes(); })
                     << " bytes, receiver connections "
                     << receiver.call([&] { return rx->stats().connections.load(); })
                     << ", records delivered " << receiver.call([&] {
                          std::lock_guard lk(w.mu);
                          return got;
                        });
  // The receiver's loop is free (this handler runs) and nothing was delivered since.
  EXPECT_EQ(receiver.call([&] {
              std::lock_guard lk(w.mu);
              return deliveries;
            }),
            1u);
  receiver.call([&] { rx->resume(); });
  ASSERT_TRUE(w.wait([&] { return got == total; }, 20000ms)) << got;
  // The receiver's loop sleeps in read(2) until the peer closes: stop the sender first.
  sender.call([&] { sink->stop(); });
  receiver.call([&] { rx->stop(); });
  std::lock_guard lk(w.mu);
  EXPECT_FALSE(bad_order) << "records out of order or not matching their index";
  EXPECT_FALSE(off_thread) << "a delivery ran off the receiver's loop thread";
  EXPECT_GT(deliveries, 2u);
  EXPECT_EQ(rx->stats().records.load(), total);
  EXPECT_EQ(rx->stats().bytes.load(), total * 8 + rill::tcp_hello::size);
  EXPECT_EQ(rx->stats().errors.load(), 0u);
}

TEST(tcp, block_in_read_on_a_pipeline_source_is_a_config_error) {
  try {
    rill::tcp_source src{{.framing = rill::framing::fixed(8), .block_in_read = true, .name = "in"}};
    FAIL() << "no config_error";
  } catch (const rill::config_error& e) {
    EXPECT_EQ(std::string(e.key()), "in.block_in_read");
  }
}

// ---------------------------------------------------------------- backpressure

// A receiver that stops reading: the sink's buffer stays bounded (writable() turns false
// at the cap; the writer stops), and everything arrives once the receiver resumes.
TEST(tcp, slow_receiver_backpressure_keeps_memory_bounded) {
  loop lp;
  waiter w;
  std::uint64_t got = 0, sum = 0;
  bool paused = true;
  std::unique_ptr<rill::tcp_receiver> rx;
  std::unique_ptr<rill::tcp_sink> sink;
  const std::size_t cap = 64 << 10;
  std::size_t max_buffered = 0;
  // 8 MB of records: more than cap + the socket buffers can hold (loopback's send buffer
  // autotunes up to net.ipv4.tcp_wmem's max, 4 MiB here; the paused receiver's stays near
  // tcp_rmem's default, 128 KiB), so the writer must get stuck.
  const std::uint64_t total = 1000000;
  std::uint64_t written = 0;
  std::function<void()> pump = [&] {
    while (written < total && sink->writable()) {
      sink->write(rec8(written++));
      max_buffered = std::max(max_buffered, sink->buffered_bytes());
    }
  };
  lp.call([&] {
    rx = std::make_unique<rill::tcp_receiver>(
        lp.io, rill::tcp_source_options{.endpoint = rill::tcp_endpoint::listen("127.0.0.1", 0),
                                        .framing = rill::framing::fixed(8),
                                        .read_bytes = 4096});
    rx->on_records([&](std::uint64_t, std::span<const std::span<const std::byte>> recs) {
      w.update([&] {
        got += recs.size();
        for (auto r : recs) sum += val8(r);
      });
      return !paused;
    });
    rx->start();
    sink = std::make_unique<rill::tcp_sink>(
        lp.io,
        rill::tcp_sink_options{.endpoint = rill::tcp_endpoint::connect("127.0.0.1", rx->port()),
                               .framing = rill::framing::fixed(8),
                               .buffer_bytes = cap});
    sink->on_writable([&] { pump(); });
    sink->start();
    pump();
  });
  // the writer is stuck: the sink is full and the receiver holds one read
  ASSERT_TRUE(w.wait([&] { return got > 0; }));
  // Until the kernel's buffers are full the sink drains and turns writable again: wait
  // (up to 10 s) for the state, not for a number of loop turns (200 turns passed in 41 ms
  // and failed 1 run in ~12 under ctest -j2 --repeat on the loaded 2-core machine).
  bool stuck = false;
  for (const auto end = std::chrono::steady_clock::now() + 10s; !stuck && std::chrono::steady_clock::now() < end;) {
    stuck = lp.call([&] { return !sink->writable() && written < total; });
    if (!stuck) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(stuck);
  // read on the loop: pump() may run again meanwhile (the kernel takes more of the buffer)
  EXPECT_LE(lp.call([&] { return max_buffered; }), cap + 8);
  lp.call([&] {
    paused = false;
    rx->resume();
  });
  ASSERT_TRUE(w.wait([&] { return got == total; }, 10000ms)) << got;
  lp.call([&] {
    sink->stop();
    rx->stop();
  });
  EXPECT_EQ(sum, total * (total - 1) / 2);  // Gauss: every record exactly once
  EXPECT_LE(max_buffered, cap + 8);
}

// write_framed + on_batch, the forwarding fast path: the sink sends batches straight from
// the caller's memory while the connection is idle and keeps only what the kernel did not
// take (often part of a record); the receiver hands whole records over in one span. A
// receiver that keeps pausing, behind small socket buffers, makes sends come back partial,
// cut inside a record (12-byte records: the kernel cuts at multiples of 4 KiB); then the
// receiver restarts mid-stream. Every record arrives whole, in order, with its own index
// as content. (The new receiver has no state: it may get again records of the batch in
// flight that the old one had read, so order is checked per receiver.)
TEST(tcp, write_framed_partial_sends_and_restart_deliver_whole_records_in_order) {
  constexpr std::size_t rs = 12;  // record: 8-byte index, 4 bytes 0xAB
  const auto port = free_port();
  loop lp;
  waiter w;
  std::uint64_t next = 0, missing = 0, batches = 0;
  bool bad = false, fresh = true;  // fresh: the receiver's first batch sets `next`
  std::unique_ptr<rill::tcp_receiver> rx;
  int turns = 0, chains = 0;  // a paused receiver reads again after `turns` loop turns
  std::function<void()> resume_later = [&] {
    if (--turns > 0) return lp.post(resume_later);
    --chains;
    if (rx) rx->resume();
  };
  auto make_rx = [&] {
    fresh = true;
    auto r = std::make_unique<rill::tcp_receiver>(
        lp.io, rill::tcp_source_options{.endpoint = rill::tcp_endpoint::listen("127.0.0.1", port),
                                        .framing = rill::framing::fixed(rs),
                                        .read_bytes = 4000,
                                        .receive_buffer_bytes = 8192});
    r->on_batch([&](std::uint64_t first, std::span<const std::byte> wire, std::size_t n) {
      w.update([&] {
        if (wire.size() != n * rs) bad = true;
        for (std::size_t i = 0; i < n; ++i, ++first) {
          const auto rec = wire.subspan(i * rs, rs);
          if (val8(rec) != first || rec[11] != std::byte{0xAB} || (first < next && !fresh))
            bad = true;
          next = first + 1;
          fresh = false;
        }
      });
      if (++batches % 7 != 0 || chains > 0) return true;
      turns = 20;  // the writer fills the socket meanwhile
      ++chains;
      lp.post(resume_later);
      return false;
    });
    r->on_gap([&](std::uint64_t a, std::uint64_t b) { w.update([&] { missing += b - a; }); });
    r->start();
    return r;
  };
  std::unique_ptr<rill::tcp_sink> sink;
  std::uint64_t written = 0, limit = 300000;  // 3.6 MB: far more than the socket buffers
  std::vector<std::byte> batch;
  std::function<void()> pump = [&] {
    while (written < limit && sink->writable()) {
      const std::uint64_t n = std::min<std::uint64_t>(1001, limit - written);
      batch.assign(n * rs, std::byte{0xAB});
      for (std::uint64_t i = 0; i < n; ++i) {
        const auto r = rec8(written + i);
        std::copy(r.begin(), r.end(), batch.begin() + static_cast<std::ptrdiff_t>(i * rs));
      }
      ASSERT_TRUE(sink->write_framed(batch, n));
      written += n;
    }
  };
  lp.call([&] {
    rx = make_rx();
    sink = std::make_unique<rill::tcp_sink>(
        lp.io, rill::tcp_sink_options{.endpoint = rill::tcp_endpoint::connect("127.0.0.1", port),
                                      .framing = rill::framing::fixed(rs),
                                      .buffer_bytes = 64 << 10,
                                      .send_buffer_bytes = 8192,
                                      .backoff = {.initial = 1ms, .max = 20ms}});
    sink->on_writable([&] { pump(); });
    sink->start();
    pump();
  });
  ASSERT_TRUE(w.wait([&] { return next == limit; }, 10000ms)) << next << " of " << limit;
  EXPECT_EQ(lp.call([&] { return sink->stats().records_sent.load(); }), limit);
  // the receiver restarts while batches keep coming
  lp.call([&] { rx.reset(); });
  lp.call([&] { rx = make_rx(); });
  for (int round = 0; round < 2000 && sink->stats().connections.load() < 2; ++round) {
    lp.call([&] {
      limit = written + 1001;
      pump();
    });
    std::this_thread::yield();
  }
  ASSERT_GE(sink->stats().connections.load(), 2u);
  lp.call([&] {
    limit = written + 100000;
    pump();
  });
  ASSERT_TRUE(w.wait([&] { return next == limit; }, 10000ms)) << next << " of " << limit;
  while (lp.call([&] { return chains; }) > 0) std::this_thread::yield();
  lp.call([&] {
    sink->stop();
    rx->stop();
  });
  std::lock_guard lk(w.mu);
  EXPECT_FALSE(bad) << "a record was cut, differs from its sequence index, or went backwards";
  EXPECT_EQ(sink->stats().records_accepted.load(), limit);
  EXPECT_GE(sink->stats().write_errors.load(), 1u);
  EXPECT_EQ(missing, 0u);  // a new receiver takes the first hello as its base: no gap
}

TEST(fan_out, backpressure_target_pauses_drop_target_counts) {
  struct fake {
    std::size_t cap, held = 0;
    std::uint64_t records = 0;
    bool write_framed(std::span<const std::byte> w, std::size_t n) {
      held += w.size();
      records += n;
      return true;
    }
    bool writable() const { return held < cap; }
  };
  fake fast{1000}, slow_bp{16}, slow_drop{16};
  rill::fan_out out;
  out.add(rill::fan_out::to(fast));
  std::string msg;
  out.on_drop([&](const std::string&, const std::string& m) { msg = m; });
  out.add(rill::fan_out::to(slow_drop, rill::fan_out::slow::drop, "tap"));
  const auto r = rill::frame_encoder{rill::framing::fixed(8)};
  auto wire = rec8(1);
  EXPECT_TRUE(out.write(wire, 1));  // held 8 everywhere
  EXPECT_TRUE(out.write(wire, 1));  // 16: slow_drop now full
  EXPECT_TRUE(out.write(wire, 1));  // dropped for the tap, counted
  EXPECT_EQ(slow_drop.records, 2u);
  EXPECT_EQ(out.targets()[1].records_dropped, 1u);
  EXPECT_NE(msg.find("tap is full"), std::string::npos);
  out.add(rill::fan_out::to(slow_bp));
  EXPECT_TRUE(out.write(wire, 1));   // slow_bp: 8
  EXPECT_FALSE(out.write(wire, 1));  // slow_bp: 16 = cap -> stop reading
  EXPECT_FALSE(out.ready());
  slow_bp.held = 0;
  EXPECT_TRUE(out.ready());
  EXPECT_EQ(fast.records, 5u);
  (void)r;
}

// ---------------------------------------------------------------- segment files

// Both ways of writing (the sink's thread; write(2) on the caller's) give the same files.
class segment_files : public ::testing::TestWithParam<bool> {};

TEST_P(segment_files, names_by_first_and_last_index_and_content) {
  const auto dir = std::filesystem::path(RILL_TEST_BINARY_DIR) /
                   (GetParam() ? "segfiles_caller" : "segfiles_thread");
  std::filesystem::remove_all(dir);
  {
    rill::segment_file_sink s{{.directory = dir.string(),
                               .prefix = "ix",
                               .record_bytes = 8,
                               .records_per_segment = 4,
                               .chunk_bytes = 24,
                               .write_on_caller = GetParam()}};
    for (std::uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(s.write_framed(rec8(i), 1));
    s.close();
    EXPECT_EQ(s.records_written(), 10u);
    const auto f = s.files();
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(std::filesystem::path(f[0]).filename(),
              "ix-00000000000000000000-00000000000000000003.seg");
    EXPECT_EQ(std::filesystem::path(f[2]).filename(),
              "ix-00000000000000000008-00000000000000000009.seg");
    std::ifstream in(f[1], std::ios::binary);
    std::vector<char> b((std::istreambuf_iterator<char>(in)), {});
    ASSERT_EQ(b.size(), 32u);
    EXPECT_EQ(val8(std::as_bytes(std::span(b)).first(8)), 4u);
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(writers, segment_files, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? "on_caller" : "on_thread"; });

// ---------------------------------------------------------------- in a rill pipeline

// graph: tcp_source (listen, length-prefixed) -> map(payload size) -> sink(sum)
//        fed by a standalone tcp_sink that sends 5000 records then closes (EOF = end).
TEST(tcp_pipeline, source_feeds_a_pipeline_until_eof) {
  rill::tcp_source src{{.endpoint = rill::tcp_endpoint::listen("127.0.0.1", 0),
                        .framing = rill::framing::length_prefixed(64)}};
  auto port_of = src;  // shares port/stats with the copy given to the pipeline
  std::atomic<std::uint64_t> bytes{0}, count{0}, seq_sum{0};
  auto j = rill::from(std::move(src), "tcp")
               .map([](rill::tcp_message&& m) { return std::make_pair(m.seq, m.payload.size()); })
               .sink([&](std::pair<std::uint64_t, std::size_t>&& p) {
                 bytes += p.second;
                 seq_sum += p.first;
                 ++count;
               });
  rill::runtime rt{{.workers = 1, .topology = "1 node x 1 core", .pin = false}};
  std::thread feeder([&] {
    // Until the source listens (its worker binds the port). A bounded number of yields
    // was too short under TSan on a loaded machine: the sink then connected to port 0
    // forever and the run never saw its end of stream (CI timeout).
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (port_of.port() == 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    asio::io_context io;
    rill::tcp_sink sink{io,
                        {.endpoint = rill::tcp_endpoint::connect("127.0.0.1", port_of.port()),
                         .framing = rill::framing::length_prefixed(64)}};
    sink.start();
    std::string payload;
    for (int i = 0; i < 5000; ++i) {
      payload.assign(std::size_t(i % 50), 'x');
      sink.write(rill::as_bytes_view(payload));
    }
    sink.close([&] { io.stop(); });
    io.run();
  });
  const auto rep = rt.run(j);
  feeder.join();
  std::uint64_t expect_bytes = 0;
  for (int i = 0; i < 5000; ++i) expect_bytes += std::uint64_t(i % 50);
  EXPECT_EQ(count.load(), 5000u);
  EXPECT_EQ(bytes.load(), expect_bytes);
  EXPECT_EQ(seq_sum.load(), 4999u * 5000u / 2);
  EXPECT_EQ(rep.stage("tcp").out, 5000u);
  EXPECT_TRUE(port_of.errors().empty());
}

// graph: vector_source (20000 ints) -> sink(tcp_pipeline_sink) ===TCP===> tcp_receiver
TEST(tcp_pipeline, pipeline_sink_delivers_everything_with_backpressure) {
  loop lp;
  waiter w;
  std::uint64_t got = 0, sum = 0;
  std::unique_ptr<rill::tcp_receiver> rx;
  const auto port = lp.call([&] {
    rx = std::make_unique<rill::tcp_receiver>(
        lp.io, rill::tcp_source_options{.endpoint = rill::tcp_endpoint::listen("127.0.0.1", 0),
                                        .framing = rill::framing::fixed(8)});
    rx->on_records([&](std::uint64_t, std::span<const std::span<const std::byte>> recs) {
      w.update([&] {
        for (auto r : recs) sum += val8(r);
        got += recs.size();
      });
      return true;
    });
    rx->start();
    return rx->port();
  });
  std::vector<rill::record<std::uint64_t>> in;
  for (std::uint64_t i = 0; i < 20000; ++i)
    in.push_back({i, rill::event_time{std::chrono::seconds{1}}});
  struct enc {
    void operator()(const std::uint64_t& v, std::vector<std::byte>& out) const {
      auto r = rec8(v);
      out.insert(out.end(), r.begin(), r.end());
    }
  };
  auto out = std::make_shared<rill::tcp_pipeline_sink<std::uint64_t, enc>>(
      1, rill::tcp_sink_options{.endpoint = rill::tcp_endpoint::connect("127.0.0.1", port),
                                .framing = rill::framing::fixed(8),
                                .buffer_bytes = 16 << 10});
  rill::runtime rt{{.workers = 1, .topology = "1 node x 1 core", .pin = false}};
  rt.run(rill::from(rill::vector_source<std::uint64_t>{in}).sink(out));
  ASSERT_TRUE(out->wait(5000ms));
  ASSERT_TRUE(w.wait([&] { return got == 20000; })) << got;
  lp.call([&] { rx->stop(); });
  std::lock_guard lk(w.mu);
  EXPECT_EQ(sum, 19999u * 20000u / 2);
  EXPECT_EQ(out->stats().records_sent.load(), 20000u);
}

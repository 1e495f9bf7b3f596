// rill::make_beast_transport and rill::make_cpprest_transport against a raw HTTP/1.1 server
// on loopback that sends exactly the bytes a case needs (case C24 in
// ../shared/cases/CASES.md: Boost.Beast #2150, #2868):
//   (a) 500, Connection: close, no length header, a 170-byte body, then close: the body
//       ends at EOF (RFC 9112 §6.3 rule 8), status 500, the connection is retired and the
//       next request opens a new one;
//   (b) Content-Length: 200, 170 bytes, then close: a transport error naming the truncated
//       body, and no connection left in the pool;
//   (c) 204 and 304 with no body and no length header: complete at once (no wait for EOF;
//       RFC 9112 §6.3 rule 1), and the connection is reused.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <istream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include "rill/connectors/http_transport.hpp"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

/// A loopback server: an accept thread, and a thread per accepted connection (a client
/// may open a second connection while the first is still open: cpprestsdk returns a
/// connection to its pool asynchronously, after the completion). For each request read
/// (head and Content-Length body) on any connection, it writes the next canned answer;
/// `close_after` closes that connection after the answer. Counts accepted connections.
class canned_server {
 public:
  struct answer {
    std::string bytes;
    bool close_after = false;
  };
  explicit canned_server(std::vector<answer> answers)
      : answers_(std::move(answers)), acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this] { run(); });
  }
  ~canned_server() {
    stop_ = true;
    boost::system::error_code ec;
    // Wake a blocking accept with a connection of our own.
    tcp::socket s(wake_ioc_);
    s.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
    {
      // Wake connection threads blocked in a read: shutdown(2) on the descriptor is
      // safe from another thread; the socket objects stay owned by their threads.
      const std::lock_guard lock(mu_);
      for (const int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& c : connections_) c.join();
  }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  int accepted() const { return accepted_.load(); }

 private:
  void run() {
    while (!stop_) {
      auto sock = std::make_unique<tcp::socket>(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(*sock, ec);
      if (ec || stop_) return;
      ++accepted_;
      {
        const std::lock_guard lock(mu_);
        open_fds_.push_back(sock->native_handle());
      }
      connections_.emplace_back([this, s = std::move(sock)] { serve(*s); });
    }
  }

  /// The next canned answer, or none when all were given.
  std::optional<answer> next_answer() {
    const std::lock_guard lock(mu_);
    if (next_ >= answers_.size()) return std::nullopt;
    return answers_[next_++];
  }

  void serve(tcp::socket& sock) {
    boost::system::error_code ec;
    asio::streambuf buf;
    while (!stop_) {
      const auto head_len = asio::read_until(sock, buf, "\r\n\r\n", ec);
      if (ec) break;
      std::string head(asio::buffers_begin(buf.data()), asio::buffers_begin(buf.data()) + head_len);
      buf.consume(head_len);
      std::size_t body = 0;
      if (const auto at = head.find("Content-Length: "); at != std::string::npos)
        body = std::stoul(head.substr(at + 16));
      if (buf.size() < body) asio::read(sock, buf, asio::transfer_exactly(body - buf.size()), ec);
      buf.consume(body);
      const auto a = next_answer();
      if (!a) break;
      asio::write(sock, asio::buffer(a->bytes), ec);
      if (a->close_after) break;
    }
    {
      const std::lock_guard lock(mu_);
      std::erase(open_fds_, sock.native_handle());
    }
    sock.shutdown(tcp::socket::shutdown_both, ec);
  }

  std::vector<answer> answers_;
  std::size_t next_ = 0;  // guarded by mu_
  std::mutex mu_;
  std::vector<int> open_fds_;  // guarded by mu_
  asio::io_context ioc_, wake_ioc_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
  std::vector<std::thread> connections_;  // touched by the accept thread, then joined
};

class http_transport_c24 : public ::testing::TestWithParam<rill::http_transport_kind> {
 protected:
  std::unique_ptr<rill::http_transport> make(asio::io_context& ioc, unsigned short port) {
    return rill::http_transport_for(GetParam())(
        ioc, {.endpoint = rill::http_endpoint::parse("http://127.0.0.1:" + std::to_string(port) + "/enrich"),
              .max_connections = 1});
  }
  /// Posts one request and runs the loop until it completes (at most 10 s).
  rill::http_result post(asio::io_context& ioc, rill::http_transport& t) {
    std::optional<rill::http_result> got;
    t.post({.body = R"(["k"])", .timeout = 5000ms}, [&](rill::http_result&& r) { got = std::move(r); });
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!got && std::chrono::steady_clock::now() < until) {
      ioc.restart();
      ioc.run_for(20ms);
    }
    EXPECT_TRUE(got.has_value()) << "no completion within 10 s";
    return got.value_or(rill::http_result{});
  }
};

const std::string body170 = "[" + std::string(168, 'x') + "]";  // 170 bytes

TEST_P(http_transport_c24, a_body_without_length_ends_at_eof_and_the_connection_is_retired) {
  canned_server srv({{"HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\n\r\n" + body170, true},
                     {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]", false}});
  asio::io_context ioc;
  auto t = make(ioc, srv.port());
  const auto r = post(ioc, *t);
  EXPECT_FALSE(r.ec) << r.ec.message() << ": " << r.detail;
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(r.body, body170);
  if (GetParam() == rill::http_transport_kind::beast) {
    EXPECT_EQ(t->open_connections(), 0u);
  }
  const auto second = post(ioc, *t);
  EXPECT_FALSE(second.ec) << second.ec.message() << ": " << second.detail;
  EXPECT_EQ(second.status, 200u);
  EXPECT_EQ(second.body, "[]");
  EXPECT_EQ(srv.accepted(), 2);  // a new connection for the next request
}

TEST_P(http_transport_c24, a_body_cut_short_is_a_transport_error_naming_the_lengths) {
  canned_server srv({{"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + body170, true},
                     {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]", false}});
  asio::io_context ioc;
  auto t = make(ioc, srv.port());
  const auto r = post(ioc, *t);
  EXPECT_TRUE(r.ec);
  if (GetParam() == rill::http_transport_kind::beast) {
    EXPECT_EQ(r.ec, rill::make_error_code(rill::http_errc::connection_closed)) << r.ec.message();
    EXPECT_NE(r.detail.find("truncated body (170/200 bytes)"), std::string::npos) << r.detail;
    EXPECT_EQ(t->open_connections(), 0u);
  }
  const auto second = post(ioc, *t);  // the pool holds no broken connection
  EXPECT_FALSE(second.ec) << second.ec.message() << ": " << second.detail;
  EXPECT_EQ(second.body, "[]");
  EXPECT_EQ(srv.accepted(), 2);
}

TEST_P(http_transport_c24, no_content_statuses_complete_at_once_and_keep_the_connection) {
  // The server keeps the connection open after each answer: waiting for EOF would hang
  // until the 5 s timeout.
  canned_server srv({{"HTTP/1.1 204 No Content\r\n\r\n", false},
                     {"HTTP/1.1 304 Not Modified\r\n\r\n", false},
                     {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]", false}});
  asio::io_context ioc;
  auto t = make(ioc, srv.port());
  const auto t0 = std::chrono::steady_clock::now();
  const auto a = post(ioc, *t);
  const auto b = post(ioc, *t);
  const auto c = post(ioc, *t);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);  // well below the 5 s timeout
  EXPECT_FALSE(a.ec) << a.detail;
  EXPECT_EQ(a.status, 204u);
  EXPECT_EQ(a.body, "");
  EXPECT_FALSE(b.ec) << b.detail;
  EXPECT_EQ(b.status, 304u);
  EXPECT_EQ(b.body, "");
  EXPECT_FALSE(c.ec) << c.detail;
  EXPECT_EQ(c.body, "[]");
  if (GetParam() == rill::http_transport_kind::beast) {
    EXPECT_EQ(srv.accepted(), 1);  // one kept-alive connection served all three
    EXPECT_EQ(t->open_connections(), 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(transports, http_transport_c24,
                         ::testing::Values(rill::http_transport_kind::beast, rill::http_transport_kind::cpprest),
                         [](const auto& info) {
                           return std::string(info.param == rill::http_transport_kind::beast ? "beast" : "cpprest");
                         });

}  // namespace

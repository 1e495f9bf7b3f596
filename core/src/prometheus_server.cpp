#include "rill/core/prometheus_server.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <istream>
#include <thread>

#include "rill/core/error.hpp"

namespace rill {

namespace {

using boost::asio::ip::tcp;

/// One HTTP/1.x exchange: read the request head, answer, close (Connection: close).
struct session : std::enable_shared_from_this<session> {
  session(tcp::socket s, const std::function<std::string()>& t) : sock(std::move(s)), text(t) {}
  void start() {
    boost::asio::async_read_until(sock, buf, "\r\n\r\n",
                                  [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                                    if (!ec) self->answer();
                                  });
  }
  void answer() {
    std::string line;
    std::istream in(&buf);
    std::getline(in, line);
    const bool metrics = line.rfind("GET /metrics", 0) == 0 || line.rfind("GET / ", 0) == 0;
    const std::string body = metrics ? text() : std::string("not found: GET /metrics\n");
    reply = std::string(metrics ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 404 Not Found\r\n") +
            "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    boost::asio::async_write(sock, boost::asio::buffer(reply),
                             [self = shared_from_this()](boost::system::error_code, std::size_t) {
                               boost::system::error_code ignored;
                               self->sock.shutdown(tcp::socket::shutdown_both, ignored);
                             });
  }
  tcp::socket sock;
  const std::function<std::string()>& text;
  boost::asio::streambuf buf{64 * 1024};  // a request head longer than 64 KiB is dropped
  std::string reply;
};

}  // namespace

struct prometheus_server::impl {
  std::function<std::string()> text;
  boost::asio::io_context ctx{1};
  tcp::acceptor acceptor{ctx};
  std::uint16_t port = 0;
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;  // the acceptor closed: the server is going away
      std::make_shared<session>(std::move(s), text)->start();
      accept();
    });
  }
};

prometheus_server::prometheus_server(const std::string& address, std::uint16_t port,
                                     std::function<std::string()> text)
    : impl_(std::make_unique<impl>()) {
  impl_->text = std::move(text);
  try {
    const tcp::endpoint at{boost::asio::ip::make_address(address), port};
    impl_->acceptor.open(at.protocol());
    impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
    impl_->acceptor.bind(at);
    impl_->acceptor.listen();
    impl_->port = impl_->acceptor.local_endpoint().port();
  } catch (const std::exception& e) {
    throw config_error("runtime.metrics_port", "runtime.metrics_port: cannot listen on " + address + ":" +
                                                   std::to_string(port) + ": " + e.what());
  }
  impl_->accept();
  impl_->thread = std::thread([i = impl_.get()] { i->ctx.run(); });
}

prometheus_server::~prometheus_server() {
  impl_->ctx.stop();
  impl_->thread.join();
}

std::uint16_t prometheus_server::port() const noexcept { return impl_->port; }

}  // namespace rill

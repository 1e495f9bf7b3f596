// Boost.Beast transport: async connect/write/read on the owning worker's io_context, a
// bounded pool of keep-alive connections, a per-request deadline (beast::tcp_stream).
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "rill/connectors/http_transport.hpp"
#include "rill/core/error.hpp"

namespace rill {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

/// Maps an asio/beast error to our category, keeping the system text as detail.
http_result failure(const boost::system::error_code& ec, const char* stage) {
  http_errc e = http_errc::other;
  if (ec == beast::error::timeout) e = http_errc::timeout;
  else if (ec == asio::error::connection_refused) e = http_errc::connection_refused;
  else if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe)
    e = http_errc::connection_reset;
  else if (ec == http::error::end_of_stream || ec == asio::error::eof ||
           ec == http::error::partial_message)
    e = http_errc::connection_closed;
  else if (ec.category() == http::make_error_code(http::error::bad_version).category())
    e = http_errc::malformed_response;
  http_result r;
  r.ec = make_error_code(e);
  r.detail = std::string(stage) + ": " + ec.message();
  return r;
}

class beast_transport final : public http_transport {
 public:
  beast_transport(asio::io_context& ioc, http_transport_options o) : ioc_(ioc), opts_(std::move(o)) {
    if (opts_.max_connections == 0)
      throw config_error("http.max_connections", "http.max_connections must be >= 1");
    tcp::resolver res(ioc_);
    boost::system::error_code ec;
    auto r = res.resolve(opts_.endpoint.host, opts_.endpoint.port, ec);
    if (ec)
      throw config_error("http.url", "http.url: cannot resolve " + opts_.endpoint.host + ":" +
                                         opts_.endpoint.port + ": " + ec.message());
    for (const auto& e : r) endpoints_.push_back(e.endpoint());
    host_header_ = opts_.endpoint.host + ":" + opts_.endpoint.port;
  }
  ~beast_transport() override { *alive_ = false; }

  void post(http_request req, completion done) override {
    auto job = std::make_shared<request_job>();
    job->body = std::move(req.body);
    job->key = std::move(req.idempotency_key);
    job->posted = std::chrono::steady_clock::now();
    job->timeout = req.timeout;
    job->deadline = job->posted + req.timeout;
    job->done = std::move(done);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      // Completions never run inline: start on the next turn of the loop.
      asio::post(ioc_, [this, alive = alive_, c, job]() mutable {
        if (*alive) start(std::move(c), std::move(job));
      });
      return;
    }
    if (open_ < opts_.max_connections) {
      auto c = std::make_shared<connection>(ioc_);
      ++open_;
      peak_ = std::max(peak_, open_);
      asio::post(ioc_, [this, alive = alive_, c, job]() mutable {
        if (*alive) start(std::move(c), std::move(job));
      });
      return;
    }
    // Every connection busy: wait for one, with the request's own deadline.
    job->wait_timer = std::make_unique<asio::steady_timer>(ioc_, job->deadline);
    waiting_.push_back(job);
    job->wait_timer->async_wait([this, alive = alive_, job](const boost::system::error_code& ec) {
      if (ec || !*alive || job->finished) return;
      for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
        if (*it == job) {
          waiting_.erase(it);
          break;
        }
      finish(*job, unsent(*job, "for a free connection"));
    });
  }

  std::size_t open_connections() const noexcept override { return open_; }
  std::size_t peak_connections() const noexcept override { return peak_; }
  const char* name() const noexcept override { return "beast"; }

 private:
  struct connection {
    explicit connection(asio::io_context& ioc) : stream(ioc) {}
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    std::optional<http::response_parser<http::string_body>> parser;
    bool connected = false;
  };
  using conn_ptr = std::shared_ptr<connection>;
  struct request_job {
    std::string body, key;
    std::chrono::steady_clock::time_point posted, deadline;
    std::chrono::milliseconds timeout{};
    completion done;
    std::unique_ptr<asio::steady_timer> wait_timer;
    bool finished = false;
    bool sent = false;  ///< the write began: the service may have seen bytes of it
  };
  using job_ptr = std::shared_ptr<request_job>;

  /// expired_unsent: the deadline passed while `j` waited (`where`) before its write.
  static http_result unsent(const request_job& j, const char* where) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - j.posted);
    http_result r;
    r.ec = make_error_code(http_errc::expired_unsent);
    r.detail = "waited " + std::to_string(waited.count()) + " ms unsent " + where + " (timeout " +
               std::to_string(j.timeout.count()) + " ms)";
    return r;
  }

  void finish(request_job& j, http_result&& r) {
    if (j.finished) return;
    j.finished = true;
    r.sent = j.sent;
    auto d = std::move(j.done);
    d(std::move(r));
  }

  void start(conn_ptr c, job_ptr job) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= job->deadline) {
      const bool fresh = !c->connected;  // a kept-alive connection stays usable
      release(std::move(c), fresh);
      return finish(*job, unsent(*job, "for its worker's loop"));
    }
    c->stream.expires_after(job->deadline - now);
    c->req = {};
    c->req.method(http::verb::post);
    c->req.target(opts_.endpoint.target);
    c->req.version(11);
    c->req.set(http::field::host, host_header_);
    c->req.set(http::field::content_type, "application/json");
    if (!job->key.empty()) c->req.set("Idempotency-Key", job->key);
    c->req.keep_alive(true);
    c->req.body() = std::move(job->body);
    c->req.prepare_payload();
    if (c->connected) return write(std::move(c), std::move(job));
    c->stream.async_connect(endpoints_, [this, alive = alive_, c, job](
                                            const boost::system::error_code& ec,
                                            const tcp::endpoint&) mutable {
      if (!*alive) return;
      if (ec) return fail(std::move(c), std::move(job), ec, "connect");
      c->connected = true;
      write(std::move(c), std::move(job));
    });
  }

  void write(conn_ptr c, job_ptr job) {
    job->sent = true;  // the first bytes may leave inside this call
    http::async_write(c->stream, c->req,
                      [this, alive = alive_, c, job](const boost::system::error_code& ec,
                                                     std::size_t) mutable {
                        if (!*alive) return;
                        if (ec) return fail(std::move(c), std::move(job), ec, "write");
                        read(std::move(c), std::move(job));
                      });
  }

  void read(conn_ptr c, job_ptr job) {
    c->parser.emplace();
    c->parser->body_limit(64 * 1024 * 1024);
    http::async_read(c->stream, c->buffer, *c->parser,
                     [this, alive = alive_, c, job](const boost::system::error_code& ec,
                                                    std::size_t) mutable {
                       if (!*alive) return;
                       if (ec == http::error::partial_message && c->parser->content_length()) {
                         // The peer closed inside a body of announced length (C24 (b)).
                         const auto want = *c->parser->content_length();
                         const auto got = want - c->parser->content_length_remaining().value_or(want);
                         auto r = failure(ec, "read");
                         r.detail = "read: truncated body (" + std::to_string(got) + "/" + std::to_string(want) +
                                    " bytes): the server closed the connection";
                         release(std::move(c), true);
                         return finish(*job, std::move(r));
                       }
                       if (ec) return fail(std::move(c), std::move(job), ec, "read");
                       auto res = c->parser->release();
                       http_result r;
                       r.status = res.result_int();
                       r.body = std::move(res.body());
                       const bool reuse = res.keep_alive();
                       release(std::move(c), !reuse);
                       finish(*job, std::move(r));
                     });
  }

  void fail(conn_ptr c, job_ptr job, const boost::system::error_code& ec, const char* stage) {
    release(std::move(c), true);
    finish(*job, failure(ec, stage));
  }

  /// Returns a connection to the pool (or closes it) and hands it to a waiting request.
  void release(conn_ptr c, bool close) {
    if (close) {
      boost::system::error_code ignored;
      c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      c->stream.close();
      --open_;
      c.reset();
    } else {
      c->stream.expires_never();
    }
    while (!waiting_.empty()) {
      auto job = waiting_.front();
      waiting_.pop_front();
      if (job->finished) continue;
      job->wait_timer->cancel();
      if (!c) {
        c = std::make_shared<connection>(ioc_);
        ++open_;
        peak_ = std::max(peak_, open_);
      }
      asio::post(ioc_, [this, alive = alive_, c, job]() mutable {
        if (*alive) start(std::move(c), std::move(job));
      });
      return;
    }
    if (c) idle_.push_back(std::move(c));
  }

  asio::io_context& ioc_;
  http_transport_options opts_;
  std::vector<tcp::endpoint> endpoints_;
  std::string host_header_;
  std::vector<conn_ptr> idle_;
  std::deque<job_ptr> waiting_;
  std::size_t open_ = 0, peak_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace

std::unique_ptr<http_transport> make_beast_transport(boost::asio::io_context& ioc,
                                                     http_transport_options opts) {
  return std::make_unique<beast_transport>(ioc, std::move(opts));
}

}  // namespace rill

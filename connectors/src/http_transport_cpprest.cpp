// cpprestsdk transport: web::http::client::http_client (its own thread pool, pplx tasks);
// every completion is posted back to the owning io_context.
#include <cpprest/http_client.h>

#include <boost/asio/post.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "rill/connectors/http_transport.hpp"
#include "rill/core/error.hpp"

namespace rill {

namespace {

namespace asio = boost::asio;
using web::http::client::http_client;
using web::http::client::http_client_config;

/// State shared with cpprestsdk's threads: counts running requests so the destructor can
/// wait for them, and says whether results may still be posted.
struct shared_state {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t running = 0;
  bool closed = false;
};

http_result failure_from(const std::error_code& ec, const std::string& what) {
  http_errc e = http_errc::other;
  if (ec == std::errc::timed_out || ec == std::errc::operation_canceled) e = http_errc::timeout;
  else if (ec == std::errc::connection_refused) e = http_errc::connection_refused;
  else if (ec == std::errc::connection_reset || ec == std::errc::broken_pipe)
    e = http_errc::connection_reset;
  else if (ec.value() == 2 /* asio misc eof */ || ec == std::errc::connection_aborted)
    e = http_errc::connection_closed;
  // cpprestsdk reports a refused connect as "Failed to connect to any resolved endpoint"
  // with the code of the last attempt (sometimes lost); the text is the stable part.
  if (e == http_errc::other && what.find("Failed to connect") != std::string::npos)
    e = http_errc::connection_refused;
  http_result r;
  r.ec = make_error_code(e);
  r.detail = what + " [" + ec.category().name() + ":" + std::to_string(ec.value()) + "]";
  // cpprestsdk does not say how far a request got: only a refused connect surely sent nothing.
  r.sent = e != http_errc::connection_refused;
  return r;
}

class cpprest_transport final : public http_transport {
 public:
  cpprest_transport(asio::io_context& ioc, http_transport_options o)
      : ioc_(ioc), opts_(std::move(o)) {
    base_ = "http://" + opts_.endpoint.host + ":" + opts_.endpoint.port;
  }
  ~cpprest_transport() override {
    std::unique_lock lk(state_->mu);
    state_->closed = true;
    state_->cv.wait_for(lk, std::chrono::seconds{5}, [&] { return state_->running == 0; });
  }

  void post(http_request request, completion done) override {
    const auto timeout = request.timeout;
    // One client per timeout value (cpprestsdk fixes the timeout per client).
    if (!client_ || timeout != client_timeout_) {
      http_client_config cfg;
      cfg.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
      client_ = std::make_shared<http_client>(base_, cfg);
      client_timeout_ = timeout;
    }
    {
      std::lock_guard lk(state_->mu);
      ++state_->running;
    }
    ++open_;
    peak_ = std::max(peak_, open_);
    auto st = state_;
    auto* ioc = &ioc_;
    auto deliver = [st, ioc, done = std::move(done), this](http_result&& r) mutable {
      std::lock_guard lk(st->mu);
      if (!st->closed) {
        asio::post(*ioc, [this, st, done = std::move(done), r = std::move(r)]() mutable {
          if (st->closed) return;
          --open_;
          done(std::move(r));
        });
      }
      --st->running;
      st->cv.notify_all();
    };
    auto d = std::make_shared<decltype(deliver)>(std::move(deliver));
    web::http::http_request req(web::http::methods::POST);
    req.set_request_uri(utility::conversions::to_string_t(opts_.endpoint.target));
    req.set_body(std::move(request.body), "application/json");
    if (!request.idempotency_key.empty())
      req.headers().add(U("Idempotency-Key"), utility::conversions::to_string_t(request.idempotency_key));
    try {
      client_->request(req)
          .then([](web::http::http_response res) {
            return res.extract_utf8string(true).then([res](std::string b) {
              return std::make_pair(static_cast<unsigned>(res.status_code()), std::move(b));
            });
          })
          .then([d](pplx::task<std::pair<unsigned, std::string>> t) {
            http_result r;
            try {
              auto [status, b] = t.get();
              r.status = status;
              r.body = std::move(b);
              r.sent = true;
            } catch (const web::http::http_exception& e) {
              r = failure_from(e.error_code(), e.what());
            } catch (const std::exception& e) {
              r = failure_from(std::error_code{}, e.what());
            }
            (*d)(std::move(r));
          });
    } catch (const std::exception& e) {
      (*d)(failure_from(std::error_code{}, e.what()));
    }
  }

  std::size_t open_connections() const noexcept override { return open_; }
  std::size_t peak_connections() const noexcept override { return peak_; }
  const char* name() const noexcept override { return "cpprest"; }

 private:
  asio::io_context& ioc_;
  http_transport_options opts_;
  std::string base_;
  std::shared_ptr<http_client> client_;
  std::chrono::milliseconds client_timeout_{0};
  std::shared_ptr<shared_state> state_ = std::make_shared<shared_state>();
  // Requests outstanding in cpprestsdk (cpprestsdk does not expose its sockets; this is
  // an upper bound on the connections it holds for us). Owning thread only.
  std::size_t open_ = 0, peak_ = 0;
};

}  // namespace

std::unique_ptr<http_transport> make_cpprest_transport(boost::asio::io_context& ioc,
                                                       http_transport_options opts) {
  // pplx creates its process-wide scheduler lazily, on the first task, under a spin lock
  // inside libcpprest. Two workers creating their first requests at once then race on that
  // creation as far as ThreadSanitizer can see (the library is not instrumented, so the
  // lock is invisible; CI failed on it). Creating it once here, under a function-local
  // static's guard, orders every later use after the creation for TSan and for us.
  static const bool scheduler_created = [] { return pplx::get_ambient_scheduler() != nullptr; }();
  (void)scheduler_created;
  return std::make_unique<cpprest_transport>(ioc, std::move(opts));
}

}  // namespace rill

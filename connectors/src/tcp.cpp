// TCP connectors: tcp_connector, tcp_sink, tcp_receiver, tcp_source.
// Rules: see the headers (tcp_endpoint.hpp, tcp_sink.hpp, tcp_source.hpp, framing.hpp).
#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <unistd.h>

#include "rill/connectors/tcp_sink.hpp"
#include "rill/connectors/tcp_source.hpp"
#include "rill/core/error.hpp"
#include "rill/core/worker.hpp"

namespace rill {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
std::error_code to_std(const boost::system::error_code& ec) {
  // system and generic categories map onto errno values; keep the rest as generic io_error.
  if (ec.category() == boost::system::system_category() ||
      ec.category() == boost::system::generic_category())
    return {ec.value(), std::system_category()};
  if (ec == asio::error::eof) return std::make_error_code(std::errc::connection_reset);
  return std::make_error_code(std::errc::io_error);
}
void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
/// The checks tcp_receiver's and tcp_source's constructors share (tcp_source.hpp).
void validate_source(const tcp_source_options& o) {
  o.framing.validate(o.name);
  if (o.receive_low_water_bytes > (std::size_t{1} << 30))
    throw config_error(o.name + ".receive_low_water_bytes",
                       o.name + ".receive_low_water_bytes " +
                           std::to_string(o.receive_low_water_bytes) +
                           " is over 1 GiB (SO_RCVLOWAT is an int)");
}
}  // namespace

// ---------------------------------------------------------------- tcp_endpoint

tcp_endpoint tcp_endpoint::parse(const std::string& spec) {
  auto bad = [&](const std::string& why) {
    return config_error("tcp.endpoint", "tcp.endpoint \"" + spec + "\": " + why +
                                            " (expected connect:HOST:PORT or listen:HOST:PORT)");
  };
  const auto c1 = spec.find(':');
  const auto c2 = spec.rfind(':');
  if (c1 == std::string::npos || c2 == c1) throw bad("missing ':'");
  tcp_endpoint ep;
  const auto mode = spec.substr(0, c1);
  if (mode == "connect")
    ep.r = role::connect;
  else if (mode == "listen")
    ep.r = role::listen;
  else
    throw bad("unknown role \"" + mode + "\"");
  ep.host = spec.substr(c1 + 1, c2 - c1 - 1);
  if (ep.host.size() >= 2 && ep.host.front() == '[' && ep.host.back() == ']')
    ep.host = ep.host.substr(1, ep.host.size() - 2);
  if (ep.host.empty()) ep.host = ep.r == role::listen ? "0.0.0.0" : "127.0.0.1";
  boost::system::error_code ec;
  asio::ip::make_address(ep.host, ec);
  if (ec) throw bad("host must be a numeric address");
  const auto port = spec.substr(c2 + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535)
    throw bad("bad port \"" + port + "\"");
  ep.port = static_cast<std::uint16_t>(std::stoul(port));
  return ep;
}

std::string tcp_endpoint::to_string() const {
  return std::string(r == role::connect ? "connect:" : "listen:") + host + ":" +
         std::to_string(port);
}

// ---------------------------------------------------------------- tcp_connector

namespace detail {

namespace {
template <class Socket>
void set_buffers(Socket& s, const tcp_socket_buffers& b, boost::system::error_code& ec) {
  auto clamp = [](std::size_t v) { return static_cast<int>(std::min<std::size_t>(v, 1u << 30)); };
  if (!ec && b.send_bytes)
    s.set_option(asio::socket_base::send_buffer_size(clamp(b.send_bytes)), ec);
  if (!ec && b.receive_bytes)
    s.set_option(asio::socket_base::receive_buffer_size(clamp(b.receive_bytes)), ec);
}
}  // namespace

tcp_connector::tcp_connector(asio::io_context& io, tcp_endpoint ep, tcp_backoff b,
                             tcp_socket_buffers bufs)
    : io_(io), ep_(std::move(ep)), backoff_(b), bufs_(bufs), delay_(b.initial), timer_(io) {
  port_ = ep_.port;
  if (ep_.r == tcp_endpoint::role::listen) {
    const tcp::endpoint e{asio::ip::make_address(ep_.host), ep_.port};
    acceptor_.emplace(io_);
    boost::system::error_code ec;
    acceptor_->open(e.protocol(), ec);
    if (!ec) acceptor_->set_option(tcp::acceptor::reuse_address(true), ec);
    set_buffers(*acceptor_, bufs_, ec);  // accepted sockets inherit them
    if (!ec) acceptor_->bind(e, ec);
    if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw std::system_error(to_std(ec), "tcp " + ep_.to_string());
    port_ = acceptor_->local_endpoint().port();
  }
}

void tcp_connector::start(on_socket_fn on_socket, on_error_fn on_error) {
  on_socket_ = std::move(on_socket);
  on_error_ = std::move(on_error);
  if (acceptor_)
    accept_next();
  else
    connect_now();
}

void tcp_connector::accept_next() {
  if (stopped_) return;
  acceptor_->async_accept(
      [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket s) {
        if (self->stopped_ || ec == asio::error::operation_aborted) return;
        if (!ec) {
          self->on_socket_(std::move(s));
          return self->accept_next();
        }
        if (self->on_error_)
          self->on_error_(to_std(ec), "accept on " + self->ep_.to_string() + ": " + ec.message());
        // EMFILE, ENFILE, ENOBUFS leave the connection in the backlog: accepting again at
        // once fails at once, and the loop would spin. Wait, then accept again (C25).
        self->timer_.expires_after(accept_retry_delay);
        self->timer_.async_wait([self](const boost::system::error_code& tec) {
          if (tec || self->stopped_) return;
          self->accept_next();
        });
      });
}

void tcp_connector::connect_now() {
  if (stopped_) return;
  pending_ = true;
  connecting_.emplace(io_);
  const tcp::endpoint e{asio::ip::make_address(ep_.host), ep_.port};
  boost::system::error_code ec;
  connecting_->open(e.protocol(), ec);
  set_buffers(*connecting_, bufs_, ec);  // before connect: the window scale depends on it
  connecting_->async_connect(e, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (self->stopped_) return;
    self->pending_ = false;
    if (ec) {
      if (self->on_error_)
        self->on_error_(to_std(ec), "connect to " + self->ep_.to_string() + ": " + ec.message());
      self->reconnect();
      return;
    }
    self->delay_ = self->backoff_.initial;
    auto s = std::move(*self->connecting_);
    self->connecting_.reset();
    self->on_socket_(std::move(s));
  });
}

void tcp_connector::reconnect() {
  if (stopped_ || acceptor_ || pending_) return;
  pending_ = true;
  timer_.expires_after(delay_);
  delay_ = std::min(
      backoff_.max,
      std::chrono::milliseconds{
          static_cast<std::int64_t>(static_cast<double>(delay_.count()) * backoff_.factor) + 1});
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->stopped_) return;
    self->connect_now();
  });
}

void tcp_connector::stop() {
  if (stopped_) return;
  stopped_ = true;
  timer_.cancel();
  boost::system::error_code ignore;
  if (acceptor_) acceptor_->close(ignore);
  if (connecting_) connecting_->close(ignore);
}

}  // namespace detail

// ---------------------------------------------------------------- tcp_sink

struct tcp_sink::impl : std::enable_shared_from_this<tcp_sink::impl> {
  asio::io_context& io;
  tcp_sink_options o;
  frame_encoder enc;
  std::shared_ptr<detail::tcp_connector> conn;
  std::optional<tcp::socket> sock;
  std::uint64_t gen = 0;  // connection generation: stale handlers compare and return
  bool writing = false, peer_closed = false, failed = false, stopped = false, started = false;
  bool was_full = false, closing = false;
  // Records [inflight_first, inflight_first + inflight_n) are being written (or wait to be
  // resent); [pending_first, next_seq) are buffered behind them. `suspect` = batches that
  // completed after the peer closed its side: resent too.
  // `inflight_off` = bytes of inflight's first record that a direct send (take) already
  // handed to the kernel on this connection; a new connection resends from byte 0.
  std::vector<std::byte> pending, inflight;
  std::uint64_t pending_first = 0, next_seq = 0, inflight_first = 0, inflight_n = 0;
  std::size_t inflight_off = 0;
  std::array<std::byte, tcp_hello::size> hello{};
  bool send_hello = false;
  std::array<std::byte, 256> rbuf{};
  std::function<void()> writable_cb, close_cb;
  std::function<void(std::uint64_t)> sent_cb;
  error_fn error_cb;
  tcp_sink_stats st;

  impl(asio::io_context& i, tcp_sink_options opts) : io(i), o(std::move(opts)), enc(o.framing) {
    o.framing.validate(o.name);
    conn = std::make_shared<detail::tcp_connector>(
        io, o.endpoint, o.backoff, detail::tcp_socket_buffers{.send_bytes = o.send_buffer_bytes});
  }

  std::size_t buffered() const noexcept { return pending.size() + inflight.size(); }

  void on_socket(tcp::socket&& s) {
    if (stopped || failed) return;
    if (sock) drop_connection();  // listen mode: a newer connection supersedes
    boost::system::error_code ignore;
    s.set_option(tcp::no_delay(o.no_delay), ignore);
    s.non_blocking(true, ignore);  // direct sends in take() must never block the loop
    sock.emplace(std::move(s));
    ++gen;
    peer_closed = false;
    bump(st.connections);
    send_hello = o.handshake;
    hello = tcp_hello{inflight_n ? inflight_first : pending_first}.encode();
    inflight_off = 0;
    if (inflight_n) bump(st.records_resent, inflight_n);
    start_read();
    start_write();
  }

  void start_read() {
    sock->async_read_some(
        asio::buffer(rbuf),
        [self = shared_from_this(), g = gen](const boost::system::error_code& ec, std::size_t) {
          if (self->stopped || g != self->gen) return;
          if (!ec) return self->start_read();  // receivers never talk back: ignore
          self->peer_closed = true;
          // With a write in flight the write path reports what the kernel says (EPIPE,
          // ECONNRESET); idle, the connection is failed now so the next record goes to a new one.
          if (!self->writing) self->lost(ec);
        });
  }

  void start_write() {
    if (!sock || writing || stopped) return;
    if (inflight.empty()) {
      if (pending.empty()) {
        if (closing) finish_close();
        return;
      }
      inflight.swap(pending);
      pending.clear();
      inflight_first = pending_first;
      inflight_n = next_seq - pending_first;
      pending_first = next_seq;
    }
    writing = true;
    std::array<asio::const_buffer, 2> bufs{
        asio::buffer(hello.data(), send_hello ? hello.size() : 0),
        asio::buffer(inflight.data() + inflight_off, inflight.size() - inflight_off)};
    asio::async_write(
        *sock, bufs,
        [self = shared_from_this(), g = gen](const boost::system::error_code& ec, std::size_t n) {
          if (self->stopped || g != self->gen) return;
          self->writing = false;
          if (ec) return self->lost(ec);
          if (self->peer_closed) {
            // Written after the peer closed: it cannot have been read. Keep it for the resend
            // and let the next write report the kernel's error; bound the wait.
            return self->lost(asio::error::eof);
          }
          self->send_hello = false;
          bump(self->st.bytes_sent, n);
          bump(self->st.records_sent, self->inflight_n);
          self->inflight.clear();
          self->inflight_off = 0;
          self->inflight_n = 0;
          self->inflight_first = self->pending_first;
          if (self->sent_cb) self->sent_cb(self->st.records_sent.load(std::memory_order_relaxed));
          self->check_writable();
          self->start_write();
        });
  }

  void check_writable() {
    if (was_full && buffered() < o.buffer_bytes / 2) {
      was_full = false;
      if (writable_cb) writable_cb();
    }
  }

  void drop_connection() {
    boost::system::error_code ignore;
    if (sock) {
      sock->shutdown(tcp::socket::shutdown_both, ignore);
      sock->close(ignore);
    }
    sock.reset();
    ++gen;
    writing = false;
  }

  void lost(const boost::system::error_code& bec) {
    const auto ec = to_std(bec);
    bump(st.write_errors);
    st.last_error.store(ec.value(), std::memory_order_relaxed);
    drop_connection();
    const auto msg = o.name + " " + o.endpoint.to_string() + ": connection lost (" + bec.message() +
                     "), records from " +
                     std::to_string(inflight_n ? inflight_first : pending_first) +
                     (o.on_error == tcp_sink_options::policy::reconnect ? " will be resent"
                                                                        : " dropped: policy fail");
    if (o.on_error == tcp_sink_options::policy::fail) {
      failed = true;
      drop_all();
      conn->stop();
    }
    if (error_cb) error_cb(ec, msg);
    if (failed) {
      if (close_cb) finish_close();
      return;
    }
    conn->reconnect();
  }

  void drop_all() {
    bump(st.records_dropped, inflight_n + (next_seq - pending_first));
    inflight.clear();
    pending.clear();
    inflight_n = inflight_off = 0;
    pending_first = inflight_first = next_seq;
  }

  void finish_close() {
    if (sock) {
      boost::system::error_code ignore;
      sock->shutdown(tcp::socket::shutdown_send, ignore);
      sock->close(ignore);
      sock.reset();
      ++gen;
    }
    conn->stop();
    if (auto cb = std::exchange(close_cb, nullptr)) cb();
  }

  /// Fixed framing, nothing buffered, connection idle: send `wire` (n records) straight
  /// from the caller's memory — no copy into `pending`, no completion to wait for. What
  /// the kernel did not take becomes the in-flight batch, from the first record it did
  /// not fully take (a reconnect resends that record whole). False = not possible now
  /// (busy, hello pending, would block, error): the caller buffers as usual and the
  /// asynchronous path reports any error.
  bool direct_send(std::span<const std::byte> wire, std::size_t n) {
    if (!sock || writing || send_hello || closing || !inflight.empty() || !pending.empty() ||
        o.framing.k != framing::kind::fixed || wire.empty())
      return false;
    boost::system::error_code ec;
    const std::size_t k = sock->send(asio::buffer(wire.data(), wire.size()), 0, ec);
    if (ec || k == 0) return false;
    const std::size_t rs = o.framing.size, whole = k / rs;
    bump(st.bytes_sent, k);
    bump(st.records_sent, whole);
    if (whole < n) {
      inflight.assign(wire.begin() + static_cast<std::ptrdiff_t>(whole * rs), wire.end());
      inflight_off = k - whole * rs;
      inflight_first = next_seq + whole;
      inflight_n = n - whole;
      start_write();
    } else if (sent_cb) {
      asio::post(io, [w = weak_from_this()] {
        if (auto self = w.lock(); self && self->sent_cb)
          self->sent_cb(self->st.records_sent.load(std::memory_order_relaxed));
      });
    }
    return true;
  }

  bool take(std::span<const std::byte> wire, std::size_t n, bool framed) {
    if (failed || stopped) {
      bump(st.records_dropped, n);
      return false;
    }
    if (framed && direct_send(wire, n)) {  // sent, or its rest is the in-flight batch
      next_seq += n;
      pending_first = next_seq;
      if (inflight_n == 0) inflight_first = pending_first;
      bump(st.records_accepted, n);
      if (buffered() >= o.buffer_bytes) was_full = true;
      return true;
    }
    if (framed) {
      pending.insert(pending.end(), wire.begin(), wire.end());
    } else if (enc.append(pending, wire)) {
      bump(st.records_dropped);
      st.last_error.store(EMSGSIZE, std::memory_order_relaxed);
      if (error_cb)
        error_cb(make_error_code(framing_errc::wrong_size),
                 o.name + ": record of " + std::to_string(wire.size()) +
                     " bytes does not fit the framing (record index " + std::to_string(next_seq) +
                     ")");
      return false;
    }
    next_seq += n;
    bump(st.records_accepted, n);
    if (buffered() >= o.buffer_bytes) was_full = true;
    if (!writing) start_write();
    return true;
  }
};

tcp_sink::tcp_sink(asio::io_context& io, tcp_sink_options opts)
    : p_(std::make_shared<impl>(io, std::move(opts))) {}
tcp_sink::~tcp_sink() { stop(); }

void tcp_sink::start() {
  if (p_->started) return;
  p_->started = true;
  std::weak_ptr<impl> w = p_;
  p_->conn->start(
      [w](tcp::socket&& s) {
        if (auto p = w.lock()) p->on_socket(std::move(s));
      },
      [w](const std::error_code& ec, const std::string& msg) {
        if (auto p = w.lock()) {
          bump(p->st.connect_errors);
          p->st.last_error.store(ec.value(), std::memory_order_relaxed);
          (void)msg;  // retried with backoff; counted, not an error of the stream
        }
      });
}
bool tcp_sink::write(std::span<const std::byte> payload) { return p_->take(payload, 1, false); }
bool tcp_sink::write_framed(std::span<const std::byte> wire, std::size_t n) {
  return p_->take(wire, n, true);
}
bool tcp_sink::writable() const noexcept {
  return !p_->failed && !p_->stopped && p_->buffered() < p_->o.buffer_bytes;
}
std::size_t tcp_sink::buffered_bytes() const noexcept { return p_->buffered(); }
bool tcp_sink::connected() const noexcept { return p_->sock.has_value(); }
bool tcp_sink::failed() const noexcept { return p_->failed; }
void tcp_sink::on_writable(std::function<void()> f) { p_->writable_cb = std::move(f); }
void tcp_sink::on_sent(std::function<void(std::uint64_t)> f) { p_->sent_cb = std::move(f); }
void tcp_sink::on_error(error_fn f) { p_->error_cb = std::move(f); }
void tcp_sink::close(std::function<void()> done) {
  p_->close_cb = std::move(done);
  p_->closing = true;
  if (p_->failed || p_->stopped || (p_->buffered() == 0 && !p_->writing)) p_->finish_close();
}
void tcp_sink::stop() {
  auto& p = *p_;
  if (p.stopped) return;
  p.stopped = true;
  p.drop_connection();
  p.conn->stop();
  p.drop_all();
  if (auto cb = std::exchange(p.close_cb, nullptr)) cb();
}
std::uint16_t tcp_sink::port() const noexcept { return p_->conn->port(); }
const tcp_sink_stats& tcp_sink::stats() const noexcept { return p_->st; }
std::uint64_t tcp_sink::next_seq() const noexcept { return p_->next_seq; }

// ---------------------------------------------------------------- tcp_receiver

struct tcp_receiver::impl : std::enable_shared_from_this<tcp_receiver::impl> {
  asio::io_context& io;
  tcp_source_options o;
  std::shared_ptr<tcp_receiver_stats> st;
  std::shared_ptr<detail::tcp_connector> conn;
  frame_decoder dec;  // length-prefixed framing, and fixed records larger than read_bytes
  // The connection: an Asio socket (asynchronous reads), or with block_in_read a
  // descriptor released from the reactor, in blocking mode, owned here (`fd`).
  std::optional<tcp::socket> sock;
  int fd = -1;
  std::uint64_t gen = 0;
  // Fixed framing with record size <= read_bytes (`whole`): no decoder. Reads land at
  // buf + carry, behind the `carry` bytes of an incomplete record kept at buf[0], so the
  // whole records of a read are always contiguous: delivered as one span (on_batch) or a
  // span per record (on_records), never copied.
  bool whole = false, delivering = false;
  std::size_t carry = 0;
  std::vector<std::byte> buf;
  std::vector<std::span<const std::byte>> recs;
  std::array<std::byte, tcp_hello::size> hello_buf{};
  std::size_t hello_have = 0;
  bool have_base = false, paused = false, reading = false, stopped = false, started = false;
  std::uint64_t expected = 0, skip = 0;
  records_fn records_cb;
  batch_fn batch_cb;
  gap_fn gap_cb;
  error_fn error_cb;
  std::function<void()> eof_cb;

  impl(asio::io_context& i, tcp_source_options opts, std::shared_ptr<tcp_receiver_stats> s)
      : io(i),
        o(std::move(opts)),
        st(s ? std::move(s) : std::make_shared<tcp_receiver_stats>()),
        dec(o.framing) {
    validate_source(o);
    if (o.read_bytes < 64) o.read_bytes = 64;
    whole = o.framing.k == framing::kind::fixed && o.framing.size <= o.read_bytes;
    buf.resize(o.read_bytes + (whole ? o.framing.size : 0));
    conn = std::make_shared<detail::tcp_connector>(
        io, o.endpoint, o.backoff,
        detail::tcp_socket_buffers{.receive_bytes = o.receive_buffer_bytes});
  }

  ~impl() { close_connection(); }

  std::string where() const { return o.name + " " + o.endpoint.to_string(); }

  void report(const std::error_code& ec, const std::string& msg) {
    bump(st->errors);
    if (error_cb) error_cb(ec, msg);
  }

  bool connected() const noexcept { return sock.has_value() || fd >= 0; }

  void on_socket(tcp::socket&& s) {
    if (stopped) return;
    if (connected())
      end_connection(asio::error::connection_aborted, "superseded by a new connection");
    sock.emplace(std::move(s));
    ++gen;
    bump(st->connections);
    if (o.receive_low_water_bytes > 1) {
      boost::system::error_code ec;
      sock->set_option(
          asio::socket_base::receive_low_watermark(static_cast<int>(o.receive_low_water_bytes)),
          ec);
      if (ec)
        report(to_std(ec), where() + ": SO_RCVLOWAT " +
                               std::to_string(o.receive_low_water_bytes) + " refused (" +
                               ec.message() + "): every arrival wakes the receiver");
    }
    if (o.block_in_read) {
      // Out of the reactor (no epoll registration, no wake-ups for it while paused) and
      // blocking: read(2) sleeps until bytes arrive. If either step fails the connection
      // is read asynchronously instead, and on_error says so.
      boost::system::error_code ec;
      sock->native_non_blocking(false, ec);
      if (!ec) {
        const int released = sock->release(ec);
        if (!ec) {
          fd = released;
          sock.reset();
        }
      }
      if (ec)
        report(to_std(ec), where() + ": blocking reads refused (" + ec.message() +
                               "): this connection is read asynchronously");
    }
    hello_have = 0;
    dec.reset();
    carry = 0;
    if (!o.handshake && !have_base) have_base = true;
    reading = false;
    if (!paused) start_read();
  }

  std::size_t partial_bytes() const noexcept { return whole ? carry : dec.partial_bytes(); }

  void start_read() {
    if (!connected() || reading || stopped || delivering) return;
    reading = true;
    if (fd >= 0) {
      asio::post(io, [self = shared_from_this(), g = gen] { self->read_blocking(g); });
      return;
    }
    sock->async_read_some(
        asio::buffer(buf.data() + carry, o.read_bytes),
        [self = shared_from_this(), g = gen](const boost::system::error_code& ec, std::size_t n) {
          if (self->stopped || g != self->gen) return;
          self->reading = false;
          if (ec) return self->read_failed(ec);
          if (!self->take_read(n)) return;
          if (!self->paused) self->start_read();
        });
  }

  /// block_in_read: reads and delivers until paused, stopped or the connection ends;
  /// `reading` stays true meanwhile, so a resume() from a callback does not post a second
  /// loop.
  void read_blocking(std::uint64_t g) {
    if (stopped || g != gen) return;
    while (!paused && !stopped && g == gen && fd >= 0) {
      const auto n = ::read(fd, buf.data() + carry, o.read_bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        reading = false;
        return read_failed(n == 0 ? boost::system::error_code(asio::error::eof)
                                  : boost::system::error_code(errno, boost::system::system_category()));
      }
      if (!take_read(static_cast<std::size_t>(n))) return;  // dropped: drop() cleared `reading`
    }
    if (g == gen) reading = false;
  }

  /// A read (either mode) ended the connection: EOF or an error. Reconnects unless stopped.
  void read_failed(const boost::system::error_code& ec) {
    end_connection(ec, "");
    if (!stopped) conn->reconnect();
  }
  /// `n` bytes landed at buf + carry: counts them and delivers the records they complete.
  /// False when the connection was dropped (consume's rule).
  bool take_read(std::size_t n) {
    bump(st->bytes, n);
    return whole ? consume_whole(n) : consume(std::span<const std::byte>(buf.data(), n));
  }

  /// Takes the hello's bytes off the front of `in`. False when the connection was dropped
  /// (not a rill hello).
  bool take_hello(std::span<const std::byte>& in) {
    if (!o.handshake || hello_have >= tcp_hello::size) return true;
    const auto take = std::min(in.size(), tcp_hello::size - hello_have);
    std::copy_n(in.begin(), take, hello_buf.begin() + hello_have);
    hello_have += take;
    in = in.subspan(take);
    if (hello_have < tcp_hello::size) return true;
    tcp_hello h;
    if (!tcp_hello::decode(std::span<const std::byte, tcp_hello::size>(hello_buf), h)) {
      report(make_error_code(framing_errc::bad_hello),
             where() + ": connection does not start with a rill hello (byte offset 0): dropped");
      drop();
      conn->reconnect();
      return false;
    }
    if (!have_base) {
      have_base = true;
      expected = h.first_seq;
    } else if (h.first_seq > expected) {
      bump(st->gaps);
      bump(st->records_missing, h.first_seq - expected);
      if (gap_cb) gap_cb(expected, h.first_seq);
      expected = h.first_seq;
    } else {
      skip = expected - h.first_seq;
    }
    return true;
  }

  /// Fixed framing, `n` new bytes at buf + carry. False when the connection was dropped.
  bool consume_whole(std::size_t n) {
    std::span<const std::byte> fresh(buf.data() + carry, n);
    if (!take_hello(fresh)) return false;
    // The records start at buf[0] (the carried bytes of an incomplete record) or, with
    // nothing carried, behind what take_hello consumed.
    std::span<std::byte> in(buf.data() + (carry ? 0 : n - fresh.size()), carry + fresh.size());
    const std::size_t rs = o.framing.size, count = in.size() / rs;
    const std::size_t skipped = std::min<std::uint64_t>(skip, count);
    if (skipped) {
      skip -= skipped;
      bump(st->duplicates_skipped, skipped);  // already delivered before the break
    }
    const auto recs_wire = in.subspan(skipped * rs, (count - skipped) * rs);
    bool more = true;
    if (!recs_wire.empty()) {
      const std::uint64_t first = expected;
      expected = first + recs_wire.size() / rs;
      bump(st->records, recs_wire.size() / rs);
      delivering = true;  // a resume() from the callback must not read over the tail yet
      if (batch_cb) {
        more = batch_cb(first, recs_wire, recs_wire.size() / rs);
      } else if (records_cb) {
        recs.clear();
        for (std::size_t off = 0; off < recs_wire.size(); off += rs)
          recs.push_back(recs_wire.subspan(off, rs));
        more = records_cb(first, recs);
      }
      delivering = false;
    }
    if (!connected()) return false;  // stop() (or a drop) from the callback
    const auto tail = in.subspan(count * rs);
    std::memmove(buf.data(), tail.data(), tail.size());
    carry = tail.size();
    if (!more) paused = true;
    return true;
  }

  /// Decoder path. False when the connection was dropped (bad input).
  bool consume(std::span<const std::byte> in) {
    if (!take_hello(in)) return false;
    recs.clear();
    std::uint64_t first = expected;
    const auto ec = dec.feed(in, [&](std::span<const std::byte> r) {
      if (skip) {
        --skip;
        bump(st->duplicates_skipped);  // already delivered before the break
        return;
      }
      recs.push_back(r);
    });
    const bool more = deliver(first);
    if (ec) {
      report(ec, where() + ": " + ec.message() + " at byte offset " +
                     std::to_string(dec.offset() + (o.handshake ? tcp_hello::size : 0)) +
                     " of the connection (after record " + std::to_string(expected) +
                     "): connection dropped");
      drop();
      conn->reconnect();
      return false;
    }
    if (!more) paused = true;
    return true;
  }

  bool deliver(std::uint64_t first) {
    if (recs.empty()) return true;
    expected = first + recs.size();
    bump(st->records, recs.size());
    return records_cb ? records_cb(first, recs) : true;
  }

  /// Closes the connection's socket, whichever mode reads it.
  void close_connection() noexcept {
    boost::system::error_code ignore;
    if (sock) sock->close(ignore);
    sock.reset();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  void drop() {
    close_connection();
    ++gen;
    reading = false;
    const auto partial = whole ? std::exchange(carry, 0) : dec.reset();
    if (partial) bump(st->partial_bytes_discarded, partial);
  }

  void end_connection(const boost::system::error_code& bec, const std::string& why) {
    const bool mid =
        partial_bytes() > 0 || (o.handshake && hello_have > 0 && hello_have < tcp_hello::size);
    const auto partial = partial_bytes();
    const bool clean = bec == asio::error::eof && !mid;
    drop();
    if (mid) {
      bump(st->broken_mid_record);
      report(to_std(bec), where() + ": connection broken mid-record (" +
                              (why.empty() ? bec.message() : why) +
                              "): " + std::to_string(partial) + " bytes of record " +
                              std::to_string(expected) + " discarded");
    } else if (!clean) {
      report(to_std(bec),
             where() + ": connection lost (" + (why.empty() ? bec.message() : why) + ")");
    } else if (eof_cb) {
      eof_cb();
    }
  }
};

tcp_receiver::tcp_receiver(asio::io_context& io, tcp_source_options opts,
                           std::shared_ptr<tcp_receiver_stats> stats)
    : p_(std::make_shared<impl>(io, std::move(opts), std::move(stats))) {}
tcp_receiver::~tcp_receiver() { stop(); }
void tcp_receiver::on_records(records_fn f) { p_->records_cb = std::move(f); }
void tcp_receiver::on_batch(batch_fn f) {
  if (!p_->whole)
    throw config_error(
        p_->o.name + ".on_batch",
        p_->o.name + ".on_batch needs fixed framing with a record size <= read_bytes");
  p_->batch_cb = std::move(f);
}
void tcp_receiver::on_gap(gap_fn f) { p_->gap_cb = std::move(f); }
void tcp_receiver::on_error(error_fn f) { p_->error_cb = std::move(f); }
void tcp_receiver::on_eof(std::function<void()> f) { p_->eof_cb = std::move(f); }
void tcp_receiver::start() {
  if (p_->started) return;
  p_->started = true;
  std::weak_ptr<impl> w = p_;
  p_->conn->start(
      [w](tcp::socket&& s) {
        if (auto p = w.lock()) p->on_socket(std::move(s));
      },
      [w](const std::error_code& ec, const std::string&) {
        if (auto p = w.lock()) (void)ec;  // connect retries: expected while the peer is absent
      });
}
void tcp_receiver::pause() { p_->paused = true; }
void tcp_receiver::resume() {
  if (!p_->paused) return;
  p_->paused = false;
  p_->start_read();
}
void tcp_receiver::stop() {
  if (p_->stopped) return;
  p_->stopped = true;
  p_->conn->stop();
  p_->close_connection();
  ++p_->gen;
}
std::uint16_t tcp_receiver::port() const noexcept { return p_->conn->port(); }
const tcp_receiver_stats& tcp_receiver::stats() const noexcept { return *p_->st; }
std::uint64_t tcp_receiver::next_seq() const noexcept { return p_->expected; }

// ---------------------------------------------------------------- tcp_source

struct tcp_source::log {
  std::mutex mu;
  std::vector<std::string> lines;
  void add(std::string l) {
    std::lock_guard lk(mu);
    lines.push_back(std::move(l));
  }
};

struct tcp_source::state {
  tcp_source_options o;
  std::shared_ptr<tcp_receiver_stats> st;
  std::shared_ptr<std::atomic<std::uint16_t>> port;
  std::unique_ptr<tcp_receiver> rx;
  std::deque<tcp_message> q;
  bool eof = false, failed = false;
  std::string err;
  std::shared_ptr<tcp_source::log> log;
};

tcp_source::tcp_source(tcp_source_options opts)
    : opts_(std::move(opts)),
      stats_(std::make_shared<tcp_receiver_stats>()),
      port_(std::make_shared<std::atomic<std::uint16_t>>(0)),
      log_(std::make_shared<log>()) {
  validate_source(opts_);
  if (opts_.block_in_read)
    throw config_error(opts_.name + ".block_in_read",
                       opts_.name +
                           ".block_in_read: a worker's loop runs other stages and must not "
                           "sleep in a read; use tcp_receiver on an io_context of its own");
}
std::shared_ptr<const tcp_receiver_stats> tcp_source::stats() const { return stats_; }
std::vector<std::string> tcp_source::errors() const {
  std::lock_guard lk(log_->mu);
  return log_->lines;
}

tcp_source::reader tcp_source::open(std::size_t) const {
  auto s = std::make_shared<state>();
  s->o = opts_;
  s->st = stats_;
  s->port = port_;
  s->log = log_;
  return reader{std::move(s)};
}

poll_status tcp_source::reader::begin_poll() {
  auto& s = *s_;
  if (s.failed) return poll_status::error;
  if (!s.rx) {
    worker* w = this_worker();
    if (!w) {
      s.failed = true;
      s.err = s.o.name + ": poll() outside a rill worker";
      return poll_status::error;
    }
    try {
      s.rx = std::make_unique<tcp_receiver>(w->context(), s.o, s.st);
    } catch (const std::exception& e) {
      s.failed = true;
      s.err = s.o.name + " " + s.o.endpoint.to_string() + ": " + e.what();
      return poll_status::error;
    }
    s.port->store(s.rx->port());
    std::weak_ptr<state> ws = s_;
    s.rx->on_records([ws](std::uint64_t first, std::span<const std::span<const std::byte>> recs) {
      auto sp = ws.lock();
      if (!sp) return false;
      for (const auto& r : recs) sp->q.push_back(tcp_message{first++, {r.begin(), r.end()}});
      return sp->q.size() < sp->o.queue_records;
    });
    s.rx->on_gap([ws](std::uint64_t a, std::uint64_t b) {
      if (auto sp = ws.lock())
        sp->log->add(sp->o.name + ": gap [" + std::to_string(a) + ", " + std::to_string(b) +
                     "): " + std::to_string(b - a) + " records lost on a broken connection");
    });
    s.rx->on_error([ws](const std::error_code&, const std::string& m) {
      if (auto sp = ws.lock()) sp->log->add(m);
    });
    s.rx->on_eof([ws] {
      if (auto sp = ws.lock()) sp->eof = sp->eof || sp->o.end_on_eof;
    });
    s.rx->start();
  }
  return poll_status::more;
}

bool tcp_source::reader::pop_into(tcp_message& m) {
  if (s_->q.empty()) return false;
  m = std::move(s_->q.front());
  s_->q.pop_front();
  return true;
}

poll_status tcp_source::reader::end_poll() {
  auto& s = *s_;
  if (s.q.size() < s.o.queue_records / 2) s.rx->resume();
  if (!s.q.empty()) return poll_status::more;
  if (s.eof) {
    s.rx->stop();
    return poll_status::end;
  }
  return poll_status::idle;
}

std::string tcp_source::reader::error() const { return s_->err; }

}  // namespace rill

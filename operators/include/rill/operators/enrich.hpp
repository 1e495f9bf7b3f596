// rill/operators/enrich.hpp — batched asynchronous REST enrichment.
//
// Defines:
//   rill::enrich(stream, options, key_fn, merge_fn[, on_error])   the operator
//   rill::enrich_options, rill::enrich_order                       its configuration
//   rill::enrich_error                                             what the error side output gets
//   rill::enrich_metrics                                           counters and histograms
//
// Example (graph: vector_source -> enrich(port -> IANA service name) -> sink; the
// transport comes from <rill/connectors/http_transport.hpp>, target rill::http;
// compiled by tests/banner_examples.py):
//   #include <rill/connectors/http_transport.hpp>
//   std::vector<rill::record<int>> ports{{443, rill::event_time{1s}}, {53, rill::event_time{2s}}};
//   auto m = std::make_shared<rill::enrich_metrics>();
//   auto s = rill::enrich(rill::from(rill::vector_source<int>{ports}),
//       {.url = "http://127.0.0.1:8080/enrich", .batch_size = 100, .linger = 5ms,
//        .max_in_flight = 4, .timeout = 500ms, .retries = 2,
//        .transport = rill::make_beast_transport, .metrics = m},
//       [](const int& port) { return std::to_string(port) + "/tcp"; },         // key (JSON)
//       [](int&& port, nlohmann::json&& v) { return std::pair{port, v.dump()}; },  // merge
//       [](rill::record<int>&& r, const rill::enrich_error& e) { /* side output */ });
//   rill::runtime{}.run(std::move(s).sink([](std::pair<int, std::string>&&) {}));
//
// Rule (README, "enrich: batched async REST enrichment"): keys are gathered into one request per batch — a
// POST of a JSON array of keys; the answer must be a JSON array of the same length, value
// i belonging to key i. A batch goes out when it holds `batch_size` keys or `linger`
// after its first key, or at end of input. At most `max_in_flight` requests are
// outstanding per worker instance. At that limit the open batch keeps filling (a linger
// that expires meanwhile sends it as soon as a slot frees); once it is full too,
// on_flush() returns false, so the source stops reading (backpressure). Records held are
// bounded by max_buffered. A failed attempt (timeout, connection refused / reset /
// closed, HTTP status not 2xx, malformed answer, wrong length) is retried up to `retries`
// times after an exponential backoff with jitter (backoff * 2^(attempt-1), capped at
// max_backoff, then a uniform draw in [d/2, d]: "equal jitter"); after the last attempt
// every record of the batch goes to the error side output with the reason. Nothing is
// lost silently and nothing is emitted twice: a record leaves exactly once, downstream or
// to the side output. End of input is forwarded only after every outstanding batch ended.
// A record whose key cannot be encoded as JSON (nlohmann::json throws, e.g. a string key
// with invalid UTF-8) is never sent: it goes to the error side output at once with
// http_errc::bad_key, attempts 0, and the stream goes on.
//
// Retries and timeouts (docs/design.md "enrich: retries and timeouts"): every attempt of
// a batch carries the same `Idempotency-Key` header (IETF httpapi draft "The
// Idempotency-Key HTTP Header Field"; a value unique to the batch: 64 random bits of the
// operator instance and the batch's number), so a service that honours it applies a
// retried batch at most once. `timeout` bounds each attempt from the moment enrich hands
// it to the transport. An attempt that timed out after its request was sent counts in
// `timeouts`; the service may have applied it, so a batch that fails after such an
// attempt counts in `timeout_unknown` (and its error has outcome_unknown = true), apart
// from `failed_unsent`, batches no attempt of which reached the service. An attempt whose
// timeout passed while it waited unsent (its worker's loop was busy, or every connection
// was) is not a service timeout: code http_errc::expired_unsent, a reason that says how
// long it waited, counted in `expired_unsent` (not in `timeouts`), retried like the rest.
//
// Order: `ordered` emits records in input order per instance (a slow batch holds later
// ones back); `unordered` emits each batch as soon as its answer arrives. Progress sent
// downstream never passes the event time of a record still held.
//
// Threads: the stage runs on its worker; HTTP completions are posted to the worker's
// io_context (Beast runs there already; cpprestsdk's pool posts back), so key_fn,
// merge_fn and on_error run on the worker. Their exceptions stop the run ("fail" policy).
#pragma once

#include <nlohmann/json.hpp>

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <atomic>
#include <chrono>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "rill/core/error.hpp"
#include "rill/core/metrics.hpp"
#include "rill/core/runtime.hpp"
#include "rill/core/stage.hpp"
#include "rill/operators/http_client.hpp"
#include "rill/operators/stream.hpp"

namespace rill {

enum class enrich_order { ordered, unordered };

/// Counters of one enrich operator, summed over its worker instances (relaxed atomics:
/// written on workers, read from anywhere, exact once the run returned).
struct enrich_metrics {
  std::atomic<std::uint64_t> requests{0};       ///< HTTP attempts sent (retries included)
  std::atomic<std::uint64_t> records{0};        ///< records that went into requests (first attempt)
  std::atomic<std::uint64_t> enriched{0};       ///< records emitted downstream
  std::atomic<std::uint64_t> retries{0};        ///< attempts after the first
  std::atomic<std::uint64_t> failures{0};       ///< batches that failed after their retries
  /// Of `failures`: batches some attempt of which timed out after its request was sent.
  /// The service may have applied them (outcome unknown): reconcile through the
  /// Idempotency-Key, or retry higher up with the same key.
  std::atomic<std::uint64_t> timeout_unknown{0};
  /// Of `failures`: batches no attempt of which reached the service (refused connects,
  /// expired_unsent, timeouts while connecting): safe to send again.
  std::atomic<std::uint64_t> failed_unsent{0};
  /// Attempts that ended in http_errc::timeout: no complete answer within `timeout` once
  /// the request began (connect, write, read). Retried attempts included.
  std::atomic<std::uint64_t> timeouts{0};
  /// Attempts whose `timeout` passed while they waited unsent (http_errc::expired_unsent:
  /// the worker's loop was busy, or no connection was free). Not in `timeouts`.
  std::atomic<std::uint64_t> expired_unsent{0};
  std::atomic<std::uint64_t> failed_records{0}; ///< records sent to the error side output
  std::atomic<std::uint64_t> cache_hits{0};
  std::atomic<std::int64_t> in_flight{0};       ///< batches outstanding now (gauge)
  std::atomic<std::int64_t> peak_in_flight{0};  ///< per instance, the largest ever seen
  std::atomic<std::uint64_t> peak_connections{0};  ///< per instance, largest socket count
  /// Records per batch sent, and the latency of each HTTP attempt in nanoseconds
  /// (rill::histogram: quantiles within 3.1%). Written with record_shared (instances on
  /// several workers share one enrich_metrics).
  histogram batch_sizes, request_latency_ns;

  /// Quantile q (0..1) of attempt latencies, µs (request_latency_ns.quantile(q) / 1000).
  std::uint64_t latency_quantile_us(double q) const noexcept { return request_latency_ns.quantile(q) / 1000; }
};

/// What the error side output receives with each failed record.
struct enrich_error {
  std::error_code code{};  ///< rill::http_errc (http_category()) of the last attempt
  /// e.g. "HTTP 503", "timeout after 500 ms, request sent: outcome unknown (...)",
  /// "waited 812 ms unsent for its worker's loop (timeout 500 ms)", "answer has 4 values
  /// for 5 keys"
  std::string reason{};
  unsigned attempts = 0;   ///< attempts made (1 + retries used)
  /// Some attempt timed out after its request was sent: the service may have applied the
  /// batch (enrich_metrics::timeout_unknown). Its Idempotency-Key is `idempotency_key`.
  bool outcome_unknown = false;
  std::string idempotency_key{};  ///< the batch's key, as sent on every attempt ("" for bad_key)
};

struct enrich_options {
  std::string url{};                        ///< http://host:port/path (POST target)
  std::size_t batch_size = 100;             ///< keys per request, >= 1
  std::chrono::milliseconds linger{5};      ///< a partial batch goes out this long after its first key
  std::size_t max_in_flight = 4;            ///< outstanding requests per worker instance, >= 1
  /// Per attempt, > 0: from handing the request to the transport to the last byte of the
  /// answer (a wait for a connection or for the worker's loop included: expired_unsent).
  std::chrono::milliseconds timeout{1000};
  std::size_t retries = 2;                  ///< attempts after the first
  std::chrono::milliseconds backoff{10};    ///< first retry's backoff before jitter
  std::chrono::milliseconds max_backoff{1000};
  enrich_order order = enrich_order::ordered;
  std::size_t cache_entries = 0;            ///< 0 = no cache; else the bound (oldest evicted)
  std::chrono::milliseconds cache_ttl{60000};
  /// Makes each instance's HTTP client (required): rill::make_beast_transport (target
  /// rill::http) or rill::make_cpprest_transport (rill::cpprest) from
  /// <rill/connectors/http_transport.hpp>, or any http_transport of the caller's.
  http_transport_factory transport{};
  std::size_t max_connections = 0;          ///< 0 = max_in_flight
  /// Records held by one instance (waiting, in flight, or held for order) beyond which
  /// on_flush() returns false. 0 = (max_in_flight + 2) * batch_size.
  std::size_t max_buffered = 0;
  std::uint64_t jitter_seed = 42;
  std::string name = "enrich";              ///< stage name in run_report
  std::shared_ptr<enrich_metrics> metrics{};  ///< optional: read counters after the run

  /// Throws config_error with key "enrich.<option>".
  void validate() const {
    (void)http_endpoint::parse(url);
    if (!transport)
      throw config_error("enrich.transport",
                         "enrich.transport is empty: pass rill::make_beast_transport or another "
                         "http_transport_factory");
    if (batch_size == 0) throw config_error("enrich.batch_size", "enrich.batch_size must be >= 1");
    if (max_in_flight == 0)
      throw config_error("enrich.max_in_flight", "enrich.max_in_flight must be >= 1");
    if (timeout.count() <= 0) throw config_error("enrich.timeout", "enrich.timeout must be > 0");
    if (linger.count() < 0) throw config_error("enrich.linger", "enrich.linger must be >= 0");
    if (backoff.count() < 0 || max_backoff < backoff)
      throw config_error("enrich.backoff", "enrich.backoff must be in 0..max_backoff");
  }
};

namespace detail {

inline void atomic_max(std::atomic<std::int64_t>& a, std::int64_t v) noexcept {
  auto cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {}
}
inline void atomic_max(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
  auto cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {}
}

template <class T, class U, class KeyFn, class MergeFn, class ErrFn, class P = acked>
class enrich_stage final : public stage_in<T, P> {
 public:
  stage_in<U, P>* down = nullptr;

  enrich_stage(const enrich_options& o, std::shared_ptr<enrich_metrics> m, KeyFn k, MergeFn mf,
               ErrFn ef, std::size_t inputs, stage_counters* c, boost::asio::io_context& ioc)
      : o_(o), m_(std::move(m)), key_(std::move(k)), merge_(std::move(mf)), err_(std::move(ef)),
        c_(c), ioc_(ioc), linger_timer_(ioc), frontier_(inputs, event_time_min),
        inputs_left_(inputs), rng_(o.jitter_seed) {
    // 64 random bits per instance: keys of instances, workers and runs do not collide.
    std::random_device rd;
    const std::uint64_t id = (std::uint64_t(rd()) << 32) ^ rd();
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(id));
    key_prefix_ = std::string(hex) + "-";
    transport_ = o_.transport(
        ioc, {.endpoint = http_endpoint::parse(o_.url),
         .max_connections = o_.max_connections ? o_.max_connections : o_.max_in_flight});
    max_buffered_ = o_.max_buffered ? o_.max_buffered : (o_.max_in_flight + 2) * o_.batch_size;
  }

  void on_record(std::size_t, record<T, P>&& r) override {
    c_->add(c_->in);
    std::string k;
    std::string bad;
    try {
      k = nlohmann::json(key_(static_cast<const T&>(r.value))).dump();
    } catch (const nlohmann::json::exception& e) {  // e.g. invalid UTF-8 in a string key
      bad = e.what();
    }
    const std::uint64_t seq = base_ + slots_.size();
    pending_times_.insert(r.time);
    slots_.push_back(slot{std::move(r), false});
    if (!bad.empty()) {  // never sent: straight to the error output, the rest goes on
      m_->failed_records.fetch_add(1, std::memory_order_relaxed);
      fail(seq, {make_error_code(http_errc::bad_key), "key cannot be encoded as JSON: " + bad, 0, false, {}});
      drain();
      return;
    }
    if (o_.cache_entries) {
      auto it = cache_.find(k);
      if (it != cache_.end()) {
        if (std::chrono::steady_clock::now() < it->second.expires) {
          m_->cache_hits.fetch_add(1, std::memory_order_relaxed);
          complete(seq, nlohmann::json(it->second.value));
          drain();
          return;
        }
        cache_order_.erase(it->second.pos);
        cache_.erase(it);
      }
    }
    open_.seqs.push_back(seq);
    open_.keys.push_back(std::move(k));
    if (open_.seqs.size() == 1) arm_linger();
    if (open_.seqs.size() >= o_.batch_size) close_batch();
  }

  void on_progress(std::size_t in, event_time t) override {
    if (t > frontier_[in]) frontier_[in] = t;
    advance();
  }

  void on_end(std::size_t in) override {
    frontier_[in] = event_time_max;
    if (--inputs_left_ > 0) return advance();
    if (!open_.seqs.empty()) close_batch();
    ended_ = true;
    maybe_finish();
  }

  bool on_flush() override {
    const bool down_ok = down->on_flush();
    return down_ok && ready_.empty() && slots_.size() < max_buffered_;
  }

 private:
  struct slot {
    record<T, P> rec;
    bool done;
  };
  struct batch {
    std::vector<std::uint64_t> seqs;
    std::vector<std::string> keys;
    std::string body;
    std::string idempotency_key;  ///< the same on every attempt
    unsigned attempts = 0;
    bool sent = false;            ///< some attempt reached (or may have reached) the service
    bool outcome_unknown = false; ///< some attempt timed out after it was sent
    std::unique_ptr<boost::asio::steady_timer> backoff;
  };
  struct cached {
    nlohmann::json value;
    steady_time expires;
    std::list<std::string>::iterator pos;
  };

  void arm_linger() {
    const auto gen = ++linger_gen_;
    linger_timer_.expires_after(o_.linger);
    linger_timer_.async_wait([this, gen](const boost::system::error_code& ec) {
      if (ec || gen != linger_gen_ || open_.seqs.empty()) return;
      // No free slot: keep filling this batch and send it when a slot frees (a partial
      // batch waiting for a slot would waste the slot when it finally goes out).
      if (in_flight_ >= o_.max_in_flight) {
        linger_due_ = true;
        return;
      }
      close_batch();
    });
  }

  void close_batch() {
    linger_due_ = false;
    ++linger_gen_;
    linger_timer_.cancel();
    auto b = std::make_shared<batch>(std::move(open_));
    open_ = batch{};
    std::string& body = b->body;
    body.reserve(2 + b->keys.size() * (b->keys.empty() ? 0 : b->keys[0].size() + 1));
    body += '[';
    for (std::size_t i = 0; i < b->keys.size(); ++i) {
      if (i) body += ',';
      body += b->keys[i];
    }
    body += ']';
    b->idempotency_key = key_prefix_ + std::to_string(batches_++);
    m_->records.fetch_add(b->seqs.size(), std::memory_order_relaxed);
    m_->batch_sizes.record_shared(b->seqs.size());
    ready_.push_back(std::move(b));
    pump();
  }

  void pump() {
    while (!ready_.empty() && in_flight_ < o_.max_in_flight) {
      auto b = std::move(ready_.front());
      ready_.pop_front();
      ++in_flight_;
      detail::atomic_max(m_->peak_in_flight, std::int64_t(in_flight_));
      m_->in_flight.fetch_add(1, std::memory_order_relaxed);
      send(std::move(b));
    }
  }

  void send(std::shared_ptr<batch> b) {
    ++b->attempts;
    m_->requests.fetch_add(1, std::memory_order_relaxed);
    const auto t0 = std::chrono::steady_clock::now();
    transport_->post({.body = b->body /* kept for retries */, .timeout = o_.timeout,
                      .idempotency_key = b->idempotency_key},
                     [this, b, t0](http_result&& r) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - t0).count();
      m_->request_latency_ns.record_shared(std::uint64_t(ns));
      detail::atomic_max(m_->peak_connections, std::uint64_t(transport_->peak_connections()));
      on_answer(b, std::move(r));
    });
  }

  void on_answer(const std::shared_ptr<batch>& b, http_result&& r) {
    std::error_code ec = r.ec;
    std::string reason;
    nlohmann::json values;
    if (r.sent) b->sent = true;
    if (ec == http_errc::timeout) {
      m_->timeouts.fetch_add(1, std::memory_order_relaxed);
      if (r.sent) b->outcome_unknown = true;
      reason = "timeout after " + std::to_string(o_.timeout.count()) + " ms, " +
               (r.sent ? "request sent: outcome unknown" : "before the request was sent") + " (" + r.detail + ")";
    } else if (ec == http_errc::expired_unsent) {
      m_->expired_unsent.fetch_add(1, std::memory_order_relaxed);
      reason = r.detail;  // "waited N ms unsent ... (timeout T ms)"
    } else if (ec) {
      reason = ec.message() + " (" + r.detail + ")";
    } else if (r.status < 200 || r.status > 299) {
      ec = make_error_code(http_errc::http_status);
      reason = "HTTP " + std::to_string(r.status);
    } else {
      values = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
      if (values.is_discarded() || !values.is_array()) {
        ec = make_error_code(http_errc::malformed_response);
        reason = "malformed answer: not a JSON array (" + std::to_string(r.body.size()) + " bytes)";
      } else if (values.size() != b->seqs.size()) {
        ec = make_error_code(http_errc::wrong_length);
        reason = "answer has " + std::to_string(values.size()) + " values for " +
                 std::to_string(b->seqs.size()) + " keys";
      }
    }
    if (ec && b->attempts <= o_.retries) {
      m_->retries.fetch_add(1, std::memory_order_relaxed);
      auto d = o_.backoff * (std::int64_t{1} << std::min<unsigned>(b->attempts - 1, 30));
      if (d > o_.max_backoff) d = o_.max_backoff;
      std::uniform_int_distribution<std::int64_t> jitter(d.count() / 2, d.count());
      b->backoff = std::make_unique<boost::asio::steady_timer>(
          ioc_, std::chrono::milliseconds{jitter(rng_)});
      b->backoff->async_wait([this, b](const boost::system::error_code& e) {
        if (!e) send(b);
      });
      return;
    }
    // The slot is free before any record leaves (the gauge reads 0 once all ended).
    --in_flight_;
    m_->in_flight.fetch_sub(1, std::memory_order_relaxed);
    if (ec) {
      m_->failures.fetch_add(1, std::memory_order_relaxed);
      if (b->outcome_unknown) m_->timeout_unknown.fetch_add(1, std::memory_order_relaxed);
      else if (!b->sent) m_->failed_unsent.fetch_add(1, std::memory_order_relaxed);
      m_->failed_records.fetch_add(b->seqs.size(), std::memory_order_relaxed);
      const enrich_error err{ec, reason, b->attempts, b->outcome_unknown, b->idempotency_key};
      for (auto seq : b->seqs) fail(seq, err);
    } else {
      for (std::size_t i = 0; i < b->seqs.size(); ++i) {
        if (o_.cache_entries) remember(b->keys[i], values[i]);
        complete(b->seqs[i], std::move(values[i]));
      }
    }
    pump();
    if (linger_due_ && !open_.seqs.empty() && in_flight_ < o_.max_in_flight) close_batch();
    drain();
    maybe_finish();
  }

  void remember(const std::string& k, const nlohmann::json& v) {
    const auto exp = std::chrono::steady_clock::now() + o_.cache_ttl;
    auto it = cache_.find(k);
    if (it != cache_.end()) {
      it->second.value = v;
      it->second.expires = exp;
      return;
    }
    if (cache_.size() >= o_.cache_entries) {
      cache_.erase(cache_order_.front());
      cache_order_.pop_front();
    }
    cache_order_.push_back(k);
    cache_.emplace(k, cached{v, exp, std::prev(cache_order_.end())});
  }

  /// Slot `seq` got its value: emit now (unordered) or when it reaches the front.
  void complete(std::uint64_t seq, nlohmann::json&& v) {
    slot& s = slots_[seq - base_];
    s.done = true;
    if (o_.order == enrich_order::ordered && seq != base_) {
      held_.emplace(seq, std::move(v));
      return;
    }
    emit(s, std::move(v));
  }

  void emit(slot& s, nlohmann::json&& v) {
    const event_time t = s.rec.time;
    // carries the input's position and ack (record.hpp)
    record<U, P> out = make_record<P>(U(merge_(std::move(s.rec.value), std::move(v))), t, position_of(s.rec),
                                      take_ack(s.rec));
    erase_time(t);
    c_->add(c_->out);
    m_->enriched.fetch_add(1, std::memory_order_relaxed);
    s.rec.time = event_time_min;  // marks "already left"
    down->on_record(0, std::move(out));
  }

  void fail(std::uint64_t seq, const enrich_error& err) {
    slot& s = slots_[seq - base_];
    s.done = true;
    erase_time(s.rec.time);
    c_->add(c_->errors);
    if constexpr (!std::is_same_v<ErrFn, std::nullptr_t>) call_widened(err_, std::move(s.rec), err);
    s.rec.time = event_time_min;
  }

  void erase_time(event_time t) {
    auto it = pending_times_.find(t);
    if (it != pending_times_.end()) pending_times_.erase(it);
  }

  /// Pops finished slots from the front; in ordered mode emits held values in order.
  void drain() {
    while (!slots_.empty() && slots_.front().done) {
      auto h = held_.find(base_);
      if (h != held_.end()) {
        emit(slots_.front(), std::move(h->second));
        held_.erase(h);
      }
      slots_.pop_front();
      ++base_;
    }
    advance();
  }

  void advance() {
    event_time f = *std::min_element(frontier_.begin(), frontier_.end());
    if (!pending_times_.empty() && *pending_times_.begin() < f) f = *pending_times_.begin();
    if (f > sent_ && f != event_time_max) {
      sent_ = f;
      down->on_progress(0, f);
    }
  }

  void maybe_finish() {
    if (!ended_ || finished_ || in_flight_ || !ready_.empty() || !slots_.empty()) return;
    finished_ = true;
    ++linger_gen_;
    linger_timer_.cancel();
    down->on_end(0);
  }

  enrich_options o_;
  std::shared_ptr<enrich_metrics> m_;
  KeyFn key_;
  MergeFn merge_;
  ErrFn err_;
  stage_counters* c_;
  boost::asio::io_context& ioc_;
  std::unique_ptr<http_transport> transport_;
  boost::asio::steady_timer linger_timer_;
  std::uint64_t linger_gen_ = 0;
  bool linger_due_ = false;
  std::deque<slot> slots_;
  std::uint64_t base_ = 0;
  std::unordered_map<std::uint64_t, nlohmann::json> held_;
  std::multiset<event_time> pending_times_;
  batch open_;
  std::deque<std::shared_ptr<batch>> ready_;
  std::size_t in_flight_ = 0, max_buffered_ = 0;
  std::vector<event_time> frontier_;
  event_time sent_ = event_time_min;
  std::size_t inputs_left_;
  bool ended_ = false, finished_ = false;
  std::unordered_map<std::string, cached> cache_;
  std::list<std::string> cache_order_;
  std::mt19937_64 rng_;
  std::string key_prefix_;     ///< idempotency keys: key_prefix_ + batch number
  std::uint64_t batches_ = 0;  ///< batches closed by this instance
};

}  // namespace detail

/// The enrich operator (see the top of this header for the rule).
///   key_fn:   K f(const T&), nlohmann::json constructible from K (string, number, ...)
///   merge_fn: U f(T&&, nlohmann::json&& value)  (value is null for unknown keys)
///   on_error: void f(record<T>&&, const enrich_error&)  or nullptr (count only)
/// Returns stream<U>. Throws config_error (key "enrich.*" or "http.url") now for invalid
/// options, and from runtime::run when the endpoint cannot be resolved.
template <class T, class P, class KeyFn, class MergeFn, class ErrFn = std::nullptr_t>
auto enrich(stream<T, P>&& s, enrich_options opts, KeyFn key_fn, MergeFn merge_fn,
            ErrFn on_error = nullptr) {
  static_assert(std::is_invocable_v<KeyFn&, const T&>,
                "rill::enrich: key_fn must be K f(const T&) with nlohmann::json constructible from K");
  static_assert(std::is_invocable_v<MergeFn&, T&&, nlohmann::json&&>,
                "rill::enrich: merge_fn must be U f(T&&, nlohmann::json&&)");
  static_assert(std::is_same_v<ErrFn, std::nullptr_t> ||
                    detail::invocable_widened_v<ErrFn, record<T, P>, const enrich_error&>,
                "rill::enrich: on_error must be void f(rill::record<T>&&, const rill::enrich_error&) "
                "or nullptr");
  using U = std::remove_cvref_t<std::invoke_result_t<MergeFn&, T&&, nlohmann::json&&>>;
  opts.validate();
  if (!opts.metrics) opts.metrics = std::make_shared<enrich_metrics>();
  return stream<U, P>([prev = s.attach(), opts, key_fn, merge_fn, on_error](
                          job_builder& b, stage_factory<U, P> down) {
    const auto idx = b.metrics().add_stage(opts.name);
    // On the metrics endpoint: request latency (summary) and batches in flight.
    const auto m = opts.metrics;
    const metric_labels op{{"operator", b.metrics().label(idx)}};
    b.metrics().add_summary_fn("rill_enrich_request_latency_seconds", "HTTP attempt latency of an enrich operator",
                               op, [m] { return m->request_latency_ns; }, 1e-9);
    b.metrics().add_gauge_fn("rill_enrich_in_flight_batches", "Requests outstanding of an enrich operator", op,
                             [m] { return double(m->in_flight.load(std::memory_order_relaxed)); });
    prev(b, [=](build_context& ctx) -> stage_in<T, P>* {
      using S = detail::enrich_stage<T, U, KeyFn, MergeFn, ErrFn, P>;
      auto* st = ctx.make<S>(opts, opts.metrics, key_fn, merge_fn, on_error, ctx.inputs,
                             &ctx.metrics->at(idx, ctx.worker_id), ctx.w->context());
      auto sub = ctx;
      sub.inputs = 1;
      st->down = down(sub);
      return st;
    });
  });
}

}  // namespace rill

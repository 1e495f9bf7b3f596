#include "rill/core/runtime.hpp"

#include <pthread.h>
#include <sched.h>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <future>

#include "scrape_state.hpp"
#include "rill/core/error.hpp"

namespace rill {

namespace {
thread_local worker* current_worker = nullptr;
}

worker* this_worker() noexcept { return current_worker; }

void worker::start() {
  guard_.emplace(ctx_.get_executor());
  thread_ = std::thread([this] {
    current_worker = this;
    if (cpu_ >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu_, &set);
      (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
    }
    for (;;) {
      try {
        ctx_.run();
        break;
      } catch (...) {
        {
          std::lock_guard lk(mu_);
          if (!error_) error_ = std::current_exception();
        }
        if (on_error_) on_error_();
      }
    }
    current_worker = nullptr;
  });
}

void worker::end_turn(std::int64_t start_ns) noexcept {
  const std::int64_t d = steady_ns() - start_ns;
  auto add = [](std::atomic<std::uint64_t>& c, std::uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  };
  add(stats_.busy_ns, std::uint64_t(d));
  add(stats_.turns, 1);
  stats_.turn_start_ns.store(0, std::memory_order_relaxed);
  if (stall_threshold_.count() <= 0 || d < stall_threshold_.count()) return;
  add(stats_.stalls, 1);
  add(stats_.stall_ns, std::uint64_t(d));
  // The operator the watchdog saw while this turn was over the threshold; else the one
  // marked now (a turn the watchdog did not sample in time).
  const std::string* op = stats_.sampled_turn.load(std::memory_order_acquire) == start_ns
                              ? stats_.sampled_op.load(std::memory_order_relaxed)
                              : stats_.op.load(std::memory_order_relaxed);
  stall_event e{id_, op ? *op : std::string{}, std::chrono::nanoseconds{d}};
  const long long threshold_ms = std::chrono::duration_cast<std::chrono::milliseconds>(stall_threshold_).count();
  std::fprintf(stderr, "rill: stall: worker %zu ran %s%s%s for %.3f s in one loop turn (threshold %lld ms)\n", id_,
               op ? "operator '" : "runtime work outside any operator (an exchange drain, a flush, a timer)",
               e.op.c_str(), op ? "'" : "", double(d) / 1e9, threshold_ms);
  try {
    std::lock_guard lk(mu_);
    stall_events_.push_back(std::move(e));
  } catch (...) {  // out of memory: the stall is still counted and printed
  }
}

void worker::stop_and_join() {
  guard_.reset();
  ctx_.stop();
  if (thread_.joinable()) thread_.join();
}

job_builder::job_builder(runtime& rt)
    : rt_(rt), metrics_(std::make_shared<job_metrics>(rt.worker_count())),
      tickers_(rt.worker_count()) {}

std::size_t job_builder::workers() const noexcept { return rt_.worker_count(); }

build_context job_builder::context(std::size_t worker_id, std::size_t inputs) {
  build_context c;
  c.rt = &rt_;
  c.w = &rt_.worker_at(worker_id);
  c.worker_id = worker_id;
  c.workers = workers();
  c.inputs = inputs;
  c.metrics = metrics_.get();
  c.keep_alive = &keep_alive_;
  c.add_ticker = [this, worker_id](std::function<void(steady_time)> f) {
    tickers_[worker_id].push_back(std::move(f));
  };
  c.sink_done = [r = &rt_] { r->sink_finished(); };
  c.drain_done = [r = &rt_] { r->drain_finished(); };
  return c;
}

void job_builder::on_start(std::size_t worker_id, std::function<void()> fn) {
  starts_.emplace_back(worker_id, std::move(fn));
}

/// The control thread's loop; see the banner of runtime.hpp.
struct runtime::control {
  boost::asio::io_context ctx{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{ctx.get_executor()};
  std::optional<boost::asio::signal_set> signals;
  std::thread thread;
  control() { thread = std::thread([this] { ctx.run(); }); }
  ~control() {
    ctx.stop();  // the pending signal wait is destroyed with `signals`, after the join
    thread.join();
  }
};

namespace {

/// A caught signal is one request_stop(); the set stays armed until the runtime ends. A
/// signal that finds the stop still pending (a drain that takes long) takes the signal's
/// default action: the process ends at once, as without handle_signals.
void arm(boost::asio::signal_set& s, runtime& rt) {
  s.async_wait([&s, &rt](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (rt.stop_requested()) {
      std::fprintf(stderr, "rill: %s again while stopping: exiting at once\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      std::fflush(stderr);
      std::signal(sig, SIG_DFL);
      std::raise(sig);
      return;
    }
    rt.request_stop();
    arm(s, rt);
  });
}

/// Stop-when-idle and progress timers of one run, on the control loop. `active` is
/// read and written only there: once run() has cleared it, no callback runs again.
struct run_timers : std::enable_shared_from_this<run_timers> {
  run_timers(boost::asio::io_context& ctx, runtime& r, const run_options& o,
             std::shared_ptr<job_metrics> m, steady_time start)
      : rt(r), opts(o), metrics(std::move(m)), t0(start), idle_timer(ctx), progress_timer(ctx), watch_timer(ctx),
        release_timer(ctx),
        idle(o.stop_when_idle,
             o.first_record_grace.value_or(idle_stop::default_grace(o.stop_when_idle)), start) {}

  void start() {
    if (opts.stop_when_idle.count() > 0) sample_later();
    if (opts.progress) progress_later();
    if (threshold.count() > 0) watch_later();
    if (release_interval.count() > 0) release_later();
  }
  /// The memory release (memory_release.hpp): when the allocator keeps more than
  /// `release_slack` free bytes and the resident set beyond the bytes in use grew by
  /// half of it since the last release, the free pages go back to the system. (The
  /// second condition: a page given back stays in glibc's free count, so free bytes
  /// alone would release again on every check.)
  void release_later() {
    release_timer.expires_after(release_interval);
    release_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || !self->active) return;
      const heap_usage h = read_heap_usage();
      const std::size_t rss = resident_bytes();
      const std::size_t excess = rss > h.in_use_bytes ? rss - h.in_use_bytes : 0;
      if (h.supported && h.free_bytes > self->release_slack &&
          (self->released.load(std::memory_order_relaxed) == 0 ||
           excess > self->excess_after + self->release_slack / 2)) {
        const std::size_t freed = release_free_heap();
        self->released.fetch_add(1, std::memory_order_relaxed);
        self->released_bytes.fetch_add(freed, std::memory_order_relaxed);
        self->totals->releases.fetch_add(1, std::memory_order_relaxed);
        self->totals->released_bytes.fetch_add(freed, std::memory_order_relaxed);
        self->excess_after = excess > freed ? excess - freed : 0;
      }
      self->release_later();
    });
  }
  void sample_later() {
    idle_timer.expires_after(opts.idle_sample);
    idle_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || !self->active) return;
      const auto a = self->opts.activity ? self->opts.activity() : source_records(self->metrics->totals());
      if (self->idle.sample(a, std::chrono::steady_clock::now())) self->rt.request_stop();
      if (!self->idle.fired()) self->sample_later();
    });
  }
  void progress_later() {
    progress_timer.expires_after(opts.progress_interval);
    progress_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || !self->active) return;
      const auto now = std::chrono::steady_clock::now();
      self->opts.progress(run_progress{self->metrics->totals(),
                                       std::chrono::duration<double>(now - self->t0).count(),
                                       self->rt.stop_requested()});
      self->progress_later();
    });
  }
  /// The stall watchdog: samples which operator runs in a turn that is over the
  /// threshold, for worker::end_turn to name it (one sample per turn).
  void watch_later() {
    watch_timer.expires_after(watch_period);
    watch_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || !self->active) return;
      const auto now = steady_ns();
      for (std::size_t i = 0; i < self->rt.worker_count(); ++i) {
        auto& st = self->rt.worker_at(i).stats();
        const auto s = st.turn_start_ns.load(std::memory_order_relaxed);
        if (s == 0 || now - s < self->threshold.count()) continue;
        if (st.sampled_turn.load(std::memory_order_relaxed) == s) continue;
        st.sampled_op.store(st.op.load(std::memory_order_relaxed), std::memory_order_relaxed);
        st.sampled_turn.store(s, std::memory_order_release);
      }
      self->watch_later();
    });
  }
  void cancel() {
    active = false;
    idle_timer.cancel();
    progress_timer.cancel();
    watch_timer.cancel();
    release_timer.cancel();
  }

  runtime& rt;
  const run_options& opts;  // outlives the timers' activity: run() returns after cancel()
  std::shared_ptr<job_metrics> metrics;
  steady_time t0;
  boost::asio::steady_timer idle_timer, progress_timer, watch_timer, release_timer;
  std::chrono::nanoseconds threshold{0}, watch_period{std::chrono::milliseconds{10}};
  std::chrono::milliseconds release_interval{0};
  std::size_t release_slack = 0;
  std::atomic<std::uint64_t> released{0}, released_bytes{0};  // this run
  std::shared_ptr<memory_release_totals> totals;  // the runtime's, over its life
  std::size_t excess_after = 0;  // resident minus in use, after the last release
  idle_stop idle;
  bool active = true;
};

}  // namespace

std::unique_ptr<worker> runtime::make_worker(std::size_t i) const {
  auto w = std::make_unique<worker>(i, placement_[i].node, opts_.pin ? placement_[i].cpu : -1);
  w->stall_threshold_ = opts_.stall_threshold;
  w->timed_ = opts_.stall_threshold.count() > 0 || opts_.metrics_port != 0;
  return w;
}

runtime::control& runtime::control_loop() {
  if (!control_) control_ = std::make_unique<control>();
  return *control_;
}

runtime::runtime(runtime_options opts) : opts_(std::move(opts)) {
  topo_ = opts_.topology.empty() ? topology::discover() : topology::synthetic(opts_.topology);
  const std::size_t n = opts_.workers == 0 ? topo_.core_count() : opts_.workers;
  if (n == 0 || n > max_workers) {
    throw config_error("runtime.workers",
                       "runtime.workers must be in 1.." + std::to_string(max_workers) + " (rill::max_workers), got " +
                           (opts_.workers == 0 ? "0 (one per core: " + std::to_string(n) + " cores)"
                                               : std::to_string(opts_.workers)));
  }
  placement_ = topo_.place(n);
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    const std::size_t cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? std::size_t(CPU_COUNT(&set))
                                                                          : std::thread::hardware_concurrency();
    workers_per_cpu_ = cpus == 0 ? n : (n + cpus - 1) / cpus;
  }
  for (std::size_t i = 0; i < n; ++i) workers_.push_back(make_worker(i));
  metrics_ = std::make_shared<metrics_registry>(n);
  scrape_ = std::make_unique<scrape_state>();
  if (opts_.metrics_port != 0) endpoint_ = std::make_unique<prometheus_server>(opts_.metrics_address, opts_.metrics_port,
                                                    [this] { return prometheus_text(); });
  if (opts_.handle_signals) {
    // Installed here, not in run(): a signal between construction and run() is a
    // graceful stop of the next run, not the default disposition (terminate).
    auto& c = control_loop();
    c.signals.emplace(c.ctx, SIGINT, SIGTERM);
    arm(*c.signals, *this);
  }
}

runtime::~runtime() {
  endpoint_.reset();
  control_.reset();
  for (auto& w : workers_) w->stop_and_join();
}

void runtime::request_stop() noexcept { stop_.store(true, std::memory_order_release); }

void runtime::report_error(std::string message) {
  std::lock_guard lk(mu_);
  errors_.push_back(std::move(message));
}

// Sequentially consistent: when the last sink and the last drain end at once on two
// threads, at least one of them sees the other's 0 (finish() is idempotent).
void runtime::sink_finished() {
  if (sinks_left_.fetch_sub(1) == 1 && drains_left_.load() == 0) maybe_all_done();
}
void runtime::drain_finished() {
  if (drains_left_.fetch_sub(1) == 1 && sinks_left_.load() == 0) maybe_all_done();
}
void runtime::maybe_all_done() {
  std::function<void()> f;
  {
    std::lock_guard lk(mu_);
    f = on_all_done_;
  }
  if (f) f();
}

run_report runtime::run(const job& j, const run_options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(mu_);
    errors_.clear();
  }
  // Fresh workers for every run: a stopped io_context cannot be reused safely. Under mu_:
  // the metrics endpoint reads the workers' stats.
  {
    std::lock_guard lk(mu_);
    for (std::size_t i = 0; i < workers_.size(); ++i) workers_[i] = make_worker(i);
  }

  job_builder b{*this};
  {
    std::lock_guard lk(mu_);
    running_ = b.metrics_;
    run_start_ns_ = steady_ns();
  }
  j.build(b);
  for (auto it = b.finalizers_.rbegin(); it != b.finalizers_.rend(); ++it) (*it)();

  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;
  auto finish = [&] {
    std::lock_guard lk(done_mu);
    done = true;
    done_cv.notify_all();
  };
  sinks_left_.store(b.sinks_);
  drains_left_.store(b.drains_);
  {
    std::lock_guard lk(mu_);
    on_all_done_ = finish;
  }
  for (auto& w : workers_) w->on_error_ = [&, this] { request_stop(); finish(); };

  // Periodic tickers (idle-input detection) on each worker that has any.
  std::vector<std::shared_ptr<boost::asio::steady_timer>> timers;
  for (std::size_t wi = 0; wi < workers_.size(); ++wi) {
    if (b.tickers_[wi].empty()) continue;
    auto t = std::make_shared<boost::asio::steady_timer>(workers_[wi]->context());
    timers.push_back(t);
    auto fns = &b.tickers_[wi];
    auto period = opts_.tick;
    auto tick = std::make_shared<std::function<void()>>();
    *tick = [t, fns, period, tick_w = std::weak_ptr<std::function<void()>>(tick)] {
      t->expires_after(period);
      t->async_wait([t, fns, tick_w](const boost::system::error_code& ec) {
        if (ec) return;
        const auto now = std::chrono::steady_clock::now();
        for (auto& f : *fns) f(now);
        if (auto self = tick_w.lock()) (*self)();
      });
    };
    b.keep_alive_.push_back(tick);
    boost::asio::post(workers_[wi]->context(), [tick] { (*tick)(); });
  }

  for (auto& [wid, fn] : b.starts_) boost::asio::post(workers_[wid]->context(), fn);

  // Stop-when-idle and progress run on the control loop.
  std::shared_ptr<run_timers> timers_ctl;
  if (o.stop_when_idle.count() > 0 || o.progress || opts_.stall_threshold.count() > 0 ||
      opts_.memory_release_interval.count() > 0) {
    auto& c = control_loop();
    timers_ctl = std::make_shared<run_timers>(c.ctx, *this, o, b.metrics_, t0);
    timers_ctl->threshold = opts_.stall_threshold;
    timers_ctl->watch_period = std::clamp<std::chrono::nanoseconds>(opts_.stall_threshold / 4,
                                                                   std::chrono::milliseconds{1},
                                                                   std::chrono::milliseconds{25});
    timers_ctl->release_interval = opts_.memory_release_interval;
    timers_ctl->release_slack = opts_.memory_release_slack;
    timers_ctl->totals = releases_;
    boost::asio::post(c.ctx, [t = timers_ctl] { t->start(); });
  }

  if (b.sinks_ == 0) finish();
  for (auto& w : workers_) w->start();
  {
    std::unique_lock lk(done_mu);
    done_cv.wait(lk, [&] { return done; });
  }
  if (timers_ctl) {
    // After this handler ran on the control loop no timer callback runs again.
    std::promise<void> cancelled;
    boost::asio::post(control_->ctx, [&] {
      timers_ctl->cancel();
      cancelled.set_value();
    });
    cancelled.get_future().wait();
  }
  for (auto& w : workers_) w->stop_and_join();
  {
    std::lock_guard lk(mu_);
    on_all_done_ = nullptr;
  }

  run_report rep;
  rep.stages = b.metrics_->totals();
  {
    std::lock_guard lk(mu_);
    rep.errors = errors_;
  }
  for (auto& w : workers_) {
    auto st = w->stalls();
    rep.stalls.insert(rep.stalls.end(), st.begin(), st.end());
  }
  if (timers_ctl) {
    rep.memory_releases = timers_ctl->released.load(std::memory_order_relaxed);
    rep.memory_released_bytes = timers_ctl->released_bytes.load(std::memory_order_relaxed);
  }
  rep.metrics = metrics_;
  rep.stopped = stop_requested();
  stop_.store(false, std::memory_order_release);  // this run consumed the request
  rep.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& w : workers_) {
    if (auto e = w->error()) std::rethrow_exception(e);
  }
  return rep;
}

}  // namespace rill

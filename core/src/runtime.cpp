#include "rill/core/runtime.hpp"

#include <pthread.h>
#include <sched.h>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <condition_variable>

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
  return c;
}

void job_builder::on_start(std::size_t worker_id, std::function<void()> fn) {
  starts_.emplace_back(worker_id, std::move(fn));
}

runtime::runtime(runtime_options opts) : opts_(std::move(opts)) {
  topo_ = opts_.topology.empty() ? topology::discover() : topology::synthetic(opts_.topology);
  const std::size_t n = opts_.workers == 0 ? topo_.core_count() : opts_.workers;
  if (n == 0 || n > 4096) {
    throw config_error("runtime.workers", "runtime.workers must be in 1..4096, got " +
                                              std::to_string(opts_.workers));
  }
  placement_ = topo_.place(n);
  for (std::size_t i = 0; i < n; ++i) {
    workers_.push_back(std::make_unique<worker>(i, placement_[i].node,
                                                opts_.pin ? placement_[i].cpu : -1));
  }
}

runtime::~runtime() {
  for (auto& w : workers_) w->stop_and_join();
}

void runtime::request_stop() noexcept { stop_.store(true, std::memory_order_release); }

void runtime::report_error(std::string message) {
  std::lock_guard lk(mu_);
  errors_.push_back(std::move(message));
}

void runtime::sink_finished() {
  if (sinks_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::function<void()> f;
    {
      std::lock_guard lk(mu_);
      f = on_all_done_;
    }
    if (f) f();
  }
}

run_report runtime::run(const job& j) {
  const auto t0 = std::chrono::steady_clock::now();
  stop_.store(false);
  {
    std::lock_guard lk(mu_);
    errors_.clear();
  }
  // Fresh workers for every run: a stopped io_context cannot be reused safely.
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    workers_[i] = std::make_unique<worker>(i, placement_[i].node,
                                           opts_.pin ? placement_[i].cpu : -1);
  }

  job_builder b{*this};
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

  // Signals are caught on a small control loop of their own.
  boost::asio::io_context control{1};
  std::optional<boost::asio::signal_set> signals;
  std::thread control_thread;
  if (opts_.handle_signals) {
    signals.emplace(control, SIGINT, SIGTERM);
    signals->async_wait([this](const boost::system::error_code& ec, int) {
      if (!ec) request_stop();
    });
    control_thread = std::thread([&] { control.run(); });
  }

  if (b.sinks_ == 0) finish();
  for (auto& w : workers_) w->start();
  {
    std::unique_lock lk(done_mu);
    done_cv.wait(lk, [&] { return done; });
  }
  for (auto& w : workers_) w->stop_and_join();
  if (signals) {
    signals->cancel();
    control.stop();
    control_thread.join();
  }
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
  rep.stopped = stop_requested();
  rep.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& w : workers_) {
    if (auto e = w->error()) std::rethrow_exception(e);
  }
  return rep;
}

}  // namespace rill

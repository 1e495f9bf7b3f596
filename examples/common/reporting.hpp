// reporting.hpp — what the example programs print while they run: a rate over the last
// progress interval, and a digest of repeated errors.
//
//   rill_examples::interval_rate rate{0, steady::now()};
//   // every progress tick:
//   std::cerr << "records_per_s=" << rate.sample(delivered.load(), steady::now()) << '\n';
//
//   rill_examples::error_digest errors{"enrichment", std::cerr};
//   errors.add("connection refused", steady::now());   // any thread, once per failed record
//   errors.finish();                                   // after the run: the last count
//
// Thread safety: interval_rate — distinct objects: safe; shared objects: unsafe (one
// progress thread samples it). error_digest — add() and finish() from any thread (one
// mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>

namespace rill_examples {

using steady = std::chrono::steady_clock;

/// The rate of a monotonically growing counter over the interval since the previous
/// sample (or construction): what a progress line should show, not the average since
/// the start. Fractional: 3 records in 4 s is 0.75/s, not 0.
class interval_rate {
 public:
  interval_rate(std::uint64_t count, steady::time_point t) : count_(count), at_(t) {}
  /// Counts per second over (previous sample, now]; 0 for an empty interval (now not
  /// after the previous sample: the sample is not taken). A counter that went down
  /// (never expected) counts as 0.
  double sample(std::uint64_t count, steady::time_point now) {
    if (now <= at_) return 0.0;
    const double seconds = std::chrono::duration<double>(now - at_).count();
    const double rate = count >= count_ ? double(count - count_) / seconds : 0.0;
    count_ = count;
    at_ = now;
    return rate;
  }

 private:
  std::uint64_t count_;
  steady::time_point at_;
};

/// Reports repeated errors without one line per failure: the first in full, then at
/// most one line per `every` with the count since the last line and the latest reason,
/// and at finish() the count not reported yet. total() is exact.
///   enrichment: record 0: connection refused
///   enrichment: 4312 more failed in the last 1.0 s (latest: record 4312: connection refused); 4313
///   in total
class error_digest {
 public:
  error_digest(std::string program, std::ostream& out,
               steady::duration every = std::chrono::seconds{1})
      : program_(std::move(program)), out_(out), every_(every) {}

  /// One failure (`what`: the full message, e.g. "record 17: connection refused").
  void add(const std::string& what, steady::time_point now) {
    std::lock_guard lk(mu_);
    ++total_;
    if (total_ == 1) {
      out_ << program_ << ": " << what << '\n';
      line_at_ = now;
      return;
    }
    ++pending_;
    latest_ = what;
    if (now - line_at_ >= every_) flush_locked(now);
  }
  /// Prints the failures not reported yet (if any). Call after the run.
  void finish(steady::time_point now = steady::now()) {
    std::lock_guard lk(mu_);
    if (pending_) flush_locked(now);
  }
  std::uint64_t total() const {
    std::lock_guard lk(mu_);
    return total_;
  }

 private:
  void flush_locked(steady::time_point now) {
    const double s = std::chrono::duration<double>(now - line_at_).count();
    out_ << program_ << ": " << pending_ << " more failed in the last " << std::fixed;
    const auto precision = out_.precision(1);
    out_ << s;
    out_.precision(precision);
    out_.unsetf(std::ios::fixed);
    out_ << " s (latest: " << latest_ << "); " << total_ << " in total\n";
    pending_ = 0;
    line_at_ = now;
  }

  mutable std::mutex mu_;
  std::string program_;
  std::ostream& out_;
  steady::duration every_;
  std::uint64_t total_ = 0, pending_ = 0;
  std::string latest_;
  steady::time_point line_at_{};
};

}  // namespace rill_examples

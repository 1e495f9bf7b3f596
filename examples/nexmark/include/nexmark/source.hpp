// nexmark/source.hpp — NEXMark events as rill sources: a binary event file
// (event_file.hpp) or events generated on the fly (generator.hpp). Each record's event
// time is the event's date_time.
//
// Example (compiled by tests/banner_examples.py):
//   #include <rill/rill.hpp>
//   std::uint64_t bids = 0;
//   rill::runtime rt{{.workers = 1}};
//   using nexmark::event_kind;
//   auto is_bid = [](const nexmark::event& e) { return kind_of(e) == event_kind::bid; };
//   rt.run(rill::from(nexmark::generated_events{{}, 5000})
//              .filter(is_bid)
//              .sink([&bids](nexmark::event&&) { ++bids; }));  // bids == 4600
//   // the same from a file: rill::from(nexmark::event_file_source{{"events.bin"}})
//
// Splits: event_file_source has one split per file, read front to back in file order
// (its event-time order, up to the generator's out_of_order_group_size); split i runs on
// worker i mod workers and the watermark is the minimum over the files. To read one
// stream on N workers, write it as N files with `nexmark_gen --offset i --step N`
// (i = 0..N-1: the crate's parallel-generator scheme, every N-th event per file).
// generated_events is one split. A file is opened when the run starts (runtime::run,
// before the workers): a missing or foreign file throws event_file_error from run(). A
// truncated or malformed record ends that file's input: its message ("FILE: truncated
// record ... at byte N (event K)") is in run_report::errors, after every record before
// it went downstream.
//
// Thread safety: a reader lives on its split's worker (rill/core/source.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nexmark/event_file.hpp>
#include <nexmark/generator.hpp>
#include <rill/core/record.hpp>
#include <rill/core/source.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace nexmark {

/// A record's event time: the event's date_time in rill's nanoseconds.
inline rill::event_time event_time_of(const event& e) noexcept {
  return rill::event_time{date_time_of(e).time_since_epoch()};
}

/// The events of binary event files, one split per file, each in file order.
class event_file_source {
 public:
  using value_type = event;
  using record_policy = rill::unacked;  // read from a file: nothing to acknowledge
  /// `paths` must not be empty (std::invalid_argument).
  explicit event_file_source(std::vector<std::filesystem::path> paths) : paths_(std::move(paths)) {
    if (paths_.empty()) throw std::invalid_argument("nexmark::event_file_source: no file");
  }
  std::size_t split_count() const noexcept { return paths_.size(); }
  std::string name() const { return "nexmark_file:" + paths_.front().string(); }

  class reader {
   public:
    explicit reader(const std::filesystem::path& p) : r_(std::make_unique<event_file_reader>(p)) {}
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t max) {
      try {
        for (std::size_t n = 0; n < max; ++n) {
          if (!r_->next(e_)) return rill::poll_status::end;
          const rill::event_time t = event_time_of(e_);
          emit(rill::record<event, rill::unacked>{std::move(e_), t});
        }
      } catch (const event_file_error& x) {
        error_ = x.what();
        return rill::poll_status::error;
      }
      return rill::poll_status::more;
    }
    std::string error() const { return error_; }

   private:
    std::unique_ptr<event_file_reader> r_;
    event e_;
    std::string error_;
  };
  /// Throws event_file_error (cannot open, not an event file).
  reader open(std::size_t split) const { return reader{paths_.at(split)}; }

 private:
  std::vector<std::filesystem::path> paths_;
};

/// `count` events of `generator{cfg}`, as fast as the pipeline takes them.
class generated_events {
 public:
  using value_type = event;
  using record_policy = rill::unacked;  // generated: nothing to acknowledge
  generated_events(config cfg, std::uint64_t count) : cfg_(std::move(cfg)), count_(count) {}
  std::size_t split_count() const noexcept { return 1; }
  std::string name() const { return "nexmark_generator"; }

  class reader {
   public:
    reader(const config& cfg, std::uint64_t count) : gen_(cfg), left_(count) {}
    template <class Emit>
    rill::poll_status poll(Emit&& emit, std::size_t max) {
      for (std::size_t n = 0; n < max && left_ > 0; ++n, --left_) {
        event e;
        gen_.next(e);
        const rill::event_time t = event_time_of(e);
        emit(rill::record<event, rill::unacked>{std::move(e), t});
      }
      return left_ > 0 ? rill::poll_status::more : rill::poll_status::end;
    }
    std::string error() const { return {}; }

   private:
    generator gen_;
    std::uint64_t left_;
  };
  /// Throws config_error for a bad configuration.
  reader open(std::size_t) const { return reader{cfg_, count_}; }

 private:
  config cfg_;
  std::uint64_t count_;
};

}  // namespace nexmark

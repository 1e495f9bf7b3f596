// Tests for rill/core/source.hpp: the one source driver and the reader capabilities it
// uses (gate, backpressure, partitions, drain). The driver runs on a worker's
// io_context driven by the test thread until it has no work left; a scripted reader and
// a recording head stand in for the source and the chain.
//
//   scripted reader --poll--> source_driver --on_record/on_progress/on_end--> recording head
//        ^ ready/serve, on_backpressure/on_resume,            on_flush: false N times
//          assignment_version/held_partitions, settled/close
#include "rill/core/source.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using rill::event_time;
using rill::poll_status;
using rill::record;

constexpr event_time at(std::chrono::nanoseconds d) { return event_time{d}; }

/// What the chain saw, in order: "r:<value>", "p:<seconds>", "end".
struct recording_head final : rill::stage_in<int> {
  std::vector<std::string> seen;
  int refuse_flushes = 0;  ///< the first N on_flush() calls report a full queue
  int flushes = 0;
  /// "r:V", with "*" when the driver marked the record catching_up.
  void on_record(std::size_t, record<int>&& r) override {
    seen.push_back("r:" + std::to_string(r.value) + (r.position && r.position->catching_up ? "*" : ""));
  }
  void on_progress(std::size_t, event_time t) override {
    seen.push_back("p:" + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count()));
  }
  void on_end(std::size_t) override { seen.push_back("end"); }
  bool on_flush() override { return ++flushes > refuse_flushes; }
};

/// One poll's worth of records, then the status it returns.
struct batch {
  std::vector<record<int>> records;
  poll_status status;
};

/// Shared log of the capability calls a reader received (the reader is moved into the
/// driver, so the test keeps this).
struct calls {
  int ready = 0, serve = 0, resume = 0, settled = 0, close = 0;
  std::vector<std::chrono::nanoseconds> backpressure;
  std::vector<std::string>* order = nullptr;  ///< "close" is appended here when set
};

struct plain_reader {
  std::shared_ptr<std::deque<batch>> script;
  template <class Emit>
  poll_status poll(Emit&& emit, std::size_t max) {
    if (script->empty()) return poll_status::end;
    batch b = std::move(script->front());
    script->pop_front();
    EXPECT_LE(b.records.size(), max);
    for (auto& r : b.records) emit(std::move(r));
    return b.status;
  }
  std::string error() const { return "scripted: error"; }
};

struct gated : plain_reader {
  std::shared_ptr<calls> c;
  int closed_polls = 3;  ///< ready() is false this many times
  bool ready() { return ++c->ready > closed_polls; }
  void serve() { ++c->serve; }
};

struct backpressured : plain_reader {
  std::shared_ptr<calls> c;
  void on_backpressure(std::chrono::nanoseconds d) { c->backpressure.push_back(d); }
  void on_resume() { ++c->resume; }
};

struct partitioned : plain_reader {
  std::shared_ptr<std::uint64_t> version;
  std::shared_ptr<std::vector<std::int32_t>> held;
  std::uint64_t assignment_version() const noexcept { return *version; }
  void held_partitions(std::vector<std::int32_t>& out) const { out = *held; }
  std::chrono::nanoseconds partition_idle_timeout() const noexcept { return 0s; }
};

struct draining : plain_reader {
  std::shared_ptr<calls> c;
  int unsettled = 3;  ///< settled() is false this many times
  std::chrono::nanoseconds timeout = 10s;
  bool settled() { return ++c->settled > unsettled; }
  void close() {
    ++c->close;
    if (c->order) c->order->push_back("close");
  }
  std::chrono::nanoseconds drain_timeout() const noexcept { return timeout; }
};

/// Holds the partitions `next` from its second poll on (a rebalance before that poll's
/// records).
struct reassigning : partitioned {
  std::vector<std::int32_t> next;
  int polls = 0;
  template <class Emit>
  poll_status poll(Emit&& emit, std::size_t max) {
    if (++polls == 2) {
      *held = next;
      ++*version;
    }
    return partitioned::poll(emit, max);
  }
};


static_assert(rill::gated_reader<gated> && !rill::gated_reader<plain_reader>);
static_assert(rill::backpressure_aware_reader<backpressured>);
static_assert(rill::partitioned_reader<partitioned> && !rill::partitioned_reader<gated>);
static_assert(rill::draining_reader<draining> && !rill::draining_reader<partitioned>);

record<int> rec(int v, std::chrono::nanoseconds t, std::int32_t partition = -1) {
  record<int> r{v, at(t)};
  if (partition >= 0) r.position = rill::source_position{.partition = partition, .offset = v};
  return r;
}

struct driven {
  std::uint64_t out = 0, errors = 0;
};
/// Runs a driver for `reader` to completion on one worker's loop (this thread); with
/// `stop_first`, a stop is requested before the driver starts.
template <class Reader>
driven drive(Reader reader, recording_head& head, bool stop_first = false) {
  rill::runtime rt{{.workers = 1, .topology = "1 nodes x 1 cores", .pin = false}};
  rill::worker w{0, 0, -1};
  rill::stage_counters counters;
  auto d = std::make_shared<rill::source_driver<Reader, int>>(std::move(reader), &head, 0, rt, w, counters);
  if (stop_first) rt.request_stop();
  d->start();
  w.context().run();
  return {counters.out.load(), counters.errors.load()};
}

std::shared_ptr<std::deque<batch>> script(std::vector<batch> b) {
  return std::make_shared<std::deque<batch>>(b.begin(), b.end());
}

TEST(source_driver, plain_reader_sends_its_largest_time_after_each_slice_then_ends) {
  recording_head head;
  plain_reader r{script({{{rec(1, 5s), rec(2, 3s)}, poll_status::more},
                         {{rec(3, 4s)}, poll_status::idle},  // 4 < 5: no new progress
                         {{rec(4, 9s)}, poll_status::end}})};
  const auto c = drive(std::move(r), head);
  EXPECT_EQ(head.seen, (std::vector<std::string>{"r:1", "r:2", "p:5", "r:3", "r:4", "p:9", "end"}));
  EXPECT_EQ(c.out, 4u);
}

TEST(source_driver, gated_reader_is_served_and_read_only_once_ready) {
  recording_head head;
  auto c = std::make_shared<calls>();
  gated r{{script({{{rec(1, 1s)}, poll_status::end}})}, c};
  drive(std::move(r), head);
  EXPECT_EQ(c->serve, 3);   // ready() false 3 times: served each time, nothing read
  EXPECT_EQ(c->ready, 4);   // the 4th opened the gate; the reader ended on that poll
  EXPECT_EQ(head.seen, (std::vector<std::string>{"r:1", "p:1", "end"}));
}

TEST(source_driver, backpressure_reports_growing_duration_and_resumes_once) {
  recording_head head;
  head.refuse_flushes = 4;
  auto c = std::make_shared<calls>();
  backpressured r{{script({{{rec(1, 1s)}, poll_status::more}, {{rec(2, 2s)}, poll_status::end}})}, c};
  drive(std::move(r), head);
  ASSERT_EQ(c->backpressure.size(), 4u);  // one call per refused flush
  EXPECT_EQ(c->backpressure.front(), 0ns);  // measured from the first refusal
  for (std::size_t i = 1; i < c->backpressure.size(); ++i) {
    EXPECT_GE(c->backpressure[i], c->backpressure[i - 1]);
    EXPECT_GE(c->backpressure[i], i * 150us);  // retries 200 µs apart (timer: never early)
  }
  EXPECT_EQ(c->resume, 1);
  EXPECT_EQ(head.seen, (std::vector<std::string>{"r:1", "p:1", "r:2", "p:2", "end"}));
}

TEST(source_driver, partitioned_reader_sends_the_minimum_over_held_partitions) {
  recording_head head;
  partitioned r{{script({{{rec(1, 10s, 0), rec(2, 20s, 0)}, poll_status::more},  // p1 unread: -inf
                         {{rec(3, 5s, 1)}, poll_status::more},                    // min(20, 5)
                         {{rec(4, 8s, 0)}, poll_status::more},                    // still 5
                         {{rec(5, 30s, 1)}, poll_status::end}})},                 // min(20, 30)
                std::make_shared<std::uint64_t>(1), std::make_shared<std::vector<std::int32_t>>(std::vector<std::int32_t>{0, 1})};
  drive(std::move(r), head);
  EXPECT_EQ(head.seen, (std::vector<std::string>{"r:1", "r:2", "r:3", "p:5", "r:4", "r:5", "p:20", "end"}));
}

TEST(source_driver, partitioned_reader_follows_assignment_changes) {
  recording_head head;
  auto version = std::make_shared<std::uint64_t>(1);
  auto held = std::make_shared<std::vector<std::int32_t>>(std::vector<std::int32_t>{0, 1});
  reassigning r{{{script({{{rec(1, 2s, 1), rec(2, 9s, 0)}, poll_status::more},  // min(9, 2) = 2
                          {{rec(3, 12s, 0)}, poll_status::end}})},              // 1 gone: 12
                 version, held},
                {0}};
  drive(std::move(r), head);
  EXPECT_EQ(head.seen, (std::vector<std::string>{"r:1", "r:2", "p:2", "r:3", "p:12", "end"}));
}

// Partition 1 arrives after progress 20 was sent: its records are marked catching_up
// (shown "*") while its largest time is below 20 (5 s), not after (25 s), and a record
// out of order inside a caught-up partition (7 s after 25 s) is not marked.
TEST(source_driver, records_of_a_partition_behind_sent_progress_are_catching_up) {
  recording_head head;
  auto version = std::make_shared<std::uint64_t>(1);
  auto held = std::make_shared<std::vector<std::int32_t>>(std::vector<std::int32_t>{0});
  reassigning r{{{script({{{rec(1, 10s, 0), rec(2, 20s, 0)}, poll_status::more},                   // p:20
                          {{rec(3, 5s, 1), rec(4, 25s, 1), rec(5, 30s, 0)}, poll_status::more},  // min(30, 25)
                          {{rec(6, 7s, 1)}, poll_status::end}})},
                 version, held},
                {0, 1}};
  drive(std::move(r), head);
  EXPECT_EQ(head.seen,
            (std::vector<std::string>{"r:1", "r:2", "p:20", "r:3*", "r:4", "r:5", "p:25", "r:6", "end"}));
}

TEST(source_driver, draining_reader_closes_after_settled_following_the_end) {
  recording_head head;
  auto c = std::make_shared<calls>();
  c->order = &head.seen;
  draining r{{script({{{rec(1, 1s)}, poll_status::end}})}, c};
  drive(std::move(r), head);
  EXPECT_EQ(c->settled, 4);  // false 3 times, 1 ms apart, then true
  EXPECT_EQ(c->close, 1);
  EXPECT_EQ(head.seen, (std::vector<std::string>{"r:1", "p:1", "end", "close"}));
}

TEST(source_driver, draining_reader_closes_at_the_drain_timeout_when_never_settled) {
  recording_head head;
  auto c = std::make_shared<calls>();
  draining r{{script({{{rec(1, 1s)}, poll_status::end}})}, c, 1'000'000, 30ms};
  const auto t0 = std::chrono::steady_clock::now();
  drive(std::move(r), head);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
  EXPECT_EQ(c->close, 1);
  EXPECT_GT(c->settled, 1);
}

TEST(source_driver, read_error_is_counted_reported_and_ends_the_input) {
  recording_head head;
  const auto c = drive(plain_reader{script({{{rec(1, 1s)}, poll_status::error}})}, head);
  EXPECT_EQ(head.seen, (std::vector<std::string>{"r:1", "p:1", "end"}));
  EXPECT_EQ(c.errors, 1u);
  EXPECT_EQ(c.out, 1u);
}

TEST(source_driver, stop_request_ends_the_input_before_reading) {
  recording_head head;
  const auto c = drive(plain_reader{script({{{rec(1, 1s)}, poll_status::end}})}, head, /*stop_first=*/true);
  EXPECT_EQ(head.seen, (std::vector<std::string>{"end"}));
  EXPECT_EQ(c.out, 0u);
}

}  // namespace

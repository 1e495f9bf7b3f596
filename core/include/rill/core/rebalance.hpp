// rill/core/rebalance.hpp — sharing stateless work between the workers of a NUMA node
// through the node's ring (docs/design.md "NumaRing").
//
// Defines rill::detail::rebalance_exchange<T> (an internal of the DSL: users write
// `.rebalance()`): producers (the workers running a source split) push batches of records
// into their node's ring of a rill::numa_ring; every worker pops batches from its own
// node's ring and runs the rest of the chain on them. When a node's ring is full the
// producer moves a batch to another node's ring; a worker whose node ring is empty takes a
// batch from another node (the numa_ring endpoint does both, with the node cached per
// worker and a private transfer cursor).
//
// Example (compiled by tests/banner_examples.py; what `stream<T>::rebalance()` builds):
//   #include <rill/operators/stream.hpp>
//   auto j = rill::from(rill::vector_source<int>{{{1, rill::event_time{1s}}}})  // 1 split
//                .rebalance()                       // records leave worker 0 through the ring
//                .map([](int x) { return x * 2; })  // runs on every worker of node 0 (and of
//                                                   // other nodes when node 0 is backed up)
//                .sink([](int) {});
//   rill::runtime{{.workers = 2}}.run(j);
//
// Event-time progress across a shared ring: records of one input leave the ring in any
// order and on any worker, so a frontier cannot ride along with them. The producer
// records checkpoints (records of input i pushed so far, input i's frontier then); once
// every record up to a checkpoint has been *processed* by some worker, the checkpoint's
// frontier becomes that input's safe frontier, and each worker forwards it to its chain
// (after each batch, and from its ticker when idle). End of input i reaches every worker's
// chain once every record of input i has been processed. Lateness downstream is decided
// against these frontiers: with rebalance, which records count as late may depend on
// scheduling when disorder approaches the max delay (without rebalance it does not).
//
// Backpressure: a producer whose batch no ring can take keeps it and reports on_flush()
// == false; its source stops reading and retries on a timer. Bounded emission
// (docs/design.md "Bounded emission"): ready(p) is false while the producer's batch is
// full and no ring takes it, so an emitter before rebalance (flat_map, a firing window, a
// join) suspends instead of growing that batch; a consumer drains a batch only while its
// chain is ready() and otherwise tries again after `retry` (a timer on its loop).
//
// Thread safety: producer calls on the producing worker; drain/sync on the consuming
// worker; checkpoints are guarded by a mutex per input (touched once per batch, never
// per record).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "rill/core/numa_ring.hpp"
#include "rill/core/record.hpp"
#include "rill/core/stage.hpp"

namespace rill::detail {

template <class T, class P = acked>
class rebalance_exchange {
 public:
  struct item {
    std::uint32_t input = 0;
    rill::record<T, P> rec;
  };
  using batch = std::vector<item>;

  /// `nodes`: NUMA nodes (one ring each), `ring_batches`: ring capacity per node in
  /// batches, `batch_records`: records per batch, `transfer`: batches per cross-node move.
  rebalance_exchange(std::size_t workers, std::size_t nodes, std::size_t ring_batches,
                     std::size_t batch_records, std::size_t transfer)
      : ring_(nodes, ring_batches, transfer), batch_records_(batch_records), consumers_(workers) {}

  // ---- build time (the thread calling runtime::run) ----

  /// A producer on `worker` with `inputs` local inputs; returns its first global input.
  std::size_t add_producer(std::size_t worker, std::size_t node, std::size_t inputs) {
    auto p = std::make_unique<producer>(ring_.make_endpoint(worker, node));
    p->first = inputs_.size();
    p->pushed.assign(inputs, 0);
    p->frontier.assign(inputs, event_time_min);
    p->checkpointed.assign(inputs, event_time_min);
    p->end_pending.assign(inputs, false);
    for (std::size_t i = 0; i < inputs; ++i) inputs_.push_back(std::make_unique<input_state>());
    producers_.push_back(std::move(p));
    by_worker_.emplace_back(worker, producers_.size() - 1);
    return producers_.back()->first;
  }
  std::size_t total_inputs() const noexcept { return inputs_.size(); }
  std::size_t producer_index(std::size_t worker) const {
    for (auto [w, i] : by_worker_)
      if (w == worker) return i;
    return std::size_t(-1);
  }
  /// Consumer on `worker` (node `node`): `post` runs a function on its loop; `retry` runs
  /// one there later (a timer), for a drain that found its chain not ready (empty =
  /// `post`). At most one drain of a consumer is scheduled at a time, so `retry` may use
  /// one timer.
  void bind_consumer(std::size_t worker, std::size_t node, stage_in<T, P>* down,
                     std::function<void(std::function<void()>)> post,
                     std::function<void(std::function<void()>)> retry = {}) {
    auto& c = consumers_[worker];
    c = std::make_unique<consumer>(ring_.make_endpoint(worker, node));
    c->node = node;
    c->down = down;
    c->retry = retry ? std::move(retry) : post;
    c->post = std::move(post);
    c->sent.assign(inputs_.size(), event_time_min);
    c->ended.assign(inputs_.size(), false);
  }

  // ---- producer side (on the producing worker) ----

  void push(std::size_t p, std::size_t local_input, record<T, P>&& r) {
    auto& pr = *producers_[p];
    if (advances_progress(r) && r.time > pr.frontier[local_input]) pr.frontier[local_input] = r.time;
    pr.pending.push_back(item{std::uint32_t(pr.first + local_input), std::move(r)});
    if (pr.pending.size() >= batch_records_) send(p);
  }
  void progress(std::size_t p, std::size_t local_input, event_time t) {
    auto& pr = *producers_[p];
    if (t > pr.frontier[local_input]) pr.frontier[local_input] = t;
  }
  void end(std::size_t p, std::size_t local_input) {
    producers_[p]->end_pending[local_input] = true;
    flush(p);
  }
  /// Whether producer `p` may push without growing its batch past batch_records: the
  /// batch has room, or it is full and a ring takes it now. On the producing worker only;
  /// never blocks.
  bool ready(std::size_t p) {
    auto& pr = *producers_[p];
    return pr.pending.size() < batch_records_ || send(p);
  }
  /// Sends the pending batch and publishes checkpoints. False = backpressure.
  bool flush(std::size_t p) {
    auto& pr = *producers_[p];
    if (!pr.pending.empty() && !send(p)) return false;
    publish(pr);
    return true;
  }

  // ---- consumer side (on the consuming worker) ----

  /// Processes up to `max_batches` batches, each only while the chain is ready(). True =
  /// stopped with work possibly left; false with `waiting` set = the chain was not ready
  /// (drain again after `retry`).
  bool drain(std::size_t worker, std::size_t max_batches = 16) {
    auto& c = *consumers_[worker];
    batch b;
    std::size_t n = 0;
    c.waiting = false;
    for (; n < max_batches; ++n) {
      if (!c.down->ready()) {
        c.waiting = true;
        sync(worker);
        return false;
      }
      if (!c.ep.try_pop(b)) break;
      for (auto& it : b) c.down->on_record(it.input, std::move(it.rec));
      const bool room = c.down->on_flush();
      // Count per input after processing: a checkpoint becomes safe only when every
      // record before it went through some worker's chain.
      std::uint32_t run_input = b.empty() ? 0 : b.front().input;
      std::uint64_t run = 0;
      for (auto& it : b) {
        if (it.input != run_input) {
          consumed(run_input, run);
          run_input = it.input;
          run = 0;
        }
        ++run;
      }
      if (run) consumed(run_input, run);
      b.clear();
      if (!room) {  // a bounded queue downstream is full: the ticker retries
        c.blocked = true;
        sync(worker);
        return false;
      }
    }
    c.blocked = false;
    sync(worker);
    return n == max_batches;
  }
  /// Forwards safe frontiers and completed ends to `worker`'s chain.
  void sync(std::size_t worker) {
    auto& c = *consumers_[worker];
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      auto& in = *inputs_[i];
      if (c.ended[i]) continue;
      const auto f = event_time{std::chrono::nanoseconds{in.safe.load(std::memory_order_acquire)}};
      if (f > c.sent[i]) {
        c.sent[i] = f;
        c.down->on_progress(i, f);
      }
      if (in.complete.load(std::memory_order_acquire)) {
        c.ended[i] = true;
        c.down->on_end(i);
      }
    }
    c.down->on_flush();
  }
  /// Wakes consumers of `node` (or all when node == -1): each drains until empty.
  void wake(std::size_t node) {
    for (std::size_t w = 0; w < consumers_.size(); ++w) {
      auto& c = *consumers_[w];
      if (node != std::size_t(-1) && c.node != node) continue;
      if (c.sleeping.exchange(false, std::memory_order_acq_rel)) schedule(w);
    }
  }
  void schedule(std::size_t w) { consumers_[w]->post([this, w] { turn(w); }); }
  numa_ring<batch>& ring() noexcept { return ring_; }
  const numa_ring_counters& consumer_counters(std::size_t w) const { return consumers_[w]->ep.counters(); }
  const numa_ring_counters& producer_counters(std::size_t p) const { return producers_[p]->ep.counters(); }

 private:
  // One scheduled drain of consumer `w` (on its worker): drains, then schedules the next
  // one, waits for its chain (retry), or goes to sleep.
  void turn(std::size_t w) {
    if (drain(w)) return schedule(w);
    auto& c = *consumers_[w];
    if (c.waiting) return c.retry([this, w] { turn(w); });  // stays scheduled: no wake() needed
    // Going to sleep without losing a wake-up (see `sleeping`): if a producer's wake()
    // precedes this exchange, this acquire makes its push visible to was_size().
    c.sleeping.exchange(true, std::memory_order_acq_rel);
    if (!c.blocked && ring_.ring(c.node).was_size() != 0 && c.sleeping.exchange(false, std::memory_order_acq_rel)) {
      schedule(w);
    }
  }

  struct input_state {
    std::mutex mu;
    std::deque<std::pair<std::uint64_t, event_time>> checkpoints;  // (records pushed, frontier)
    std::atomic<std::uint64_t> consumed{0};
    std::uint64_t total = 0;  // valid once ended (under mu)
    bool ended = false;       // under mu
    std::atomic<std::int64_t> safe{event_time_min.time_since_epoch().count()};
    std::atomic<bool> complete{false};
  };
  struct producer {
    explicit producer(typename numa_ring<batch>::endpoint e) : ep(std::move(e)) {}
    typename numa_ring<batch>::endpoint ep;
    std::size_t first = 0;
    batch pending;
    std::vector<std::uint64_t> pushed;
    std::vector<event_time> frontier, checkpointed;
    std::vector<bool> end_pending;
  };
  struct consumer {
    explicit consumer(typename numa_ring<batch>::endpoint e) : ep(std::move(e)) {}
    typename numa_ring<batch>::endpoint ep;
    std::size_t node = 0;
    stage_in<T, P>* down = nullptr;
    std::function<void(std::function<void()>)> post, retry;
    std::vector<event_time> sent;
    std::vector<bool> ended;
    bool blocked = false;  // downstream full at the last drain
    bool waiting = false;  // the last drain found the chain not ready: retry, not sleep
    // True while no drain of this consumer is scheduled. Every write is an acq_rel
    // exchange, so all writes form one release sequence: a consumer going to sleep either
    // synchronises with the last producer's wake() (and sees its push) or that wake()
    // reads `true` and schedules it. Read-modify-writes rather than
    // std::atomic_thread_fence, which ThreadSanitizer does not model.
    std::atomic<bool> sleeping{true};
  };

  bool send(std::size_t p) {
    auto& pr = *producers_[p];
    std::vector<std::uint64_t> counts(pr.pushed.size(), 0);
    for (auto& it : pr.pending) ++counts[it.input - pr.first];
    if (!pr.ep.try_push(std::move(pr.pending))) return false;  // pending untouched
    for (std::size_t i = 0; i < counts.size(); ++i) pr.pushed[i] += counts[i];
    pr.pending = batch{};
    pr.pending.reserve(batch_records_);
    wake(pr.ep.node());
    return true;
  }
  void publish(producer& pr) {
    for (std::size_t i = 0; i < pr.pushed.size(); ++i) {
      auto& in = *inputs_[pr.first + i];
      const bool new_frontier = pr.frontier[i] > pr.checkpointed[i];
      if (!new_frontier && !pr.end_pending[i]) continue;
      std::lock_guard lk(in.mu);
      if (new_frontier) {
        pr.checkpointed[i] = pr.frontier[i];
        in.checkpoints.emplace_back(pr.pushed[i], pr.frontier[i]);
      }
      if (pr.end_pending[i] && !in.ended) {
        in.ended = true;
        in.total = pr.pushed[i];
      }
      advance(in);
    }
  }
  void consumed(std::uint32_t input, std::uint64_t n) {
    auto& in = *inputs_[input];
    in.consumed.fetch_add(n, std::memory_order_acq_rel);
    std::lock_guard lk(in.mu);
    advance(in);
  }
  // Under in.mu.
  void advance(input_state& in) {
    const auto done = in.consumed.load(std::memory_order_acquire);
    auto safe = in.safe.load(std::memory_order_relaxed);
    while (!in.checkpoints.empty() && in.checkpoints.front().first <= done) {
      safe = std::max(safe, in.checkpoints.front().second.time_since_epoch().count());
      in.checkpoints.pop_front();
    }
    in.safe.store(safe, std::memory_order_release);
    if (in.ended && done == in.total && !in.complete.load(std::memory_order_relaxed)) {
      in.complete.store(true, std::memory_order_release);
      for (std::size_t w = 0; w < consumers_.size(); ++w) {
        consumers_[w]->post([this, w] { sync(w); });
      }
    }
  }

  numa_ring<batch> ring_;
  std::size_t batch_records_;
  std::vector<std::unique_ptr<producer>> producers_;
  std::vector<std::pair<std::size_t, std::size_t>> by_worker_;
  std::vector<std::unique_ptr<input_state>> inputs_;
  std::vector<std::unique_ptr<consumer>> consumers_;
};

}  // namespace rill::detail

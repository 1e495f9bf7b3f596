// kafka_sink.cpp — the producer side of rill's Kafka connector (see kafka_sink.hpp):
// idempotent acks=all producer, our hand-off buffer for QUEUE_FULL, a poll thread that
// serves delivery reports, and a flush whose pending count includes our buffer (so a
// shutdown never reports "nothing pending" while records wait in it, the loss
// confluent-kafka-go issue 596 reports).
#include "rill/connectors/kafka_sink.hpp"

#include "kafka_common.hpp"
#include "rill/connectors/detail/kafka_ack.hpp"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace rill::kafka_detail {

namespace {
void set(RdKafka::Conf& c, const std::string& k, const std::string& v) { set_config(c, "kafka_sink", k, v); }
}  // namespace

struct producer_core::impl : RdKafka::DeliveryReportCb, RdKafka::EventCb {
  struct item {
    kafka_message_out m;
    std::int64_t ts;
    std::shared_ptr<ack_token> ack;  // released at the delivery report
  };
  /// librdkafka's msg_opaque of a message with an ack token: keeps the token until the
  /// delivery report. Pooled, so the per-record path allocates nothing of ours that
  /// another thread frees (a glibc malloc's cross-thread free goes through the arena
  /// lock): taken under mu, given back by dr_cb (any thread that serves delivery
  /// reports) onto a lock-free stack that the next take under mu empties at once.
  struct holder {
    std::shared_ptr<ack_token> ack;
    holder* next = nullptr;
  };
  static constexpr std::size_t holder_slab = 256;
  kafka_sink_options o;
  // The holder pool before p: it outlives the producer (see ~producer_core).
  std::vector<std::unique_ptr<holder[]>> slabs;  ///< under mu
  // Written per record by whoever serves delivery reports (the poll thread): a cache
  // line of their own, apart from what the writing workers touch per record.
  alignas(64) std::atomic<holder*> returned{nullptr};  ///< given back by dr_cb, any thread
  alignas(64) holder* free_holders = nullptr;    ///< under mu
  std::unique_ptr<RdKafka::Producer> p;
  /// The destination topic's handle, made once: the C++ produce(topic_name, ...) copies
  /// the name into a std::string (a heap allocation for names over 15 bytes) and looks
  /// the topic up by name (a lock, a string compare, refcounts) on every message.
  rd_kafka_topic_t* rkt = nullptr;
  /// Shared with the metrics functions (kafka_sink::add_metrics), which may outlive us.
  std::shared_ptr<kafka_sink_stats> stats_owner = std::make_shared<kafka_sink_stats>();
  kafka_sink_stats& stats = *stats_owner;
  /// accepted - completed. Any thread. completed is read first: every completion follows
  /// its acceptance, so the difference never goes below 0.
  std::uint64_t pending_now() const noexcept { return stats.pending(); }
  mutable std::mutex mu;          // buffer, errors, on_error
  std::deque<item> buffer;
  std::vector<std::string> errors;
  std::function<void(const kafka_failed_delivery&)> on_err;
  std::atomic<bool> stop{false};

  // ---- exactly-once (link non-null); docs/design.md "Exactly-once" ----
  std::shared_ptr<txn_link> link;
  /// The inputs an output depends on, per source partition: lowest and highest offset.
  struct dep {
    std::int32_t pid;
    std::int64_t lo, hi;
  };
  /// An output's deps, one entry per partition: inline for one partition (what a map's
  /// output reads), so holding it allocates nothing; on the heap for more.
  class dep_list {
   public:
    const dep* begin() const noexcept { return n_ <= 1 ? &one_ : many_.data(); }
    const dep* end() const noexcept { return n_ <= 1 ? &one_ + n_ : many_.data() + many_.size(); }
    /// Widens partition `pid`'s range to take in `offset`, adding the partition if new.
    void add(std::int32_t pid, std::int64_t offset) {
      for (dep* d = const_cast<dep*>(begin()); d != end(); ++d)
        if (d->pid == pid) {
          d->lo = std::min(d->lo, offset);
          d->hi = std::max(d->hi, offset);
          return;
        }
      const dep fresh{pid, offset, offset};
      if (n_ == 0) one_ = fresh;
      else if (n_ == 1) many_ = {one_, fresh};
      else many_.push_back(fresh);
      ++n_;
    }

   private:
    dep one_{};
    std::size_t n_ = 0;
    std::vector<dep> many_;  ///< every entry when n_ >= 2
  };
  struct held_item {
    kafka_message_out m;
    std::int64_t ts;
    dep_list deps;
  };
  std::mutex held_mu;            ///< held: appended by writing workers, cut by the txn thread
  std::vector<held_item> held;
  /// The transaction thread's: the outputs of the cut in progress (swapped with `held`,
  /// so both keep their capacity and a turn allocates nothing once they grew), and the
  /// ones it keeps, appended to `held` again at the end of the turn.
  std::vector<held_item> batch, keep;
  std::vector<char> kept;
  /// The cut, C(p) per source partition, sorted by partition id; `released`: an output
  /// released into the transaction at this cut reads p. The transaction thread's.
  struct cut_entry {
    std::int32_t pid;
    std::int64_t c;
    bool released;
  };
  std::vector<cut_entry> cut;
  /// Where partition `pid`'s entry is or would go in `cut` (binary search).
  std::vector<cut_entry>::iterator cut_pos(std::int32_t pid) {
    return std::lower_bound(cut.begin(), cut.end(), pid, [](const cut_entry& e, std::int32_t v) { return e.pid < v; });
  }
  /// C's entry of partition `pid`, or null.
  cut_entry* cut_of(std::int32_t pid) {
    const auto it = cut_pos(pid);
    return it != cut.end() && it->pid == pid ? &*it : nullptr;
  }
  /// Lowers C(pid) to at most `c`. A partition C has no entry for has no handed frontier
  /// (nothing of it handed yet, or it left this process): it is added at the lowest
  /// offset, so that every output reading it stays held, whatever its offsets.
  void lower_cut(std::int32_t pid, std::int64_t c) {
    const auto it = cut_pos(pid);
    if (it != cut.end() && it->pid == pid) it->c = std::min(it->c, c);
    else cut.insert(it, cut_entry{pid, std::numeric_limits<std::int64_t>::min(), false});
  }
  /// Held outputs the last cut kept (an input not yet covered: a window still to fire);
  /// written under held_mu, read by flush() (kafka_sink::flush, eos_backlog()).
  std::atomic<std::uint64_t> held_kept{0};
  // The transaction thread's own state.
  bool txn_open = false;
  /// Per source partition, the offset the open transaction must commit: the cut under
  /// which outputs reading it were released into the transaction. A commit without it
  /// would make those outputs visible while their inputs are read again after a restart.
  std::unordered_map<std::int32_t, std::int64_t> owed;
  std::chrono::steady_clock::time_point last_commit = std::chrono::steady_clock::now();
  std::uint64_t transactions = 0;
  /// An output of the open transaction that librdkafka refused for good (produce() or
  /// its delivery report): "<librdkafka's error>"; empty while none was. Under mu; set by
  /// try_produce and dr_cb, acted on by the transaction thread (refused()).
  std::string refusal;

  /// The input positions token `a` stands for, folded into `out` (an ack_group's parts
  /// recursively; a kafka_source's offset_token is one position).
  static void deps_of(const ack_token& a, dep_list& out) {
    if (const auto* o = dynamic_cast<const offset_token*>(&a)) {
      const auto& e = o->entry();
      out.add(e.pid, e.offset);
    } else if (const auto* g = dynamic_cast<const ack_group*>(&a)) {
      for (const auto& p : g->parts())
        if (p) deps_of(*p, out);
    }
  }

  /// Records a transaction failure: the error text, the link (the splits end the run),
  /// and an abort when the transaction can still be aborted. Takes ownership of `e`.
  void txn_failed(const char* what, rd_kafka_error_t* e) {
    std::string msg = "kafka_sink " + o.topic + ": exactly-once: " + what + ": " + rd_kafka_error_string(e);
    const auto code = rd_kafka_error_code(e);
    if (rd_kafka_error_is_fatal(e)) {
      char why[512];
      const auto fe = rd_kafka_fatal_error(p->c_ptr(), why, sizeof why);
      if (fe == RD_KAFKA_RESP_ERR__FENCED || fe == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
          fe == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH || code == RD_KAFKA_RESP_ERR__FENCED ||
          code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED || code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH)
        msg += " (fenced: a newer producer with transactional.id '" + link->transactional_id +
               "' took over; this one stops and its open transaction never becomes visible)";
      else
        msg += std::string(" (fatal: ") + why + ")";
    } else if (rd_kafka_error_txn_requires_abort(e) && txn_open) {
      if (auto* ae = rd_kafka_abort_transaction(p->c_ptr(), 30000)) rd_kafka_error_destroy(ae);
      msg += "; transaction aborted: restart the process to replay from the committed offsets";
    }
    rd_kafka_error_destroy(e);
    txn_open = false;
    owed.clear();
    {
      std::lock_guard<std::mutex> g(mu);
      // A delivery report served inside commit_transaction: librdkafka fails the commit
      // ("N message(s) failed delivery"); name the output's own error too.
      if (!refusal.empty()) msg += " (output refused: " + refusal + ")";
      errors.push_back(msg);
    }
    link->fail(msg);
  }
  /// An output of the open transaction was refused for good (`refusal`): committing the
  /// transaction would commit the input offsets past it without it, so the transaction
  /// is aborted and the run fails with the refusal, as Kafka Streams' default production
  /// exception handler fails the task; a restart replays from the committed offsets.
  /// false while nothing was refused. The transaction thread.
  bool refused() {
    std::string msg;
    {
      std::lock_guard<std::mutex> g(mu);
      if (refusal.empty()) return false;
      msg = "kafka_sink " + o.topic + ": exactly-once: output refused: " + refusal +
            "; transaction aborted (committing it would skip the output): restart the process "
            "to replay from the committed offsets";
      errors.push_back(msg);
    }
    abort_open();
    link->fail(msg);
    return true;
  }
  /// The run failed elsewhere (a split's revoke, another error): abort what the open
  /// transaction holds, so that nothing of it becomes visible.
  void abort_open() {
    if (!txn_open) return;
    if (auto* e = rd_kafka_abort_transaction(p->c_ptr(), 30000)) rd_kafka_error_destroy(e);
    txn_open = false;
    owed.clear();
  }
  bool begin() {
    if (txn_open) return true;
    if (auto* e = rd_kafka_begin_transaction(p->c_ptr())) {
      txn_failed("begin_transaction", e);
      return false;
    }
    txn_open = true;
    return true;
  }
  /// Calls f() (returning rd_kafka_error_t*) again while it fails with a retriable error
  /// (a timeout, a coordinator moving or restarting), for at most `patience`.
  template <class F>
  rd_kafka_error_t* retrying(F f, std::chrono::milliseconds patience) {
    const auto until = std::chrono::steady_clock::now() + patience;
    rd_kafka_error_t* e = f();
    while (e && rd_kafka_error_is_retriable(e) && std::chrono::steady_clock::now() < until) {
      rd_kafka_error_destroy(e);
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
      e = f();
    }
    return e;
  }
  std::chrono::milliseconds txn_patience() const { return std::max(o.delivery_timeout, std::chrono::milliseconds{60000}); }

  /// The end of a cut: the outputs it kept go back to `held`, ahead of any a worker held
  /// meanwhile (held stays in the order written), `batch` is emptied with its capacity
  /// kept, and held_kept counts what the cut kept. The transaction thread.
  void put_back_kept() {
    keep.clear();
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (kept[i]) keep.push_back(std::move(batch[i]));
    batch.clear();
    const std::size_t n = keep.size();
    std::lock_guard<std::mutex> g(held_mu);
    if (!held.empty()) {
      for (auto& h : held) keep.push_back(std::move(h));
      held.clear();
    }
    held.swap(keep);
    held_kept.store(n, std::memory_order_relaxed);
  }
  /// One turn of the transaction thread: take the handed frontiers, release the held
  /// outputs a consistent cut allows into the open transaction, and commit it when the
  /// interval passed or a split asked for its final commit.
  void txn_step() {
    std::unordered_map<std::int32_t, txn_link::part> parts;
    std::uint64_t requested = 0;
    {
      std::lock_guard<std::mutex> g(link->mu);
      parts = link->parts;
      requested = link->requested;
    }
    // The cut: C(p) starts at the handed frontier H(p); an output with an input at or
    // past C(p) stays held and lowers C(p) of every partition it reads to its lowest
    // input there (committing past that input without the output would lose it on
    // replay). Repeated until nothing changes; the rest is released (all inputs < C).
    // Computed outside held_mu: an output a worker holds meanwhile has every input at or
    // past H (an input below H had all its outputs held when H was published), so this
    // cut would keep it anyway; the next one sees it.
    cut.clear();
    for (const auto& [pid, pt] : parts) cut.push_back({pid, pt.handed, false});
    std::sort(cut.begin(), cut.end(), [](const cut_entry& a, const cut_entry& b) { return a.pid < b.pid; });
    {
      std::lock_guard<std::mutex> g(held_mu);
      batch.swap(held);
    }
    kept.assign(batch.size(), 0);
    std::size_t n_kept = 0;
    for (bool changed = true; changed;) {
      changed = false;
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (kept[i]) continue;
        bool blocked = false;
        for (const auto& d : batch[i].deps) {
          const cut_entry* e = cut_of(d.pid);
          if (!e || d.hi >= e->c) blocked = true;
        }
        if (!blocked) continue;
        kept[i] = 1;
        ++n_kept;
        changed = true;
        for (const auto& d : batch[i].deps) lower_cut(d.pid, d.lo);
      }
    }
    const std::size_t n_out = batch.size() - n_kept;
    if (n_out > 0) {
      if (!begin()) {  // the run failed (txn_failed): the released outputs are dropped
        stats.completed.fetch_add(n_out, std::memory_order_release);
        put_back_kept();
        return;
      }
      for (std::size_t i = 0; i < batch.size(); ++i)
        if (!kept[i])
          for (const auto& d : batch[i].deps) cut_of(d.pid)->released = true;
      for (const auto& e : cut)
        if (e.released) {
          auto [it, fresh] = owed.try_emplace(e.pid, e.c);
          if (!fresh) it->second = std::max(it->second, e.c);
        }
      // One lock of mu per 256 outputs; QUEUE_FULL: serve reports until librdkafka takes it.
      std::size_t dropped = 0;
      std::unique_lock<std::mutex> g(mu);
      for (std::size_t i = 0, since_lock = 0; i < batch.size(); ++i) {
        if (kept[i]) continue;
        if (!refusal.empty()) {  // the rest is never produced: done with
          ++dropped;
          continue;
        }
        item it{std::move(batch[i].m), batch[i].ts, nullptr};
        while (!try_produce(it)) {
          g.unlock();
          serve([&] { p->poll(10); });
          g.lock();
        }
        if (++since_lock == 256) {
          since_lock = 0;
          g.unlock();
          g.lock();
        }
      }
      g.unlock();
      if (dropped) stats.completed.fetch_add(dropped, std::memory_order_release);
    }
    put_back_kept();
    // A refusal (at produce, or a delivery report served since the last turn) ends the
    // transaction here: nothing past it is committed.
    if (refused()) return;
    const auto now = std::chrono::steady_clock::now();
    std::uint64_t served;
    {
      std::lock_guard<std::mutex> g(link->mu);
      served = link->done;
    }
    if (now - last_commit < o.commit_interval && requested <= served) return;
    last_commit = now;
    if (std::getenv("RILL_KAFKA_DEBUG")) {
      std::fprintf(stderr, "txn: released %zu kept %zu cut", n_out, n_kept);
      for (const auto& e : cut) {
        const auto pt = parts.find(e.pid);
        std::fprintf(stderr, " %d:%lld/%lld", e.pid, (long long)e.c, pt == parts.end() ? -1LL : (long long)pt->second.handed);
      }
      std::fprintf(stderr, "\n");
    }
    // Offsets to commit: the cut of every partition that moved past its last commit,
    // grouped by the split (consumer) that holds it: each is sent with its consumer's
    // group metadata, which the group coordinator checks (KIP-447 fencing).
    std::unordered_map<split_view*, std::pair<std::shared_ptr<split_view>, std::vector<std::pair<std::int32_t, std::int64_t>>>> by_split;
    for (const auto& ce : cut) {
      const auto pid = ce.pid;
      auto c = ce.c;
      const auto pt = parts.find(pid);
      const auto ow = owed.find(pid);
      if (ow != owed.end()) c = std::max(c, ow->second);
      if (pt == parts.end() || !pt->second.owner) {
        if (ow == owed.end()) continue;
        abort_open();
        link->fail("kafka_sink " + o.topic + ": exactly-once: source partition " + std::to_string(pid & 0xffff) +
                   " left this process while outputs reading it were in the open transaction; aborted");
        return;
      }
      if (c <= pt->second.committed || c < 0) continue;
      auto& e = by_split[pt->second.owner.get()];
      e.first = pt->second.owner;
      e.second.emplace_back(pid, c);
    }
    if (!by_split.empty() && !begin()) return;
    if (txn_open) {
      if (link->failed.load(std::memory_order_acquire)) return abort_open();
      for (auto& [raw, e] : by_split) {
        rd_kafka_consumer_group_metadata_t* md = nullptr;
        {
          std::lock_guard<std::mutex> g(e.first->mu);
          if (e.first->rk) md = rd_kafka_consumer_group_metadata(e.first->rk);
        }
        if (!md) {  // that consumer closed: its offsets cannot go with this transaction
          abort_open();
          link->fail("kafka_sink " + o.topic + ": exactly-once: a source consumer closed before its offsets were "
                     "committed; aborted");
          return;
        }
        rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(int(e.second.size()));
        for (const auto& [pid, c] : e.second) {
          const auto& pt = parts.at(pid);
          rd_kafka_topic_partition_list_add(l, pt.topic.c_str(), pt.partition)->offset = c;
        }
        auto* err = retrying([&] { return rd_kafka_send_offsets_to_transaction(p->c_ptr(), l, md, 30000); },
                             txn_patience());
        rd_kafka_topic_partition_list_destroy(l);
        rd_kafka_consumer_group_metadata_destroy(md);
        if (err) return txn_failed("send_offsets_to_transaction", err);
      }
      rd_kafka_error_t* err = nullptr;
      serve([&] {
        err = retrying([&] { return rd_kafka_commit_transaction(p->c_ptr(), 30000); }, txn_patience());
      });
      if (err) return txn_failed("commit_transaction", err);
      txn_open = false;
      owed.clear();
      ++transactions;
    }
    {
      std::lock_guard<std::mutex> g(link->mu);
      for (const auto& [raw, e] : by_split)
        for (const auto& [pid, c] : e.second)
          if (auto it = link->parts.find(pid); it != link->parts.end()) it->second.committed = c;
      link->done = std::max(link->done, requested);
    }
    link->cv.notify_all();
  }
  /// The transaction thread: a turn every 5 ms, or at once when a split asks for its
  /// final commit. After a failure it only serves delivery reports and drops what is
  /// written (the inputs stay uncommitted).
  void txn_loop() {
    while (!stop.load(std::memory_order_acquire)) {
      {
        std::unique_lock<std::mutex> g(link->mu);
        link->cv.wait_for(g, std::chrono::milliseconds{5}, [&] { return link->requested > link->done; });
      }
      serve([&] { p->poll(0); });
      if (link->failed.load(std::memory_order_acquire)) {
        abort_open();
        std::lock_guard<std::mutex> g(held_mu);
        stats.completed.fetch_add(held.size(), std::memory_order_release);
        held.clear();
        held_kept.store(0, std::memory_order_relaxed);
        continue;
      }
      txn_step();
    }
  }
  std::thread poller;
  /// When a writing worker last served delivery reports (steady_clock ticks): while the
  /// workers write, they serve the reports and the poll thread only looks in now and then.
  std::atomic<std::int64_t> worker_polled{0};
  /// Writes between two services of delivery reports by a writing worker.
  static constexpr unsigned serve_every = 64;
  /// How long the poll thread leaves the reports to the workers after one served them.
  static constexpr std::chrono::milliseconds worker_grace{5};

  /// A free holder. Under mu.
  holder* take_holder() {
    if (!free_holders) free_holders = returned.exchange(nullptr, std::memory_order_acquire);
    if (!free_holders) {
      auto slab = std::make_unique<holder[]>(holder_slab);
      for (std::size_t i = 0; i + 1 < holder_slab; ++i) slab[i].next = &slab[i + 1];
      free_holders = &slab[0];
      slabs.push_back(std::move(slab));
    }
    holder* h = free_holders;
    free_holders = h->next;
    // The next take is one record away; the list's holders were last touched when their
    // delivery reports were released, long enough ago to be out of cache, so without the
    // prefetch reading h->next dominates try_produce.
    if (free_holders) __builtin_prefetch(free_holders, 1);
    return h;
  }
  /// Holders whose tokens were released, linked first..last through next. Any thread,
  /// lock-free.
  void give_back(holder* first, holder* last) noexcept {
    holder* top = returned.load(std::memory_order_relaxed);
    do {
      last->next = top;
    } while (!returned.compare_exchange_weak(top, first, std::memory_order_release, std::memory_order_relaxed));
  }

  /// Tries to hand one message to librdkafka (it copies key and value: RK_MSG_COPY, so
  /// the caller frees them on its own thread). false = QUEUE_FULL (keep it). Under mu.
  bool try_produce(item& it) {
    holder* h = nullptr;
    if (it.ack) {
      h = take_holder();
      h->ack = std::move(it.ack);
    }
    // The C API on the cached topic handle: what the C++ produce() does, minus the name
    // copy and lookup per message. Without a handle (a name librdkafka refused), by name.
    rd_kafka_vu_t vu[6];
    if (rkt) {
      vu[0].vtype = RD_KAFKA_VTYPE_RKT;
      vu[0].u.rkt = rkt;
    } else {
      vu[0].vtype = RD_KAFKA_VTYPE_TOPIC;
      vu[0].u.cstr = o.topic.c_str();
    }
    vu[1].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    vu[1].u.i = RD_KAFKA_MSG_F_COPY;
    vu[2].vtype = RD_KAFKA_VTYPE_VALUE;
    vu[2].u.mem = {const_cast<char*>(it.m.value.data()), it.m.value.size()};
    vu[3].vtype = RD_KAFKA_VTYPE_KEY;
    vu[3].u.mem = {it.m.key ? const_cast<char*>(it.m.key->data()) : nullptr, it.m.key ? it.m.key->size() : 0};
    vu[4].vtype = RD_KAFKA_VTYPE_TIMESTAMP;
    vu[4].u.i64 = it.ts;
    vu[5].vtype = RD_KAFKA_VTYPE_OPAQUE;
    vu[5].u.ptr = h;
    rd_kafka_error_t* error = rd_kafka_produceva(p->c_ptr(), vu, 6);  // partition: unassigned
    const auto e = static_cast<RdKafka::ErrorCode>(error ? rd_kafka_error_code(error) : RD_KAFKA_RESP_ERR_NO_ERROR);
    if (error) rd_kafka_error_destroy(error);
    if (e == RdKafka::ERR_NO_ERROR) return true;
    if (h) {
      it.ack = std::move(h->ack);
      h->next = free_holders;
      free_holders = h;
    }
    if (e == RdKafka::ERR__QUEUE_FULL) return false;
    fail(o.topic, it.m.key, it.m.value, "produce: " + RdKafka::err2str(e));  // e.g. too large
    // Exactly-once: the transaction must not commit past it (refused()).
    if (link && refusal.empty()) refusal = "produce: " + RdKafka::err2str(e);
    if (it.ack) it.ack->fail();  // at-least-once: reported, but not done: no commit past its inputs
    it.ack.reset();
    stats.completed.fetch_add(1, std::memory_order_release);
    return true;
  }
  void fail(const std::string& topic, const std::optional<std::string>& key, const std::string& value,
            const std::string& why) {
    stats.failed.fetch_add(1, std::memory_order_relaxed);
    errors.push_back("kafka_sink " + topic + ": delivery failed: " + why);
    if (on_err) on_err(kafka_failed_delivery{topic, key, value, why});
  }
  void retry_buffer() {
    std::lock_guard<std::mutex> g(mu);
    while (!buffer.empty() && try_produce(buffer.front())) {
      buffer.pop_front();
      stats.buffered.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  /// Successful delivery reports of the current poll on this thread, released by
  /// release_delivered() when the poll returns (see there). Thread-local: any thread that
  /// polls this producer releases what its own poll collected, right after it. One list
  /// per thread for all sinks: polls nest (on_error, called inside one sink's poll, may
  /// write to another kafka_sink, whose write serves its own reports), so each poll
  /// releases only the entries added after its start (see serve).
  static std::vector<holder*>& delivered_now() {
    thread_local std::vector<holder*> v;
    return v;
  }
  /// Polls librdkafka (serving delivery reports on this thread), then releases the
  /// delivered records' tokens. `serve` is the librdkafka call (poll or flush). Entries
  /// below `base` belong to an outer poll on this thread (another sink's): left to it.
  template <class Serve>
  void serve(Serve&& call) {
    const std::size_t base = delivered_now().size();
    call();
    release_delivered(base);
  }
  /// Releases the ack tokens of the records this thread's last poll reported delivered
  /// (the list's entries from `base` on), and counts them. Done after the poll rather
  /// than in dr_cb, one report at a time, because each release reads two cache lines
  /// written about a millisecond earlier (the holder, then the token's control block):
  /// here the loop prefetches them 4 and 8 reports ahead, and the counters and the holder
  /// pool take one atomic update per poll.
  void release_delivered(std::size_t base) {
    auto& v = delivered_now();
    const std::size_t n = v.size();
    if (n <= base) return;
    holder* chain = nullptr;
    holder* last = nullptr;
    for (std::size_t i = base; i < n; ++i) {
      if (i + 8 < n) __builtin_prefetch(v[i + 8], 1);
      if (i + 4 < n && v[i + 4] && v[i + 4]->ack) __builtin_prefetch(v[i + 4]->ack.get(), 1);
      holder* h = v[i];
      if (!h) continue;
      h->ack.reset();  // releases the ack: done for the source
      h->next = chain;
      if (!chain) last = h;
      chain = h;
    }
    if (chain) give_back(chain, last);
    v.resize(base);
    stats.delivered.fetch_add(n - base, std::memory_order_relaxed);
    stats.completed.fetch_add(n - base, std::memory_order_release);
  }

  /// Exactly-once: whether a failed delivery report is an output refused for good (the
  /// transaction must not commit past it). Not so for our own aborts and the destructor's
  /// purge (ERR__PURGE_*: the transaction is already failing), nor once the producer
  /// failed fatally (fenced): it commits nothing more, and txn_failed names the cause.
  bool refuses(RdKafka::ErrorCode e) const {
    if (e == RdKafka::ERR__PURGE_QUEUE || e == RdKafka::ERR__PURGE_INFLIGHT ||
        e == RdKafka::ERR__FENCED || e == RdKafka::ERR__FATAL || e == RdKafka::ERR_PRODUCER_FENCED ||
        e == RdKafka::ERR_INVALID_PRODUCER_EPOCH)
      return false;
    char why[8];
    return rd_kafka_fatal_error(p->c_ptr(), why, sizeof why) == RD_KAFKA_RESP_ERR_NO_ERROR;
  }
  void dr_cb(RdKafka::Message& m) override {
    holder* h = static_cast<holder*>(m.msg_opaque());
    if (m.err() == RdKafka::ERR_NO_ERROR) {
      // librdkafka stamps every message at produce (rd_kafka_message_latency): no clock
      // read of ours per record.
      if (const auto us = m.latency(); us >= 0) stats.delivery_latency.record_shared(std::uint64_t(us) * 1000);
      delivered_now().push_back(h);  // released (and counted) when the poll returns
      return;
    } else {
      std::optional<std::string> key;
      if (m.key()) key = *m.key();
      std::lock_guard<std::mutex> g(mu);
      fail(m.topic_name(), key,
           std::string(static_cast<const char*>(m.payload()), m.payload() ? m.len() : 0), m.errstr());
      if (h && h->ack) h->ack->fail();  // the inputs stay uncommitted (at-least-once)
      if (link && refusal.empty() && refuses(m.err())) refusal = "delivery report: " + m.errstr();
    }
    if (h) {
      h->ack.reset();  // releases the ack: failed for the source
      give_back(h, h);
    }
    stats.completed.fetch_add(1, std::memory_order_release);
  }
  void event_cb(RdKafka::Event& ev) override {
    if (ev.type() == RdKafka::Event::EVENT_ERROR) stats.transient_errors.fetch_add(1, std::memory_order_relaxed);
  }
};

std::shared_ptr<txn_link> attach_sink(const std::shared_ptr<txn_link>& link, const kafka_sink_options& o,
                                      const kafka_source_options& src) {
  if (!link)
    throw std::invalid_argument("kafka_sink: exactly_once needs a kafka_source with guarantee = exactly_once");
  std::string id = o.transactional_id;
  if (id.empty()) {
    if (src.instance_id.empty())
      throw std::invalid_argument(
          "kafka_sink: exactly_once needs transactional_id, or the source's instance_id to derive it from");
    id = src.group + "-" + src.instance_id;
  }
  std::lock_guard<std::mutex> g(link->mu);
  if (link->sink_attached) throw std::invalid_argument("kafka_sink: this source already has an exactly-once sink");
  link->sink_attached = true;
  link->transactional_id = id;
  return link;
}

producer_core::producer_core(const kafka_sink_options& o, std::shared_ptr<txn_link> link)
    : p_(std::make_unique<impl>()) {
  p_->link = std::move(link);
  if (o.brokers.empty()) throw std::invalid_argument("kafka_sink: brokers is empty");
  if (o.topic.empty()) throw std::invalid_argument("kafka_sink: topic is empty");
  p_->o = o;
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  set(*conf, "bootstrap.servers", o.brokers);
  set(*conf, "enable.idempotence", "true");
  set(*conf, "acks", "all");
  set(*conf, "partitioner", "murmur2_random");
  set(*conf, "linger.ms", std::to_string(o.linger.count()));
  set(*conf, "message.timeout.ms", std::to_string(o.delivery_timeout.count()));
  if (p_->link) {
    set(*conf, "transactional.id", p_->link->transactional_id);
    // librdkafka requires message.timeout.ms <= transaction.timeout.ms.
    set(*conf, "transaction.timeout.ms", std::to_string(p_->txn_patience().count()));
  }
  for (const auto& [k, v] : o.config) set(*conf, k, v);
  std::string err;
  if (conf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(p_.get()), err) != RdKafka::Conf::CONF_OK ||
      conf->set("event_cb", static_cast<RdKafka::EventCb*>(p_.get()), err) != RdKafka::Conf::CONF_OK)
    throw std::runtime_error("kafka_sink: " + err);
  p_->p.reset(RdKafka::Producer::create(conf.get(), err));
  if (!p_->p) throw std::runtime_error("kafka_sink: cannot create producer: " + err);
  // Bounded wait for a broker, as kafka_source's (start_timeout): a probe against a broker
  // that is down fails at start, not after one delivery timeout per record.
  if (o.start_timeout.count() > 0) wait_for_broker(*p_->p, "kafka_sink", o.brokers, o.start_timeout);
  // Null for a name librdkafka refuses (over 512 bytes): then every produce names the
  // topic and fails (error output), as the C++ produce(topic_name, ...) does.
  p_->rkt = rd_kafka_topic_new(p_->p->c_ptr(), o.topic.c_str(), nullptr);
  if (p_->link) {
    // Fences a predecessor with the same transactional.id: its open transaction is
    // aborted (or its prepared commit completed) before this returns (KIP-98).
    const auto wait = std::max(o.start_timeout, std::chrono::milliseconds{30000});
    if (auto* e = p_->retrying([&] { return rd_kafka_init_transactions(p_->p->c_ptr(), int(wait.count())); }, wait)) {
      const std::string why = rd_kafka_error_string(e);
      rd_kafka_error_destroy(e);
      if (p_->rkt) rd_kafka_topic_destroy(p_->rkt);
      throw std::runtime_error("kafka_sink: init_transactions (transactional.id '" + p_->link->transactional_id +
                               "') on '" + o.brokers + "': " + why);
    }
    p_->poller = std::thread([s = p_.get()] { s->txn_loop(); });
    return;
  }
  p_->poller = std::thread([s = p_.get()] {
    while (!s->stop.load(std::memory_order_acquire)) {
      const auto last = std::chrono::steady_clock::duration(s->worker_polled.load(std::memory_order_relaxed));
      if (std::chrono::steady_clock::now().time_since_epoch() - last < impl::worker_grace)
        std::this_thread::sleep_for(impl::worker_grace);  // the writing workers serve them
      else
        s->serve([&] { s->p->poll(5); });
      s->retry_buffer();
    }
  });
}

producer_core::~producer_core() {
  auto& s = *p_;
  // This thread's list may hold an outer poll's reports (another sink's): leave those.
  const std::size_t base = impl::delivered_now().size();
  s.stop.store(true, std::memory_order_release);
  s.poller.join();
  if (s.link) {
    // Whatever the open transaction holds was never committed: abort it now, so that
    // read_committed consumers are not held back until it times out.
    if (s.txn_open) {
      if (auto* e = rd_kafka_abort_transaction(s.p->c_ptr(), 10000)) rd_kafka_error_destroy(e);
      s.txn_open = false;
    }
    {
      std::lock_guard<std::mutex> g(s.held_mu);
      s.stats.completed.fetch_add(s.held.size(), std::memory_order_release);
      s.held.clear();
      s.held_kept.store(0, std::memory_order_relaxed);
    }
    {
      std::lock_guard<std::mutex> g(s.link->mu);
      s.link->sink_gone = true;
    }
    s.link->cv.notify_all();
  }
  // Anything still pending is reported (ERR__PURGE_* delivery reports), not dropped silently.
  {
    std::lock_guard<std::mutex> g(s.mu);
    for (auto& it : s.buffer) {
      s.fail(s.o.topic, it.m.key, it.m.value, "sink destroyed before hand-off");
      if (it.ack) it.ack->fail();
    }
    s.stats.completed.fetch_add(s.buffer.size(), std::memory_order_release);
    s.buffer.clear();
  }
  s.p->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
  s.serve([&] { s.p->flush(1000); });
  s.serve([&] { s.p->poll(0); });
  if (s.rkt) rd_kafka_topic_destroy(s.rkt);  // before the producer: it holds a reference
  s.p.reset();
  s.release_delivered(base);  // reports served while the producer closed, if any
  // A message librdkafka never reported (flush timed out) still has its holder: not
  // delivered, so its token fails (no commit past its inputs) before the pool goes.
  for (auto& slab : s.slabs)
    for (std::size_t i = 0; i < impl::holder_slab; ++i)
      if (auto& a = slab[i].ack) a->fail();
}

void producer_core::produce(kafka_message_out&& m, std::int64_t ts_ms, std::shared_ptr<ack_token>&& ack) {
  auto& s = *p_;
  s.stats.accepted.fetch_add(1, std::memory_order_release);  // pending + 1 (pending_now)
  impl::item it{std::move(m), ts_ms, std::move(ack)};
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (!s.buffer.empty() || !s.try_produce(it)) {
      s.buffer.push_back(std::move(it));
      s.stats.buffered.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Every serve_every writes of this thread, the writer serves the delivery reports that
  // are ready (not under mu: dr_cb takes it), as a plain consume -> produce loop does:
  // a token is then released by the worker that made it (its cache lines stay local) and
  // no other thread wakes up per produce request. The poll thread serves them when no
  // worker writes (worker_grace).
  thread_local unsigned writes = 0;
  if (++writes % impl::serve_every == 0) serve_reports();
}

void producer_core::serve_reports() {
  p_->worker_polled.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  p_->serve([&] { p_->p->poll(0); });
}

std::uint64_t producer_core::flush(std::chrono::milliseconds timeout) {
  auto& s = *p_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (s.pending_now() > 0 && std::chrono::steady_clock::now() < deadline) {
    s.retry_buffer();
    s.serve([&] { s.p->flush(10); });  // serves delivery reports too
  }
  return s.pending_now();
}

std::uint64_t producer_core::pending() const noexcept { return p_->pending_now(); }

void producer_core::hold(kafka_message_out&& m, std::int64_t ts_ms, std::shared_ptr<ack_token>&& ack) {
  auto& s = *p_;
  s.stats.accepted.fetch_add(1, std::memory_order_release);
  if (s.link->failed.load(std::memory_order_acquire)) {
    if (ack) ack->fail();  // never committed: replayed after the restart
    s.stats.completed.fetch_add(1, std::memory_order_release);
    return;
  }
  impl::held_item it{std::move(m), ts_ms, {}};
  if (ack) impl::deps_of(*ack, it.deps);
  {
    std::lock_guard<std::mutex> g(s.held_mu);
    s.held.push_back(std::move(it));
  }
  ack.reset();  // after the push: the inputs count as handed only once the output is held
}

std::uint64_t producer_core::eos_backlog() const noexcept {
  // The kept outputs are held, and held outputs are pending (accepted, not completed);
  // the two relaxed reads may straddle a cut, hence the saturation.
  const auto kept = p_->held_kept.load(std::memory_order_relaxed);
  const auto pending = p_->stats.pending();
  return pending > kept ? pending - kept : 0;
}

bool producer_core::failed() const noexcept { return p_->link && p_->link->failed.load(std::memory_order_acquire); }
void producer_core::on_error(std::function<void(const kafka_failed_delivery&)> f) {
  std::lock_guard<std::mutex> g(p_->mu);
  p_->on_err = std::move(f);
}
kafka_sink_stats& producer_core::stats() noexcept { return p_->stats; }
std::shared_ptr<const kafka_sink_stats> producer_core::shared_stats() const { return p_->stats_owner; }
std::vector<std::string> producer_core::errors() const {
  std::lock_guard<std::mutex> g(p_->mu);
  return p_->errors;
}
void producer_core::add_error(std::string e) {
  std::lock_guard<std::mutex> g(p_->mu);
  p_->errors.push_back(std::move(e));
}

}  // namespace rill::kafka_detail

// kafka_source.cpp — the consumer side of rill's Kafka connector (see kafka_source.hpp):
// one librdkafka KafkaConsumer per split, the per-partition offset tracker behind
// at-least-once commits, rebalance handling, and pause/resume for backpressure.
#include "rill/connectors/kafka_source.hpp"

#include "kafka_common.hpp"
#include "rill/connectors/detail/kafka_ack.hpp"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace rill {

const std::string* kafka_topic::intern(std::string_view name) {
  if (name.empty()) return nullptr;
  // Leaked on purpose: a record (and its topic) may outlive every static destructor's
  // ordering guarantees; std::set's nodes never move, so the pointers stay valid.
  static std::mutex* mu = new std::mutex;
  static auto* names = new std::set<std::string, std::less<>>;
  std::lock_guard<std::mutex> g(*mu);
  auto it = names->find(name);
  if (it == names->end()) it = names->emplace(name).first;
  return &*it;
}

}  // namespace rill

namespace rill::kafka_detail {

struct topic_table {
  std::mutex mu;
  std::vector<std::string> names;
  std::vector<std::shared_ptr<split_view>> views;  ///< every split made, for lag_of
  std::size_t open_splits = 0;                  ///< constructed, final commit not yet made
  std::size_t joined_splits = 0;                ///< had their first assignment (start gate)
  std::vector<std::function<void()>> closers;   ///< final commit made, close deferred
  void opened() {
    std::lock_guard<std::mutex> g(mu);
    ++open_splits;
  }
  /// A split made its final commit: defer its close until every split did (or until the
  /// table dies with the last split: ~topic_table closes the rest).
  void committed(std::function<void()> close) {
    std::vector<std::function<void()>> now;
    {
      std::lock_guard<std::mutex> g(mu);
      closers.push_back(std::move(close));
      if (--open_splits > 0) return;
      now.swap(closers);
    }
    for (auto& f : now) f();
  }
  ~topic_table() {
    for (auto& f : closers) f();
  }
  void joined() {
    std::lock_guard<std::mutex> g(mu);
    ++joined_splits;
  }
  bool all_joined() {
    std::lock_guard<std::mutex> g(mu);
    return joined_splits >= open_splits;
  }
  std::int32_t id(const std::string& topic, std::int32_t partition) {
    std::lock_guard<std::mutex> g(mu);
    auto it = std::find(names.begin(), names.end(), topic);
    std::int32_t n = std::int32_t(it - names.begin());
    if (it == names.end()) names.push_back(topic);
    return (n << 16) | partition;
  }
};

std::shared_ptr<topic_table> make_topic_table() { return std::make_shared<topic_table>(); }
std::shared_ptr<txn_link> make_txn_link() { return std::make_shared<txn_link>(); }

std::vector<kafka_partition_lag> lag_of(topic_table& t) {
  std::vector<std::shared_ptr<split_view>> views;
  {
    std::lock_guard<std::mutex> g(t.mu);
    views = t.views;
  }
  std::vector<kafka_partition_lag> out;
  for (const auto& v : views) {
    std::lock_guard<std::mutex> g(v->mu);
    if (!v->rk || v->assigned.empty()) continue;
    // Both reads are local to the client: the position is what the consumer handed out,
    // the high watermark is cached from each fetch response (rdkafka.h).
    rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(int(v->assigned.size()));
    for (const auto& [topic, part] : v->assigned) rd_kafka_topic_partition_list_add(l, topic.c_str(), part);
    if (rd_kafka_position(v->rk, l) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      for (int i = 0; i < l->cnt; ++i) {
        const auto& e = l->elems[i];
        std::int64_t lo = -1, hi = -1;
        if (e.offset < 0 ||
            rd_kafka_get_watermark_offsets(v->rk, e.topic, e.partition, &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR ||
            hi < 0)
          continue;
        const bool dup = std::any_of(out.begin(), out.end(), [&](const kafka_partition_lag& x) {
          return x.partition == e.partition && x.topic == e.topic;
        });
        if (!dup) out.push_back({e.topic, e.partition, e.offset, hi, std::max<std::int64_t>(0, hi - e.offset)});
      }
    }
    rd_kafka_topic_partition_list_destroy(l);
  }
  return out;
}

namespace {

void set(RdKafka::Conf& c, const std::string& k, const std::string& v) { set_config(c, "kafka_source", k, v); }

void free_list(std::vector<RdKafka::TopicPartition*>& v) {
  RdKafka::TopicPartition::destroy(v);
  v.clear();
}

/// A message of librdkafka's C API (rd_kafka_consumer_poll): owned, destroyed with
/// rd_kafka_message_destroy. The C++ consume() wraps each one in a heap RdKafka::Message.
struct message_free {
  void operator()(rd_kafka_message_t* m) const noexcept { rd_kafka_message_destroy(m); }
};
using message_ptr = std::unique_ptr<rd_kafka_message_t, message_free>;

}  // namespace

/// Offsets of one assigned partition: the emitted records not yet done, in offset order.
/// Consumption order is offset order within one assignment generation, so `open` stays
/// sorted and acks find their entry by binary search. A generation continues across an
/// eager revoke when the same split gets the partition straight back (see `retained`).
struct partition_track {
  enum state : std::uint8_t { open_, done_, failed_ };
  std::string topic;
  std::int32_t partition = -1;
  std::uint32_t gen = 0;
  std::int64_t next_commit = -1;   ///< lowest offset not done (or last done + 1)
  std::int64_t committed = -1;     ///< last offset sent in a commit (pending or confirmed)
  std::int64_t confirmed = -1;     ///< last offset the broker confirmed as committed
  std::int64_t position = -1;      ///< next offset to read: last emitted or skipped + 1
  std::deque<std::pair<std::int64_t, state>> open;  ///< offset, state
  bool paused = false;
  /// Every message up to the end the broker last reported (a partition EOF) was taken,
  /// none since: the partition does not count in kafka_source_stats::partitions_behind.
  bool at_end = false;
  std::int64_t published = -1;     ///< exactly-once: the handed frontier last published

  /// Exactly-once: the lowest offset whose outputs have not all reached the sink (the
  /// handed frontier H), -1 when nothing was read. Failed offsets stay below it.
  std::int64_t handed() const noexcept { return open.empty() ? next_commit : open.front().first; }

  /// An offset handed to the pipeline (its token is alive).
  void emitted(std::int64_t off) {
    open.emplace_back(off, open_);
    position = off + 1;
  }
  /// An offset that is done at once (bad message sent to the error output).
  void skipped(std::int64_t off) {
    if (open.empty()) next_commit = off + 1;
    else open.emplace_back(off, done_);
    position = off + 1;
  }
  /// A commit of `off` failed: send it again at the next commit (due() offers it again).
  void commit_failed(std::int64_t off) {
    if (committed == off) committed = confirmed;
  }
  void commit_confirmed(std::int64_t off) { confirmed = std::max(confirmed, off); }
  /// Its token died. failed: the commit must not pass it (held until a restart).
  /// Returns true when the entry was found.
  bool ack(std::int64_t off, bool failed) {
    if (open.empty() || off < open.front().first) return false;
    // Offsets read in one generation are consecutive unless the log has gaps (compaction,
    // transaction markers), so `off` is usually at index off - front: O(1). Acks come in
    // no useful order (a sink's delivery reports follow its output partitions), and a
    // binary search over a deque of 10^5 open offsets dominates drain_acks (profile in
    // bench/RESULTS.md "kafka"). With a gap, the search finds it.
    const auto guess = static_cast<std::size_t>(off - open.front().first);
    auto it = guess < open.size() && open[guess].first == off
                  ? open.begin() + static_cast<std::ptrdiff_t>(guess)
                  : std::lower_bound(open.begin(), open.end(), off,
                                     [](const auto& e, std::int64_t o) { return e.first < o; });
    if (it == open.end() || it->first != off || it->second != open_) return false;
    it->second = failed ? failed_ : done_;
    while (!open.empty() && open.front().second == done_) {
      next_commit = open.front().first + 1;
      open.pop_front();
    }
    return true;
  }
  bool settled() const noexcept {
    for (const auto& e : open)
      if (e.second == open_) return false;
    return true;
  }
  /// Offset to commit now, or -1 when nothing new is done.
  std::int64_t due() const {
    const auto c = handed();
    return c > committed ? c : -1;
  }
  /// Done offsets the broker has not confirmed as committed (sent or not).
  bool unconfirmed() const { return handed() > confirmed; }
};

struct split_core::impl : RdKafka::RebalanceCb, RdKafka::EventCb, RdKafka::OffsetCommitCb {
  kafka_source_options o;
  std::shared_ptr<topic_table> topics;
  std::shared_ptr<kafka_source_stats> stats;
  std::shared_ptr<txn_link> link;  ///< exactly_once: the sink commits our offsets; else null
  std::function<void(const kafka_bad_message&)> on_bad;
  std::unique_ptr<RdKafka::KafkaConsumer> c;
  ack_inbox::owner inbox = ack_inbox::make();  ///< this split's acks and token pool
  std::unordered_map<std::int32_t, partition_track> parts;
  /// Partitions of the last eager revoke (not lost), kept until the next assignment: a
  /// partition assigned straight back to this split resumes at its position with its
  /// in-flight records still tracked, instead of replaying from the committed offset
  /// everything that sits in open windows downstream. Cleared by every assignment.
  std::unordered_map<std::int32_t, partition_track> retained;
  std::unordered_map<std::int32_t, std::uint32_t> gens;
  std::deque<message_ptr> stash;
  message_ptr cur;
  kafka_topic cur_topic;  ///< the last message's topic (interned: message_view points into it)
  std::int32_t cur_topic_no = -1;  ///< its number in the topic table (pid >> 16), -1: none yet
  /// The partition track of the last message (track()): valid while `version` is
  /// `cached_version` (parts changes only in rebalance callbacks, which bump version).
  partition_track* cached_track = nullptr;
  std::int32_t cached_pid = -1;
  std::uint64_t cached_version = ~std::uint64_t{0};
  std::uint64_t consumed = 0;  ///< emitted, not yet added to stats->consumed (publish())
  std::uint64_t behind = 0;    ///< this split's share of stats->partitions_behind
  std::vector<ack_entry> acks;
  std::chrono::steady_clock::time_point last_commit = std::chrono::steady_clock::now();
  std::string err;
  /// The final commit's wait ended at drain_timeout unconfirmed: close() commits no more
  /// (a revoke's commitSync could block for librdkafka's own retries).
  bool commit_given_up = false;
  std::string last_commit_error;  ///< the last failed commit's error (librdkafka's text)
  /// Partitions given up during shutdown (closed) with done offsets not committed: named
  /// in the final commit's error, "topic/partition (done to N, lost)".
  std::vector<std::string> left_behind;
  bool paused_all = false, closed = false, fatal = false;
  std::uint64_t version = 0;  ///< bumped by every assign/revoke (split_core::assignment_version)
  bool assigned_once = false;  ///< first assignment seen (topic_table::joined counted)
  bool gate_open = false;      ///< split_core::started() returned true once
  std::chrono::steady_clock::time_point born = std::chrono::steady_clock::now();
  std::shared_ptr<split_view> view = std::make_shared<split_view>();
  /// Asynchronous commits in flight: a key of their offsets (commit_key) and when each
  /// was sent, for the commit latency; matched in offset_commit_cb. At most 64 (a
  /// request whose callback never comes is dropped with the oldest).
  std::deque<std::pair<std::uint64_t, std::chrono::steady_clock::time_point>> commits_in_flight;

  ~impl() { unpublish(); }

  /// Copies the assigned partitions into the view (after every rebalance callback).
  void publish_assignment() {
    std::lock_guard<std::mutex> g(view->mu);
    view->assigned.clear();
    for (const auto& [pid, t] : parts) view->assigned.emplace_back(t.topic, t.partition);
  }
  /// Recounts this split's assigned partitions not at their end into the shared stat
  /// (after every change of `parts`).
  void count_behind() {
    std::uint64_t n = 0;
    for (const auto& [pid, t] : parts) n += !t.at_end;
    stats->partitions_behind.fetch_add(n - behind, std::memory_order_relaxed);  // modulo 2^64
    behind = n;
  }
  /// A message of `t` was taken: it is behind until the next partition EOF.
  void left_end(partition_track& t) {
    if (!t.at_end) return;
    t.at_end = false;
    ++behind;
    stats->partitions_behind.fetch_add(1, std::memory_order_relaxed);
  }
  /// A partition EOF, taken in order after every message before it.
  void reached_end(const rd_kafka_message_t& m) {
    auto it = parts.find(pid_of(rd_kafka_topic_name(m.rkt), m.partition));
    if (it == parts.end() || it->second.at_end) return;
    it->second.at_end = true;
    --behind;
    stats->partitions_behind.fetch_sub(1, std::memory_order_relaxed);
  }
  /// Before the consumer closes: readers stop using the handle.
  void unpublish() {
    std::lock_guard<std::mutex> g(view->mu);
    view->rk = nullptr;
    view->assigned.clear();
  }

  /// A key of a commit request's offsets, independent of their order (the callback's
  /// list need not keep the request's order).
  static std::uint64_t commit_key(const std::vector<RdKafka::TopicPartition*>& offs) {
    std::uint64_t k = 0;
    for (const auto* tp : offs) {
      std::uint64_t x = (std::uint64_t(std::uint32_t(tp->partition())) << 48) ^ std::uint64_t(tp->offset()) ^
                        std::hash<std::string>{}(tp->topic());
      x ^= x >> 33;
      x *= 0xff51afd7ed558ccdULL;  // murmur3 fmix64
      x ^= x >> 33;
      k += x;
    }
    return k;
  }
  void commit_took(std::chrono::steady_clock::duration d) {
    stats->commit_latency.record_shared(std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  }

  static void bump(std::atomic<std::uint64_t>& a, std::int64_t n = 1) {
    a.fetch_add(std::uint64_t(n), std::memory_order_relaxed);
  }

  std::int32_t pid_of(const std::string& t, std::int32_t p) { return topics->id(t, p); }

  /// "topic/partition (done to N[, why])": a partition whose done offsets are not committed.
  static std::string short_of(const partition_track& t, const char* why = nullptr) {
    return t.topic + "/" + std::to_string(t.partition) + " (done to " + std::to_string(t.handed()) +
           (why ? std::string(", ") + why : std::string()) + ")";
  }

  /// True while some assigned or retained partition has done offsets the broker has not
  /// confirmed as committed (nothing sent, a commit in flight, or the last one failed).
  bool commit_unconfirmed() const {
    for (const auto* m : {&parts, &retained})
      for (const auto& [pid, t] : *m)
        if (t.unconfirmed()) return true;
    return false;
  }

  /// The track of `pid`: assigned, else retained from the last revoke; null if neither.
  partition_track* track_of(std::int32_t pid) {
    if (auto it = parts.find(pid); it != parts.end()) return &it->second;
    if (auto it = retained.find(pid); it != retained.end()) return &it->second;
    return nullptr;
  }

  /// Exactly-once: publishes the handed frontier of every assigned partition that moved
  /// (one lock of the link per call, none when nothing moved).
  void publish_handed() {
    bool any = false;
    for (const auto& [pid, t] : parts) any = any || (t.handed() >= 0 && t.handed() != t.published);
    if (!any) return;
    std::lock_guard<std::mutex> g(link->mu);
    for (auto& [pid, t] : parts) {
      const auto h = t.handed();
      if (h < 0 || h == t.published) continue;
      t.published = h;
      auto& lp = link->parts[pid];
      lp.topic = t.topic;
      lp.partition = t.partition;
      lp.handed = h;
      lp.owner = view;
    }
  }
  /// Exactly-once revoke: the partitions leave the link; one from which records were read
  /// past its last transactional commit fails the run (their outputs and the windows that
  /// hold them cannot be handed to the new owner, who replays them from the committed
  /// offset). Returns true when none did.
  bool release_to_link(const std::vector<std::int32_t>& pids, bool lost) {
    std::string bad;
    {
      std::lock_guard<std::mutex> g(link->mu);
      for (auto pid : pids) {
        auto it = parts.find(pid);
        auto lp = link->parts.find(pid);
        const std::int64_t committed = lp == link->parts.end() ? -1 : lp->second.committed;
        if (it != parts.end() && it->second.position >= 0 && it->second.position > committed && bad.empty())
          bad = it->second.topic + "[" + std::to_string(it->second.partition) + "] read up to offset " +
                std::to_string(it->second.position) + ", committed " + std::to_string(committed);
        if (lp != link->parts.end()) link->parts.erase(lp);
      }
    }
    if (bad.empty()) return true;
    err = "kafka_source: exactly-once: partition " + bad +
          (lost ? " was lost (this member was fenced by a newer one with its group.instance.id, or its session "
                  "expired)"
                : " was revoked") +
          " with records not yet committed; the in-memory state holding them cannot be handed over, so the run "
          "stops: restart the process, it replays from the committed offsets";
    fatal = true;
    link->fail(err);
    return false;
  }

  void drain_acks() {
    inbox->drain(acks);
    std::int32_t last_pid = -1;
    partition_track* t = nullptr;
    for (const auto& a : acks) {
      if (a.pid != last_pid || !t) t = track_of(last_pid = a.pid);  // runs of one partition
      if (t && t->gen == a.gen && t->ack(a.offset, a.failed) && a.failed) bump(stats->held);
    }
  }

  /// Commits what is due for `which` (all when null). sync: commitSync, else commitAsync.
  void commit(bool sync, const std::vector<std::int32_t>* which = nullptr) {
    std::vector<RdKafka::TopicPartition*> offs;
    auto add = [&](partition_track& t) {
      const auto d = t.due();
      if (d < 0) return;
      offs.push_back(RdKafka::TopicPartition::create(t.topic, t.partition, d));
      t.committed = d;
    };
    if (which) {
      for (auto pid : *which)
        if (auto it = parts.find(pid); it != parts.end()) add(it->second);
    } else {
      for (auto& [pid, t] : parts) add(t);
    }
    if (offs.empty()) return;
    const auto sent = std::chrono::steady_clock::now();
    const auto e = sync ? c->commitSync(offs) : c->commitAsync(offs);
    if (sync) {
      commit_took(std::chrono::steady_clock::now() - sent);
    } else if (e == RdKafka::ERR_NO_ERROR) {
      if (commits_in_flight.size() == 64) commits_in_flight.pop_front();
      commits_in_flight.emplace_back(commit_key(offs), sent);
    }
    if (e == RdKafka::ERR_NO_ERROR) {
      if (sync) bump(stats->commits);
    } else {
      bump(stats->commit_errors);
      if (std::getenv("RILL_KAFKA_DEBUG")) std::fprintf(stderr, "commit%s: %s\n", sync ? "Sync" : "Async", RdKafka::err2str(e).c_str());
    }
    // A commit that failed (e.g. REBALANCE_IN_PROGRESS, coordinator down during a broker
    // restart) is sent again by the next commit; else a partition that is fully done
    // would never be committed to its end. Async results arrive in offset_commit_cb.
    if (sync) settle_commits(e, offs);
    else if (e != RdKafka::ERR_NO_ERROR) settle_commits(e, offs);
    free_list(offs);
  }
  /// Records the outcome of a commit request per partition (request error `e`, or the
  /// partition's own error).
  void settle_commits(RdKafka::ErrorCode e, const std::vector<RdKafka::TopicPartition*>& offs) {
    for (const auto* tp : offs) {
      auto* t = track_of(pid_of(tp->topic(), tp->partition()));
      if (!t) continue;
      if (e == RdKafka::ERR_NO_ERROR && tp->err() == RdKafka::ERR_NO_ERROR) {
        t->commit_confirmed(tp->offset());
      } else {
        t->commit_failed(tp->offset());
        last_commit_error = RdKafka::err2str(e != RdKafka::ERR_NO_ERROR ? e : tp->err());
      }
    }
  }

  // ---- librdkafka callbacks (served inside consume(), on the worker) ----
  void rebalance_cb(RdKafka::KafkaConsumer* consumer, RdKafka::ErrorCode e,
                    std::vector<RdKafka::TopicPartition*>& tps) override {
    bump(stats->rebalances);
    ++version;
    if (std::getenv("RILL_KAFKA_DEBUG")) {
      std::fprintf(stderr, "%p rebalance %s:", (void*)this, RdKafka::err2str(e).c_str());
      for (auto* tp : tps) std::fprintf(stderr, " %d", tp->partition());
      std::fprintf(stderr, "\n");
    }
    const bool coop = consumer->rebalance_protocol() == "COOPERATIVE";
    if (e == RdKafka::ERR__ASSIGN_PARTITIONS) {
      if (!assigned_once) {
        assigned_once = true;
        topics->joined();
      }
      const auto kept = resumable(consumer, tps);
      for (auto* tp : tps) {
        const auto pid = pid_of(tp->topic(), tp->partition());
        if (auto it = retained.find(pid); it != retained.end() && kept.count(pid)) {
          // Straight back to us: same generation (in-flight acks still count), and read
          // on from our position rather than from the committed offset.
          partition_track t = std::move(it->second);
          t.paused = false;
          if (t.position >= 0) tp->set_offset(t.position);
          parts[pid] = std::move(t);
          continue;
        }
        partition_track t;
        t.topic = tp->topic();
        t.partition = tp->partition();
        t.gen = ++gens[pid];
        parts[pid] = std::move(t);
      }
      retained.clear();  // the rest went elsewhere: their late acks are ignored
      if (coop) {
        if (auto* er = consumer->incremental_assign(tps)) {
          err = "kafka_source: incremental_assign: " + er->str();
          delete er;
        }
      } else {
        consumer->assign(tps);
      }
      bump(stats->assigned, std::int64_t(tps.size()));
      count_behind();
      publish_assignment();
      if (paused_all) {
        consumer->pause(tps);
        for (auto* tp : tps) parts[pid_of(tp->topic(), tp->partition())].paused = true;
      }
      return;
    }
    // Revoke (or lost): commit what is done for these partitions, then give them up. Their
    // in-flight records are forgotten (late acks carry an old generation and are ignored)
    // unless the next assignment hands a partition straight back (eager revoke, not lost:
    // see `retained`).
    drain_acks();
    std::vector<std::int32_t> pids;
    for (auto* tp : tps) pids.push_back(pid_of(tp->topic(), tp->partition()));
    const bool lost = consumer->assignment_lost();
    if (link) {
      if (!closed) release_to_link(pids, lost);  // at close: the final commit was made
    }
    else if (!lost && !commit_given_up) commit(true, &pids);
    retained.clear();
    std::vector<RdKafka::TopicPartition*> paused_away;
    for (auto pid : pids) {
      auto it = parts.find(pid);
      if (it == parts.end()) continue;
      if (it->second.paused) {
        paused_away.push_back(RdKafka::TopicPartition::create(it->second.topic, it->second.partition));
        it->second.paused = false;
      }
      if (!lost && !coop && !link) retained.emplace(pid, std::move(it->second));
      else if (closed && !link && it->second.unconfirmed()) left_behind.push_back(short_of(it->second, lost ? "lost" : "revoked"));
      parts.erase(it);
    }
    std::erase_if(stash, [&](const message_ptr& m) {
      return std::find(pids.begin(), pids.end(), pid_of(rd_kafka_topic_name(m->rkt), m->partition)) != pids.end();
    });
    // librdkafka keeps a partition's application pause across unassign and a later
    // assign (it resets only its own library pause: rd_kafka_assignment_serve_removals
    // in rdkafka_assignment.c; confluentinc/librdkafka#1849), while the partition's track
    // goes away here. A partition paused for backpressure and given back after the
    // backpressure ended would stay paused for good: resume it before it leaves.
    if (!paused_away.empty()) consumer->resume(paused_away);
    free_list(paused_away);
    if (coop) {
      if (auto* er = consumer->incremental_unassign(tps)) delete er;
    } else {
      consumer->unassign();
    }
    stats->assigned.fetch_sub(std::min<std::uint64_t>(tps.size(), stats->assigned.load()),
                              std::memory_order_relaxed);
    count_behind();
    publish_assignment();
  }

  void event_cb(RdKafka::Event& ev) override {
    if (ev.type() != RdKafka::Event::EVENT_ERROR) return;
    bump(stats->transient_errors);
    if (ev.fatal()) {
      fatal = true;
      err = "kafka_source " + o.brokers + ": fatal: " + ev.str();
    }
  }

  void offset_commit_cb(RdKafka::ErrorCode e, std::vector<RdKafka::TopicPartition*>& offs) override {
    // Our asynchronous commits only: a synchronous one was timed by its caller.
    if (!commits_in_flight.empty()) {
      const auto k = commit_key(offs);
      const auto it = std::find_if(commits_in_flight.begin(), commits_in_flight.end(),
                                   [&](const auto& f) { return f.first == k; });
      if (it != commits_in_flight.end()) {
        commit_took(std::chrono::steady_clock::now() - it->second);
        commits_in_flight.erase(it);
      }
    }
    settle_commits(e, offs);
    if (e == RdKafka::ERR_NO_ERROR) bump(stats->commits);
    else if (e != RdKafka::ERR__NO_OFFSET) {
      bump(stats->commit_errors);
      if (std::getenv("RILL_KAFKA_DEBUG")) std::fprintf(stderr, "commit cb: %s\n", RdKafka::err2str(e).c_str());
    }
  }

  /// The retained partitions of `tps` this split may resume: those whose committed offset
  /// on the broker is still the one this split last had confirmed (none = none). Anything
  /// else means another member owned the partition in between (or our last commit's
  /// outcome is unknown): then the partition starts afresh from the committed offset.
  /// Blocks the worker for one OffsetFetch round trip (bounded), like the revoke commit.
  std::unordered_set<std::int32_t> resumable(RdKafka::KafkaConsumer* consumer,
                                                    const std::vector<RdKafka::TopicPartition*>& tps) {
    std::unordered_set<std::int32_t> out;
    std::vector<RdKafka::TopicPartition*> q;
    for (auto* tp : tps)
      if (retained.count(pid_of(tp->topic(), tp->partition())))
        q.push_back(RdKafka::TopicPartition::create(tp->topic(), tp->partition()));
    if (q.empty()) return out;
    if (consumer->committed(q, 5000) == RdKafka::ERR_NO_ERROR) {
      for (auto* tp : q) {
        const auto pid = pid_of(tp->topic(), tp->partition());
        const auto& t = retained.at(pid);
        const auto broker = tp->offset() >= 0 ? tp->offset() : std::int64_t{-1};
        if (tp->err() == RdKafka::ERR_NO_ERROR && broker == t.confirmed && t.committed == t.confirmed)
          out.insert(pid);
      }
    }
    free_list(q);
    return out;
  }

  /// One non-blocking poll of the consumer; returns a data message, a partition EOF
  /// (err RD_KAFKA_RESP_ERR__PARTITION_EOF: kept in order with the messages, through the
  /// stash too) or null. The C API on the C++ consumer's handle: what
  /// KafkaConsumer::consume(0) does (the same callbacks are served inside), without its
  /// heap RdKafka::Message per message.
  message_ptr consume_one() {
    message_ptr m(rd_kafka_consumer_poll(c->c_ptr(), 0));
    if (!m) return nullptr;
    switch (m->err) {
      case RD_KAFKA_RESP_ERR_NO_ERROR:
      case RD_KAFKA_RESP_ERR__PARTITION_EOF:
        return m;
      case RD_KAFKA_RESP_ERR__TIMED_OUT:
        return nullptr;
      default:
        bump(stats->transient_errors);
        return nullptr;
    }
  }
};

split_core::split_core(const kafka_source_options& o, std::shared_ptr<topic_table> topics,
                       std::shared_ptr<kafka_source_stats> stats,
                       std::function<void(const kafka_bad_message&)> on_bad, std::size_t index,
                       std::shared_ptr<txn_link> link)
    : p_(std::make_shared<impl>()), version_(&p_->version) {
  p_->o = o;
  p_->link = std::move(link);
  if (p_->link) {
    std::lock_guard<std::mutex> g(p_->link->mu);
    if (!p_->link->sink_attached)
      throw std::invalid_argument(
          "kafka_source: guarantee = exactly_once, but no kafka_sink was constructed with this source "
          "(kafka_sink(options, source)): nobody would commit its offsets");
  }
  p_->topics = std::move(topics);
  p_->stats = std::move(stats);
  p_->on_bad = std::move(on_bad);
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  set(*conf, "bootstrap.servers", o.brokers);
  set(*conf, "group.id", o.group);
  set(*conf, "client.id", "rill-" + o.group + "-" + std::to_string(index));
  set(*conf, "enable.auto.commit", "false");
  set(*conf, "enable.auto.offset.store", "false");
  set(*conf, "auto.offset.reset", o.offset_reset);
  if (o.cooperative) set(*conf, "partition.assignment.strategy", "cooperative-sticky");
  // librdkafka's default prefetch (100,000 messages) throttles consume -> produce
  // (bench/RESULTS.md "kafka"); memory stays bounded by queued.max.messages.kbytes
  // (64 MiB per consumer). o.config overrides it.
  set(*conf, "queued.min.messages", "1000000");
  // Partition EOFs tell when an assigned partition was read to its end
  // (kafka_source_stats::partitions_behind).
  set(*conf, "enable.partition.eof", "true");
  // A lost group coordinator is looked up again every interval / 10: 1 s here instead of
  // librdkafka's 60 s, so that commits (the final one retries for drain_timeout, 30 s)
  // reach a coordinator that moved or whose connection dropped on a loaded broker.
  set(*conf, "coordinator.query.interval.ms", "10000");
  if (!o.instance_id.empty()) set(*conf, "group.instance.id", o.instance_id + "-" + std::to_string(index));
  // Exactly-once input: only committed transactions' messages (KIP-98).
  if (p_->link) set(*conf, "isolation.level", "read_committed");
  for (const auto& [k, v] : o.config) set(*conf, k, v);
  std::string err;
  if (conf->set("rebalance_cb", static_cast<RdKafka::RebalanceCb*>(p_.get()), err) != RdKafka::Conf::CONF_OK ||
      conf->set("event_cb", static_cast<RdKafka::EventCb*>(p_.get()), err) != RdKafka::Conf::CONF_OK ||
      conf->set("offset_commit_cb", static_cast<RdKafka::OffsetCommitCb*>(p_.get()), err) != RdKafka::Conf::CONF_OK)
    throw std::runtime_error("kafka_source: " + err);
  p_->c.reset(RdKafka::KafkaConsumer::create(conf.get(), err));
  if (!p_->c) throw std::runtime_error("kafka_source: cannot create consumer: " + err);
  std::unique_ptr<RdKafka::Metadata> md_owner;
  try {
    md_owner = wait_for_broker(*p_->c, "kafka_source", o.brokers, o.start_timeout);
  } catch (...) {
    p_->c->close();
    throw;
  }
  const RdKafka::Metadata* md = md_owner.get();
  // Named topics (not '^' patterns): a name Kafka would refuse is an error; so is a topic the
  // cluster does not have, unless require_topics is off (then the split waits for it).
  for (const auto& t : o.topics) {
    if (!t.empty() && t[0] == '^') continue;
    const bool legal = !t.empty() && t.size() <= 249 && t != "." && t != ".." &&
                       std::all_of(t.begin(), t.end(), [](char ch) {
                         return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
                       });
    if (!legal) {
      p_->c->close();
      throw std::runtime_error("kafka_source: '" + t +
                               "' is not a legal Kafka topic name (1-249 characters of a-z A-Z 0-9 . _ -)");
    }
    if (!o.require_topics) continue;
    const auto* ts = md->topics();
    const bool known = std::any_of(ts->begin(), ts->end(), [&](const RdKafka::TopicMetadata* tm) {
      return tm->topic() == t && tm->err() == RdKafka::ERR_NO_ERROR;
    });
    if (!known) {
      p_->c->close();
      throw std::runtime_error("kafka_source: topic '" + t + "' does not exist on '" + o.brokers +
                               "' (create it first, or set require_topics = false to wait for it)");
    }
  }
  if (const auto se = p_->c->subscribe(o.topics); se != RdKafka::ERR_NO_ERROR)
    throw std::runtime_error("kafka_source: subscribe: " + RdKafka::err2str(se));
  {
    std::lock_guard<std::mutex> g(p_->view->mu);
    p_->view->rk = p_->c->c_ptr();
  }
  {
    std::lock_guard<std::mutex> g(p_->topics->mu);
    p_->topics->views.push_back(p_->view);
  }
  p_->topics->opened();  // last: a split that threw above never joins the deferred close
}

split_core::~split_core() { shutdown(); }

bool split_core::service() {
  auto& p = *p_;
  if (p.closed) return false;
  p.drain_acks();
  if (p.link) {
    if (p.link->failed.load(std::memory_order_acquire) && !p.fatal) {
      p.fatal = true;
      p.err = p.link->why();
    }
    if (!p.fatal) p.publish_handed();
    return !p.fatal;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - p.last_commit >= p.o.commit_interval) {
    p.last_commit = now;
    p.commit(false);
  }
  return !p.fatal;
}

bool split_core::next(message_view& m) {
  auto& p = *p_;
  for (;;) {
    p.cur.reset();
    if (!p.stash.empty()) {
      p.cur = std::move(p.stash.front());
      p.stash.pop_front();
    } else {
      p.cur = p.consume_one();
      if (!p.cur) return false;
    }
    if (p.cur->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) break;
    p.reached_end(*p.cur);
  }
  const rd_kafka_message_t* msg = p.cur.get();
  // The topic's name through the C handle (no std::string per message); the table lookup
  // (a mutex) and the interning only when the topic differs from the last one.
  const char* name = rd_kafka_topic_name(msg->rkt);
  if (p.cur_topic_no < 0 || std::strcmp(p.cur_topic.c_str(), name) != 0) {
    p.cur_topic = kafka_topic(name);
    p.cur_topic_no = p.pid_of(p.cur_topic.str(), 0) >> 16;
  }
  m.topic = p.cur_topic.view();
  m.topic_name = p.cur_topic;
  m.partition = msg->partition;
  m.offset = msg->offset;
  m.pid = (p.cur_topic_no << 16) | msg->partition;
  rd_kafka_timestamp_type_t tstype;
  const auto ts = rd_kafka_message_timestamp(msg, &tstype);
  m.timestamp_ms = tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? -1 : ts;
  m.has_key = msg->key != nullptr;
  m.key = m.has_key ? std::string_view(static_cast<const char*>(msg->key), msg->key_len) : std::string_view{};
  m.value = msg->payload ? std::string_view(static_cast<const char*>(msg->payload), msg->len) : std::string_view{};
  return true;
}

std::shared_ptr<ack_token> split_core::track(const message_view& m) {
  auto& p = *p_;
  ++p.consumed;  // into stats->consumed by publish(), once per poll batch
  if (m.pid != p.cached_pid || p.version != p.cached_version) {
    auto it = p.parts.find(m.pid);
    p.cached_track = it != p.parts.end() ? &it->second : nullptr;
    p.cached_pid = m.pid;
    p.cached_version = p.version;
  }
  std::uint32_t gen = 0;
  if (auto* t = p.cached_track) {
    gen = t->gen;
    t->emitted(m.offset);
    p.left_end(*t);
  }
  return p.inbox->make_token(ack_entry{m.pid, m.offset, gen, false});
}

void split_core::publish() noexcept {
  auto& p = *p_;
  if (p.consumed) {
    impl::bump(p.stats->consumed, std::int64_t(p.consumed));
    p.consumed = 0;
  }
}

bool split_core::settled() {
  auto& p = *p_;
  if (p.closed) return true;
  p.drain_acks();
  for (const auto& [pid, t] : p.parts)
    if (!t.settled()) return false;
  return true;
}

void split_core::bad(const message_view& m, std::string what) {
  impl::bump(p_->stats->bad);
  if (p_->on_bad)
    p_->on_bad(kafka_bad_message{std::string(m.topic), m.partition, m.offset, std::move(what),
                                 std::string(m.key), std::string(m.value)});
  auto it = p_->parts.find(m.pid);
  if (it != p_->parts.end()) {
    it->second.skipped(m.offset);
    p_->left_end(it->second);
  }
}

void split_core::pause_all() {
  auto& p = *p_;
  if (p.paused_all || p.closed) return;
  p.paused_all = true;
  std::vector<RdKafka::TopicPartition*> tps;
  for (auto& [pid, t] : p.parts)
    if (!t.paused) {
      t.paused = true;
      tps.push_back(RdKafka::TopicPartition::create(t.topic, t.partition));
    }
  if (!tps.empty()) {
    p.c->pause(tps);
    impl::bump(p.stats->pauses);
  }
  free_list(tps);
}

void split_core::resume_paused() {
  auto& p = *p_;
  if (!p.paused_all || p.closed) return;
  p.paused_all = false;
  std::vector<RdKafka::TopicPartition*> tps;
  for (auto& [pid, t] : p.parts)
    if (t.paused) {
      t.paused = false;
      tps.push_back(RdKafka::TopicPartition::create(t.topic, t.partition));
    }
  if (!tps.empty()) p.c->resume(tps);
  free_list(tps);
}

bool split_core::paused() const noexcept { return p_->paused_all; }


bool split_core::started() {
  auto& p = *p_;
  if (!p.gate_open)
    p.gate_open = p.topics->all_joined() || std::chrono::steady_clock::now() - p.born >= p.o.start_timeout;
  return p.gate_open;
}

void split_core::held_partitions(std::vector<std::int32_t>& out) const {
  for (const auto* m : {&p_->parts, &p_->retained})
    for (const auto& [pid, t] : *m) out.push_back(pid);
}

void split_core::keepalive() {
  auto& p = *p_;
  if (p.closed) return;
  p.drain_acks();
  // Exactly-once: the handed frontier moves while the split waits, so the sink's cuts
  // release (and its backpressure count drops) without more input.
  if (p.link && !p.fatal && !p.link->failed.load(std::memory_order_acquire)) p.publish_handed();
  if (auto m = p.consume_one()) p.stash.push_back(std::move(m));
}

void split_core::shutdown() {
  auto& p = *p_;
  if (p.closed) return;
  p.closed = true;
  publish();
  p.cur.reset();
  p.stash.clear();
  p.drain_acks();
  if (p.link) {
    // Exactly-once: the sink commits what was handed, in a transaction; wait for it
    // (bounded by drain_timeout) before the group is left.
    if (!p.fatal && !p.link->failed.load()) {
      p.publish_handed();
      if (!p.link->commit_and_wait(p.o.drain_timeout) && !p.link->failed.load())
        p.err = "kafka_source: exactly-once: final transaction not committed within drain_timeout";
    }
    p.topics->committed([impl = p_] {
      impl->unpublish();
      impl->c->close();
      impl->stats->assigned.fetch_sub(std::min<std::uint64_t>(impl->parts.size(), impl->stats->assigned.load()),
                                      std::memory_order_relaxed);
      impl->parts.clear();
      impl->count_behind();
    });
    return;
  }
  // The final commit is asynchronous and its confirmation is awaited here, so that the
  // wait ends at drain_timeout: a commitSync returns only when librdkafka gives up its own
  // retries, which took 6-15 s past drain_timeout with the coordinator refusing commits.
  // A commit the coordinator refused (REBALANCE_IN_PROGRESS while the group rebalances,
  // NOT_COORDINATOR, no coordinator yet) is sent again every 500 ms; meanwhile the consumer
  // is served (rebalance and offset commit callbacks; data messages are dropped unread,
  // they were never emitted), 10 ms at a time: consume() returns at a message or its
  // timeout, not when the commit callback it served confirmed the commit.
  p.commit(false);
  const auto until = std::chrono::steady_clock::now() + p.o.drain_timeout;
  auto retry_at = std::chrono::steady_clock::now() + std::chrono::milliseconds{500};
  while (p.commit_unconfirmed() && !p.fatal && std::chrono::steady_clock::now() < until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    std::unique_ptr<RdKafka::Message> m(p.c->consume(int(std::clamp<std::int64_t>(left.count(), 0, 10))));
    p.drain_acks();
    if (std::chrono::steady_clock::now() < retry_at) continue;
    retry_at = std::chrono::steady_clock::now() + std::chrono::milliseconds{500};
    p.commit(false);
  }
  p.commit_given_up = p.commit_unconfirmed();
  // A partition whose done offsets are still not committed: the run reports it (a restart
  // reads those records again). Retained: revoked by a rebalance not completed since.
  // Lost or revoked meanwhile: left_behind.
  if (!p.fatal) {
    auto behind = std::move(p.left_behind);
    for (const auto* m : {&p.parts, &p.retained})
      for (const auto& [pid, t] : *m)
        if (t.unconfirmed()) behind.push_back(p.short_of(t, m == &p.retained ? "revoked" : nullptr));
    if (!behind.empty()) {
      std::string list;
      for (const auto& b : behind) list += (list.empty() ? "" : ", ") + b;
      p.err = "kafka_source: group '" + p.o.group + "': final offset commit not confirmed within drain_timeout (" +
              std::to_string(p.o.drain_timeout.count()) + " ms): " +
              (p.last_commit_error.empty() ? "no reply" : p.last_commit_error) +
              "; committed offsets stay behind for " + list + "; a restart reads those records again";
    }
  }
  // Leave the group only when every split of this source committed: an early leave would
  // start a rebalance that revokes the others' partitions before their final commit.
  p.topics->committed([impl = p_] {
    impl->unpublish();
    impl->c->close();  // leaves the group (revoke callback commits again: nothing new)
    impl->stats->assigned.fetch_sub(std::min<std::uint64_t>(impl->parts.size(), impl->stats->assigned.load()),
                                    std::memory_order_relaxed);
    impl->parts.clear();
    impl->count_behind();
  });
}

const std::string& split_core::error() const noexcept { return p_->err; }

}  // namespace rill::kafka_detail

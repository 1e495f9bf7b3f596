// kafka_common.hpp (private to connectors/src) — what kafka_source.cpp and kafka_sink.cpp
// share: setting a librdkafka property, the bounded wait for a broker at start, a split's
// view of its consumer, and the exactly-once link between a source and its
// transactional sink (docs/design.md "Exactly-once").
// Thread safety: set_config and wait_for_broker run on the thread constructing a source
// split or a sink; split_view and txn_link say their own.
#pragma once

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rill::kafka_detail {

/// Sets property k=v on `c`. Throws std::invalid_argument("<who>: config k=v: <librdkafka's
/// reason>") for an unknown property or a bad value.
inline void set_config(RdKafka::Conf& c, const char* who, const std::string& k, const std::string& v) {
  std::string err;
  if (c.set(k, v, err) != RdKafka::Conf::CONF_OK)
    throw std::invalid_argument(std::string(who) + ": config " + k + "=" + v + ": " + err);
}

/// Bounded wait for a broker (an unreachable broker at start gives a clear error after a
/// bounded wait, not a hang): one metadata request for all topics, waiting up to
/// `timeout`. Returns the cluster's metadata. Throws std::runtime_error("<who>: no broker
/// of '<brokers>' answered within <timeout> ms: <librdkafka's error>") when none answers.
inline std::unique_ptr<RdKafka::Metadata> wait_for_broker(RdKafka::Handle& h, const char* who,
                                                         const std::string& brokers,
                                                         std::chrono::milliseconds timeout) {
  RdKafka::Metadata* md = nullptr;
  const auto e = h.metadata(true, nullptr, &md, int(timeout.count()));
  std::unique_ptr<RdKafka::Metadata> owner(md);
  if (e != RdKafka::ERR_NO_ERROR)
    throw std::runtime_error(std::string(who) + ": no broker of '" + brokers + "' answered within " +
                             std::to_string(timeout.count()) + " ms: " + RdKafka::err2str(e));
  return owner;
}

/// What threads other than the split's worker may read of one split (kafka_source::lag(),
/// the transactional sink's group metadata): the consumer handle while it is open, and
/// the partitions assigned, both under `mu`. The split's worker updates them in its
/// rebalance callbacks and nulls `rk` before the consumer closes, so a reader never uses
/// a closed or destroyed handle.
struct split_view {
  std::mutex mu;
  rd_kafka_t* rk = nullptr;
  std::vector<std::pair<std::string, std::int32_t>> assigned;
};

/// The exactly-once link of one kafka_source and the kafka_sink that commits its offsets
/// inside its transactions (docs/design.md "Exactly-once"). The splits publish, per
/// partition, the handed frontier H: the lowest offset some record derived from which has
/// not yet reached the sink (every lower offset's outputs are held by the sink or
/// produced). The sink's transaction thread reads H, releases the held outputs that a
/// consistent cut allows, and records what it committed. Everything under `mu`, except
/// `failed` (an atomic the data path reads).
struct txn_link {
  struct part {
    std::string topic;
    std::int32_t partition = -1;
    std::int64_t handed = -1;     ///< H; -1: nothing read yet
    std::int64_t committed = -1;  ///< last offset committed in a transaction; -1: none yet
    std::shared_ptr<split_view> owner;  ///< the split holding it (its group metadata)
  };
  std::mutex mu;
  std::condition_variable cv;  ///< commit requests and their completion, failure
  std::unordered_map<std::int32_t, part> parts;  ///< by pid (kafka_source.hpp)
  bool sink_attached = false;
  std::string transactional_id;
  std::atomic<bool> failed{false};
  std::string error;                          ///< why, once failed
  std::uint64_t requested = 0, done = 0;      ///< final-commit requests and the last served
  bool sink_gone = false;

  /// The first failure wins; wakes every waiter. Any thread.
  void fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> g(mu);
      if (failed.load(std::memory_order_relaxed)) return;
      error = why;
      failed.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }
  std::string why() {
    std::lock_guard<std::mutex> g(mu);
    return error;
  }
  /// Asks the sink for a commit covering everything handed so far and waits for it, up
  /// to `timeout`. true when it was committed. Blocks the caller (a split's close).
  bool commit_and_wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> g(mu);
    const auto n = ++requested;
    cv.notify_all();
    cv.wait_for(g, timeout, [&] { return done >= n || failed.load() || sink_gone; });
    return done >= n;
  }
};

}  // namespace rill::kafka_detail

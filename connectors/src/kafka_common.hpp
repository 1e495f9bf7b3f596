// kafka_common.hpp (private to connectors/src) — what kafka_source.cpp and kafka_sink.cpp
// share: setting a librdkafka property, and the bounded wait for a broker at start.
// Thread safety: both run on the thread constructing a source split or a sink.
#pragma once

#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

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

}  // namespace rill::kafka_detail

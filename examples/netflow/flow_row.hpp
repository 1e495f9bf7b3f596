// flow_row.hpp — netflow's output row, shared by the file mode (netflow.cpp) and the Kafka
// mode (kafka_mode.cpp): one conversation's packets and bytes in one tumbling window, its
// per-window counting, and its JSON line.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <rill/rill.hpp>

namespace netflow {

struct flow_row {
  rill::event_time window_start, window_end;
  rill::flow_key key;
  std::uint64_t packets = 0, bytes = 0;
  // --enrich: IANA service name of the conversation's lower port, and each address's
  // IANA special-purpose class (enrichment service; null when unknown or not asked).
  nlohmann::json service, a_class, b_class;
};

/// Packets and bytes (wire length) per conversation key of one window, in first-seen
/// order (the ordered_sink sorts rows by key).
inline std::vector<flow_row> count_conversations(rill::window<rill::packet>&& w) {
  std::unordered_map<rill::flow_key, std::size_t> index;  // key -> position in rows
  std::vector<flow_row> rows;
  for (const auto& r : w.records) {
    auto [it, fresh] = index.try_emplace(r.value.key, rows.size());
    if (fresh) rows.push_back({w.start, w.end, r.value.key, 0, 0});
    auto& row = rows[it->second];
    ++row.packets;
    row.bytes += r.value.wire_len;
  }
  return rows;
}

/// The JSON line: window_start_ns, window_end_ns, proto, a_ip, a_port, b_ip, b_port,
/// packets, bytes (ports null when the key has none), plus service/a_class/b_class when
/// `enriched`.
inline std::string row_json(const flow_row& r, bool enriched = false) {
  auto port = [](const std::optional<std::uint16_t>& p) {
    return p ? nlohmann::json(*p) : nlohmann::json(nullptr);
  };
  nlohmann::ordered_json j = {{"window_start_ns", r.window_start.time_since_epoch().count()},
                              {"window_end_ns", r.window_end.time_since_epoch().count()},
                              {"proto", rill::to_string(r.key.proto)},
                              {"a_ip", r.key.a_ip_string()},
                              {"a_port", port(r.key.a_port)},
                              {"b_ip", r.key.b_ip_string()},
                              {"b_port", port(r.key.b_port)},
                              {"packets", r.packets},
                              {"bytes", r.bytes}};
  if (enriched) {
    j["service"] = r.service;
    j["a_class"] = r.a_class;
    j["b_class"] = r.b_class;
  }
  return j.dump();
}

}  // namespace netflow

// fuzz_packet_codec: netflow's Kafka value decoder on any bytes. Every value it accepts is
// one encode() writes (encode(decode(v)) == v) and carries a key rill::decode can produce
// (flow_key's invariants); every refusal is std::invalid_argument, nothing else.
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "packet_codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view v(reinterpret_cast<const char*>(data), size);
  rill::packet p;
  try {
    p = netflow_kafka::decode(v);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (netflow_kafka::encode(p) != v) {
    std::fprintf(stderr, "invariant broken: accepted a value encode() does not write\n");
    std::abort();
  }
  const auto& k = p.key;
  if (k.proto != rill::ip_proto::non_ip &&
      rill::flow_key::make(k.proto, k.ip_version, k.a_addr, k.a_port, k.b_addr, k.b_port) != k) {
    std::fprintf(stderr, "invariant broken: accepted a key that is not direction-normalised\n");
    std::abort();
  }
  if (p.cap_len > p.wire_len) {
    std::fprintf(stderr, "invariant broken: accepted cap_len > wire_len\n");
    std::abort();
  }
  return 0;
}

// ipfix_export.hpp — netflow --ipfix HOST:PORT: flow rows as IPFIX (RFC 7011) over UDP,
// through libfixbuf, for a collector such as nfdump's nfcapd.
//
//   netflow::ipfix_exporter x{"127.0.0.1", "4739"};  // throws std::runtime_error
//   x.add(row);      // a flow_row: one uniflow record per direction that has packets
//   x.flush();       // sends what is buffered (netflow: at each window change, each
//                    // second, and at the end)
//   x.stats();       // records, messages, errors, first error
//
// Records: two uniflow records per conversation and window (one per direction with
// packets; RFC 7011 Data Records), not one RFC 5103 biflow record: every collector reads
// IANA elements, while the reverse elements of a biflow are enterprise-specific (PEN
// 29305) and a collector may drop them. Elements (IANA "IPFIX Information Elements"):
// flowStartMilliseconds, flowEndMilliseconds (the conversation's first and last packet
// in the window, for both directions), packetDeltaCount, octetDeltaCount (wire bytes),
// sourceIPv4Address / destinationIPv4Address (template 256) or sourceIPv6Address /
// destinationIPv6Address (template 257), sourceTransportPort, destinationTransportPort
// (0 without ports), tcpControlBits, protocolIdentifier (6, 17, 1, 58; 255 for the
// protocols netflow keys as "other", whose number it does not keep).
//
// Templates: sent before the first record and again every `template_interval` (10 s by
// default) at the next add or flush: UDP export must resend them periodically (RFC 7011
// 8.4, 10.3.6), as a collector that starts late or lost a datagram has none. A message
// is sent when libfixbuf's buffer is full or on flush().
//
// Errors: construction throws std::runtime_error naming HOST:PORT and the reason (a name
// that does not resolve, libfixbuf's message); an append or send libfixbuf reports as
// failed is counted in stats().errors, the first message kept. UDP has no delivery report: libfixbuf 2.4 only logs a glib
// warning on stderr when the kernel answers ECONNREFUSED (no collector listening) and
// reports success, so those records are lost without an error here.
//
// Thread safety: add, flush and stats lock one mutex: any thread. add costs a memcpy into
// the message buffer, and a send(2) when the buffer is full.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "flow_row.hpp"

namespace netflow {

class ipfix_exporter {
 public:
  struct counters {
    std::uint64_t records = 0;   ///< uniflow Data Records appended
    std::uint64_t errors = 0;    ///< failed appends or sends
    std::string first_error;     ///< libfixbuf's message of the first
  };

  /// Checks that `host` and `service` (a port number) resolve (getaddrinfo; libfixbuf
  /// resolves them again when it first sends); sends nothing yet.
  ipfix_exporter(const std::string& host, const std::string& service,
                 std::chrono::steady_clock::duration template_interval = std::chrono::seconds{10});
  ~ipfix_exporter();
  ipfix_exporter(const ipfix_exporter&) = delete;
  ipfix_exporter& operator=(const ipfix_exporter&) = delete;

  /// Appends the row's records (a->b, then b->a; a direction without packets has none).
  void add(const flow_row& r);
  /// Sends the buffered message, if any.
  void flush();
  counters stats() const;

 private:
  struct impl;
  void fail(const char* what, void* gerror);
  void templates_if_due();
  std::unique_ptr<impl> p_;
  mutable std::mutex mu_;
  counters c_;
  std::chrono::steady_clock::duration template_interval_;
  std::chrono::steady_clock::time_point templates_sent_{};
  bool templates_ever_ = false;
};

}  // namespace netflow

// rill/connectors/pcap_filter.hpp — a capture filter: a BPF expression (pcap-filter(7),
// the syntax of tcpdump and tshark's capture filters) compiled by libpcap for one link
// type, matched against captured records.
//
// Defines:
//   rill::pcap_filter   compile(expression, linktype, snaplen) -> matches(bytes, wire_len)
//
// Example (compiled by tests/banner_examples.py):
//   auto f = rill::pcap_filter::compile("tcp port 80", 1 /*Ethernet*/, 262144);
//   std::array<std::byte, 60> frame{};            // not IP: "tcp port 80" says no
//   assert(!f.matches(frame, 60));
//   try {
//     rill::pcap_filter::compile("tcp port eighty", 1, 262144);
//   } catch (const rill::pcap_error& e) {        // pcap_errc::bad_filter
//     std::cerr << e.what() << '\n';              // names the expression, libpcap's reason
//   }
//
// The program is libpcap's pcap_compile (optimised, netmask unknown: "ip broadcast" is
// refused) on a pcap_open_dead handle of the link type and snapshot length, run with
// pcap_offline_filter: the same answer tcpdump -r gives for the record. pcap_reader and
// pcap_split_reader apply one to files; a live pcap_reader hands its expression to the
// kernel instead (pcap_setfilter, pcap_reader::set_filter).
//
// Errors: compile throws rill::pcap_error with pcap_errc::bad_filter; what() holds the
// expression, the link type and libpcap's message ("... syntax error", "unknown port
// 'eighty'"). matches() never throws.
//
// Thread safety: compile() from any thread (libpcap >= 1.8's pcap_compile is thread-safe).
// matches() is const and reads the program only: one object may be shared by threads.
// Movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "rill/connectors/pcap_reader.hpp"

namespace rill {

class pcap_filter {
 public:
  /// Compiles `expression` for captures of `linktype` (a DLT value, as pcap_reader::
  /// linktype gives) and snapshot length `snaplen` bytes. An empty expression matches
  /// every record (as in tcpdump).
  /// @throws pcap_error bad_filter naming the expression and libpcap's reason.
  static pcap_filter compile(const std::string& expression, int linktype, int snaplen);

  pcap_filter(pcap_filter&&) noexcept;
  pcap_filter& operator=(pcap_filter&&) noexcept;
  ~pcap_filter();

  /// Whether the record with captured bytes `data` and original length `wire_len` passes.
  /// O(program length), no allocation, noexcept.
  bool matches(std::span<const std::byte> data, std::uint32_t wire_len) const noexcept;

  /// The expression as given.
  const std::string& expression() const noexcept { return expression_; }

 private:
  struct program;
  pcap_filter(std::unique_ptr<program> p, std::string expression);
  std::unique_ptr<program> p_;
  std::string expression_;
};

}  // namespace rill

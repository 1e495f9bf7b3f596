// pcap_filter: libpcap's BPF compiler and interpreter behind an owning type. See
// pcap_filter.hpp.
#include "rill/connectors/pcap_filter.hpp"

#include <pcap/pcap.h>

#include <utility>

namespace rill {

struct pcap_filter::program {
  bpf_program code{};
  ~program() { ::pcap_freecode(&code); }
};

pcap_filter::pcap_filter(std::unique_ptr<program> p, std::string expression)
    : p_(std::move(p)), expression_(std::move(expression)) {}
pcap_filter::pcap_filter(pcap_filter&&) noexcept = default;
pcap_filter& pcap_filter::operator=(pcap_filter&&) noexcept = default;
pcap_filter::~pcap_filter() = default;

pcap_filter pcap_filter::compile(const std::string& expression, int linktype, int snaplen) {
  // pcap_compile reports its errors on a handle: a dead one of the capture's link type.
  std::unique_ptr<pcap_t, void (*)(pcap_t*)> dead{::pcap_open_dead(linktype, snaplen),
                                                  ::pcap_close};
  const char* name = ::pcap_datalink_val_to_name(linktype);
  const std::string filter = "capture filter \"" + expression + "\" for link type " +
                             std::to_string(linktype) + " (" + (name ? name : "unknown") + ")";
  if (!dead) throw pcap_error(pcap_errc::bad_filter, "cannot compile " + filter);
  auto p = std::make_unique<program>();
  if (::pcap_compile(dead.get(), &p->code, expression.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0)
    throw pcap_error(pcap_errc::bad_filter, "bad " + filter + ": " + ::pcap_geterr(dead.get()));
  return pcap_filter(std::move(p), expression);
}

bool pcap_filter::matches(std::span<const std::byte> data, std::uint32_t wire_len) const noexcept {
  pcap_pkthdr h{};
  h.caplen = static_cast<bpf_u_int32>(data.size());
  h.len = wire_len;
  return ::pcap_offline_filter(&p_->code, &h, reinterpret_cast<const u_char*>(data.data())) != 0;
}

}  // namespace rill

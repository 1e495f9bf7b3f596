// ipfix_export.cpp — netflow's IPFIX export with libfixbuf. See ipfix_export.hpp.
#include "ipfix_export.hpp"

#include <fixbuf/public.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace netflow {
namespace {

constexpr std::uint16_t tid_v4 = 256, tid_v6 = 257;

// The in-memory records, laid out as their templates list the elements: libfixbuf reads
// them at consecutive offsets, so no member may be preceded by padding.
struct record_v4 {
  std::uint64_t flowStartMilliseconds, flowEndMilliseconds, packetDeltaCount, octetDeltaCount;
  std::uint32_t sourceIPv4Address, destinationIPv4Address;  // host byte order (fixbuf's rule)
  std::uint16_t sourceTransportPort, destinationTransportPort, tcpControlBits;
  std::uint8_t protocolIdentifier;
};
struct record_v6 {
  std::uint64_t flowStartMilliseconds, flowEndMilliseconds, packetDeltaCount, octetDeltaCount;
  std::uint8_t sourceIPv6Address[16], destinationIPv6Address[16];  // network byte order
  std::uint16_t sourceTransportPort, destinationTransportPort, tcpControlBits;
  std::uint8_t protocolIdentifier;
};
static_assert(offsetof(record_v4, protocolIdentifier) == 46, "record_v4 must match spec_v4 without gaps");
static_assert(offsetof(record_v6, protocolIdentifier) == 70, "record_v6 must match spec_v6 without gaps");

fbInfoElementSpec_t spec_v4[] = {
    {const_cast<char*>("flowStartMilliseconds"), 8, 0},   {const_cast<char*>("flowEndMilliseconds"), 8, 0},
    {const_cast<char*>("packetDeltaCount"), 8, 0},        {const_cast<char*>("octetDeltaCount"), 8, 0},
    {const_cast<char*>("sourceIPv4Address"), 4, 0},       {const_cast<char*>("destinationIPv4Address"), 4, 0},
    {const_cast<char*>("sourceTransportPort"), 2, 0},     {const_cast<char*>("destinationTransportPort"), 2, 0},
    {const_cast<char*>("tcpControlBits"), 2, 0},          {const_cast<char*>("protocolIdentifier"), 1, 0},
    FB_IESPEC_NULL};
fbInfoElementSpec_t spec_v6[] = {
    {const_cast<char*>("flowStartMilliseconds"), 8, 0},   {const_cast<char*>("flowEndMilliseconds"), 8, 0},
    {const_cast<char*>("packetDeltaCount"), 8, 0},        {const_cast<char*>("octetDeltaCount"), 8, 0},
    {const_cast<char*>("sourceIPv6Address"), 16, 0},      {const_cast<char*>("destinationIPv6Address"), 16, 0},
    {const_cast<char*>("sourceTransportPort"), 2, 0},     {const_cast<char*>("destinationTransportPort"), 2, 0},
    {const_cast<char*>("tcpControlBits"), 2, 0},          {const_cast<char*>("protocolIdentifier"), 1, 0},
    FB_IESPEC_NULL};

std::uint8_t protocol_number(rill::ip_proto p) {
  switch (p) {
    case rill::ip_proto::tcp:
      return 6;
    case rill::ip_proto::udp:
      return 17;
    case rill::ip_proto::icmp:
      return 1;
    case rill::ip_proto::icmpv6:
      return 58;
    default:
      return 255;
  }
}

std::uint64_t millis(rill::event_time t) {
  return std::uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}

std::string take_message(GError*& e) {
  std::string m = e ? e->message : "unknown libfixbuf error";
  g_clear_error(&e);
  return m;
}

}  // namespace

struct ipfix_exporter::impl {
  fbInfoModel_t* model = nullptr;
  fBuf_t* buf = nullptr;  // owns the session and the exporter
  fbConnSpec_t spec{};
  std::string host, service;
  ~impl() {
    if (buf) fBufFree(buf);
    if (model) fbInfoModelFree(model);
  }
};

ipfix_exporter::ipfix_exporter(const std::string& host, const std::string& service,
                               std::chrono::steady_clock::duration template_interval)
    : p_(std::make_unique<impl>()), template_interval_(template_interval) {
  p_->host = host;
  p_->service = service;
  const std::string where = "IPFIX export to " + host + ":" + service + ": ";
  // A name that does not resolve is a bad argument now, not a failed send per message.
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw std::runtime_error(where + ::gai_strerror(rc));
  ::freeaddrinfo(found);
  p_->model = fbInfoModelAlloc();
  fbSession_t* session = fbSessionAlloc(p_->model);
  GError* err = nullptr;
  for (auto [tid, spec] : {std::pair{tid_v4, spec_v4}, std::pair{tid_v6, spec_v6}}) {
    fbTemplate_t* t = fbTemplateAlloc(p_->model);
    if (!fbTemplateAppendSpecArray(t, spec, UINT32_MAX, &err)) {
      fbTemplateFreeUnused(t);
      fbSessionFree(session);
      throw std::runtime_error(where + take_message(err));
    }
    // The same template describes the record in memory (internal) and in the message.
    if (!fbSessionAddTemplate(session, TRUE, tid, t, &err) || !fbSessionAddTemplate(session, FALSE, tid, t, &err)) {
      fbSessionFree(session);
      throw std::runtime_error(where + take_message(err));
    }
  }
  p_->spec.transport = FB_UDP;
  p_->spec.host = p_->host.data();
  p_->spec.svc = p_->service.data();
  fbExporter_t* exporter = fbExporterAllocNet(&p_->spec);
  if (exporter == nullptr) {
    fbSessionFree(session);
    throw std::runtime_error(where + "cannot set up the UDP exporter");
  }
  p_->buf = fBufAllocForExport(session, exporter);
}

ipfix_exporter::~ipfix_exporter() = default;

void ipfix_exporter::fail(const char* what, void* gerror) {
  GError* e = static_cast<GError*>(gerror);
  const std::string m = std::string(what) + ": " + take_message(e);
  if (c_.errors++ == 0) c_.first_error = m;
}

void ipfix_exporter::templates_if_due() {
  const auto now = std::chrono::steady_clock::now();
  if (templates_ever_ && now - templates_sent_ < template_interval_) return;
  GError* err = nullptr;
  if (!fbSessionExportTemplates(fBufGetSession(p_->buf), &err)) fail("sending templates", err);
  templates_sent_ = now;
  templates_ever_ = true;
}

void ipfix_exporter::add(const flow_row& r) {
  std::lock_guard lk(mu_);
  templates_if_due();
  const std::uint8_t proto = protocol_number(r.key.proto);
  const std::uint16_t a_port = r.key.a_port.value_or(0), b_port = r.key.b_port.value_or(0);
  for (int dir = 0; dir < 2; ++dir) {
    const direction_counts& d = dir == 0 ? r.a_to_b : r.b_to_a;
    if (d.packets == 0) continue;
    const auto& src = dir == 0 ? r.key.a_addr : r.key.b_addr;
    const auto& dst = dir == 0 ? r.key.b_addr : r.key.a_addr;
    GError* err = nullptr;
    bool ok = false;
    auto fill = [&](auto& rec) {
      rec.flowStartMilliseconds = millis(r.first);
      rec.flowEndMilliseconds = millis(r.last);
      rec.packetDeltaCount = d.packets;
      rec.octetDeltaCount = d.bytes;
      rec.sourceTransportPort = dir == 0 ? a_port : b_port;
      rec.destinationTransportPort = dir == 0 ? b_port : a_port;
      rec.tcpControlBits = d.tcp_flags;
      rec.protocolIdentifier = proto;
    };
    if (r.key.ip_version == 4) {
      record_v4 rec{};
      fill(rec);
      rec.sourceIPv4Address = std::uint32_t(src[0]) << 24 | std::uint32_t(src[1]) << 16 | std::uint32_t(src[2]) << 8 | src[3];
      rec.destinationIPv4Address =
          std::uint32_t(dst[0]) << 24 | std::uint32_t(dst[1]) << 16 | std::uint32_t(dst[2]) << 8 | dst[3];
      ok = fBufSetInternalTemplate(p_->buf, tid_v4, &err) && fBufSetExportTemplate(p_->buf, tid_v4, &err) &&
           fBufAppend(p_->buf, reinterpret_cast<std::uint8_t*>(&rec), sizeof rec, &err);
    } else {
      record_v6 rec{};
      fill(rec);
      std::memcpy(rec.sourceIPv6Address, src.data(), 16);
      std::memcpy(rec.destinationIPv6Address, dst.data(), 16);
      ok = fBufSetInternalTemplate(p_->buf, tid_v6, &err) && fBufSetExportTemplate(p_->buf, tid_v6, &err) &&
           fBufAppend(p_->buf, reinterpret_cast<std::uint8_t*>(&rec), sizeof rec, &err);
    }
    if (ok) ++c_.records;
    else fail("appending a record", err);
  }
}

void ipfix_exporter::flush() {
  std::lock_guard lk(mu_);
  templates_if_due();
  GError* err = nullptr;
  if (!fBufEmit(p_->buf, &err)) fail("sending a message", err);
}

ipfix_exporter::counters ipfix_exporter::stats() const {
  std::lock_guard lk(mu_);
  return c_;
}

}  // namespace netflow

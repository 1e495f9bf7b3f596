// pcap_reader: libpcap behind a pull API that throws only at open. See pcap_reader.hpp.
#include "rill/connectors/pcap_reader.hpp"

#include "rill/connectors/pcap_filter.hpp"

#include <pcap/pcap.h>
#include <poll.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace rill {

namespace {

class pcap_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "pcap"; }
  std::string message(int ev) const override {
    switch (static_cast<pcap_errc>(ev)) {
      case pcap_errc::open_failed:
        return "cannot open capture";
      case pcap_errc::empty_file:
        return "empty capture file";
      case pcap_errc::not_a_capture:
        return "not a pcap or pcapng capture";
      case pcap_errc::unsupported_linktype:
        return "unsupported link type";
      case pcap_errc::truncated_record:
        return "capture ends inside a record";
      case pcap_errc::read_failed:
        return "cannot read capture record";
      case pcap_errc::live_open_failed:
        return "cannot open interface for capture";
      case pcap_errc::bad_filter:
        return "bad capture filter";
    }
    return "unknown pcap error";
  }
};

std::string linktype_text(int dlt) {
  const char* name = ::pcap_datalink_val_to_name(dlt);
  return std::to_string(dlt) + " (" + (name != nullptr ? name : "unknown") + ")";
}

}  // namespace

const std::error_category& pcap_category() noexcept {
  static const pcap_category_impl c;
  return c;
}

std::error_code make_error_code(pcap_errc e) noexcept {
  return {static_cast<int>(e), pcap_category()};
}

namespace {
// Whether reading `f` (a pipe) would find bytes now: some in the FILE's buffer (glibc's
// FILE keeps them between _IO_read_ptr and _IO_read_end, the fields gnulib's
// freadahead reads), or the pipe readable, hung up or in error (poll(2): fread then
// returns at once). A pipe with nothing written yet answers false, so that next() returns
// `again` instead of blocking in fread, where a stop request could not reach the reader
// until the writer wrote or closed. A record written in part still blocks until its
// last byte comes.
bool readable_now(std::FILE* f) noexcept {
  if (f->_IO_read_ptr < f->_IO_read_end) return true;
  pollfd p{::fileno(f), POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;
}
}  // namespace

struct pcap_reader::handle {
  pcap_t* p = nullptr;
  bool nano = true;  // timestamps' fractional part is ns (else µs)
  // Classic pcap: records are 16-byte header + caplen, so the next record's offset is
  // tracked here instead of asking the FILE* (ftell costs an lseek syscall per record).
  bool classic = false;
  std::int64_t next_offset = -1;
  // libpcap returns a record with caplen above the snapshot length cut to it (and skips
  // the rest in the file), so a record of exactly `snapshot` bytes asks the FILE* instead.
  std::uint32_t snapshot = 0;
  std::optional<pcap_filter> filter;  // files: run on every record in next()
  bool pipe = false;  // a FIFO or pipe, not a regular file: next() may have to wait for it
  ~handle() {
    if (p != nullptr) ::pcap_close(p);  // also closes the FILE* of offline captures
  }
};

pcap_reader::pcap_reader(std::unique_ptr<handle> h, std::string name, bool live)
    : h_(std::move(h)), name_(std::move(name)), live_(live) {}
pcap_reader::pcap_reader(pcap_reader&&) noexcept = default;
pcap_reader& pcap_reader::operator=(pcap_reader&&) noexcept = default;
pcap_reader::~pcap_reader() = default;

pcap_reader pcap_reader::open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    throw pcap_error(pcap_errc::open_failed,
                     "cannot open capture " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(::fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
    std::fclose(f);
    throw pcap_error(pcap_errc::open_failed,
                     "cannot open capture " + path + ": not a regular file");
  }
  if (S_ISREG(st.st_mode) && st.st_size == 0) {
    std::fclose(f);
    throw pcap_error(pcap_errc::empty_file, "empty capture file " + path + " (0 bytes)");
  }
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  auto h = std::make_unique<handle>();
  h->p = ::pcap_fopen_offline_with_tstamp_precision(f, PCAP_TSTAMP_PRECISION_NANO, errbuf);
  if (h->p == nullptr) {
    std::fclose(f);  // libpcap leaves the FILE* to us when it fails
    throw pcap_error(pcap_errc::not_a_capture,
                     path + " is not a pcap or pcapng capture: " + errbuf);
  }
  h->nano = ::pcap_get_tstamp_precision(h->p) == PCAP_TSTAMP_PRECISION_NANO;
  h->pipe = !S_ISREG(st.st_mode);
  h->next_offset = std::ftell(f);
  // A pipe has no position (ftell fails): a classic file's header is 24 bytes, and every
  // offset after it follows from the records' lengths.
  if (h->pipe && h->next_offset < 0 && ::pcap_major_version(h->p) == 2) h->next_offset = 24;
  h->classic = h->next_offset == 24 && ::pcap_major_version(h->p) == 2;
  h->snapshot = static_cast<std::uint32_t>(::pcap_snapshot(h->p));
  const int dlt = ::pcap_datalink(h->p);
  if (!is_supported_linktype(dlt)) {
    throw pcap_error(pcap_errc::unsupported_linktype,
                     "unsupported link type " + linktype_text(dlt) + " in " + path);
  }
  return pcap_reader(std::move(h), path, false);
}

pcap_reader pcap_reader::open_live(const std::string& interface) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  auto h = std::make_unique<handle>();
  h->p = ::pcap_create(interface.c_str(), errbuf);
  if (h->p == nullptr) {
    throw pcap_error(pcap_errc::live_open_failed,
                     "cannot capture on interface " + interface + ": " + errbuf);
  }
  ::pcap_set_snaplen(h->p, 262144);
  ::pcap_set_promisc(h->p, 0);
  ::pcap_set_immediate_mode(h->p, 1);
  ::pcap_set_timeout(h->p, 100);
  ::pcap_set_tstamp_precision(h->p, PCAP_TSTAMP_PRECISION_NANO);  // best effort
  const int rc = ::pcap_activate(h->p);
  if (rc < 0) {
    // libpcap's error text often is the status text itself ("No such device exists"):
    // print it once, with the error text only when it adds something.
    const std::string status = ::pcap_statustostr(rc);
    const std::string detail = ::pcap_geterr(h->p);
    throw pcap_error(pcap_errc::live_open_failed,
                     "cannot capture on interface " + interface + ": " + status +
                         (detail.empty() || detail == status ? "" : ": " + detail));
  }
  h->nano = ::pcap_get_tstamp_precision(h->p) == PCAP_TSTAMP_PRECISION_NANO;
  const int dlt = ::pcap_datalink(h->p);
  if (!is_supported_linktype(dlt)) {
    throw pcap_error(pcap_errc::unsupported_linktype,
                     "unsupported link type " + linktype_text(dlt) + " on interface " + interface);
  }
  if (::pcap_setnonblock(h->p, 1, errbuf) != 0) {
    throw pcap_error(pcap_errc::live_open_failed,
                     "cannot make interface " + interface + " non-blocking: " + errbuf);
  }
  return pcap_reader(std::move(h), interface, true);
}

void pcap_reader::set_filter(const std::string& expression) {
  if (!h_) return;
  if (!live_) {
    if (expression.empty()) h_->filter.reset();
    else
      h_->filter = pcap_filter::compile(expression, ::pcap_datalink(h_->p), ::pcap_snapshot(h_->p));
    return;
  }
  bpf_program code{};
  // Netmask unknown, as pcap_filter::compile: one expression means the same everywhere.
  if (::pcap_compile(h_->p, &code, expression.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
    const int dlt = ::pcap_datalink(h_->p);
    const char* name = ::pcap_datalink_val_to_name(dlt);
    throw pcap_error(pcap_errc::bad_filter,
                     "bad capture filter \"" + expression + "\" for link type " +
                         std::to_string(dlt) + " (" + (name ? name : "unknown") +
                         ") on interface " + name_ + ": " + ::pcap_geterr(h_->p));
  }
  const int rc = ::pcap_setfilter(h_->p, &code);
  ::pcap_freecode(&code);
  if (rc != 0)
    throw pcap_error(pcap_errc::bad_filter, "cannot set capture filter \"" + expression +
                                                "\" on interface " + name_ + ": " +
                                                ::pcap_geterr(h_->p));
}

int pcap_reader::linktype() const noexcept { return h_ ? ::pcap_datalink(h_->p) : -1; }

int pcap_reader::snapshot() const noexcept { return h_ ? ::pcap_snapshot(h_->p) : -1; }

bool pcap_reader::seek(std::int64_t offset) noexcept {
  if (!h_ || live_ || !h_->classic || offset < 0) return false;
  if (::fseeko(::pcap_file(h_->p), static_cast<off_t>(offset), SEEK_SET) != 0) return false;
  h_->next_offset = offset;
  return true;
}

int pcap_reader::selectable_fd() const noexcept {
  if (!h_) return -1;
  if (live_) return ::pcap_get_selectable_fd(h_->p);
  return h_->pipe ? ::fileno(::pcap_file(h_->p)) : -1;
}

read_status pcap_reader::fail(pcap_errc code, std::string message) noexcept {
  done_ = true;
  last_error_ = code;
  ++counters_.errors;
  error_message_ = std::move(message);
  return read_status::error;
}

read_status pcap_reader::next(pcap_record& out) noexcept {
  for (;;) {
    const read_status s = next_unfiltered(out);
    if (s != read_status::ok || !h_->filter || h_->filter->matches(out.data, out.wire_len))
      return s;
    --counters_.records;
    ++counters_.filtered;
  }
}

read_status pcap_reader::next_unfiltered(pcap_record& out) noexcept {
  if (done_ || !h_) return last_error_ ? read_status::error : read_status::end_of_file;
  if (h_->pipe && !readable_now(::pcap_file(h_->p))) return read_status::again;
  std::int64_t offset = -1;
  if (!live_) offset = h_->classic ? h_->next_offset : std::ftell(::pcap_file(h_->p));
  pcap_pkthdr* hdr = nullptr;
  const u_char* bytes = nullptr;
  const int rc = ::pcap_next_ex(h_->p, &hdr, &bytes);
  if (rc == 1) {
    const std::int64_t frac = h_->nano ? hdr->ts.tv_usec : std::int64_t{hdr->ts.tv_usec} * 1000;
    // Classic pcap stores seconds as an unsigned 32-bit field (valid to 2106); libpcap
    // hands them over sign-extended, so times after 2038-01-19 would come out negative.
    std::int64_t sec = hdr->ts.tv_sec;
    if (h_->classic && sec < 0) sec += std::int64_t{1} << 32;
    // pcapng stores 64-bit timestamps: past 2262-04-11T23:47:16.854775807Z their ns do not
    // fit rill::event_time (and libpcap's time_t goes negative past 2^63 s).
    constexpr std::int64_t max_ns = std::numeric_limits<std::int64_t>::max();
    // The fraction is signed (libpcap sign-extends a classic pcap's 32-bit field, as
    // pcap_split_reader does) and may exceed 1 s: it carries, either way.
    const bool fits = sec >= 0 && sec <= (frac >= 0 ? (max_ns - frac) : max_ns) / 1'000'000'000;
    if (!fits) {
      return fail(pcap_errc::read_failed,
                  name_ + ": record at byte offset " + std::to_string(offset) + ": timestamp " +
                      std::to_string(sec) + " s " + std::to_string(frac) +
                      " ns is outside 1970-01-01..2262-04-11T23:47:16Z, the range of rill::event_time "
                      "(int64 ns since the epoch)");
    }
    out.time = event_time{std::chrono::nanoseconds{sec * 1'000'000'000 + frac}};
    out.cap_len = hdr->caplen;
    out.wire_len = hdr->len;
    out.file_offset = offset;
    if (h_->classic) {
      // At the snapshot length the record may have been longer (libpcap skipped the rest):
      // ask the FILE*; a pipe cannot say, so its offsets are unknown (-1) from there on.
      if (hdr->caplen < h_->snapshot && h_->next_offset >= 0)
        h_->next_offset += 16 + std::int64_t{hdr->caplen};
      else
        h_->next_offset = h_->pipe ? -1 : std::int64_t{::ftello(::pcap_file(h_->p))};
    }
    out.data = {reinterpret_cast<const std::byte*>(bytes), hdr->caplen};
    ++counters_.records;
    return read_status::ok;
  }
  if (rc == 0) return read_status::again;  // live: nothing yet (non-blocking or timeout)
  if (rc == PCAP_ERROR_BREAK) {
    done_ = true;
    return read_status::end_of_file;
  }
  try {
    const std::string detail = ::pcap_geterr(h_->p);
    // libpcap: "truncated dump file; tried to read N captured bytes, only got M" (classic)
    // or "truncated pcapng dump file; ..." (pcapng).
    const bool cut = detail.find("truncated") != std::string::npos;
    std::string where = live_ ? "interface " + name_ : name_;
    if (offset >= 0) where += ": record at byte offset " + std::to_string(offset);
    return fail(
        cut ? pcap_errc::truncated_record : pcap_errc::read_failed,
        where + (cut ? " is cut off (file ends inside it): " : " cannot be read: ") + detail);
  } catch (...) {  // bad_alloc while formatting: still report the error
    return fail(pcap_errc::read_failed, {});
  }
}

read_status pcap_reader::next(packet& out) noexcept {
  pcap_record rec;
  const read_status s = next(rec);
  if (s != read_status::ok) return s;
  // Every supported link type was checked at open, so decode always answers.
  if (auto p = decode(::pcap_datalink(h_->p), rec.data, rec.wire_len, rec.time)) {
    out = *p;
  } else {
    out = packet{};
  }
  if (out.truncated || out.malformed) ++counters_.truncated;
  return s;
}

}  // namespace rill

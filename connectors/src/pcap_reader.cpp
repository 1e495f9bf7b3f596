// pcap_reader: libpcap behind a pull API that throws only at open. See pcap_reader.hpp.
#include "rill/connectors/pcap_reader.hpp"

#include "rill/connectors/pcap_filter.hpp"

#include <fcntl.h>
#include <pcap/pcap.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
// Above this, a record's or block's length is one libpcap refuses (pcapng blocks end at
// 16 MiB, classic records at the link type's snapshot length): no reason to wait for it.
constexpr std::size_t max_unit_bytes = std::size_t{16} << 20;

std::uint32_t load32(const unsigned char* b, bool big) noexcept {
  return big ? std::uint32_t{b[0]} << 24 | std::uint32_t{b[1]} << 16 | std::uint32_t{b[2]} << 8 | b[3]
             : std::uint32_t{b[3]} << 24 | std::uint32_t{b[2]} << 16 | std::uint32_t{b[1]} << 8 | b[0];
}

// A FIFO or pipe input. Its descriptor is O_NONBLOCK, so neither opening it (no writer
// yet) nor reading it ever waits; its bytes go into `buf`, and libpcap reads them through
// a fopencookie FILE* that hands out bytes only up to `limit`. next() moves `limit` to the
// end of the next unit (the capture's header up to its first interface description, or
// one record: classic 16-byte header + caplen; pcapng, the blocks up to and including the
// next packet block) only once all of it is in `buf`, or to the end of `buf` once the
// writer has closed. So libpcap never asks for a byte that has not come: a writer that
// stops anywhere (before opening the FIFO, inside the header, inside a record) leaves
// next() returning `again`, and a stop request reaches the reader's worker.
struct pipe_input {
  int fd = -1;
  std::vector<unsigned char> buf;
  std::size_t pos = 0;        // next byte handed to libpcap
  std::size_t limit = 0;      // libpcap gets bytes [pos, limit)
  std::int64_t consumed = 0;  // bytes handed to libpcap since the start (the byte offset of pos)
  bool header_done = false;   // libpcap has read the header (pcap_fopen_offline succeeded)
  bool pcapng = false;
  bool big_endian = false;    // the capture's byte order (known once 12 bytes have come)
  bool eof = false;           // the writer has closed (having opened the FIFO)

  ~pipe_input() {
    if (fd >= 0) ::close(fd);
  }
  std::size_t available() const noexcept { return buf.size() - pos; }

  // Bytes from pos that the next unit takes: <= available() when all of it is there, else
  // a number above available() (the unit's size when known).
  std::size_t unit_size() const noexcept {
    const unsigned char* b = buf.data() + pos;
    const std::size_t n = available();
    if (!header_done) {
      if (n < 4) return 4;
      if (!(b[0] == 0x0a && b[1] == 0x0d && b[2] == 0x0d && b[3] == 0x0a)) return 24;  // classic
      if (n < 12) return 12;
      const bool big = b[8] == 0x1a;  // the section's byte-order magic 0x1A2B3C4D
      return blocks_through(b, n, big, [](std::uint32_t type) { return type == 1; });  // IDB
    }
    if (pcapng)  // a packet block: EPB (6), SPB (3), or the obsolete PB (2)
      return blocks_through(b, n, big_endian, [](std::uint32_t t) { return t == 6 || t == 3 || t == 2; });
    if (n < 16) return 16;
    const std::size_t caplen = load32(b + 8, big_endian);
    return caplen > max_unit_bytes ? n : 16 + caplen;  // too long: libpcap refuses its header
  }

  // Bytes from the start of `b` up to the end of the first block whose type `stop` accepts.
  template <class Stop>
  static std::size_t blocks_through(const unsigned char* b, std::size_t n, bool big, Stop stop) noexcept {
    std::size_t at = 0;
    for (;;) {
      if (n - at < 8) return at + 8;
      const std::uint32_t type = load32(b + at, big), len = load32(b + at + 4, big);
      if (len < 12 || len > max_unit_bytes) return n;  // libpcap refuses it: let it say why
      if (n - at < len) return at + len;
      at += len;
      if (stop(type)) return at;
    }
  }

  // Reads what the pipe holds now, until the next unit is whole, without waiting. False
  // on a read error (errno says which).
  bool fill() noexcept {
    if (eof) return true;
    if (pos > 0) {  // libpcap has read everything before pos: drop it
      buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(pos));
      limit -= pos;
      pos = 0;
    }
    for (std::size_t unit; (unit = unit_size()) > available();) {
      const std::size_t old = buf.size();
      try {
        buf.resize(old + std::max<std::size_t>(64 * 1024, unit - available()));
      } catch (...) {
        buf.resize(old);
        errno = ENOMEM;
        return false;
      }
      const ssize_t got = ::read(fd, buf.data() + old, buf.size() - old);
      buf.resize(old + static_cast<std::size_t>(std::max<ssize_t>(got, 0)));
      if (got > 0) continue;
      if (got < 0) return errno == EAGAIN || errno == EINTR;  // the writer is still there
      // read() answers 0 both before any writer opened the FIFO and after the last one
      // closed it; poll(2) says POLLHUP only for the second (and POLLIN if a writer has
      // come and written since).
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) < 0) return errno == EINTR;
      if ((p.revents & POLLIN) != 0) continue;
      eof = (p.revents & POLLHUP) != 0;
      return true;
    }
    return true;
  }

  // libpcap's read function (fopencookie): the bytes before `limit`, then end of file.
  static ssize_t read_for_libpcap(void* cookie, char* out, std::size_t size) noexcept {
    auto* in = static_cast<pipe_input*>(cookie);
    const std::size_t n = std::min(size, in->limit - in->pos);
    std::memcpy(out, in->buf.data() + in->pos, n);
    in->pos += n;
    in->consumed += static_cast<std::int64_t>(n);
    return static_cast<ssize_t>(n);
  }
};
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
  std::optional<std::string> pending_filter;  // set_filter before a pipe's header came
  std::unique_ptr<pipe_input> pipe;           // a FIFO or pipe, not a regular file
  ~handle() {
    if (p != nullptr) ::pcap_close(p);  // also closes the FILE* of offline captures
  }
  // Hands the capture stream `f` to libpcap, which reads its header (a file's at open(), a
  // pipe's at its first next()), and checks the link type; sets p, nano and snapshot. The
  // error (code, message naming `name`), if any; f then belongs to p, or is closed.
  std::optional<std::pair<pcap_errc, std::string>> adopt(std::FILE* f, const std::string& name) {
    char errbuf[PCAP_ERRBUF_SIZE] = {};
    p = ::pcap_fopen_offline_with_tstamp_precision(f, PCAP_TSTAMP_PRECISION_NANO, errbuf);
    if (p == nullptr) {
      std::fclose(f);  // libpcap leaves the FILE* to us when it fails
      return std::pair{pcap_errc::not_a_capture, name + " is not a pcap or pcapng capture: " + errbuf};
    }
    nano = ::pcap_get_tstamp_precision(p) == PCAP_TSTAMP_PRECISION_NANO;
    snapshot = static_cast<std::uint32_t>(::pcap_snapshot(p));
    const int dlt = ::pcap_datalink(p);
    if (!is_supported_linktype(dlt))
      return std::pair{pcap_errc::unsupported_linktype, "unsupported link type " + linktype_text(dlt) + " in " + name};
    return std::nullopt;
  }
};

pcap_reader::pcap_reader(std::unique_ptr<handle> h, std::string name, bool live)
    : h_(std::move(h)), name_(std::move(name)), live_(live) {}
pcap_reader::pcap_reader(pcap_reader&&) noexcept = default;
pcap_reader& pcap_reader::operator=(pcap_reader&&) noexcept = default;
pcap_reader::~pcap_reader() = default;

pcap_reader pcap_reader::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO that no writer has opened yet does not wait for one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw pcap_error(pcap_errc::open_failed,
                     "cannot open capture " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw pcap_error(pcap_errc::open_failed,
                     "cannot open capture " + path + ": not a regular file");
  }
  if (S_ISREG(st.st_mode) && st.st_size == 0) {
    ::close(fd);
    throw pcap_error(pcap_errc::empty_file, "empty capture file " + path + " (0 bytes)");
  }
  if (!S_ISREG(st.st_mode)) {  // a FIFO or pipe: the header is read by next(), see pipe_input
    auto h = std::make_unique<handle>();
    h->pipe = std::make_unique<pipe_input>();
    h->pipe->fd = fd;
    return pcap_reader(std::move(h), path, false);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE* f = ::fdopen(fd, "rb");
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    throw pcap_error(pcap_errc::open_failed,
                     "cannot open capture " + path + ": " + std::strerror(err));
  }
  auto h = std::make_unique<handle>();
  if (auto e = h->adopt(f, path)) throw pcap_error(e->first, e->second);
  h->next_offset = std::ftell(f);
  h->classic = h->next_offset == 24 && ::pcap_major_version(h->p) == 2;
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
  if (!live_ && h_->p == nullptr) {  // a pipe whose header has not come: next() compiles it
    h_->pending_filter = expression;
    return;
  }
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

int pcap_reader::linktype() const noexcept { return h_ && h_->p ? ::pcap_datalink(h_->p) : -1; }

int pcap_reader::snapshot() const noexcept { return h_ && h_->p ? ::pcap_snapshot(h_->p) : -1; }

bool pcap_reader::seek(std::int64_t offset) noexcept {
  if (!h_ || live_ || h_->pipe || !h_->classic || offset < 0) return false;
  if (::fseeko(::pcap_file(h_->p), static_cast<off_t>(offset), SEEK_SET) != 0) return false;
  h_->next_offset = offset;
  return true;
}

int pcap_reader::selectable_fd() const noexcept {
  if (!h_) return -1;
  if (live_) return ::pcap_get_selectable_fd(h_->p);
  return h_->pipe ? h_->pipe->fd : -1;
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

read_status pcap_reader::start_pipe() noexcept {
  pipe_input& in = *h_->pipe;
  try {
    if (in.eof && in.available() == 0 && in.consumed == 0)
      return fail(pcap_errc::empty_file, "empty capture file " + name_ + " (0 bytes)");
    const unsigned char* b = in.buf.data() + in.pos;
    in.pcapng = in.available() >= 4 && b[0] == 0x0a && b[1] == 0x0d && b[2] == 0x0d && b[3] == 0x0a;
    in.big_endian = in.available() >= 12 && (in.pcapng ? b[8] == 0x1a : b[0] == 0xa1);
    std::FILE* f = ::fopencookie(&in, "rb", {&pipe_input::read_for_libpcap, nullptr, nullptr, nullptr});
    if (f == nullptr) return fail(pcap_errc::read_failed, name_ + ": " + std::strerror(errno));
    if (auto e = h_->adopt(f, name_)) return fail(e->first, std::move(e->second));
    in.header_done = true;
    h_->classic = ::pcap_major_version(h_->p) == 2;
    if (h_->pending_filter) {
      const std::string expression = *std::exchange(h_->pending_filter, std::nullopt);
      set_filter(expression);
    }
    return read_status::ok;
  } catch (const pcap_error& e) {  // set_filter: bad_filter
    return fail(pcap_errc::bad_filter, e.what());
  } catch (...) {  // bad_alloc while formatting: still report the error
    return fail(pcap_errc::read_failed, {});
  }
}

read_status pcap_reader::next_unfiltered(pcap_record& out) noexcept {
  if (done_ || !h_) return last_error_ ? read_status::error : read_status::end_of_file;
  std::int64_t offset = -1;
  if (h_->pipe) {
    pipe_input& in = *h_->pipe;
    std::size_t unit = in.unit_size();
    if (unit > in.available()) {
      if (!in.fill()) {
        const int err = errno;
        try {
          return fail(pcap_errc::read_failed, name_ + ": byte offset " +
                                                  std::to_string(in.consumed + std::int64_t(in.available())) +
                                                  " cannot be read: " + std::strerror(err));
        } catch (...) {
          return fail(pcap_errc::read_failed, {});
        }
      }
      unit = in.unit_size();  // fill() may have dropped the bytes before pos
      if (unit > in.available() && !in.eof) return read_status::again;
      if (in.eof && in.available() == 0 && in.header_done) {  // ends between records
        done_ = true;
        return read_status::end_of_file;
      }
    }
    // The next unit is whole, or the writer has closed: libpcap reads to the end of what
    // came and says where the capture stops.
    in.limit = unit <= in.available() ? in.pos + unit : in.buf.size();
    if (!in.header_done) {
      if (const read_status s = start_pipe(); s != read_status::ok) return s;
      return next_unfiltered(out);  // the first record
    }
    offset = in.consumed;
  } else if (!live_) {
    offset = h_->classic ? h_->next_offset : std::ftell(::pcap_file(h_->p));
  }
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
    if (h_->classic && !h_->pipe) {
      // At the snapshot length the record may have been longer (libpcap skipped the rest):
      // ask the FILE*.
      if (hdr->caplen < h_->snapshot && h_->next_offset >= 0)
        h_->next_offset += 16 + std::int64_t{hdr->caplen};
      else
        h_->next_offset = std::int64_t{::ftello(::pcap_file(h_->p))};
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

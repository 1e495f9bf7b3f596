// pcap_split_reader: a memory-mapped walk over classic pcap records, decoding one split's
// chunks. See pcap_split_reader.hpp.
#include "rill/connectors/pcap_split_reader.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <span>
#include <stdexcept>
#include <utility>

namespace rill {

namespace {

constexpr std::size_t file_header_bytes = 24;
constexpr std::size_t record_header_bytes = 16;

// The classic pcap header (tcpdump.org "pcap file format", libpcap sf-pcap.c): magic,
// version 2.4. False for anything libpcap reads with other rules (older versions swap
// caplen and len; the modified format has 24-byte record headers).
bool classic_24(const unsigned char* h, bool& swapped, bool& nano) noexcept {
  std::uint32_t magic = 0;
  std::uint16_t major = 0, minor = 0;
  std::memcpy(&magic, h, 4);
  std::memcpy(&major, h + 4, 2);
  std::memcpy(&minor, h + 6, 2);
  switch (magic) {
    case 0xa1b2c3d4:
      swapped = false, nano = false;
      break;
    case 0xd4c3b2a1:
      swapped = true, nano = false;
      break;
    case 0xa1b23c4d:
      swapped = false, nano = true;
      break;
    case 0x4d3cb2a1:
      swapped = true, nano = true;
      break;
    default:
      return false;
  }
  if (swapped) {
    major = __builtin_bswap16(major);
    minor = __builtin_bswap16(minor);
  }
  return major == 2 && minor == 4;
}

std::uint32_t load32(const std::byte* p, bool swapped) noexcept {
  std::uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return swapped ? __builtin_bswap32(v) : v;
}

}  // namespace

bool pcap_split_reader::splittable(const std::string& path) noexcept {
  struct stat st {};
  // stat first: opening a FIFO would wait for a writer.
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  unsigned char h[file_header_bytes] = {};
  bool swapped = false, nano = false;
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                  st.st_size >= static_cast<off_t>(file_header_bytes) &&
                  ::pread(fd, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
                  classic_24(h, swapped, nano);
  ::close(fd);
  return ok;
}

pcap_split_reader pcap_split_reader::open(const std::string& path, std::size_t split,
                                          std::size_t splits, std::size_t records_per_chunk) {
  if (splits == 0 || split >= splits || records_per_chunk == 0)
    throw std::invalid_argument("pcap_split_reader: split " + std::to_string(split) + " of " +
                                std::to_string(splits) + ", " + std::to_string(records_per_chunk) +
                                " records per chunk");
  pcap_reader probe = pcap_reader::open(path);  // every open error, with pcap_reader's text
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw pcap_error(pcap_errc::open_failed,
                     "cannot open capture " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size < static_cast<off_t>(file_header_bytes)) {
    ::close(fd);
    throw pcap_error(pcap_errc::open_failed,
                     "cannot map capture " + path + ": not a regular pcap file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (m == MAP_FAILED)
    throw pcap_error(pcap_errc::open_failed,
                     "cannot map capture " + path + ": " + std::strerror(err));
  ::madvise(m, size, MADV_SEQUENTIAL);  // a hint; read-ahead helps, failure does not matter
  pcap_split_reader r(std::move(probe), static_cast<const std::byte*>(m), size, split, splits,
                      records_per_chunk);
  if (!classic_24(reinterpret_cast<const unsigned char*>(r.map_), r.swapped_, r.nano_))
    throw pcap_error(pcap_errc::open_failed,
                     "cannot split capture " + path + ": not a classic pcap 2.4 file");
  return r;
}

pcap_split_reader::pcap_split_reader(pcap_reader probe, const std::byte* map, std::size_t size,
                                     std::size_t split, std::size_t splits,
                                     std::size_t records_per_chunk)
    : probe_(std::move(probe)),
      map_(map),
      size_(size),
      split_(split),
      splits_(splits),
      per_chunk_(records_per_chunk),
      linktype_(probe_.linktype()),
      snapshot_(static_cast<std::uint32_t>(probe_.snapshot())) {}

pcap_split_reader::pcap_split_reader(pcap_split_reader&& o) noexcept
    : probe_(std::move(o.probe_)),
      filter_(std::move(o.filter_)),
      map_(std::exchange(o.map_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      pos_(o.pos_),
      index_(o.index_),
      split_(o.split_),
      splits_(o.splits_),
      per_chunk_(o.per_chunk_),
      linktype_(o.linktype_),
      snapshot_(o.snapshot_),
      swapped_(o.swapped_),
      nano_(o.nano_),
      done_(o.done_),
      end_(o.end_),
      counters_(o.counters_) {}

pcap_split_reader& pcap_split_reader::operator=(pcap_split_reader&& o) noexcept {
  if (this != &o) {
    unmap();
    probe_ = std::move(o.probe_);
    filter_ = std::move(o.filter_);
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
    pos_ = o.pos_;
    index_ = o.index_;
    split_ = o.split_;
    splits_ = o.splits_;
    per_chunk_ = o.per_chunk_;
    linktype_ = o.linktype_;
    snapshot_ = o.snapshot_;
    swapped_ = o.swapped_;
    nano_ = o.nano_;
    done_ = o.done_;
    end_ = o.end_;
    counters_ = o.counters_;
  }
  return *this;
}

pcap_split_reader::~pcap_split_reader() { unmap(); }

void pcap_split_reader::unmap() noexcept {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), size_);
  map_ = nullptr;
}

// What the record at pos_ is: a plain record (caplen set), the clean end of the file, or
// one libpcap reads with its own rules (cut off, or caplen above the snapshot length).
pcap_split_reader::step pcap_split_reader::look(std::uint32_t& caplen) const noexcept {
  const std::size_t left = size_ - pos_;
  if (left == 0) return step::end;
  if (left < record_header_bytes) return step::special;
  caplen = load32(map_ + pos_ + 8, swapped_);
  if (caplen > snapshot_ || caplen > left - record_header_bytes) return step::special;
  return step::record;
}

// The record at pos_ read by libpcap. Owned: its packet (ok; `kept` false when the filter
// rejected it, then `out` is not set) or error. Not owned: ok when the file goes on after
// it (the packet is dropped), end_of_file when it ends there.
read_status pcap_split_reader::special(packet& out, bool owned, bool& kept) noexcept {
  done_ = true;
  end_ = read_status::end_of_file;
  kept = true;
  if (!probe_.seek(static_cast<std::int64_t>(pos_))) return end_;
  pcap_record rec;
  const read_status rs = probe_.next(rec);
  if (rs == read_status::ok) {
    // libpcap read all of it (and cut caplen to the snapshot length): header complete.
    pos_ += record_header_bytes + load32(map_ + pos_ + 8, swapped_);
    ++index_;
    done_ = false;
    if (owned) {
      if (filter_ && !filter_->matches(rec.data, rec.wire_len)) {
        ++counters_.filtered;
        kept = false;
        return rs;
      }
      if (auto p = decode(linktype_, rec.data, rec.wire_len, rec.time)) out = *p;
      else out = packet{};
      ++counters_.records;
      if (out.truncated || out.malformed) ++counters_.truncated;
    }
    return rs;
  }
  if (rs == read_status::error && owned) {
    end_ = read_status::error;
    ++counters_.errors;
  }
  return end_;
}

// Walks over one chunk of another split. False when the file ends inside it.
bool pcap_split_reader::skip_chunk() noexcept {
  for (std::size_t i = 0; i < per_chunk_; ++i) {
    std::uint32_t caplen = 0;
    switch (look(caplen)) {
      case step::record:
        pos_ += record_header_bytes + caplen;
        ++index_;
        break;
      case step::end:
        done_ = true;
        end_ = read_status::end_of_file;
        return false;
      case step::special: {
        packet dropped;
        bool kept = true;
        if (special(dropped, false, kept) != read_status::ok) return false;
        break;
      }
    }
  }
  return true;
}

void pcap_split_reader::set_filter(const std::string& expression) {
  if (expression.empty()) filter_.reset();
  else
    filter_ = std::make_unique<pcap_filter>(
        pcap_filter::compile(expression, linktype_, static_cast<int>(snapshot_)));
}

read_status pcap_split_reader::next(packet& out) noexcept {
  for (;;) {  // until a record the filter keeps, or the end
    if (done_) return end_;
    while (index_ % per_chunk_ == 0 && (index_ / per_chunk_) % splits_ != split_) {
      if (!skip_chunk()) return end_;
    }
    std::uint32_t caplen = 0;
    switch (look(caplen)) {
      case step::end:
        done_ = true;
        end_ = read_status::end_of_file;
        return end_;
      case step::special: {
        bool kept = true;
        const read_status rs = special(out, true, kept);
        if (rs == read_status::ok && !kept) continue;
        return rs;
      }
      case step::record:
        break;
    }
    // As pcap_reader::next: libpcap's fields are 32-bit signed (pcap_timeval), seconds read
    // back as unsigned (valid to 2106), the fraction sign-extended and scaled to ns.
    const std::byte* h = map_ + pos_;
    const std::uint32_t wire_len = load32(h + 12, swapped_);
    const std::span<const std::byte> data(h + record_header_bytes, caplen);
    pos_ += record_header_bytes + caplen;
    ++index_;
    if (filter_ && !filter_->matches(data, wire_len)) {
      ++counters_.filtered;
      continue;
    }
    const std::int64_t sec = load32(h, swapped_);
    const std::int64_t frac =
        std::int64_t{static_cast<std::int32_t>(load32(h + 4, swapped_))} * (nano_ ? 1 : 1000);
    const event_time t{std::chrono::nanoseconds{sec * 1'000'000'000 + frac}};
    if (auto p = decode(linktype_, data, wire_len, t)) {
      out = *p;
    } else {
      out = packet{};
    }
    if (out.truncated || out.malformed) ++counters_.truncated;
    ++counters_.records;
    return read_status::ok;
  }
}

}  // namespace rill

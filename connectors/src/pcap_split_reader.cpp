// pcap_split_reader: a memory-mapped walk over classic pcap records, decoding one split's
// chunks. See pcap_split_reader.hpp.
#include "rill/connectors/pcap_split_reader.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <span>
#include <stdexcept>
#include <utility>

namespace rill {

namespace {

constexpr std::size_t file_header_bytes = 24;
constexpr std::size_t record_header_bytes = 16;
// Unit in which the map is released once every reader passed it (a multiple of the page
// size, so each region starts on a page of the page-aligned map).
constexpr std::size_t region_bytes = std::size_t{8} << 20;
// How far ahead of a header walk prefetch_ahead() asks for lines (about 40 records of the
// 95-byte average of a 2 M-packet pcapgen capture; 1, 2, 4 and 8 KiB measured alike).
constexpr std::size_t prefetch_ahead_bytes = 4096;
// Headers walk_some() passes per record returned: the walk of a chunk of N records ends
// after N/4 of them.
constexpr std::size_t walk_steps = 4;

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

// A walk over record headers (walk_some, skip_chunk) at header `p`. Each header's
// address comes from the one before: without a hint every step waits for a line from
// memory. The two lines `prefetch_ahead_bytes` ahead are asked for meanwhile: one step
// moves 16 bytes plus a record, so with records up to 112 bytes every line the walk reads
// was asked for (a prefetch past the map's end or into an unmapped page does nothing).
inline void prefetch_ahead(const std::byte* p) noexcept {
  __builtin_prefetch(p + prefetch_ahead_bytes);
  __builtin_prefetch(p + prefetch_ahead_bytes + 64);
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

// One mapping of a capture and the byte offsets of its chunk boundaries, shared by the
// readers of one open()/open_splits(). start[c] is the offset of chunk c's first record
// header, 0 while no reader has walked chunk c - 1 to its end (chunk 0 starts at 24).
// Entries exist for the first `chunks` chunks only; later chunks are always walked.
// passed[r] counts the readers whose position passed region r (bytes [r*R, (r+1)*R) of
// the file, R = region_bytes); the reader that makes it `readers` unmaps the region.
struct pcap_split_reader::shared_file {
  const std::byte* map = nullptr;
  std::size_t size = 0;
  std::size_t chunks = 0;
  std::unique_ptr<std::atomic<std::size_t>[]> start;
  std::uint32_t readers = 1;
  std::unique_ptr<std::atomic<std::uint32_t>[]> passed;
  shared_file() = default;
  shared_file(const shared_file&) = delete;
  shared_file& operator=(const shared_file&) = delete;
  // Unmaps the regions no reader released. Only those: the address range of a released
  // region may hold another mapping by now.
  ~shared_file() {
    if (map == nullptr) return;
    for (std::size_t r = 0; r * region_bytes < size; ++r) {
      if (passed && passed[r].load(std::memory_order_acquire) == readers) continue;
      ::munmap(const_cast<std::byte*>(map) + r * region_bytes, std::min(region_bytes, size - r * region_bytes));
    }
  }
};

std::shared_ptr<pcap_split_reader::shared_file> pcap_split_reader::map_file(
    const std::string& path, std::size_t splits, std::size_t records_per_chunk) {
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
  auto f = std::make_shared<shared_file>();
  f->size = static_cast<std::size_t>(st.st_size);
  void* m = ::mmap(nullptr, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (m == MAP_FAILED)
    throw pcap_error(pcap_errc::open_failed,
                     "cannot map capture " + path + ": " + std::strerror(err));
  f->map = static_cast<const std::byte*>(m);
  ::madvise(m, f->size, MADV_SEQUENTIAL);  // a hint; read-ahead helps, failure does not matter
  f->readers = static_cast<std::uint32_t>(splits);
  f->passed = std::make_unique<std::atomic<std::uint32_t>[]>(f->size / region_bytes + 1);
  if (splits > 1) {
    // Every record takes at least its 16-byte header; the table stays below 2 MiB.
    constexpr std::size_t max_chunks = std::size_t{1} << 18;
    const std::size_t records = (f->size - file_header_bytes) / record_header_bytes;
    f->chunks = std::min(max_chunks, records / records_per_chunk + 2);
    f->start = std::make_unique<std::atomic<std::size_t>[]>(f->chunks);
  }
  return f;
}

pcap_split_reader pcap_split_reader::open(const std::string& path, std::size_t split,
                                          std::size_t splits, std::size_t records_per_chunk) {
  if (splits == 0 || split >= splits || records_per_chunk == 0)
    throw std::invalid_argument("pcap_split_reader: split " + std::to_string(split) + " of " +
                                std::to_string(splits) + ", " + std::to_string(records_per_chunk) +
                                " records per chunk");
  pcap_reader probe = pcap_reader::open(path);  // every open error, with pcap_reader's text
  auto file = map_file(path, 1, records_per_chunk);
  if (bool swapped = false, nano = false;
      !classic_24(reinterpret_cast<const unsigned char*>(file->map), swapped, nano))
    throw pcap_error(pcap_errc::open_failed,
                     "cannot split capture " + path + ": not a classic pcap 2.4 file");
  return pcap_split_reader(std::move(probe), std::move(file), split, splits, records_per_chunk);
}

std::vector<pcap_split_reader> pcap_split_reader::open_splits(const std::string& path,
                                                              std::size_t splits,
                                                              std::size_t records_per_chunk) {
  if (splits == 0 || records_per_chunk == 0)
    throw std::invalid_argument("pcap_split_reader: " + std::to_string(splits) + " splits, " +
                                std::to_string(records_per_chunk) + " records per chunk");
  std::vector<pcap_reader> probes;
  probes.reserve(splits);
  for (std::size_t i = 0; i < splits; ++i) probes.push_back(pcap_reader::open(path));
  auto file = map_file(path, splits, records_per_chunk);
  if (bool swapped = false, nano = false;
      !classic_24(reinterpret_cast<const unsigned char*>(file->map), swapped, nano))
    throw pcap_error(pcap_errc::open_failed,
                     "cannot split capture " + path + ": not a classic pcap 2.4 file");
  std::vector<pcap_split_reader> out;
  out.reserve(splits);
  for (std::size_t i = 0; i < splits; ++i) {
    out.push_back(pcap_split_reader(std::move(probes[i]), file, i, splits, records_per_chunk));
    out.back().shared_ = splits > 1;
  }
  return out;
}

pcap_split_reader::pcap_split_reader(pcap_reader probe, std::shared_ptr<shared_file> file,
                                     std::size_t split, std::size_t splits,
                                     std::size_t records_per_chunk)
    : probe_(std::move(probe)),
      file_(std::move(file)),
      map_(file_->map),
      size_(file_->size),
      split_(split),
      splits_(splits),
      per_chunk_(records_per_chunk),
      linktype_(probe_.linktype()),
      snapshot_(static_cast<std::uint32_t>(probe_.snapshot())) {
  classic_24(reinterpret_cast<const unsigned char*>(map_), swapped_, nano_);
}

pcap_split_reader::pcap_split_reader(pcap_split_reader&&) noexcept = default;
pcap_split_reader& pcap_split_reader::operator=(pcap_split_reader&&) noexcept = default;
pcap_split_reader::~pcap_split_reader() = default;

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

// Counts the regions of the map that pos_ passed since the last call; unmaps each one
// every reader of the map has passed (a reader never reads before its pos_ again), so
// the mapping is released during the read, on the workers, not all at once at the end.
void pcap_split_reader::release_passed() noexcept {
  while (pos_ >= (region_ + 1) * region_bytes) {
    if (file_->passed[region_].fetch_add(1, std::memory_order_acq_rel) + 1 == file_->readers)
      ::munmap(const_cast<std::byte*>(map_) + region_ * region_bytes, region_bytes);
    ++region_;
  }
}

// Passes over one chunk of another split: a jump when a reader published where the next
// chunk starts, else a walk over its headers (then published). False when the file ends
// inside it.
bool pcap_split_reader::skip_chunk() noexcept {
  const std::size_t next_chunk = index_ / per_chunk_ + 1;
  const bool indexed = next_chunk < file_->chunks;
  if (indexed) {
    if (const std::size_t at = file_->start[next_chunk].load(std::memory_order_acquire); at != 0) {
      pos_ = at;
      index_ += per_chunk_;
      return true;
    }
  }
  for (std::size_t i = 0; i < per_chunk_; ++i) {
    prefetch_ahead(map_ + pos_);  // as in walk_some()
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
  if (indexed) file_->start[next_chunk].store(pos_, std::memory_order_release);
  return true;
}

// At the first record of an own chunk: starts the walk over its headers that publishes
// where the next chunk starts, for the splits that skip this one (unless one of them
// published it already). walk_some() then passes `walk_steps` headers per record this
// split returns, so the walk ends a quarter into the chunk and its loads of the capture
// overlap the decoding instead of waiting alone (they also bring in the lines the decode
// reads next). Publishes nothing when the chunk holds a record libpcap reads with its own
// rules or the file ends inside it: the other splits then walk it themselves.
void pcap_split_reader::start_walk() noexcept {
  walk_left_ = 0;
  const std::size_t next_chunk = index_ / per_chunk_ + 1;
  if (next_chunk >= file_->chunks) return;
  if (file_->start[next_chunk].load(std::memory_order_relaxed) != 0) return;
  walk_pos_ = pos_;
  walk_left_ = per_chunk_;
  walk_chunk_ = next_chunk;
}

void pcap_split_reader::walk_some() noexcept {
  std::atomic<std::size_t>& slot = file_->start[walk_chunk_];
  if (slot.load(std::memory_order_relaxed) != 0) {  // a skipping split walked it
    walk_left_ = 0;
    return;
  }
  std::size_t p = walk_pos_;
  for (std::size_t n = std::min(walk_left_, walk_steps); n > 0; --n) {
    prefetch_ahead(map_ + p);
    const std::size_t left = size_ - p;
    const std::uint32_t caplen = left < record_header_bytes ? 0 : load32(map_ + p + 8, swapped_);
    if (left < record_header_bytes || caplen > snapshot_ || caplen > left - record_header_bytes) {
      walk_left_ = 0;  // the other splits walk this chunk themselves
      return;
    }
    p += record_header_bytes + caplen;
    --walk_left_;
  }
  walk_pos_ = p;
  if (walk_left_ == 0) slot.store(p, std::memory_order_release);
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
    if (pos_ >= (region_ + 1) * region_bytes) release_passed();
    if (index_ % per_chunk_ == 0) {
      while ((index_ / per_chunk_) % splits_ != split_) {
        if (!skip_chunk()) return end_;
      }
      if (shared_) start_walk();
    }
    if (walk_left_ != 0) walk_some();
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

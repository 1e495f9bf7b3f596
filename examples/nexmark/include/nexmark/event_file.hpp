// nexmark/event_file.hpp — NEXMark events on disk, so that every engine reads the same
// input: JSON lines in the Rust `nexmark` crate's format (serde_json of its Event enum:
// {"Bid":{"auction":1000,"bidder":1001,...}}, fields in schema order, times in ms) and a
// binary format that the queries read back with event_file_reader.
//
// Example (compiled by tests/banner_examples.py):
//   #include <nexmark/generator.hpp>
//   nexmark::generator gen;
//   std::string json, bin{nexmark::binary_magic};
//   for (int i = 0; i < 50; ++i) {
//     const nexmark::event e = gen.next();
//     nexmark::append_json_line(e, json);  // one line, '\n'-terminated
//     nexmark::append_binary(e, bin);
//   }
//   // write `bin` to a file, then: nexmark::event_file_reader r{"events.bin"};
//   //   nexmark::event e; while (r.next(e)) { ... }
//
// Binary format (little-endian): the 8 bytes of binary_magic, then one record per event:
// a kind byte (event_kind: 0 person, 1 auction, 2 bid), then the fields in the order of
// event.hpp; integers and times (ms since the epoch) as 8-byte unsigned, strings as a
// 4-byte length and that many bytes (at most max_string_bytes). Nothing else: no index,
// no trailer, so a file is cut off only between records or it is malformed.
//
// Thread safety: the functions are pure; a reader is used by one thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nexmark/event.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace nexmark {

/// First 8 bytes of a binary event file ("NEXMARK" and format version 1).
inline constexpr std::string_view binary_magic{"NEXMARK\x01", 8};

/// Longest string a binary record may hold; a longer length is a malformed file.
inline constexpr std::uint32_t max_string_bytes = 1u << 20;

/// Appends `e` as one JSON line (with '\n') to `out`, byte for byte as the crate's
/// `nexmark --format json` prints it (serde_json: fields in declaration order, strings
/// escaped as serde_json escapes them). Never throws but std::bad_alloc.
void append_json_line(const event& e, std::string& out);

/// Appends `e` as one binary record (format above) to `out`. Never throws but std::bad_alloc.
void append_binary(const event& e, std::string& out);

/// A binary event file that cannot be read: what() names the file, the byte offset and
/// the event index ("events.bin: truncated record at byte 1234 (event 17): ...").
class event_file_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Reads a binary event file front to back through a 1 MiB buffer.
class event_file_reader {
 public:
  /// Opens `path` and checks the magic. Throws event_file_error when the file cannot be
  /// opened (with the OS error), is shorter than the magic, or does not start with it.
  explicit event_file_reader(const std::filesystem::path& path);
  ~event_file_reader();
  event_file_reader(const event_file_reader&) = delete;
  event_file_reader& operator=(const event_file_reader&) = delete;

  /// Reads the next event into `out`; false at the end of the file (after a whole
  /// record). Throws event_file_error on a read error, a record cut off by the end of
  /// the file, an unknown kind byte or a string longer than max_string_bytes.
  bool next(event& out);

  /// Events read so far.
  std::uint64_t events_read() const noexcept { return events_; }
  /// Byte offset of the next record in the file.
  std::uint64_t offset() const noexcept { return file_offset_ + pos_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  bool fill(std::size_t need);
  [[noreturn]] void fail(std::uint64_t at, const std::string& what) const;
  std::uint64_t u64(std::uint64_t record_start);
  void str(std::uint64_t record_start, std::string& out);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::vector<char> buf_;
  std::size_t pos_ = 0, end_ = 0;  // unread bytes are buf_[pos_, end_)
  std::uint64_t file_offset_ = 0;  // file offset of buf_[0]
  std::uint64_t events_ = 0;
};

}  // namespace nexmark

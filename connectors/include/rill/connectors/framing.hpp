// rill/connectors/framing.hpp — how records are cut out of a TCP byte stream, and the
// per-connection hello that lets a receiver resynchronise after a broken connection.
//
// Defines:
//   rill::framing          fixed-size records, or records with a 4-byte length prefix
//   rill::frame_encoder    appends one framed record to a byte buffer
//   rill::frame_decoder    incremental: feed it any chunks, get back complete records
//   rill::tcp_hello        16-byte header that starts every connection: magic + the
//                          sequence index of the first record that follows
//   rill::framing_errc     error codes of the decoder (a std::error_category "rill.framing")
//
// Example (compiled by tests/banner_examples.py):
//   rill::framing f = rill::framing::length_prefixed(1 << 20);
//   std::vector<std::byte> wire;
//   rill::frame_encoder{f}.append(wire, rill::as_bytes_view("hello"));
//   rill::frame_decoder dec{f};
//   auto ec = dec.feed(std::span(wire).first(3), [](std::span<const std::byte>) {});  // none yet
//   ec = dec.feed(std::span(wire).subspan(3), [](std::span<const std::byte> r) { /* "hello" */ });
//
// Wire format (our own rule, documented in README "TCP connectors"):
//   fixed(n):            each record is exactly n bytes, back to back.
//   length_prefixed(m):  u32 big-endian payload length L (0 <= L <= m), then L bytes.
//   hello (when enabled): "RILLSEQ1" then u64 little-endian first sequence index; sent by
//                         the sender as the first 16 bytes of every connection, so a new
//                         connection always starts at a record boundary.
//
// Thread safety: plain values. Distinct objects: safe. Shared objects: unsafe.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "rill/core/error.hpp"

namespace rill {

/// How records are delimited on the wire.
struct framing {
  enum class kind : std::uint8_t { fixed, length_prefixed };
  kind k = kind::fixed;
  /// fixed: the record size in bytes (> 0). length_prefixed: the largest payload accepted,
  /// bytes (> 0, <= 2^31); a larger length on the wire is a framing error.
  std::size_t size = 32;

  /// Records of exactly `record_bytes` bytes. Checked by validate(), not here.
  static framing fixed(std::size_t record_bytes) { return {kind::fixed, record_bytes}; }
  /// Records with a u32 big-endian length prefix, payloads up to `max_record_bytes`.
  static framing length_prefixed(std::size_t max_record_bytes) {
    return {kind::length_prefixed, max_record_bytes};
  }
  /// Throws config_error("<key>.framing", ...) when size is 0 or too large.
  void validate(const std::string& key) const {
    if (size == 0 || size > (std::size_t{1} << 31))
      throw config_error(key + ".framing", key + ".framing size must be in 1..2^31 bytes, got " +
                                               std::to_string(size));
  }
  /// Bytes one record of `payload` bytes takes on the wire.
  std::size_t wire_size(std::size_t payload) const noexcept {
    return k == kind::fixed ? size : payload + 4;
  }
};

/// View of a string's bytes (tests and examples).
inline std::span<const std::byte> as_bytes_view(std::string_view s) noexcept {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

enum class framing_errc {
  bad_length = 1,  ///< length prefix > max_record_bytes: the stream cannot be resynchronised
  bad_hello,       ///< the first 16 bytes of a connection are not a rill hello
  wrong_size,      ///< encoder: a record's size differs from the fixed size
};

inline const std::error_category& framing_category() noexcept {
  struct cat final : std::error_category {
    const char* name() const noexcept override { return "rill.framing"; }
    std::string message(int c) const override {
      switch (static_cast<framing_errc>(c)) {
        case framing_errc::bad_length:
          return "length prefix exceeds the maximum record size";
        case framing_errc::bad_hello:
          return "connection does not start with a rill hello";
        case framing_errc::wrong_size:
          return "record size differs from the fixed framing size";
      }
      return "unknown framing error";
    }
  };
  static const cat c;
  return c;
}
inline std::error_code make_error_code(framing_errc e) noexcept {
  return {static_cast<int>(e), framing_category()};
}

/// Stateless framer. Distinct objects: safe. Shared objects: safe (const).
class frame_encoder {
 public:
  /// `f` should be validated (framing::validate); the encoder does not check it.
  explicit frame_encoder(framing f) noexcept : f_(f) {}
  /// Appends `rec` framed to `out`. Returns wrong_size (and appends nothing) for a fixed
  /// framing and rec.size() != size, bad_length for a payload over the maximum. noexcept
  /// except std::bad_alloc from growing `out`.
  std::error_code append(std::vector<std::byte>& out, std::span<const std::byte> rec) const {
    if (f_.k == framing::kind::fixed) {
      if (rec.size() != f_.size) return make_error_code(framing_errc::wrong_size);
    } else {
      if (rec.size() > f_.size) return make_error_code(framing_errc::bad_length);
      const auto n = static_cast<std::uint32_t>(rec.size());
      const std::byte p[4] = {std::byte(n >> 24), std::byte(n >> 16), std::byte(n >> 8),
                              std::byte(n)};
      out.insert(out.end(), p, p + 4);
    }
    out.insert(out.end(), rec.begin(), rec.end());
    return {};
  }
  /// The framing this encoder writes.
  const framing& spec() const noexcept { return f_; }

 private:
  framing f_;
};

/// Incremental decoder. Feed chunks in stream order; complete records are passed to
/// `on_record(std::span<const std::byte> payload)`. A span stays valid until the next
/// feed() or reset() (it points into the chunk or into the decoder's reassembly buffer).
/// Thread safety: one thread at a time (it keeps the partial record between feeds).
class frame_decoder {
 public:
  /// `f` should be validated (framing::validate).
  explicit frame_decoder(framing f) : f_(f) {}

  /// Returns {} or framing_errc::bad_length (records before it were delivered; the stream
  /// is unusable after it: the caller drops the connection). `offset()` then names the
  /// byte offset of the bad prefix since the last reset().
  template <class OnRecord>
  std::error_code feed(std::span<const std::byte> in, OnRecord&& on_record) {
    std::size_t i = 0;
    done_.clear();  // the record reassembled by the previous feed() is no longer referenced
    // 1. finish a record started in an earlier chunk
    if (!partial_.empty()) {
      for (;;) {
        const std::size_t need = needed(partial_);
        if (need == 0) return bad_length_at(offset_ - partial_.size());
        if (partial_.size() >= need) break;
        const std::size_t take = std::min(need - partial_.size(), in.size() - i);
        if (take == 0) return {};  // chunk exhausted, record still incomplete
        partial_.insert(partial_.end(), in.begin() + i, in.begin() + i + take);
        i += take;
        offset_ += take;
      }
      done_.swap(partial_);
      partial_.clear();
      on_record(payload_of(done_));
    }
    // 2. whole records inside the chunk
    while (i < in.size()) {
      const auto rest = in.subspan(i);
      std::size_t need;
      if (f_.k == framing::kind::fixed) {
        need = f_.size;
      } else {
        if (rest.size() < 4) break;
        const std::size_t len = be32(rest.data());
        if (len > f_.size) return bad_length_at(offset_);
        need = 4 + len;
      }
      if (rest.size() < need) break;
      on_record(f_.k == framing::kind::fixed ? rest.first(need) : rest.subspan(4, need - 4));
      i += need;
      offset_ += need;
    }
    // 3. keep the tail
    partial_.insert(partial_.end(), in.begin() + i, in.end());
    offset_ += in.size() - i;
    return {};
  }

  /// Bytes of an incomplete record held (a connection that ends now ends mid-record).
  std::size_t partial_bytes() const noexcept { return partial_.size(); }
  /// Discards an incomplete record (a new connection starts at a record boundary).
  /// Returns the number of bytes discarded.
  std::size_t reset() noexcept {
    const auto n = partial_.size();
    partial_.clear();
    done_.clear();
    offset_ = 0;
    return n;
  }
  /// Bytes fed since the last reset() (on error: offset of the bad length prefix).
  std::uint64_t offset() const noexcept { return offset_; }
  /// The framing this decoder reads.
  const framing& spec() const noexcept { return f_; }

 private:
  static std::size_t be32(const std::byte* p) noexcept {
    return (std::size_t(p[0]) << 24) | (std::size_t(p[1]) << 16) | (std::size_t(p[2]) << 8) |
           std::size_t(p[3]);
  }
  /// Total bytes the record in `buf` needs (header + payload); 4 while the header is
  /// incomplete; 0 for a bad length.
  std::size_t needed(const std::vector<std::byte>& buf) const noexcept {
    if (f_.k == framing::kind::fixed) return f_.size;
    if (buf.size() < 4) return 4;
    const std::size_t len = be32(buf.data());
    return len > f_.size ? 0 : 4 + len;
  }
  std::span<const std::byte> payload_of(const std::vector<std::byte>& buf) const noexcept {
    return f_.k == framing::kind::fixed ? std::span<const std::byte>(buf)
                                        : std::span<const std::byte>(buf).subspan(4);
  }
  std::error_code bad_length_at(std::uint64_t off) {
    offset_ = off;
    return make_error_code(framing_errc::bad_length);
  }

  framing f_;
  std::vector<std::byte> partial_, done_;
  std::uint64_t offset_ = 0;
};

/// The connection header. 16 bytes: "RILLSEQ1", u64 little-endian first sequence index.
struct tcp_hello {
  static constexpr std::size_t size = 16;
  static constexpr std::array<char, 8> magic = {'R', 'I', 'L', 'L', 'S', 'E', 'Q', '1'};
  std::uint64_t first_seq = 0;

  std::array<std::byte, size> encode() const noexcept {
    std::array<std::byte, size> b{};
    std::memcpy(b.data(), magic.data(), 8);
    for (int i = 0; i < 8; ++i) b[8 + i] = std::byte(first_seq >> (8 * i));
    return b;
  }
  /// `b` must hold 16 bytes. False when the magic does not match.
  static bool decode(std::span<const std::byte, size> b, tcp_hello& out) noexcept {
    if (std::memcmp(b.data(), magic.data(), 8) != 0) return false;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t(b[8 + i]) << (8 * i);
    out.first_seq = v;
    return true;
  }
};

}  // namespace rill

template <>
struct std::is_error_code_enum<rill::framing_errc> : std::true_type {};

// fuzz_framing: rill::frame_encoder / frame_decoder (<rill/connectors/framing.hpp>).
// 1. Records cut from the input (a length byte each) are framed, and the framed stream is
//    fed to a decoder in chunks whose sizes come from the input too: exactly the framed
//    records come back, in order, and nothing is left partial.
// 2. The raw input fed as a hostile stream in the same chunks: no crash, and an error's
//    offset lies within the bytes fed.
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "check.hpp"

#include "rill/connectors/framing.hpp"

namespace {

using rill_fuzz::check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const bool fixed = data[0] & 1;
  const std::size_t fixed_size = 1 + (data[0] >> 1) % 16;
  const std::size_t chunk_seed = data[1];
  const rill::framing f = fixed ? rill::framing::fixed(fixed_size) : rill::framing::length_prefixed(200);
  const auto* in = reinterpret_cast<const std::byte*>(data + 2);
  const std::size_t n = size - 2;

  std::vector<std::vector<std::byte>> recs;
  for (std::size_t i = 0; i < n;) {
    const std::size_t len = fixed ? fixed_size : std::size_t(data[2 + i]) % 201;
    if (i + len > n) break;
    recs.emplace_back(in + i, in + i + len);
    i += len ? len : 1;
  }
  rill::frame_encoder enc(f);
  std::vector<std::byte> wire;
  for (const auto& r : recs) check(!enc.append(wire, r), "encoder takes a valid record");

  auto feed_in_chunks = [&](std::span<const std::byte> stream, auto&& on_record) {
    rill::frame_decoder dec(f);
    std::size_t at = 0, k = chunk_seed;
    while (at < stream.size()) {
      const std::size_t c = std::min<std::size_t>(1 + k % 7, stream.size() - at);
      k = k * 31 + 7;
      if (auto ec = dec.feed(stream.subspan(at, c), on_record)) {
        check(dec.offset() <= at + c, "error offset within the bytes fed");
        return false;
      }
      at += c;
    }
    return dec.partial_bytes() == 0;
  };
  std::size_t got = 0;
  const bool clean = feed_in_chunks(wire, [&](std::span<const std::byte> p) {
    check(got < recs.size(), "no extra record");
    check(p.size() == recs[got].size() && std::equal(p.begin(), p.end(), recs[got].begin()), "same record");
    ++got;
  });
  check(clean && got == recs.size(), "every framed record comes back, nothing partial");
  feed_in_chunks(std::span<const std::byte>(in, n), [](std::span<const std::byte>) {});
  return 0;
}

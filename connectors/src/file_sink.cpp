// segment_file_sink: see rill/connectors/file_sink.hpp.
#include "rill/connectors/file_sink.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "rill/core/error.hpp"

namespace rill {

namespace {
std::string index_name(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "%020llu", static_cast<unsigned long long>(v));
  return b;
}
}  // namespace

segment_file_sink::segment_file_sink(segment_file_options o) : o_(std::move(o)) {
  if (o_.record_bytes == 0)
    throw config_error("segment_file.record_bytes", "segment_file.record_bytes must be > 0");
  if (o_.records_per_segment == 0)
    throw config_error("segment_file.records_per_segment",
                       "segment_file.records_per_segment must be > 0");
  std::error_code ec;
  std::filesystem::create_directories(o_.directory, ec);
  if (ec) throw std::system_error(ec, "segment_file_sink: cannot create " + o_.directory);
  cur_ = take_spare();
  thread_ = std::thread([this] { run(); });
}

segment_file_sink::~segment_file_sink() { close(); }

bool segment_file_sink::write_framed(std::span<const std::byte> wire, std::size_t n) {
  if (failed() || closed_ || wire.size() != n * o_.record_bytes) {
    dropped_.fetch_add(n, std::memory_order_relaxed);
    return false;
  }
  cur_.insert(cur_.end(), wire.begin(), wire.end());
  if (cur_.size() >= o_.chunk_bytes) hand_over();
  return true;
}

bool segment_file_sink::writable() const noexcept {
  return !failed() && queued_.load(std::memory_order_relaxed) < o_.buffer_bytes;
}

void segment_file_sink::hand_over() {
  if (cur_.empty()) return;
  queued_.fetch_add(cur_.size(), std::memory_order_relaxed);
  {
    std::lock_guard lk(mu_);
    q_.push_back(std::move(cur_));
  }
  cv_.notify_one();
  cur_ = take_spare();
}

std::vector<std::byte> segment_file_sink::take_spare() {
  // A buffer the disk thread finished with: its pages are mapped already (a fresh 1 MiB
  // vector costs 256 page faults, zeroing and an munmap per chunk).
  std::vector<std::byte> b;
  {
    std::lock_guard lk(mu_);
    if (!spare_.empty()) {
      b = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  b.clear();
  b.reserve(o_.chunk_bytes + o_.record_bytes * 1024);
  return b;
}

void segment_file_sink::close() {
  if (closed_) return;
  hand_over();
  closed_ = true;
  {
    std::lock_guard lk(mu_);
    done_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::string segment_file_sink::error() const {
  std::lock_guard lk(mu_);
  return error_;
}

std::vector<std::string> segment_file_sink::files() const {
  std::lock_guard lk(mu_);
  return files_;
}

void segment_file_sink::run() {
  namespace fs = std::filesystem;
  std::FILE* f = nullptr;
  std::string part;
  std::uint64_t seg_first = o_.first_index, in_seg = 0;
  const std::uint64_t seg_bytes = o_.records_per_segment * o_.record_bytes;
  auto fail = [&](const std::string& path) {
    std::lock_guard lk(mu_);
    if (error_.empty()) error_ = path + ": " + std::strerror(errno);
    failed_.store(true, std::memory_order_release);
  };
  auto finish_segment = [&] {
    if (!f) return;
    if (std::fclose(f) != 0) fail(part);
    f = nullptr;
    const auto final_name =
        (fs::path(o_.directory) / (o_.prefix + "-" + index_name(seg_first) + "-" +
                                   index_name(seg_first + in_seg / o_.record_bytes - 1) + ".seg"))
            .string();
    std::error_code ec;
    fs::rename(part, final_name, ec);
    if (ec) {
      errno = ec.value();
      fail(final_name);
    } else {
      std::lock_guard lk(mu_);
      files_.push_back(final_name);
    }
    seg_first += in_seg / o_.record_bytes;
    in_seg = 0;
  };
  for (;;) {
    std::vector<std::byte> buf;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return done_ || !q_.empty(); });
      if (q_.empty()) break;
      buf = std::move(q_.front());
      q_.pop_front();
    }
    std::size_t off = 0;
    while (off < buf.size() && !failed()) {
      if (!f) {
        part =
            (fs::path(o_.directory) / (o_.prefix + "-" + index_name(seg_first) + ".part")).string();
        f = std::fopen(part.c_str(), "wb");
        if (!f) {
          fail(part);
          break;
        }
      }
      const std::size_t take = std::min<std::uint64_t>(buf.size() - off, seg_bytes - in_seg);
      if (std::fwrite(buf.data() + off, 1, take, f) != take) {
        fail(part);
        break;
      }
      off += take;
      in_seg += take;
      written_.fetch_add(take / o_.record_bytes, std::memory_order_relaxed);
      if (in_seg == seg_bytes) finish_segment();
    }
    if (off < buf.size())
      dropped_.fetch_add((buf.size() - off) / o_.record_bytes, std::memory_order_relaxed);
    queued_.fetch_sub(buf.size(), std::memory_order_relaxed);
    std::lock_guard lk(mu_);
    if (spare_.size() < max_spare) spare_.push_back(std::move(buf));
  }
  if (in_seg > 0)
    finish_segment();
  else if (f) {
    std::fclose(f);
    std::remove(part.c_str());
  }
}

}  // namespace rill

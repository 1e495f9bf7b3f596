// segment_file_sink: see rill/connectors/file_sink.hpp.
#include "rill/connectors/file_sink.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
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
  if (o_.write_on_caller) {
    caller_writer_ = std::make_unique<segment_writer>(*this);
    return;
  }
  cur_ = take_spare();
  thread_ = std::thread([this] { run(); });
}

segment_file_sink::~segment_file_sink() { close(); }

bool segment_file_sink::write_framed(std::span<const std::byte> wire, std::size_t n) {
  if (failed() || closed_ || wire.size() != n * o_.record_bytes) {
    dropped_.fetch_add(n, std::memory_order_relaxed);
    return false;
  }
  if (caller_writer_) {
    const auto before = written_.load(std::memory_order_relaxed);
    if (caller_writer_->write(wire.data(), wire.size())) return true;
    dropped_.fetch_add(n - (written_.load(std::memory_order_relaxed) - before),
                       std::memory_order_relaxed);
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
  closed_ = true;
  if (caller_writer_) {
    caller_writer_->finish();
    return;
  }
  hand_over();
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

bool segment_file_sink::segment_writer::write(const std::byte* p, std::size_t len) {
  namespace fs = std::filesystem;
  if (!started_) {
    started_ = true;
    seg_first_ = s_.o_.first_index;
  }
  const std::uint64_t seg_bytes = s_.o_.records_per_segment * s_.o_.record_bytes;
  while (len > 0) {
    if (s_.failed()) return false;
    if (fd_ < 0) {
      part_ = (fs::path(s_.o_.directory) / (s_.o_.prefix + "-" + index_name(seg_first_) + ".part"))
                  .string();
      fd_ = ::open(part_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd_ < 0) {
        fail(part_);
        return false;
      }
    }
    const std::size_t take = std::min<std::uint64_t>(len, seg_bytes - in_seg_);
    const auto k = ::write(fd_, p, take);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EIO;
      fail(part_);
      return false;
    }
    const auto done = static_cast<std::size_t>(k);
    p += done;
    len -= done;
    const std::size_t rb = s_.o_.record_bytes;  // a segment holds whole records
    s_.written_.fetch_add((in_seg_ + done) / rb - in_seg_ / rb, std::memory_order_relaxed);
    in_seg_ += done;
    if (in_seg_ == seg_bytes) finish_segment();
  }
  return true;
}

void segment_file_sink::segment_writer::fail(const std::string& path) {
  std::lock_guard lk(s_.mu_);
  if (s_.error_.empty()) s_.error_ = path + ": " + std::strerror(errno);
  s_.failed_.store(true, std::memory_order_release);
}

void segment_file_sink::segment_writer::finish_segment() {
  namespace fs = std::filesystem;
  if (fd_ < 0) return;
  if (::close(fd_) != 0) fail(part_);
  fd_ = -1;
  const auto final_name =
      (fs::path(s_.o_.directory) /
       (s_.o_.prefix + "-" + index_name(seg_first_) + "-" +
        index_name(seg_first_ + in_seg_ / s_.o_.record_bytes - 1) + ".seg"))
          .string();
  std::error_code ec;
  fs::rename(part_, final_name, ec);
  if (ec) {
    errno = ec.value();
    fail(final_name);
  } else {
    std::lock_guard lk(s_.mu_);
    s_.files_.push_back(final_name);
  }
  seg_first_ += in_seg_ / s_.o_.record_bytes;
  in_seg_ = 0;
}

void segment_file_sink::segment_writer::finish() {
  if (in_seg_ > 0) {
    finish_segment();
  } else if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    std::remove(part_.c_str());
  }
}

void segment_file_sink::run() {
  segment_writer w{*this};
  for (;;) {
    std::vector<std::byte> buf;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return done_ || !q_.empty(); });
      if (q_.empty()) break;
      buf = std::move(q_.front());
      q_.pop_front();
    }
    const auto before = written_.load(std::memory_order_relaxed);
    if (!w.write(buf.data(), buf.size())) {
      const auto took = written_.load(std::memory_order_relaxed) - before;
      dropped_.fetch_add(buf.size() / o_.record_bytes - took, std::memory_order_relaxed);
    }
    queued_.fetch_sub(buf.size(), std::memory_order_relaxed);
    std::lock_guard lk(mu_);
    if (spare_.size() < max_spare) spare_.push_back(std::move(buf));
  }
  w.finish();
}

}  // namespace rill

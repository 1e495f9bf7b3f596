// tests/operators/keyed_window_model.hpp — a brute-force reference for keyed event-time
// windows, and the seeded random event streams the tests feed to it and to the operator.
//
// The model is written from the rules in rill/operators/window.hpp and
// rill/operators/keyed_window.hpp only and includes no rill header: plain loops over
// plain integers (event times in ms), nothing shared with the operator.
//
//   watermark: W = max(W, min over active inputs of (largest time seen - delay)); an input
//     that has sent nothing contributes -inf; an ended input does not count, and W = +inf
//     once every input ended; an input is idle once a tick finds it silent for
//     idle_timeout (it is active again from its next record or progress); when every
//     input that has not ended is idle, W stays.
//   aligned windows (tumbling = sliding with slide == size): window k is
//     [k*slide, k*slide + size); the windows of t are every k with k*slide <= t <
//     k*slide + size, enumerated by that definition. A record is late when every one of
//     its windows has end + lateness <= W (W before its own time is observed); else it
//     joins each of its windows with end + lateness > W: on time when W < end, allowed-
//     late otherwise. Results are then computed per (key, window) by loops: one result
//     with the on-time records at the first event after which W >= end, and one more
//     (update = true once a result was out) at each allowed-late record.
//   sessions: simulated event by event, because under disorder the sessions depend on
//     what had closed when a record came (so sorting a key's accepted records and
//     splitting at gaps > gap is not the answer: gap 10, record 0 closes [0, 10) at W = 12
//     and is dropped; record 5 then opens [5, 15), a second, overlapping session). Each
//     record opens [t, t + gap) and merges with every live session of its key that
//     overlaps or touches it (a.lo <= b.hi && b.lo <= a.hi). A session closes once
//     W > end (a record at t = end is on time at W = end and touches it), so: a record is
//     late when the merged end + lateness < W; a merged session whose end < W is emitted
//     at once; after every event each session not emitted since its last change fires
//     once W > end, and is dropped once W > end + lateness. update = true when any part
//     of the session had been emitted before.
//
// Event i of a stream is processed at processing time (i + 1) ms (a manual_clock that
// advances 1 ms before each event), followed by a tick at the same time when
// idle_timeout > 0: the operator harness must do the same.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

namespace keyed_window_model {

inline constexpr std::int64_t minus_inf = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t plus_inf = std::numeric_limits<std::int64_t>::max();

struct event {
  enum class kind { record, progress, end };
  kind k = kind::record;
  std::size_t input = 0;
  int key = 0;
  std::int64_t t = 0;  // ms: the record's time, or the progress marker's
  int id = -1;         // records: 0, 1, 2, ... in arrival order
};

/// The watermark definition (see the banner), in ms.
class watermark {
 public:
  watermark(std::size_t inputs, std::int64_t delay, std::int64_t idle_timeout)
      : in_(inputs), delay_(delay), idle_timeout_(idle_timeout) {}
  void observe(std::size_t i, std::int64_t t, std::int64_t now) {
    if (in_[i].ended) return;
    in_[i].largest = std::max(in_[i].largest, t);
    in_[i].last_active = now;
    in_[i].idle = false;
    recompute();
  }
  void end(std::size_t i) {
    in_[i].ended = true;
    recompute();
  }
  void tick(std::int64_t now) {
    if (idle_timeout_ == 0) return;
    for (auto& s : in_)
      if (!s.ended && !s.idle && now - s.last_active >= idle_timeout_) {
        s.idle = true;
        ++idles_;
      }
    recompute();
  }
  std::int64_t value() const { return w_; }
  std::size_t idles() const { return idles_; }  // times an input became idle

 private:
  struct input {
    std::int64_t largest = minus_inf, last_active = 0;
    bool idle = false, ended = false;
  };
  void recompute() {
    bool all_ended = true, any_active = false;
    std::int64_t m = plus_inf;
    for (const auto& s : in_) {
      if (s.ended) continue;
      all_ended = false;
      if (s.idle) continue;
      any_active = true;
      m = std::min(m, s.largest == minus_inf ? minus_inf : s.largest - delay_);
    }
    if (all_ended)
      w_ = plus_inf;
    else if (any_active)
      w_ = std::max(w_, m);
  }
  std::vector<input> in_;
  std::int64_t delay_, idle_timeout_;
  std::int64_t w_ = minus_inf;
  std::size_t idles_ = 0;
};

struct options {
  enum class shape { aligned, session };
  shape s = shape::aligned;
  std::int64_t size = 0, slide = 0;                        // aligned (tumbling: slide = size), ms
  std::int64_t gap = 0;                                    // session, ms
  std::int64_t delay = 0, lateness = 0, idle_timeout = 0;  // ms
  std::size_t inputs = 1;
};

/// One emitted result: the key, [start, end) in ms, the ids of its records (sorted), the
/// update flag and the index of the event during which it is emitted.
struct row {
  int key = 0;
  std::int64_t start = 0, end = 0;
  std::vector<int> ids;
  bool update = false;
  std::size_t at = 0;
  auto tie() const { return std::tie(at, key, start, end, update, ids); }
  bool operator==(const row& o) const { return tie() == o.tie(); }
  bool operator<(const row& o) const { return tie() < o.tie(); }
  friend std::ostream& operator<<(std::ostream& os, const row& r) {
    os << "{event " << r.at << ", key " << r.key << ", [" << r.start << ", " << r.end << ") ms"
       << (r.update ? ", update" : "") << ", ids";
    for (int id : r.ids) os << ' ' << id;
    return os << '}';
  }
};

/// One record sent to the late side output, with the window it is reported with.
struct late_row {
  int id = 0, key = 0;
  std::int64_t start = 0, end = 0;
  auto tie() const { return std::tie(id, key, start, end); }
  bool operator==(const late_row& o) const { return tie() == o.tie(); }
  bool operator<(const late_row& o) const { return tie() < o.tie(); }
  friend std::ostream& operator<<(std::ostream& os, const late_row& r) {
    return os << "{id " << r.id << ", key " << r.key << ", [" << r.start << ", " << r.end
              << ") ms}";
  }
};

struct output {
  std::vector<row> rows;       // sorted
  std::vector<late_row> late;  // sorted
  // What the stream exercised (so a test can assert it covered the cases it claims):
  std::size_t allowed_late = 0;  // (record, window) joins with W >= end
  std::size_t partly_late = 0;   // accepted records skipping some of their windows
  std::size_t bridges = 0;       // session records merging >= 2 live sessions
  std::size_t merges = 0;        // session records joining >= 1 live session
  std::size_t idles = 0;         // times an input became idle
};

/// Every k with k*slide <= t < k*slide + size, largest first.
inline std::vector<std::int64_t> windows_of(std::int64_t t, std::int64_t size, std::int64_t slide) {
  std::int64_t k = t / slide;
  while (k * slide > t) --k;
  while ((k + 1) * slide <= t) ++k;
  std::vector<std::int64_t> ks;
  for (; k * slide + size > t; --k) ks.push_back(k);
  return ks;
}

inline output run_aligned(const std::vector<event>& evs, const options& o) {
  output out;
  watermark wm{o.inputs, o.delay, o.idle_timeout};
  struct cell {
    std::vector<int> on_time;
    std::vector<std::pair<int, std::size_t>> allowed_late;  // (id, event index)
  };
  std::map<std::pair<int, std::int64_t>, cell> cells;  // (key, k)
  std::vector<std::int64_t> w_after(evs.size());
  for (std::size_t i = 0; i < evs.size(); ++i) {
    const event& e = evs[i];
    const auto now = std::int64_t(i + 1);
    if (e.k == event::kind::record) {
      const std::int64_t w = wm.value();
      const auto ks = windows_of(e.t, o.size, o.slide);
      std::size_t joined = 0;
      for (std::int64_t k : ks) {
        const std::int64_t end = k * o.slide + o.size;
        if (end + o.lateness <= w) continue;
        ++joined;
        if (w < end) {
          cells[{e.key, k}].on_time.push_back(e.id);
        } else {
          cells[{e.key, k}].allowed_late.emplace_back(e.id, i);
          ++out.allowed_late;
        }
      }
      if (joined == 0) {
        const std::int64_t k = ks.front();  // the latest-ending window
        out.late.push_back({e.id, e.key, k * o.slide, k * o.slide + o.size});
      } else if (joined < ks.size()) {
        ++out.partly_late;
      }
      wm.observe(e.input, e.t, now);
    } else if (e.k == event::kind::progress) {
      wm.observe(e.input, e.t, now);
    } else {
      wm.end(e.input);
    }
    if (o.idle_timeout > 0) wm.tick(now);
    w_after[i] = wm.value();
  }
  for (auto& [kk, c] : cells) {
    const auto [key, k] = kk;
    const std::int64_t start = k * o.slide, end = start + o.size;
    std::vector<int> ids = c.on_time;
    bool out_before = false;
    if (!ids.empty()) {
      // The first event after which W >= end (W never decreases; the streams end every
      // input, so W = +inf after the last event).
      const auto fire =
          std::size_t(std::partition_point(w_after.begin(), w_after.end(),
                                           [end](std::int64_t w) { return w < end; }) -
                      w_after.begin());
      std::sort(ids.begin(), ids.end());
      out.rows.push_back({key, start, end, ids, false, fire});
      out_before = true;
    }
    for (auto [id, at] : c.allowed_late) {
      ids.push_back(id);
      std::sort(ids.begin(), ids.end());
      out.rows.push_back({key, start, end, ids, out_before, at});
      out_before = true;
    }
  }
  std::sort(out.rows.begin(), out.rows.end());
  std::sort(out.late.begin(), out.late.end());
  out.idles = wm.idles();
  return out;
}

inline output run_session(const std::vector<event>& evs, const options& o) {
  output out;
  watermark wm{o.inputs, o.delay, o.idle_timeout};
  struct session {
    std::int64_t lo, hi;
    std::vector<int> ids;
    bool emitted = false;  // a result was out
    bool dirty = true;     // changed since the last result
  };
  std::map<int, std::vector<session>> live;
  auto emit = [&](int key, session& s, std::size_t at) {
    std::vector<int> ids = s.ids;
    std::sort(ids.begin(), ids.end());
    out.rows.push_back({key, s.lo, s.hi, ids, s.emitted, at});
    s.emitted = true;
    s.dirty = false;
  };
  for (std::size_t i = 0; i < evs.size(); ++i) {
    const event& e = evs[i];
    const auto now = std::int64_t(i + 1);
    if (e.k == event::kind::record) {
      const std::int64_t w = wm.value();
      auto& v = live[e.key];
      const std::int64_t own_lo = e.t, own_hi = e.t + o.gap;
      session m{own_lo, own_hi, {e.id}};
      std::size_t touching = 0;  // live sessions never touch each other: one pass merges
      for (const auto& s : v)
        if (s.lo <= own_hi && own_lo <= s.hi) {
          ++touching;
          m.hi = std::max(m.hi, s.hi);
        }
      if (m.hi + o.lateness < w) {
        out.late.push_back({e.id, e.key, own_lo, own_hi});
      } else {
        std::vector<session> rest;
        for (auto& s : v) {
          if (s.lo <= own_hi && own_lo <= s.hi) {
            m.lo = std::min(m.lo, s.lo);
            m.ids.insert(m.ids.end(), s.ids.begin(), s.ids.end());
            m.emitted = m.emitted || s.emitted;
          } else {
            rest.push_back(std::move(s));
          }
        }
        if (touching >= 1) ++out.merges;
        if (touching >= 2) ++out.bridges;
        rest.push_back(std::move(m));
        v = std::move(rest);
        if (v.back().hi < w) {
          ++out.allowed_late;
          emit(e.key, v.back(), i);
        }
      }
      wm.observe(e.input, e.t, now);
    } else if (e.k == event::kind::progress) {
      wm.observe(e.input, e.t, now);
    } else {
      wm.end(e.input);
    }
    if (o.idle_timeout > 0) wm.tick(now);
    const std::int64_t w = wm.value();
    for (auto& [key, v] : live) {
      for (auto& s : v)
        if (s.dirty && s.hi < w) emit(key, s, i);
      std::erase_if(v, [&](const session& s) { return !s.dirty && s.hi + o.lateness < w; });
    }
  }
  std::sort(out.rows.begin(), out.rows.end());
  std::sort(out.late.begin(), out.late.end());
  out.idles = wm.idles();
  return out;
}

inline output run(const std::vector<event>& evs, const options& o) {
  return o.s == options::shape::aligned ? run_aligned(evs, o) : run_session(evs, o);
}

/// A seeded random stream (times in ms, all multiples of `grain`).
struct stream_options {
  std::uint64_t seed = 1;
  int records = 3000;
  int keys = 50;
  std::int64_t start = -20000;  // first base time: the stream starts at negative times
  std::int64_t step = 40;       // the base time advances by U[0, step] per record
  std::int64_t grain = 1;
  std::int64_t disorder = 200;  // an on-time record lags the base by U[0, disorder]
  double late_fraction = 0.05;  // ... a deliberately late one by disorder + U[grain, late_span]
  std::int64_t late_span = 3000;
  std::size_t inputs = 2;
  std::int64_t lag1 = 0;  // input 1's times run this much behind input 0's
  enum class second_input { steady, silent_phase, ends_early };
  second_input mode = second_input::steady;  // silent: records [n/3, n/2) all on input 0
  double progress_fraction = 0.02;           // progress markers at the base time
  std::int64_t quiet = 4000;                 // at record n/4 the base jumps by this much:
                                             // windows pass with no data, and of the next
  int quiet_burst = 100;                     // records half are late, landing in them
  bool end_events = true;                    // end every input after the last record
};

inline std::vector<event> make_stream(const stream_options& so) {
  std::mt19937_64 rng{so.seed};
  auto grains = [&](std::int64_t hi) {  // U[0, hi] rounded down to the grain
    return std::uniform_int_distribution<std::int64_t>{0, hi / so.grain}(rng)*so.grain;
  };
  std::uniform_real_distribution<double> u01{0.0, 1.0};
  std::vector<event> evs;
  std::vector<bool> ended(so.inputs, false);
  std::int64_t base = so.start;
  const int n = so.records;
  for (int i = 0; i < n; ++i) {
    base += grains(so.step);
    if (i == n / 4) base += so.quiet / so.grain * so.grain;
    std::size_t input = 0;
    if (so.inputs > 1) {
      const bool only0 =
          (so.mode == stream_options::second_input::silent_phase && i >= n / 3 && i < n / 2) ||
          (so.mode == stream_options::second_input::ends_early && i >= n / 2);
      if (so.mode == stream_options::second_input::ends_early && i == n / 2) {
        evs.push_back({event::kind::end, 1, 0, 0, -1});
        ended[1] = true;
      }
      input = only0 ? 0 : std::uniform_int_distribution<std::size_t>{0, so.inputs - 1}(rng);
    }
    const std::int64_t own_base = base - (input == 1 ? so.lag1 : 0);
    if (u01(rng) < so.progress_fraction)
      evs.push_back({event::kind::progress, input, 0, own_base, -1});
    std::int64_t t = own_base - grains(so.disorder);
    const bool burst = i >= n / 4 && i < n / 4 + so.quiet_burst;
    if (u01(rng) < (burst ? 0.5 : so.late_fraction))
      t = own_base - so.disorder - so.grain - grains(so.late_span);
    const int key = std::uniform_int_distribution<int>{0, so.keys - 1}(rng);
    evs.push_back({event::kind::record, input, key, t, i});
  }
  if (so.end_events)
    for (std::size_t in = 0; in < so.inputs; ++in)
      if (!ended[in]) evs.push_back({event::kind::end, in, 0, 0, -1});
  return evs;
}

/// One input, 100,000 records over 200 keys from -20 s, 3 % of them late by up to 3 s
/// beyond `disorder`, no progress markers: the stream the runtime tests feed through one
/// split (each record's frontier is then the model's).
inline stream_options one_input_stream(std::int64_t grain, std::int64_t disorder) {
  return {.seed = 11,
          .records = 100000,
          .keys = 200,
          .start = -20000,
          .step = 2 * grain,
          .grain = grain,
          .disorder = disorder,
          .late_fraction = 0.03,
          .late_span = 3000,
          .inputs = 1,
          .progress_fraction = 0};
}

}  // namespace keyed_window_model

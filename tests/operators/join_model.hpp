// The brute-force reference of the joins (docs/design.md "Joins"), written from the rules
// and sharing no code with rill/operators/join.hpp or its detail header: no rill types,
// plain integers (nanoseconds), a nested loop over both whole inputs.
//
// Input: the events of one left input and one right input in arrival order, plus "this
// side ended" marks. The reference first replays the arrival order to find, for every
// record, the watermarks at its arrival (by their definition: a side's watermark is its
// largest time seen so far minus the delay, -infinity before its first record and
// +infinity once it ended; the join's watermark is the smaller of the two; a side's
// effective watermark is the larger of its own and the join's), then joins by definition.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

namespace join_model {

constexpr std::int64_t neg_inf = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t pos_inf = std::numeric_limits<std::int64_t>::max();

enum side : int { left = 0, right = 1 };

struct event {
  int s;               // left or right
  int key;
  int id;              // unique per side
  std::int64_t t;      // ns
  bool ends = false;   // true: side `s` ends here (key, id, t unused)
};

// One output: key, left id, right id (-1: a left record without a partner), time (ns).
using row = std::tuple<int, int, int, std::int64_t>;

struct arrived {
  int key, id;
  std::int64_t t;
  std::int64_t w;       // the join's watermark at arrival (before the record is seen)
  std::int64_t e_side;  // its side's effective watermark at arrival
};

struct classified {
  std::vector<arrived> in[2];  // every record, in arrival order
};

inline classified replay(const std::vector<event>& evs, std::int64_t delay) {
  std::int64_t largest[2] = {neg_inf, neg_inf};
  bool ended[2] = {false, false};
  auto side_w = [&](int s) -> std::int64_t {
    if (ended[s]) return pos_inf;
    if (largest[s] == neg_inf) return neg_inf;
    return largest[s] - delay;
  };
  classified c;
  for (const auto& e : evs) {
    if (e.ends) {
      ended[e.s] = true;
      continue;
    }
    const std::int64_t w = std::min(side_w(0), side_w(1));
    c.in[e.s].push_back({e.key, e.id, e.t, w, std::max(side_w(e.s), w)});
    largest[e.s] = std::max(largest[e.s], e.t);
  }
  return c;
}

struct result {
  std::vector<row> rows;              // sorted
  std::vector<int> late[2];           // ids, sorted
};

// Interval join: a record is late when t < its side's effective watermark; every pair of
// in-time records with the same key and a.t + lower <= b.t <= a.t + upper is a result,
// at time max(a.t, b.t).
inline result interval(const std::vector<event>& evs, std::int64_t lower, std::int64_t upper,
                       std::int64_t delay) {
  const classified c = replay(evs, delay);
  result r;
  std::vector<arrived> ok[2];
  for (int s = 0; s < 2; ++s)
    for (const auto& a : c.in[s]) (a.t < a.e_side ? r.late[s].push_back(a.id) : ok[s].push_back(a));
  for (const auto& a : ok[left])
    for (const auto& b : ok[right])
      if (a.key == b.key && a.t + lower <= b.t && b.t <= a.t + upper)
        r.rows.emplace_back(a.key, a.id, b.id, std::max(a.t, b.t));
  std::sort(r.rows.begin(), r.rows.end());
  for (auto& l : r.late) std::sort(l.begin(), l.end());
  return r;
}

inline std::int64_t floor_divide(std::int64_t n, std::int64_t d) {
  std::int64_t q = n / d;
  return (n % d != 0 && n < 0) ? q - 1 : q;
}

// Window join, windows [k*slide, k*slide + size): a record takes part in every window that
// holds it and whose end is above the join's watermark at its arrival; none = late. Per
// window and key: every (a, b) pair, and (outer) each a when the window has no b of its
// key; time end - 1 ns.
inline result window(const std::vector<event>& evs, std::int64_t size, std::int64_t slide, std::int64_t delay,
                     bool outer) {
  const classified c = replay(evs, delay);
  result r;
  struct member {
    std::int64_t k;  // window index
    int key, id;
  };
  std::vector<member> m[2];
  for (int s = 0; s < 2; ++s)
    for (const auto& a : c.in[s]) {
      bool any = false;
      for (std::int64_t k = floor_divide(a.t, slide); k * slide + size > a.t; --k)
        if (k * slide + size > a.w) {
          m[s].push_back({k, a.key, a.id});
          any = true;
        }
      if (!any) r.late[s].push_back(a.id);
    }
  for (const auto& a : m[left]) {
    bool matched = false;
    for (const auto& b : m[right])
      if (a.k == b.k && a.key == b.key) {
        matched = true;
        r.rows.emplace_back(a.key, a.id, b.id, a.k * slide + size - 1);
      }
    if (outer && !matched) r.rows.emplace_back(a.key, a.id, -1, a.k * slide + size - 1);
  }
  std::sort(r.rows.begin(), r.rows.end());
  for (auto& l : r.late) std::sort(l.begin(), l.end());
  return r;
}

}  // namespace join_model

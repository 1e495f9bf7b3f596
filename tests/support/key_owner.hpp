// tests/support/key_owner.hpp — keys that key_by routes to a chosen worker.
//
// Defines rill_test::key_owned_by(to, workers): the smallest int key that key_by sends to
// worker `to` of `workers` (key_by's rule: mix_hash(default_hash<int>(k)) % workers).
//
// Example:
//   const int k = rill_test::key_owned_by(1, 2);   // .key_by([k](auto&) { return k; })
//                                                   // sends everything to worker 1
#pragma once

#include <cstddef>

#include "rill/operators/keyed_window.hpp"

namespace rill_test {

inline int key_owned_by(std::size_t to, std::size_t workers) {
  for (int k = 0;; ++k)
    if (rill::detail::mix_hash(rill::default_hash<int>{}(k)) % workers == to) return k;
}

}  // namespace rill_test

// tests/support/collected.hpp — a thread-safe collector for runtime tests.
//
// Defines rill_test::collected<T>: a vector behind a mutex, shared (std::shared_ptr) by
// every worker's copy of a sink lambda.
//
// Example:
//   auto out = std::make_shared<rill_test::collected<int>>();
//   auto j = rill::from(src).sink([out](int x) { out->add(x); });
//   rill::runtime{{.workers = 2}}.run(j);
//   // out->items: every value, in the order the workers added them
//
// Thread safety: add() from any thread; read items only after runtime::run returned.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

namespace rill_test {

template <class T>
struct collected {
  std::mutex mu;
  std::vector<T> items;
  void add(T v) {
    std::lock_guard lk(mu);
    items.push_back(std::move(v));
  }
};

}  // namespace rill_test

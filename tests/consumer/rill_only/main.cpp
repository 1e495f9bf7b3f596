// Built against an installed rill: sums 1..100 through a keyed pipeline on 2 workers.
#include <rill/rill.hpp>

#include <atomic>
#include <iostream>

int main() {
  std::vector<rill::record<int>> in;
  for (int i = 1; i <= 100; ++i) in.push_back({i, rill::event_time{std::chrono::seconds{i}}});
  auto sum = std::make_shared<std::atomic<int>>(0);
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 core"}};
  rt.run(rill::from(rill::vector_source<int>{in})
             .key_by([](const int& x) { return x; })
             .sink([sum](int x) { sum->fetch_add(x); }));
  std::cout << sum->load() << '\n';
  return sum->load() == 5050 ? 0 : 1;
}

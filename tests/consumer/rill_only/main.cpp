// Built against an installed rill with rill::rill only: bytes per user and 10 s tumbling
// window on 2 workers, the <rill/rill.hpp> banner's pipeline. Prints one line per
// (user, window) in key then window order and exits 0 when they are the hand-worked ones.
#include <rill/rill.hpp>

#include <algorithm>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

int main() {
  using namespace std::chrono_literals;
  struct click {
    std::string user;
    std::uint64_t bytes;
  };
  // ann: 100 at 1 s, 5 at 12 s, 7 at 19 s; bob: 20 at 3 s, 1 at 9 s, 300 at 25 s
  std::vector<rill::record<click>> in{
      {{"ann", 100}, rill::event_time{1s}}, {{"bob", 20}, rill::event_time{3s}},
      {{"bob", 1}, rill::event_time{9s}},   {{"ann", 5}, rill::event_time{12s}},
      {{"ann", 7}, rill::event_time{19s}},  {{"bob", 300}, rill::event_time{25s}}};
  using row = std::tuple<std::string, long long, std::uint64_t>;  // user, window start s, bytes
  auto m = std::make_shared<std::mutex>();
  auto rows = std::make_shared<std::vector<row>>();
  rill::runtime rt{{.workers = 2, .topology = "2 nodes x 1 core"}};
  rt.run(rill::from(rill::vector_source<click>{in})
             .key_by([](const click& c) { return c.user; })
             .window(rill::tumbling{10s}, {.max_delay = 2s})
             .sum([](const click& c) { return c.bytes; })
             .sink([m, rows](rill::keyed_window_result<std::string, std::uint64_t>&& r) {
               std::lock_guard lk(*m);
               const auto start = std::chrono::duration_cast<std::chrono::seconds>(
                   r.start.time_since_epoch());
               rows->emplace_back(r.key, start.count(), r.value);
             }));
  std::sort(rows->begin(), rows->end());
  std::ostringstream out;
  for (const auto& [user, start, bytes] : *rows) out << user << ' ' << start << ' ' << bytes << '\n';
  std::cout << out.str();
  const std::string want = "ann 0 100\nann 10 12\nbob 0 21\nbob 20 300\n";
  if (out.str() != want) {
    std::cerr << "consumer: expected\n" << want;
    return 1;
  }
  return 0;
}

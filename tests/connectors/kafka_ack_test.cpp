// kafka_ack_test — the split's ack inbox and token pool (detail/kafka_ack.hpp), without a broker:
// every token's ack arrives exactly once with its failed flag, slots are reused, a token
// may outlive its split, and P threads releasing tokens while the owner keeps creating
// and draining lose nothing (run under TSan: label concurrency).
//
//   owner thread: make_token(i) for i in [0, N) -> hand-off queue -> P releaser threads
//                 (fail every 7th, pass every 5th copy to another releaser) ; owner drains
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "rill/connectors/detail/kafka_ack.hpp"

namespace {

using rill::kafka_detail::ack_entry;
using rill::kafka_detail::ack_inbox;

TEST(kafka_ack, last_copy_acks_once_with_failed_flag) {
  auto in = ack_inbox::make();
  std::vector<ack_entry> out;
  auto a = in->make_token({3, 10, 1, false});
  auto b = in->make_token({3, 11, 1, false});
  auto a2 = a;  // a derived record's copy
  in->drain(out);
  EXPECT_TRUE(out.empty());
  a.reset();
  in->drain(out);
  EXPECT_TRUE(out.empty()) << "a copy is still alive";
  b->fail();
  b.reset();
  a2.reset();
  in->drain(out);
  ASSERT_EQ(out.size(), 2u);
  std::sort(out.begin(), out.end(), [](const ack_entry& x, const ack_entry& y) { return x.offset < y.offset; });
  EXPECT_EQ(out[0].pid, 3);
  EXPECT_EQ(out[0].offset, 10);
  EXPECT_EQ(out[0].gen, 1u);
  EXPECT_FALSE(out[0].failed);
  EXPECT_EQ(out[1].offset, 11);
  EXPECT_TRUE(out[1].failed);
  in->drain(out);
  EXPECT_TRUE(out.empty());
}

TEST(kafka_ack, slots_are_reused_and_failed_flag_is_reset) {
  auto in = ack_inbox::make();
  std::vector<ack_entry> out;
  const rill::ack_token* first = nullptr;
  for (int round = 0; round < 3 * int(ack_inbox::slab_slots); ++round) {
    auto t = in->make_token({0, round, 0, false});
    if (round == 0) {
      first = t.get();
      t->fail();
    }
    t.reset();
    in->drain(out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].offset, round);
    EXPECT_EQ(out[0].failed, round == 0) << "a reused slot starts not failed";
  }
  auto t = in->make_token({0, -1, 0, false});
  EXPECT_EQ(t.get(), first) << "one slot in use at a time: the same slot comes back";
}

TEST(kafka_ack, token_outlives_its_split) {
  auto in = ack_inbox::make();
  std::vector<std::shared_ptr<rill::ack_token>> live;
  for (int i = 0; i < 1000; ++i) live.push_back(in->make_token({1, i, 0, false}));
  in.reset();  // the split is gone; the inbox lives on for its tokens
  std::thread([&] { live.clear(); }).join();  // the last one frees it (ASan/TSan check)
}

TEST(kafka_ack, stress_many_releasers_lose_nothing) {
  constexpr int n = 400000, releasers = 3;
  auto in = ack_inbox::make();
  std::mutex mu;
  std::deque<std::shared_ptr<rill::ack_token>> handoff, copies;
  std::atomic<bool> produced{false};
  std::vector<std::thread> ts;
  for (int r = 0; r < releasers; ++r)
    ts.emplace_back([&, r] {
      std::vector<std::shared_ptr<rill::ack_token>> mine;
      std::uint64_t k = r;
      for (;;) {
        {
          std::lock_guard g(mu);
          while (!handoff.empty() && mine.size() < 64) {
            mine.push_back(std::move(handoff.front()));
            handoff.pop_front();
          }
        }
        if (mine.empty()) {
          if (produced.load(std::memory_order_acquire)) {
            std::lock_guard g(mu);
            if (handoff.empty()) return;
          }
          std::this_thread::yield();
          continue;
        }
        for (auto& t : mine) {
          if (++k % 7 == 0) t->fail();
          std::lock_guard g(mu);
          if (k % 5 == 0) copies.push_back(t);  // a copy another thread releases
          if (k % 5 == 1 && !copies.empty()) copies.pop_front();
        }
        mine.clear();
      }
    });
  std::vector<int> seen(n, 0), failed(n, 0);
  std::vector<ack_entry> out;
  std::uint64_t acked = 0;
  auto take = [&] {
    in->drain(out);
    for (const auto& a : out) {
      ASSERT_EQ(a.pid, 7);
      ASSERT_EQ(a.gen, 2u);
      ++seen[a.offset];
      failed[a.offset] += a.failed;
    }
    acked += out.size();
  };
  for (int i = 0; i < n; ++i) {
    auto t = in->make_token({7, i, 2, false});
    std::lock_guard g(mu);
    handoff.push_back(std::move(t));
    if (i % 1024 == 0) take();
  }
  produced.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  copies.clear();
  take();
  ASSERT_EQ(acked, std::uint64_t(n));
  std::uint64_t failed_total = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(seen[i], 1) << "offset " << i;
    failed_total += failed[i];
  }
  // Every 7th release (per releaser counter) failed a token: about n / 7 of them.
  EXPECT_GT(failed_total, std::uint64_t(n / 8));
  EXPECT_LT(failed_total, std::uint64_t(n / 6));
}

}  // namespace

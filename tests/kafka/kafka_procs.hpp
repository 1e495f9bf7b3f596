// tests/kafka/kafka_procs.hpp — what the tests that run pipelines in child processes
// share: spawn a process (stderr to a file), a reaper that kills it on scope exit, and a
// feeder thread that writes the input while the pipelines run.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kafka_env.hpp"

extern char** environ;

namespace kt {

/// Starts `args`; stderr to `err_file` when given. -1 on failure.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& err_file = "") {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!err_file.empty()) posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

/// Kills the process on scope exit unless it was reaped (an ASSERT returns early).
struct reaper {
  pid_t p = -1;
  ~reaper() {
    if (p > 0) {
      ::kill(p, SIGCONT);
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
  }
};

/// A live input: writes `kv` (key, value, partition or -1 = by key) to `topic` at
/// `per_s` records per second from a thread of its own, as a stream that is being
/// produced while the pipeline runs (and is killed). join() waits for the last one.
class feeder {
 public:
  feeder(std::string topic, std::vector<std::tuple<std::string, std::string, int>> kv, int per_s)
      : t_([topic = std::move(topic), kv = std::move(kv), per_s] {
          std::string err;
          std::unique_ptr<RdKafka::Conf> c(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
          c->set("bootstrap.servers", kt::brokers(), err);
          c->set("partitioner", "murmur2_random", err);
          c->set("linger.ms", "5", err);
          std::unique_ptr<RdKafka::Producer> p(RdKafka::Producer::create(c.get(), err));
          const auto start = std::chrono::steady_clock::now();
          for (std::size_t i = 0; i < kv.size(); ++i) {
            if (i % 50 == 0)
              std::this_thread::sleep_until(start + std::chrono::microseconds(std::int64_t(i) * 1000000 / per_s));
            const auto& [k, v, part] = kv[i];
            while (p->produce(topic, part < 0 ? RdKafka::Topic::PARTITION_UA : part, RdKafka::Producer::RK_MSG_COPY,
                              const_cast<char*>(v.data()), v.size(), k.data(), k.size(), 0,
                              nullptr) == RdKafka::ERR__QUEUE_FULL)
              p->poll(10);
            p->poll(0);
          }
          p->flush(30000);
        }) {}
  ~feeder() { join(); }
  void join() {
    if (t_.joinable()) t_.join();
  }

 private:
  std::thread t_;
};

}  // namespace kt

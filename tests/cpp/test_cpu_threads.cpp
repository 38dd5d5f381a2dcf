// The CPU backend's threads: the count a call sizes its scratch with is the count it runs on,
// whatever set_cpu_threads does meanwhile; a forked child's calls finish; the count is bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include "cpu/thread_pool.h"
#include "test_util.h"

namespace flashattn::test {
namespace {

using namespace std::chrono_literals;

// Restores the default thread count when a test ends, whatever it set.
class CpuThreads : public ::testing::Test {
 protected:
  ~CpuThreads() override { (void)set_cpu_threads(0); }
};

// The largest worker index a team's parallel_for hands out.
int max_worker_index(const cpu::WorkerTeam& team, int64_t items) {
  std::atomic<int> largest{-1};
  team.parallel_for(items, [&](int64_t, int worker) {
    int seen = largest.load();
    while (worker > seen && !largest.compare_exchange_weak(seen, worker)) {
    }
    std::this_thread::sleep_for(100us);  // let every worker take items
  });
  return largest.load();
}

TEST_F(CpuThreads, TeamKeepsTheCountItWasMadeWith) {
  ASSERT_TRUE(set_cpu_threads(2).ok());
  const cpu::WorkerTeam team;
  ASSERT_TRUE(set_cpu_threads(8).ok());
  EXPECT_EQ(team.size(), 2);
  EXPECT_EQ(max_worker_index(team, 200), 1);
  const cpu::WorkerTeam later;
  EXPECT_EQ(later.size(), 8);
  EXPECT_LT(max_worker_index(later, 200), 8);
}

// The crash: a call sized its scratch for a few workers, queued behind another call, and
// ran on the count set_cpu_threads raised meanwhile.
TEST_F(CpuThreads, QueuedTeamRunsOnItsOwnCountAfterTheCountRises) {
  ASSERT_TRUE(set_cpu_threads(2).ok());
  std::atomic<bool> release{false}, queued_team_made{false};
  std::thread holder([&] {
    cpu::WorkerTeam().parallel_for(2, [&](int64_t, int) {
      while (!release.load()) std::this_thread::sleep_for(1ms);
    });
  });
  std::atomic<int> queued_max{-1};
  std::thread queued([&] {
    const cpu::WorkerTeam team;  // 2 workers
    queued_team_made = true;
    queued_max = max_worker_index(team, 200);  // waits for the holder's region
  });
  while (!queued_team_made.load()) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(set_cpu_threads(8).ok());
  release = true;
  holder.join();
  queued.join();
  EXPECT_EQ(queued_max.load(), 1);
}

// A forward of (batch, seqlen, 4 heads, 64) float32 on random data.
struct Forward {
  explicit Forward(int batch, int seqlen, uint64_t seed = 3)
      : q(DType::F32, {batch, seqlen, 4, 64}), k(q), v(q), out(DType::F32, {batch, seqlen, 4, 64}) {
    std::mt19937_64 rng(seed);
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
  }
  Status run() {
    FwdParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.backend = Backend::Cpu;
    return fwd(p);
  }
  HostTensor q, k, v, out;
};

bool same_bits(const HostTensor& a, const std::vector<float>& b) {
  const std::vector<float> x = a.to_float();
  return x.size() == b.size() && std::memcmp(x.data(), b.data(), b.size() * sizeof(float)) == 0;
}

// The repro through the public API: a long call runs, a short one starts, then the count
// rises to 8. Both finish with the results of an undisturbed run (the thread count never changes
// the bits).
TEST_F(CpuThreads, RaisingTheCountWhileCallsRunAndWait) {
  for (int first_count : {1, 2}) {
    SCOPED_TRACE("first count " + std::to_string(first_count));
    Forward big(2, 6144), small(4, 512);  // big: ~0.3 s per thread on a fast core
    ASSERT_TRUE(big.run().ok());
    ASSERT_TRUE(small.run().ok());
    const std::vector<float> big_expected = big.out.to_float(), small_expected = small.out.to_float();
    big.out.poison();
    small.out.poison();
    ASSERT_TRUE(set_cpu_threads(first_count).ok());

    Status big_status, small_status;
    std::thread big_call([&] { big_status = big.run(); });
    std::this_thread::sleep_for(20ms);
    std::thread small_call([&] { small_status = small.run(); });
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(set_cpu_threads(8).ok());
    big_call.join();
    small_call.join();
    ASSERT_TRUE(big_status.ok()) << big_status.message();
    ASSERT_TRUE(small_status.ok()) << small_status.message();
    EXPECT_TRUE(same_bits(big.out, big_expected));
    EXPECT_TRUE(same_bits(small.out, small_expected));
  }
}

// Runs child() in a forked child and waits for it at most `limit`: the child's exit code, or -1
// when it had to be killed (hung).
int run_in_child(const std::function<bool()>& child, std::chrono::seconds limit) {
  const pid_t pid = fork();
  if (pid == 0) _exit(child() ? 0 : 1);  // _exit: no test-framework teardown in the child
  if (pid < 0) return -2;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The pool's threads do not survive fork(): the child's first call must start fresh ones
// instead of waiting for them (multiprocessing's fork start method, DataLoader workers).
TEST_F(CpuThreads, ForkedChildFinishesItsCalls) {
  ASSERT_TRUE(set_cpu_threads(4).ok());
  Forward f(2, 300);
  ASSERT_TRUE(f.run().ok());  // starts the pool's workers in the parent
  const std::vector<float> expected = f.out.to_float();
  const int code = run_in_child([&] {
    f.out.poison();
    return f.run().ok() && same_bits(f.out, expected) && f.run().ok() && same_bits(f.out, expected);
  }, 30s);
  EXPECT_EQ(code, 0) << (code == -1 ? "the child hung" : "the child failed");
}

// fork() while another thread is inside a call: the child inherits the pool's mutexes locked by
// a thread that does not exist there.
TEST_F(CpuThreads, ForkDuringAnotherThreadsCall) {
  ASSERT_TRUE(set_cpu_threads(2).ok());
  Forward small(2, 300);
  ASSERT_TRUE(small.run().ok());
  const std::vector<float> expected = small.out.to_float();
  std::atomic<bool> release{false}, running{false};
  std::thread holder([&] {
    cpu::WorkerTeam().parallel_for(2, [&](int64_t, int) {
      running = true;
      while (!release.load()) std::this_thread::sleep_for(1ms);
    });
  });
  while (!running.load()) std::this_thread::sleep_for(1ms);
  const int code = run_in_child([&] {
    small.out.poison();
    return small.run().ok() && same_bits(small.out, expected);
  }, 30s);
  release = true;
  holder.join();
  EXPECT_EQ(code, 0) << (code == -1 ? "the child hung" : "the child failed");
}

TEST_F(CpuThreads, CountIsBounded) {
  ASSERT_TRUE(set_cpu_threads(3).ok());
  const int max = cpu::max_cpu_threads();
  EXPECT_GE(max, 64);
  for (int bad : {-1, max + 1, INT_MAX}) {
    const Status st = set_cpu_threads(bad);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(st.argument(), "threads");
    EXPECT_NE(st.message().find("argument 'threads': must be in [0, " + std::to_string(max) + "]"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("got " + std::to_string(bad)), std::string::npos) << st.message();
    EXPECT_EQ(cpu_threads(), 3) << "a rejected count must not change the setting";
  }
  EXPECT_TRUE(set_cpu_threads(max).ok());
  EXPECT_EQ(cpu_threads(), max);
  EXPECT_TRUE(set_cpu_threads(0).ok());
  EXPECT_EQ(cpu_threads(), int(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace flashattn::test

// ComputeThread: work handed over runs on the owning thread, in one OpenMP pool, and comes back
// with its result or its exception.
#include "runtime/compute_thread.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <barrier>
#include <chrono>
#include <filesystem>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cpudl {
namespace {

std::size_t threads_of_this_process() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// The count once threads that are ending have ended: a pool's threads leave after their master
// has, not with it.
std::size_t settled_threads_of_this_process() {
  std::size_t last = threads_of_this_process();
  for (int same = 0; same < 5;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const std::size_t now = threads_of_this_process();
    same = now == last ? same + 1 : 0;
    last = now;
  }
  return last;
}

// A parallel region of two threads: the caller's OpenMP pool gains a thread the first time.
int two_thread_region() {
  int seen = 0;
#pragma omp parallel num_threads(2) reduction(+ : seen)
  seen += 1;
  return seen;
}

TEST(ComputeThread, RunsHandedWorkOnItsOwnerAndReturnsResultsAndErrors) {
  std::thread::id owner_id;
  ComputeThread* compute = nullptr;
  std::barrier ready(2);
  std::thread owner([&] {
    ComputeThread c;
    compute = &c;
    owner_id = std::this_thread::get_id();
    ready.arrive_and_wait();
    c.work_until_stopped();
  });
  ready.arrive_and_wait();
  EXPECT_EQ(compute->run([] { return std::this_thread::get_id(); }), owner_id);
  EXPECT_EQ(compute->run([] { return 6 * 7; }), 42);
  EXPECT_THROW(compute->run([]() -> int { throw std::runtime_error("bad batch"); }), std::runtime_error);
  int ran = 0;
  compute->run([&] { ++ran; });  // void work
  EXPECT_EQ(ran, 1);
  compute->stop();
  owner.join();
}

TEST(ComputeThread, SubmittedWorkRunsInOrderWithoutTheCallerWaiting) {
  ComputeThread* compute = nullptr;
  std::barrier ready(2);
  std::thread owner([&] {
    ComputeThread c;
    compute = &c;
    ready.arrive_and_wait();
    c.work_until_stopped();
  });
  ready.arrive_and_wait();
  // The first job holds the compute thread until the caller, not waiting for it, lets it go: the
  // second queues behind it, and the order of their effects is the order of submission.
  std::promise<void> release;
  std::vector<int> order;
  auto first = compute->submit([&, gate = release.get_future().share()] {
    gate.wait();
    order.push_back(1);
    return 1;
  });
  auto second = compute->submit([&] {
    order.push_back(2);
    return std::this_thread::get_id();
  });
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  release.set_value();
  EXPECT_EQ(first.get(), 1);
  EXPECT_NE(second.get(), std::this_thread::get_id());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  auto failing = compute->submit([]() -> int { throw std::runtime_error("bad batch"); });
  EXPECT_THROW(failing.get(), std::runtime_error);
  compute->stop();
  owner.join();
}

TEST(ComputeThread, AfterStopWorkRunsOnTheCaller) {
  ComputeThread* compute = nullptr;
  std::barrier ready(2);
  std::thread owner([&] {
    static ComputeThread c;  // outlives the owner: the caller below uses it after stop
    compute = &c;
    ready.arrive_and_wait();
    c.work_until_stopped();
  });
  ready.arrive_and_wait();
  compute->stop();
  owner.join();
  EXPECT_EQ(compute->run([] { return std::this_thread::get_id(); }), std::this_thread::get_id());
}

// Three threads with work for OpenMP make one pool, the owner's, instead of one each: libgomp
// shortens every barrier's spin once its pools hold more threads than there are CPUs
// (runtime/compute_thread.h). Counted while the callers are alive, since a pool ends with its thread.
TEST(ComputeThread, WorkFromSeveralThreadsMakesOneOpenMpPool) {
  for (const bool handed : {true, false}) {
    ComputeThread* compute = nullptr;
    std::barrier owner_ready(2);
    std::thread owner([&] {
      ComputeThread c;
      compute = &c;
      owner_ready.arrive_and_wait();
      c.work_until_stopped();
    });
    owner_ready.arrive_and_wait();
    const std::size_t before = settled_threads_of_this_process();  // with the owner
    constexpr int kCallers = 3;
    std::barrier counted(kCallers + 1);
    std::vector<std::thread> callers;
    std::vector<int> seen(kCallers, 0);
    for (int i = 0; i < kCallers; ++i)
      callers.emplace_back([&, i] {
        seen[static_cast<std::size_t>(i)] = handed ? compute->run(two_thread_region) : two_thread_region();
        counted.arrive_and_wait();  // alive (with any pool of its own) while the threads are counted
        counted.arrive_and_wait();
      });
    counted.arrive_and_wait();
    const std::size_t during = threads_of_this_process();
    counted.arrive_and_wait();
    for (std::thread& t : callers) t.join();
    compute->stop();
    owner.join();
    for (int s : seen) EXPECT_EQ(s, 2);
    // The callers, and one pool thread: the owner's (handed) or one per caller (not handed).
    EXPECT_EQ(during - before, static_cast<std::size_t>(kCallers + (handed ? 1 : kCallers)))
        << (handed ? "handed to the compute thread" : "run by each caller");
  }
}

}  // namespace
}  // namespace cpudl

// Team and Workers: a pass run as one parallel region whose members meet at a spinning barrier
// gives every member what the others wrote before it, splits work into parallel_for's ranges,
// and comes back with a member's exception instead of hanging.
#include "runtime/team.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace cpudl {
namespace {

// Each phase, every member writes its slot, then (after the barrier) reads every other slot: a
// barrier that let a member through early, or did not order the writes, shows a stale phase.
TEST(Team, BarrierOrdersEveryPhaseOfEveryMember) {
  for (const int threads : {2, 3}) {
    std::vector<std::atomic<int>> slot(static_cast<std::size_t>(threads));
    std::atomic<int> stale{0}, members{0};
    run_as_team(threads, [&](Workers& w) {
      ASSERT_TRUE(w.in_team());
      members.fetch_add(1);
      const auto me = static_cast<std::size_t>(omp_get_thread_num());
      for (int phase = 1; phase <= 20000; ++phase) {
        slot[me].store(phase, std::memory_order_relaxed);
        w.once([] {});  // the barrier
        for (const auto& s : slot)
          if (s.load(std::memory_order_relaxed) != phase) stale.fetch_add(1);
        w.once([] {});  // nobody writes the next phase before all have read this one
      }
    });
    EXPECT_EQ(members.load(), threads);
    EXPECT_EQ(stale.load(), 0) << threads << " members";
  }
}

// once() runs its function on one member, and its writes are seen by all after it returns.
TEST(Team, OnceRunsOnOneMemberAndPublishesItsWrites) {
  std::atomic<int> calls{0}, wrong{0};
  int value = 0;  // plain memory: the barrier must order it
  run_as_team(2, [&](Workers& w) {
    for (int i = 1; i <= 1000; ++i) {
      w.once([&] {
        calls.fetch_add(1);
        value = i;
      });
      if (value != i) wrong.fetch_add(1);
      w.once([] {});
    }
  });
  EXPECT_EQ(calls.load(), 1000);
  EXPECT_EQ(wrong.load(), 0);
}

// The ranges a team's split hands out are parallel_for's: the same (n, grain) gives the same
// ranges forked and in a team, so a pass's results do not depend on how it ran.
TEST(Team, SplitGivesParallelForsRanges) {
  using Ranges = std::set<std::pair<std::size_t, std::size_t>>;
  for (const std::size_t n : {0, 1, 5, 16, 17, 100, 4097})
    for (const std::size_t grain : {1, 16, 1000}) {
      Ranges forked, team;
      std::mutex m;
      auto record = [&](Ranges& into) {
        return [&](std::size_t b, std::size_t e) {
          std::lock_guard lock(m);
          into.insert({b, e});
        };
      };
      parallel_for(n, grain, 2, record(forked));
      run_as_team(2, [&](Workers& w) { w.split(n, grain, record(team)); });
      EXPECT_EQ(forked, team) << "n " << n << ", grain " << grain;
      std::size_t covered = 0;
      for (const auto& [b, e] : team) covered += e - b;
      EXPECT_EQ(covered, n);
    }
}

// A member that throws ends the pass: the others pass every barrier from then on, and the
// exception comes out of run_as_team (no hang, no terminate from inside the region).
TEST(Team, AMembersExceptionIsRethrownWithoutHangingTheOthers) {
  std::atomic<int> finished{0};
  EXPECT_THROW(run_as_team(2,
                           [&](Workers& w) {
                             for (int i = 0; i < 100; ++i) {
                               if (i == 10 && omp_get_thread_num() == 1) throw std::runtime_error("member 1");
                               w.once([] {});
                             }
                             finished.fetch_add(1);
                           }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 1);  // member 0 got through its remaining barriers
}

// More members than CPUs: the barrier stops spinning and yields, so the pass still ends.
TEST(Team, MoreMembersThanCpusStillFinish) {
  std::atomic<int> sum{0};
  run_as_team(8, [&](Workers& w) {
    for (int i = 0; i < 200; ++i) w.split(64, 1, [&](std::size_t b, std::size_t e) { sum += int(e - b); });
  });
  EXPECT_EQ(sum.load(), 200 * 64);
}

// One thread, or a caller already inside a parallel region: no team forms and the pass runs
// once, forked.
TEST(Team, OneThreadOrANestedCallRunsOnceForked) {
  int calls = 0;
  run_as_team(1, [&](Workers& w) {
    ++calls;
    EXPECT_FALSE(w.in_team());
  });
  EXPECT_EQ(calls, 1);
  std::atomic<int> nested{0}, in_team{0}, outer{0};
#pragma omp parallel num_threads(2)
  {
    outer.fetch_add(1);
    run_as_team(2, [&](Workers& w) {
      nested.fetch_add(1);
      if (w.in_team()) in_team.fetch_add(1);
    });
  }
  EXPECT_EQ(nested.load(), outer.load());  // once per thread of the outer region
  EXPECT_EQ(in_team.load(), 0);
}

}  // namespace
}  // namespace cpudl

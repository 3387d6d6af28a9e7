// The ETA train prints covers the whole run, not the epoch: worked by hand.
#include <gtest/gtest.h>

#include "train/trainer.h"

namespace cpudl::train {
namespace {

StepProgress at(int epoch, int epochs, std::int64_t step, std::int64_t steps, double seconds) {
  StepProgress p{};
  p.epoch = epoch, p.epochs = epochs, p.step = step, p.steps = steps, p.seconds = seconds;
  return p;
}

TEST(StepProgress, RemainingSecondsCoverEveryLaterEpoch) {
  // 25 of 100 steps in 5 s: 0.2 s a step; 75 steps left in this epoch, 200 in the two after it.
  EXPECT_DOUBLE_EQ(at(1, 3, 25, 100, 5.0).remaining_seconds(), 275 * 0.2);
  // The last epoch: only its own steps remain.
  EXPECT_DOUBLE_EQ(at(3, 3, 25, 100, 5.0).remaining_seconds(), 75 * 0.2);
  EXPECT_DOUBLE_EQ(at(3, 3, 100, 100, 20.0).remaining_seconds(), 0.0);
  EXPECT_DOUBLE_EQ(at(1, 2, 0, 100, 0.0).remaining_seconds(), 0.0);  // no pace yet
}

}  // namespace
}  // namespace cpudl::train

// The gradient task scheduler on hand-made progress: warm-up first, then the task whose next
// trials are expected to cut the most end-to-end time.
#include <gtest/gtest.h>

#include "search/TaskScheduler.h"

namespace autotune {
namespace {

/** A task of `kind` taking `ms` (never improved) after `trials` trials. */
TaskProgress task(double ms, int64_t trials, double uses = 1, const std::string &kind = "conv", double gflop = 0.1) {
  TaskProgress t;
  t.uses = uses, t.flops = gflop * 1e9, t.kind = kind, t.default_s = ms * 1e-3;
  t.best_ratio.assign(static_cast<size_t>(trials), 1.0);
  return t;
}

TEST(TaskScheduler, EveryTaskGetsItsWarmUpFirst) {
  TaskScheduler s;  // warm-up: 9 trials
  std::vector<TaskProgress> tasks{task(1, 9), task(5, 9), task(0.1, 3)};
  EXPECT_EQ(s.pick(tasks), 2);  // the small task's warm-up comes before the big task's gradient
  tasks[2].best_ratio.resize(9, 1.0);
  EXPECT_EQ(s.pick(tasks), 1);
}

TEST(TaskScheduler, TasksThatCannotGainAreNeverPicked) {
  TaskScheduler s;
  std::vector<TaskProgress> tasks{task(5, 1), task(3, 20), task(1, 20)};
  tasks[0].default_s = 0;  // its default never ran correctly
  tasks[1].exhausted = true;
  EXPECT_EQ(s.pick(tasks), 2);
  EXPECT_EQ(s.gradient(tasks, 0), 0.0);
  EXPECT_EQ(s.gradient(tasks, 1), 0.0);
  EXPECT_LT(s.gradient(tasks, 2), 0.0);
  tasks[2].exhausted = true;
  EXPECT_EQ(s.pick(tasks), -1);
}

TEST(TaskScheduler, UsesTimeAndTrialsWeighTheForwardEstimate) {
  TaskScheduler s;
  // Different kinds, so no throughput comparison: uses x time / trials decides.
  std::vector<TaskProgress> tasks{task(1, 20, 1, "a"), task(1, 20, 2, "b")};
  EXPECT_EQ(s.pick(tasks), 1);  // used twice
  tasks[1].best_ratio.resize(60, 1.0);
  EXPECT_EQ(s.pick(tasks), 0);  // 2 x 1 ms / 60 trials < 1 ms / 20 trials
  EXPECT_NEAR(s.gradient(tasks, 0), -(1 - s.options().alpha) * 1e-3 / 20, 1e-12);
}

TEST(TaskScheduler, ARecentGainDrawsTheNextBatch) {
  TaskScheduler s;
  std::vector<TaskProgress> tasks{task(1, 40, 1, "a"), task(1, 40, 1, "b")};
  // Task 1 went from 1.25 ms to 1 ms over its last 24 trials (ratios relative to its default 1.25 ms).
  tasks[1].default_s = 1.25e-3;
  for (size_t k = 0; k < 40; ++k) tasks[1].best_ratio[k] = k < 16 ? 1.0 : 1.0 - 0.2 * static_cast<double>(k - 15) / 24;
  ASSERT_NEAR(tasks[1].best_s(), 1e-3, 1e-12);
  EXPECT_EQ(s.pick(tasks), 1);
  double backward = -0.25e-3 / 24 * (24.0 / 24);  // (g(40) - g(16)) / 24
  EXPECT_NEAR(s.gradient(tasks, 1), s.options().alpha * backward + (1 - s.options().alpha) * (-1e-3 / 40), 1e-12);
}

TEST(TaskScheduler, ATaskBehindItsKindIsPreferredButBounded) {
  TaskScheduler s;
  // Same time and trials; task 0 does 0.1 GFLOP in 1 ms, its sibling 1 GFLOP in 1 ms: task 0 lags
  // (2 x 0.1 / 1000 GFLOP/s = 0.2 ms reachable), task 2 of another kind does not.
  std::vector<TaskProgress> tasks{task(1, 20, 1, "conv", 0.1), task(1, 20, 1, "conv", 1.0), task(1, 20, 1, "pool", 0.1)};
  EXPECT_EQ(s.pick(tasks), 0);
  // The lag at most doubles the forward estimate, which still decays with trials: a task that can
  // never reach its kind's rate (bound by memory) does not take every trial.
  EXPECT_NEAR(s.gradient(tasks, 0), (1 - s.options().alpha) * -1e-3 / 20 * 1.8, 1e-12);
  tasks[0].best_ratio.resize(41, 1.0);
  EXPECT_NE(s.pick(tasks), 0);  // 1.8 x 1 ms / 41 trials < 1 ms / 20 trials
}

TEST(TaskScheduler, TrialsSpreadInProportionToTimeWhenNothingImproves) {
  // Nothing ever improves: trials go in proportion to uses x time, and no task is starved.
  TaskScheduler s;
  std::vector<TaskProgress> tasks{task(4, 9, 1, "a"), task(1, 9, 2, "b"), task(1, 9, 1, "c"), task(0.05, 9, 1, "d")};
  for (int batch = 0; batch < 200; ++batch) {
    int p = s.pick(tasks);
    ASSERT_GE(p, 0);
    tasks[static_cast<size_t>(p)].best_ratio.resize(tasks[static_cast<size_t>(p)].best_ratio.size() + 8, 1.0);
  }
  auto n = [&](size_t i) { return static_cast<double>(tasks[i].trials()); };
  EXPECT_NEAR(n(0) / n(2), 4.0, 0.5);
  EXPECT_NEAR(n(1) / n(2), 2.0, 0.3);
  EXPECT_LE(n(3), 17.0);  // 0.05 ms: at most one batch beyond its warm-up in 1600 trials
}

}  // namespace
}  // namespace autotune

#include "search/TaskScheduler.h"

#include <algorithm>
#include <limits>

namespace autotune {

namespace {

bool tunable(const TaskProgress &t) { return !t.exhausted && t.default_s > 0 && t.trials() > 0; }

}  // namespace

double TaskScheduler::gradient(const std::vector<TaskProgress> &tasks, size_t i) const {
  const TaskProgress &t = tasks[i];
  if (!tunable(t)) return 0;
  double g = t.best_s();
  auto n = t.trials();
  double backward = 0;
  if (n > o_.window) backward = t.default_s * (t.best_ratio[n - 1] - t.best_ratio[n - 1 - o_.window]) / static_cast<double>(o_.window);
  // Forward: the next trial gains g / n ("as much again as all trials so far"), more for a task
  // that lags the throughput of its kind: up to twice as much for one that could reach 1/beta of
  // its best sibling's FLOP rate at time g2 (the lag (g - g2) / g, between 0 and 1).
  double best_rate = 0;
  for (size_t j = 0; j < tasks.size(); ++j)
    if (j != i && tasks[j].kind == t.kind && tasks[j].best_s() > 0) best_rate = std::max(best_rate, tasks[j].flops / tasks[j].best_s());
  double lag = 0;
  if (best_rate > 0 && t.flops > 0) lag = std::clamp((g - o_.beta * t.flops / best_rate) / g, 0.0, 1.0);
  double forward = -g / static_cast<double>(n) * (1 + lag);
  return t.uses * (o_.alpha * backward + (1 - o_.alpha) * forward);
}

int TaskScheduler::pick(const std::vector<TaskProgress> &tasks) const {
  for (size_t i = 0; i < tasks.size(); ++i)
    if (tunable(tasks[i]) && tasks[i].trials() < o_.warmup_trials) return static_cast<int>(i);
  int best = -1;
  double best_grad = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (!tunable(tasks[i])) continue;
    double g = gradient(tasks, i);
    if (g < best_grad) best_grad = g, best = static_cast<int>(i);
  }
  return best;
}

}  // namespace autotune

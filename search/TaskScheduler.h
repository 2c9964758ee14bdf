#pragma once
// Which task the next batch of trials goes to: Ansor's gradient task scheduler (Zheng et al.,
// OSDI 2020, section 6), on the objective "end-to-end time" = sum over tasks of uses x best time.
//
// For task i with best time g_i after t_i trials and w_i uses in the model, the expected change
// of the objective per further trial is
//
//   dF/dt_i ~= w_i * ( alpha * backward_i + (1 - alpha) * forward_i )
//
//   backward_i = (g_i(t_i) - g_i(t_i - W)) / W            what the last W trials gained
//   forward_i  = -(g_i / t_i) * (1 + lag_i)                "as much again as all trials so far"
//   lag_i      = clamp((g_i - beta * flops_i / best_rate(kind_i)) / g_i, 0, 1)
//
// and the batch goes to the task with the most negative estimate. Tasks of one kind (the same
// ops, e.g. every conv+add+relu) tell each other what throughput is reachable: a task far below
// its siblings' best FLOP rate gets up to twice the forward estimate. Ansor's own forward term,
// min(g - g/t, beta * flops / best_rate) - g per round, was tried first: on ResNet-18 with cold
// weights, the 512-channel 3x3 conv at 7x7, bound by reading 9.4 MB of weights, can never reach
// half the FLOP rate of its kind's Winograd conv at 28x28, so its estimate never decayed and it
// took all 159 trials after the warm-up. Here every task's estimate decays as 1/t. After a
// warm-up in which every task gets `warmup_trials`, every pick is by gradient; a task whose space is exhausted, or that has never
// run correctly, is never picked.
#include <cstdint>
#include <string>
#include <vector>

namespace autotune {

struct TaskProgress {
  double uses = 1;          // groups of the model that run this task
  double flops = 0;
  std::string kind;         // tasks of one kind compare throughputs
  double default_s = 0;     // the default schedule's time (0: never ran correctly)
  // best_ratio[k]: the best time relative to the default after k + 1 trials (all statuses count)
  std::vector<double> best_ratio;
  bool exhausted = false;   // no unmeasured point left in its space
  int64_t trials() const { return static_cast<int64_t>(best_ratio.size()); }
  double best_s() const { return best_ratio.empty() ? default_s : default_s * best_ratio.back(); }
};

struct TaskSchedulerOptions {
  double alpha = 0.2;           // Ansor's weight of the backward (observed) gradient
  double beta = 2;              // a task may reach 1/beta of the best throughput of its kind
  int64_t window = 24;          // trials the backward gradient looks back over (3 batches of 8)
  int64_t warmup_trials = 9;    // every task gets this many trials (its default and one batch) first
};

class TaskScheduler {
 public:
  explicit TaskScheduler(TaskSchedulerOptions o = {}) : o_(o) {}

  /** The task the next batch goes to, or -1 when no task can be tuned further. */
  int pick(const std::vector<TaskProgress> &tasks) const;

  /** The estimated change of end-to-end time per further trial of task i (<= 0; 0 for a task never picked). */
  double gradient(const std::vector<TaskProgress> &tasks, size_t i) const;

  const TaskSchedulerOptions &options() const { return o_; }

 private:
  TaskSchedulerOptions o_;
};

}  // namespace autotune

#pragma once
// Training data for the cost model, from a tuning database: every successful record of a target
// becomes a sample, its features recomputed from the workload's stored IR and the record's
// schedule (so any database trains a model, also one written before the features existed), its
// target the speed over the task's default schedule timed alongside it, log2(baseline / time).
// And the held-out metrics the issue asks for: pairwise rank accuracy within each task and
// top-k recall of each task's best schedule.
#include <string>
#include <vector>

#include "codegen/Target.h"
#include "costmodel/Model.h"
#include "db/TuningDb.h"

namespace autotune {

struct Sample {
  std::string workload;  // hash
  std::string schedule;  // JSON
  std::vector<float> x;
  float y = 0;           // log2(baseline_s / median_s)
};

struct SampleSet {
  std::vector<Sample> samples;
  int64_t skipped = 0;  // ok records whose workload or schedule no longer lowers
};

/** The ok records of `target_key` in `db` as samples, features computed for `target`. */
Expected<SampleSet> load_samples(TuningDb &db, const std::string &target_key, const Target &target);

struct EvalReport {
  double pairwise_accuracy = 0;  // over every pair of distinct schedules of a task, measured apart
  double top1_recall = 0;        // share of tasks whose measured best is the model's first pick
  double top5_recall = 0;        // ... is among the model's first five
  int64_t records_train = 0, records_test = 0, tasks_test = 0, pairs = 0;
  double train_s = 0, predict_s = 0;
};

/**
 * Ranks `test` with `model`: samples of one (workload, schedule) are averaged first (a schedule
 * confirmed three times is one point), then every task with two or more schedules is scored.
 */
Expected<EvalReport> evaluate(const CostModel &model, const std::vector<Sample> &test);

/** Trains a model on samples (their x and y). */
Expected<std::unique_ptr<CostModel>> train_on(const std::vector<Sample> &train, const CostModelOptions &o = {});

}  // namespace autotune

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
#include "ir/Graph.h"
#include "costmodel/Model.h"
#include "db/TuningDb.h"

namespace autotune {

struct Sample {
  std::string workload;  // hash
  std::string schedule;  // JSON
  std::vector<float> x;
  float y = 0;           // log2(baseline_s / median_s)
  double handoff_ns = 0;  // where the cores were (TuningRecord::handoff_ns; 0: unknown): y compares only within a mode
  double baseline_s = 0;  // the default's time measured alongside (0: unknown): how much the mode moved y
};

struct SampleSet {
  std::vector<Sample> samples;
  int64_t skipped = 0;  // ok records whose workload or schedule no longer lowers
};

/** The kernel features of `body`'s default schedule on `target` (model_features' point of reference); empty if it does not lower. */
std::vector<float> default_features(const Graph &body, const Target &target);

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

/**
 * The cost model of a tuning run: samples as they arrive (the database's first), a model trained
 * on them once `min_samples` are in and retrained when a quarter of what it knows (at least
 * `min_fresh`) is new. The model being replaced is first scored on the samples it never saw: its
 * held-out pairwise accuracy. The CPU search (search/ModelSearch) and the GPU tuner share it.
 */
class OnlineModel {
 public:
  OnlineModel(CostModelOptions o, size_t min_samples, size_t min_fresh) : o_(std::move(o)), min_samples_(min_samples), min_fresh_(min_fresh) {}
  void add(Sample s) { samples_.push_back(std::move(s)); }
  /** Retrains when enough is new (above); true if it trained. */
  Expected<bool> maybe_retrain();
  /** The current model (null before the first training). */
  const CostModel *model() const { return model_.get(); }
  int64_t trained_rows() const { return model_ ? model_->rows_trained() : 0; }
  /** Pairwise accuracy of the last model but one on the samples that arrived after it was trained (-1: none yet). */
  double heldout_accuracy() const { return heldout_accuracy_; }
  double train_seconds() const { return train_s_; }
  int trainings() const { return trainings_; }

 private:
  CostModelOptions o_;
  size_t min_samples_, min_fresh_;
  std::vector<Sample> samples_;
  size_t trained_upto_ = 0;  // samples_[0, trained_upto_) trained the current model
  std::unique_ptr<CostModel> model_;
  double heldout_accuracy_ = -1, train_s_ = 0;
  int trainings_ = 0;
};

}  // namespace autotune

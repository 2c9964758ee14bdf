#pragma once
// The tuning loop: tasks from a fused model, a trial budget spread over them, candidates
// measured and every result saved to the tuning database the moment it is known.
//
// Candidates come from the cost model's evolutionary search (search/ModelSearch: a model trained
// on the database's records ranks mutations and crossovers, the best predictions and a share of
// random points are measured) or, with search "random", from random sampling of each task's
// schedule space. Every task's default schedule is measured first; then search/TaskScheduler
// (Ansor's gradient scheduler) gives every task one batch and each further batch to the task whose
// next trials are expected to cut the most end-to-end time. Records already in the database count toward the
// budget, so running the same command again resumes where an interrupted run stopped.
//
// When the budget is spent, a confirmation phase re-measures each task's leading schedules and
// its default kConfirmations times (Halide's autoscheduler benchmarks until its best candidates
// agree): on a shared machine the fastest of hundreds of single measurements is usually luck,
// and the database's best() ranks confirmed schedules by their median first.
#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "search/Measurer.h"
#include "search/Task.h"

namespace autotune {

struct TuneOptions {
  int64_t trials = 200;
  std::string db_path = "tuning.db";
  uint64_t seed = 0;
  int batch = 8;                      // candidates compiled together
  int confirm_top = 4;                // schedules per task re-measured at the end, its default one of them (0: no confirmation)
  std::string search = "evolutionary";  // "evolutionary": the cost model ranks candidates (search/ModelSearch); "random"
  std::string space = "all";          // "all": template knobs and sketch step lists; "knobs": the template knobs only
  MeasureOptions measure;            // the trials' measurements
  // The confirmations decide the plan (and the partition search's moves are taken on three
  // rounds): they may be timed longer than the trials (`--min-time 0.05` with this at 0.1 tunes
  // in about 0.7 of the time; docs/architecture.md, "Measurement", has what it did to the plans).
  double confirm_min_time_s = 0.1;
  std::string cache_dir;              // kernel object cache ("" for none)
  Target target = host_target();      // what to tune for: compiled, scheduled and keyed for it
  const std::atomic<bool> *stop = nullptr;                // set by Ctrl-C: finish the current candidate, then stop
  std::function<void(const std::string &)> progress;      // one progress line per measurement

  /** An error naming the first option out of range (tune() checks this before anything else). */
  Status validate() const;
};

struct TaskReport {
  Task task;
  // Until the confirmation phase, both as if every measurement was taken with the cores near (near_best).
  double default_s = 0;     // the default schedule's time: the median of the baselines timed with the candidates (0: none yet)
  double best_ratio = 1.0;  // the best candidate's time relative to the baseline timed alongside it
  int64_t trials = 0;       // records of this task on this target, all statuses
  std::string best_schedule;
  int64_t baselines = 0;    // how many baseline timings there are
  double best_s() const { return default_s * best_ratio; }
};

struct TuneReport {
  std::string target;
  std::vector<TaskReport> tasks;
  int64_t trials_before = 0;  // already in the database when the run started
  int64_t trials_run = 0;
  int64_t failures_run = 0;   // of trials_run: compile errors, crashes, timeouts, wrong results
  int64_t confirmations = 0;  // re-measurements of the leading schedules, beyond the trials
  bool interrupted = false;
  bool spaces_measured = false;  // the trials stopped before the budget: no task's space had a point left to measure
  double elapsed_s = 0;
  // The cost model (search "evolutionary"): records it was last trained on, its pairwise accuracy on
  // the records measured after each training (-1: none yet), how often and how long it trained and predicted.
  std::string search;
  int64_t model_rows = 0;
  double model_heldout_accuracy = -1, model_train_s = 0, model_predict_s = 0;
  std::vector<double> handoff_ns;  // each of this run's measurements: where the cores were (MeasureResult::handoff_ns, when known)
  double near_handoff_ns = 0;      // the near level over the database's trials and this run's (0: none known): the plan check's
  int64_t points_lowered = 0;  // by the search, for features (either search: random picks are lowered to check them)
  double points_lower_s = 0;   // the wall seconds lowering them took
  int model_trainings = 0;
  // Where the run's wall time went: the measurer's phases, choosing the candidates (the task
  // scheduler, the search and, with the cost model, its training and predictions) and saving the
  // records (their features and the database); the rest is reading the database and reporting.
  Measurer::PhaseTimes measure_times;
  double choose_s = 0, save_s = 0;
  /** Sum over groups of the default / best time of their task: the model's estimated kernel time. */
  double estimated_untuned_s() const;
  double estimated_tuned_s() const;
};

Expected<TuneReport> tune(const Graph &fused, const TuneOptions &options);

/** One successful measurement of a task's schedule against its default, and where the cores were. */
struct Timed {
  std::string schedule;
  double median_s, baseline_s, handoff_ns;
};

/**
 * Each schedule's best ratio to its task's default, as if every one was taken with the cores near
 * (`near_ns`: db/TuningDb.h, near_handoff_ns): a ratio taken apart is scaled by the default's
 * slowdown apart (apart_slowdown), so that a stretch apart does not pass its candidates off as the
 * task's best. The tuner seeds the search and picks the schedules to confirm by it.
 */
std::map<std::string, double> near_ratios(const std::vector<Timed> &timed, double near_ns);

/**
 * A task's best schedule and ratio by near_ratios, and its default's time near: the median of the
 * baselines taken near (of all of them where none was). The task scheduler and the progress line
 * read these: a stretch with the cores apart slows some defaults more than their candidates (a
 * padded input written by one thread and read by the other), and its ratios would pass for gains:
 * in eight 2000-trial runs of ResNet-18 and ResNet-50 (AVX-512, both searches), the raw best of 1
 * to 8 tasks was more than 2% below the best as if near, and 4 to 15 of a run's improvements of
 * a task's raw best were none as if near.
 */
struct NearBest {
  std::string schedule;  // "" when nothing was timed
  double ratio = 1.0;
  double default_s = 0;
};
NearBest near_best(const std::vector<Timed> &timed, double near_ns);

/**
 * The schedules a task's confirmation re-measures: the `top` best by `ratios` (near_ratios), its
 * default (`default_json`) always one of them, so that every task costs the same `top` schedules
 * however many of its schedules beat its default. (Four leaders and the default, as it was, made
 * a search that finds more schedules better than the default pay for it: 408 confirmation
 * measurements against 393 in ResNet-50's seed-2 pair.) Fewer where fewer were measured.
 */
std::vector<std::string> to_confirm(const std::map<std::string, double> &ratios, const std::string &default_json, int top);

}  // namespace autotune

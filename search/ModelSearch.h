#pragma once
// Model-guided search (issue 9): an XGBoost cost model (costmodel/) ranks candidate schedules so
// that only the promising ones are measured. Each batch of a task comes from an evolutionary
// search in the style of MetaSchedule's: random points of the task's space plus its best measured
// schedules, then generations of mutation and crossover, the parents chosen by predicted speed;
// the batch is the best unmeasured predictions plus an epsilon share of random unmeasured points
// (exploration, and data where the model is unsure); until every family of the task's space (the
// algorithm and the structure a schedule picks before its sizes: ScheduleSpace::family) has been
// measured, each family not yet measured gets its best-predicted point, in up to half of a
// batch. Every point a task's searches have lowered stays in its pool: a batch ranks the whole
// pool, so the evolution goes on across batches and each batch lowers only its own new points
// (lowering is the search's cost).
// The model starts from whatever the database already holds for the target (other models'
// records included) and is retrained as records arrive.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "costmodel/Dataset.h"
#include "costmodel/Model.h"
#include "search/ScheduleSpace.h"
#include "search/Task.h"

namespace autotune {

struct ModelSearchOptions {
  int population = 32;        // new random points per batch, and children per generation
  int generations = 2;
  int64_t settled_pool = 256; // from this many points in a task's pool, a batch adds population / 4 random points and one generation (0: never)
  double epsilon = 0.125;     // share of each batch picked at random among unmeasured points
  int threads = 1;            // XGBoost's threads while training, and the threads lowering points for their features
  int64_t min_samples = 16;   // records before the first model is trained (random search until then)
  bool every_family = true;   // each family of a task's space (ScheduleSpace::family) not measured yet gets its best-predicted point in the next batch
};

class ModelSearch {
 public:
  ModelSearch(const Target &target, ModelSearchOptions o, uint64_t seed);

  /** Records already in the database (features recomputed). */
  void add_samples(std::vector<Sample> samples);
  /** A schedule with its JSON (its identity), written once. */
  struct Point {
    KernelSchedule schedule;
    std::string json;
  };
  /**
   * One new successful measurement: the schedule ran at `ratio` times its task's default time,
   * which took `baseline_s` alongside, with the thread pool's hand-off at `handoff_ns` (where the
   * cores were; 0: unknown, as are the defaults).
   */
  void add_result(const Task &task, const Point &p, double ratio, double baseline_s = 0, double handoff_ns = 0);
  /**
   * Retrains when enough is new (16 records, or a quarter of what the model knows); before that,
   * scores the current model on the records it has not seen (its held-out accuracy). True if it
   * trained.
   */
  Expected<bool> maybe_retrain() { return online_.maybe_retrain(); }

  /**
   * Up to `want` unmeasured, legal schedules of `task` for the next batch, no two of one kernel and
   * none of a measured schedule's kernel (LoweredKernel::identity); `elite` seeds the
   * population (the task's best measured schedules, and the Tuner adds other tasks' best), besides
   * `population` random points; each of `first` that is legal here and unmeasured is taken before
   * anything the model ranks (the best of tasks with the same anchor). Random picks while there is no model.
   */
  std::vector<KernelSchedule> propose(const Task &task, const ScheduleSpace &space, const std::set<std::string> &measured,
                                      const std::vector<KernelSchedule> &elite, int want, Rng &rng,
                                      const std::vector<KernelSchedule> &first = {});

  /** The features of every point of `points` not cached yet, lowered on `threads` threads, then cached. */
  void compute_features(const Task &task, const std::vector<Point> &points);
  /** The features of `p` on `task` (lowered once, cached); empty if it does not lower. */
  const std::vector<float> &features(const Task &task, const Point &p);
  /** The current model (null before the first training). */
  const CostModel *model() const { return online_.model(); }
  bool has_model() const { return online_.model() != nullptr; }
  int64_t trained_rows() const { return online_.trained_rows(); }
  /** Pairwise accuracy of the model on records that arrived after it was trained (-1: none yet). */
  double heldout_accuracy() const { return online_.heldout_accuracy(); }
  double train_seconds() const { return online_.train_seconds(); }
  double predict_seconds() const { return predict_s_; }
  /** Points lowered for their features (each once: the measured, the pools' and the random picks). */
  int64_t points_lowered() const { return points_lowered_; }
  /** Wall seconds spent lowering them (a part of the search's time, and of random search's choosing). */
  double lower_seconds() const { return lower_s_; }
  int trainings() const { return online_.trainings(); }

 private:
  /** A point lowered: its model features (costmodel/Features: model_features) and its kernel's identity (both empty if it does not lower), and whether validate_schedule accepts it. */
  struct Lowered {
    std::vector<float> features;
    std::string kernel;
    bool valid = false;
  };
  Lowered lowered(const Task &task, const KernelSchedule &s) const;
  const Lowered &cached(const Task &task, const Point &p);
  /** Computes the kernel features of the task's default schedule (model_features' reference), once per task. */
  void ensure_default(const Task &task);

  /** Every legal point lowered for a task, with its prediction by the current model. */
  struct Pool {
    std::vector<Point> points;
    std::unordered_set<std::string> jsons;
    std::vector<float> score;            // score[i] predicts points[i]; shorter while new points await scoring
    int scored_by = -1;                  // the model (its training count) that made score
  };
  /** Adds the legal points of `pts` not in `pool` yet (lowered first, on every thread), then scores what the current model has not. */
  void grow(const Task &task, Pool &pool, std::vector<Point> pts);

  Target target_;
  ModelSearchOptions o_;
  OnlineModel online_;
  double predict_s_ = 0;
  int64_t points_lowered_ = 0;
  double lower_s_ = 0;
  std::map<std::string, Lowered> cache_;  // task hash + schedule JSON
  mutable ReplayCache replays_;           // the step lists' prefixes the points share (lowered() runs on several threads)
  std::map<std::string, Pool> pools_;     // by task hash
  std::map<std::string, std::vector<float>> defaults_;  // by task hash: its default schedule's kernel features
  std::map<std::string, int> family_;     // by schedule JSON: ScheduleSpace::family (-1: unreadable)
  std::map<std::string, int> family_passes_;  // by task hash: batches that took the families not measured yet (3: done)
};

}  // namespace autotune

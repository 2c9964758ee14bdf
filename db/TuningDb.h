#pragma once
// The tuning database: SQLite in WAL mode, safe for several tuners writing one file at once.
//
//   workloads(id, hash, target, ir, flops)            one per (structural hash, target)
//   records(id, uid, workload_id, schedule, status, error, median_s, min_s, stddev_s, runs,
//           compile_s, baseline_s, phase, tool_version, created_at)   every measurement, failures too
//
// uid (128 random bits) identifies a record across files: export carries it and import skips
// records it already has, so merging is idempotent by identity, not by equal values (two real
// measurements of a tiny kernel can agree to the nanosecond).
//
// phase is 'trial' (search: counts toward a tuning budget) or 'confirmation' (a re-measurement
// of a leading schedule: informs best(), never the budget).
//
// baseline_s is the workload's default schedule timed in alternation with the record's own
// kernel: records are ranked by median_s / baseline_s, which cancels the machine's drift between
// measurements taken at different times.
//   records also keep the cost model's features of the kernel measured (features, feature_version;
//   schema 2), so models can be retrained from any database without lowering again.
//   plans(model_hash, target, group, workload_id, record_id)   the chosen record per group
//   cost_models(id, target, feature_version, records, created_at, model)   the latest trained model per target
//   partitions(model_hash, target, moves, report, created_at)   the fusion partition chosen per model (schema 3)
//   meta(key, value)                                    schema_version
//
// Every record is its own transaction: a tuner killed at any moment loses nothing committed.
// A file that is not a tuning database, is corrupt, or has a newer schema is an error, never
// overwritten.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/Error.h"

struct sqlite3;

namespace autotune {

constexpr int kDbSchemaVersion = 4;
constexpr const char *kToolVersion = "autotune 0.1.0";
/** How many measurements make a schedule "confirmed" for best(). */
constexpr int kConfirmations = 3;

/**
 * Where the cores were while a measurement was taken, from its thread hand-off (handoff_ns below).
 * The near level of a set of measurements is their hand-offs' 10th percentile (0 if none is
 * known); one taken with more than 2.5x that had the cores apart (never when either is unknown).
 * On the 2-vCPU VM this was written on the two modes were 200-400 and 900-1100 ns. Ratios taken
 * in different modes are not compared as alike: the cost model ranks within a mode, the tuner
 * (near_ratios) and best() correct or separate them, and bench/search_efficiency.py (which
 * repeats this rule) lets only ratios taken near reach its target.
 */
double near_handoff_ns(std::vector<double> handoffs);
constexpr double kApartFactor = 2.5;
inline bool cores_apart(double handoff_ns, double near_ns) { return near_ns > 0 && handoff_ns > kApartFactor * near_ns; }
/**
 * How much slower a task's default ran with the cores apart than near: the median of its baselines
 * apart over the median near (1 when either has none). A ratio measured apart is the candidate
 * against that slower default; times this, it is the candidate against the default near.
 */
double apart_slowdown(const std::vector<double> &near_baselines, const std::vector<double> &apart_baselines);

struct TuningRecord {
  int64_t id = 0;
  std::string uid;            // assigned by add_record when empty
  std::string workload_hash, target;
  std::string schedule;       // JSON
  std::string status;         // ok | compile_error | timeout | crash | wrong_result | invalid
  std::string error;
  double median_s = 0, min_s = 0, stddev_s = 0;
  int64_t runs = 0;
  double compile_s = 0;
  double baseline_s = 0;  // the default schedule's median, timed alongside (0: unknown)
  std::string phase = "trial";  // or "confirmation"
  std::string tool_version = kToolVersion, created_at;
  std::string features;      // the cost model's features of the measured kernel, a JSON array ("" if not computed)
  int feature_version = 0;   // their version (costmodel/Features: kFeatureVersion), 0 for none
  double handoff_ns = 0;     // the thread pool's hand-off time while measured (MeasureResult::handoff_ns; 0: unknown)

  /** Time relative to the baseline measured with it (1 = as fast as the default schedule). */
  double relative() const { return baseline_s > 0 ? median_s / baseline_s : 1e9; }
};

struct WorkloadInfo {
  int64_t id = 0;
  std::string hash, target, ir;
  double flops = 0;
  int64_t records = 0, ok_records = 0;
  std::optional<double> best_s;
};

/**
 * kReadOnly: the file is opened as it is (no WAL switch, no migration, no write of any kind), so
 * deploy-time loads and merge sources work on read-only files and leave them byte for byte alone.
 * kReadWrite creates the file when absent, switches it to WAL and migrates its schema.
 */
enum class DbAccess { kReadWrite, kReadOnly };

class TuningDb {
 public:
  /** Opens a database file; errors name the file and the reason. */
  static Expected<std::unique_ptr<TuningDb>> open(const std::string &path, DbAccess access = DbAccess::kReadWrite);
  ~TuningDb();

  Expected<int64_t> upsert_workload(const std::string &hash, const std::string &target, const std::string &ir, double flops);
  /** Appends one record (committed before it returns). */
  Expected<int64_t> add_record(const TuningRecord &r);
  /**
   * The best schedule of a workload on a target, as one of its records. Ranking: a schedule's
   * score is the median of its records' ratios (median_s / baseline_s); schedules measured at
   * least kConfirmations times come first, then those measured less. On a noisy machine the
   * minimum of hundreds of single measurements is luck, not speed (the winner's curse), so a
   * single lucky sample never beats a confirmed schedule. Where the cores were near for some of a
   * schedule's records and apart for others (cores_apart, over the workload's records), its score
   * is the worse of the two modes' medians: a Winograd kernel of ResNet-18 confirmed at 0.93 twice
   * apart and 1.49 once near was chosen by the median of the three and ran 1.5x slower than the
   * default in the model, near.
   */
  Expected<std::optional<TuningRecord>> best(const std::string &hash, const std::string &target);

  /** best(), with the score it was ranked by: its schedule's median ratio over `measurements` records. */
  struct Scored {
    TuningRecord record;
    double median_ratio = 0;
    int64_t measurements = 0;
  };
  Expected<std::optional<Scored>> best_scored(const std::string &hash, const std::string &target);
  /** Every schedule of a workload that ran correctly, ranked as best() ranks them (best() is the first), one record each. */
  Expected<std::vector<Scored>> ranked(const std::string &hash, const std::string &target);
  /** All records of a workload on a target (schedules already measured). */
  Expected<std::vector<TuningRecord>> records(const std::string &hash, const std::string &target);
  Expected<std::vector<WorkloadInfo>> workloads();
  /** Saves the chosen record per group of a model (replacing an earlier plan of that model). */
  Status save_plan(const std::string &model_hash, const std::string &target,
                   const std::vector<std::pair<std::string, int64_t>> &group_workload_record);
  /**
   * The plan saved for a model on a target: per group (in order), its chosen record, or nullopt
   * where the group keeps its default schedule; nullopt when no plan of that model is saved.
   */
  Expected<std::optional<std::vector<std::optional<TuningRecord>>>> plan(const std::string &model_hash, const std::string &target);
  /**
   * Saves the fusion partition chosen for a model (FuseOps's partition's hash) on a target: `moves`
   * is ir/Partition's moves as JSON, `report` what each tried move measured. Replaces an earlier one.
   */
  Status save_partition(const std::string &model_hash, const std::string &target, const std::string &moves, const std::string &report);
  /** The partition saved for a model on a target (its moves as JSON), or nullopt. */
  Expected<std::optional<std::string>> partition(const std::string &model_hash, const std::string &target);
  struct SavedPartition {
    std::string model_hash, target, moves, report, created_at;
  };
  /** Every saved partition, oldest first. */
  Expected<std::vector<SavedPartition>> partitions();
  /** Every record as JSON lines (workload IR included), for export. */
  Expected<std::string> export_jsonl();
  /**
   * Adds records from JSON lines (export's format); returns how many were new. Every line is
   * validated before anything is written (known status and phase, a workload hash that matches its
   * IR, an ok record with positive, finite times, no workload whose IR differs from the one this
   * database has under the same key); then records are written in short transactions, so
   * concurrent tuners wait for a chunk, not for the whole file.
   */
  Expected<int64_t> import_jsonl(const std::string &text, const std::string &label);
  /** Saves a trained cost model for a target, replacing the one saved before (schema 2). */
  Status save_cost_model(const std::string &target, int feature_version, int64_t records, const std::string &model);
  /** The latest cost model saved for a target and feature version, if any. */
  Expected<std::optional<std::string>> cost_model(const std::string &target, int feature_version);
  /** PRAGMA integrity_check: "ok" or the problems. */
  Expected<std::string> integrity_check();
  const std::string &path() const { return path_; }

 private:
  TuningDb() = default;
  Status exec(const std::string &sql);
  /** Runs `body` in a BEGIN IMMEDIATE transaction; any failure, COMMIT's included, rolls back. */
  template <typename T, typename F>
  Expected<T> in_write_transaction(F body);
  // The bodies of upsert_workload and add_record, for use inside a transaction already open.
  Expected<int64_t> upsert_workload_unlocked(const std::string &hash, const std::string &target, const std::string &ir, double flops);
  Expected<int64_t> add_record_unlocked(const TuningRecord &r);
  Status migrate();
  /** The schema version in `meta` (0 for an empty file), or an error for a file that is not a tuning database. */
  Expected<int> schema_version();
  sqlite3 *db_ = nullptr;
  std::string path_;
};

}  // namespace autotune

#pragma once
// Measures candidate kernels. Candidates are lowered in parallel, compiled into the kernel cache
// in forked children (as many at once as cores, each within a time limit), linked from the cache
// in parallel, then run one at a time in a forked child process that inherits the JIT-compiled
// code (one child for the batch, a new one after a crash or a timeout): a warm-up run whose
// output is checked against the reference executor's, then timed runs until a minimum time. A
// crash, a hang (the parent kills the child at the timeout) or a wrong answer is a recorded
// status, never the end of the tuning run.
//
// The machine is shared and noisy, so a time alone compares badly with one taken minutes
// earlier. Each child therefore also times a baseline (the task's default schedule) in
// alternation with the candidate, and results carry both: the ratio is what ranks candidates.
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen/Jit.h"
#include "codegen/Lower.h"

#include "runtime/BoundKernel.h"
#include "search/Task.h"

namespace autotune {

/**
 * kHostError is the measuring process's own failure (no pipe or fork: out of processes or file
 * descriptors), not the candidate's: it is retried, and never recorded as a fact about the schedule.
 */
enum class MeasureStatus { kOk, kInvalid, kCompileError, kTimeout, kCrash, kWrongResult, kHostError };
const char *status_name(MeasureStatus s);

struct MeasureResult {
  MeasureStatus status = MeasureStatus::kOk;
  std::string error;
  double median_s = 0, min_s = 0, stddev_s = 0;
  int64_t runs = 0;
  double compile_s = 0;
  double baseline_s = 0;  // median of the baseline kernel timed alongside (0: none)
  // The thread pool's hand-off time around the timed runs (ThreadPool::handoff_ns; 0: one thread):
  // where the cores were. Two ratios compare only if it was alike for both.
  double handoff_ns = 0;
  int producers = 0;  // producer kernels run before each timed run (TaskData::producers; 0: timed alone)
};

struct MeasureOptions {
  double min_time_s = 0.1;   // keep timing until this much wall time was spent: the candidate's and the baseline's runs and the evictions between them
  int64_t max_runs = 2000;
  int warmup = 1;
  double timeout_s = 10;     // per candidate, from fork to result
  bool flush_cache = false;  // overwrite a 64 MiB buffer between runs
  // Evict the arguments TaskData::cold names (the model's weights, packed as the kernel reads them)
  // from every cache level before each timed run, as a whole inference does between two uses.
  bool cold_weights = true;
  // Run the producers TaskData::producers names (their default kernels) before each timed run.
  bool producers = true;
  int threads = 0;           // 0: one per hardware thread
  double tolerance = 1e-4;   // max error relative to the expected output's largest magnitude
  int host_retries = 5;      // a failed pipe/fork is retried this often (with growing pauses) before giving up
  int timeout_retries = 1;   // a timed-out candidate is measured again this often, each time with twice the limit
  // Each candidate is first compiled in a child process into the kernel cache, killed past this
  // many seconds and recorded as a compile error (an LLVM pass that never ends on one schedule
  // must not stall the tuner); 0, or a Jit without a disk cache: compiled in process only.
  double compile_timeout_s = 120;

  /** An error naming the first option out of range (e.g. max_runs < 1, a timeout that is not a positive number of seconds). */
  Status validate() const;
};

/** A task's inputs (seeded random values for every argument) and the reference output. */
struct TaskData {
  std::vector<Tensor> args;
  Tensor expected;
  std::vector<bool> cold;  // cold[i]: argument i is a weight (Task::constant), evicted before each timed run
  std::vector<GroupProducer> producers;  // in the model's order: the last one ran just before the task
  static Expected<TaskData> make(const Graph &body, uint64_t seed);
  /** Appends `producers`, each with the inputs it carries (the model's weights) and the rest seeded (random_inputs of its body with `seed`). */
  void add_producers(const std::vector<GroupProducer> &producers, uint64_t seed);
};

class Measurer {
 public:
  Measurer(Jit &jit, MeasureOptions options) : jit_(jit), options_(std::move(options)) {}

  /**
   * Lowers, compiles and measures each schedule of `body`; one result per schedule, in order.
   * on_result(i, result) is called as soon as candidate i is done, so a caller can save it at
   * once; it returns false to stop the batch (its result could not be saved). When *stop becomes
   * true, or on_result returned false, the candidates not yet run are skipped (and not reported).
   * A timed-out candidate is measured again (timeout_retries, each with twice the limit) before its
   * timeout is reported: a load spike on a shared machine is not a fact about the schedule.
   */
  std::vector<MeasureResult> measure(const Graph &body, const TaskData &data, const std::vector<KernelSchedule> &schedules,
                                     const std::function<bool(size_t, const MeasureResult &)> &on_result = nullptr,
                                     const std::atomic<bool> *stop = nullptr);

  /**
   * Compiles each lowered kernel (null: skipped) into the kernel cache in a child process, up to
   * `threads` at once, each killed past compile_timeout_s; returns, per kernel, "" or why it was
   * refused ("compiling took longer than 120 s ...", or the compiler crashed on it). A compile
   * that fails with an error says nothing here: the in-process compile that follows reports it.
   */
  std::vector<std::string> compile_guarded(const std::vector<const LoweredKernel *> &kernels, std::vector<double> &seconds);

  using Candidate = std::pair<const LoweredKernel *, const CompiledKernel *>;
  /** A producer's default kernel (TaskData::producers[producer]) and the input it writes as it was. */
  struct Writer {
    Candidate kernel;
    size_t producer;
    Tensor pristine;
  };
  /**
   * Runs one compiled kernel in a child process of its own (tests call it with hand-made kernels),
   * timing `baseline` in alternation with it when given. The child dies with the thread that
   * forked it (PR_SET_PDEATHSIG), so no candidate outlives a killed tuner. `timeout_scale`
   * multiplies the options' timeout.
   */
  MeasureResult run(const LoweredKernel &k, const CompiledKernel &ck, const TaskData &data, const Candidate &baseline = {nullptr, nullptr},
                    double timeout_scale = 1);

  /**
   * Measures each candidate with both pointers set, in order, in one child process (a new one
   * after a crash or a timeout; a candidate that fails in a child that measured others first is
   * measured again in a fresh one), timed against `baseline`. A timeout is measured again
   * (timeout_retries, each with twice the limit). on_measured(i, result) follows each candidate
   * (result null for one without a kernel) and returns false to stop; when *stop becomes true the
   * rest are skipped. Returns how many candidates were reported.
   */
  size_t run_batch(const std::vector<Candidate> &candidates, const TaskData &data, const Candidate &baseline,
                   const std::function<bool(size_t, const MeasureResult *)> &on_measured, const std::atomic<bool> *stop = nullptr);

  const MeasureOptions &options() const { return options_; }
  /** Times each later candidate this long (MeasureOptions::min_time_s): the tuner's confirmations take longer than its trials. */
  void set_min_time_s(double s) { options_.min_time_s = s; }

  /** Wall time spent in each phase of measure(), summed over every call (a tuning run's breakdown). */
  struct PhaseTimes {
    double lower_s = 0;    // validating and lowering the candidates (in parallel)
    double compile_s = 0;  // compiling them in the guarded children, then linking (in parallel)
    double prepare_s = 0;  // the baseline's kernel and the weight packings the batch needs
    double run_s = 0;      // the measuring children: warm-up, check against the reference, timed runs
  };
  const PhaseTimes &phase_times() const { return times_; }

 private:
  /** A measuring child: it measures, one at a time, the candidates whose index the parent sends. */
  struct Child {
    pid_t pid = -1;
    int fd = -1;       // the parent's end of their socket pair
    int measured = 0;  // candidates it has reported on
    /** Closes its queue and waits for it to leave; its wait status (0 if there was none). */
    int close_and_wait();
  };
  /** Forks `child` over `candidates`; "" or why it could not (a host error: no socket or process to spare). */
  std::string start_child(Child &child, const std::vector<Candidate> &candidates, const TaskData &data, const Candidate &baseline);
  std::vector<Writer> writers_;  // during measure(): the producers that lowered and compiled
  // Producers' default kernels by workload hash (nullopt: it did not lower or compile).
  std::map<std::string, std::optional<std::pair<LoweredKernel, CompiledKernel>>> producer_kernels_;
  /**
   * Measures candidates[i] in `child`, started first if it has no process; a crash or a timeout
   * ends the child (child.pid < 0 afterwards).
   */
  MeasureResult measure_in(Child &child, const std::vector<Candidate> &candidates, size_t i, const TaskData &data,
                           const Candidate &baseline, double timeout_scale);

  Jit &jit_;
  MeasureOptions options_;
  PhaseTimes times_;
  // Weights packed in this process before each batch's children fork, so they inherit them
  // (see PackCache): up to 512 MiB of packed weights, the least recently used dropped first.
  PackCache packed_{size_t{512} << 20};
};

}  // namespace autotune

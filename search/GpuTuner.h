#pragma once
// Tuning GPU schedules (issue 13): the tasks of a fused model whose kernels have a GEMM-shaped
// stage (codegen/Gpu: gemm_shape; its tiles) or a long reduction (row_reduce_shape; its lanes and
// threads), each measured at its default first and then at the points of its space, one trial
// per task in turn until the budget or every space is spent, none measured twice across runs.
// The points come in a seeded order until the cost model is trained: XGBoost on the GPU
// features (costmodel/GpuFeatures), on every measured record of this target (the database's
// included), retrained as records arrive. Then each trial is the best-predicted of the next
// `window` unmeasured points in that order, but for an epsilon share taken in order (exploration). Each candidate's output is checked against the
// reference executor on seeded data before its time counts; every measurement is a record in the
// tuning database at once (schedule {"gpu_tile": ...} or {"gpu_reduce": ...}, the GPU features), so
// an interrupted run loses nothing. Deploy reads the best tile back (runtime/Cuda:
// best_gpu_schedule). The kernels run through a GpuKernelTimer: the CUDA driver's on a device.
#include <functional>
#include <string>
#include <vector>

#include "codegen/Gpu.h"
#include "db/TuningDb.h"
#include "runtime/Cuda.h"
#include "ir/Graph.h"
#include "ir/Tensor.h"

namespace autotune {

/** Runs one GPU-scheduled kernel on given arguments: its output and the median time of `runs` runs. */
class GpuKernelTimer {
 public:
  virtual ~GpuKernelTimer() = default;
  virtual const GpuTarget &target() const = 0;
  struct Result {
    Tensor output;
    double median_s = 0, min_s = 0;
    double compile_s = 0;
  };
  virtual Expected<Result> run(const LoweredKernel &k, const std::vector<Tensor> &args, const TensorType &out, int runs) = 0;
};

/** The timer on a device through the CUDA driver (runtime/Cuda: run_kernel_on_device). */
class DeviceKernelTimer : public GpuKernelTimer {
 public:
  DeviceKernelTimer(CudaDriver &driver, int ordinal, GpuTarget device) : driver_(driver), ordinal_(ordinal), device_(std::move(device)) {}
  const GpuTarget &target() const override { return device_; }
  Expected<Result> run(const LoweredKernel &k, const std::vector<Tensor> &args, const TensorType &out, int runs) override;

 private:
  CudaDriver &driver_;
  int ordinal_;
  GpuTarget device_;
};

struct GpuTuneOptions {
  int trials = 200;
  uint64_t seed = 0;
  int runs = 10;
  double tolerance = 1e-4;  // relative error against the reference above which a candidate is wrong_result
  std::function<void(const std::string &)> progress;  // one line per measurement
  std::function<bool()> stop;                         // asked before each measurement: true ends the run (Ctrl-C)
  bool model = true;       // the cost model picks (false: the seeded order throughout)
  int min_records = 16;    // ok records before the first training
  int window = 128;        // unmeasured points the model ranks for each pick
  double epsilon = 0.125;  // share of picks taken in the seeded order
};

struct GpuTuneReport {
  int tasks = 0, measured = 0, failed = 0, skipped_known = 0;
  int model_trainings = 0, model_picks = 0;  // trainings, and trials the model chose
  int64_t model_rows = 0;                    // records the last model was trained on
  double model_heldout_accuracy = -1;        // pairwise accuracy of the last model but one on the records it had not seen (-1: none yet)
  double model_s = 0;                        // training, lowering for features and prediction
  struct Best {
    std::string hash, ops, tile;
    double default_s = 0, best_s = 0;
  };
  std::vector<Best> best;  // per task
};

/** Tunes the GEMM-shaped tasks of `fused` on `timer`'s GPU into `db` under `target_key`. */
Expected<GpuTuneReport> tune_gpu(const Graph &fused, GpuKernelTimer &timer, TuningDb &db, const std::string &target_key, const GpuTuneOptions &o);

}  // namespace autotune

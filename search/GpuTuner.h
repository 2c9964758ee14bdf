#pragma once
// Tuning GPU schedules (issue 13): the tasks of a fused model whose kernels have a GEMM-shaped
// stage (codegen/Gpu: gemm_shape; its tiles) or a long reduction (row_reduce_shape; its lanes and
// threads), each measured at its default first and then at the points of its space (seeded
// order, none measured twice across runs), one trial per task in
// turn until the budget or every space is spent. Each candidate's output is checked against the
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
};

struct GpuTuneReport {
  int tasks = 0, measured = 0, failed = 0, skipped_known = 0;
  struct Best {
    std::string hash, ops, tile;
    double default_s = 0, best_s = 0;
  };
  std::vector<Best> best;  // per task
};

/** Tunes the GEMM-shaped tasks of `fused` on `timer`'s GPU into `db` under `target_key`. */
Expected<GpuTuneReport> tune_gpu(const Graph &fused, GpuKernelTimer &timer, TuningDb &db, const std::string &target_key, const GpuTuneOptions &o);

}  // namespace autotune

#pragma once
// Running on an NVIDIA GPU (issue 13): the CUDA driver API loaded at run time with dlopen
// (libcuda.so.1, or the file $AUTOTUNE_LIBCUDA names), so autotune builds and runs without CUDA
// headers, a driver or a GPU; and GpuModel, a fused graph whose groups run as the PTX of
// codegen/Gpu, loaded by the driver. Without a driver or a device, opening it fails with one
// line that says which. No machine this project is built on has a GPU: the launch path is
// written to the driver API's documented contract and runs in the tests only where a device is
// present; elsewhere those tests skip with the reason.
#include <memory>
#include <string>
#include <vector>

#include "codegen/Gpu.h"
#include "db/TuningDb.h"
#include "ir/Graph.h"
#include "ir/Tensor.h"

namespace autotune {

class CudaDriver {
 public:
  /** Loads the driver, resolves every entry point autotune uses and initializes it (cuInit). */
  static Expected<std::shared_ptr<CudaDriver>> open();
  ~CudaDriver();

  int device_count() const { return devices_; }
  /** Device `ordinal` as a GPU target: sm_<major><minor> and the device's own SM count, limits and registers. */
  Expected<GpuTarget> device_target(int ordinal) const;
  std::string device_name(int ordinal) const;

  struct Api;  // the resolved entry points (Cuda.cpp)
  const Api &api() const { return *api_; }
  /** `what` failed with `code`, as one line: "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE". */
  Error error(const char *what, int code) const;

 private:
  CudaDriver() = default;
  void *lib_ = nullptr;
  std::unique_ptr<Api> api_;
  int devices_ = 0;
};

/** A fused graph on device `ordinal`: each group's PTX loaded as a module, values in device memory. */
/** One GPU-scheduled kernel run on a device: its output and its times. */
struct DeviceKernelRun {
  Tensor output;
  double median_s = 0, min_s = 0, compile_s = 0;
};
/**
 * Runs kernel `k` (lower_gpu for `target`) on device `ordinal`: PTX loaded, one device buffer per
 * argument (uploaded from `args`), output and temporary, every stage launched in order `runs` + 1
 * times (the first a warm-up) with CUDA events around each launch sequence; the output copied
 * back, every allocation freed. The tuner's measurement (search/GpuTuner).
 */
Expected<DeviceKernelRun> run_kernel_on_device(CudaDriver &driver, int ordinal, const GpuTarget &target, const LoweredKernel &k,
                                               const std::vector<Tensor> &args, const TensorType &out, int runs);

/** The tile of the best ok record of `body` in `db` for `target_key`, or the default schedule (an empty one) when there is none. */
Expected<GpuSchedule> best_gpu_schedule(TuningDb &db, const Graph &body, const std::string &target_key);

/** The database's target key for device `ordinal`: its sm and its name ("sm_90 NVIDIA H100 80GB HBM3"). */
std::string gpu_target_key(const CudaDriver &driver, const GpuTarget &device, int ordinal);

class GpuModel {
 public:
  /** With `db`, each group's tile is its best record for the device's target key (best_gpu_schedule), else the default. */
  static Expected<std::unique_ptr<GpuModel>> compile(const Graph &fused, std::shared_ptr<CudaDriver> driver, int ordinal = 0, TuningDb *db = nullptr);
  ~GpuModel();

  /** Copies the inputs in, launches every group's stages in order, copies the outputs out. */
  Expected<std::vector<Tensor>> run(const std::vector<Tensor> &inputs);
  /** The median over `runs` of the device time of one inference (events around the launches; inputs copied once). */
  Expected<double> median_ms(const std::vector<Tensor> &inputs, int runs);
  const GpuTarget &target() const { return target_; }
  /** One line per group that does not run as tuned: a database record set aside for the default (lower_gpu_or_default), or a group run on the host. */
  const std::vector<std::string> &notes() const { return notes_; }

  struct Group;
 private:
  GpuModel() = default;
  Status upload_inputs(const std::vector<Tensor> &inputs);
  Status launch_all();

  std::shared_ptr<CudaDriver> driver_;
  GpuTarget target_;
  Graph graph_;
  void *context_ = nullptr;
  std::vector<unsigned long long> values_;  // device memory of every value: inputs, constants, nodes (by ValueId order)
  unsigned long long arena_ = 0;            // the node values' and kernel temporaries' planned arena
  std::vector<size_t> bytes_;
  std::vector<unsigned long long> packed_;  // device copies of packed weights (their slots follow the graph's values)
  std::vector<Group> groups_;
  std::vector<std::string> notes_;
};

}  // namespace autotune

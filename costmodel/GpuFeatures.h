#pragma once
// Features of a GPU-scheduled kernel (codegen/Gpu) for the cost model (issue 13): what decides a
// GPU kernel's speed that the CPU features do not see. Occupancy (resident warps per SM, limited
// by threads, shared memory and registers per block), waves of blocks over the SMs and the last
// wave's idle share, shared memory per block, global memory transactions (32-byte sectors a warp
// touches per access: coalescing), shared loads, FLOPs and barriers per thread, and arithmetic
// intensity against global traffic. Computed from the loop IR and the GPU description, like the
// CPU features; docs/architecture.md ("GPU") defines each.
#include <string>
#include <vector>

#include "codegen/Gpu.h"
#include "codegen/Kernel.h"

namespace autotune {

inline constexpr int kGpuFeatureVersion = 1;

const std::vector<std::string> &gpu_feature_names();

/** One stage's occupancy facts (also in the feature vector). */
struct GpuOccupancy {
  int64_t threads = 0, blocks = 0, shared_bytes = 0, registers = 0;  // registers: per thread, estimated
  int64_t blocks_per_sm = 0;
  double occupancy = 0;  // resident warps over the SM's maximum
  std::string limit;     // what bounds blocks_per_sm: "threads", "blocks", "shared memory" or "registers"
};
/**
 * Stage `st`'s occupancy on `gpu`; `registers` per thread as ptxas allocated them (ptxas_resources)
 * where known, else estimated (the thread's private floats, the distinct shared operands of its
 * innermost loop, and 24 for addresses and indices). Registers are allocated per warp in units of 256.
 */
GpuOccupancy gpu_occupancy(const KernelStage &st, const GpuTarget &gpu, int64_t registers = -1);

/** The features of kernel `k` (lower_gpu) on `gpu`, gpu_feature_names().size() values, summed or maxed over its stages. */
std::vector<float> gpu_kernel_features(const LoweredKernel &k, const GpuTarget &gpu);

}  // namespace autotune

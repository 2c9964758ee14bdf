#pragma once
// The GPU path (issue 13), first stage: NVIDIA targets described in configs/targets/sm_*.json
// ("kind": "gpu"); every fused group lowered under a GPU schedule (each stage's output loops
// fused and bound to blocks x threads, one output element per thread, a guard where the block
// does not divide them); PTX through LLVM's NVPTX backend; ptxas, where installed, as the check.
// The same GPU-scheduled kernel also runs on the CPU with its blocks as the parallel loop and its
// threads a serial loop inside (what CPU implementations of CUDA do), so its results are checked
// against the reference executor on a machine without a GPU. No launch, no device memory and no
// timing yet: that needs the CUDA driver, which these machines lack.
#include <string>
#include <vector>

#include "codegen/Kernel.h"
#include "ir/Error.h"
#include "ir/Graph.h"

namespace autotune {

struct GpuTarget {
  std::string name;  // "sm_80"
  std::string sm;    // the architecture LLVM and ptxas compile for: "sm_80"
  std::string ptx;   // the PTX ISA version feature: "ptx78"
  int sm_count = 0, warp_size = 32, max_threads_per_block = 1024;
  int threads_per_block = 256;  // the GPU schedule's block size (a multiple of the warp)
  int64_t shared_bytes_per_block = 48 << 10, shared_bytes_per_sm = 0;
  int registers_per_thread = 255, registers_per_sm = 65536;

  std::string to_json() const;
};

/** A GPU description by name (a built-in configs/targets/sm_*.json) or JSON file with "kind": "gpu". */
Expected<GpuTarget> resolve_gpu_target(const std::string &name_or_file);
/** Whether resolve_gpu_target takes this name (a built-in GPU description, or a file that is one). */
bool is_gpu_target(const std::string &name_or_file);

/**
 * The group's naive nests (lower_naive) under the GPU schedule: in each stage, the perfect nest of
 * output loops at its top (loops every store inside moves with, or stores to buffers private to
 * an iteration) fused into one of extent E, then split into blocks of T threads (T the target's
 * threads_per_block, or E rounded up to a warp when smaller): the stage's parallel loop is the
 * block index, its body a loop over the threads with the old body under `if (b * T + t < E)`.
 */
Expected<LoweredKernel> lower_gpu(const Graph &body, const std::string &name, const GpuTarget &gpu);

/** One stage's kernel entry and its launch. */
struct GpuLaunch {
  std::string entry;
  int64_t blocks = 1, threads = 1;
};

struct PtxKernel {
  std::string ptx;
  std::vector<GpuLaunch> launches;  // in stage order: launched one after another
  bool from_cache = false;
};

/**
 * A GPU-scheduled kernel as PTX for `gpu` (LLVM's NVPTX backend after the O3 pipeline). With a
 * `cache_dir`, the PTX is kept there as `<kernel>_<hash>.ptx`, the hash over the unoptimized
 * IR, the sm, the PTX version and LLVM's version, sealed with a last line holding the hash of
 * the text before it: an entry that fails the check is rebuilt, never trusted.
 */
Expected<PtxKernel> emit_ptx(const LoweredKernel &k, const GpuTarget &gpu, const std::string &cache_dir = "");

/** ptxas: $AUTOTUNE_PTXAS, else `ptxas` on PATH, else /usr/local/cuda/bin/ptxas; "" when there is none. */
std::string find_ptxas();

/** Assembles `ptx` for gpu.sm with `ptxas` (output discarded); the error quotes ptxas's first complaint. */
Status ptxas_check(const std::string &ptx, const GpuTarget &gpu, const std::string &ptxas);

}  // namespace autotune

#pragma once
// A compiled kernel bound to buffers of its own: copies of its arguments (weights packed the way
// the kernel wants them), its output and its temporaries, ready to run stage by stage on a thread
// pool. What the measurer times in its child, what bench_kernels runs with a chosen schedule, and
// what the schedule tests check against the reference executor.
#include <vector>

#include "codegen/Jit.h"
#include "runtime/ThreadPool.h"

namespace autotune {

class BoundKernel {
 public:
  /**
   * `args` and `out` are shared, not copied (tensors are handles): two kernels of one task timed
   * in alternation read and write the same memory, so neither is favoured by where its buffers
   * landed. Only packed weights and temporaries are the kernel's own.
   */
  BoundKernel(const LoweredKernel &k, const CompiledKernel &ck, const std::vector<Tensor> &args, Tensor out);
  BoundKernel(const BoundKernel &) = delete;
  BoundKernel &operator=(const BoundKernel &) = delete;

  /** Runs every stage, each split over the pool's threads. */
  void run(ThreadPool &pool);
  const Tensor &output() const { return out_; }
  /**
   * Flushes the arguments with which[i] set (as the kernel reads them: packed weights after
   * packing) from every cache level of this CPU, so the next run reads them from memory.
   * A no-op on CPUs without clflush.
   */
  void evict(const std::vector<bool> &which) const;

 private:
  std::vector<Tensor> args_, temps_;
  Tensor out_;
  std::vector<void *> bufs_;
  std::vector<int64_t> extents_;
  std::vector<StageFn> stages_;
};

}  // namespace autotune

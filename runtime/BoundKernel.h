#pragma once
// A compiled kernel bound to buffers of its own: copies of its arguments (weights packed the way
// the kernel wants them), its output and its temporaries, ready to run stage by stage on a thread
// pool. What the measurer times in its child, what bench_kernels runs with a chosen schedule, and
// what the schedule tests check against the reference executor.
#include <cstddef>
#include <list>
#include <tuple>
#include <vector>

#include "codegen/Jit.h"
#include "runtime/ThreadPool.h"

namespace autotune {

/**
 * Packed weights shared by the kernels that pack the same argument the same way. The measurer
 * fills one before it forks, so a candidate and its baseline find their weights packed instead of
 * packing them again in every child: a 512x512 3x3 weight took 27 ms to pack for Winograd F(4x4)
 * and 6 ms in the direct layout, twice per candidate, against the 0.1 s a candidate is timed.
 * An entry holds its source tensor, so no other tensor can take the address it is keyed by.
 * Entries least recently used are dropped once the packed bytes exceed the budget.
 */
class PackCache {
 public:
  explicit PackCache(size_t budget_bytes) : budget_(budget_bytes) {}
  /** `w` packed as `p`: from the cache, or packed now and kept. */
  Tensor get(const Tensor &w, const WeightPacking &p);
  size_t bytes() const { return bytes_; }
  size_t entries() const { return entries_.size(); }

 private:
  struct Entry {
    Tensor source, packed;
    std::tuple<int, int64_t, int> how;  // kind, block, tile
  };
  size_t budget_, bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

class BoundKernel {
 public:
  /**
   * `args` and `out` are shared, not copied (tensors are handles): two kernels of one task timed
   * in alternation read and write the same memory, so neither is favoured by where its buffers
   * landed. Only packed weights and temporaries are the kernel's own (packed weights are taken
   * from `packed` when one is given, and shared with every kernel that packs them alike).
   */
  BoundKernel(const LoweredKernel &k, const CompiledKernel &ck, const std::vector<Tensor> &args, Tensor out,
              PackCache *packed = nullptr);
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

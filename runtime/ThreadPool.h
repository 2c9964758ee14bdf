#pragma once
// A fixed pool of worker threads for the kernels' parallel loops. parallel_for splits [0, n) into
// one contiguous chunk per thread (the calling thread takes the first). Workers spin briefly
// between calls, since an inference issues dozens of back-to-back kernels, then sleep.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace autotune {

class ThreadPool {
 public:
  /** threads <= 0: one per hardware thread. */
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)> &fn);

  /**
   * The median wall time of `calls` empty parallel_for calls over every thread, in nanoseconds (0
   * for a pool of one thread): what each parallel stage pays to hand work to the other cores and
   * to learn they are done, two cache-line trips between cores. It tells where the cores are: on
   * a 2-vCPU Zen 4 VM it was 200-400 ns while the host ran both vCPUs on one core complex and
   * 900-1100 ns while it ran them on two, for stretches of seconds to minutes; a kernel whose
   * stages pass data between threads (a padded input written by both, read by both) then ran
   * 1.4x slower, and one that does not, at the same speed (docs/architecture.md, "Where the
   * cores are").
   */
  double handoff_ns(int calls = 200);

  /**
   * The process-wide pool of `threads` threads (0: one per hardware thread). Models share it:
   * two pools would have their idle workers spin against each other's work. Calls from
   * different threads are serialized.
   */
  static std::shared_ptr<ThreadPool> shared(int threads = 0);

 private:
  void worker(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)> *fn_ = nullptr;
  int64_t n_ = 0;
  std::mutex call_mu_;  // one parallel_for at a time
};

/**
 * fn(i) for every i in [0, n) on `threads` threads started for this call (the calling thread is
 * one; threads <= 0: one per hardware thread), each taking the next index when it is done with
 * its last, for items of uneven cost (lowering and compiling kernels). Every thread has finished
 * when it returns; an exception from fn is rethrown.
 */
void for_each_index(size_t n, int threads, const std::function<void(size_t)> &fn);

}  // namespace autotune

#include "runtime/ThreadPool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>

namespace autotune {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto &t : workers_) t.join();
}

std::shared_ptr<ThreadPool> ThreadPool::shared(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  static std::mutex mu;
  static std::map<int, std::weak_ptr<ThreadPool>> pools;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<ThreadPool> p = pools[threads].lock();
  if (!p) {
    p = std::make_shared<ThreadPool>(threads);
    pools[threads] = p;
  }
  return p;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)> &fn) {
  int t = size();
  if (n <= 0) return;
  if (t == 1 || n == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    pending_.store(static_cast<int>(workers_.size()));
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  int64_t end = n / t;
  if (end > 0) fn(0, end);
  while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
}

double ThreadPool::handoff_ns(int calls) {
  if (size() == 1 || calls <= 0) return 0;
  const std::function<void(int64_t, int64_t)> nothing = [](int64_t, int64_t) {};
  int64_t n = size();
  parallel_for(n, nothing);  // wakes sleeping workers: a wake-up is not a hand-off
  std::vector<double> ns(static_cast<size_t>(calls));
  for (double &t : ns) {
    auto t0 = std::chrono::steady_clock::now();
    parallel_for(n, nothing);
    t = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  }
  std::nth_element(ns.begin(), ns.begin() + calls / 2, ns.end());
  return ns[static_cast<size_t>(calls / 2)];
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  while (true) {
    // Spin for about a millisecond (an inference's kernels come back to back), then sleep.
    for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spin) _mm_pause();
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
    }
    if (stop_) return;
    const std::function<void(int64_t, int64_t)> *fn;
    int64_t n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen = generation_.load();
      fn = fn_;
      n = n_;
    }
    int t = size();
    int64_t begin = n * index / t, end = n * (index + 1) / t;
    if (begin < end) (*fn)(begin, end);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void for_each_index(size_t n, int threads, const std::function<void(size_t)> &fn) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(n, 1)));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  std::vector<std::future<void>> others;
  for (int t = 1; t < threads; ++t) others.push_back(std::async(std::launch::async, work));
  work();
  for (auto &f : others) f.get();
}

}  // namespace autotune

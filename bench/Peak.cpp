#include "bench/Peak.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "codegen/Peak.h"

namespace autotune::bench {

double fma_peak_gflops(int threads) {
  static std::map<int, double> measured;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = measured.find(threads); it != measured.end()) return it->second;
  auto jit = Jit::create({""});
  auto peak = jit ? measure_fma_peak(**jit, threads) : Expected<double>(jit.error());
  if (!peak) std::fprintf(stderr, "fma peak: %s\n", peak.error().message.c_str());
  return measured[threads] = peak ? *peak : 0.0;
}

double memory_bandwidth_gbs(int threads) {
  static std::map<int, double> measured;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = measured.find(threads); it != measured.end()) return it->second;
  const size_t n = (size_t{256} << 20) / sizeof(float);
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        for (size_t i = lo; i < hi; ++i) a[i] = b[i] + 0.5f * c[i];
      });
    for (auto &th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::max(best, 3.0 * n * sizeof(float) / s / 1e9);  // the first run pays for the page faults
  }
  return measured[threads] = best;
}

}  // namespace autotune::bench

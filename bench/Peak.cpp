#include "bench/Peak.h"

#include <immintrin.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace autotune::bench {

namespace {
__attribute__((target("avx2,fma"), noinline)) float fma_loop(int64_t iters) {
  __m256 a0 = _mm256_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = _mm256_fmadd_ps(a0, m, c), a1 = _mm256_fmadd_ps(a1, m, c), a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c), a4 = _mm256_fmadd_ps(a4, m, c), a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c), a7 = _mm256_fmadd_ps(a7, m, c), a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(_mm256_add_ps(a6, a7), _mm256_add_ps(a8, a9))));
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}
}  // namespace

double fma_peak_gflops(int threads) {
  static std::map<int, double> measured;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = measured.find(threads); it != measured.end()) return it->second;
  const int64_t iters = 20'000'000;  // 10 FMAs x 8 lanes x 2 flops per iteration
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([] { volatile float sink = fma_loop(iters); (void)sink; });
    for (auto &t : pool) t.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(iters) * 160.0 * threads / s / 1e9);
  }
  return measured[threads] = best;
}

}  // namespace autotune::bench

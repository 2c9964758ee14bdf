#pragma once
// The machine's fp32 FMA peak, measured: independent chains of 256-bit FMAs, enough to cover
// the FMA latency on both pipes, on one thread. Benchmarks report GFLOP/s next to it.
#include <cstdint>

namespace autotune::bench {

/** GFLOP/s of `threads` threads running nothing but FMAs at the same time (measured once per count). */
double fma_peak_gflops(int threads);

}  // namespace autotune::bench

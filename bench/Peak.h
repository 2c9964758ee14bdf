#pragma once
// The machine's roofline, measured: the fp32 FMA peak at the host target's vector width
// (codegen/Peak: a JIT-compiled kernel of independent FMA chains, 512-bit on an AVX-512 host)
// and the memory bandwidth (a streaming triad over arrays far larger than the caches).
// Benchmarks report GFLOP/s and bytes/s next to them.
#include <cstdint>

namespace autotune::bench {

/** GFLOP/s of `threads` threads running nothing but FMAs at the host's width (measured once per count). */
double fma_peak_gflops(int threads);

/** GB/s of `threads` threads running a = b + s * c over 3 x 256 MiB (measured once per count). */
double memory_bandwidth_gbs(int threads);

}  // namespace autotune::bench

#pragma once
// The target's fp32 FMA peak, measured: a JIT-compiled kernel of independent fused
// multiply-add chains at the target's vector width (enough chains to cover the FMA latency on
// every pipe), run on `threads` threads at once. "Share of peak" figures are relative to this,
// so an AVX-512 host is measured with 512-bit FMAs and an AVX2 target with 256-bit ones.
#include "codegen/Jit.h"

namespace autotune {

/** GFLOP/s of `threads` threads running nothing but FMAs at the target's width (best of 3 runs of ~0.1 s). */
Expected<double> measure_fma_peak(Jit &jit, int threads);

}  // namespace autotune

#pragma once
// Sketch rules (issue 10, after Ansor's sketch generation): from a group's naive nests
// (lower_naive), structured step lists the schedule space samples. Each rule reads the nest's
// loops and emits steps for codegen/Steps; the steps are checked when replayed, so a rule that
// does not fit a nest is refused there with the reason, never miscompiled.
#include <string>
#include <vector>

#include "codegen/Kernel.h"
#include "codegen/Steps.h"
#include "ir/Error.h"

namespace autotune {

/** The knobs of the loop sketch. */
struct LoopSketch {
  int lanes = 16;                // the innermost output loop split by this and vectorized (1: scalar)
  bool unroll_reduction = false; // unroll each reduction loop (k0, k1, ...) of at most 16 iterations
  int parallel_loops = -1;       // outer output loops fused into the parallel loop (-1: all but the innermost)
};

/**
 * The loop sketch for a one-stage naive nest of output loops i0..i{n-1} (and reduction loops
 * k0.. inside them), the shape of the elementwise and generic reduction templates: split the
 * innermost output loop by `lanes` and vectorize it, each lane with its own accumulator; its
 * remainder as one vector (masked) when it has 2 or more iterations; the reduction loops
 * unrolled when asked; the outer output loops fused into one parallel loop.
 */
Expected<std::vector<Step>> loop_sketch(const LoweredKernel &naive, const LoopSketch &knobs);

/** Every point of the loop sketch for a target of `lanes` float lanes whose steps replay on `naive`. */
std::vector<std::vector<Step>> loop_sketches(const LoweredKernel &naive, int lanes);

}  // namespace autotune

#pragma once
// Checks that two graphs compute the same function, by running both on the reference executor.
#include <string>
#include <vector>

#include "ir/Graph.h"

namespace autotune {

/** Output-by-output differences of `after` against `before` on the same inputs. */
Expected<std::vector<Difference>> compare_outputs(const std::vector<Tensor> &before, const std::vector<Tensor> &after);

/**
 * Runs both graphs on seeded random inputs of `before`'s input types; an error names the first
 * output whose error relative to its largest magnitude exceeds `tolerance`.
 */
Status verify_equivalent(const Graph &before, const Graph &after, uint64_t seed = 0, double tolerance = 1e-5);

/** "mse 1.2e-15, max abs 3.0e-07 (relative 2.1e-08)" for the worst output. */
std::string describe(const std::vector<Difference> &diffs);

/** The first output beyond tolerance, as an error naming it and the element, or ok. */
Status check_within(const std::vector<Difference> &diffs, double tolerance);

}  // namespace autotune

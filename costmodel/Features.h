#pragma once
// Features of a lowered kernel for the cost model: a fixed-length, versioned vector computed from
// the kernel's loop IR and the target description (never from the schedule's knobs, so that what
// is learned on one template and task carries to others). What each entry means is
// feature_names()[i]; docs/architecture.md ("Cost model") lists them with their definitions.
//
// The walk executes the loop nest symbolically: every statement is weighted by the product of
// the extents of the loops around it (a vectorized loop of L lanes counts once, with L lanes per
// operation), so counts are per kernel call. Memory traffic is estimated per stage from the
// footprint of one iteration of its parallel loop (the working set a thread holds at once)
// against the target's caches, in the style of Ansor's per-store features but aggregated over
// the kernel: its stages run one after another on the same caches.
#include <string>
#include <vector>

#include "codegen/Kernel.h"
#include "codegen/Target.h"

namespace autotune {

/** Bumped whenever the meaning or order of the features changes: models and stored features carry it. */
inline constexpr int kFeatureVersion = 1;

/** The names of the features, in order (their count is the vector's length). */
const std::vector<std::string> &feature_names();

/** The features of kernel `k` compiled for `target`, feature_names().size() values. */
std::vector<float> kernel_features(const LoweredKernel &k, const Target &target);

}  // namespace autotune

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
inline constexpr int kFeatureVersion = 2;

/** The names of a kernel's features, in order (their count is kernel_features' length). */
const std::vector<std::string> &feature_names();

/** The features of kernel `k` compiled for `target`, feature_names().size() values. */
std::vector<float> kernel_features(const LoweredKernel &k, const Target &target);

/**
 * The cost model's input (version 2): a kernel's features, then their differences from the
 * features of its task's default schedule. The model predicts the speed over that default, so what
 * it learns is how a change from the default pays; the differences say it in terms that carry
 * from one task to another (most features are log2 counts: a difference is a log ratio), where
 * the absolute counts of a task that training never saw fall outside what it learned.
 */
const std::vector<std::string> &model_feature_names();
std::vector<float> model_features(const std::vector<float> &kernel, const std::vector<float> &default_kernel);

}  // namespace autotune

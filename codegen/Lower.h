#pragma once
// Lowering: a fused group (a function body from fuse-ops) and its schedule become a
// LoweredKernel. Every op but the group's anchor is inlined as an expression at the point of
// use (TVM's compute_inline): elementwise/broadcast/injective prologues into the anchor's reads,
// the epilogue into the anchor's final store while its accumulators are still in registers.
// The anchor (conv2d, dense, matmul, pools, mean, softmax) gets a loop-nest template.
#include <string>

#include "codegen/Kernel.h"
#include "codegen/Schedule.h"
#include "ir/Graph.h"

namespace autotune {

/** A readable symbol prefix for a group's kernel ("conv2d_add_relu"); the JIT appends the IR's hash. */
std::string kernel_name(const Graph &body);

/** Lowers a function body; `name` becomes the kernel's symbol prefix. An illegal schedule is an error. */
Expected<LoweredKernel> lower_group(const Graph &body, const std::string &name, const KernelSchedule &s);

/** Packs a weight for a kernel (WeightPacking), once, when the model is loaded. */
Tensor pack_weight(const Tensor &w, const WeightPacking &p);

}  // namespace autotune

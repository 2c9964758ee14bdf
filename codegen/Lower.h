#pragma once
// Lowering: a fused group (a function body from fuse-ops) and its schedule become a
// LoweredKernel. Every op but the group's anchor is inlined as an expression at the point of
// use (TVM's compute_inline): elementwise/broadcast/injective prologues into the anchor's reads,
// the epilogue into the anchor's final store while its accumulators are still in registers.
// The anchor (conv2d, dense, matmul, pools, mean, softmax) gets a loop-nest template.
#include <string>

#include "codegen/Kernel.h"
#include "ir/Graph.h"

namespace autotune {

/** The knobs of the templates; default_schedule() picks values for the development CPU. */
struct KernelSchedule {
  int vector_width = 8;       // float lanes (AVX2)
  int oc_block = 16;          // conv/dense: output channels per register block (multiple of vector_width), 0: direct template
  int px_block = 6;           // conv: output pixels per register block
  bool pad_at_root = true;    // conv: copy the input into a padded buffer first (no bounds checks in the hot loop)

  std::string to_string() const;
};

/** The schedule the runtime uses for a group when nothing better is known. */
KernelSchedule default_schedule(const Graph &body);

/** Lowers a function body; `name` becomes the kernel's symbol prefix. */
Expected<LoweredKernel> lower_group(const Graph &body, const std::string &name, const KernelSchedule &s);

/** Packs a weight for a kernel (WeightPacking), once, when the model is loaded. */
Tensor pack_weight(const Tensor &w, const WeightPacking &p);

}  // namespace autotune

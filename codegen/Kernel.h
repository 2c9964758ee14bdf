#pragma once
// A lowered kernel: the loop IR of one fused group, ready for LLVM. A kernel runs as a list of
// stages, one after another; each stage is a loop nest whose outermost loop (parallel_var over
// [0, parallel_extent)) the runtime splits across threads. Buffers are the group's arguments
// (graph values and weights, in argument order), then its output, then temporaries that carry
// data from one stage to the next.
#include <string>
#include <vector>

#include "codegen/LoopIR.h"
#include "ir/Tensor.h"

namespace autotune {

struct KernelStage {
  std::string name;
  std::string parallel_var;
  int64_t parallel_extent = 1;
  loop::Stmt body;  // uses parallel_var; the emitter wraps it in the loop over the thread's range
};

/** A weight argument wants a packed layout, made once when the model is loaded. */
struct WeightPacking {
  int param = -1;  // argument index
  // kWinograd: a 3x3 conv weight w[O][C][3][3] transformed to U = G w G^T, a x a per (o, c) with
  // a = tile + 2, laid out U[a * a][O/B][C][B] for Winograd F(tile x tile, 3x3).
  enum Kind { kOIHWToOIHWo, kNKToNKn, kWinograd } kind = kOIHWToOIHWo;
  int64_t block = 0;  // the inner block of output channels (o) or rows (n)
  int tile = 0;       // kWinograd: outputs per tile side (2 or 4)
  /** The shape of the packed tensor (the weight's own shape for the layout-only packings). */
  Shape packed_shape(const Shape &weight) const;
};

/**
 * An int64 argument that a gather reads as indices. Compiled code does not check them (it clamps
 * to stay in bounds), so the runtime checks every value against ONNX's rule, [-extent, extent),
 * before the kernel runs, as the reference executor does: both executors reject the same input.
 */
struct IndexCheck {
  int param = -1;      // argument index (an int64 buffer)
  int64_t extent = 0;  // the gathered axis's length
  std::string node;    // what the message names: the op and its ONNX node
};

struct LoweredKernel {
  std::string name;
  std::vector<loop::Buffer> buffers;  // params..., output, temps...
  int num_params = 0;                 // buffers[0..num_params) are the arguments, then the output
  std::vector<KernelStage> stages;
  std::vector<WeightPacking> packings;
  std::vector<IndexCheck> index_checks;
  std::string schedule;               // a one-line description of the schedule used

  /** The printed loop IR of every stage. */
  std::string to_string() const;
  /**
   * The kernel's identity: a hash of its buffers, loop IR and weight packings, not of its name or
   * the schedule that made it. Two schedules with one identity compile to the same code (a knob
   * point and the step list it stands for, or knobs that the lowering clamps alike), so the tuner
   * measures one of them.
   */
  std::string identity() const;
};

}  // namespace autotune

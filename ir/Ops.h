#pragma once
// The op registry: each op's name (Relay's, so users' expectations carry over), fusion pattern
// kind, arity, attribute schema and type inference. One table serves the importer, the
// parser, the passes and the executors; an op not in it does not exist.
#include <functional>
#include <string>
#include <vector>

#include "ir/Attrs.h"
#include "ir/Tensor.h"

namespace autotune {

/** TVM's OpPatternKind, ordered so that combining two kinds is max(). */
enum class OpPattern {
  kElemWise = 0,         // out[i] = f(in[i])
  kBroadcast = 1,        // elementwise with numpy broadcasting
  kInjective = 2,        // each output element reads one input element (reshape, transpose, pad)
  kCommReduce = 3,       // commutative reduction (mean, pooling)
  kOutEWiseFusable = 4,  // complex op whose output can take elementwise epilogues (conv, dense)
  kOpaque = 8,           // not fusable
};
const char *pattern_name(OpPattern p);

/** What type inference sees of one node. constants[i] is the value of input i when it is a constant, else null. */
struct OpCall {
  const std::vector<TensorType> &inputs;
  const Attrs &attrs;
  const std::vector<const Tensor *> &constants;
};

struct OpDef {
  std::string name;
  OpPattern pattern;
  int min_inputs;
  int max_inputs;  // -1: unbounded
  std::vector<AttrSpec> attrs;
  std::function<Expected<TensorType>(const OpCall &)> infer;
};

/** The op named `name`, or null. */
const OpDef *find_op(const std::string &name);

/**
 * Whether `op` is an anchor: the op of a fused group that gets a loop nest of its own (conv,
 * dense, matmul, pools, mean, softmax: pattern OutEWiseFusable, CommReduce or Opaque, but
 * shape_of); every other op is inlined at its reads or into the anchor's store.
 */
bool is_anchor_op(const std::string &op);
const std::vector<OpDef> &all_ops();

/** Normalizes attrs and infers the output type of `op` applied to inputs of the given types. */
Expected<TensorType> infer_node_type(const OpDef &op, const std::vector<TensorType> &inputs, Attrs &attrs,
                                     const std::vector<const Tensor *> &constants);

// Shape arithmetic shared by type inference and the executors.
/** numpy broadcasting of two shapes, or an error naming both. */
Expected<Shape> broadcast_shapes(const Shape &a, const Shape &b);
/** Output extent of a sliding window: floor (or ceil) of (in + pads - dilated kernel) / stride, plus 1. */
int64_t window_out_extent(int64_t in, int64_t pad_begin, int64_t pad_end, int64_t kernel, int64_t stride,
                          int64_t dilation, bool ceil_mode);
/** `axis` in [-rank, rank) mapped to [0, rank), or an error. */
Expected<int> normalize_axis(int64_t axis, int rank);

}  // namespace autotune

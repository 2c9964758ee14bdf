#pragma once
// The graph passes. Each is a pure function of a graph; Pass.cpp registers them with their
// names and opt levels (TVM's where TVM has the pass).
#include "ir/Graph.h"

namespace autotune {

/** Re-infers every node's type (and re-checks every function body). */
Expected<Graph> infer_shapes(const Graph &g);

/** Removes identity and dropout, no-op reshapes and transposes and infinite clips; merges reshape chains; reshapes constants in place. */
Expected<Graph> simplify(const Graph &g);

/** Evaluates every node whose inputs are all constants into a constant (graph outputs stay nodes). */
Expected<Graph> fold_constants(const Graph &g);

/**
 * Folds inference BatchNormalization into the conv2d or dense (with or without its bias add) it
 * follows when that producer has no other consumer; any other batch norm becomes a per-channel
 * multiply and add.
 */
Expected<Graph> fold_batch_norm(const Graph &g);

/**
 * The decomposed layer norm ((x - mean) / sqrt(mean of squares + epsilon), then * scale and +
 * bias by constants, over trailing axes: PyTorch's opset-13 export and the importer's
 * LayerNormalization) as one nn.layer_norm, where its intermediates have no other use. The old
 * nodes are left to dead-code elimination.
 */
Expected<Graph> fuse_layer_norm(const Graph &g);

/** Drops nodes no output depends on (and, through the Rewriter, constants no node uses). */
Expected<Graph> eliminate_dead_code(const Graph &g);

/** Merges nodes that apply the same op with the same attributes to the same inputs. */
Expected<Graph> eliminate_common_subexpr(const Graph &g);

/**
 * Puts activations in NCHW[block]c between convs: each conv2d with one group and channels the
 * block divides becomes nn.conv2d_nchwc; elementwise ops on blocked values stay blocked;
 * nn.to_nchwc / nn.from_nchwc convert where a value changes layout (once per value).
 */
Expected<Graph> nchwc_layout(const Graph &g, int64_t block = 16);

struct FuseOptions {
  int max_group_size = 256;  // TVM's max_fuse_depth
};

/**
 * TVM's FuseOps: groups operators by the post-dominator tree and their pattern kinds and turns
 * each group into a primitive function node. See FuseOps.cpp for the algorithm.
 */
Expected<Graph> fuse_ops(const Graph &g, const FuseOptions &options = {});

}  // namespace autotune

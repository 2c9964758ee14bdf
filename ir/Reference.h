#pragma once
// The reference executor: plain, obviously-correct implementations of every op, accumulating in
// double. It is the oracle every rewrite and every compiled kernel is checked against, so it
// favours clarity over speed (single-threaded, no blocking).
#include <vector>

#include "ir/Graph.h"

namespace autotune {

/** Applies `node`'s op (attributes and output type taken from it) to concrete inputs. */
Expected<Tensor> eval_node(const Node &node, const std::vector<Tensor> &inputs);

/** Gather's rule (ONNX): every index lies in [-extent, extent); the error names the first that does not. */
Status check_gather_indices(const int64_t *indices, int64_t count, int64_t extent);

/** Checks that `inputs` match the graph's inputs in number, dtype and shape; the error names the input. */
Status check_inputs(const Graph &g, const std::vector<Tensor> &inputs);

/** x[N][C/b][H][W][b] as NCHW (to_nchw), or NCHW `t` as x[N][C/b][H][W][b] (!to_nchw). */
Tensor convert_nchwc(const Tensor &t, int64_t b, bool to_nchw);

/** Runs the whole graph; intermediates are freed after their last use. */
Expected<std::vector<Tensor>> run_reference(const Graph &g, const std::vector<Tensor> &inputs);

/** Seeded random inputs of the graph's input types (float32 in [-1, 1); int64 in [0, 2)). */
std::vector<Tensor> random_inputs(const Graph &g, uint64_t seed);

}  // namespace autotune

#pragma once
// ONNX import: protobuf -> onnx::checker -> ONNX shape inference -> Graph. Opsets 1 to 17 of the
// default domain: legacy forms (broadcast/axis attributes on binary ops, is_test) are mapped onto
// today's semantics, and forms that differ and are not handled (Reshape's attribute shape) fail. Every ONNX op maps onto the registry's canonical ops (Gemm becomes dense + add,
// Flatten/Unsqueeze/Squeeze become reshape, opset-specific forms are normalized), integer shape
// arithmetic (Shape/Gather/Unsqueeze/Concat chains) is evaluated at import, and each node's
// inferred type is cross-checked against ONNX's own shape inference.
#include <string>

#include "ir/Graph.h"

namespace autotune {

constexpr int kMinOpset = 1;
constexpr int kMaxOpset = 17;

/** Imports a model file; errors read "<path>: node '<name>' (<Op>): <reason>". */
Expected<Graph> import_onnx_file(const std::string &path);

/** Imports serialized ModelProto bytes; `label` stands for the file name in messages. */
Expected<Graph> import_onnx_bytes(const std::string &bytes, const std::string &label);

/** Reads a serialized onnx TensorProto file (the input_*.pb / output_*.pb of ONNX's test data). */
Expected<Tensor> load_tensor_pb(const std::string &path);

}  // namespace autotune

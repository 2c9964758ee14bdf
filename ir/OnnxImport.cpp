#include "ir/OnnxImport.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "ir/Files.h"
#include "ir/Reference.h"

namespace autotune {
namespace {

using Ints = std::vector<int64_t>;

std::string first_line(const std::string &s) {
  std::string line = s.substr(0, s.find('\n'));
  return line.empty() ? "(no message)" : line;
}

Expected<Tensor> tensor_from_proto(const onnx::TensorProto &t) {
  std::string what = t.name().empty() ? "tensor" : "tensor '" + t.name() + "'";
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    return make_error(what + ": external data files are not supported");
  DType dtype;
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT: dtype = DType::kFloat32; break;
    case onnx::TensorProto::INT64: dtype = DType::kInt64; break;
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::BOOL: {
      // Held as int64 (shape arithmetic and masks, evaluated at import; no kernel reads them).
      bool is_bool = t.data_type() == onnx::TensorProto::BOOL;
      Shape shape(t.dims().begin(), t.dims().end());
      auto type = make_type(DType::kInt64, shape);
      if (!type) return make_error(what + ": " + type.error().message);
      size_t width = is_bool ? 1 : 4;
      int64_t n = type->numel();
      if (t.has_raw_data() ? t.raw_data().size() != static_cast<size_t>(n) * width : t.int32_data_size() != n)
        return make_error(what + ": " + shape_str(shape) + " needs " + std::to_string(n) + " values, the file has " +
                          (t.has_raw_data() ? std::to_string(t.raw_data().size()) + " bytes" : std::to_string(t.int32_data_size()) + " values"));
      AT_ASSIGN(out, Tensor::allocate(*type, what));
      for (int64_t i = 0; i < n; ++i) {
        int32_t v = 0;
        if (!t.has_raw_data()) v = t.int32_data(static_cast<int>(i));
        else if (is_bool) v = t.raw_data()[i] != 0;
        else std::memcpy(&v, t.raw_data().data() + 4 * i, 4);
        out.i64()[i] = is_bool ? (v != 0) : v;
      }
      return out;
    }
    default:
      return make_error(what + ": dtype " + onnx::TensorProto::DataType_Name(
                                                static_cast<onnx::TensorProto::DataType>(t.data_type())) +
                        " is not supported (float32 and int64 are)");
  }
  Shape shape(t.dims().begin(), t.dims().end());
  auto type = make_type(dtype, shape);
  if (!type) return make_error(what + ": " + type.error().message);
  // The data must be in the file: check its size before allocating what the dims claim.
  size_t want = type->nbytes();
  int64_t values = dtype == DType::kFloat32 ? t.float_data_size() : t.int64_data_size();
  if (t.has_raw_data() ? t.raw_data().size() != want : values != type->numel())
    return make_error(what + ": " + type_str(*type) + " needs " + std::to_string(type->numel()) + " values (" +
                      std::to_string(want) + " bytes), the file has " +
                      (t.has_raw_data() ? std::to_string(t.raw_data().size()) + " bytes" : std::to_string(values) + " values"));
  AT_ASSIGN(out, Tensor::allocate(*type, what));
  if (t.has_raw_data()) {
    if (want) std::memcpy(out.raw(), t.raw_data().data(), want);
  } else if (dtype == DType::kFloat32) {
    std::copy(t.float_data().begin(), t.float_data().end(), out.f32());
  } else {
    std::copy(t.int64_data().begin(), t.int64_data().end(), out.i64());
  }
  return out;
}

/** A fully static type from ONNX's TypeProto, or nullopt where it is unknown or symbolic. */
std::optional<TensorType> static_type(const onnx::TypeProto &tp) {
  if (!tp.has_tensor_type() || !tp.tensor_type().has_shape()) return std::nullopt;
  DType dtype;
  switch (tp.tensor_type().elem_type()) {
    case onnx::TensorProto::FLOAT: dtype = DType::kFloat32; break;
    case onnx::TensorProto::INT64: dtype = DType::kInt64; break;
    default: return std::nullopt;
  }
  Shape s;
  for (const auto &d : tp.tensor_type().shape().dim()) {
    if (!d.has_dim_value()) return std::nullopt;
    s.push_back(d.dim_value());
  }
  return TensorType{dtype, s};
}

/**
 * How many bytes of constants import-time folding may create for a file of `file_bytes`: shape
 * arithmetic yields a few small vectors, so a fixed allowance plus a multiple of the file is
 * generous for real models and stops a tiny file from asking for gigabytes (an int64 range
 * broadcast against itself).
 */
size_t folding_budget(size_t file_bytes) { return (size_t{64} << 20) + 4 * file_bytes; }

/** ONNX ops that are one IR op with no attributes to read: op -> (IR op, binary with numpy broadcasting). */
const std::map<std::string, std::pair<std::string, bool>> &one_to_one_ops() {
  static const std::map<std::string, std::pair<std::string, bool>> ops{
      {"Add", {"add", true}}, {"Sub", {"subtract", true}}, {"Mul", {"multiply", true}}, {"Div", {"divide", true}},
      {"Relu", {"nn.relu", false}}, {"Sigmoid", {"sigmoid", false}}, {"HardSwish", {"nn.hard_swish", false}},
      {"GlobalAveragePool", {"nn.global_avg_pool2d", false}}, {"Identity", {"identity", false}}, {"Sqrt", {"sqrt", false}},
      {"Erf", {"erf", false}}, {"Tanh", {"tanh", false}}, {"Exp", {"exp", false}}, {"Log", {"log", false}},
      {"Neg", {"negative", false}}, {"Abs", {"abs", false}}, {"Reciprocal", {"reciprocal", false}}};
  return ops;
}

/** The ONNX ops of masks and comparisons and their IR ops (booleans are int64 0/1), and the IR ops' set. */
const std::map<std::string, std::string> &onnx_mask_ops() {
  static const std::map<std::string, std::string> ops{{"Equal", "equal"},         {"Less", "less"},   {"Greater", "greater"},
                                                      {"Not", "logical_not"},     {"And", "logical_and"}, {"Or", "logical_or"},
                                                      {"Where", "where"},         {"Cast", "cast"}};
  return ops;
}
const std::set<std::string> &mask_ops() {
  static const std::set<std::string> ops = [] {
    std::set<std::string> s;
    for (const auto &[onnx_op, ir] : onnx_mask_ops()) s.insert(ir);
    return s;
  }();
  return ops;
}

class Importer {
 public:
  Importer(std::string label, size_t file_bytes) : label_(std::move(label)), fold_budget_(folding_budget(file_bytes)) {}

  Expected<Graph> run(onnx::ModelProto &model);

 private:
  // Messages.
  Error fail(const std::string &why) const { return make_error(label_ + ": " + why); }
  Error fail(const onnx::NodeProto &n, const std::string &why) const {
    return make_error(label_ + ": " + where(n) + ": " + why);
  }
  std::string where(const onnx::NodeProto &n) const {
    return (n.name().empty() ? "node #" + std::to_string(node_index_) : "node '" + n.name() + "'") + " (" +
           n.op_type() + ")";
  }

  // Attributes of the current ONNX node.
  const onnx::AttributeProto *attr(const onnx::NodeProto &n, const std::string &name) const {
    for (const auto &a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  Expected<int64_t> attr_int(const onnx::NodeProto &n, const std::string &name, int64_t def) const {
    const auto *a = attr(n, name);
    if (!a) return def;
    if (a->type() != onnx::AttributeProto::INT) return fail(n, "attribute '" + name + "' must be an int");
    return a->i();
  }
  Expected<float> attr_float(const onnx::NodeProto &n, const std::string &name, float def) const {
    const auto *a = attr(n, name);
    if (!a) return def;
    if (a->type() != onnx::AttributeProto::FLOAT) return fail(n, "attribute '" + name + "' must be a float");
    return a->f();
  }
  Expected<Ints> attr_ints(const onnx::NodeProto &n, const std::string &name, Ints def) const {
    const auto *a = attr(n, name);
    if (!a) return def;
    if (a->type() != onnx::AttributeProto::INTS) return fail(n, "attribute '" + name + "' must be a list of ints");
    return Ints(a->ints().begin(), a->ints().end());
  }
  Expected<std::string> attr_string(const onnx::NodeProto &n, const std::string &name, std::string def) const {
    const auto *a = attr(n, name);
    if (!a) return def;
    if (a->type() != onnx::AttributeProto::STRING) return fail(n, "attribute '" + name + "' must be a string");
    return a->s();
  }

  // Values.
  bool has_input(const onnx::NodeProto &n, int i) const { return i < n.input_size() && !n.input(i).empty(); }
  Expected<ValueId> input(const onnx::NodeProto &n, int i) const {
    if (!has_input(n, i)) return fail(n, "missing input " + std::to_string(i));
    auto it = values_.find(n.input(i));
    if (it != values_.end()) return it->second;
    auto bad = unsupported_.find(n.input(i));
    if (bad != unsupported_.end()) return fail(n, "input '" + n.input(i) + "' is " + bad->second);
    return fail(n, "input '" + n.input(i) + "' is not defined before this node");
  }
  const TensorType &type_of(ValueId v) const { return b_.graph().type_of(v); }
  const Tensor *constant(ValueId v) const {
    return v.kind == ValueId::Kind::kConstant ? &b_.graph().constants[v.index].value : nullptr;
  }
  /** Input i as a constant tensor (shape arguments), or an error saying it must be one. */
  Expected<Tensor> constant_input(const onnx::NodeProto &n, int i, DType dtype) const {
    AT_ASSIGN(v, input(n, i));
    const Tensor *t = constant(v);
    if (!t) return fail(n, "input " + std::to_string(i) + " ('" + n.input(i) + "') must be a constant: dynamic shapes are not supported");
    if (t->dtype() != dtype) return fail(n, "input " + std::to_string(i) + " must be " + dtype_name(dtype));
    return *t;
  }
  /**
   * A list of ints that an op took as attribute `name` before opset `from` and as its constant
   * int64 input `i` since (Unsqueeze's axes, Split's sizes, ReduceSum's axes); empty when absent.
   */
  Expected<Ints> ints_attr_or_input(const onnx::NodeProto &n, const std::string &name, int i, int from = 13) const {
    if (opset_ < from) return attr_ints(n, name, {});
    if (!has_input(n, i)) return Ints{};
    return constant_ints(n, i);
  }
  /** Input i as the values of a constant int64 tensor (a shape, axes, repeats), or an error saying it must be one. */
  Expected<Ints> constant_ints(const onnx::NodeProto &n, int i) const {
    AT_ASSIGN(t, constant_input(n, i, DType::kInt64));
    return Ints(t.i64(), t.i64() + t.numel());
  }
  Expected<float> scalar_input(const onnx::NodeProto &n, int i, float def) const {
    if (!has_input(n, i)) return def;
    AT_ASSIGN(t, constant_input(n, i, DType::kFloat32));
    if (t.numel() != 1) return fail(n, "input " + std::to_string(i) + " must be a scalar");
    return t.f32()[0];
  }

  /**
   * Adds op(inputs, attrs) for the current node. Integer results of constant inputs (the shape
   * arithmetic exporters emit) are evaluated here and become constants, never kernels.
   */
  Expected<ValueId> emit(const onnx::NodeProto &n, const std::string &op, std::vector<ValueId> inputs, Attrs attrs = {}) {
    auto node = b_.make_node(op, std::move(inputs), std::move(attrs), n.name());
    if (!node) return fail(n, node.error().message);
    bool all_constant = true;
    for (ValueId v : node->inputs) all_constant &= v.kind == ValueId::Kind::kConstant;
    // Masks of constants fold here too (a Where of floats), as the shape arithmetic does.
    if (all_constant && (node->type.dtype == DType::kInt64 || mask_ops().count(op))) {
      AT_TRY(charge_folding(n, node->type));
      std::vector<Tensor> args;
      for (ValueId v : node->inputs) args.push_back(*constant(v));
      auto value = eval_node(*node, args);
      if (!value) return fail(n, value.error().message);
      return b_.add_constant(n.output(0), value.take());
    }
    return b_.insert(node.take());
  }
  /** Counts a constant that folding at import creates against the file's budget, or says it is beyond it. */
  Status charge_folding(const onnx::NodeProto &n, const TensorType &t) {
    size_t bytes = t.nbytes();
    if (bytes > fold_budget_ - folded_bytes_)
      return fail(n, "folding this constant " + type_str(t) + " would need " + format_bytes(static_cast<double>(bytes)) +
                         ", beyond the import budget of " + format_bytes(static_cast<double>(fold_budget_)) + " for this file");
    folded_bytes_ += bytes;
    return Status::ok();
  }
  Expected<ValueId> emit_reshape(const onnx::NodeProto &n, ValueId x, Ints shape) {
    return emit(n, "reshape", {x}, {{"newshape", std::move(shape)}});
  }

  Status import_node(const onnx::NodeProto &n);
  /** Every op of the default domain the graph uses that the importer does not read, named at once (the whole gap, not its first op). */
  Status check_ops_supported(const onnx::GraphProto &g);
  Status cross_check_with_onnx(onnx::ModelProto &model);
  Expected<ValueId> convert(const onnx::NodeProto &n);
  Expected<ValueId> convert_conv(const onnx::NodeProto &n);
  Expected<ValueId> convert_pool(const onnx::NodeProto &n, bool is_max);
  Expected<ValueId> convert_gemm(const onnx::NodeProto &n);
  Expected<ValueId> convert_reshape(const onnx::NodeProto &n);
  Expected<ValueId> convert_unsqueeze(const onnx::NodeProto &n, bool squeeze);
  Expected<ValueId> convert_softmax(const onnx::NodeProto &n);
  Expected<ValueId> convert_pad(const onnx::NodeProto &n);
  Expected<ValueId> convert_constant(const onnx::NodeProto &n);
  Expected<ValueId> convert_slice(const onnx::NodeProto &n);
  Expected<std::vector<ValueId>> convert_split(const onnx::NodeProto &n);
  Expected<ValueId> convert_pow(const onnx::NodeProto &n);
  Expected<ValueId> convert_layer_norm(const onnx::NodeProto &n);
  Expected<ValueId> convert_einsum(const onnx::NodeProto &n);
  /** a x b: a dense layer when b is a constant matrix (its weight), else nn.matmul (batched, broadcasting). */
  Expected<ValueId> emit_matmul(const onnx::NodeProto &n, ValueId a, ValueId b);
  Expected<ValueId> convert_shape_math(const onnx::NodeProto &n);
  /** The slice [b, e) with step st of every dimension of x's listed axes (ONNX's clamping), as a strided_slice. */
  Expected<ValueId> emit_slice(const onnx::NodeProto &n, ValueId x, const Ints &starts, const Ints &ends, const Ints &axes, const Ints &steps);
  /** Resolves auto_pad / pads of a 2-D window op into [top, left, bottom, right]. */
  Expected<Ints> window_padding(const onnx::NodeProto &n, const Shape &x, const Ints &kernel, const Ints &strides,
                                const Ints &dilations);

  std::string label_;
  size_t fold_budget_;       // bytes of constants that import-time folding may create
  size_t folded_bytes_ = 0;  // created so far
  GraphBuilder b_;
  int opset_ = 0;
  int node_index_ = 0;
  std::unordered_map<std::string, ValueId> values_;
  std::unordered_map<std::string, std::string> unsupported_;  // value name -> why it cannot be used
  std::unordered_map<std::string, int> producers_;             // value name -> index of the ONNX node that computes it
};

Expected<Graph> Importer::run(onnx::ModelProto &model) {
  for (const auto &op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") opset_ = static_cast<int>(op.version());
  if (opset_ == 0) return fail("model imports no version of the default ONNX opset");
  if (opset_ < kMinOpset || opset_ > kMaxOpset)
    return fail("opset " + std::to_string(opset_) + " is not supported (autotune reads opsets " +
                std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception &e) {
    return fail("invalid ONNX model: " + first_line(e.what()));
  }
  const onnx::GraphProto &g = model.graph();
  for (const auto &init : g.initializer()) {
    auto t = tensor_from_proto(init);
    if (!t) return fail("initializer: " + t.error().message);
    values_[init.name()] = b_.add_constant(init.name(), t.take());
  }
  for (const auto &in : g.input()) {
    if (values_.count(in.name())) continue;  // older exporters list initializers as inputs too
    const auto &tt = in.type().tensor_type();
    if (!in.type().has_tensor_type()) return fail("input '" + in.name() + "' is not a tensor");
    // Booleans are int64 0/1 inside autotune (a bool .npy reads as such).
    if (tt.elem_type() != onnx::TensorProto::FLOAT && tt.elem_type() != onnx::TensorProto::INT64 && tt.elem_type() != onnx::TensorProto::BOOL)
      return fail("input '" + in.name() + "' has dtype " +
                  onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(tt.elem_type())) +
                  " (float32, int64 and bool are supported)");
    if (!tt.has_shape()) return fail("input '" + in.name() + "' has no shape; autotune needs static shapes");
    Shape s;
    for (const auto &d : tt.shape().dim()) {
      if (!d.has_dim_value())
        return fail("input '" + in.name() + "' has symbolic dimension '" + d.dim_param() +
                    "'; autotune needs static shapes (export with fixed input sizes)");
      s.push_back(d.dim_value());
    }
    auto type = make_type(tt.elem_type() == onnx::TensorProto::FLOAT ? DType::kFloat32 : DType::kInt64, s);
    if (!type) return fail("input '" + in.name() + "': " + type.error().message);
    values_[in.name()] = b_.add_input(in.name(), type.take());
  }
  AT_TRY(check_ops_supported(g));
  for (node_index_ = 0; node_index_ < g.node_size(); ++node_index_) AT_TRY(import_node(g.node(node_index_)));
  AT_TRY(cross_check_with_onnx(model));
  for (const auto &out : g.output()) {
    auto it = values_.find(out.name());
    if (it == values_.end()) return fail("graph output '" + out.name() + "' is not produced by any supported node");
    ValueId v = it->second;
    if (v.kind != ValueId::Kind::kNode) {
      // Outputs that fold to constants or pass inputs through still go through a node, so every
      // output is computed by the graph and owned by the caller.
      auto id = b_.add_node("identity", {v}, {}, out.name());
      if (!id) return fail("graph output '" + out.name() + "': " + id.error().message);
      v = *id;
    }
    b_.add_output(v);
  }
  if (g.output_size() == 0) return fail("graph has no outputs");
  Graph graph = b_.finish();
  auto ok = verify_graph(graph);
  AT_CHECK(static_cast<bool>(ok), "importer built an invalid graph: " + ok.error().message);
  return graph;
}

/**
 * Every node's type is checked against ONNX's own shape inference. That runs last, on a model
 * this importer has already validated (supported ops only, attributes checked, every tensor's
 * data matching its dims): ONNX's inference trusts what it reads, and a damaged file (a weight of
 * rank 5 for a 2-D conv, dims larger than the data) crashes it (libonnx 1.14).
 */
Status Importer::cross_check_with_onnx(onnx::ModelProto &model) {
  try {
    onnx::shape_inference::InferShapes(model);
  } catch (const std::exception &e) {
    return fail("ONNX shape inference failed: " + first_line(e.what()));
  }
  const onnx::GraphProto &g = model.graph();
  for (const auto &vi : g.value_info()) {
    auto theirs = static_type(vi.type());
    auto value = values_.find(vi.name());
    auto producer = producers_.find(vi.name());
    if (!theirs || value == values_.end() || producer == producers_.end()) continue;
    const TensorType &ours = type_of(value->second);
    node_index_ = producer->second;
    if (ours != *theirs)
      return fail(g.node(producer->second), "inferred " + type_str(ours) + " but ONNX shape inference says " + type_str(*theirs));
  }
  return Status::ok();
}

/** The ONNX ops convert() reads (and Split, which import_node reads): those of one_to_one_ops and the ones with code of their own. */
const std::set<std::string> &supported_ops() {
  static const std::set<std::string> ops = [] {
    std::set<std::string> s{"And", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape",
                            "Conv", "Dropout", "Einsum", "Equal", "Expand", "Flatten", "Gather", "Gemm", "Greater", "HardSigmoid",
                            "LayerNormalization", "LeakyRelu", "Less", "MatMul", "MaxPool", "Not", "Or", "Pad", "Pow", "Range",
                            "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "Reshape", "Shape", "Size",
                            "Slice", "Softmax", "Split", "Squeeze", "Tile", "Transpose", "Unsqueeze", "Where"};
    for (const auto &[op, ir] : one_to_one_ops()) s.insert(op);
    return s;
  }();
  return ops;
}

Status Importer::check_ops_supported(const onnx::GraphProto &g) {
  std::map<std::string, std::pair<int, int>> missing;  // op -> (first node index, count)
  for (int i = 0; i < g.node_size(); ++i) {
    const auto &n = g.node(i);
    if ((!n.domain().empty() && n.domain() != "ai.onnx") || supported_ops().count(n.op_type())) continue;
    auto [it, fresh] = missing.try_emplace(n.op_type(), i, 0);
    ++it->second.second;
  }
  if (missing.empty()) return Status::ok();
  if (missing.size() == 1 && missing.begin()->second.second == 1) {
    node_index_ = missing.begin()->second.first;
    const auto &n = g.node(node_index_);
    return fail(n, "op '" + n.op_type() + "' is not supported");
  }
  std::string list;
  for (const auto &[op, at] : missing) {
    const auto &n = g.node(at.first);
    std::string node = n.name().empty() ? "node #" + std::to_string(at.first) : "node '" + n.name() + "'";
    list += (list.empty() ? "" : ", ") + std::string("'") + op + "' at " + node + (at.second > 1 ? " and " + std::to_string(at.second - 1) + " more" : "");
  }
  return fail(std::to_string(missing.size()) + " unsupported op" + (missing.size() > 1 ? "s: " : ": ") + list);
}

Status Importer::import_node(const onnx::NodeProto &n) {
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return fail(n, "domain '" + n.domain() + "' is not supported");
  if (n.output_size() < 1 || n.output(0).empty()) return fail(n, "node has no output");
  if (n.op_type() == "Split") {
    AT_ASSIGN(parts, convert_split(n));
    for (int i = 0; i < n.output_size(); ++i) {
      if (n.output(i).empty()) continue;
      values_[n.output(i)] = parts[i];
      producers_[n.output(i)] = node_index_;
    }
    return Status::ok();
  }
  AT_ASSIGN(v, convert(n));
  values_[n.output(0)] = v;
  producers_[n.output(0)] = node_index_;
  for (int i = 1; i < n.output_size(); ++i)
    if (!n.output(i).empty() && !values_.count(n.output(i))) unsupported_[n.output(i)] = "output " + std::to_string(i) + " of " + where(n) + ", which autotune does not compute";
  return Status::ok();
}

Expected<ValueId> Importer::convert(const onnx::NodeProto &n) {
  const std::string &op = n.op_type();
  auto unary = [&](const std::string &name, Attrs attrs = {}) -> Expected<ValueId> {
    AT_ASSIGN(x, input(n, 0));
    return emit(n, name, {x}, std::move(attrs));
  };
  auto binary = [&](const std::string &name) -> Expected<ValueId> {
    AT_ASSIGN(a, input(n, 0));
    AT_ASSIGN(b, input(n, 1));
    if (opset_ < 7 && attr(n, "broadcast") && attr(n, "axis")) {
      // Legacy broadcasting: B's dims line up with A's starting at `axis`; pad B with 1s so
      // numpy broadcasting means the same.
      AT_ASSIGN(axis, attr_int(n, "axis", 0));
      const Shape &as = type_of(a).shape, &bs = type_of(b).shape;
      int ra = static_cast<int>(as.size()), rb = static_cast<int>(bs.size());
      if (axis < 0) axis += ra;
      if (axis < 0 || axis + rb > ra) return fail(n, "broadcast axis " + std::to_string(axis) + " out of range");
      Ints shape(axis, 1);
      shape.insert(shape.end(), bs.begin(), bs.end());
      shape.resize(ra, 1);
      AT_ASSIGN(rb_v, emit_reshape(n, b, shape));
      b = rb_v;
    }
    return emit(n, name, {a, b});
  };
  if (op == "Conv") return convert_conv(n);
  if (op == "MaxPool") {
    if (n.output_size() > 1 && !n.output(1).empty()) return fail(n, "the Indices output is not supported");
    return convert_pool(n, true);
  }
  if (op == "AveragePool") return convert_pool(n, false);
  if (op == "BatchNormalization") {
    AT_ASSIGN(training, attr_int(n, "training_mode", 0));
    AT_ASSIGN(is_test, attr_int(n, "is_test", opset_ < 7 ? 0 : 1));
    AT_ASSIGN(spatial, attr_int(n, "spatial", 1));
    if (training || !is_test) return fail(n, "training mode is not supported (inference only)");
    if (!spatial) return fail(n, "spatial=0 is not supported");
    AT_ASSIGN(eps, attr_float(n, "epsilon", 1e-5f));
    std::vector<ValueId> ins;
    for (int i = 0; i < 5; ++i) {
      AT_ASSIGN(v, input(n, i));
      ins.push_back(v);
    }
    return emit(n, "nn.batch_norm", ins, {{"epsilon", static_cast<double>(eps)}});
  }
  if (op == "LeakyRelu") {
    AT_ASSIGN(alpha, attr_float(n, "alpha", 0.01f));
    return unary("nn.leaky_relu", {{"alpha", static_cast<double>(alpha)}});
  }
  if (op == "HardSigmoid") {
    AT_ASSIGN(alpha, attr_float(n, "alpha", 0.2f));
    AT_ASSIGN(beta, attr_float(n, "beta", 0.5f));
    return unary("nn.hard_sigmoid", {{"alpha", static_cast<double>(alpha)}, {"beta", static_cast<double>(beta)}});
  }
  if (op == "Clip") {
    float lo, hi;
    if (opset_ < 11) {
      AT_ASSIGN(a, attr_float(n, "min", -std::numeric_limits<float>::infinity()));
      AT_ASSIGN(b, attr_float(n, "max", std::numeric_limits<float>::infinity()));
      lo = a, hi = b;
    } else {
      AT_ASSIGN(a, scalar_input(n, 1, -std::numeric_limits<float>::infinity()));
      AT_ASSIGN(b, scalar_input(n, 2, std::numeric_limits<float>::infinity()));
      lo = a, hi = b;
    }
    return unary("clip", {{"a_min", static_cast<double>(lo)}, {"a_max", static_cast<double>(hi)}});
  }
  if (auto it = one_to_one_ops().find(op); it != one_to_one_ops().end())
    return it->second.second ? binary(it->second.first) : unary(it->second.first);
  if (op == "Pow") return convert_pow(n);
  if (op == "Slice") return convert_slice(n);
  if (op == "Tile") {
    AT_ASSIGN(x, input(n, 0));
    AT_ASSIGN(reps, constant_ints(n, 1));
    return emit(n, "tile", {x}, {{"reps", reps}});
  }
  if (op == "LayerNormalization") return convert_layer_norm(n);
  if (op == "Expand") {
    AT_ASSIGN(x, input(n, 0));
    AT_ASSIGN(shape, constant_ints(n, 1));
    return emit(n, "broadcast_to", {x}, {{"shape", shape}});
  }
  if (op == "ConstantOfShape" || op == "Equal" || op == "Less" || op == "Greater" || op == "Not" || op == "And" || op == "Or" ||
      op == "Where" || op == "Cast" || op == "Range")
    return convert_shape_math(n);
  if (op == "Dropout") {
    if (n.output_size() > 1 && !n.output(1).empty()) return fail(n, "the mask output is not supported");
    float rate = 0.5f;
    if (opset_ < 12) {
      AT_ASSIGN(r, attr_float(n, "ratio", 0.5f));
      rate = r;
    } else {
      AT_ASSIGN(r, scalar_input(n, 1, 0.5f));
      rate = r;
      if (has_input(n, 2)) return fail(n, "the training_mode input is not supported (inference only)");
    }
    return unary("nn.dropout", {{"rate", static_cast<double>(rate)}});
  }
  if (op == "MatMul") {
    AT_ASSIGN(a, input(n, 0));
    AT_ASSIGN(b, input(n, 1));
    return emit_matmul(n, a, b);
  }
  if (op == "Einsum") return convert_einsum(n);
  if (op == "Gemm") return convert_gemm(n);
  if (op == "Flatten") {
    AT_ASSIGN(x, input(n, 0));
    const Shape &s = type_of(x).shape;
    AT_ASSIGN(axis_attr, attr_int(n, "axis", 1));
    int r = static_cast<int>(s.size());
    if (axis_attr < -r || axis_attr > r) return fail(n, "axis " + std::to_string(axis_attr) + " out of range");
    int axis = static_cast<int>(axis_attr < 0 ? axis_attr + r : axis_attr);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < r; ++i) (i < axis ? outer : inner) *= s[i];
    return emit_reshape(n, x, {outer, inner});
  }
  if (op == "Reshape") return convert_reshape(n);
  if (op == "Unsqueeze") return convert_unsqueeze(n, false);
  if (op == "Squeeze") return convert_unsqueeze(n, true);
  if (op == "Transpose") {
    AT_ASSIGN(x, input(n, 0));
    Ints rev;
    for (int i = type_of(x).rank() - 1; i >= 0; --i) rev.push_back(i);
    AT_ASSIGN(perm, attr_ints(n, "perm", rev));
    return unary("transpose", {{"axes", perm}});
  }
  if (op == "Concat") {
    const auto *a = attr(n, "axis");
    if (!a) return fail(n, "missing attribute 'axis'");
    std::vector<ValueId> ins;
    for (int i = 0; i < n.input_size(); ++i) {
      AT_ASSIGN(v, input(n, i));
      ins.push_back(v);
    }
    if (ins.empty()) return fail(n, "no inputs");
    auto axis = normalize_axis(a->i(), type_of(ins[0]).rank());
    if (!axis) return fail(n, axis.error().message);
    return emit(n, "concatenate", ins, {{"axis", int64_t{*axis}}});
  }
  if (op == "Pad") return convert_pad(n);
  if (op == "Softmax") return convert_softmax(n);
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd") {
    AT_ASSIGN(x, input(n, 0));
    // ReduceSum takes its axes as an input from opset 13 (the others from 18, beyond what autotune reads).
    if (op != "ReduceSum" && n.input_size() > 1) return fail(n, "axes as an input (opset 18) is not supported");
    AT_ASSIGN(axes, ints_attr_or_input(n, "axes", 1, op == "ReduceSum" ? 13 : 18));
    // No axes reduce every axis, unless noop_with_empty_axes (ReduceSum, opset 13).
    AT_ASSIGN(noop, attr_int(n, "noop_with_empty_axes", 0));
    if (axes.empty() && noop) return emit(n, "identity", {x});
    AT_ASSIGN(keep, attr_int(n, "keepdims", 1));
    for (int64_t &a : axes) {
      auto ax = normalize_axis(a, type_of(x).rank());
      if (!ax) return fail(n, ax.error().message);
      a = *ax;
    }
    const char *ir = op == "ReduceMean" ? "mean" : op == "ReduceSum" ? "sum" : op == "ReduceMax" ? "max" : op == "ReduceMin" ? "min" : "prod";
    if (type_of(x).dtype != DType::kFloat32) return fail(n, "only float32 reductions are supported");
    return emit(n, ir, {x}, {{"axis", axes}, {"keepdims", keep ? int64_t{1} : int64_t{0}}});
  }
  if (op == "Constant") return convert_constant(n);
  if (op == "Size") {
    AT_ASSIGN(x, input(n, 0));
    return b_.add_constant(n.output(0), tensor_i64({}, {type_of(x).numel()}));
  }
  if (op == "Shape") {
    AT_ASSIGN(x, input(n, 0));
    const Shape &s = type_of(x).shape;
    int64_t r = static_cast<int64_t>(s.size());
    AT_ASSIGN(start, attr_int(n, "start", 0));
    AT_ASSIGN(end, attr_int(n, "end", r));
    start = std::clamp(start < 0 ? start + r : start, int64_t{0}, r);
    end = std::clamp(end < 0 ? end + r : end, int64_t{0}, r);
    Ints dims(s.begin() + start, s.begin() + std::max(start, end));
    return b_.add_constant(n.output(0), tensor_i64({static_cast<int64_t>(dims.size())}, dims));
  }
  if (op == "Gather") {
    AT_ASSIGN(x, input(n, 0));
    AT_ASSIGN(idx, input(n, 1));
    AT_ASSIGN(axis, attr_int(n, "axis", 0));
    return emit(n, "take", {x, idx}, {{"axis", axis}});
  }
  return fail(n, "op '" + op + "' is not supported");
}

Expected<Ints> Importer::window_padding(const onnx::NodeProto &n, const Shape &x, const Ints &kernel,
                                        const Ints &strides, const Ints &dilations) {
  AT_ASSIGN(auto_pad, attr_string(n, "auto_pad", "NOTSET"));
  AT_ASSIGN(pads, attr_ints(n, "pads", {0, 0, 0, 0}));
  if (auto_pad == "NOTSET") {
    if (pads.size() != 4) return fail(n, "pads must have 4 values for a 2-D window");
    return pads;
  }
  if (auto_pad == "VALID") return Ints{0, 0, 0, 0};
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") return fail(n, "unknown auto_pad '" + auto_pad + "'");
  Ints p(4);
  for (int i = 0; i < 2; ++i) {
    if (strides[i] < 1) return fail(n, "strides must be positive");
    int64_t out = (x[2 + i] + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - x[2 + i]);
    int64_t small = total / 2, big = total - small;
    p[i] = auto_pad == "SAME_UPPER" ? small : big;
    p[i + 2] = auto_pad == "SAME_UPPER" ? big : small;
  }
  return p;
}

Expected<ValueId> Importer::convert_conv(const onnx::NodeProto &n) {
  AT_ASSIGN(x, input(n, 0));
  AT_ASSIGN(w, input(n, 1));
  const Shape &xs = type_of(x).shape, &ws = type_of(w).shape;
  if (ws.size() != 4 || xs.size() != 4)
    return fail(n, "only 2-D convolution is supported (data " + shape_str(xs) + ", weight " + shape_str(ws) + ")");
  AT_ASSIGN(kernel, attr_ints(n, "kernel_shape", {ws[2], ws[3]}));
  if (kernel != Ints{ws[2], ws[3]}) return fail(n, "kernel_shape does not match the weight's shape");
  AT_ASSIGN(strides, attr_ints(n, "strides", {1, 1}));
  AT_ASSIGN(dilations, attr_ints(n, "dilations", {1, 1}));
  AT_ASSIGN(group, attr_int(n, "group", 1));
  if (strides.size() != 2 || dilations.size() != 2) return fail(n, "strides and dilations must have 2 values");
  AT_ASSIGN(pads, window_padding(n, xs, kernel, strides, dilations));
  std::vector<ValueId> ins{x, w};
  if (has_input(n, 2)) {
    AT_ASSIGN(bias, input(n, 2));
    ins.push_back(bias);
  }
  return emit(n, "nn.conv2d", ins, {{"strides", strides}, {"padding", pads}, {"dilation", dilations}, {"groups", group}});
}

Expected<ValueId> Importer::convert_pool(const onnx::NodeProto &n, bool is_max) {
  AT_ASSIGN(x, input(n, 0));
  const Shape &xs = type_of(x).shape;
  if (xs.size() != 4) return fail(n, "only 2-D pooling is supported (data " + shape_str(xs) + ")");
  AT_ASSIGN(kernel, attr_ints(n, "kernel_shape", {}));
  if (kernel.size() != 2) return fail(n, "kernel_shape must have 2 values");
  AT_ASSIGN(strides, attr_ints(n, "strides", {1, 1}));
  AT_ASSIGN(dilations, attr_ints(n, "dilations", {1, 1}));
  AT_ASSIGN(ceil_mode, attr_int(n, "ceil_mode", 0));
  if (strides.size() != 2 || dilations.size() != 2) return fail(n, "strides and dilations must have 2 values");
  if (is_max) {
    AT_ASSIGN(order, attr_int(n, "storage_order", 0));
    (void)order;  // only affects the Indices output, which is rejected
  }
  AT_ASSIGN(pads, window_padding(n, xs, kernel, strides, dilations));
  Attrs attrs{{"pool_size", kernel}, {"strides", strides}, {"padding", pads}, {"dilation", dilations},
              {"ceil_mode", ceil_mode ? int64_t{1} : int64_t{0}}};
  if (is_max) return emit(n, "nn.max_pool2d", {x}, attrs);
  AT_ASSIGN(include_pad, attr_int(n, "count_include_pad", 0));
  attrs.set("count_include_pad", include_pad ? int64_t{1} : int64_t{0});
  return emit(n, "nn.avg_pool2d", {x}, attrs);
}

Expected<ValueId> Importer::convert_gemm(const onnx::NodeProto &n) {
  // Y = alpha * A' * B' + beta * C  ->  dense(A', B'^T) [* alpha] [+ C [* beta]], as Relay does.
  AT_ASSIGN(a, input(n, 0));
  AT_ASSIGN(b, input(n, 1));
  AT_ASSIGN(trans_a, attr_int(n, "transA", 0));
  AT_ASSIGN(trans_b, attr_int(n, "transB", 0));
  AT_ASSIGN(alpha, attr_float(n, "alpha", 1.0f));
  AT_ASSIGN(beta, attr_float(n, "beta", 1.0f));
  if (type_of(a).rank() != 2 || type_of(b).rank() != 2) return fail(n, "A and B must be matrices");
  if (trans_a) {
    AT_ASSIGN(t, emit(n, "transpose", {a}, {{"axes", Ints{1, 0}}}));
    a = t;
  }
  if (!trans_b) {  // dense wants the weight as [N, K]
    AT_ASSIGN(t, emit(n, "transpose", {b}, {{"axes", Ints{1, 0}}}));
    b = t;
  }
  AT_ASSIGN(y, emit(n, "nn.dense", {a, b}));
  if (alpha != 1.0f) {
    ValueId s = b_.add_constant(n.output(0) + ".alpha", scalar_f32(alpha));
    AT_ASSIGN(t, emit(n, "multiply", {y, s}));
    y = t;
  }
  if (!has_input(n, 2) || beta == 0.0f) return y;
  AT_ASSIGN(c, input(n, 2));
  if (beta != 1.0f) {
    ValueId s = b_.add_constant(n.output(0) + ".beta", scalar_f32(beta));
    AT_ASSIGN(t, emit(n, "multiply", {c, s}));
    c = t;
  }
  AT_ASSIGN(sum, emit(n, "add", {y, c}));
  if (type_of(sum) != type_of(y)) return fail(n, "C of shape " + shape_str(type_of(c).shape) + " does not broadcast to the output");
  return sum;
}

Expected<ValueId> Importer::convert_reshape(const onnx::NodeProto &n) {
  AT_ASSIGN(x, input(n, 0));
  AT_ASSIGN(shape, constant_ints(n, 1));
  AT_ASSIGN(allowzero, attr_int(n, "allowzero", 0));
  const Shape &in = type_of(x).shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= in.size()) return fail(n, "shape has 0 at position " + std::to_string(i) + " beyond the input's rank");
      shape[i] = in[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) return fail(n, "shape has more than one -1");
      infer = static_cast<int>(i);
      continue;
    }
    if (shape[i] < 0) return fail(n, "shape has negative dimension " + std::to_string(shape[i]));
    if (shape[i] > 0 && known > kMaxTensorElements / shape[i]) return fail(n, "shape is too large");
    known *= shape[i];
  }
  int64_t total = type_of(x).numel();
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      return fail(n, "cannot reshape " + shape_str(in) + " to " + shape_str(shape));
    shape[infer] = total / known;
  }
  return emit_reshape(n, x, shape);
}

Expected<ValueId> Importer::convert_unsqueeze(const onnx::NodeProto &n, bool squeeze) {
  AT_ASSIGN(x, input(n, 0));
  AT_ASSIGN(axes, ints_attr_or_input(n, "axes", 1));
  const Shape &in = type_of(x).shape;
  int r = static_cast<int>(in.size());
  if (!squeeze) {
    if (axes.empty()) return fail(n, "axes must be given");
    int out_rank = r + static_cast<int>(axes.size());
    std::vector<bool> is_new(out_rank, false);
    for (int64_t a : axes) {
      auto ax = normalize_axis(a, out_rank);
      if (!ax || is_new[*ax]) return fail(n, "bad or repeated axis " + std::to_string(a));
      is_new[*ax] = true;
    }
    Ints shape;
    for (int i = 0, j = 0; i < out_rank; ++i) shape.push_back(is_new[i] ? 1 : in[j++]);
    return emit_reshape(n, x, shape);
  }
  std::vector<bool> drop(r, false);
  for (int64_t a : axes) {
    auto ax = normalize_axis(a, r);
    if (!ax) return fail(n, ax.error().message);
    if (in[*ax] != 1) return fail(n, "cannot squeeze axis " + std::to_string(a) + " of extent " + std::to_string(in[*ax]));
    drop[*ax] = true;
  }
  Ints shape;
  for (int i = 0; i < r; ++i)
    if (!(axes.empty() ? in[i] == 1 : drop[i])) shape.push_back(in[i]);
  return emit_reshape(n, x, shape);
}

Expected<ValueId> Importer::convert_softmax(const onnx::NodeProto &n) {
  AT_ASSIGN(x, input(n, 0));
  const Shape &s = type_of(x).shape;
  int r = static_cast<int>(s.size());
  AT_ASSIGN(axis_attr, attr_int(n, "axis", opset_ < 13 ? 1 : -1));
  auto axis = normalize_axis(axis_attr, r);
  if (!axis) return fail(n, axis.error().message);
  if (opset_ >= 13 || *axis == r - 1) return emit(n, "nn.softmax", {x}, {{"axis", int64_t{*axis}}});
  // Before opset 13 Softmax works on the input coerced to 2-D at `axis`.
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < r; ++i) (i < *axis ? outer : inner) *= s[i];
  AT_ASSIGN(flat, emit_reshape(n, x, {outer, inner}));
  AT_ASSIGN(sm, emit(n, "nn.softmax", {flat}, {{"axis", int64_t{1}}}));
  return emit_reshape(n, sm, s);
}

Expected<ValueId> Importer::convert_pad(const onnx::NodeProto &n) {
  AT_ASSIGN(x, input(n, 0));
  AT_ASSIGN(mode, attr_string(n, "mode", "constant"));
  if (mode != "constant") return fail(n, "mode '" + mode + "' is not supported (only constant)");
  Ints pads;
  float value = 0;
  if (opset_ < 11) {
    AT_ASSIGN(p, attr_ints(n, "pads", {}));
    AT_ASSIGN(v, attr_float(n, "value", 0.0f));
    pads = p, value = v;
  } else {
    AT_ASSIGN(t, constant_input(n, 1, DType::kInt64));
    pads.assign(t.i64(), t.i64() + t.numel());
    AT_ASSIGN(v, scalar_input(n, 2, 0.0f));
    value = v;
    if (has_input(n, 3)) return fail(n, "the axes input (opset 18) is not supported");
  }
  return emit(n, "nn.pad", {x}, {{"pad_width", pads}, {"pad_value", static_cast<double>(value)}});
}

Expected<ValueId> Importer::convert_constant(const onnx::NodeProto &n) {
  if (n.attribute_size() != 1) return fail(n, "expected exactly one attribute");
  const auto &a = n.attribute(0);
  Tensor t;
  if (a.name() == "value") {
    auto v = tensor_from_proto(a.t());
    if (!v) return fail(n, v.error().message);
    t = v.take();
  } else if (a.name() == "value_float") {
    t = scalar_f32(a.f());
  } else if (a.name() == "value_floats") {
    t = tensor_f32({a.floats_size()}, std::vector<float>(a.floats().begin(), a.floats().end()));
  } else if (a.name() == "value_int") {
    t = tensor_i64({}, {a.i()});
  } else if (a.name() == "value_ints") {
    t = tensor_i64({a.ints_size()}, Ints(a.ints().begin(), a.ints().end()));
  } else {
    return fail(n, "attribute '" + a.name() + "' is not supported");
  }
  return b_.add_constant(n.output(0), t);
}

Expected<ValueId> Importer::emit_slice(const onnx::NodeProto &n, ValueId x, const Ints &starts, const Ints &ends, const Ints &axes,
                                       const Ints &steps) {
  const Shape &s = type_of(x).shape;
  int r = static_cast<int>(s.size());
  Ints begin(r, 0), end(s.begin(), s.end()), strides(r, 1);
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    auto ax = normalize_axis(axes.empty() ? static_cast<int64_t>(i) : axes[i], r);
    if (!ax) return fail(n, ax.error().message);
    if (seen[*ax]) return fail(n, "axis " + std::to_string(*ax) + " is sliced twice");
    seen[*ax] = true;
    int64_t dim = s[*ax], st = steps.empty() ? 1 : steps[i];
    if (st == 0) return fail(n, "step 0 on axis " + std::to_string(*ax));
    // ONNX's rule: negative bounds count from the end, then clamp to the range the step allows.
    auto from_end = [dim](int64_t v) { return v < 0 ? (v < std::numeric_limits<int64_t>::min() + dim ? -1 : v + dim) : v; };
    int64_t b = from_end(starts[i]), e = from_end(ends[i]);
    if (st > 0) b = std::clamp<int64_t>(b, 0, dim), e = std::clamp<int64_t>(e, 0, dim);
    else b = std::clamp<int64_t>(b, 0, dim - 1), e = std::clamp<int64_t>(e, -1, dim - 1);
    begin[*ax] = b, end[*ax] = e, strides[*ax] = st;
  }
  return emit(n, "strided_slice", {x}, {{"begin", begin}, {"end", end}, {"strides", strides}});
}

Expected<ValueId> Importer::convert_slice(const onnx::NodeProto &n) {
  AT_ASSIGN(x, input(n, 0));
  // Attributes before opset 10 (no steps then), constant inputs since.
  AT_ASSIGN(starts, ints_attr_or_input(n, "starts", 1, 10));
  AT_ASSIGN(ends, ints_attr_or_input(n, "ends", 2, 10));
  AT_ASSIGN(axes, ints_attr_or_input(n, "axes", 3, 10));
  AT_ASSIGN(steps, ints_attr_or_input(n, "steps", 4, 10));
  if (starts.size() != ends.size() || (!axes.empty() && axes.size() != starts.size()) || (!steps.empty() && steps.size() != starts.size()))
    return fail(n, "starts, ends, axes and steps differ in length");
  return emit_slice(n, x, starts, ends, axes, steps);
}

Expected<std::vector<ValueId>> Importer::convert_split(const onnx::NodeProto &n) {
  AT_ASSIGN(x, input(n, 0));
  const Shape &s = type_of(x).shape;
  AT_ASSIGN(axis_attr, attr_int(n, "axis", 0));
  auto axis = normalize_axis(axis_attr, static_cast<int>(s.size()));
  if (!axis) return fail(n, axis.error().message);
  AT_ASSIGN(sizes, ints_attr_or_input(n, "split", 1));
  int parts = n.output_size();
  int64_t dim = s[*axis];
  if (sizes.empty()) {
    if (dim % parts != 0) return fail(n, "axis " + std::to_string(*axis) + " of extent " + std::to_string(dim) + " does not split into " + std::to_string(parts) + " equal parts");
    sizes.assign(parts, dim / parts);
  }
  if (static_cast<int>(sizes.size()) != parts) return fail(n, std::to_string(sizes.size()) + " split sizes for " + std::to_string(parts) + " outputs");
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0) return fail(n, "negative split size");
    total += v;
  }
  if (total != dim) return fail(n, "split sizes add up to " + std::to_string(total) + ", not the axis's extent " + std::to_string(dim));
  std::vector<ValueId> out;
  int64_t at = 0;
  for (int64_t v : sizes) {
    AT_ASSIGN(part, emit_slice(n, x, {at}, {at + v}, {*axis}, {}));
    out.push_back(part);
    at += v;
  }
  return out;
}

Expected<ValueId> Importer::convert_pow(const onnx::NodeProto &n) {
  AT_ASSIGN(x, input(n, 0));
  AT_ASSIGN(y, input(n, 1));
  // A constant scalar exponent (LayerNorm's square) becomes the arithmetic it stands for.
  if (const Tensor *e = constant(y); e && e->numel() == 1 && type_of(x).dtype == DType::kFloat32) {
    double v = e->dtype() == DType::kFloat32 ? e->f32()[0] : static_cast<double>(e->i64()[0]);
    bool keeps_shape = type_of(y).rank() <= type_of(x).rank();
    if (keeps_shape && v == 1) return emit(n, "identity", {x});
    if (keeps_shape && v == 2) return emit(n, "multiply", {x, x});
    if (keeps_shape && v == 0.5) return emit(n, "sqrt", {x});
    if (keeps_shape && v == -1) return emit(n, "reciprocal", {x});
  }
  if (type_of(y).dtype != DType::kFloat32) return fail(n, "an integer exponent is supported only as a constant scalar");
  return emit(n, "power", {x, y});
}

Expected<ValueId> Importer::convert_layer_norm(const onnx::NodeProto &n) {
  // (x - mean) / sqrt(var + epsilon) * scale + bias over the axes from `axis` on, as the ops that
  // PyTorch's opset-13 export writes for it; FuseOps groups them like that export's.
  AT_ASSIGN(x, input(n, 0));
  AT_ASSIGN(scale, input(n, 1));
  int r = type_of(x).rank();
  AT_ASSIGN(axis_attr, attr_int(n, "axis", -1));
  auto axis = normalize_axis(axis_attr, r);
  if (!axis) return fail(n, axis.error().message);
  AT_ASSIGN(eps, attr_float(n, "epsilon", 1e-5f));
  AT_ASSIGN(stash, attr_int(n, "stash_type", 1));
  if (stash != 1) return fail(n, "stash_type " + std::to_string(stash) + " is not supported (float32 statistics are)");
  Ints axes;
  for (int a = *axis; a < r; ++a) axes.push_back(a);
  Attrs mean_attrs{{"axis", axes}, {"keepdims", int64_t{1}}};
  AT_ASSIGN(mu, emit(n, "mean", {x}, mean_attrs));
  AT_ASSIGN(d, emit(n, "subtract", {x, mu}));
  AT_ASSIGN(sq, emit(n, "multiply", {d, d}));
  AT_ASSIGN(var, emit(n, "mean", {sq}, mean_attrs));
  ValueId e = b_.add_constant(n.output(0) + ".epsilon", scalar_f32(eps));
  AT_ASSIGN(ve, emit(n, "add", {var, e}));
  AT_ASSIGN(sd, emit(n, "sqrt", {ve}));
  AT_ASSIGN(norm, emit(n, "divide", {d, sd}));
  // The optional outputs Mean and InvStdDev.
  if (n.output_size() > 1 && !n.output(1).empty()) values_[n.output(1)] = mu, producers_[n.output(1)] = node_index_;
  if (n.output_size() > 2 && !n.output(2).empty()) {
    AT_ASSIGN(inv, emit(n, "reciprocal", {sd}));
    values_[n.output(2)] = inv, producers_[n.output(2)] = node_index_;
  }
  AT_ASSIGN(y, emit(n, "multiply", {norm, scale}));
  if (!has_input(n, 2)) return y;
  AT_ASSIGN(bias, input(n, 2));
  return emit(n, "add", {y, bias});
}

Expected<ValueId> Importer::emit_matmul(const onnx::NodeProto &n, ValueId a, ValueId b) {
  // A constant matrix on the right is a dense layer's weight (transposed to [N, K], folded by
  // fold-constants), as TVM's importer makes it: a packed weight and the dense register tile.
  if (constant(b) && type_of(b).rank() == 2 && type_of(a).rank() >= 2) {
    AT_ASSIGN(t, emit(n, "transpose", {b}, {{"axes", Ints{1, 0}}}));
    return emit(n, "nn.dense", {a, t});
  }
  return emit(n, "nn.matmul", {a, b});
}

Expected<ValueId> Importer::convert_einsum(const onnx::NodeProto &n) {
  // Einsum without diagonals, as the ops autotune has: each operand's indices that nothing later
  // needs are summed away, then operands are contracted left to right, each pair as one batched
  // matmul (the shared indices the output keeps are the batch, the shared ones it drops the
  // reduction) between transposes and reshapes, and the result is transposed to the output's
  // order. An ellipsis takes letters of its own (the same number in every operand).
  AT_ASSIGN(raw, attr_string(n, "equation", ""));
  std::string eq;
  for (char c : raw)
    if (c != ' ') eq += c;
  if (eq.empty()) return fail(n, "missing attribute 'equation'");
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow), rhs = arrow == std::string::npos ? "" : eq.substr(arrow + 2);
  std::vector<std::string> terms;
  for (size_t at = 0;;) {
    size_t comma = lhs.find(',', at);
    terms.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (static_cast<int>(terms.size()) != n.input_size())
    return fail(n, "the equation '" + raw + "' has " + std::to_string(terms.size()) + " operands, the node " + std::to_string(n.input_size()) + " inputs");
  std::vector<ValueId> xs;
  std::set<char> letters;
  for (int i = 0; i < n.input_size(); ++i) {
    AT_ASSIGN(x, input(n, i));
    xs.push_back(x);
  }
  std::vector<std::string> all_terms = terms;
  all_terms.push_back(rhs);
  for (std::string rest : all_terms) {
    if (size_t e = rest.find("..."); e != std::string::npos) rest.erase(e, 3);
    for (char c : rest) {
      if (!std::isalpha(static_cast<unsigned char>(c))) return fail(n, "the equation '" + raw + "' has a character '" + std::string(1, c) + "' that is not a letter");
      letters.insert(c);
    }
  }
  // The ellipsis's dimensions: letters the equation does not use.
  int ellipsis = -1;
  for (size_t i = 0; i < terms.size(); ++i) {
    size_t e = terms[i].find("...");
    int named = static_cast<int>(terms[i].size()) - (e == std::string::npos ? 0 : 3), r = type_of(xs[i]).rank();
    if (e == std::string::npos && named != r)
      return fail(n, "operand " + std::to_string(i) + " '" + terms[i] + "' names " + std::to_string(named) + " dimensions of an input of rank " + std::to_string(r));
    if (e == std::string::npos) continue;
    if (named > r || (ellipsis >= 0 && ellipsis != r - named))
      return fail(n, "the ellipsis stands for different numbers of dimensions (broadcasting an ellipsis is not supported)");
    ellipsis = r - named;
  }
  std::string spare;
  for (char c = 'A'; static_cast<int>(spare.size()) < std::max(ellipsis, 0) && c <= 'z'; ++c)
    if (std::isalpha(static_cast<unsigned char>(c)) && !letters.count(c)) spare += c;
  auto expand = [&](std::string t) {
    if (size_t e = t.find("..."); e != std::string::npos) t.replace(e, 3, spare);
    return t;
  };
  for (std::string &t : terms) t = expand(t);
  std::map<char, int64_t> size;
  std::map<char, int> count;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) {
      char c = terms[i][d];
      if (terms[i].find(c) != d) return fail(n, "index '" + std::string(1, c) + "' repeats in operand " + std::to_string(i) + " (a diagonal), which is not supported");
      int64_t ext = type_of(xs[i]).shape[d];
      if (size.count(c) && size[c] != ext)
        return fail(n, "index '" + std::string(1, c) + "' has size " + std::to_string(size[c]) + " in one operand and " + std::to_string(ext) + " in another");
      size[c] = ext, ++count[c];
    }
  std::string out;
  if (arrow != std::string::npos) {
    out = expand(rhs);
    for (size_t d = 0; d < out.size(); ++d)
      if (out.find(out[d]) != d || !size.count(out[d])) return fail(n, "output index '" + std::string(1, out[d]) + "' repeats or is in no operand");
  } else {
    // Implicit output: the ellipsis, then the letters that occur once, in alphabetical order.
    out = spare;
    for (const auto &[c, k] : count)
      if (k == 1 && spare.find(c) == std::string::npos) out += c;
  }
  struct Operand {
    ValueId v;
    std::string idx;
  };
  // The operand with the indices outside `keep` summed away.
  auto reduce = [&](Operand x, const std::string &keep) -> Expected<Operand> {
    Ints axes;
    std::string left;
    for (size_t d = 0; d < x.idx.size(); ++d) {
      if (keep.find(x.idx[d]) == std::string::npos) axes.push_back(static_cast<int64_t>(d));
      else left += x.idx[d];
    }
    if (axes.empty()) return x;
    AT_ASSIGN(v, emit(n, "sum", {x.v}, {{"axis", axes}, {"keepdims", int64_t{0}}}));
    return Operand{v, left};
  };
  auto permute = [&](const Operand &x, const std::string &to) -> Expected<ValueId> {
    if (x.idx == to) return x.v;
    Ints axes;
    for (char c : to) axes.push_back(static_cast<int64_t>(x.idx.find(c)));
    return emit(n, "transpose", {x.v}, {{"axes", axes}});
  };
  auto extent = [&](const std::string &idx) {
    int64_t p = 1;
    for (char c : idx) p *= size[c];
    return p;
  };
  auto later = [&](size_t k) {  // the indices the output and the operands after k need
    std::string need = out;
    for (size_t j = k + 1; j < terms.size(); ++j) need += terms[j];
    return need;
  };
  AT_ASSIGN(cur, reduce({xs[0], terms[0]}, later(0)));
  for (size_t k = 1; k < terms.size(); ++k) {
    std::string keep = later(k);
    AT_ASSIGN(b, reduce({xs[k], terms[k]}, keep + cur.idx));
    AT_ASSIGN(a, reduce(cur, keep + b.idx));
    std::string batch, red, m, cols;
    for (char c : a.idx) {
      std::string &to = b.idx.find(c) == std::string::npos ? m : keep.find(c) == std::string::npos ? red : batch;
      to += c;
    }
    for (char c : b.idx)
      if (a.idx.find(c) == std::string::npos) cols += c;
    auto sizes = [&](const std::string &idx) {
      Ints out;
      for (char c : idx) out.push_back(size[c]);
      return out;
    };
    auto reshaped = [&](ValueId v, const Ints &shape) -> Expected<ValueId> {
      if (type_of(v).shape == shape) return v;
      return emit_reshape(n, v, shape);
    };
    ValueId p;
    if (batch.empty() && constant(b.v)) {
      // A constant operand is a dense layer's weight, [N, K] (its transposes fold as constants);
      // the other keeps its own dimensions before K, which dense takes as rows.
      AT_ASSIGN(tw, permute(b, cols + red));
      AT_ASSIGN(w, reshaped(tw, {extent(cols), extent(red)}));
      AT_ASSIGN(ta, permute(a, m + red));
      Ints rows = m.empty() ? Ints{1} : sizes(m);  // dense takes at least one row dimension
      rows.push_back(extent(red));
      AT_ASSIGN(ra, reshaped(ta, rows));
      AT_ASSIGN(d, emit(n, "nn.dense", {ra, w}));
      p = d;
    } else {
      AT_ASSIGN(ta, permute(a, batch + m + red));
      AT_ASSIGN(tb, permute(b, batch + red + cols));
      Ints sa{extent(m), extent(red)}, sb{extent(red), extent(cols)};
      if (!batch.empty()) sa.insert(sa.begin(), extent(batch)), sb.insert(sb.begin(), extent(batch));
      AT_ASSIGN(ra, reshaped(ta, sa));
      AT_ASSIGN(rb, reshaped(tb, sb));
      AT_ASSIGN(mm, emit_matmul(n, ra, rb));
      p = mm;
    }
    AT_ASSIGN(r, reshaped(p, sizes(batch + m + cols)));
    cur = Operand{r, batch + m + cols};
  }
  AT_ASSIGN(last, reduce(cur, out));
  return permute(last, out);
}

Expected<ValueId> Importer::convert_shape_math(const onnx::NodeProto &n) {
  // Ops that exporters use on shapes and masks. Comparisons, logic, Where and Cast are IR ops
  // (folded at import on constants, run or compiled on computed values); ConstantOfShape and
  // Range are evaluated here on constant inputs only. Booleans are int64 0 and 1.
  const std::string &op = n.op_type();
  if (auto mask = onnx_mask_ops().find(op); mask != onnx_mask_ops().end()) {
    // Comparisons, logic, Where and Cast: IR ops, folded by emit where their inputs are constants.
    std::vector<ValueId> ins;
    for (int i = 0; i < n.input_size(); ++i) {
      AT_ASSIGN(v, input(n, i));
      ins.push_back(v);
    }
    if (op != "Cast") return emit(n, mask->second, ins);
    AT_ASSIGN(to, attr_int(n, "to", 0));
    std::string dtype = to == onnx::TensorProto::FLOAT ? "float32"
                        : to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32 ? "int64"
                        : to == onnx::TensorProto::BOOL ? "bool" : "";
    if (dtype.empty()) return fail(n, "cast to " + onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(to)) + " is not supported");
    if (!ins.empty() && dtype == dtype_name(type_of(ins[0]).dtype)) return emit(n, "identity", ins);
    return emit(n, "cast", ins, {{"dtype", dtype}});
  }
  std::vector<Tensor> in;
  for (int i = 0; i < n.input_size(); ++i) {
    if (!has_input(n, i)) continue;
    AT_ASSIGN(v, input(n, i));
    const Tensor *t = constant(v);
    if (!t) return fail(n, "supported only where its inputs are constants (shape computations); input '" + n.input(i) + "' is computed by the graph");
    in.push_back(*t);
  }
  auto as_double = [](const Tensor &t, int64_t i) { return t.dtype() == DType::kFloat32 ? static_cast<double>(t.f32()[i]) : static_cast<double>(t.i64()[i]); };
  auto make = [&](DType dt, const Shape &shape, const std::function<double(int64_t)> &f) -> Expected<ValueId> {
    auto type = make_type(dt, shape);
    if (!type) return fail(n, type.error().message);
    AT_TRY(charge_folding(n, *type));
    Tensor out(*type);
    for (int64_t i = 0; i < type->numel(); ++i) {
      if (dt == DType::kFloat32) out.f32()[i] = static_cast<float>(f(i));
      else out.i64()[i] = static_cast<int64_t>(f(i));
    }
    return b_.add_constant(n.output(0), std::move(out));
  };
  if (op == "ConstantOfShape") {
    if (in.size() != 1 || in[0].dtype() != DType::kInt64) return fail(n, "the shape must be an int64 constant");
    Shape shape(in[0].i64(), in[0].i64() + in[0].numel());
    Tensor value = scalar_f32(0);
    if (const auto *a = attr(n, "value")) {
      auto v = tensor_from_proto(a->t());
      if (!v) return fail(n, v.error().message);
      if (v->numel() != 1) return fail(n, "the value must hold one element");
      value = v.take();
    }
    double v = as_double(value, 0);
    return make(value.dtype(), shape, [v](int64_t) { return v; });
  }
  if (op == "Range") {
    if (in.size() != 3) return fail(n, "expected start, limit and delta");
    double start = as_double(in[0], 0), limit = as_double(in[1], 0), delta = as_double(in[2], 0);
    if (delta == 0) return fail(n, "delta is 0");
    int64_t count = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
    return make(in[0].dtype(), {count}, [=](int64_t i) { return start + static_cast<double>(i) * delta; });
  }
  return fail(n, "not a shape computation");  // unreachable: convert() sends only the ops above here
}

}  // namespace

namespace {
Expected<Graph> import_model(const std::string &bytes, const std::string &label) {
  onnx::ModelProto model;
  if (bytes.empty()) return make_error(label + ": empty file");
  if (!model.ParseFromString(bytes)) return make_error(label + ": not a valid ONNX protobuf (parse failed)");
  if (!model.has_graph()) return make_error(label + ": not an ONNX model (no graph)");
  try {
    return Importer(label, bytes.size()).run(model);
  } catch (const std::exception &e) {
    return make_error(label + ": " + first_line(e.what()));
  }
}
}  // namespace

Expected<Graph> import_onnx_bytes(const std::string &bytes, const std::string &label) {
  auto g = import_model(bytes, label);
  // Messages quote names from the file, which a damaged file fills with any bytes: one line, always.
  if (!g) return make_error(printable(g.error().message));
  return g;
}

Expected<Graph> import_onnx_file(const std::string &path) {
  AT_ASSIGN(bytes, read_file(path));
  return import_onnx_bytes(bytes, path);
}

Expected<Tensor> load_tensor_pb(const std::string &path) {
  AT_ASSIGN(bytes, read_file(path));
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) return make_error(path + ": not a TensorProto");
  auto r = tensor_from_proto(t);
  if (!r) return make_error(path + ": " + r.error().message);
  return r;
}

}  // namespace autotune

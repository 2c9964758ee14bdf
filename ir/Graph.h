#pragma once
// The graph IR: typed SSA over tensors. Values are graph inputs, constants (weights) and node
// results; each node applies one registered op to earlier values and yields one tensor. Nodes
// are stored in topological order, so a loop over `nodes` is an execution order.
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/Attrs.h"
#include "ir/Ops.h"
#include "ir/Tensor.h"

namespace autotune {

struct ValueId {
  enum class Kind : uint8_t { kInput, kConstant, kNode };
  Kind kind = Kind::kNode;
  int32_t index = -1;

  static ValueId input(int i) { return {Kind::kInput, i}; }
  static ValueId constant(int i) { return {Kind::kConstant, i}; }
  static ValueId node(int i) { return {Kind::kNode, i}; }
  bool operator==(const ValueId &o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const ValueId &o) const { return !(*this == o); }
};

struct GraphInput {
  std::string name;
  TensorType type;
};

struct GraphConstant {
  std::string name;
  Tensor value;
};

struct Graph;

/** The op name of a primitive function node: a fused group whose body is a Graph of its own. */
inline constexpr const char *kFunctionOp = "fn";

struct Node {
  std::string op;
  std::vector<ValueId> inputs;
  Attrs attrs;         // normalized against the op's schema
  TensorType type;     // inferred output type
  std::string origin;  // where it came from (the ONNX node name), for messages; not printed
  /**
   * Set for op == kFunctionOp: the fused group, a graph with one input per argument (%p0, %p1,
   * ...), no constants of its own, and one output. Shared and immutable.
   */
  std::shared_ptr<const Graph> body;

  bool is_function() const { return body != nullptr; }
};

struct Graph {
  std::vector<GraphInput> inputs;
  std::vector<GraphConstant> constants;
  std::vector<Node> nodes;
  std::vector<ValueId> outputs;

  const TensorType &type_of(ValueId v) const;
  /** The value's name in printed IR without the %: inputs and constants by name, nodes by index. */
  std::string value_name(ValueId v) const;
};

/**
 * Checks the graph's invariants: references point backwards, every node's type re-infers to
 * itself, attributes are normalized, names are unique; function bodies are checked the same way.
 */
Status verify_graph(const Graph &g);

/**
 * Builds a Graph through checked factories: names are sanitized and made unique, and every node
 * is type-checked by its op's inference as it is added.
 */
class GraphBuilder {
 public:
  ValueId add_input(const std::string &name, TensorType type);
  ValueId add_constant(const std::string &name, Tensor value);
  /** A type-checked node that is not yet part of the graph; an error names the op and the reason. */
  Expected<Node> make_node(const std::string &op, std::vector<ValueId> inputs, Attrs attrs,
                           std::string origin = "") const;
  /** Appends a node made by make_node. */
  ValueId insert(Node node);
  /** A primitive function node applying `body` to `args`; checks arity and argument types. */
  Expected<ValueId> add_function(std::shared_ptr<const Graph> body, std::vector<ValueId> args, std::string origin = "");
  /** make_node + insert. */
  Expected<ValueId> add_node(const std::string &op, std::vector<ValueId> inputs, Attrs attrs,
                             std::string origin = "");
  void add_output(ValueId v) { g_.outputs.push_back(v); }
  const Graph &graph() const { return g_; }
  Graph finish() { return std::move(g_); }

  /** A printable name derived from `base` ([A-Za-z0-9_.], not all digits) not used yet. */
  std::string unique_name(const std::string &base);

 private:
  Graph g_;
  std::unordered_set<std::string> names_;
};

}  // namespace autotune

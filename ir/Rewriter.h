#pragma once
// Rebuilds a graph node by node, the way every pass here works: the new graph starts with the
// old one's inputs; constants are carried over on first use (so constants no node uses any more
// disappear in every pass); the pass decides for each old node whether to copy it, replace its
// value by another value, or add new nodes. Everything added goes through the GraphBuilder, so
// the result is type-checked as it is built.
#include <optional>

#include "ir/Graph.h"

namespace autotune {

class Rewriter {
 public:
  explicit Rewriter(const Graph &src);

  const Graph &src() const { return src_; }
  /** The new value standing for an old value (an old constant is carried over on first use). */
  ValueId map(ValueId old);
  std::vector<ValueId> mapped_inputs(const Node &n);
  /** The old node `i` is now computed by `v`. */
  void replace(int i, ValueId v) { map_[i] = v; }
  /** Copies old node `i` with its inputs mapped; returns its new value. */
  Expected<ValueId> copy(int i);
  Expected<ValueId> add(const std::string &op, std::vector<ValueId> inputs, Attrs attrs, std::string origin = "");
  ValueId add_constant(const std::string &name, Tensor value) { return b_.add_constant(name, std::move(value)); }
  /** The constant value behind a new-graph value (a handle sharing its data), or nullopt. */
  std::optional<Tensor> constant(ValueId v) const;
  const Graph &graph() const { return b_.graph(); }
  GraphBuilder &builder() { return b_; }
  /** The new graph, its outputs mapped from the old ones. */
  Graph finish();

 private:
  const Graph &src_;
  GraphBuilder b_;
  std::vector<ValueId> map_;        // old node index -> new value
  std::vector<ValueId> constants_;  // old constant index -> new value, once used
};

/** Old node i's consumers: for each node, the indices of nodes that use it, and whether it is a graph output. */
struct Uses {
  std::vector<std::vector<int>> consumers;
  std::vector<bool> is_output;
};
Uses find_uses(const Graph &g);

}  // namespace autotune

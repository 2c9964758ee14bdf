#include <algorithm>
#include <map>
#include <optional>

#include "ir/Ops.h"
#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {
namespace {

/** A matched layer norm: its input, scale and bias (invalid ids: absent), axis and epsilon. */
struct LayerNorm {
  ValueId x, scale, bias;
  int64_t axis = -1;
  double epsilon = 0;
};

bool is_constant(ValueId v) { return v.kind == ValueId::Kind::kConstant; }

/** The single float of a one-element constant. */
std::optional<double> scalar_of(const Graph &g, ValueId v) {
  if (!is_constant(v)) return std::nullopt;
  const Tensor &t = g.constants[v.index].value;
  if (t.numel() != 1 || t.type().dtype != DType::kFloat32) return std::nullopt;
  return t.f32()[0];
}

/** The trailing axes a mean with keepdims reduces (first of them), or nullopt when they are not the trailing ones. */
std::optional<int64_t> trailing_mean_axis(const Graph &g, const Node &n) {
  if (n.op != "mean" || !n.attrs.i("keepdims")) return std::nullopt;
  int r = g.type_of(n.inputs[0]).rank();
  std::vector<int64_t> axes;
  for (int64_t a : n.attrs.ints("axis")) {
    auto ax = normalize_axis(a, r);
    if (!ax) return std::nullopt;
    axes.push_back(*ax);
  }
  if (axes.empty()) return std::nullopt;
  std::sort(axes.begin(), axes.end());
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != r - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(k)) return std::nullopt;
  return axes[0];
}

/**
 * From a mean `m` over trailing axes, the chain x - m, its square's mean, + epsilon, sqrt, the
 * division, then optionally * scale and + bias (constants, either operand order): the index of
 * the chain's last node and what it computes, when every node but the last is used only inside
 * the chain and is no graph output.
 */
std::optional<std::pair<int, LayerNorm>> match(const Graph &g, const Uses &uses, int m) {
  const Node &mean = g.nodes[m];
  auto axis = trailing_mean_axis(g, mean);
  if (!axis) return std::nullopt;
  ValueId x = mean.inputs[0];
  // The sole consumer of node i (used only by it, not a graph output), or -1.
  auto sole = [&](int i) { return uses.is_output[i] || uses.consumers[i].size() != 1 ? -1 : uses.consumers[i][0]; };
  auto node = [&](int i) -> const Node & { return g.nodes[i]; };
  auto is = [&](int i, ValueId v) { return v == ValueId::node(i); };
  int d = sole(m);
  if (d < 0 || node(d).op != "subtract" || node(d).inputs[0] != x || !is(m, node(d).inputs[1])) return std::nullopt;
  // d's consumers: its square and the division, in either order.
  if (uses.is_output[d] || uses.consumers[d].size() != 2) return std::nullopt;
  int sq = -1, div = -1;
  for (int c : uses.consumers[d]) {
    const Node &n = node(c);
    if (n.op == "multiply" && is(d, n.inputs[0]) && is(d, n.inputs[1])) sq = c;
    if (n.op == "divide" && is(d, n.inputs[0])) div = c;
  }
  if (sq < 0 || div < 0) return std::nullopt;
  int var = sole(sq);
  if (var < 0 || trailing_mean_axis(g, node(var)) != axis || !is(sq, node(var).inputs[0])) return std::nullopt;
  int ve = sole(var);
  if (ve < 0 || node(ve).op != "add") return std::nullopt;
  std::optional<double> eps = scalar_of(g, node(ve).inputs[is(var, node(ve).inputs[0]) ? 1 : 0]);
  if (!eps || *eps < 0) return std::nullopt;
  int sd = sole(ve);
  if (sd < 0 || node(sd).op != "sqrt" || sole(sd) != div || !is(sd, node(div).inputs[1])) return std::nullopt;
  LayerNorm ln{x, {}, {}, *axis, *eps};
  int end = div;
  // The constant operand of a sole consumer `op` of `end`, which then becomes the end.
  auto extend = [&](const char *op, ValueId &param) {
    int c = sole(end);
    if (c < 0 || node(c).op != op) return;
    const Node &n = node(c);
    ValueId other = is(end, n.inputs[0]) ? n.inputs[1] : n.inputs[0];
    if (!is_constant(other) || n.type.shape != node(end).type.shape) return;  // it broadcasts only over the row
    param = other, end = c;
  };
  extend("multiply", ln.scale);
  extend("add", ln.bias);
  return std::make_pair(end, ln);
}

}  // namespace

Expected<Graph> fuse_layer_norm(const Graph &g) {
  Uses uses = find_uses(g);
  std::map<int, LayerNorm> at_end;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (auto m = match(g, uses, static_cast<int>(i))) at_end[m->first] = m->second;
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    int idx = static_cast<int>(i);
    auto it = at_end.find(idx);
    if (it == at_end.end()) {
      AT_TRY(rw.copy(idx));
      continue;
    }
    const LayerNorm &ln = it->second;
    const Node &n = g.nodes[i];
    // An absent scale is ones, an absent bias zeros: one element each, broadcast over the row.
    auto param = [&](ValueId v, float fill, const char *what) {
      if (v.kind == ValueId::Kind::kConstant) return rw.map(v);
      Tensor t(TensorType{DType::kFloat32, {1}});
      t.f32()[0] = fill;
      return rw.add_constant((n.origin.empty() ? std::string("layer_norm") : n.origin) + "." + what, std::move(t));
    };
    ValueId scale = param(ln.scale, 1.0f, "scale"), bias = param(ln.bias, 0.0f, "bias");
    auto v = rw.add("nn.layer_norm", {rw.map(ln.x), scale, bias}, {{"axis", ln.axis}, {"epsilon", ln.epsilon}}, n.origin);
    // A scale or bias the layer norm does not take (it varies along a row dimension): left as it was.
    if (!v) {
      AT_TRY(rw.copy(idx));
      continue;
    }
    rw.replace(idx, *v);
  }
  return rw.finish();
}

}  // namespace autotune

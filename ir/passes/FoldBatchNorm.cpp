#include <cmath>

#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {
namespace {

/** y = x * scale + shift per channel, from the batch norm's constants (computed in double). */
struct Affine {
  std::vector<double> scale, shift;
};

Affine affine_of(const Node &bn, Rewriter &rw) {
  Tensor gamma = *rw.constant(rw.map(bn.inputs[1])), beta = *rw.constant(rw.map(bn.inputs[2])),
         mean = *rw.constant(rw.map(bn.inputs[3])), var = *rw.constant(rw.map(bn.inputs[4]));
  double eps = bn.attrs.f("epsilon");
  Affine a;
  for (int64_t c = 0; c < gamma.numel(); ++c) {
    double s = gamma.f32()[c] / std::sqrt(static_cast<double>(var.f32()[c]) + eps);
    a.scale.push_back(s);
    a.shift.push_back(beta.f32()[c] - mean.f32()[c] * s);
  }
  return a;
}

/** A weight whose leading dim indexes output channels, each row scaled by scale[row]. */
Tensor scale_rows(const Tensor &w, const std::vector<double> &scale) {
  Tensor out(w.type());
  int64_t rows = w.shape()[0], per = w.numel() / std::max<int64_t>(rows, 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < per; ++k) out.f32()[r * per + k] = static_cast<float>(w.f32()[r * per + k] * scale[r]);
  return out;
}

/** Per-channel values as a float32 tensor of `shape` (C elements). */
Tensor channel_tensor(const std::vector<double> &values, const Shape &shape) {
  Tensor out(TensorType{DType::kFloat32, shape});
  for (size_t c = 0; c < values.size(); ++c) out.f32()[c] = static_cast<float>(values[c]);
  return out;
}

/** bias * scale + shift per channel (an absent bias is zeros). */
Tensor fold_bias(const std::optional<Tensor> &bias, const Affine &a, const Shape &shape) {
  std::vector<double> v(a.scale.size());
  for (size_t c = 0; c < v.size(); ++c) v[c] = (bias ? bias->f32()[c] : 0.0) * a.scale[c] + a.shift[c];
  return channel_tensor(v, shape);
}

/** The producer of `v` if it is a node with `op`, this batch norm as its only consumer, and not a graph output. */
const Node *sole_producer(const Graph &g, const Uses &uses, ValueId v, const char *op) {
  if (v.kind != ValueId::Kind::kNode) return nullptr;
  const Node &p = g.nodes[v.index];
  if (p.op != op || uses.is_output[v.index] || uses.consumers[v.index].size() != 1) return nullptr;
  return &p;
}

}  // namespace

Expected<Graph> fold_batch_norm(const Graph &g) {
  Uses uses = find_uses(g);
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    int idx = static_cast<int>(i);
    bool params_constant = n.op == "nn.batch_norm";
    for (size_t k = 1; params_constant && k < 5; ++k) params_constant &= rw.map(n.inputs[k]).kind == ValueId::Kind::kConstant;
    if (!params_constant) {
      AT_TRY(rw.copy(idx));
      continue;
    }
    Affine a = affine_of(n, rw);
    std::string base = n.origin.empty() ? "bn" : n.origin;
    ValueId x = n.inputs[0];

    // conv2d(x, w[, b]) -> conv2d(x, w * s, b * s + t)
    if (const Node *conv = sole_producer(g, uses, x, "nn.conv2d")) {
      std::optional<Tensor> w = rw.constant(rw.map(conv->inputs[1]));
      std::optional<Tensor> b = conv->inputs.size() == 3 ? rw.constant(rw.map(conv->inputs[2])) : std::nullopt;
      if (w && (conv->inputs.size() == 2 || b)) {
        std::string wname = rw.graph().constants[rw.map(conv->inputs[1]).index].name;
        ValueId w2 = rw.add_constant(wname + ".bn", scale_rows(*w, a.scale));
        ValueId b2 = rw.add_constant(wname + ".bn_bias", fold_bias(b, a, {w->shape()[0]}));
        AT_ASSIGN(v, rw.add("nn.conv2d", {rw.map(conv->inputs[0]), w2, b2}, conv->attrs, conv->origin));
        rw.replace(idx, v);
        continue;  // the original conv is left to dead-code elimination
      }
    }
    // dense(x, w) [+ b] -> dense(x, w * s) + (b * s + t)
    const Node *add = sole_producer(g, uses, x, "add");
    const Node *dense = sole_producer(g, uses, add ? add->inputs[0] : x, "nn.dense");
    std::optional<Tensor> bias = add ? rw.constant(rw.map(add->inputs[1])) : std::nullopt;
    std::optional<Tensor> w = dense ? rw.constant(rw.map(dense->inputs[1])) : std::nullopt;
    if (dense && dense->type.rank() == 2 && w && (!add || (bias && bias->numel() == w->shape()[0]))) {
      std::string wname = rw.graph().constants[rw.map(dense->inputs[1]).index].name;
      ValueId w2 = rw.add_constant(wname + ".bn", scale_rows(*w, a.scale));
      ValueId b2 = rw.add_constant(wname + ".bn_bias", fold_bias(bias, a, {w->shape()[0]}));
      AT_ASSIGN(d, rw.add("nn.dense", {rw.map(dense->inputs[0]), w2}, {}, dense->origin));
      AT_ASSIGN(v, rw.add("add", {d, b2}, {}, n.origin));
      rw.replace(idx, v);
      continue;
    }
    // Anything else: x * scale + shift with per-channel constants shaped (C, 1, ..., 1).
    Shape cshape{static_cast<int64_t>(a.scale.size())};
    cshape.resize(std::max(1, n.type.rank() - 1), 1);
    ValueId s = rw.add_constant(base + ".scale", channel_tensor(a.scale, cshape));
    ValueId t = rw.add_constant(base + ".shift", channel_tensor(a.shift, cshape));
    AT_ASSIGN(m, rw.add("multiply", {rw.map(x), s}, {}, n.origin));
    AT_ASSIGN(v, rw.add("add", {m, t}, {}, n.origin));
    rw.replace(idx, v);
  }
  return rw.finish();
}

}  // namespace autotune

// nchwc-layout: activations in NCHW[b]c between convs (ONNX Runtime's NCHWc transformer, TVM's
// AlterOpLayout with explicit layout_transform ops).
//
// Every conv2d with one group and input and output channels that the block divides becomes
// nn.conv2d_nchwc where its neighbours through elementwise ops are such convs too (see choose():
// elsewhere the layout changes cost more than the blocked conv gains). The pass walks the graph
// in order and keeps, for each value, its plain (NCHW) and its blocked form, each made on first
// need: a blocked value read by an op that works in the blocked layout too (elementwise ops;
// add, subtract, multiply and divide of two same-shaped activations, or of an activation and a
// per-channel or single constant) stays
// blocked, and everything else reads the plain form, which nn.from_nchwc makes once per value.
// So a chain conv -> add -> relu -> conv is converted at its ends only, and a value read in
// both layouts is converted once. Graph outputs are plain. The reference executor computes
// the new ops and the blocked conv, so --verify checks the rewrite like any other pass.
#include "ir/Reference.h"
#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {
namespace {

class NchwcLayout {
 public:
  NchwcLayout(const Graph &g, int64_t block)
      : g_(g), rw_(g), b_(block), uses_(find_uses(g)), converted_(choose()), plain_(g.nodes.size()), blocked_(g.nodes.size()) {}

  Expected<Graph> run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) AT_TRY(rewrite(static_cast<int>(i)));
    for (ValueId out : g_.outputs)
      if (out.kind == ValueId::Kind::kNode) AT_TRY(plain(out));
    return rw_.finish();
  }

 private:
  bool blockable(const TensorType &t) const {
    return t.dtype == DType::kFloat32 && t.rank() == 4 && t.shape[1] % b_ == 0;
  }

  /** The value's plain form in the new graph, converted from its blocked form on first need. */
  Expected<ValueId> plain(ValueId old) {
    if (old.kind != ValueId::Kind::kNode) return rw_.map(old);
    ValueId &p = plain_[old.index];
    if (p.index < 0) {
      AT_ASSIGN(v, rw_.add("nn.from_nchwc", {blocked_[old.index]}, Attrs{}, g_.nodes[old.index].origin));
      p = v;
      rw_.replace(old.index, v);
    }
    return p;
  }

  /** The value's blocked form: its own if it has one, else the plain form converted (a constant converted here). */
  Expected<ValueId> blocked(ValueId old) {
    if (old.kind == ValueId::Kind::kNode && blocked_[old.index].index >= 0) return blocked_[old.index];
    if (old.kind == ValueId::Kind::kConstant) {
      // Full-sized or per-channel ([C, 1, 1] is read as [1, C, 1, 1]): blocked here, once per use.
      const GraphConstant &c = g_.constants[old.index];
      Shape s = c.value.shape();
      if (s.size() == 3) s.insert(s.begin(), 1);
      return rw_.add_constant(c.name + ".nchwc", convert_nchwc(c.value.reshaped(s), b_, false));
    }
    AT_ASSIGN(p, plain(old));
    Attrs a;
    a.set("block", b_);
    AT_ASSIGN(v, rw_.add("nn.to_nchwc", {p}, a, old.kind == ValueId::Kind::kNode ? g_.nodes[old.index].origin : ""));
    if (old.kind == ValueId::Kind::kNode) blocked_[old.index] = v;
    return v;
  }

  bool is_conv(int i) const { return !g_.nodes[i].is_function() && g_.nodes[i].op == "nn.conv2d"; }
  bool convertible(int i) const {
    const Node &n = g_.nodes[i];
    return is_conv(i) && n.attrs.i("groups") == 1 && blockable(g_.type_of(n.inputs[0])) && n.type.shape[1] % b_ == 0;
  }
  bool elementwise(int i) const {
    const Node &n = g_.nodes[i];
    if (n.is_function()) return false;
    const OpDef *op = find_op(n.op);
    return op && (op->pattern == OpPattern::kElemWise || op->pattern == OpPattern::kBroadcast);
  }
  /** The convs reached from conv i's input and output through elementwise ops. */
  std::vector<int> neighbour_convs(int i) const {
    std::vector<int> found, todo{i};
    std::vector<bool> seen(g_.nodes.size(), false);
    while (!todo.empty()) {
      int k = todo.back();
      todo.pop_back();
      if (seen[k]) continue;
      seen[k] = true;
      if (k != i && is_conv(k)) found.push_back(k);
      if (k != i && !elementwise(k)) continue;
      for (int c : uses_.consumers[k]) todo.push_back(c);
      for (ValueId v : g_.nodes[k].inputs)
        if (v.kind == ValueId::Kind::kNode && (k != i || v == g_.nodes[i].inputs[0])) todo.push_back(v.index);
    }
    return found;
  }

  /**
   * Which convs are converted. A conv that stays plain (depthwise, grouped) next to a conv would
   * need a layout change on that side, each a pass over the tensor (in MobileNetV2 every block's
   * expanded tensor twice: 2.7 -> 4.2 ms end to end), and a conv with no converted neighbour
   * would be converted in and out for itself alone; both stay plain (the second rule to a fixed
   * point). So do convs on one pixel (the squeeze-excitation's): a matrix-vector product gains
   * nothing from blocking.
   */
  std::vector<bool> choose() const {
    std::vector<bool> on(g_.nodes.size(), false);
    std::vector<std::vector<int>> next(g_.nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node &n = g_.nodes[i];
      if (!convertible(static_cast<int>(i)) || n.type.shape[2] * n.type.shape[3] == 1) continue;
      next[i] = neighbour_convs(static_cast<int>(i));
      on[i] = true;
      for (int k : next[i]) on[i] = on[i] && convertible(k);
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < on.size(); ++i) {
        if (!on[i]) continue;
        bool any = false;
        for (int k : next[i]) any = any || on[k];
        if (!any) on[i] = false, changed = true;
      }
    }
    return on;
  }

  bool has_blocked(ValueId v) const { return v.kind == ValueId::Kind::kNode && blocked_[v.index].index >= 0; }

  /** A constant operand that broadcasts per channel ([1, C, 1, 1] or [C, 1, 1] of an activation with C channels). */
  bool per_channel_constant(ValueId v, int64_t channels) const {
    if (v.kind != ValueId::Kind::kConstant) return false;
    const Shape &s = g_.type_of(v).shape;
    return s == Shape{1, channels, 1, 1} || s == Shape{channels, 1, 1};
  }

  Status rewrite(int i) {
    const Node &n = g_.nodes[i];
    if (converted_[i]) {
      AT_ASSIGN(x, blocked(n.inputs[0]));
      std::vector<ValueId> in{x};
      for (size_t k = 1; k < n.inputs.size(); ++k) in.push_back(rw_.map(n.inputs[k]));
      AT_ASSIGN(v, rw_.add("nn.conv2d_nchwc", in, n.attrs, n.origin));
      blocked_[i] = v;
      return Status::ok();
    }
    const OpDef *op = n.is_function() ? nullptr : find_op(n.op);
    if (op && op->pattern == OpPattern::kElemWise && n.inputs.size() == 1 && has_blocked(n.inputs[0]) &&
        blockable(n.type)) {
      AT_ASSIGN(v, rw_.add(n.op, {blocked_[n.inputs[0].index]}, n.attrs, n.origin));
      blocked_[i] = v;
      return Status::ok();
    }
    // An operand the blocked op reads blocked: one of the output's shape, or a per-channel constant.
    auto reads_blocked = [&](ValueId v) { return g_.type_of(v).shape == n.type.shape || per_channel_constant(v, n.type.shape[1]); };
    auto fits = [&](ValueId v) { return reads_blocked(v) || g_.type_of(v).numel() == 1; };  // a single value broadcasts in any layout
    // Both operands are checked before either is converted, so no conversion is made for nothing.
    if ((n.op == "add" || n.op == "subtract" || n.op == "multiply" || n.op == "divide") && blockable(n.type) &&
        (has_blocked(n.inputs[0]) || has_blocked(n.inputs[1])) && fits(n.inputs[0]) && fits(n.inputs[1])) {
      std::vector<ValueId> in;
      for (ValueId v : n.inputs) {
        AT_ASSIGN(bv, reads_blocked(v) ? blocked(v) : Expected<ValueId>(rw_.map(v)));
        in.push_back(bv);
      }
      AT_ASSIGN(v, rw_.add(n.op, in, n.attrs, n.origin));
      blocked_[i] = v;
      return Status::ok();
    }
    // Anything else reads plain values.
    std::vector<ValueId> in;
    for (ValueId v : n.inputs) {
      AT_ASSIGN(p, plain(v));
      in.push_back(p);
    }
    AT_ASSIGN(v, n.is_function() ? rw_.builder().add_function(n.body, in, n.origin) : rw_.add(n.op, in, n.attrs, n.origin));
    plain_[i] = v;
    rw_.replace(i, v);
    return Status::ok();
  }

  const Graph &g_;
  Rewriter rw_;
  int64_t b_;
  Uses uses_;
  std::vector<bool> converted_;           // per old node: a conv that becomes conv2d_nchwc
  std::vector<ValueId> plain_, blocked_;  // per old node: its value in each layout, once made
};

}  // namespace

Expected<Graph> nchwc_layout(const Graph &g, int64_t block) { return NchwcLayout(g, block).run(); }

}  // namespace autotune

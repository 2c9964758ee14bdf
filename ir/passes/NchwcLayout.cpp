// nchwc-layout: activations in NCHW[b]c between convs (ONNX Runtime's NCHWc transformer, TVM's
// AlterOpLayout with explicit layout_transform ops).
//
// Every conv2d with one group, or depthwise, whose input and output channels the block divides
// becomes nn.conv2d_nchwc where the layout changes around it stay few and small (see choose():
// elsewhere they cost more than the blocked conv gains). The pass walks the graph in order and
// keeps, for each value, its plain (NCHW) and its blocked form, each made on first need: a
// blocked value read by an op that works in the blocked layout too (elementwise ops; add,
// subtract, multiply and divide of two same-shaped activations, or of an activation and a
// per-channel constant, a computed per-channel value or a single value) stays blocked, a global
// average pool of it becomes the mean of its blocked planes, and everything else reads the plain
// form, which nn.from_nchwc makes once per value. So a chain conv -> add -> relu -> conv is
// converted at its ends only, and a value read in both layouts is converted once. Graph outputs
// are plain. The reference executor computes the new ops and the blocked conv, so --verify
// checks the rewrite like any other pass.
#include "ir/Reference.h"
#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {
namespace {

class NchwcLayout {
 public:
  NchwcLayout(const Graph &g, int64_t block)
      : g_(g), rw_(g), b_(block), uses_(find_uses(g)), converted_(choose()), plain_(g.nodes.size()), blocked_(g.nodes.size()), blocked_inputs_(g.inputs.size()) {}

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
    if (old.kind == ValueId::Kind::kInput && blocked_inputs_[old.index].index >= 0) return blocked_inputs_[old.index];
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
    if (old.kind == ValueId::Kind::kInput) blocked_inputs_[old.index] = v;
    return v;
  }

  bool is_conv(int i) const { return !g_.nodes[i].is_function() && g_.nodes[i].op == "nn.conv2d"; }
  bool convertible(int i) const {
    const Node &n = g_.nodes[i];
    if (!is_conv(i)) return false;
    bool depthwise = n.attrs.i("groups") == n.type.shape[1] && g_.type_of(n.inputs[1]).shape[1] == 1;
    return (n.attrs.i("groups") == 1 || depthwise) && blockable(g_.type_of(n.inputs[0])) && n.type.shape[1] % b_ == 0;
  }
  bool elementwise(int i) const {
    const Node &n = g_.nodes[i];
    if (n.is_function()) return false;
    const OpDef *op = find_op(n.op);
    return op && (op->pattern == OpPattern::kElemWise || op->pattern == OpPattern::kBroadcast);
  }
  /**
   * Whether elementwise node k works on blocked operands as rewrite() keeps it blocked: a unary op,
   * or add, subtract, multiply and divide whose operands have the output's shape, are per-channel
   * constants or single values.
   */
  bool reads_blocked_operands(int k) const {
    const Node &n = g_.nodes[k];
    if (!blockable(n.type)) return false;
    if (n.inputs.size() == 1) return find_op(n.op)->pattern == OpPattern::kElemWise;
    if (n.op != "add" && n.op != "subtract" && n.op != "multiply" && n.op != "divide") return false;
    for (ValueId v : n.inputs)
      if (!operand_fits(v, n.type.shape)) return false;
    return true;
  }
  /** An operand a blocked binary op reads: one of the output's shape, one value per channel, or a single value. */
  bool operand_fits(ValueId v, const Shape &out) const {
    return g_.type_of(v).shape == out || per_channel_constant(v, out[1]) || per_channel(v, out) || g_.type_of(v).numel() == 1;
  }
  /** A computed operand of one value per channel of `out` ([1, C, 1, 1]): blocked by a conversion of C values. */
  bool per_channel(ValueId v, const Shape &out) const {
    return v.kind == ValueId::Kind::kNode && out.size() == 4 && g_.type_of(v).shape == Shape{1, out[1], 1, 1} && out[2] * out[3] > 1;
  }

  /** A conv reached from conv i through elementwise ops, and the bytes of i's tensor on that side (its input or its output). */
  struct Neighbour {
    int conv;
    int64_t bytes;
  };
  /** The convs reached from conv i's input and output through elementwise ops. */
  std::vector<Neighbour> neighbour_convs(int i) const {
    std::vector<Neighbour> found;
    for (bool up : {true, false}) {
      const TensorType &side = up ? g_.type_of(g_.nodes[i].inputs[0]) : g_.nodes[i].type;
      int64_t bytes = side.numel() * 4;
      std::vector<int> todo;
      if (up && g_.nodes[i].inputs[0].kind == ValueId::Kind::kNode) todo.push_back(g_.nodes[i].inputs[0].index);
      if (!up) todo = uses_.consumers[i];
      std::vector<bool> seen(g_.nodes.size(), false);
      seen[i] = true;
      while (!todo.empty()) {
        int k = todo.back();
        todo.pop_back();
        if (seen[k]) continue;
        seen[k] = true;
        if (is_conv(k)) found.push_back({k, bytes});
        if (!elementwise(k)) continue;
        // An elementwise op that reads its operands plain (a squeeze-excitation's multiply by a
        // computed per-channel scale) is a layout change there: a plain neighbour.
        if (!reads_blocked_operands(k)) {
          found.push_back({-1, bytes});
          continue;
        }
        for (int c : uses_.consumers[k]) todo.push_back(c);
        // A per-channel operand (a squeeze-excitation's scale) is converted where it is one value a
        // channel: no neighbour through it.
        for (ValueId v : g_.nodes[k].inputs)
          if (v.kind == ValueId::Kind::kNode && !per_channel(v, g_.nodes[k].type.shape)) todo.push_back(v.index);
      }
    }
    return found;
  }

  /**
   * Which convs are converted. A conv next to one that stays plain needs a layout change on that
   * side, a pass over the tensor there. Every convertible conv starts converted; then, to a fixed
   * point, a conv stays plain where a plain neighbour sits across a tensor of more than
   * kMaxConversionBytes (MobileNetV2's 96 x 112 x 112, 4.8 MB, is not changed), or where no
   * neighbour is converted (it would be converted in and out for itself alone). Since a change is
   * a transposing copy (the layout
   * change sketch: 1.6 MB in about 0.04 ms in the model), MobileNetV2's 112x112 stage converts
   * between its 32 x 112 x 112 change in and its 96 x 56 x 56 change out (four convs, two
   * changes): end to end 0.964-0.968 of the 1 MiB rule's time (Zen 4, AVX-512, 2 threads, the
   * two models alternating, cores near), EfficientNet-B0 0.982-0.994. Convs on one pixel (the
   * squeeze-excitation's) stay plain: a matrix-vector product gains nothing from blocking.
   */
  std::vector<bool> choose() const {
    std::vector<bool> on(g_.nodes.size(), false);
    std::vector<std::vector<Neighbour>> next(g_.nodes.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node &n = g_.nodes[i];
      if (!convertible(static_cast<int>(i)) || n.type.shape[2] * n.type.shape[3] == 1) continue;
      next[i] = neighbour_convs(static_cast<int>(i));
      on[i] = true;
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < on.size(); ++i) {
        if (!on[i]) continue;
        bool any = false, costly = false;
        for (const Neighbour &k : next[i]) {
          bool plain = k.conv < 0 || !on[k.conv];
          any = any || !plain, costly = costly || (plain && k.bytes > kMaxConversionBytes);
        }
        if (!any || costly) on[i] = false, changed = true;
      }
    }
    // What is left converts in connected sets; a set with more than a layout change for every two
    // convs (three convs between two that stay plain) would pay more in changes than it
    // gains: it stays plain.
    std::vector<int> component(on.size(), -1);
    for (size_t start = 0; start < on.size(); ++start) {
      if (!on[start] || component[start] >= 0) continue;
      std::vector<int> members, todo{static_cast<int>(start)};
      int changes = 0;
      component[start] = static_cast<int>(start);
      while (!todo.empty()) {
        int i = todo.back();
        todo.pop_back();
        members.push_back(i);
        for (const Neighbour &k : next[i]) {
          if (k.conv < 0 || !on[k.conv]) {
            ++changes;
          } else if (component[k.conv] < 0) {
            component[k.conv] = static_cast<int>(start);
            todo.push_back(k.conv);
          }
        }
      }
      if (changes * kConvsPerChange > static_cast<int>(members.size()))
        for (int i : members) on[i] = false;
    }
    return on;
  }

  static constexpr int kConvsPerChange = 2;

  static constexpr int64_t kMaxConversionBytes = 2 << 20;

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
    // An operand the blocked op reads blocked: one of the output's shape, or one value per channel.
    auto reads_blocked = [&](ValueId v) {
      return g_.type_of(v).shape == n.type.shape || per_channel_constant(v, n.type.shape[1]) || per_channel(v, n.type.shape);
    };
    // Both operands are checked before either is converted, so no conversion is made for nothing.
    if ((n.op == "add" || n.op == "subtract" || n.op == "multiply" || n.op == "divide") && blockable(n.type) &&
        (has_blocked(n.inputs[0]) || has_blocked(n.inputs[1])) && operand_fits(n.inputs[0], n.type.shape) && operand_fits(n.inputs[1], n.type.shape)) {
      std::vector<ValueId> in;
      for (ValueId v : n.inputs) {
        AT_ASSIGN(bv, reads_blocked(v) ? blocked(v) : Expected<ValueId>(rw_.map(v)));
        in.push_back(bv);
      }
      AT_ASSIGN(v, rw_.add(n.op, in, n.attrs, n.origin));
      blocked_[i] = v;
      return Status::ok();
    }
    // A global average pool of a blocked value: the mean of each channel block's planes, [N, C/b,
    // 1, 1, b], its plain form (C values) made where it is read.
    if (n.op == "nn.global_avg_pool2d" && has_blocked(n.inputs[0]) && n.type.rank() == 4) {
      Attrs a;
      a.set("axis", std::vector<int64_t>{2, 3});
      a.set("keepdims", int64_t{1});
      AT_ASSIGN(v, rw_.add("mean", {blocked_[n.inputs[0].index]}, a, n.origin));
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
  std::vector<ValueId> blocked_inputs_;   // per graph input: its blocked form, once made
};

}  // namespace

Expected<Graph> nchwc_layout(const Graph &g, int64_t block) { return NchwcLayout(g, block).run(); }

}  // namespace autotune

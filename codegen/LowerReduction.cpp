// Reductions: the naive nests of pools, global pools, means, matmul and softmax (their schedules are
// step lists: steps_of_knobs), and the generic reduction nest the conv and dense nests are built on.
#include "codegen/Lowerer.h"
#include "codegen/Transform.h"

namespace autotune::lowering {

Expr Lowerer::combine_step(Combine c, const Expr &a, const Expr &t) {
  if (c == Combine::kMax) return max(a, t);
  if (c == Combine::kMin) return min(a, t);
  if (c == Combine::kProd) return a * t;
  // A term that is a product or nothing (a tap past a kernel): the update or none, so a decided
  // condition leaves one fused multiply-add or nothing at all.
  if (t->kind == ExprKind::kSelect && t->args[2]->kind == ExprKind::kFloat && t->args[2]->float_value == 0)
    return select(t->args[0], combine_step(c, a, t->args[1]), a);
  if (t->kind == ExprKind::kBinary && t->op == BinOp::kMul && t->type == Type::kF32) return call("fmuladd", {t->args[0], t->args[1], a});
  return a + t;
}

Status Lowerer::naive_reduction(const Shape &out_shape, const std::vector<int64_t> &domain, Combine combine,
                                const std::function<Expr(const Index &)> &init,
                                const std::function<Expr(const Index &, const Index &)> &term,
                                const std::function<Expr(const Expr &, const Index &)> &finalize, const std::string &stage_name,
                                const std::function<Index(const Index &)> &out_index) {
  Buffer acc = make_buffer("acc", Type::kF32, 1, BufferScope::kLocal);
  std::vector<std::string> i = numbered("i", out_shape.size()), k = numbered("k", domain.size());
  Index idx, r;
  for (const std::string &v : i) idx.push_back(var(v));
  for (const std::string &v : k) r.push_back(var(v));
  Expr at = int_imm(0);
  Stmt red = loop_nest(k, domain, store(acc, at, combine_step(combine, load(acc, at), term(idx, r))));
  Stmt body = allocate(acc, seq({store(acc, at, init(idx)), red, store_output(out_index ? out_index(idx) : idx, finalize(load(acc, at), idx))}));
  k_.schedule = "naive nest";
  // Bounds checks that hold everywhere (a pool without padding) are gone from the nest, so no step list carries them.
  add_stage(stage_name, "u", 1, simplify_over_loops(loop_nest(i, out_shape, body)));
  return Status::ok();
}

Status Lowerer::lower_softmax() {
  AT_TRY(check_inlinable());
  const Node &sm = g_.nodes[anchor_];
  const Shape &s = sm.type.shape;
  int axis = *normalize_axis(sm.attrs.i("axis"), static_cast<int>(s.size()));
  // A loop per dimension but the axis (i0, i1, ...) around four passes over the axis: the
  // maximum (j1), each exponential stored in the output (j2: one exp per element), their sum read
  // back (j3: a pass of its own, so that j3 is a pure reduction that rfactor takes), the outputs
  // divided by it (j4). Each row's maximum and sum are one-element local buffers. The loop sketch
  // vectorizes the innermost of the i loops (for a softmax over channels, the pixels), each lane
  // with its own maximum and sum; the row sketch vectorizes along the row.
  Shape rest;
  for (size_t d = 0; d < s.size(); ++d)
    if (static_cast<int>(d) != axis) rest.push_back(s[d]);
  std::vector<std::string> i = numbered("i", rest.size());
  auto at = [&](const Expr &j) {
    Index idx;
    for (size_t d = 0, n = 0; d < s.size(); ++d) idx.push_back(static_cast<int>(d) == axis ? j : var(i[n++]));
    return idx;
  };
  // The group's output has the softmax's shape (softmax is opaque: nothing injective fuses after it).
  auto stored = [&](const Expr &j) { return ravel(at(j), s); };
  Buffer m = make_buffer("max", Type::kF32, 1, BufferScope::kLocal), sum = make_buffer("sum", Type::kF32, 1, BufferScope::kLocal);
  Expr zero = int_imm(0);
  Stmt body = seq({
      store(m, zero, float_imm(-kInf)),
      for_loop("j1", zero, int_imm(s[axis]), ForKind::kSerial, store(m, zero, max(load(m, zero), value_at(sm.inputs[0], at(var("j1")))))),
      for_loop("j2", zero, int_imm(s[axis]), ForKind::kSerial,
               store(out_, stored(var("j2")), call("exp", {value_at(sm.inputs[0], at(var("j2"))) - load(m, zero)}))),
      store(sum, zero, float_imm(0)),
      for_loop("j3", zero, int_imm(s[axis]), ForKind::kSerial, store(sum, zero, load(sum, zero) + load(out_, stored(var("j3"))))),
      for_loop("j4", zero, int_imm(s[axis]), ForKind::kSerial, store_output(at(var("j4")), load(out_, stored(var("j4"))) / load(sum, zero))),
  });
  k_.schedule = "naive nest";
  add_stage("softmax", "u", 1, loop_nest(i, rest, allocate(m, allocate(sum, body))));
  return Status::ok();
}

Status Lowerer::lower_layer_norm() {
  AT_TRY(check_inlinable());
  const Node &ln = g_.nodes[anchor_];
  const Shape &s = ln.type.shape;
  int r = static_cast<int>(s.size()), axis = *normalize_axis(ln.attrs.i("axis"), r);
  // A loop per row dimension (i0, i1, ...) around three passes over the row's elements (the axes
  // from `axis` on, one loop j): their sum (j1), then the mean's squared distances (j2: the
  // variance in two passes, as the reference and the decomposed graph compute it), then the
  // normalized, scaled and shifted outputs (j3). Each row's mean and 1 / sqrt(var + epsilon) are
  // one-element local buffers. The row sketch vectorizes the passes along the row.
  Shape rows(s.begin(), s.begin() + axis), tail(s.begin() + axis, s.end());
  int64_t len = product(tail);
  std::vector<std::string> i = numbered("i", rows.size());
  auto at = [&](const Expr &j) {
    Index idx;
    for (const std::string &v : i) idx.push_back(var(v));
    Index t = unravel(j, tail);
    idx.insert(idx.end(), t.begin(), t.end());
    return idx;
  };
  auto x = [&](const char *j) { return value_at(ln.inputs[0], at(var(j))); };
  auto param = [&](int k, const char *j) { return value_at(ln.inputs[k], broadcast_index(at(var(j)), g_.type_of(ln.inputs[k]).shape)); };
  Buffer sum = make_buffer("sum", Type::kF32, 1, BufferScope::kLocal), sq = make_buffer("sq", Type::kF32, 1, BufferScope::kLocal);
  Buffer mean = make_buffer("mean", Type::kF32, 1, BufferScope::kLocal), inv = make_buffer("inv", Type::kF32, 1, BufferScope::kLocal);
  Expr zero = int_imm(0), n = float_imm(1.0 / static_cast<double>(len));
  Expr d2 = x("j2") - load(mean, zero);
  Stmt body = seq({
      store(sum, zero, float_imm(0)),
      for_loop("j1", zero, int_imm(len), ForKind::kSerial, store(sum, zero, load(sum, zero) + x("j1"))),
      store(mean, zero, load(sum, zero) * n),
      store(sq, zero, float_imm(0)),
      for_loop("j2", zero, int_imm(len), ForKind::kSerial, store(sq, zero, call("fmuladd", {d2, d2, load(sq, zero)}))),
      store(inv, zero, float_imm(1) / call("sqrt", {load(sq, zero) * n + float_imm(ln.attrs.f("epsilon"))})),
      for_loop("j3", zero, int_imm(len), ForKind::kSerial,
               store_output(at(var("j3")), call("fmuladd", {(x("j3") - load(mean, zero)) * load(inv, zero), param(1, "j3"), param(2, "j3")}))),
  });
  k_.schedule = "naive nest";
  add_stage("layer_norm", "u", 1, loop_nest(i, rows, allocate(sum, allocate(sq, allocate(mean, allocate(inv, body))))));
  return Status::ok();
}

Status Lowerer::lower_reduction_op() {
  AT_TRY(check_inlinable());
  const Node &n = g_.nodes[anchor_];
  const std::string &op = n.op;
  const Shape &os = n.type.shape;
  ValueId x = n.inputs[0];
  const Shape &xs = g_.type_of(x).shape;
  auto identity = [](const Expr &a, const Index &) { return a; };
  if (op == "nn.max_pool2d" || op == "nn.avg_pool2d") {
    const auto &k = n.attrs.ints("pool_size"), &st = n.attrs.ints("strides"), &dl = n.attrs.ints("dilation"),
               &p = n.attrs.ints("padding");
    bool is_max = op == "nn.max_pool2d";
    bool include_pad = !is_max && n.attrs.i("count_include_pad");
    auto term = [&, is_max](const Index &i, const Index &r) {
      Expr y = i[2] * st[0] - int_imm(p[0]) + r[0] * dl[0], xx = i[3] * st[1] - int_imm(p[1]) + r[1] * dl[1];
      Expr valid = both(in_range(y, 0, xs[2]), in_range(xx, 0, xs[3]));
      Expr v = value_at(x, {i[0], i[1], clamp(y, 0, xs[2] - 1), clamp(xx, 0, xs[3] - 1)});
      return select(valid, v, float_imm(is_max ? -kInf : 0.0));
    };
    auto count_1d = [](const Expr &start, int64_t lo, int64_t hi, int64_t k, int64_t d) {
      // window positions start + j * d (0 <= j < k) inside [lo, hi)
      return max(int_imm(0), min(int_imm(k), ceil_div(int_imm(hi) - start, d)) - max(int_imm(0), ceil_div(int_imm(lo) - start, d)));
    };
    auto finalize = [&, is_max, include_pad](const Expr &a, const Index &i) -> Expr {
      if (is_max) return a;
      Expr ys = i[2] * st[0] - int_imm(p[0]), xst = i[3] * st[1] - int_imm(p[1]);
      Expr cy = include_pad ? count_1d(ys, -p[0], xs[2] + p[2], k[0], dl[0]) : count_1d(ys, 0, xs[2], k[0], dl[0]);
      Expr cx = include_pad ? count_1d(xst, -p[1], xs[3] + p[3], k[1], dl[1]) : count_1d(xst, 0, xs[3], k[1], dl[1]);
      return a / cast(Type::kF32, max(cy * cx, int_imm(1)));
    };
    return naive_reduction(os, {k[0], k[1]}, is_max ? Combine::kMax : Combine::kSum,
                           [is_max](const Index &) { return float_imm(is_max ? -kInf : 0.0); }, term, finalize, "pool2d");
  }
  if (op == "nn.global_avg_pool2d") {
    Shape spatial(xs.begin() + 2, xs.end());
    double count = static_cast<double>(product(spatial));
    return naive_reduction(
        os, spatial, Combine::kSum, [](const Index &) { return float_imm(0); },
        [&](const Index &i, const Index &r) {
          Index src{i[0], i[1]};
          src.insert(src.end(), r.begin(), r.end());
          return value_at(x, src);
        },
        [count](const Expr &a, const Index &) { return a * float_imm(1.0 / count); }, "global_pool");
  }
  if (op == "mean" || op == "sum" || op == "max" || op == "min" || op == "prod") {
    int r = static_cast<int>(xs.size());
    std::vector<bool> reduced(r, n.attrs.ints("axis").empty());
    for (int64_t a : n.attrs.ints("axis")) reduced[*normalize_axis(a, r)] = true;
    bool keep = n.attrs.i("keepdims");
    std::vector<int64_t> domain;
    int64_t count = 1;
    for (int d = 0; d < r; ++d)
      if (reduced[d]) domain.push_back(xs[d]), count *= xs[d];
    Combine c = op == "max" ? Combine::kMax : op == "min" ? Combine::kMin : op == "prod" ? Combine::kProd : Combine::kSum;
    double init = op == "max" ? -kInf : op == "min" ? kInf : op == "prod" ? 1.0 : 0.0;
    double scale = op == "mean" ? 1.0 / static_cast<double>(count) : 1.0;
    return naive_reduction(
        os, domain, c, [init](const Index &) { return float_imm(init); },
        [&, r, keep](const Index &i, const Index &red) {
          Index src;
          size_t oi = 0, ri = 0;
          for (int d = 0; d < r; ++d) {
            if (reduced[d]) {
              src.push_back(red[ri++]);
              if (keep) ++oi;
            } else {
              src.push_back(i[oi++]);
            }
          }
          return value_at(x, src);
        },
        [scale](const Expr &a, const Index &) { return scale == 1.0 ? a : a * float_imm(scale); }, op == "mean" ? "mean" : "reduce");
  }
  if (op == "nn.matmul") {
    Shape as = xs, bs = g_.type_of(n.inputs[1]).shape;
    bool a1 = as.size() == 1, b1 = bs.size() == 1;
    int64_t K = as.back();
    return naive_reduction(
        os, {K}, Combine::kSum, [](const Index &) { return float_imm(0); },
        [&, a1, b1](const Index &i, const Index &r) {
          // The output index is (batch..., m, n) without the dims of promoted 1-D operands.
          Index full = i;
          if (a1) full.insert(full.end() - (b1 ? 0 : 1), int_imm(0));
          if (b1) full.push_back(int_imm(0));
          Index batch(full.begin(), full.end() - 2);
          Index ai, bi;
          if (a1) ai = {r[0]};
          else {
            Shape ab(as.begin(), as.end() - 2);
            ai = broadcast_index(batch, ab);
            ai.push_back(full[full.size() - 2]);
            ai.push_back(r[0]);
          }
          if (b1) bi = {r[0]};
          else {
            Shape bb(bs.begin(), bs.end() - 2);
            bi = broadcast_index(batch, bb);
            bi.push_back(r[0]);
            bi.push_back(full.back());
          }
          return value_at(n.inputs[0], ai) * value_at(n.inputs[1], bi);
        },
        identity, "matmul");
  }
  return make_error("no template for op " + op);
}

}  // namespace autotune::lowering

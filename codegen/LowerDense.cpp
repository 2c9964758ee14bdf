// The dense layer's naive nest: its schedules are step lists (the register-tile sketch; steps_of_knobs).
#include "codegen/Lowerer.h"

namespace autotune::lowering {

Status Lowerer::lower_dense() {
  AT_TRY(check_inlinable());
  const Node &d = g_.nodes[anchor_];
  // Rows of every leading dimension as one loop i0 (M rows), the units as i1: data [..., K] is a matrix [M, K].
  const Shape &xs = g_.type_of(d.inputs[0]).shape;
  Shape lead(xs.begin(), xs.end() - 1);
  int64_t K = xs.back(), M = product(lead), N = d.type.shape.back();
  auto row = [&](const Expr &m) { return unravel(m, lead); };
  return naive_reduction(
      {M, N}, {K}, Combine::kSum, [](const Index &) { return float_imm(0); },
      [&](const Index &i, const Index &r) {
        Index x = row(i[0]);
        x.push_back(r[0]);
        return value_at(d.inputs[0], x) * value_at(d.inputs[1], {i[1], r[0]});
      },
      [](const Expr &a, const Index &) { return a; }, "dense",
      [&](const Index &i) {
        Index o = row(i[0]);
        o.push_back(i[1]);
        return o;
      });
}

}  // namespace autotune::lowering

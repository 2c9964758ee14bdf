// The dense layer's naive nest: its schedules are step lists (the register-tile sketch; steps_of_knobs).
#include "codegen/Lowerer.h"

namespace autotune::lowering {

Status Lowerer::lower_dense() {
  AT_TRY(check_inlinable());
  const Node &d = g_.nodes[anchor_];
  int64_t K = g_.type_of(d.inputs[0]).shape[1];
  return naive_reduction(
      d.type.shape, {K}, Combine::kSum, [](const Index &) { return float_imm(0); },
      [&](const Index &i, const Index &r) { return value_at(d.inputs[0], {i[0], r[0]}) * value_at(d.inputs[1], {i[1], r[0]}); },
      [](const Expr &a, const Index &) { return a; }, "dense");
}

}  // namespace autotune::lowering

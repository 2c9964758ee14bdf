// The dense template: weights packed [N/nb][K][nb], rows accumulating in registers.
#include "codegen/Lowerer.h"

namespace autotune::lowering {

Status Lowerer::lower_dense() {
  AT_TRY(check_inlinable());
  const Node &d = g_.nodes[anchor_];
  const Shape &as = g_.type_of(d.inputs[0]).shape, &ws = g_.type_of(d.inputs[1]).shape;
  int64_t M = as[0], K = as[1], N = ws[0];
  int V = s_.vector_width;
  int64_t NB = s_.oc_block;
  if (naive_ || d.inputs[1].kind != ValueId::Kind::kInput || NB <= 0) {
    k_.schedule = "direct dense, " + k_.schedule;
    return lower_reduction(
        d.type.shape, {K}, Combine::kSum, [](const Index &) { return float_imm(0); },
        [&](const Index &i, const Index &r) { return value_at(d.inputs[0], {i[0], r[0]}) * value_at(d.inputs[1], {i[1], r[0]}); },
        [](const Expr &a, const Index &) { return a; }, "dense");
  }
  // Blocked: NB output columns in registers per row, weights packed wp[N/NB][K][NB].
  k_.packings.push_back({d.inputs[1].index, WeightPacking::kNKToNKn, NB});
  Buffer wp = params_[d.inputs[1].index];
  Expr nb = var("u"), m = var("m"), k = var("k");
  Buffer acc = make_buffer("acc", Type::kF32, NB, BufferScope::kLocal);
  Expr lane = var("v");
  auto vec = [&](Stmt s) { return for_loop("v", int_imm(0), int_imm(V), ForKind::kVectorized, s); };
  std::vector<Stmt> init, fma, epilogue;
  for (int64_t o = 0; o < NB / V; ++o) {
    Expr ai = int_imm(o * V) + lane;
    init.push_back(vec(store(acc, ai, float_imm(0))));
    fma.push_back(vec(store(acc, ai, call("fmuladd", {value_at(d.inputs[0], {m, k}), load(wp, (nb * K + k) * NB + int_imm(o * V) + lane), load(acc, ai)}))));
    epilogue.push_back(vec(store_output({m, nb * NB + int_imm(o * V) + lane}, load(acc, ai))));
  }
  Stmt step = seq({seq(fma), seq(prefetch_ahead(wp, (nb * K + k) * NB, NB))});
  Stmt row = allocate(acc, seq({seq(init), for_loop("k", int_imm(0), int_imm(K), ForKind::kSerial, step), seq(epilogue)}));
  add_stage("dense", "u", N / NB, for_loop("m", int_imm(0), int_imm(M), ForKind::kSerial, row));
  return Status::ok();
}

}  // namespace autotune::lowering

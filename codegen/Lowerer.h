#pragma once
// The lowering's internals: index helpers and the Lowerer, which turns one fused group into its
// naive loop nests (lower_naive). Lower.cpp holds the driver, the expression inliner (value_at),
// the elementwise nest and steps_of_knobs; LowerConv.cpp the conv's nests (direct and Winograd)
// and its padded input's; LowerDense.cpp dense; LowerReduction.cpp pools, means, matmul and
// softmax. Not a public header: use codegen/Lower.h.
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "codegen/Lower.h"

namespace autotune::lowering {

using namespace loop;

using Index = std::vector<Expr>;
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline Expr ravel(const Index &idx, const Shape &s) {
  Expr r = int_imm(0);
  int64_t stride = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    r = idx[d] * stride + r;
    stride *= s[d];
  }
  return r;
}

inline Index unravel(const Expr &flat, const Shape &s) {
  Index idx(s.size());
  int64_t stride = 1;
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    Expr q = stride == 1 ? flat : flat / int_imm(stride);
    idx[d] = d == 0 ? q : q % int_imm(s[d]);
    stride *= s[d];
  }
  return idx;
}

inline int64_t product(const Shape &s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}

inline Expr clamp(const Expr &e, int64_t lo, int64_t hi) { return min(max(e, int_imm(lo)), int_imm(hi)); }
inline Expr in_range(const Expr &e, int64_t lo, int64_t hi) { return both(int_imm(lo) <= e, e < int_imm(hi)); }
/** ceil(a / d) for d > 0, with floor division. */
inline Expr ceil_div(const Expr &a, int64_t d) { return int_imm(0) - ((int_imm(0) - a) / int_imm(d)); }

/** A kernel argument (or its output) of tensor type `t`: float32 or int64, at least one element. */
inline Buffer param_buffer(const std::string &name, const TensorType &t) {
  return make_buffer(name, t.dtype == DType::kFloat32 ? Type::kF32 : Type::kI64, std::max<int64_t>(t.numel(), 1), BufferScope::kParam);
}

class Lowerer {
 public:
  Lowerer(const Graph &g, const std::string &name, const KernelSchedule &s) : g_(g), s_(s) { k_.name = name; }
  /** The group's naive nests (lower_naive): an elementwise group's loops, or its anchor's nests. */
  Expected<LoweredKernel> run();

 private:
  /** prefix0, prefix1, ...: the loop names of a naive nest. */
  static std::vector<std::string> numbered(const std::string &prefix, size_t n);
  enum class Combine { kSum, kMax, kMin, kProd };
  /** One step of a reduction: max(a, t), min(a, t), a * t, or a + t (a fused multiply-add when t is a product). */
  static Expr combine_step(Combine c, const Expr &a, const Expr &t);
  Expr value_at(ValueId v, const Index &idx);
  /** The index into `in` read when broadcasting to an output indexed by `idx` (numpy alignment). */
  static Index broadcast_index(const Index &idx, const Shape &in);
  /** Stores the group's output at idx; the anchor reads as `anchor` there. */
  Stmt store_output(const Index &idx, const Expr &anchor);
  std::string fresh(const std::string &base) { return base + std::to_string(counter_++); }
  Status check_inlinable();
  void add_stage(const std::string &name, const std::string &pvar, int64_t extent, Stmt body) {
    // Reshapes, transposes and concatenations index through a flattened offset; over the naive
    // loops' ranges its divisions and modulos resolve (a channel shuffle's input then reads a
    // plane's columns contiguously again, before any step fuses or splits the loops).
    k_.stages.push_back({name, pvar, std::max<int64_t>(extent, 1), simplify_div_mod(body)});
  }
  /**
   * The generic reduction as one naive nest (lower_naive): a loop per output dimension (i0, i1,
   * ...) around a one-element local accumulator: acc = init, a loop per reduction dimension (k0,
   * k1, ...) around acc = combine(acc, term), and the epilogue's store of finalize(acc).
   * Schedule steps (codegen/Steps, codegen/Sketch) transform it; vectorizing an output loop
   * gives each lane its own accumulator. `out_index` maps the loops' index to the output's
   * where they differ (a dense layer's rows, one loop over every leading dimension).
   */
  Status naive_reduction(const Shape &out_shape, const std::vector<int64_t> &domain, Combine combine,
                         const std::function<Expr(const Index &)> &init,
                         const std::function<Expr(const Index &, const Index &)> &term,
                         const std::function<Expr(const Expr &, const Index &)> &finalize, const std::string &stage_name,
                         const std::function<Index(const Index &)> &out_index = nullptr);
  /** The conv as naive nests: a `pad` producer nest (when padded) and the reduction nest reading it. */
  Status naive_conv2d();
  /**
   * The padded input of `conv` as a naive producer nest (stage "pad", loops pn, pc, py, [pf,] px
   * [, pl]) of PH x PW per plane, PW split into `phases` runs of columns (see naive_pad in LowerConv.cpp).
   */
  Buffer naive_pad(const Node &conv, int64_t PH, int64_t PW, int64_t phases);
  /** Winograd F(m x m, 3x3) (the schedule's `winograd` m) as naive nests: pad, wino_in, wino_gemm, wino_out. */
  Status naive_winograd();
  Status lower_dense();
  Status lower_softmax();
  Status lower_layer_norm();
  Status lower_reduction_op();

  const Graph &g_;
  KernelSchedule s_;
  LoweredKernel k_;
  std::vector<Buffer> params_;
  Buffer out_;
  int anchor_ = -1;
  std::function<Expr(const Index &)> anchor_value_;
  int counter_ = 0;
};

}  // namespace autotune::lowering

#pragma once
// The lowering's internals, shared by the files of its template families: index helpers and the
// Lowerer, which turns one fused group and its schedule into a LoweredKernel. Lower.cpp holds
// the driver, the expression inliner (value_at) and the elementwise template; LowerConv.cpp the
// conv templates (register-blocked and direct) and their input copies; LowerDense.cpp dense;
// LowerReduction.cpp pools, means, matmul and softmax. Not a public header: use codegen/Lower.h.
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "codegen/Lower.h"

namespace autotune::lowering {

using namespace loop;

using Index = std::vector<Expr>;
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline bool is_anchor_op(const std::string &op) {
  return op == "nn.conv2d" || op == "nn.conv2d_nchwc" || op == "nn.dense" || op == "nn.matmul" || op == "nn.max_pool2d" || op == "nn.avg_pool2d" ||
         op == "nn.global_avg_pool2d" || op == "mean" || op == "nn.softmax";
}

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

class Lowerer {
 public:
  Lowerer(const Graph &g, const std::string &name, const KernelSchedule &s, bool naive = false) : g_(g), s_(s), naive_(naive) { k_.name = name; }
  Expected<LoweredKernel> run();

 private:
  /** The naive nests of lower_naive: elementwise groups and generic reductions. */
  Expected<LoweredKernel> run_naive();
  /** prefix0, prefix1, ...: the loop names of a naive nest. */
  static std::vector<std::string> numbered(const std::string &prefix, size_t n);
  enum class Combine { kSum, kMax };
  /** One step of a reduction: max(a, t), or a + t (a fused multiply-add when t is a product). */
  static Expr combine_step(Combine c, const Expr &a, const Expr &t);
  /**
   * The conv's input as a plain buffer: the argument itself, or a copy made by a first stage,
   * padded, and with `phases` > 1 each row's columns split by phase (column x at
   * (x % phases) * wq + x / phases): a conv of column stride `phases` then reads consecutive
   * output columns from consecutive addresses instead of every other one.
   */
  struct Source {
    Buffer buf;
    int64_t h, w;         // its extents (the padded ones for a copy; w = phases * wq)
    int64_t phases = 1, wq = 0;
    int64_t wp = 0;       // a copy's padded row length before the phase split
    /** The address of column `x0 + ox * phases` of a row (x0 not a multiple of phases is fine), linear in ox. */
    Expr column(const Expr &ox, const Expr &x0) const {
      if (phases == 1) return ox * phases + x0;
      return (x0 % int_imm(phases)) * wq + ox + x0 / int_imm(phases);
    }
  };

  Expr value_at(ValueId v, const Index &idx);
  /** The index into `in` read when broadcasting to an output indexed by `idx` (numpy alignment). */
  static Index broadcast_index(const Index &idx, const Shape &in);
  /** Stores the group's output at idx; the anchor reads as `anchor` there. */
  Stmt store_output(const Index &idx, const Expr &anchor);
  std::string fresh(const std::string &base) { return base + std::to_string(counter_++); }
  Status check_inlinable();
  /**
   * for xo in [0, L / V): vectorized xi in [0, V): body(x = start + xo * V + xi); the rest as
   * one vector, a last single element as a scalar. `body(x, lanes, lane)` builds the statement for one position
   * (or `lanes` positions).
   */
  Stmt row_loops(int64_t len, const std::function<Stmt(Expr x, int lanes, Expr lane)> &body, int64_t start = 0);
  /** Wraps `s` in the vectorized lane loop of row_loops (named after the lane variable). */
  static Stmt lanes_of(int lanes, const Expr &lane, const Stmt &s) {
    if (lanes == 1) return s;
    return for_loop(lane->name, int_imm(0), int_imm(lanes), ForKind::kVectorized, s);
  }
  /**
   * How far ahead of a weight stream the templates prefetch (floats): 8 KiB. A conv's weights are
   * read from memory once per inference, and the hardware prefetchers stop at every 4 KiB page.
   * Measured alone, AVX-512, 2 threads, caches flushed before each run (ms, none / 1 / 4 / 16
   * KiB ahead): ResNet-50's 3x3 512-channel conv at 14->7 1.39/1.14/0.95/0.98, its 1x1
   * 2048->512 at 7x7 0.56/0.44/0.41/0.39; with warm caches 0.85 -> 0.77 and 0.34 -> 0.29 at 8 KiB.
   */
  static constexpr int64_t kPrefetchDistance = 2048;
  /** Prefetches for one step of a stream reading `floats` floats from b[at]: a line per 16 floats, kPrefetchDistance ahead. */
  static std::vector<Stmt> prefetch_ahead(const Buffer &b, const Expr &at, int64_t floats) {
    std::vector<Stmt> out;
    for (int64_t l = 0; l < floats; l += 16) out.push_back(prefetch(b, at + int_imm(kPrefetchDistance + l)));
    return out;
  }
  void add_stage(const std::string &name, const std::string &pvar, int64_t extent, Stmt body) {
    k_.stages.push_back({name, pvar, std::max<int64_t>(extent, 1), std::move(body)});
  }
  /**
   * The generic reduction as one naive nest (lower_naive): a loop per output dimension (i0, i1,
   * ...) around a one-element local accumulator: acc = init, a loop per reduction dimension (k0,
   * k1, ...) around acc = combine(acc, term), and the epilogue's store of finalize(acc).
   * Schedule steps (codegen/Steps, codegen/Sketch) transform it; vectorizing an output loop
   * gives each lane its own accumulator.
   */
  Status naive_reduction(const Shape &out_shape, const std::vector<int64_t> &domain, Combine combine,
                         const std::function<Expr(const Index &)> &init,
                         const std::function<Expr(const Index &, const Index &)> &term,
                         const std::function<Expr(const Expr &, const Index &)> &finalize, const std::string &stage_name);
  /** The NCHW Winograd template's input: the argument itself, or a padded, phase-split copy made by a "pad" stage. */
  Source conv_source(const Node &conv, int64_t phases = 1, int64_t min_h = 0, int64_t min_w = 0);
  /** The extents of conv's padded, phase-split input copy (no buffer yet). */
  Source padded_geometry(const Node &conv, int64_t phases, int64_t min_h = 0, int64_t min_w = 0) const;
  /**
   * Row `py` of input plane (n, c) of `conv`, padded and phase-split as `src` describes, written
   * at src.buf[base, base + src.w): zeros where the row or a column is padding.
   */
  Stmt padded_row(const Node &conv, const Source &src, const Expr &base, const Expr &n, const Expr &c, const Expr &py);
  /** buf[base + from, base + from + count) = 0, in vectors of the schedule's width: a padded row's zero columns. */
  Stmt zero_run(const Buffer &buf, const Expr &base, int64_t from, int64_t count);
  /** Winograd F(m x m, 3x3) in NCHW: input transform, a blocked GEMM per transformed position, output transform. */
  Status lower_winograd();
  Status lower_conv2d();
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
  Status lower_reduction_op();

  const Graph &g_;
  KernelSchedule s_;
  LoweredKernel k_;
  std::vector<Buffer> params_;
  Buffer out_;
  bool naive_ = false;  // lower_naive: the naive nests, no template
  int anchor_ = -1;
  std::function<Expr(const Index &)> anchor_value_;
  int counter_ = 0;
};

}  // namespace autotune::lowering

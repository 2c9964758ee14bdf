// The conv's naive nests, direct and Winograd, and its padded input's; schedules are steps on them.
#include "codegen/Lowerer.h"

#include <cmath>

#include "codegen/Winograd.h"

namespace autotune::lowering {

Buffer Lowerer::naive_pad(const Node &conv, int64_t PH, int64_t PW, int64_t phases) {
  const Shape &xs = g_.type_of(conv.inputs[0]).shape;
  const auto &pd = conv.attrs.ints("padding");
  int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], b = conv_block(conv), Q = PW / phases;
  // for pn, pc, py, px (and pl, a block's lane): padded = the input inside the image, 0 in the
  // border (a producer nest: compute_at/inline can move it). With phases, a loop pf between py
  // and px: the row's column pf + phases * px is stored at pf * Q + px.
  std::vector<std::string> loops{"pn", "pc", "py"};
  std::vector<int64_t> extents{N, C, PH};
  if (phases > 1) loops.push_back("pf"), extents.push_back(phases);
  loops.push_back("px"), extents.push_back(Q);
  Expr column = phases > 1 ? var("px") * phases + var("pf") : var("px");
  Expr y = var("py") - int_imm(pd[0]), x = column - int_imm(pd[1]);
  Index at{var("pn"), var("pc"), clamp(y, 0, H - 1), clamp(x, 0, W - 1)};
  Expr flat = ((var("pn") * C + var("pc")) * PH + var("py")) * PW + (phases > 1 ? var("pf") * Q + var("px") : var("px"));
  if (b) loops.push_back("pl"), extents.push_back(b), at.push_back(var("pl")), flat = flat * b + var("pl");
  Buffer src = make_buffer("padded", Type::kF32, N * C * PH * PW * std::max<int64_t>(b, 1), BufferScope::kTemp);
  k_.buffers.push_back(src);
  Stmt body = store(src, flat, select(both(in_range(y, 0, H), in_range(x, 0, W)), value_at(conv.inputs[0], at), float_imm(0)));
  add_stage("pad", "u", 1, loop_nest(loops, extents, body));
  return src;
}

Status Lowerer::naive_conv2d() {
  AT_TRY(check_inlinable());
  const Node &conv = g_.nodes[anchor_];
  const Shape &xs = g_.type_of(conv.inputs[0]).shape, &ws = g_.type_of(conv.inputs[1]).shape, &os = conv.type.shape;
  const auto &st = conv.attrs.ints("strides"), &dl = conv.attrs.ints("dilation"), &pd = conv.attrs.ints("padding");
  int64_t C = xs[1], H = xs[2], W = xs[3], CG = ws[1], KH = ws[2], KW = ws[3], OG = ws[0] / conv.attrs.i("groups");
  if (conv.inputs[1].kind != ValueId::Kind::kInput) return make_error("conv2d weight must be an argument");
  bool padded = pd[0] || pd[1] || pd[2] || pd[3];
  int64_t PH = H + pd[0] + pd[2], PW = W + pd[1] + pd[3];
  Buffer w = params_[conv.inputs[1].index];
  auto bias = [&](const Expr &o) { return conv.inputs.size() == 3 ? value_at(conv.inputs[2], {o}) : float_imm(0); };
  int64_t b = conv_block(conv);  // conv2d_nchwc: lanes per channel block (C counts the blocks)
  if (s_.winograd) return naive_winograd();
  Buffer src;
  // A grouped conv with a column stride s reads its padded copy split into s phases (column j at
  // (j % s) * Q + j / s, as the depthwise template's plane copy), its kernel columns as kq * s + kf
  // (loops k2 kq, k3 kf): a row of outputs then reads consecutive columns of one phase. The taps
  // past the kernel (kq * s + kf >= KW) are skipped by a condition that unrolling decides.
  bool phased = padded && !b && OG != ws[0] && st[1] > 1 && dl[1] == 1;
  int64_t S = phased ? st[1] : 1, KQ = (KW + S - 1) / S, Q = (PW + S - 1) / S;
  if (padded) src = naive_pad(conv, PH, phased ? Q * S : PW, S);
  if (phased)
    return naive_reduction(
        os, {CG, KH, KQ, S}, Combine::kSum, [&](const Index &i) { return bias(i[1]); },
        [&](const Index &i, const Index &r) {
          Expr cin = (i[1] / int_imm(OG)) * CG + r[0], kx = r[2] * S + r[3];
          Expr xin = load(src, (((i[0] * C + cin) * PH + i[2] * st[0] + r[1] * dl[0]) * S + r[3]) * Q + i[3] + r[2]);
          Expr wv = load(w, ((i[1] * CG + r[0]) * KH + r[1]) * KW + min(kx, int_imm(KW - 1)));
          return select(kx < int_imm(KW), xin * wv, float_imm(0));
        },
        [](const Expr &a, const Index &) { return a; }, "conv2d");
  if (b && conv.attrs.i("groups") > 1) {
    // Depthwise conv2d_nchwc: output loops i0 n, i1 c/b, i2 oy, i3 ox, i4 c%b; reduction k0 ky,
    // k1 kx. Channel c reads its own block and lane of the input: a vector of the b lanes is
    // contiguous in the input, the output and the weight packed by b ([C/b][1][KH][KW][b]).
    return naive_reduction(
        os, {KH, KW}, Combine::kSum, [&](const Index &i) { return bias(i[1] * b + i[4]); },
        [&](const Index &i, const Index &r) {
          Expr y = i[2] * st[0] + r[0] * dl[0], x = i[3] * st[1] + r[1] * dl[1];
          Expr xin = padded ? load(src, (((i[0] * C + i[1]) * PH + y) * PW + x) * b + i[4]) : value_at(conv.inputs[0], {i[0], i[1], y, x, i[4]});
          return xin * load(w, (((i[1] * b + i[4]) * KH + r[0]) * KW + r[1]));
        },
        [](const Expr &a, const Index &) { return a; }, "conv2d");
  }
  if (b) {
    // conv2d_nchwc (one group): input [n][c/b][y][x][b], output [n][o/b][oy][ox][b]. The output
    // loops i0 n, i1 o/b, i2 oy, i3 ox, i4 o%b; the reduction k0 c/b, k1 ky, k2 kx, k3 c%b, so
    // every read is affine; the padded copy keeps the blocked layout.
    return naive_reduction(
        os, {C, KH, KW, b}, Combine::kSum, [&](const Index &i) { return bias(i[1] * b + i[4]); },
        [&](const Index &i, const Index &r) {
          Expr y = i[2] * st[0] + r[1] * dl[0], x = i[3] * st[1] + r[2] * dl[1];
          Expr xin = padded ? load(src, (((i[0] * C + r[0]) * PH + y) * PW + x) * b + r[3]) : value_at(conv.inputs[0], {i[0], r[0], y, x, r[3]});
          return xin * load(w, ((((i[1] * b + i[4]) * CG + r[0] * b + r[3]) * KH + r[1]) * KW + r[2]));
        },
        [](const Expr &a, const Index &) { return a; }, "conv2d");
  }
  // Pixel vectors on a strided 1x1 conv: a first stage gathers the subsampled input (loops sn,
  // sc, sy, sx), so the conv reads contiguous pixel vectors of it (the pointwise template's form).
  // On a stem (patches_eligible: a window or padding, one group) the first stage gathers every
  // output pixel's window from the padded copy, the patches (im2col: loops sn, sc, sky, skx, sy,
  // sx, stored [n][c][ky][kx][oy][ox]), and the conv reads them as a 1x1 conv over C x KH x KW
  // values does its input: a pixel vector per (c, ky, kx), each weight broadcast.
  bool pointwise = KH == 1 && KW == 1 && !padded;
  bool subsample = s_.pixel_vectors && pointwise && (st[0] > 1 || st[1] > 1);
  bool patches = s_.pixel_vectors && !pointwise && !b && OG == ws[0];
  int64_t OH = os[2], OW = os[3];
  if (subsample || patches) {
    int64_t N = xs[0], K = patches ? KH * KW : 1;
    Buffer gathered = make_buffer(patches ? "patches" : "subsampled", Type::kF32, N * C * K * OH * OW, BufferScope::kTemp);
    k_.buffers.push_back(gathered);
    std::vector<std::string> loops{"sn", "sc"};
    std::vector<int64_t> extents{N, C};
    Expr row = var("sn") * C + var("sc"), y = var("sy") * st[0], x = var("sx") * st[1];
    if (patches) {
      loops.insert(loops.end(), {"sky", "skx"}), extents.insert(extents.end(), {KH, KW});
      row = (row * KH + var("sky")) * KW + var("skx");
      y = y + var("sky") * dl[0], x = x + var("skx") * dl[1];
    }
    loops.insert(loops.end(), {"sy", "sx"}), extents.insert(extents.end(), {OH, OW});
    Expr value = padded ? load(src, ((var("sn") * C + var("sc")) * PH + y) * PW + x) : value_at(conv.inputs[0], {var("sn"), var("sc"), y, x});
    Stmt copy = store(gathered, (row * OH + var("sy")) * OW + var("sx"), value);
    add_stage(patches ? "patches" : "subsample", "u", 1, loop_nest(loops, extents, copy));
    src = gathered;
  }
  return naive_reduction(
      os, {CG, KH, KW}, Combine::kSum, [&](const Index &i) { return bias(i[1]); },
      [&](const Index &i, const Index &r) {
        Expr cin = (i[1] / int_imm(OG)) * CG + r[0];
        if (OG == ws[0]) cin = r[0];  // one group: affine
        Expr y = i[2] * st[0] + r[1] * dl[0], x = i[3] * st[1] + r[2] * dl[1];
        if (subsample) return load(src, ((i[0] * C + cin) * OH + i[2]) * OW + i[3]) * load(w, i[1] * CG + r[0]);
        if (patches)
          return load(src, ((((i[0] * C + r[0]) * KH + r[1]) * KW + r[2]) * OH + i[2]) * OW + i[3]) *
                 load(w, ((i[1] * CG + r[0]) * KH + r[1]) * KW + r[2]);
        Expr xin = padded ? load(src, ((i[0] * C + cin) * PH + y) * PW + x) : value_at(conv.inputs[0], {i[0], cin, y, x});
        return xin * load(w, ((i[1] * CG + r[0]) * KH + r[1]) * KW + r[2]);
      },
      [](const Expr &a, const Index &) { return a; }, "conv2d");
}

namespace {
/** sum_k coef[k] * x[k] as an expression: zero terms skipped, +-1 as adds and subtracts. */
Expr linear(const std::vector<double> &coef, const std::vector<Expr> &x) {
  Expr r;
  for (size_t k = 0; k < coef.size(); ++k) {
    double c = coef[k];
    if (c == 0) continue;
    Expr term = c == 1 || c == -1 ? x[k] : x[k] * float_imm(std::fabs(c));
    r = !r ? (c < 0 ? float_imm(0) - term : term) : (c < 0 ? r - term : r + term);
  }
  return r ? r : float_imm(0);
}

/** rows x a matrix `m` times the a x a expressions `x` (the left half of a transform m x m^T). */
std::vector<std::vector<Expr>> left_multiply(const std::vector<std::vector<double>> &m, const std::vector<std::vector<Expr>> &x) {
  std::vector<std::vector<Expr>> out(m.size(), std::vector<Expr>(x.size()));
  for (size_t i = 0; i < m.size(); ++i)
    for (size_t j = 0; j < x.size(); ++j) {
      std::vector<Expr> col;
      for (const auto &row : x) col.push_back(row[j]);
      out[i][j] = linear(m[i], col);
    }
  return out;
}
}  // namespace

/**
 * Winograd F(m x m, 3x3), m = 2 or 4 (Lavin and Gray), as naive nests that steps schedule: each
 * m x m block of outputs ("tile") comes from an a x a patch d of the padded input (a = m + 2) as
 * Y = A^T [sum_c (G g G^T) . (B^T d B)] A:
 *   pad        the padded input, m * TH + 2 rows of m * TW + 2 columns (NCHW: each row's columns
 *              split into m phases, so a tile's column j of consecutive tiles is contiguous);
 *   wino_in    for vn, vc, vy, vx [, vl]: the a x a values V[xi][n][c][t] = (B^T d B)[xi] of tile
 *              t = vy * TW + vx, written out as sums of the patch's loads (zero terms left out);
 *   wino_gemm  for i0 xi, i1 n, i2 o, i3 t [, i4 o % b]: M = sum over k0 c [, k1 c % b] of
 *              V[xi][n][c][t] * U[xi][c][o], U = G g G^T packed at load time ([xi][c][o]);
 *   wino_out   for i0 n, i1 o, i2 ty, i3 tx [, i4 o % b]: the tile's m x m outputs A^T M A plus
 *              the bias and the epilogue; in the last tile row or column, the outputs past the edge
 *              are skipped by a branch on the tile.
 * conv2d_nchwc (b lanes per channel block): V and M are [xi][n][c/b][t][b], the lanes innermost.
 */
Status Lowerer::naive_winograd() {
  const Node &conv = g_.nodes[anchor_];
  if (!winograd_eligible(g_, conv)) return make_error("winograd needs a 3x3 conv of stride 1, dilation 1, one group and an argument weight");
  if (s_.winograd != 2 && s_.winograd != 4) return make_error("winograd " + std::to_string(s_.winograd) + " is not 0, 2 or 4");
  const WinogradMatrices &wm = winograd_matrices(s_.winograd);
  const int m = wm.m, a = wm.a;
  const Shape &xs = g_.type_of(conv.inputs[0]).shape, &os = conv.type.shape;
  const int64_t cb = conv_block(conv), b = std::max<int64_t>(1, cb);
  const int64_t N = xs[0], CB = xs[1], OB = os[1], OH = os[2], OW = os[3], C = CB * b, O = OB * b;
  const int64_t TH = (OH + m - 1) / m, TW = (OW + m - 1) / m, T = TH * TW, PH = m * TH + 2, phases = cb ? 1 : m;
  // NCHW: each phase a run of TW + 1 columns (tile tx reads columns tx and tx + 1 of each phase).
  const int64_t PW = cb ? m * TW + 2 : m * (TW + 1);
  k_.schedule = "naive nest";
  k_.packings.push_back({conv.inputs[1].index, WeightPacking::kWinograd, O, m});
  Buffer u = params_[conv.inputs[1].index];
  Buffer src = naive_pad(conv, PH, PW, phases);
  Buffer vbuf = make_buffer("wino_v", Type::kF32, a * a * N * C * T, BufferScope::kTemp);
  Buffer mbuf = make_buffer("wino_m", Type::kF32, a * a * N * O * T, BufferScope::kTemp);
  k_.buffers.push_back(vbuf);
  k_.buffers.push_back(mbuf);
  // Element (xi, n, block or channel c, tile t, lane l) of V or M (`blocks` channel blocks).
  auto vm_at = [&](const Expr &xi, const Expr &n, const Expr &c, const Expr &t, const Expr &l, int64_t blocks) {
    Expr at = ((xi * N + n) * blocks + c) * T + t;
    return cb ? at * b + l : at;
  };
  // The nest's loops around `body`: names and extents, a lane loop last for conv2d_nchwc.
  auto nest = [&](std::vector<std::string> names, std::vector<int64_t> extents, const std::string &lane, const Stmt &body) {
    if (cb) names.push_back(lane), extents.push_back(b);
    return loop_nest(names, extents, body);
  };
  Expr lane = cb ? var("vl") : int_imm(0);
  {
    Expr n = var("vn"), c = var("vc"), ty = var("vy"), tx = var("vx");
    std::vector<std::vector<Expr>> d(a, std::vector<Expr>(a));
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < a; ++j) {
        // Column tx * m + j of the row: in phase j % m at tx + j / m (NCHW), or plain (blocked).
        Expr col = cb ? tx * m + int_imm(j) : int_imm((j % m) * (PW / m) + j / m) + tx;
        Expr at = ((n * CB + c) * PH + ty * m + int_imm(i)) * PW + col;
        d[i][j] = load(src, cb ? at * b + lane : at);
      }
    std::vector<std::vector<Expr>> t = left_multiply(wm.bt, d);  // B^T d
    std::vector<Stmt> stores;
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < a; ++j)  // (B^T d) B: row i of t against row j of B^T
        stores.push_back(store(vbuf, vm_at(int_imm(i * a + j), n, c, ty * TW + tx, lane, CB), linear(wm.bt[j], t[i])));
    add_stage("wino_in", "u", 1, nest({"vn", "vc", "vy", "vx"}, {N, CB, TH, TW}, "vl", seq(stores)));
  }
  {
    Buffer acc = make_buffer("acc", Type::kF32, 1, BufferScope::kLocal);
    Expr xi = var("i0"), n = var("i1"), o = var("i2"), t = var("i3"), ol = cb ? var("i4") : int_imm(0);
    Expr c = var("k0"), cl = cb ? var("k1") : int_imm(0), zero = int_imm(0);
    Expr vin = load(vbuf, vm_at(xi, n, c, t, cl, CB)), w = load(u, (xi * C + c * b + cl) * O + o * b + ol);
    std::vector<std::string> red{"k0"};
    std::vector<int64_t> rext{CB};
    if (cb) red.push_back("k1"), rext.push_back(b);
    Stmt update = loop_nest(red, rext, store(acc, zero, call("fmuladd", {vin, w, load(acc, zero)})));
    Stmt body = allocate(acc, seq({store(acc, zero, float_imm(0)), update, store(mbuf, vm_at(xi, n, o, t, ol, OB), load(acc, zero))}));
    add_stage("wino_gemm", "u", 1, nest({"i0", "i1", "i2", "i3"}, {a * a, N, OB, T}, "i4", body));
  }
  {
    Expr n = var("i0"), o = var("i1"), ty = var("i2"), tx = var("i3"), l = cb ? var("i4") : int_imm(0);
    Expr oc = o * b + l;
    Expr bias = conv.inputs.size() == 3 ? value_at(conv.inputs[2], {oc}) : float_imm(0);
    std::vector<std::vector<Expr>> mm(a, std::vector<Expr>(a));
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < a; ++j) mm[i][j] = load(mbuf, vm_at(int_imm(i * a + j), n, o, ty * TW + tx, l, OB));
    std::vector<std::vector<Expr>> t = left_multiply(wm.at, mm);  // A^T M
    int64_t last_rows = OH - m * (TH - 1), last_cols = OW - m * (TW - 1);  // outputs of the last tile row / column
    std::vector<Stmt> stores;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        Index at{n, o, ty * m + int_imm(i), tx * m + int_imm(j)};  // the output's block and lane as they are (affine in the loops)
        if (cb) at.push_back(l);
        Stmt st = store_output(at, linear(wm.at[j], t[i]) + bias);
        Expr inside;
        if (i >= last_rows) inside = ty < int_imm(TH - 1);
        if (j >= last_cols) inside = inside ? both(inside, tx < int_imm(TW - 1)) : tx < int_imm(TW - 1);
        stores.push_back(inside ? if_then(inside, st) : st);
      }
    add_stage("wino_out", "u", 1, nest({"i0", "i1", "i2", "i3"}, {N, OB, TH, TW}, "i4", seq(stores)));
  }
  return Status::ok();
}

}  // namespace autotune::lowering

// The conv templates: register-blocked (packed weights, an output block in registers) and direct
// (depthwise and narrow groups), and the padded, phase-split copies of their inputs.
#include "codegen/Lowerer.h"

#include <cmath>
#include <optional>

#include "codegen/Winograd.h"

namespace autotune::lowering {

namespace {
/** floor(a / d) for d > 0. */
int64_t floor_div(int64_t a, int64_t d) { return a >= 0 ? a / d : -((-a + d - 1) / d); }
}  // namespace

Stmt Lowerer::zero_run(const Buffer &buf, const Expr &base, int64_t from, int64_t count) {
  return row_loops(count, [&](Expr x, int lanes, Expr lane) { return lanes_of(lanes, lane, store(buf, base + x, float_imm(0))); }, from);
}

std::vector<Stmt> Lowerer::pixel_epilogue_stores(const Buffer &acc, const Expr &n, const Expr &oc0, int64_t OB, const Expr &y, const Expr &x0, int64_t np) {
  std::vector<Stmt> out;
  for (int64_t c = 0; c < OB; ++c) {
    std::string q = fresh("q");
    out.push_back(for_loop(q, int_imm(0), int_imm(np), ForKind::kVectorized,
                           store_output({n, oc0 + int_imm(c), y, x0 + var(q)}, load(acc, var(q) * OB + int_imm(c)))));
  }
  return out;
}

Lowerer::Source Lowerer::padded_geometry(const Node &conv, int64_t phases, int64_t min_h, int64_t min_w) const {
  const Shape &xs = g_.type_of(conv.inputs[0]).shape;
  const auto &p = conv.attrs.ints("padding");
  // min_h/min_w: Winograd tiles of an odd output reach a row/column past the padding (zeros too).
  int64_t hp = std::max(xs[2] + p[0] + p[2], min_h), wp = std::max(xs[3] + p[1] + p[3], min_w);
  Source src{nullptr, hp, 0};
  src.phases = phases, src.wq = (wp + phases - 1) / phases, src.w = phases * src.wq, src.wp = wp;
  return src;
}

Stmt Lowerer::padded_row(const Node &conv, const Source &src, const Expr &base, const Expr &n, const Expr &c, const Expr &py) {
  const Shape &xs = g_.type_of(conv.inputs[0]).shape;
  const auto &p = conv.attrs.ints("padding");
  int64_t H = xs[2], W = xs[3], phases = src.phases, wq = src.wq;
  auto zeros = [&](int64_t from, int64_t count) { return zero_run(src.buf, base, from, count); };
  Expr y = py - int_imm(p[0]);
  // A row inside the input: per phase, the zero columns before the input, the input's columns
  // (plain reads: contiguous, or wide loads and a shuffle for a small stride), the zeros after.
  std::vector<Stmt> parts;
  for (int64_t ph = 0; ph < phases; ++ph) {
    int64_t count = (src.wp - ph + phases - 1) / phases;  // this phase's columns of the padded row
    int64_t qb = std::clamp<int64_t>(floor_div(p[1] - ph + phases - 1, phases), 0, count);  // first q with q*phases + ph >= p[1]
    int64_t qe = std::clamp<int64_t>(floor_div(W - 1 + p[1] - ph, phases) + 1, qb, count);   // past the last inside
    parts.push_back(zeros(ph * wq, qb));
    parts.push_back(row_loops(qe - qb, [&, ph](Expr q, int lanes, Expr lane) {
      Expr v = value_at(conv.inputs[0], {n, c, y, q * phases + int_imm(ph - p[1])});
      return lanes_of(lanes, lane, store(src.buf, base + int_imm(ph * wq) + q, v));
    }, qb));
    parts.push_back(zeros(ph * wq + qe, wq - qe));
  }
  return if_then(in_range(y, 0, H), seq(parts), zeros(0, phases * wq));
}

Index Lowerer::conv_output_index(const Node &conv, const Expr &n, const Expr &oc, const Expr &oy, const Expr &ox) const {
  if (int64_t b = conv_block(conv)) return {n, oc / int_imm(b), oy, ox, oc % int_imm(b)};
  return {n, oc, oy, ox};
}

Lowerer::Source Lowerer::conv_source(const Node &conv, bool padding_inline, int64_t phases, int64_t min_h, int64_t min_w) {
  const Shape &xs = g_.type_of(conv.inputs[0]).shape;
  Source src = padded_geometry(conv, phases, min_h, min_w);
  bool padded = (src.h != xs[2] || src.wp != xs[3]) && !padding_inline;
  if (!padded && phases == 1 && conv.inputs[0].kind == ValueId::Kind::kInput) return {params_[conv.inputs[0].index], xs[2], xs[3]};
  if (int64_t b = conv_block(conv)) {
    // conv2d_nchwc: the copy is [n][c/b][hp][wp][b], rows of wp * b floats, each pixel's channel
    // block whole; its rows in (n, y, block) order.
    src.buf = make_buffer("padded", Type::kF32, xs[0] * xs[1] * src.h * src.w * b, BufferScope::kTemp);
    k_.buffers.push_back(src.buf);
    const auto &p = conv.attrs.ints("padding");
    int64_t CB = xs[1], H = xs[2], W = xs[3];
    Index r = unravel(var("r"), {xs[0], src.h, CB});
    Expr n = r[0], py = r[1], cb = r[2], y = py - int_imm(p[0]);
    Expr base = ((n * CB + cb) * src.h + py) * (src.w * b);
    auto zeros = [&](int64_t from, int64_t count) { return zero_run(src.buf, base, from, count); };
    std::string x = fresh("x"), ci = fresh("ci");
    Stmt copy = for_loop(x, int_imm(0), int_imm(W), ForKind::kSerial,
                         for_loop(ci, int_imm(0), int_imm(b), ForKind::kVectorized,
                                  store(src.buf, base + (var(x) + int_imm(p[1])) * b + var(ci), value_at(conv.inputs[0], {n, cb, y, var(x), var(ci)}))));
    add_stage("pad", "r", xs[0] * src.h * CB,
              if_then(in_range(y, 0, H), seq({zeros(0, p[1] * b), copy, zeros((p[1] + W) * b, (src.w - p[1] - W) * b)}), zeros(0, src.w * b)));
    return src;
  }
  src.buf = make_buffer(phases > 1 ? "phased" : "padded", Type::kF32, xs[0] * xs[1] * src.h * src.w, BufferScope::kTemp);
  k_.buffers.push_back(src.buf);
  Index pidx = unravel(var("r"), {xs[0], xs[1], src.h});
  add_stage(phases > 1 ? "pad_phases" : "pad", "r", xs[0] * xs[1] * src.h,
            padded_row(conv, src, ravel(pidx, {xs[0], xs[1], src.h}) * src.w, pidx[0], pidx[1], pidx[2]));
  return src;
}

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
  bool subsample = s_.pixel_vectors && !padded && KH == 1 && KW == 1 && (st[0] > 1 || st[1] > 1);
  if (subsample) {
    int64_t N = xs[0], OH = os[2], OW = os[3];
    src = make_buffer("subsampled", Type::kF32, N * C * OH * OW, BufferScope::kTemp);
    k_.buffers.push_back(src);
    Stmt copy = store(src, ((var("sn") * C + var("sc")) * OH + var("sy")) * OW + var("sx"),
                      value_at(conv.inputs[0], {var("sn"), var("sc"), var("sy") * st[0], var("sx") * st[1]}));
    add_stage("subsample", "u", 1, loop_nest({"sn", "sc", "sy", "sx"}, {N, C, OH, OW}, copy));
  }
  return naive_reduction(
      os, {CG, KH, KW}, Combine::kSum, [&](const Index &i) { return bias(i[1]); },
      [&](const Index &i, const Index &r) {
        Expr cin = (i[1] / int_imm(OG)) * CG + r[0];
        if (OG == ws[0]) cin = r[0];  // one group: affine
        Expr y = i[2] * st[0] + r[1] * dl[0], x = i[3] * st[1] + r[2] * dl[1];
        if (subsample) return load(src, ((i[0] * C + cin) * os[2] + i[2]) * os[3] + i[3]) * load(w, i[1] * CG + r[0]);
        Expr xin = padded ? load(src, ((i[0] * C + cin) * PH + y) * PW + x) : value_at(conv.inputs[0], {i[0], cin, y, x});
        return xin * load(w, ((i[1] * CG + r[0]) * KH + r[1]) * KW + r[2]);
      },
      [](const Expr &a, const Index &) { return a; }, "conv2d");
}

Status Lowerer::lower_conv2d() {
  AT_TRY(check_inlinable());
  if (naive_) return naive_conv2d();
  if (s_.winograd) return lower_winograd();
  if (rows_eligible(g_.nodes[anchor_], s_)) return lower_conv_rows();
  // Every other conv's knobs stand for steps (steps_of_knobs in Lower.cpp): with channel blocks the
  // tile sketch's flat pixels, row tiles or pixel lanes (blocked_steps); without, the loop sketch.
  return make_error(g_.nodes[anchor_].op + ": its knobs stand for steps (steps_of_knobs), not a template");
}

/**
 * A conv with its padding in the tiles (pad_at_root = false; rows_eligible): no padded copy, so
 * no stage (and no barrier) before the conv, and the input is read where it is. NCHW16c or NCHW
 * (with the pixel epilogue: a tile's pixels are contiguous in their row). Register tiles run along
 * output rows: OB channels x up to PB pixels of one row, the reduction over (c, ky, kx)
 * innermost as in the blocked template. Kernel rows outside the input are skipped by the bounds
 * of the ky loop, computed per output row. Kernel columns outside it are skipped where the tile's
 * columns are known when the kernel is built: the first and last tiles of a row (and a row's
 * narrower last tile) select 0 for the pixels whose column falls outside (their reads clamped
 * into the row), while the tiles between them, whose columns are all inside, run as a loop
 * without checks (MLAS and oneDNN also treat border tiles apart). Threads split output-channel
 * blocks, rows, or both.
 */
Status Lowerer::lower_conv_rows() {
  const Node &conv = g_.nodes[anchor_];
  const Shape &xs = g_.type_of(conv.inputs[0]).shape, &ws = g_.type_of(conv.inputs[1]).shape, &os = conv.type.shape;
  const auto &st = conv.attrs.ints("strides"), &dl = conv.attrs.ints("dilation"), &pd = conv.attrs.ints("padding");
  // NCHW is NCHW[1]c here: x[n][c][y][x] = x[n][c / 1][y][x][c % 1].
  int64_t b = std::max<int64_t>(1, conv_block(conv)), N = xs[0], CB = xs[1], C = CB * b, H = xs[2], W = xs[3];
  int64_t O = ws[0], KH = ws[2], KW = ws[3], OH = os[2], OW = os[3];
  int V = s_.vector_width, OB = s_.oc_block;
  int64_t PB = std::min<int64_t>(std::max(1, s_.px_block), OW), OBN = O / OB, TPR = (OW + PB - 1) / PB;
  k_.packings.push_back({conv.inputs[1].index, WeightPacking::kOIHWToOIHWo, OB});
  k_.schedule = std::string(b > 1 ? "conv nchwc" : "conv") + ", padding in the tiles, " + k_.schedule;
  bool pixel_epilogue = s_.pixel_epilogue;  // NCHW: a channel at a time, the tile's pixels (contiguous in its row) as the vector
  Buffer x = params_[conv.inputs[0].index], wp = params_[conv.inputs[1].index];
  auto bias = [&](const Expr &o) -> Expr { return conv.inputs.size() == 3 ? value_at(conv.inputs[2], {o}) : float_imm(0); };
  auto column_inside = [&](int64_t ox, int64_t kx) {
    int64_t c = ox * st[1] - pd[1] + kx * dl[1];
    return c >= 0 && c < W;
  };
  // A tile of np pixels from column ox0 (a constant: an edge tile, its outside columns left out;
  // else a loop variable's tile, all inside) of output row oy.
  auto block = [&](const Expr &n, const Expr &ob, const Expr &oy, const Expr &ox0, std::optional<int64_t> ox0_const, int64_t np) -> Stmt {
    Buffer acc = make_buffer(fresh("acc"), Type::kF32, np * OB, BufferScope::kLocal);
    std::string v = fresh("v"), iy = fresh("iy");
    Expr lane = var(v);
    auto vec = [&](Stmt s) { return for_loop(v, int_imm(0), int_imm(V), ForKind::kVectorized, s); };
    std::vector<Stmt> init, fma, epilogue;
    std::string row = fresh("row");
    std::vector<std::pair<std::string, Expr>> lets = {{iy, oy * st[0] - int_imm(pd[0])}, {row, ((n * CB) * H + var(iy)) * W * b}};
    for (int64_t p = 0; p < np; ++p) {
      Expr ox = ox0 + int_imm(p);
      bool all_inside = true;
      if (ox0_const)
        for (int64_t kx = 0; kx < KW; ++kx) all_inside &= column_inside(*ox0_const + p, kx);
      Expr xin;
      if (all_inside) {
        std::string base = fresh("ib");
        lets.emplace_back(base, var(row) + (ox * st[1] - int_imm(pd[1])) * b);
        xin = load(x, var(base) + var("off"));
      } else {
        // A pixel some of whose kernel columns fall outside: its column clamped into the row (so
        // the read stays inside the tensor) and the value selected to 0 outside. Unrolling kx to
        // leave those FMAs out spilled the 28 accumulators (2.5x slower).
        Expr col = ox * st[1] - int_imm(pd[1]) + var("kx") * dl[1];
        xin = select(in_range(col, 0, W), load(x, var(row) + clamp(col, 0, W - 1) * b + var("offc")), float_imm(0));
      }
      for (int64_t o = 0; o < OB / V; ++o) {
        Expr ai = int_imm(p * OB + o * V) + lane;
        Expr oc = ob * OB + int_imm(o * V) + lane;
        init.push_back(vec(store(acc, ai, bias(oc))));
        Expr wv = load(wp, var("wb") + int_imm(o * V) + lane);
        fma.push_back(vec(store(acc, ai, call("fmuladd", {xin, wv, load(acc, ai)}))));
        if (!pixel_epilogue)
          epilogue.push_back(vec(store_output(conv_output_index(conv, n, oc, oy, ox), load(acc, ai))));
      }
    }
    if (pixel_epilogue) epilogue = pixel_epilogue_stores(acc, n, ob * OB, OB, oy, ox0, np);
    // Kernel rows inside the input: ky in [max(0, ceil(-iy / dl)), min(KH, floor((H - 1 - iy) / dl) + 1)).
    Expr ky0 = max(int_imm(0), (int_imm(dl[0] - 1) - var(iy)) / int_imm(dl[0]));
    Expr ky1 = min(int_imm(KH), (int_imm(H - 1) - var(iy)) / int_imm(dl[0]) + int_imm(1));
    Stmt reduce = let("wb", (((ob * C + var("c")) * KH + var("ky")) * KW + var("kx")) * OB,
                      let("off", var("offc") + var("kx") * (dl[1] * b), seq({seq(fma), seq(prefetch_ahead(wp, var("wb"), OB))})));
    reduce = for_loop("kx", int_imm(0), int_imm(KW), s_.unroll_kx ? ForKind::kUnrolled : ForKind::kSerial, reduce);
    reduce = let("offc", (var("c") / int_imm(b) * H + var("ky") * dl[0]) * W * b + var("c") % int_imm(b), reduce);
    reduce = let("ky0", ky0, for_loop("ky", var("ky0"), max(int_imm(0), ky1 - var("ky0")), ForKind::kSerial, reduce));
    reduce = for_loop("c", int_imm(0), int_imm(C), ForKind::kSerial, reduce);
    Stmt body = seq({seq(init), reduce, seq(epilogue)});
    for (auto it = lets.rbegin(); it != lets.rend(); ++it) body = let(it->first, it->second, body);
    return allocate(acc, body);
  };
  // A row: its edge tiles with constant columns, the tiles between them as a loop.
  auto row = [&](const Expr &n, const Expr &ob, const Expr &oy) -> Stmt {
    std::vector<Stmt> parts;
    auto inside = [&](int64_t t) {
      int64_t np = std::min(PB, OW - t * PB);
      for (int64_t p = 0; p < np; ++p)
        for (int64_t kx = 0; kx < KW; ++kx)
          if (!column_inside(t * PB + p, kx)) return false;
      return np == PB;
    };
    for (int64_t t = 0; t < TPR;) {
      if (!inside(t)) {
        parts.push_back(block(n, ob, oy, int_imm(t * PB), t * PB, std::min(PB, OW - t * PB)));
        ++t;
        continue;
      }
      int64_t t1 = t;
      while (t1 < TPR && inside(t1)) ++t1;
      std::string tv = fresh("t");
      parts.push_back(for_loop(tv, int_imm(t), int_imm(t1 - t), ForKind::kSerial, block(n, ob, oy, var(tv) * PB, std::nullopt, PB)));
      t = t1;
    }
    return seq(parts);
  };
  Expr u = var("u");
  switch (s_.parallel) {
    case KernelSchedule::Parallel::kOc:
      add_stage("conv2d", "u", N * OBN, for_loop("oy", int_imm(0), int_imm(OH), ForKind::kSerial, row(u / int_imm(OBN), u % int_imm(OBN), var("oy"))));
      break;
    case KernelSchedule::Parallel::kPx:
      add_stage("conv2d", "u", N * OH, for_loop("ob", int_imm(0), int_imm(OBN), ForKind::kSerial, row(u / int_imm(OH), var("ob"), u % int_imm(OH))));
      break;
    case KernelSchedule::Parallel::kOcPx:
      add_stage("conv2d", "u", N * OBN * OH, row(u / int_imm(OBN * OH), (u / int_imm(OH)) % int_imm(OBN), u % int_imm(OH)));
      break;
  }
  return Status::ok();
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
 * Winograd F(m x m, 3x3), m = 2 or 4 (Lavin and Gray), the NCHW template: each m x m block of
 * outputs ("tile") comes from an a x a patch d of the padded input (a = m + 2) as
 * Y = A^T [sum_c (G g G^T) . (B^T d B)] A. Three stages:
 *   wino_in    V[xi][n][c][t] = (B^T d B)[xi] for every tile t;
 *   wino_gemm  M[xi][n][o][t] = sum_c U[xi][o][c] V[xi][n][c][t]: per position xi a GEMM with the
 *              conv's register block (oc_block channels x px_block tiles), U packed at load time;
 *   wino_out   Y = A^T M A per tile, plus the bias and the epilogue, stored at (m ty + dy, m tx + dx).
 * The transforms are vectorized over a row of tiles (the padded copy's columns split into m
 * phases, so a row of tiles reads contiguously), and the GEMM stores M one channel at a time.
 * conv2d_nchwc's Winograd is the same algorithm as steps on its naive nests (lower_group maps
 * these knobs to the Winograd sketch's list there).
 */
Status Lowerer::lower_winograd() {
  const Node &conv = g_.nodes[anchor_];
  if (conv_block(conv)) return make_error("conv2d_nchwc's Winograd is lowered as steps (winograd_steps_of_knobs)");
  const WinogradMatrices &wm = winograd_matrices(s_.winograd);
  const int m = wm.m, a = wm.a, P = a * a;
  const Shape &xs = g_.type_of(conv.inputs[0]).shape, &os = conv.type.shape;
  int64_t N = xs[0], C = xs[1], O = os[1], OH = os[2], OW = os[3];
  int64_t TH = (OH + m - 1) / m, TW = (OW + m - 1) / m, T = TH * TW;
  int V = s_.vector_width, OB = s_.oc_block;
  int64_t OBN = O / OB, PB = std::max(1, s_.px_block), PBF = T / PB;
  k_.schedule = "winograd F(" + std::to_string(m) + "x" + std::to_string(m) + ", 3x3), " + k_.schedule;
  k_.packings.push_back({conv.inputs[1].index, WeightPacking::kWinograd, OB, m});
  Buffer u = params_[conv.inputs[1].index];
  Source src = conv_source(conv, false, m, m * TH + 2, m * TW + 2);
  Buffer vbuf = make_buffer("wino_v", Type::kF32, P * N * C * T, BufferScope::kTemp);
  Buffer mbuf = make_buffer("wino_m", Type::kF32, P * N * O * T, BufferScope::kTemp);
  k_.buffers.push_back(vbuf);
  k_.buffers.push_back(mbuf);
  // V's and M's element (xi, n, channel c of `channels`, tile t).
  auto vm_at = [&](const Expr &xi, const Expr &n, const Expr &c, const Expr &t, int64_t channels) -> Expr {
    return ((xi * N + n) * channels + c) * T + t;
  };

  // Input transform: one row of tiles of one (image, channel) per unit.
  {
    Index r = unravel(var("r"), {N, C, TH});
    Stmt body = row_loops(TW, [&](Expr tx, int lanes, Expr lane) {
      std::vector<std::vector<Expr>> d(a, std::vector<Expr>(a));
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < a; ++j)
          d[i][j] = load(src.buf, ((r[0] * C + r[1]) * src.h + r[2] * m + int_imm(i)) * src.w + src.column(tx, int_imm(j)));
      std::vector<std::vector<Expr>> t = left_multiply(wm.bt, d);  // B^T d
      std::vector<Stmt> stores;
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < a; ++j)  // (B^T d) B: row i of t against row j of B^T
          stores.push_back(store(vbuf, vm_at(int_imm(i * a + j), r[0], r[1], r[2] * TW + tx, C), linear(wm.bt[j], t[i])));
      return lanes_of(lanes, lane, seq(stores));
    });
    add_stage("wino_in", "r", N * C * TH, body);
  }

  // The GEMMs: unit u = (xi, n, channel block); tiles in blocks of PB, the rest in a last block.
  {
    Expr u_ = var("u"), xi = u_ / int_imm(N * OBN), n = (u_ / int_imm(OBN)) % int_imm(N), ob = u_ % int_imm(OBN);
    auto block = [&](const Expr &t0, int64_t np) -> Stmt {
      Buffer acc = make_buffer(fresh("acc"), Type::kF32, np * OB, BufferScope::kLocal);
      std::string v = fresh("v");
      Expr lane = var(v);
      auto vec = [&](Stmt st) { return for_loop(v, int_imm(0), int_imm(V), ForKind::kVectorized, st); };
      std::vector<Stmt> init, fma, out;
      for (int64_t p = 0; p < np; ++p)
        for (int64_t k = 0; k < OB / V; ++k) {
          Expr ai = int_imm(p * OB + k * V) + lane;
          init.push_back(vec(store(acc, ai, float_imm(0))));
          Expr wv = load(u, var("ub") + int_imm(k * V) + lane);
          fma.push_back(vec(store(acc, ai, call("fmuladd", {load(vbuf, var("vb") + int_imm(p)), wv, load(acc, ai)}))));
        }
      for (int64_t cc = 0; cc < OB; ++cc) {  // one channel at a time, the tiles as the vector: contiguous in M
        std::string q = fresh("q");
        out.push_back(for_loop(q, int_imm(0), int_imm(np), ForKind::kVectorized,
                               store(mbuf, vm_at(xi, n, ob * OB + int_imm(cc), t0 + var(q), O), load(acc, var(q) * OB + int_imm(cc)))));
      }
      Stmt reduce = let("ub", ((xi * OBN + ob) * C + var("c")) * OB,
                        let("vb", vm_at(xi, n, var("c"), t0, C), seq({seq(fma), seq(prefetch_ahead(u, var("ub"), OB))})));
      reduce = for_loop("c", int_imm(0), int_imm(C), ForKind::kSerial, reduce);
      return allocate(acc, seq({seq(init), reduce, seq(out)}));
    };
    std::vector<Stmt> parts;
    if (PBF > 0) parts.push_back(for_loop("pb", int_imm(0), int_imm(PBF), ForKind::kSerial, block(var("pb") * PB, PB)));
    if (T % PB) parts.push_back(block(int_imm(PBF * PB), T % PB));
    add_stage("wino_gemm", "u", P * N * OBN, seq(parts));
  }

  // Output transform, bias and epilogue: one row of tiles of one (image, channel) per unit.
  {
    Index r = unravel(var("r"), {N, O, TH});
    int64_t last_rows = OH - m * (TH - 1), last_cols = OW - m * (TW - 1);  // outputs of the last tile row / column
    auto tile = [&](const Expr &tx, int64_t cols) {
      Expr bias = conv.inputs.size() == 3 ? value_at(conv.inputs[2], {r[1]}) : float_imm(0);
      std::vector<std::vector<Expr>> mm(a, std::vector<Expr>(a));
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < a; ++j) mm[i][j] = load(mbuf, vm_at(int_imm(i * a + j), r[0], r[1], r[2] * TW + tx, O));
      std::vector<std::vector<Expr>> t = left_multiply(wm.at, mm);  // A^T M
      std::vector<Stmt> rows;
      for (int i = 0; i < m; ++i) {  // (A^T M) A, row by row
        std::vector<Stmt> row;
        for (int j = 0; j < cols; ++j)
          row.push_back(store_output({r[0], r[1], r[2] * m + int_imm(i), tx * m + int_imm(j)}, linear(wm.at[j], t[i]) + bias));
        // Rows of the last tile row past the output (OH not a multiple of m) are not stored.
        rows.push_back(i < last_rows ? seq(row) : if_then(r[2] < int_imm(TH - 1), seq(row)));
      }
      return seq(rows);
    };
    std::vector<Stmt> parts;
    parts.push_back(row_loops(OW / m, [&](Expr tx, int lanes, Expr lane) { return lanes_of(lanes, lane, tile(tx, m)); }));
    if (OW % m) parts.push_back(tile(int_imm(TW - 1), last_cols));
    add_stage("wino_out", "r", N * O * TH, seq(parts));
  }
  return Status::ok();
}

/**
 * Winograd F(m x m, 3x3) as naive nests that steps schedule (issue 10), the same algorithm as
 * lower_winograd's template:
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

// Loop transformations (codegen/Transform): every transformed nest is JIT-compiled and its
// result checked against the reference executor; every refusal gives its reason.
#include <gtest/gtest.h>

#include <random>

#include "codegen/Jit.h"
#include "codegen/Lower.h"
#include "codegen/Schedule.h"
#include "codegen/Sketch.h"
#include "codegen/Steps.h"
#include "codegen/Transform.h"
#include "ir/Parser.h"
#include "ir/Reference.h"
#include "runtime/BoundKernel.h"
#include "tests/codegen/RandomSteps.h"

namespace autotune {
namespace {

using namespace loop;

constexpr int64_t M = 24, K = 20;

/** Compiles `k`, runs it on 2 threads and returns its largest error relative to `expected` (1e9 when it does not compile). */
double run_kernel(const LoweredKernel &k, const std::vector<Tensor> &args, const Tensor &expected) {
  static auto jit = Jit::create({""});
  EXPECT_TRUE(static_cast<bool>(jit));
  auto ck = (*jit)->compile(k);
  EXPECT_TRUE(static_cast<bool>(ck)) << (ck ? "" : ck.error().message) << "\n" << k.to_string();
  if (!ck) return 1e9;
  BoundKernel bound(k, *ck, args, Tensor(expected.type()));
  ThreadPool pool(2);
  bound.run(pool);
  auto d = compare(bound.output(), expected);
  EXPECT_TRUE(static_cast<bool>(d));
  return d ? d->relative() : 1e9;
}

/** A one-op graph, its seeded inputs and the reference executor's output, against which kernels are checked. */
struct ReferenceCase {
  Graph graph;
  std::vector<Tensor> args;
  Tensor expected;

  void set(const std::string &text, uint64_t seed) {
    auto g = parse_text(text);
    EXPECT_TRUE(static_cast<bool>(g)) << (g ? "" : g.error().message);
    graph = g.take();
    args = random_inputs(graph, seed);
    auto r = run_reference(graph, args);
    EXPECT_TRUE(static_cast<bool>(r));
    expected = (*r)[0];
  }
  double run(const LoweredKernel &k) const { return run_kernel(k, args, expected); }
};

/** C = A x B as the reference executor computes it, and the naive nests that compute it. */
struct Matmul : ReferenceCase {
  int64_t N;  // 37 by default, prime: every split but 1 and N leaves a tail
  Buffer a, b, out;

  explicit Matmul(int64_t n = 37) : N(n) {
    a = make_buffer("a", Type::kF32, M * K, BufferScope::kParam);
    b = make_buffer("b", Type::kF32, K * N, BufferScope::kParam);
    out = make_buffer("out", Type::kF32, M * N, BufferScope::kParam);
    set("def @main(%a: Tensor[(" + std::to_string(M) + ", " + std::to_string(K) + "), float32], %b: Tensor[(" + std::to_string(K) + ", " +
            std::to_string(N) + "), float32]) -> Tensor[(" + std::to_string(M) + ", " + std::to_string(N) +
            "), float32] {\n  %0 = nn.matmul(%a, %b);\n  return %0;\n}",
        7);
  }
  Expr c_at(const Expr &i, const Expr &j) const { return i * N + j; }
  /** for i: for j: out[i, j] = 0 */
  Stmt init() const { return for_loop("i", int_imm(0), int_imm(M), ForKind::kSerial, for_loop("j", int_imm(0), int_imm(N), ForKind::kSerial, store(out, c_at(var("i"), var("j")), float_imm(0)))); }
  /** for i2: for j2: for k: out[i2, j2] += a[i2, k] * b[k, j2] */
  Stmt update() const {
    Expr at = c_at(var("i2"), var("j2"));
    Stmt acc = store(out, at, call("fmuladd", {load(a, var("i2") * K + var("k")), load(b, var("k") * N + var("j2")), load(out, at)}));
    return for_loop("i2", int_imm(0), int_imm(M), ForKind::kSerial,
                    for_loop("j2", int_imm(0), int_imm(N), ForKind::kSerial, for_loop("k", int_imm(0), int_imm(K), ForKind::kSerial, acc)));
  }
  /** Compiles the two stages, runs them on 2 threads and returns the largest error relative to the reference. */
  LoweredKernel kernel(const KernelStage &init_stage, const KernelStage &update_stage) const {
    LoweredKernel k;
    k.name = "matmul_transformed";
    k.buffers = {a, b, out};
    k.num_params = 2;
    k.stages = {init_stage, update_stage};
    return k;
  }
  using ReferenceCase::run;
  double run(const KernelStage &init_stage, const KernelStage &update_stage) const { return run(kernel(init_stage, update_stage)); }
  static KernelStage stage(const std::string &name, Stmt body) { return {name, "u", 1, std::move(body)}; }
  /** The update tiled S S R S S: rows by 4 (io, ii), columns by 16 (jo, ji), the reduction between the tiles and the 4 x 16 block. */
  Stmt tiled_update() const {
    Stmt u = update();
    u = ok_or_die(split(u, "i2", 4, "io", "ii"));
    u = ok_or_die(split(u, "j2", 16, "jo", "ji"));
    return ok_or_die(reorder(u, {"io", "jo", "k", "ii", "ji"}));
  }
  static Stmt ok_or_die(Expected<Stmt> e) {
    EXPECT_TRUE(static_cast<bool>(e)) << (e ? "" : e.error().message);
    return e ? e.take() : seq({});
  }
};

template <typename T>
T ok(Expected<T> e) {
  EXPECT_TRUE(static_cast<bool>(e)) << (e ? "" : e.error().message);
  return e.take();
}

/** The reason a step was refused, or "(accepted)". */
template <typename T>
std::string refusal(const Expected<T> &e) {
  return e ? std::string("(accepted)") : e.error().message;
}

TEST(Transform, TheNaiveNestMatchesTheReference) {
  Matmul m;
  EXPECT_LT(m.run(Matmul::stage("init", m.init()), Matmul::stage("update", m.update())), 1e-5);
}

TEST(Transform, EverySplitFactorComputesTheSameResult) {
  Matmul m;
  for (int64_t f : {1, 2, 3, 5, 8, 16, 36, 37}) {
    Stmt u = ok(split(m.update(), "j2", f, "jo", "ji"));
    EXPECT_LT(m.run(Matmul::stage("init", m.init()), Matmul::stage("update", u)), 1e-5) << "factor " << f << "\n" << to_string(u);
    EXPECT_EQ(static_cast<bool>(find_loop(u, "ji_tail")), m.N % f != 0) << "factor " << f;
  }
}

TEST(Transform, ARegisterTiledMatmulMatchesTheReference) {
  // The shape of the conv template's register block, built from primitives: tile i by 4 and j by
  // 16, put the reduction between the tiles and the register block (S S R S S), vectorize the
  // columns, unroll the rows, parallelize the row tiles; the init nest fused and vectorized.
  // 48 columns: the tiles divide the nest, so it stays one band (a tail would be a second nest
  // beside the tiles, and the band could not be reordered across it).
  Matmul m(48);
  Stmt u = m.tiled_update();
  u = ok(vectorize(u, "ji"));
  u = ok(unroll(u, "ii"));
  KernelStage update = ok(parallelize(Matmul::stage("update", u), "io"));
  EXPECT_EQ(update.parallel_extent, M / 4);
  Stmt i = ok(fuse(m.init(), "i", "j", "ij"));
  i = ok(split(i, "ij", 16, "ijo", "iji"));
  i = ok(vectorize(i, "iji"));
  ASSERT_EQ(i->kind, StmtKind::kFor);  // M * N = 1152 = 72 x 16
  KernelStage init = Matmul::stage("init", i);
  EXPECT_LT(m.run(init, update), 1e-5) << to_string(update.body);
  // With a tail, the band is refused with the reason, and the init's tail is computed right.
  Matmul t;
  Stmt tiles = ok(split(ok(split(t.update(), "i2", 4, "io", "ii")), "j2", 16, "jo", "ji"));
  EXPECT_EQ(refusal(reorder(tiles, {"io", "jo", "k", "ii", "ji"})),
            "reorder: loops io, jo, k, ii, ji are not perfectly nested (a statement other than the next loop is between them)");
  Stmt ti = ok(vectorize(ok(split(ok(fuse(t.init(), "i", "j", "ij")), "ij", 16, "ijo", "iji")), "iji"));
  ASSERT_EQ(ti->kind, StmtKind::kSeq);  // 888 = 55 x 16 + 8: a tail loop after the tiles
  EXPECT_LT(t.run(Matmul::stage("init", ti), Matmul::stage("update", t.update())), 1e-5);
}

TEST(Transform, IllegalStepsAreRefusedWithTheirReason) {
  Matmul m;
  // Loops must exist, be unique, and new names must be new.
  EXPECT_EQ(refusal(split(m.update(), "q", 4, "qo", "qi")), "there is no loop q");
  EXPECT_EQ(refusal(split(seq({m.update(), m.update()}), "k", 4, "ko", "ki")), "there are 2 loops named k");
  EXPECT_EQ(refusal(split(m.update(), "k", 4, "i2", "ki")), "the name i2 is already used in this loop nest");
  EXPECT_EQ(refusal(split(m.update(), "k", 0, "ko", "ki")), "loop k: split factor 0 is not in [1, 20]");
  // Vectorizing the reduction: every lane would accumulate into the same element.
  EXPECT_EQ(refusal(vectorize(m.update(), "k")),
            "vectorize: loop k: the store to out[((i2 * 37) + j2)] does not move with it (lanes would write one element)");
  EXPECT_EQ(refusal(unroll(ok(split(m.update(), "j2", 37, "jo", "ji")), "ji")), "(accepted)");
  // An init statement between i and j: not a band with k.
  Stmt fused = for_loop("i3", int_imm(0), int_imm(M), ForKind::kSerial,
                        seq({store(m.out, var("i3") * m.N, float_imm(0)),
                             for_loop("k3", int_imm(0), int_imm(K), ForKind::kSerial, store(m.out, var("i3") * m.N, load(m.a, var("i3") * K + var("k3"))))}));
  EXPECT_EQ(refusal(reorder(fused, {"i3", "k3"})), "reorder: loops i3, k3 are not perfectly nested (a statement other than the next loop is between them)");
  // A prefix sum carries a value from one iteration to the next.
  Stmt scan = for_loop("r", int_imm(0), int_imm(M), ForKind::kSerial,
                       for_loop("s", int_imm(1), int_imm(m.N - 1), ForKind::kSerial,
                                store(m.out, var("r") * m.N + var("s"), load(m.out, var("r") * m.N + var("s") - int_imm(1)) + float_imm(1))));
  EXPECT_EQ(refusal(reorder(scan, {"s", "r"})), "reorder: out is written and read at another index (out[(((r * 37) + s) - 1)])");
  EXPECT_EQ(refusal(vectorize(ok(split(scan, "s", 4, "so", "si")), "si")).rfind("vectorize: loop si: out is written and read at another index", 0), 0u);
  EXPECT_EQ(refusal(unroll(m.update(), "i2")), "(accepted)");
  EXPECT_EQ(refusal(unroll(m.init(), "j")), "(accepted)");
  EXPECT_EQ(refusal(unroll(ok(fuse(m.init(), "i", "j", "ij")), "ij")), "unroll: loop ij has 888 iterations; at most 64 are unrolled");
  // Threads may not share a reduction, and only a stage's whole body becomes its parallel loop.
  Stmt k_outer = ok(reorder(m.update(), {"k", "i2", "j2"}));
  auto racing = parallelize(Matmul::stage("update", k_outer), "k");
  ASSERT_FALSE(static_cast<bool>(racing));
  EXPECT_EQ(racing.error().message, "parallel: loop k: the store to out[((i2 * 37) + j2)] does not depend on it (threads would race)");
  auto inner = parallelize(Matmul::stage("update", m.update()), "j2");
  ASSERT_FALSE(static_cast<bool>(inner));
  EXPECT_EQ(inner.error().message, "parallel: loop j2 is not the whole body of stage update");
  // Bounds that depend on an outer loop (a triangle) cannot be swapped with it.
  Stmt tri = for_loop("t", int_imm(0), int_imm(M), ForKind::kSerial, for_loop("w", int_imm(0), var("t"), ForKind::kSerial, store(m.out, var("t") * m.N + var("w"), float_imm(0))));
  EXPECT_EQ(refusal(reorder(tri, {"w", "t"})), "reorder: the bounds of loop w depend on loop t");
}

TEST(Transform, AnOutputReadBackInItsOwnIterationIsNotADependence) {
  // A row stored and read back reversed in the same iteration of r (a softmax's exponentials
  // read back by its later passes): rows are apart, so r may run on threads; a read of the next
  // row may not. Fused into one loop f = (r, q), the rows are told apart by f / 6 with f % 6 and
  // stay apart; a store that f % 6 does not move is shared by six iterations.
  Matmul m;
  auto row_nest = [&](const std::string &r, int64_t rows, const Expr &row, const Expr &read_row) {
    Stmt fill = for_loop("s", int_imm(0), int_imm(m.N), ForKind::kSerial, store(m.out, row * m.N + var("s"), load(m.a, var("s") % int_imm(K))));
    Stmt back = for_loop("t", int_imm(0), int_imm(m.N), ForKind::kSerial,
                         store(m.out, row * m.N + var("t"), load(m.out, read_row * m.N + int_imm(m.N - 1) - var("t")) + float_imm(1)));
    return for_loop(r, int_imm(0), int_imm(rows), ForKind::kSerial, seq({fill, back}));
  };
  EXPECT_EQ(refusal(parallelize(Matmul::stage("u", row_nest("r", M - 1, var("r"), var("r"))), "r")), "(accepted)");
  EXPECT_EQ(refusal(parallelize(Matmul::stage("u", row_nest("r", M - 1, var("r"), var("r") + int_imm(1))), "r")),
            "parallel: loop r: out is written and read at another index (out[((((r + 1) * 37) + 36) - t)])");
  Stmt two = for_loop("p", int_imm(0), int_imm(4), ForKind::kSerial, row_nest("q", 6, var("p") * 6 + var("q"), var("p") * 6 + var("q")));
  Stmt fused = ok(fuse(two, "p", "q", "f"));
  EXPECT_EQ(refusal(parallelize(Matmul::stage("u", fused), "f")), "(accepted)") << to_string(fused);
  Stmt shared = for_loop("p", int_imm(0), int_imm(4), ForKind::kSerial, row_nest("q", 6, var("p"), var("p") * 6 + var("q")));
  EXPECT_NE(refusal(parallelize(Matmul::stage("u", ok(fuse(shared, "p", "q", "f"))), "f")), "(accepted)");
  // Vector lanes over rows: each lane keeps to its row, the rows' stride apart from the lanes.
  Stmt lanes = ok(split(row_nest("r", 16, var("r"), var("r")), "r", 8, "ro", "ri"));
  EXPECT_EQ(refusal(vectorize(lanes, "ri")), "(accepted)");
  Stmt next = ok(split(row_nest("r", 16, var("r"), var("r") + int_imm(1)), "r", 8, "ro", "ri"));
  EXPECT_NE(refusal(vectorize(next, "ri")), "(accepted)");
}

TEST(Transform, AReorderedReductionStillMatches) {
  // Reduction outermost (k, i2, j2): legal (sums reassociate), and the answer agrees.
  Matmul m;
  Stmt u = ok(reorder(m.update(), {"k", "i2", "j2"}));
  EXPECT_EQ(u->var, "k");
  EXPECT_LT(m.run(Matmul::stage("init", m.init()), Matmul::stage("update", u)), 1e-5);
  // An outer loop vectorized over a serial inner one: 24 lanes (masked to 32), stores of stride 37.
  Stmt i = ok(vectorize(m.init(), "i"));
  EXPECT_LT(m.run(Matmul::stage("init", i), Matmul::stage("update", m.update())), 1e-5);
}

// --- producers, consumers, local buffers and step lists -------------------------------------

/**
 * A padded 3x3 conv as two naive stages: `pad` writes the zero-padded input to a temporary, and
 * `conv` (one output pixel per iteration: its bias, then the reduction over c, ky, kx) reads it.
 */
struct PaddedConv : ReferenceCase {
  static constexpr int64_t C = 4, H = 9, W = 9, O = 5, PH = H + 2, PW = W + 2;
  Buffer x, w, b, out, padded;

  PaddedConv() {
    x = make_buffer("x", Type::kF32, C * H * W, BufferScope::kParam);
    w = make_buffer("w", Type::kF32, O * C * 9, BufferScope::kParam);
    b = make_buffer("b", Type::kF32, O, BufferScope::kParam);
    out = make_buffer("out", Type::kF32, O * H * W, BufferScope::kParam);
    padded = make_buffer("padded", Type::kF32, C * PH * PW, BufferScope::kTemp);
    set("def @main(%x: Tensor[(1, 4, 9, 9), float32], %w: Tensor[(5, 4, 3, 3), float32], %b: Tensor[(5), float32]) -> Tensor[(1, 5, 9, 9), float32] {\n"
        "  %0 = nn.conv2d(%x, %w, %b, padding=[1, 1, 1, 1]);\n  return %0;\n}",
        11);
  }
  /** for c, y, x: padded[c][y][x] = x[c][y - 1][x - 1] inside the image, else 0 */
  KernelStage pad() const {
    Expr y = var("y"), xx = var("px");
    Expr inside = both(both(int_imm(1) <= y, y < int_imm(H + 1)), both(int_imm(1) <= xx, xx < int_imm(W + 1)));
    Expr src = load(x, (var("c") * H + max(min(y - int_imm(1), int_imm(H - 1)), int_imm(0))) * W + max(min(xx - int_imm(1), int_imm(W - 1)), int_imm(0)));
    Stmt st = store(padded, (var("c") * PH + y) * PW + xx, select(inside, src, float_imm(0)));
    return {"pad", "u", 1,
            for_loop("c", int_imm(0), int_imm(C), ForKind::kSerial,
                     for_loop("y", int_imm(0), int_imm(PH), ForKind::kSerial, for_loop("px", int_imm(0), int_imm(PW), ForKind::kSerial, st)))};
  }
  /** for o, oy, ox: out = b[o]; for ci, ky, kx: out += padded[ci][oy + ky][ox + kx] * w[o][ci][ky][kx] */
  KernelStage conv() const {
    Expr at = (var("o") * H + var("oy")) * W + var("ox");
    Expr in = load(padded, (var("ci") * PH + var("oy") + var("ky")) * PW + var("ox") + var("kx"));
    Expr wv = load(w, ((var("o") * C + var("ci")) * 3 + var("ky")) * 3 + var("kx"));
    Stmt red = for_loop("ci", int_imm(0), int_imm(C), ForKind::kSerial,
                        for_loop("ky", int_imm(0), int_imm(3), ForKind::kSerial,
                                 for_loop("kx", int_imm(0), int_imm(3), ForKind::kSerial, store(out, at, call("fmuladd", {in, wv, load(out, at)})))));
    Stmt pixel = seq({store(out, at, load(b, var("o"))), red});
    return {"conv", "u", 1,
            for_loop("o", int_imm(0), int_imm(O), ForKind::kSerial,
                     for_loop("oy", int_imm(0), int_imm(H), ForKind::kSerial, for_loop("ox", int_imm(0), int_imm(W), ForKind::kSerial, pixel)))};
  }
  LoweredKernel kernel() const {
    LoweredKernel k;
    k.name = "padded_conv";
    k.buffers = {x, w, b, out, padded};
    k.num_params = 3;
    k.stages = {pad(), conv()};
    return k;
  }
};

TEST(Transform, ThePaddedInputInlinedOrComputedAtEachLevelMatches) {
  PaddedConv pc;
  LoweredKernel k = pc.kernel();
  EXPECT_LT(pc.run(k), 1e-5);
  // Inline: every read recomputes the padding (select and clamped load), and the temporary is gone.
  LoweredKernel in = ok(compute_inline(k, "pad", "conv"));
  ASSERT_EQ(in.stages.size(), 1u);
  EXPECT_EQ(in.buffers.size(), 4u);
  EXPECT_EQ(in.to_string().find("padded["), std::string::npos) << in.to_string();
  EXPECT_LT(pc.run(in), 1e-5) << in.to_string();
  // At a loop: the box its body reads, halo included. At an output row: 4 channels x 3 rows x 11 columns.
  struct Case {
    std::string loop;
    int64_t box;
  };
  for (const Case &c : std::vector<Case>{{"o", 4 * 11 * 11}, {"oy", 4 * 3 * 11}, {"ox", 4 * 3 * 3}, {"ci", 3 * 3}, {"ky", 3}, {"kx", 1}}) {
    LoweredKernel at = ok(compute_at(k, "pad", "conv", c.loop));
    ASSERT_EQ(at.stages.size(), 1u) << c.loop;
    std::string ir = at.to_string();
    EXPECT_NE(ir.find("allocate padded_at_" + c.loop + "[" + std::to_string(c.box) + "]"), std::string::npos) << ir;
    EXPECT_LT(pc.run(at), 1e-5) << ir;
  }
  // Per iteration of the parallel loop: each thread computes the box of its output channel.
  LoweredKernel par = k;
  par.stages[1] = ok(parallelize(par.stages[1], "o"));
  LoweredKernel at = ok(compute_at(par, "pad", "conv", "o"));
  EXPECT_LT(pc.run(at), 1e-5) << at.to_string();
  // Rows of 3 columns computed at the tile: the columns split by 3 (no tail), the box vectorized as the producer was.
  LoweredKernel tiled = k;
  tiled.stages[0].body = ok(vectorize(tiled.stages[0].body, "px"));
  tiled.stages[1].body = ok(split(tiled.stages[1].body, "ox", 3, "xo", "xi"));
  at = ok(compute_at(tiled, "pad", "conv", "xo"));
  EXPECT_NE(at.to_string().find("vectorized (px_xo, 0, 5)"), std::string::npos) << at.to_string();
  EXPECT_LT(pc.run(at), 1e-5) << at.to_string();
}

TEST(Transform, PartitionSeparatesThePaddingsBorderFromItsInside) {
  PaddedConv pc;
  LoweredKernel k = pc.kernel();
  // Rows: [0, 1) border, [1, 10) inside, [10, 11) border; then the inside rows' columns the same way.
  LoweredKernel p = k;
  p.stages[0].body = ok(partition(p.stages[0].body, "y"));
  p.stages[0].body = ok(partition(p.stages[0].body, "px"));
  std::string ir = to_string(p.stages[0].body);
  for (const char *loop : {"(y_b0, 0, 1)", "(y, 0, 9)", "(y_b2, 0, 1)", "(px_yb0, 0, 11)", "(px_yb2, 0, 11)", "(px_b0, 0, 1)", "(px, 0, 9)", "(px_b2, 0, 1)"})
    EXPECT_NE(ir.find(loop), std::string::npos) << loop << "\n" << ir;
  // Borders store zeros and the inside copies plain reads: no select, no clamp is left.
  EXPECT_EQ(ir.find("select"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("min("), std::string::npos) << ir;
  EXPECT_LT(pc.run(p), 1e-5) << ir;
  // Every column loop vectorized: the inside's reads are contiguous now.
  for (const char *v : {"px", "px_yb0", "px_yb2"}) p.stages[0].body = ok(vectorize(p.stages[0].body, v));
  EXPECT_LT(pc.run(p), 1e-5) << to_string(p.stages[0].body);
  // A box computed at the output channel, partitioned the same way inside the consumer.
  LoweredKernel at = ok(compute_at(k, "pad", "conv", "o"));
  at.stages[0].body = ok(partition(at.stages[0].body, "y_o"));
  at.stages[0].body = ok(partition(at.stages[0].body, "px_o"));
  EXPECT_EQ(at.to_string().find("select"), std::string::npos) << at.to_string();
  EXPECT_LT(pc.run(at), 1e-5) << at.to_string();
  // Nothing switches with the channel loop.
  EXPECT_EQ(refusal(partition(k.stages[0].body, "c")), "partition: no condition in loop c's body changes inside its range");
  // A box computed per output row: its row y_oy reads image row oy + y_oy - 1, so a condition
  // depends on oy too. It is cut where it is decided for every oy: the box's middle row is inside
  // the image for every output row, its first and last rows are not.
  LoweredKernel row = ok(compute_at(k, "pad", "conv", "oy"));
  LoweredKernel rows = row;
  rows.stages[0].body = ok(partition(rows.stages[0].body, "y_oy"));
  std::string rir = to_string(rows.stages[0].body);
  for (const char *loop : {"(y_oy, 0, 1)", "(y_oy_b1, 0, 1)", "(y_oy_b2, 0, 1)"}) EXPECT_NE(rir.find(loop), std::string::npos) << loop << "\n" << rir;
  EXPECT_LT(pc.run(rows), 1e-5) << rir;
  EXPECT_EQ(refusal(partition(p.stages[0].body, "px")), "partition: loop px is already vectorized");
}

TEST(Transform, ProducerStepsAreRefusedWithTheirReason) {
  PaddedConv pc;
  LoweredKernel k = pc.kernel();
  EXPECT_EQ(refusal(compute_at(k, "pad", "conv", "q")), "compute_at pad in conv at q: there is no loop q");
  EXPECT_EQ(refusal(compute_inline(k, "conv", "pad")), "stage conv does not run before stage pad");
  EXPECT_EQ(refusal(compute_inline(k, "pad", "nope")), "there is no stage nope");
  // With a tail after the tiles, the tail's reads are outside the tile loop.
  LoweredKernel t = k;
  t.stages[1].body = ok(split(t.stages[1].body, "ox", 4, "xo", "xi"));
  EXPECT_EQ(refusal(compute_at(t, "pad", "conv", "xo")), "compute_at pad in conv at xo: stage conv also reads padded outside the loop");
  EXPECT_EQ(refusal(compute_at(t, "pad", "conv", "oy")), "(accepted)");
  // The conv's output is not a temporary; a producer that is not one store in a box of loops.
  LoweredKernel two = k;
  two.stages.push_back({"copy", "u", 1, for_loop("i", int_imm(0), int_imm(5), ForKind::kSerial, store(pc.out, var("i"), load(pc.out, var("i"))))});
  EXPECT_EQ(refusal(compute_inline(two, "conv", "copy")), "stage conv writes out, which is not a temporary of the kernel");
  // Statements that write their buffer at two elements, or read it at another, compute no element each.
  LoweredKernel twice = k;
  Stmt zero = store(pc.padded, var("c"), float_imm(0));
  twice.stages[0].body = for_loop("c", int_imm(0), int_imm(4), ForKind::kSerial, seq({zero, store(pc.padded, var("c") + int_imm(1), float_imm(0))}));
  EXPECT_EQ(refusal(compute_at(twice, "pad", "conv", "oy")), "stage pad is not a producer nest: the body of its loops writes padded at c and at (c + 1)");
  twice.stages[0].body = for_loop("c", int_imm(0), int_imm(4), ForKind::kSerial, seq({zero, store(pc.padded, var("c"), load(pc.padded, var("c") + int_imm(1)))}));
  EXPECT_EQ(refusal(compute_at(twice, "pad", "conv", "oy")), "stage pad is not a producer nest: the body of its loops reads padded at (c + 1), not the element it writes");
  LoweredKernel diag = k;
  diag.stages[0].body = for_loop("c", int_imm(0), int_imm(4), ForKind::kSerial, store(pc.padded, var("c") * 2, float_imm(0)));
  EXPECT_EQ(refusal(compute_inline(diag, "pad", "conv")), "stage pad is not a producer nest: the index (c * 2) has no unit-stride loop");
  // A read past the producer's box: the conv reads 2 columns further than the pad wrote.
  LoweredKernel narrow = k;
  narrow.stages[0].body = ok(split(narrow.stages[0].body, "px", 9, "pxo", "pxi"));
  EXPECT_EQ(refusal(compute_inline(narrow, "pad", "conv")).rfind("stage pad is not a producer nest", 0), 0u);
  // cache_write needs the loop to store to the buffer, with one store covering the box.
  EXPECT_EQ(refusal(cache_write(k.stages[1], "padded", "oy")), "cache_write padded at oy in stage conv: the loop does not store to padded");
}

/**
 * A depthwise 3x3 conv and the 1x1 conv that reads it (MobileNet's pair) in one group: a chain,
 * whose joined naive nests are stages s0_pad, s0_conv2d (a reduction: its accumulator set, the
 * window summed, the relu stored) and s1_conv2d.
 */
struct DepthwiseThenPointwise : ReferenceCase {
  explicit DepthwiseThenPointwise(int64_t h = 8) {
    std::string H = std::to_string(h);
    set("def @main(%x: Tensor[(1, 6, " + H + ", 10), float32], %w: Tensor[(6, 1, 3, 3), float32], %b: Tensor[(6), float32], "
        "%v: Tensor[(8, 6, 1, 1), float32]) -> Tensor[(1, 8, " + H + ", 10), float32] {\n"
        "  %0 = nn.conv2d(%x, %w, %b, padding=[1, 1, 1, 1], groups=6);\n  %1 = nn.relu(%0);\n"
        "  %2 = nn.conv2d(%1, %v);\n  %3 = nn.relu(%2);\n  return %3;\n}",
        13);
  }
};

TEST(Transform, AReductionComputedAtAConsumersLoopMatches) {
  DepthwiseThenPointwise c;
  LoweredKernel naive = ok(lower_naive(c.graph, "chain", KernelSchedule{}));
  std::vector<std::string> names;
  for (const KernelStage &st : naive.stages) names.push_back(st.name);
  ASSERT_EQ(names, (std::vector<std::string>{"s0_pad", "s0_conv2d", "s1_conv2d"}));
  EXPECT_LT(c.run(naive), 1e-5) << naive.to_string();
  // At each loop of the 1x1 conv, the box of the depthwise conv's result its body reads: every
  // channel, row and column per image or output channel, a row's 6 x 10, a pixel's 6 channels, one value.
  struct Case {
    std::string loop;
    int64_t box;
  };
  for (const Case &cs : std::vector<Case>{{"i0", 6 * 8 * 10}, {"i1", 6 * 8 * 10}, {"i2", 6 * 10}, {"i3", 6}, {"k0", 1}}) {
    LoweredKernel at = ok(compute_at(naive, "s0_conv2d", "s1_conv2d", cs.loop));
    ASSERT_EQ(at.stages.size(), 2u) << cs.loop;
    std::string ir = at.to_string();
    EXPECT_NE(ir.find("allocate s0_result_at_" + cs.loop + "[" + std::to_string(cs.box) + "]"), std::string::npos) << ir;
    // The producer's own reduction loops and accumulator are renamed where they are placed.
    EXPECT_NE(ir.find("allocate acc_" + cs.loop + "[1]"), std::string::npos) << ir;
    EXPECT_LT(c.run(at), 1e-5) << ir;
  }
  // Blocks of 2 rows (issue 11's anchors at a tile): the 1x1 conv's rows split and the block loop
  // moved outside its channels; the depthwise conv computed per block (6 channels x 2 rows x 10
  // columns), its padded input per channel of that box (4 rows with the halo x 12 columns); the
  // image and the blocks one parallel loop; the box's columns vectorized, each lane with its own
  // accumulator. As steps on the chain's naive nests, through lower_group.
  auto step = [](const std::string &op, const std::string &loop) {
    Step s;
    s.op = op, s.stage = "s1_conv2d", s.loop = loop;
    return s;
  };
  Step sp = step("split", "i2"), ro = step("reorder", ""), at = step("compute_at", "yo"), pad = step("compute_at", "i1_yo"),
       fu = step("fuse", "i0");
  sp.factor = 2, sp.names = {"yo", "yi"};
  ro.names = {"yo", "i1", "yi"};
  at.producer = "s0_conv2d", pad.producer = "s0_pad";
  fu.names = {"yo", "blk"};
  KernelSchedule s;
  s.steps = {sp, ro, at, pad, fu, step("parallel", "blk"), step("vectorize", "i3_yo")};
  auto k = lower_group(c.graph, "chain", s);
  ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
  std::string ir = k->to_string();
  ASSERT_EQ(k->stages.size(), 1u) << ir;
  for (const char *want : {"allocate s0_result_at_yo[120]", "allocate s0_padded_at_i1_yo[48]", "vectorized (i3_yo, 0, 10)"})
    EXPECT_NE(ir.find(want), std::string::npos) << want << "\n" << ir;
  EXPECT_EQ(k->stages[0].parallel_extent, 4);
  EXPECT_LT(c.run(*k), 1e-5) << ir;
  // The 1x1 conv's rows and columns fused into one pixel loop (its pixel-lane tiles' form), split
  // into runs of 20 pixels: each run is two whole rows, so the box is 6 x 2 x 10 again. A run of
  // 16 pixels is not whole rows, and is refused.
  LoweredKernel flat = naive;
  flat.stages[2].body = ok(fuse(flat.stages[2].body, "i2", "i3", "p"));
  LoweredKernel runs = flat;
  runs.stages[2].body = ok(split(runs.stages[2].body, "p", 20, "po", "pi"));
  LoweredKernel run_at = ok(compute_at(runs, "s0_conv2d", "s1_conv2d", "po"));
  EXPECT_NE(run_at.to_string().find("allocate s0_result_at_po[120]"), std::string::npos) << run_at.to_string();
  EXPECT_LT(c.run(run_at), 1e-5) << run_at.to_string();
  runs = flat;
  runs.stages[2].body = ok(split(runs.stages[2].body, "p", 16, "po", "pi"));
  runs.stages[2].body = ok(reorder(runs.stages[2].body, {"po", "i1"}));
  EXPECT_EQ(refusal(compute_at(runs, "s0_conv2d", "s1_conv2d", "po")),
            "compute_at s0_conv2d in s1_conv2d at po: the reads of s0_result take rows i2 and columns i3 as one run that is not whole rows of 10");
  // The chain tile sketch: blocks of rows, the depthwise conv's box per block, the 1x1 conv's
  // pixel-lane register tiles over the block (full tiles and a remainder), the padded input per
  // channel of the box, at root or inline; 8 lanes make the box's 10 columns a vector and a rest.
  struct Point {
    int64_t rows, oc_block;
    int vectors, lanes;
    std::string pad;
  };
  for (const Point &pt : std::vector<Point>{{2, 4, 1, 16, "i1_yo"}, {4, 8, 2, 16, "root"}, {2, 8, 2, 8, "inline"}, {8, 4, 3, 8, "i1_yo"}}) {
    ChainTileSketch knobs;
    knobs.rows = pt.rows, knobs.oc_block = pt.oc_block, knobs.pixel_vectors = pt.vectors, knobs.lanes = pt.lanes, knobs.pad = pt.pad;
    auto steps = chain_tile_sketch(naive, "p3", {8, 6, 1, 1}, knobs);
    ASSERT_TRUE(static_cast<bool>(steps)) << steps.error().message;
    KernelSchedule sk;
    sk.steps = *steps;
    auto tiled = lower_group(c.graph, "chain", sk);
    ASSERT_TRUE(static_cast<bool>(tiled)) << pt.rows << " rows, pad " << pt.pad << ": " << tiled.error().message;
    std::string tir = tiled->to_string();
    EXPECT_NE(tir.find("allocate s0_result_at_yo[" + std::to_string(6 * pt.rows * 10) + "]"), std::string::npos) << tir;
    EXPECT_EQ(tiled->stages.back().parallel_extent, 8 / pt.rows) << tir;
    EXPECT_TRUE(splits_rows(c.graph, sk));  // each thread a run of row blocks (codegen/ThreadRows labels it rows)
    EXPECT_LT(c.run(*tiled), 1e-5) << tir;
  }
  // Blocks of more than 8 rows: the box's rows are no register tile, each vector computed alone.
  DepthwiseThenPointwise tall(18);
  LoweredKernel tall_naive = ok(lower_naive(tall.graph, "chain", KernelSchedule{}));
  ChainTileSketch nine;
  nine.rows = 9, nine.lanes = 8;
  auto nine_steps = chain_tile_sketch(tall_naive, "p3", {8, 6, 1, 1}, nine);
  ASSERT_TRUE(static_cast<bool>(nine_steps)) << nine_steps.error().message;
  KernelSchedule ns;
  ns.steps = *nine_steps;
  auto nine_rows = lower_group(tall.graph, "chain", ns);
  ASSERT_TRUE(static_cast<bool>(nine_rows)) << nine_rows.error().message;
  std::string nir = nine_rows->to_string();
  EXPECT_NE(nir.find("allocate s0_result_at_yo[540]"), std::string::npos) << nir;
  EXPECT_NE(nir.find("vectorized (fl_tail, 0, 2)"), std::string::npos) << nir;
  EXPECT_EQ(nine_rows->stages.back().parallel_extent, 2) << nir;
  EXPECT_LT(tall.run(*nine_rows), 1e-5) << nir;
  ChainTileSketch wide;
  wide.rows = 3;
  EXPECT_EQ(refusal(chain_tile_sketch(naive, "p3", {8, 6, 1, 1}, wide)), "3 rows per block do not divide 8 rows");
  // A reduction cannot be inlined at every read: it is statements, not a value.
  EXPECT_EQ(refusal(compute_inline(naive, "s0_conv2d", "s1_conv2d")),
            "compute_inline s0_conv2d into s1_conv2d: stage s0_conv2d computes each element in statements (a reduction), not as one value; compute_at places it");
}

/**
 * A 1x1 conv and the depthwise conv that reads it (an inverted residual's expansion) in one group:
 * stages s0_conv2d (a reduction over the input channels), s1_pad (its result padded, the reads
 * clamped into the image so the select around them stays in bounds) and s1_conv2d.
 */
struct PointwiseThenDepthwise : ReferenceCase {
  PointwiseThenDepthwise(int64_t h, int64_t w) {
    std::string H = std::to_string(h), W = std::to_string(w);
    set("def @main(%x: Tensor[(1, 4, " + H + ", " + W + "), float32], %v: Tensor[(16, 4, 1, 1), float32], %b: Tensor[(16), float32], "
        "%w: Tensor[(16, 1, 3, 3), float32]) -> Tensor[(1, 16, " + H + ", " + W + "), float32] {\n"
        "  %0 = nn.conv2d(%x, %v, %b);\n  %1 = nn.relu(%0);\n"
        "  %2 = nn.conv2d(%1, %w, padding=[1, 1, 1, 1], groups=16);\n  %3 = nn.relu(%2);\n  return %3;\n}",
        17);
  }
};

TEST(Transform, AOneByOneConvComputedAtBlocksOfTheDepthwiseConvAfterItMatches) {
  PointwiseThenDepthwise c(8, 10);
  LoweredKernel naive = ok(lower_naive(c.graph, "chain", KernelSchedule{}));
  std::vector<std::string> names;
  for (const KernelStage &st : naive.stages) names.push_back(st.name);
  ASSERT_EQ(names, (std::vector<std::string>{"s0_conv2d", "s1_pad", "s1_conv2d"}));
  // Blocks of 8 channels x 2 rows: the padded input's box (4 rows with the halo x 12 columns),
  // then the 1x1 conv's result that box reads. The padded copy reads it clamped into the image,
  // so the box's first and last rows hold the image's edge rows where the block is at the edge
  // (min(max(...)) in the 1x1 conv's reads), and the copy's clamped reads find them there.
  auto step = [](const std::string &op, const std::string &loop) {
    Step s;
    s.op = op, s.stage = "s1_conv2d", s.loop = loop;
    return s;
  };
  Step sc = step("split", "i1"), sr = step("split", "i2"), ro = step("reorder", ""), pad = step("compute_at", "yo"), at = step("compute_at", "yo");
  sc.factor = 8, sc.names = {"co", "ci"};
  sr.factor = 2, sr.names = {"yo", "yi"};
  ro.names = {"co", "yo", "ci", "yi"};
  pad.producer = "s1_pad", at.producer = "s0_conv2d";
  LoweredKernel boxed = ok(replay(naive, {sc, sr, ro, pad, at}));
  std::string ir = boxed.to_string();
  ASSERT_EQ(boxed.stages.size(), 1u) << ir;
  // (The clamps keep every access inside the image and the box; values read at the halo's clamped
  // rows are discarded by the copy's select, so only the code shows them.)
  for (const char *want : {"allocate s0_result_at_yo[384]", "allocate s1_padded_at_yo[384]", "min(max((((yo * 2) + -1) + i2_yo), 0), 7)",
                           "(min(max(((yo * 2) + (py_yo + -1)), 0), 7) - ((yo * 2) + -1))"})
    EXPECT_NE(ir.find(want), std::string::npos) << want << "\n" << ir;
  EXPECT_LT(c.run(boxed), 1e-5) << ir;
  // The expand tile sketch: every row per block (the box's rows and columns one run of pixels in
  // the 1x1 conv's pixel-lane tiles), blocks of rows with the halo (a register tile per box row:
  // channels x its whole vectors, a narrower rest), 16-channel blocks, narrow vectors.
  struct Point {
    int64_t h, w, rows, channels, accumulators;
    int lanes;
    int64_t box;
  };
  for (const Point &pt : std::vector<Point>{{8, 10, 8, 8, 28, 16, 8 * 8 * 10},
                                           {8, 10, 2, 8, 28, 8, 8 * 4 * 10},
                                           {8, 10, 4, 16, 12, 8, 16 * 6 * 10},
                                           {18, 20, 18, 8, 12, 8, 8 * 18 * 20},
                                           {12, 7, 3, 8, 28, 16, 8 * 5 * 7}}) {
    PointwiseThenDepthwise pc(pt.h, pt.w);
    LoweredKernel pn = ok(lower_naive(pc.graph, "chain", KernelSchedule{}));
    ExpandTileSketch knobs;
    knobs.rows = pt.rows, knobs.channels = pt.channels, knobs.accumulators = pt.accumulators, knobs.lanes = pt.lanes;
    auto steps = expand_tile_sketch(pn, "p1", {16, 4, 1, 1}, knobs);
    ASSERT_TRUE(static_cast<bool>(steps)) << steps.error().message;
    KernelSchedule sk;
    sk.steps = *steps;
    auto tiled = lower_group(pc.graph, "chain", sk);
    ASSERT_TRUE(static_cast<bool>(tiled)) << pt.h << "x" << pt.w << ", " << pt.rows << " rows: " << tiled.error().message;
    std::string tir = tiled->to_string();
    EXPECT_NE(tir.find("allocate s0_result_at_yo[" + std::to_string(pt.box) + "]"), std::string::npos) << tir;
    EXPECT_EQ(tiled->stages.back().parallel_extent, (16 / pt.channels) * (pt.h / pt.rows)) << tir;
    EXPECT_NE(tir.find("vectorized"), std::string::npos) << tir;
    // With every row in a block, the 1x1 conv's weight packed by its tile's channels.
    EXPECT_EQ(tiled->packings.size(), pt.rows == pt.h ? 1u : 0u) << tir;
    EXPECT_LT(pc.run(*tiled), 1e-5) << pt.h << "x" << pt.w << ", " << pt.rows << " rows\n" << tir;
  }
  ExpandTileSketch bad;
  bad.channels = 6;
  EXPECT_EQ(refusal(expand_tile_sketch(naive, "p1", {16, 4, 1, 1}, bad)), "6 channels per block do not divide 16 channels");
  bad = ExpandTileSketch{};
  bad.rows = 3;
  EXPECT_EQ(refusal(expand_tile_sketch(naive, "p1", {16, 4, 1, 1}, bad)), "3 rows per block do not divide 8 rows");
  // A read clamped into a range that is not the producer's: no box maps it.
  Buffer src = make_buffer("src", Type::kF32, 10, BufferScope::kParam), dst = make_buffer("dst", Type::kF32, 10, BufferScope::kParam),
         tmp = make_buffer("tmp", Type::kF32, 10, BufferScope::kTemp);
  LoweredKernel k;
  k.name = "clamped", k.buffers = {src, dst, tmp}, k.num_params = 1;
  k.stages.push_back({"prod", "u", 1, for_loop("i", int_imm(0), int_imm(10), ForKind::kSerial, store(tmp, var("i"), load(src, var("i"))))});
  Expr clamped = min(max(var("j") - int_imm(1), int_imm(0)), int_imm(8));
  k.stages.push_back({"cons", "u", 1, for_loop("j", int_imm(0), int_imm(10), ForKind::kSerial, store(dst, var("j"), load(tmp, clamped)))});
  EXPECT_EQ(refusal(compute_at(k, "prod", "cons", "j")), "compute_at prod in cons at j: the read tmp[min(max((j - 1), 0), 8)] clamps to no producer loop's range");
  // Clamped into the producer's range, but read at a box that lies past it for some iterations
  // (j + 9 reaches 18): its clamped reads would land outside the box, so it is refused.
  Buffer wide = make_buffer("dst", Type::kF32, 10, BufferScope::kParam);
  k.stages[1] = {"cons", "u", 1,
                 for_loop("jo", int_imm(0), int_imm(5), ForKind::kSerial,
                          for_loop("ji", int_imm(0), int_imm(2), ForKind::kSerial,
                                   store(wide, var("jo") * 2 + var("ji"), load(tmp, min(max(var("jo") * 2 + var("ji") + int_imm(9), int_imm(0)), int_imm(9))))))};
  EXPECT_EQ(refusal(compute_at(k, "prod", "cons", "jo")), "compute_at prod in cons at jo: the box of tmp it reads may lie wholly outside the producer's loop i");
  k.stages[1].body = for_loop("jo", int_imm(0), int_imm(5), ForKind::kSerial,
                              for_loop("ji", int_imm(0), int_imm(2), ForKind::kSerial,
                                       store(wide, var("jo") * 2 + var("ji"), load(tmp, min(max(var("jo") * 2 + var("ji") - int_imm(1), int_imm(0)), int_imm(9))))));
  EXPECT_EQ(refusal(compute_at(k, "prod", "cons", "jo")), "(accepted)");
}

TEST(Transform, TheBlockedExpandTileComputesAUnitsChannelBlocksOfTheOneByOneConvInABox) {
  // The expand tile in NCHW16c: a 1x1 conv2d_nchwc (32 -> 64 channels) and the depthwise
  // conv2d_nchwc after it, per unit of channel blocks: the padded input's box (the unit's blocks,
  // every row with the halo), the 1x1 conv's result for those blocks into a box of its own, then
  // the depthwise conv's tiles. Run against the reference on planes of 7 x 14 (a tile of pixels
  // leaves a rest) and 9 x 5, with units of 1, 2 and 4 blocks.
  struct Point {
    int64_t h, w, blocks, pixels, columns;
  };
  for (const Point &pt : std::vector<Point>{{7, 14, 4, 6, 14}, {7, 14, 2, 8, 7}, {9, 5, 1, 28, 5}, {9, 5, 2, 5, 1}}) {
    std::string H = std::to_string(pt.h), W = std::to_string(pt.w);
    ReferenceCase c;
    c.set("def @main(%x: Tensor[(1, 2, " + H + ", " + W + ", 16), float32], %v: Tensor[(64, 32, 1, 1), float32], %b: Tensor[(64), float32], "
          "%w: Tensor[(64, 1, 3, 3), float32]) -> Tensor[(1, 4, " + H + ", " + W + ", 16), float32] {\n"
          "  %0 = nn.conv2d_nchwc(%x, %v, %b);\n  %1 = clip(%0, a_min=0.0f, a_max=6.0f);\n"
          "  %2 = nn.conv2d_nchwc(%1, %w, padding=[1, 1, 1, 1], groups=64);\n  %3 = nn.relu(%2);\n  return %3;\n}",
          23);
    LoweredKernel naive = ok(lower_naive(c.graph, "chain", KernelSchedule{}));
    BlockedExpandTileSketch knobs;
    knobs.blocks = pt.blocks, knobs.pixels = pt.pixels, knobs.columns = pt.columns;
    auto steps = blocked_expand_tile_sketch(naive, "p1", {64, 32, 1, 1}, knobs);
    ASSERT_TRUE(static_cast<bool>(steps)) << steps.error().message;
    KernelSchedule sk;
    sk.steps = *steps;
    auto tiled = lower_group(c.graph, "chain", sk);
    ASSERT_TRUE(static_cast<bool>(tiled)) << tiled.error().message;
    std::string ir = tiled->to_string();
    std::string what = H + "x" + W + ", " + std::to_string(pt.blocks) + " blocks";
    EXPECT_NE(ir.find("allocate s0_result_at_co[" + std::to_string(pt.blocks * pt.h * pt.w * 16) + "]"), std::string::npos) << what << "\n" << ir;
    EXPECT_NE(ir.find("allocate s1_padded_at_co[" + std::to_string(pt.blocks * (pt.h + 2) * (pt.w + 2) * 16) + "]"), std::string::npos) << what;
    EXPECT_EQ(tiled->stages.size(), 1u) << what;  // no stage writes the expanded tensor
    EXPECT_EQ(tiled->stages.back().parallel_extent, 4 / pt.blocks) << what;
    ASSERT_EQ(tiled->packings.size(), 1u) << what;  // the 1x1 conv's weight, by the unit's channels
    EXPECT_FALSE(splits_rows(c.graph, sk)) << what;  // each thread a run of channel units
    EXPECT_LT(c.run(*tiled), 1e-5) << what << "\n" << ir;
  }
  LoweredKernel naive = ok(lower_naive(PointwiseThenDepthwise(8, 10).graph, "chain", KernelSchedule{}));
  EXPECT_EQ(refusal(blocked_expand_tile_sketch(naive, "p1", {16, 4, 1, 1}, {})), "the blocked expand tile needs a 1x1 conv2d_nchwc before a depthwise conv2d_nchwc");
}

TEST(Transform, TheBlockedChainTileComputesABlocksDepthwiseRowsInABoxForTheOneByOneConv) {
  // The chain tile in NCHW16c: a depthwise conv2d_nchwc (64 channels, stride 1 or 2) and the 1x1
  // conv2d_nchwc after it (64 -> 32), per block of output rows: the depthwise conv's rows, every
  // channel block, into a box, then the 1x1 conv's tiles of blocks x pixels over it. Run against
  // the reference with blocks of 1, 2 and every row, tiles leaving a rest of pixels, column tiles
  // narrower than a row, and the padded input inline, at the box's channel block and at root.
  struct Point {
    int64_t h, w, stride, rows, blocks, pixels, columns;
    std::string pad;
  };
  for (const Point &pt : std::vector<Point>{{7, 14, 1, 1, 2, 14, 7, "inline"},
                                           {6, 10, 1, 2, 1, 6, 10, "i1_yo"},
                                           {7, 7, 2, 7, 2, 9, 7, "inline"},
                                           {8, 5, 2, 4, 1, 20, 5, "root"},
                                           {4, 9, 1, 2, 2, 4, 3, "i1_yo"}}) {
    std::string H = std::to_string(pt.h), W = std::to_string(pt.w), IH = std::to_string(pt.h * pt.stride), IW = std::to_string(pt.w * pt.stride),
                S = std::to_string(pt.stride);
    ReferenceCase c;
    c.set("def @main(%x: Tensor[(1, 4, " + IH + ", " + IW + ", 16), float32], %w: Tensor[(64, 1, 3, 3), float32], "
          "%v: Tensor[(32, 64, 1, 1), float32], %b: Tensor[(32), float32]) -> Tensor[(1, 2, " + H + ", " + W + ", 16), float32] {\n"
          "  %0 = nn.conv2d_nchwc(%x, %w, strides=[" + S + ", " + S + "], padding=[1, 1, 1, 1], groups=64);\n"
          "  %1 = clip(%0, a_min=0.0f, a_max=6.0f);\n  %2 = nn.conv2d_nchwc(%1, %v, %b);\n  return %2;\n}",
          29);
    LoweredKernel naive = ok(lower_naive(c.graph, "chain", KernelSchedule{}));
    BlockedChainTileSketch knobs;
    knobs.rows = pt.rows, knobs.blocks = pt.blocks, knobs.pixels = pt.pixels, knobs.columns = pt.columns, knobs.pad = pt.pad;
    auto steps = blocked_chain_tile_sketch(naive, "p2", {32, 64, 1, 1}, "p1", {64, 1, 3, 3}, knobs);
    std::string what = H + "x" + W + " stride " + S + ", " + std::to_string(pt.rows) + " rows, pad " + pt.pad;
    ASSERT_TRUE(static_cast<bool>(steps)) << what << ": " << steps.error().message;
    KernelSchedule sk;
    sk.steps = *steps;
    auto tiled = lower_group(c.graph, "chain", sk);
    ASSERT_TRUE(static_cast<bool>(tiled)) << what << ": " << tiled.error().message;
    std::string ir = tiled->to_string();
    EXPECT_NE(ir.find("allocate s0_result_at_yo[" + std::to_string(4 * pt.rows * pt.w * 16) + "]"), std::string::npos) << what << "\n" << ir;
    EXPECT_EQ(tiled->stages.size(), pt.pad == "root" ? 2u : 1u) << what;  // no stage writes the depthwise result
    EXPECT_EQ(tiled->stages.back().parallel_extent, pt.h / pt.rows) << what;
    EXPECT_EQ(tiled->packings.size(), 2u) << what;  // both weights: the 1x1 conv's by its tile, the depthwise conv's by the block
    EXPECT_TRUE(splits_rows(c.graph, sk)) << what;  // each thread a run of row blocks (codegen/ThreadRows labels it rows)
    EXPECT_LT(c.run(*tiled), 1e-5) << what << "\n" << ir;
  }
  LoweredKernel naive = ok(lower_naive(PointwiseThenDepthwise(8, 10).graph, "chain", KernelSchedule{}));
  EXPECT_EQ(refusal(blocked_chain_tile_sketch(naive, "p1", {16, 4, 1, 1}, "p3", {16, 1, 3, 3}, {})),
            "the blocked chain tile needs a depthwise conv2d_nchwc's nests followed by a 1x1 conv2d_nchwc's (stages s0_conv2d, s1_conv2d)");
}

TEST(Transform, CacheWriteMakesARegisterTile) {
  // The matmul's S S R S S tiling with the 4 x 16 tile accumulated in a local buffer at jo:
  // read in once, updated K times in registers, written back once.
  Matmul m(48);
  KernelStage update = ok(cache_write(Matmul::stage("update", m.tiled_update()), "out", "jo"));
  std::string ir = to_string(update.body);
  EXPECT_NE(ir.find("allocate out_jo[64]"), std::string::npos) << ir;
  update.body = ok(vectorize(update.body, "ji"));
  update.body = ok(unroll(update.body, "ii"));
  update = ok(parallelize(update, "io"));
  EXPECT_LT(m.run(Matmul::stage("init", m.init()), update), 1e-5) << to_string(update.body);
  // The conv accumulating each output pixel in a scalar, and each output row in a local row.
  PaddedConv pc;
  for (const char *at : {"ox", "oy", "o"}) {
    LoweredKernel k = pc.kernel();
    k.stages[1] = ok(cache_write(k.stages[1], "out", at));
    EXPECT_LT(pc.run(k), 1e-5) << at << "\n" << k.to_string();
  }
  // Tiles and a tail both inside the loop: the box is the row, covered by no one store.
  LoweredKernel t = pc.kernel();
  t.stages[1].body = ok(split(t.stages[1].body, "ox", 4, "xo", "xi"));
  EXPECT_EQ(refusal(cache_write(t.stages[1], "out", "oy")), "cache_write out at oy in stage conv: no store covers the whole box of out it touches");
  t.stages[1] = ok(cache_write(t.stages[1], "out", "xo"));
  EXPECT_LT(pc.run(t), 1e-5) << t.to_string();
}

TEST(Transform, CacheReadCopiesTheBoxALoopReads) {
  // The matmul's S S R S S tiling with the rows of A a tile reads copied at jo: the box is 4 rows
  // of A by all of K (strides K and 1), each row starting on 16 floats; at k, B's row of 16
  // columns (stride 1 only) is refused: a copy would read it as the loop does.
  Matmul m(48);
  KernelStage update = ok(cache_read(Matmul::stage("update", m.tiled_update()), "a", "jo"));
  std::string ir = to_string(update.body);
  EXPECT_NE(ir.find("allocate a_jo[128]"), std::string::npos) << ir;  // 4 rows of 20, each padded to 32
  update.body = ok(vectorize(update.body, "ji"));
  update = ok(parallelize(update, "io"));
  EXPECT_LT(m.run(Matmul::stage("init", m.init()), update), 1e-5) << to_string(update.body);
  EXPECT_EQ(refusal(cache_read(Matmul::stage("update", m.tiled_update()), "b", "k")),
            "cache_read b at k in stage update: the loop reads b along one stride only: a copy would read it as the loop does");
  EXPECT_EQ(refusal(cache_read(Matmul::stage("update", m.tiled_update()), "out", "jo")), "cache_read out at jo in stage update: the loop writes out too");
  EXPECT_EQ(refusal(cache_read(Matmul::stage("update", m.tiled_update()), "c", "jo")), "cache_read c at jo in stage update: the loop does not read c");
  // A layout change to NCHW16c: each output vector is 16 channels of one pixel, 16 planes apart in
  // the input; with the input's columns split by 7 and copied at the tile, the copy reads runs of 7
  // columns of each channel and the body reads its columns, (c / 16, c % 16) resolved on the way.
  ReferenceCase to;
  to.set("def @main(%x: Tensor[(2, 32, 3, 14), float32]) -> Tensor[(2, 2, 3, 14, 16), float32] {\n  %0 = nn.to_nchwc(%x, block=16);\n  return %0;\n}", 3);
  ReferenceCase from;
  from.set("def @main(%x: Tensor[(2, 2, 3, 14, 16), float32]) -> Tensor[(2, 32, 3, 14), float32] {\n  %0 = nn.from_nchwc(%x);\n  return %0;\n}", 4);
  for (ReferenceCase *c : {&to, &from}) {
    auto naive = lower_naive(c->graph, "k", KernelSchedule{});
    ASSERT_TRUE(static_cast<bool>(naive)) << naive.error().message;
    LoweredKernel k = *naive;
    KernelStage &st = k.stages[0];
    bool blocked = c == &to;
    if (!blocked) st.body = ok(reorder(ok(split(st.body, "i1", 16, "co", "ci")), {"i0", "co", "i2", "i3", "ci"}));
    st.body = ok(split(st.body, "i3", 7, "xo", "xi"));
    if (!blocked) st.body = ok(reorder(st.body, {"i0", "co", "i2", "xo", "ci", "xi"}));
    st = ok(cache_read(st, "p0", "xo"));
    std::string text = k.to_string();
    EXPECT_NE(text.find(blocked ? "allocate p0_xo[256]" : "allocate p0_xo[112]"), std::string::npos) << text;  // 16 x 7 padded to 16 x 16; 7 x 16
    st.body = ok(vectorize(st.body, blocked ? "i4" : "xi"));
    EXPECT_EQ(c->run(k), 0) << k.to_string();  // a copy: exact
  }
}

TEST(Transform, DistributeAndPackKeepTheAnswer) {
  PaddedConv pc;
  // Fission of the output pixel: the bias for every pixel first, then every pixel's reduction.
  LoweredKernel k = pc.kernel();
  k.stages[1].body = ok(distribute(k.stages[1].body, "ox"));
  EXPECT_TRUE(static_cast<bool>(find_loop(k.stages[1].body, "ox_1")));
  EXPECT_LT(pc.run(k), 1e-5) << k.to_string();
  // A local accumulator allocated in the body gets a slice per iteration, allocated around the copies.
  LoweredKernel acc = pc.kernel();
  acc.stages[1] = ok(cache_write(acc.stages[1], "out", "ox"));
  acc.stages[1].body = ok(distribute(acc.stages[1].body, "ox"));
  std::string ir = acc.to_string();
  EXPECT_NE(ir.find("allocate out_ox[9]"), std::string::npos) << ir;
  EXPECT_LT(pc.run(acc), 1e-5) << ir;
  EXPECT_EQ(refusal(distribute(pc.conv().body, "ky")), "distribute: the body of loop ky is not a sequence of statements");
  Buffer o = pc.out;
  Stmt scan = for_loop("s", int_imm(1), int_imm(8), ForKind::kSerial,
                       seq({store(o, var("s"), load(o, var("s") - int_imm(1)) + float_imm(1)), store(o, var("s") + int_imm(100), float_imm(0))}));
  EXPECT_EQ(refusal(distribute(scan, "s")), "distribute: loop s: out is written and read at another index (out[(s - 1)])");
  // Packing the weight by its output channels: [5][4][3][3] as [1][4][3][3][5], and as [20][9] by 4 (channel pairs of input channels).
  LoweredKernel packed = ok(pack(pc.kernel(), "w", {5, 4, 3, 3}, 5));
  ASSERT_EQ(packed.packings.size(), 1u);
  EXPECT_EQ(packed.packings[0].kind, WeightPacking::kOIHWToOIHWo);
  EXPECT_LT(pc.run(packed), 1e-5) << packed.to_string();
  EXPECT_EQ(refusal(pack(pc.kernel(), "w", {5, 4, 3, 3}, 2)), "pack w: block 2 does not divide 5");
  EXPECT_EQ(refusal(pack(pc.kernel(), "w", {20, 9}, 2)),
            "pack w: the read w[((((((o * 4) + ci) * 3) + ky) * 3) + kx)]: its first index is not a multiple of 2 plus a part in [0, 2)");
  EXPECT_EQ(refusal(pack(pc.kernel(), "padded", {4, 11, 11}, 2)), "pack padded: there is no argument padded");
  EXPECT_EQ(refusal(pack(packed, "w", {5, 4, 3, 3}, 5)), "pack w: it is already packed");
}

TEST(Transform, TrimSkipsTheKernelRowsOutsideTheInput) {
  // The padding recomputed at every read: each update selects 0 outside the image. Trimmed, the
  // kernel-row loop runs over the rows inside the input only, per output row, and its selects keep
  // the column conditions alone.
  PaddedConv pc;
  LoweredKernel k = ok(compute_inline(pc.kernel(), "pad", "conv"));
  ASSERT_EQ(k.stages.size(), 1u);
  k.stages[0].body = ok(trim(k.stages[0].body, "ky"));
  std::string ir = k.to_string();
  EXPECT_NE(ir.find("for (ky, max("), std::string::npos) << ir;
  EXPECT_LT(pc.run(k), 1e-5) << ir;
  // Then kx too: no condition is left.
  k.stages[0].body = ok(trim(k.stages[0].body, "kx"));
  ir = k.to_string();
  EXPECT_EQ(ir.find("select"), std::string::npos) << ir;
  EXPECT_LT(pc.run(k), 1e-5) << ir;
  LoweredKernel inlined = ok(compute_inline(pc.kernel(), "pad", "conv"));
  EXPECT_EQ(refusal(trim(inlined.stages[0].body, "ox")), "trim: the store to out in loop ox is not an update guarded by a condition on ox");
  EXPECT_EQ(refusal(trim(pc.conv().body, "ky")), "trim: the store to out in loop ky is not an update guarded by a condition on ky");
  EXPECT_EQ(refusal(trim(inlined.stages[0].body, "ci")), "trim: the store to out in loop ci is not an update guarded by a condition on ci");
}

TEST(Transform, SinkMovesALoopAfterTheStatementsItDoesNotTouch) {
  // The padded copy's rows partitioned: border row 0, the inside, border row 10. The first border
  // moved last writes rows the others do not: same result.
  PaddedConv pc;
  LoweredKernel k = pc.kernel();
  k.stages[0].body = ok(partition(k.stages[0].body, "y"));
  LoweredKernel moved = k;
  moved.stages[0].body = ok(sink(moved.stages[0].body, "y_b0"));
  std::string ir = to_string(moved.stages[0].body);
  EXPECT_LT(ir.find("(y, 0, 9)"), ir.find("(y_b0, 0, 1)")) << ir;
  EXPECT_LT(ir.find("(y_b2, 0, 1)"), ir.find("(y_b0, 0, 1)")) << ir;
  EXPECT_LT(pc.run(moved), 1e-5) << ir;
  // Through a step list too.
  Step s;
  s.op = "sink", s.stage = "pad", s.loop = "y_b0";
  EXPECT_EQ(ok(apply_step(k, s)).to_string(), moved.to_string());
  // A pixel's bias, then its reduction: the bias after the reduction would overwrite the sum.
  LoweredKernel conv = pc.kernel();
  conv.stages[1].body = ok(distribute(conv.stages[1].body, "ox"));
  EXPECT_EQ(refusal(sink(conv.stages[1].body, "ox")),
            "sink: loop ox cannot move after the statements that follow it: out[((((o * 9) + oy) * 9) + ox)] and "
            "out[((((o * 9) + oy) * 9) + ox_1)] may meet");
  EXPECT_EQ(refusal(sink(k.stages[0].body, "c")), "sink: loop c is not a statement of a sequence");
  EXPECT_EQ(refusal(sink(k.stages[0].body, "q")), "there is no loop q");
}

TEST(Transform, FissionMakesAStageOfEachStatement) {
  // The bias of every output, then every reduction: two stages, each parallel over its own channels.
  PaddedConv pc;
  LoweredKernel k = pc.kernel();
  k.stages[1].body = ok(distribute(k.stages[1].body, "ox"));
  k.stages[1].body = ok(distribute(k.stages[1].body, "oy"));
  LoweredKernel two = ok(fission(k, "conv", "o"));
  ASSERT_EQ(two.stages.size(), 3u);
  EXPECT_EQ(two.stages[1].name, "conv");
  EXPECT_EQ(two.stages[2].name, "conv_1");
  two.stages[1] = ok(parallelize(two.stages[1], "o"));
  two.stages[2] = ok(parallelize(two.stages[2], "o_1"));
  EXPECT_LT(pc.run(two), 1e-5) << two.to_string();
  EXPECT_EQ(refusal(fission(pc.kernel(), "conv", "o")), "distribute: the body of loop o is not a sequence of statements");
  EXPECT_EQ(refusal(fission(k, "conv", "oy")), "fission: loop oy is not the whole body of stage conv");
  EXPECT_EQ(refusal(fission(two, "conv", "o")), "fission: stage conv is already parallel over o");
  EXPECT_EQ(refusal(fission(k, "gemm", "o")), "there is no stage gemm");
}

TEST(Transform, RfactorGivesEachLaneItsOwnPartialSum) {
  // The matmul's reduction over k (20) split by 8, a tail of 4: each of the 8 lanes sums its own
  // partial, the partials are added once per element, then the tail; through a step list too.
  Matmul m;
  Stmt u = ok(split(m.update(), "k", 8, "ko", "ki"));
  Stmt f = ok(rfactor(u, "ko", "ki"));
  EXPECT_NE(to_string(f).find("allocate out_rf[8]"), std::string::npos) << to_string(f);
  f = ok(vectorize(f, "ki"));
  EXPECT_LT(m.run(Matmul::stage("init", m.init()), Matmul::stage("update", f)), 1e-5) << to_string(f);
  std::vector<Step> steps{{"split", "update", "k", 4, {"ko", "ki"}, "", "", {}}, {"rfactor", "update", "ko", 0, {"ki"}, "", "", {}},
                          {"vectorize", "update", "ki", 0, {}, "", "", {}}, {"parallel", "update", "i2", 0, {}, "", "", {}}};
  std::vector<Step> back = ok(steps_from_json(steps_to_json(steps)));
  EXPECT_EQ(back, steps);
  LoweredKernel k = ok(replay(m.kernel(Matmul::stage("init", m.init()), Matmul::stage("update", m.update())), back));
  EXPECT_LT(m.run(k), 1e-5) << k.to_string();
  // Refused: the element moves with a loop inside, a store outside the inner loop, the inner loop
  // already vectors, the inner loop the outer one, a store that is not a sum, max or min into its element.
  Stmt even = ok(split(m.update(), "k", 4, "ko", "ki"));  // 5 x 4, no tail
  EXPECT_EQ(refusal(rfactor(even, "j2", "ko")), "rfactor j2 over ko: the element out[((i2 * 37) + j2)] moves with j2");
  EXPECT_EQ(refusal(rfactor(u, "j2", "ki")), "rfactor j2 over ki: a store in loop j2 is outside loop ki");  // the tail's
  EXPECT_EQ(refusal(rfactor(f, "ko", "ki")), "rfactor ko over ki: loop ki is vectorized");
  EXPECT_EQ(refusal(rfactor(u, "ko", "ko")), "rfactor ko over ko: the inner loop is the outer one");
  Expr one = load(m.out, int_imm(0));
  Stmt sum = for_loop("ki", int_imm(0), int_imm(4), ForKind::kSerial, store(m.out, int_imm(0), one + load(m.a, var("ko") * 4 + var("ki"))));
  Stmt outside = for_loop("ko", int_imm(0), int_imm(2), ForKind::kSerial, seq({sum, store(m.out, int_imm(0), one + float_imm(1))}));
  EXPECT_EQ(refusal(rfactor(outside, "ko", "ki")), "rfactor ko over ki: a store in loop ko is outside loop ki");
  Stmt copy = for_loop("ko", int_imm(0), int_imm(2), ForKind::kSerial,
                       for_loop("ki", int_imm(0), int_imm(4), ForKind::kSerial, store(m.out, int_imm(0), load(m.a, var("ki")))));
  EXPECT_NE(refusal(rfactor(copy, "ko", "ki")).find("is not a sum, max or min into it"), std::string::npos) << refusal(rfactor(copy, "ko", "ki"));
}

TEST(Transform, AStepListReplaysFromJson) {
  PaddedConv pc;
  std::vector<Step> steps{
      {"vectorize", "pad", "px", 0, {}, "", "", {}},
      {"split", "conv", "ox", 3, {"xo", "xi"}, "", "", {}},
      {"reorder", "conv", "", 0, {"xo", "xi"}, "", "", {}},
      {"compute_at", "conv", "oy", 0, {}, "pad", "", {}},
      {"cache_write", "conv", "xo", 0, {}, "", "out", {}},
      {"parallel", "conv", "o", 0, {}, "", "", {}},
  };
  std::string json = steps_to_json(steps);
  EXPECT_NE(json.find(R"("op":"compute_at")"), std::string::npos) << json;
  std::vector<Step> back = ok(steps_from_json(json));
  EXPECT_EQ(back, steps);
  LoweredKernel k = ok(replay(pc.kernel(), back));
  EXPECT_EQ(k.stages.size(), 1u);
  EXPECT_EQ(k.stages[0].parallel_extent, PaddedConv::O);
  EXPECT_LT(pc.run(k), 1e-5) << k.to_string();
  // A step that cannot apply names itself; nothing after it runs.
  steps.insert(steps.begin() + 1, Step{"unroll", "conv", "ox", 0, {}, "", "", {}});
  steps.insert(steps.begin() + 2, Step{"vectorize", "conv", "ci", 0, {}, "", "", {}});
  auto bad = replay(pc.kernel(), steps);
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_EQ(bad.error().message,
            "step 3, vectorize loop ci of stage conv: vectorize: loop ci: the store to out[((((o * 9) + oy) * 9) + ox)] does not move with it (lanes would write one element)");
  // Malformed lists are refused with the step and field.
  EXPECT_EQ(steps_from_json(R"({"version": 2, "steps": []})").error().message, "step list version 2 is not supported (this autotune reads version 1)");
  EXPECT_EQ(steps_from_json(R"({"version": 1, "steps": [{"op": "split", "stage": "conv", "loop": "ox", "outer": "a", "inner": "b"}]})").error().message,
            "step 1 needs an integer \"factor\"");
  EXPECT_EQ(steps_from_json(R"({"version": 1, "steps": [{"op": "tile", "stage": "conv"}]})").error().message, "step 1 has an unknown op \"tile\"");
  EXPECT_EQ(steps_from_json(R"({"version": 1, "steps": [{"op": "unroll", "stage": "conv", "loop": "kx", "by": 2}]})").error().message,
            "step 1 (unroll) has an unknown field \"by\"");
}

TEST(Transform, AReplayCacheServesASharedPrefixAndChangesNothing) {
  // Two lists share the padded copy's step (a stage boundary after it) and differ in the conv's:
  // the second starts from the kept kernel. Each result is the plain replay's kernel and matches
  // the reference; a refusal after the shared prefix reads as replay's.
  PaddedConv pc;
  Step pad_vector{"vectorize", "pad", "px", 0, {}, "", "", {}};
  auto conv_steps = [&](int64_t factor) {
    return std::vector<Step>{pad_vector, {"split", "conv", "ox", factor, {"xo", "xi"}, "", "", {}}, {"parallel", "conv", "o", 0, {}, "", "", {}}};
  };
  ReplayCache cache;
  for (int64_t factor : {3, 9}) {
    LoweredKernel cached = ok(cache.replay(pc.kernel(), conv_steps(factor)));
    LoweredKernel plain = ok(replay(pc.kernel(), conv_steps(factor)));
    EXPECT_EQ(cached.identity(), plain.identity()) << factor;
    EXPECT_EQ(cached.to_string(), plain.to_string()) << factor;
    EXPECT_LT(pc.run(cached), 1e-5) << cached.to_string();
  }
  EXPECT_EQ(cache.hits(), 1u);  // the second list started after the pad's step
  std::vector<Step> bad = conv_steps(3);
  bad[1] = {"vectorize", "conv", "ci", 0, {}, "", "", {}};
  auto refused = cache.replay(pc.kernel(), bad);
  ASSERT_FALSE(static_cast<bool>(refused));
  EXPECT_EQ(refused.error().message, replay(pc.kernel(), bad).error().message);
  EXPECT_EQ(cache.hits(), 2u);
  // Another starting kernel (here only its name differs) does not take this one's prefix.
  LoweredKernel renamed = pc.kernel();
  renamed.name = "other";
  ASSERT_TRUE(static_cast<bool>(cache.replay(renamed, conv_steps(3))));
  EXPECT_EQ(cache.hits(), 2u);
}

TEST(Transform, AReplayCacheMakesAKeptKernelOnce) {
  // made(): the first call under a key makes the kernel, later ones take it; an error is
  // returned each time, never kept.
  PaddedConv pc;
  ReplayCache cache;
  int makes = 0;
  auto make = [&]() -> Expected<LoweredKernel> { return ++makes, pc.kernel(); };
  LoweredKernel first = ok(cache.made("a", make)), again = ok(cache.made("a", make));
  EXPECT_EQ(makes, 1);
  EXPECT_EQ(first.stages[1].body.get(), again.stages[1].body.get());  // the kept nests, shared
  ok(cache.made("b", make));
  EXPECT_EQ(makes, 2);
  int fails = 0;
  auto refuse = [&]() -> Expected<LoweredKernel> { return ++fails, make_error("no nests"); };
  for (int i = 0; i < 2; ++i) {
    auto r = cache.made("c", refuse);
    ASSERT_FALSE(static_cast<bool>(r));
    EXPECT_EQ(r.error().message, "no nests");
  }
  EXPECT_EQ(fails, 2);
}

TEST(Transform, RandomStepListsGiveACorrectKernelOrARefusal) {
  // Random sequences of every kind of step on the padded conv: each step is applied or refused
  // with a reason, and every sequence's kernel is compiled and checked against the reference.
  PaddedConv pc;
  std::mt19937 rng(20261122);
  std::map<std::string, int> accepted;
  int checked = 0, long_ones = 0;
  for (int seqno = 0; seqno < 120; ++seqno) {
    LoweredKernel k = pc.kernel();
    std::vector<Step> done;
    for (int t = 0; t < 7; ++t) {
      Step s = testing::random_step(k, rng, t);
      auto next = apply_step(k, s);
      if (!next) {
        EXPECT_FALSE(next.error().message.empty()) << to_string(s);
        continue;
      }
      k = next.take();
      done.push_back(s);
      ++accepted[s.op];
    }
    // The list replays to the same kernel from its JSON.
    LoweredKernel again = ok(replay(pc.kernel(), ok(steps_from_json(steps_to_json(done)))));
    EXPECT_EQ(again.to_string(), k.to_string());
    EXPECT_LT(pc.run(k), 1e-5) << steps_to_json(done) << "\n" << k.to_string();
    ++checked;
    long_ones += done.size() >= 3;
  }
  EXPECT_EQ(checked, 120);
  EXPECT_GE(long_ones, 10);
  for (const std::string &op : testing::random_step_ops()) EXPECT_GT(accepted[op], 0) << op << " was never applied";
}

}  // namespace
}  // namespace autotune

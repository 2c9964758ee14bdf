// Loop transformations (codegen/Transform): every transformed nest is JIT-compiled and its
// result checked against the reference executor; every refusal gives its reason.
#include <gtest/gtest.h>

#include "codegen/Jit.h"
#include "codegen/Transform.h"
#include "ir/Parser.h"
#include "ir/Reference.h"
#include "runtime/BoundKernel.h"

namespace autotune {
namespace {

using namespace loop;

constexpr int64_t M = 24, K = 20;

/** C = A x B as the reference executor computes it, and the naive nests that compute it. */
struct Matmul {
  int64_t N;  // 37 by default, prime: every split but 1 and N leaves a tail
  Graph graph;
  std::vector<Tensor> args;
  Tensor expected;
  Buffer a, b, out;

  explicit Matmul(int64_t n = 37) : N(n) {
    a = make_buffer("a", Type::kF32, M * K, BufferScope::kParam);
    b = make_buffer("b", Type::kF32, K * N, BufferScope::kParam);
    out = make_buffer("out", Type::kF32, M * N, BufferScope::kParam);
    auto g = parse_text("def @main(%a: Tensor[(" + std::to_string(M) + ", " + std::to_string(K) + "), float32], %b: Tensor[(" +
                        std::to_string(K) + ", " + std::to_string(N) + "), float32]) -> Tensor[(" + std::to_string(M) + ", " +
                        std::to_string(N) + "), float32] {\n  %0 = nn.matmul(%a, %b);\n  return %0;\n}");
    EXPECT_TRUE(static_cast<bool>(g)) << (g ? "" : g.error().message);
    graph = g.take();
    args = random_inputs(graph, 7);
    auto r = run_reference(graph, args);
    EXPECT_TRUE(static_cast<bool>(r));
    expected = (*r)[0];
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
  double run(const KernelStage &init_stage, const KernelStage &update_stage) const {
    LoweredKernel k;
    k.name = "matmul_transformed";
    k.buffers = {a, b, out};
    k.num_params = 2;
    k.stages = {init_stage, update_stage};
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
  static KernelStage stage(const std::string &name, Stmt body) { return {name, "u", 1, std::move(body)}; }
};

template <typename T>
T ok(Expected<T> e) {
  EXPECT_TRUE(static_cast<bool>(e)) << (e ? "" : e.error().message);
  return e.take();
}

std::string refusal(const Expected<Stmt> &e) { return e ? std::string("(accepted)") : e.error().message; }

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
  Stmt u = m.update();
  u = ok(split(u, "i2", 4, "io", "ii"));
  u = ok(split(u, "j2", 16, "jo", "ji"));
  u = ok(reorder(u, {"io", "jo", "k", "ii", "ji"}));
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

}  // namespace
}  // namespace autotune

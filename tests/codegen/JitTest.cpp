// Hand-written loop nests through LLVM and the JIT, run on real buffers.
#include <gtest/gtest.h>

#include <map>

#include <functional>

#include <cfloat>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <sys/mman.h>
#include <unistd.h>

#include "codegen/Jit.h"
#include "codegen/LLVMEmitter.h"
#include "codegen/Math.h"

namespace autotune {
namespace {

using namespace loop;

std::unique_ptr<Jit> make_jit(const std::string &cache = "") {
  auto j = Jit::create({cache});
  EXPECT_TRUE(static_cast<bool>(j)) << (j ? "" : j.error().message);
  return j ? j.take() : nullptr;
}

/** One-stage kernel over buffers a (in), out; body uses parallel var "r" over [0, extent). */
LoweredKernel kernel(const std::string &name, std::vector<Buffer> bufs, int params, int64_t extent, Stmt body) {
  LoweredKernel k;
  k.name = name;
  k.buffers = std::move(bufs);
  k.num_params = params;
  k.stages.push_back({"s", "r", extent, std::move(body)});
  return k;
}

TEST(Jit, VectorizedStridedAndBroadcastAccesses) {
  // out[r*8 + v] = a[r*8 + v] (vector load) * a[2*v] (strided: per-lane) + a[r] (broadcast)
  Buffer a = make_buffer("a", Type::kF32, 32, BufferScope::kParam), out = make_buffer("out", Type::kF32, 32, BufferScope::kParam);
  Expr r = var("r"), v = var("v");
  Stmt body = for_loop("v", int_imm(0), int_imm(8), ForKind::kVectorized,
                       store(out, r * 8 + v, load(a, r * 8 + v) * load(a, v * 2) + load(a, r)));
  auto jit = make_jit();
  auto ck = jit->compile(kernel("vec", {a, out}, 1, 4, body));
  ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  std::vector<float> av(32), ov(32, -1);
  std::iota(av.begin(), av.end(), 0.0f);
  void *bufs[] = {av.data(), ov.data()};
  ck->stages[0](bufs, 0, 4);
  for (int i = 0; i < 4; ++i)
    for (int l = 0; l < 8; ++l) EXPECT_EQ(ov[i * 8 + l], av[i * 8 + l] * av[2 * l] + av[i]) << i << "," << l;
}

TEST(Jit, TailVectorsTouchOnlyTheirLanes) {
  // Loops of 3, 5, 7 and 13 lanes (not powers of two: masked loads and stores on memory, plain
  // vectors through a stack accumulator) read and write exactly their lanes. The input sits on
  // the last page of a guard-page mapping, so a load one element past it faults; the output's
  // sentinel after the lanes must survive.
  long page = sysconf(_SC_PAGESIZE);
  char *map = static_cast<char *>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(map, MAP_FAILED);
  ASSERT_EQ(mprotect(map + page, page, PROT_NONE), 0);
  auto jit = make_jit();
  for (int lanes : {3, 5, 7, 13}) {
    Buffer a = make_buffer("a", Type::kF32, lanes, BufferScope::kParam), out = make_buffer("out", Type::kF32, lanes + 1, BufferScope::kParam);
    Buffer acc = make_buffer("acc", Type::kF32, lanes, BufferScope::kLocal);
    Expr v = var("v");
    auto vec = [&](Stmt s) { return for_loop("v", int_imm(0), int_imm(lanes), ForKind::kVectorized, s); };
    Stmt body = allocate(acc, seq({vec(store(acc, v, load(a, v) * float_imm(2))), vec(store(out, v, load(acc, v) + float_imm(1)))}));
    auto ck = jit->compile(kernel("tail" + std::to_string(lanes), {a, out}, 1, 1, body));
    ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
    float *av = reinterpret_cast<float *>(map + page) - lanes;  // ends where the guard page starts
    for (int l = 0; l < lanes; ++l) av[l] = static_cast<float>(l);
    std::vector<float> ov(lanes + 1, -7);
    void *bufs[] = {av, ov.data()};
    ck->stages[0](bufs, 0, 1);
    for (int l = 0; l < lanes; ++l) EXPECT_EQ(ov[l], 2 * l + 1) << lanes << " lanes, lane " << l;
    EXPECT_EQ(ov[lanes], -7) << lanes << " lanes: the element after the last lane was written";
  }
  munmap(map, 2 * page);
}

TEST(Jit, PrefetchesPastTheEndNeitherFaultNorChangeResults) {
  // The templates prefetch kPrefetchDistance floats ahead of a weight stream, past its end on its
  // last steps: a prefetch into a guard page must not fault, and the kernel's result is its own.
  long page = sysconf(_SC_PAGESIZE);
  char *map = static_cast<char *>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(map, MAP_FAILED);
  ASSERT_EQ(mprotect(map + page, page, PROT_NONE), 0);
  Buffer a = make_buffer("a", Type::kF32, 16, BufferScope::kParam), out = make_buffer("out", Type::kF32, 16, BufferScope::kParam);
  Stmt body = seq({prefetch(a, var("r") + int_imm(4096)), store(out, var("r"), load(a, var("r")) + float_imm(1))});
  EXPECT_NE(to_string(body).find("prefetch a[(r + 4096)]"), std::string::npos) << to_string(body);
  auto jit = make_jit();
  auto ck = jit->compile(kernel("prefetch", {a, out}, 1, 16, body));
  ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  float *av = reinterpret_cast<float *>(map + page) - 16;
  for (int i = 0; i < 16; ++i) av[i] = static_cast<float>(i);
  std::vector<float> ov(16);
  void *bufs[] = {av, ov.data()};
  ck->stages[0](bufs, 0, 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ov[i], i + 1);
  munmap(map, 2 * page);
}

TEST(Jit, RangeSplitsTheParallelLoop) {
  Buffer out = make_buffer("out", Type::kF32, 10, BufferScope::kParam);
  auto jit = make_jit();
  auto ck = jit->compile(kernel("range", {out}, 0, 10, store(out, var("r"), cast(Type::kF32, var("r")))));
  ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  std::vector<float> o(10, -1);
  void *bufs[] = {o.data()};
  ck->stages[0](bufs, 3, 7);
  EXPECT_EQ(o, (std::vector<float>{-1, -1, -1, 3, 4, 5, 6, -1, -1, -1}));
}

TEST(Jit, LocalAccumulatorsUnrolledLoopsLetAndBranches) {
  // out[0] = sum over i of (i odd ? a[i] : 0), through a local accumulator, unrolled by 4.
  Buffer a = make_buffer("a", Type::kF32, 8, BufferScope::kParam), out = make_buffer("out", Type::kF32, 1, BufferScope::kParam);
  Buffer acc = make_buffer("acc", Type::kF32, 1, BufferScope::kLocal);
  Expr i = var("io") * 4 + var("ii");
  Stmt add = if_then(i % int_imm(2) == int_imm(1), store(acc, int_imm(0), load(acc, int_imm(0)) + load(a, var("t"))));
  Stmt body = allocate(acc, seq({store(acc, int_imm(0), float_imm(0)),
                                 for_loop("io", int_imm(0), int_imm(2), ForKind::kSerial,
                                          for_loop("ii", int_imm(0), int_imm(4), ForKind::kUnrolled, let("t", i, add))),
                                 store(out, int_imm(0), load(acc, int_imm(0)))}));
  auto jit = make_jit();
  auto ck = jit->compile(kernel("acc", {a, out}, 1, 1, body));
  ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  std::vector<float> av{1, 2, 3, 4, 5, 6, 7, 8}, ov(1);
  void *bufs[] = {av.data(), ov.data()};
  ck->stages[0](bufs, 0, 1);
  EXPECT_EQ(ov[0], 2 + 4 + 6 + 8);
}

TEST(Jit, SharedExpressionsAreEmittedOnceButNeverAcrossAWriteABindingOrABranch) {
  // Lowering builds DAGs (a Winograd transform shares each B^T d term among six stores): the
  // emitter emits a shared node once for a run of stores, and again after a store to a buffer it
  // reads, in each unrolled iteration, under a new binding of a name it uses, and in each branch.
  Buffer a = make_buffer("a", Type::kF32, 2, BufferScope::kParam), out = make_buffer("out", Type::kF32, 8, BufferScope::kParam);
  Expr x = load(a, int_imm(0)) + float_imm(1);               // shared by out[0], out[1], out[2], out[6]
  Expr ix = cast(Type::kF32, var("i")) + load(a, int_imm(1));  // shared by the unrolled loop and the let
  Stmt body = seq({store(out, int_imm(0), x), store(out, int_imm(1), x * x),
                   store(a, int_imm(0), float_imm(10)),  // x must be read again after this
                   store(out, int_imm(2), x),
                   for_loop("i", int_imm(0), int_imm(2), ForKind::kUnrolled, store(out, var("i") + int_imm(3), ix)),
                   let("i", int_imm(5), store(out, int_imm(5), ix)),
                   if_then(load(a, int_imm(1)) < float_imm(100), store(out, int_imm(6), x), store(out, int_imm(6), x * x)),
                   store(out, int_imm(7), x * x)});
  LoweredKernel k = kernel("shared", {a, out}, 1, 1, body);
  auto ir = emit_llvm_text(k, host_target());
  ASSERT_TRUE(static_cast<bool>(ir)) << ir.error().message;
  // Float loads: a[0] for out[0..1], again for out[2]; a[1] in each of the two unrolled iterations
  // and under the let; the branch's condition, each branch, and out[7] after the branch.
  size_t loads = 0;
  for (size_t p = ir->find("load float"); p != std::string::npos; p = ir->find("load float", p + 1)) ++loads;
  EXPECT_EQ(loads, 9u) << *ir;
  auto jit = make_jit();
  auto ck = jit->compile(k);
  ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  std::vector<float> av{2, 3}, ov(8, -1);
  void *bufs[] = {av.data(), ov.data()};
  ck->stages[0](bufs, 0, 1);
  EXPECT_EQ(ov, (std::vector<float>{3, 9, 11, 3, 4, 8, 11, 121}));
}

TEST(Jit, FloorDivisionAndModuloOfNegativeValues) {
  Buffer out = make_buffer("out", Type::kF32, 2, BufferScope::kParam);
  Expr x = var("r") - int_imm(7);  // -7 at r = 0
  auto jit = make_jit();
  auto ck = jit->compile(kernel("floor", {out}, 0, 1,
                                seq({store(out, int_imm(0), cast(Type::kF32, x / int_imm(2))),
                                     store(out, int_imm(1), cast(Type::kF32, x % int_imm(2)))})));
  ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  std::vector<float> o(2);
  void *bufs[] = {o.data()};
  ck->stages[0](bufs, 0, 1);
  EXPECT_EQ(o, (std::vector<float>{-4, 1}));
}

/** ulps between a float result and the exact value (in double), measured in ulps of the float nearest it. */
double ulps(float got, double exact) {
  float near = static_cast<float>(exact);
  double ulp = std::nextafter(std::fabs(near), INFINITY) - std::fabs(near);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

/** Every width's result is the scalar's, bit for bit, wherever the exact value f(x) is a normal float. */
void expect_same_where_normal(const std::vector<float> &in, const std::map<int, std::vector<float>> &by_lanes, double (*f)(double)) {
  const std::vector<float> &scalar = by_lanes.at(1);
  for (const auto &[lanes, got] : by_lanes) {
    int64_t differ = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      double exact = f(static_cast<double>(in[i]));
      if (std::isfinite(exact) && std::fabs(exact) >= FLT_MIN && std::fabs(exact) <= FLT_MAX && got[i] != scalar[i]) ++differ;
    }
    EXPECT_EQ(differ, 0) << lanes << " lanes against scalars";
  }
}

TEST(Jit, ExpIsAPolynomialWithinTwoUlpsOfTheTruthAtEveryWidth) {
  // exp is emitted inline (no libm call per lane). Checked against exp in double over its whole
  // float range, in vectors of 16, 8 and 4 lanes and as scalars (a loop's tail), on every value
  // of a fine sweep: at most 2 ulps (1.24 measured) where the result is a normal float, 0 where it would be
  // denormal, +inf past the top, and NaN for NaN. On AVX-512, 16 lanes are scaled by vscalefps
  // (exp_scalef), the other widths by building 2^n: where the result is a normal float both give
  // the same bits, which the widths' agreement checks.
  const int64_t n = 1 << 20;
  std::vector<float> in(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(-104.0 + 194.0 * static_cast<double>(i) / n);
  for (float special : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.7f, 88.8f, -87.3f, -87.4f, INFINITY, -INFINITY, NAN}) in.push_back(special);
  while (in.size() % 16) in.push_back(1.0f);  // whole vectors
  int64_t total = static_cast<int64_t>(in.size());
  auto jit = make_jit();
  std::map<int, std::vector<float>> by_lanes;
  for (int lanes : {16, 8, 4, 1}) {
    Buffer a = make_buffer("a", Type::kF32, total, BufferScope::kParam), out = make_buffer("out", Type::kF32, total, BufferScope::kParam);
    Stmt body = lanes == 1 ? for_loop("i", int_imm(0), int_imm(total), ForKind::kSerial, store(out, var("i"), call("exp", {load(a, var("i"))})))
                           : for_loop("o", int_imm(0), int_imm(total / lanes), ForKind::kSerial,
                                      for_loop("v", int_imm(0), int_imm(lanes), ForKind::kVectorized,
                                               store(out, var("o") * lanes + var("v"), call("exp", {load(a, var("o") * lanes + var("v"))}))));
    auto ck = jit->compile(kernel("exp" + std::to_string(lanes), {a, out}, 1, 1, body));
    ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
    std::vector<float> got(total);
    void *bufs[] = {in.data(), got.data()};
    ck->stages[0](bufs, 0, 1);
    double worst = 0;
    for (int64_t i = 0; i < total; ++i) {
      double exact = std::exp(static_cast<double>(in[i]));
      if (std::isnan(in[i])) EXPECT_TRUE(std::isnan(got[i]));
      else if (exact > FLT_MAX) EXPECT_EQ(got[i], INFINITY) << in[i];
      else if (exact < FLT_MIN) EXPECT_EQ(got[i], 0.0f) << in[i];  // never a denormal (a multiply by one takes an assist on Intel)
      else worst = std::max(worst, ulps(got[i], exact));
    }
    EXPECT_LE(worst, 2.0) << lanes << " lanes";
    std::printf("exp, %d lanes: at most %.2f ulps over [-87.3, 88.7]\n", lanes, worst);
    by_lanes[lanes] = got;
  }
  expect_same_where_normal(in, by_lanes, [](double x) { return std::exp(x); });
}

/** Runs out[i] = f(a[i], b[i]) over the inputs as a kernel of `lanes`-lane vectors (1: scalars). */
std::vector<float> run_elementwise(const std::string &name, int lanes, const std::vector<float> &a, const std::vector<float> &b,
                                   const std::function<Expr(const Expr &, const Expr &)> &f) {
  int64_t total = static_cast<int64_t>(a.size());
  Buffer ab = make_buffer("a", Type::kF32, total, BufferScope::kParam), bb = make_buffer("b", Type::kF32, total, BufferScope::kParam);
  Buffer out = make_buffer("out", Type::kF32, total, BufferScope::kParam);
  Expr i = lanes == 1 ? var("i") : var("o") * lanes + var("v");
  Stmt st = store(out, i, f(load(ab, i), load(bb, i)));
  Stmt body = lanes == 1 ? for_loop("i", int_imm(0), int_imm(total), ForKind::kSerial, st)
                         : for_loop("o", int_imm(0), int_imm(total / lanes), ForKind::kSerial, for_loop("v", int_imm(0), int_imm(lanes), ForKind::kVectorized, st));
  auto jit = make_jit();
  auto ck = jit->compile(kernel(name + std::to_string(lanes), {ab, bb, out}, 2, 1, body));
  EXPECT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  std::vector<float> got(total);
  if (!ck) return got;
  std::vector<float> av = a, bv = b;
  void *bufs[] = {av.data(), bv.data(), got.data()};
  ck->stages[0](bufs, 0, 1);
  return got;
}

TEST(Jit, SigmoidIsWithinFourUlpsOfTheTruthAtEveryWidth) {
  // The logistic (ONNX Sigmoid, SiLU's gate) as one intrinsic: exp's polynomial without its edge
  // cases. Against 1 / (1 + exp(-x)) in double over [-104, 104] in vectors of 16, 8 and 4 lanes
  // and as scalars: within 4 ulps where the result is a normal float (3.15 measured, near x = -16.6
  // where 1 + exp(-x) nears 2^24; 1 / (1 + exp(0 - x)) through exp measured the same), 1 from 87
  // up, FLT_MIN within 38 ulps where the exact value is below FLT_MIN (-inf included: never a
  // denormal, which the division and SiLU's multiply would take a microcode assist on), NaN for NaN.
  std::vector<float> in;
  for (int i = 0; i < (1 << 20); ++i) in.push_back(static_cast<float>(-104.0 + 208.0 * i / (1 << 20)));
  for (float special : {0.0f, -0.0f, 1e-30f, -1e-30f, 87.0f, 88.0f, -87.0f, -88.0f, INFINITY, -INFINITY, NAN}) in.push_back(special);
  while (in.size() % 16) in.push_back(1.0f);
  std::vector<float> zero(in.size(), 0.0f);
  std::map<int, std::vector<float>> by_lanes;
  for (int lanes : {16, 8, 4, 1}) {
    auto got = run_elementwise("sigmoid", lanes, in, zero, [](const Expr &a, const Expr &) { return call("sigmoid", {a}); });
    double worst = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      double exact = 1.0 / (1.0 + std::exp(-static_cast<double>(in[i])));
      if (std::isnan(in[i])) EXPECT_TRUE(std::isnan(got[i]));
      else if (in[i] >= 87.0f) EXPECT_EQ(got[i], 1.0f) << in[i];  // exp(-x) below half an ulp of 1
      else if (exact < FLT_MIN) EXPECT_TRUE(got[i] >= FLT_MIN && got[i] <= FLT_MIN * (1 + 40 * FLT_EPSILON)) << in[i] << ": " << got[i];
      else worst = std::max(worst, ulps(got[i], exact));
    }
    EXPECT_LE(worst, 4.0) << lanes << " lanes";
    std::printf("sigmoid, %d lanes: at most %.2f ulps over [-87.3, 104]\n", lanes, worst);
    by_lanes[lanes] = got;
  }
  // On AVX-512, 16 lanes take exp_scalef's route (1 / (1 + vscalefps-scaled exp(-x))), the rest the clamped one.
  expect_same_where_normal(in, by_lanes, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
}

TEST(Jit, LogErfTanhAndPowerMatchDoublePrecisionWithinTheirStatedError) {
  // The transformer functions (codegen/Math.h and the emitter's log) against the C library in
  // double, in 16-lane vectors and as scalars; the largest errors measured are printed.
  for (int lanes : {16, 1}) {
    // log over every binade of the floats (denormals too), and its special values.
    std::vector<float> x, zero;
    for (int e = -149; e < 128; ++e)
      for (int k = 0; k < 64; ++k) x.push_back(std::ldexp(1.0f + static_cast<float>(k) / 64.0f, e));
    for (float sp : {0.0f, -0.0f, -1.0f, INFINITY, NAN, 1.0f}) x.push_back(sp);
    while (x.size() % 16) x.push_back(2.0f);
    zero.assign(x.size(), 0.0f);
    auto got = run_elementwise("log", lanes, x, zero, [](const Expr &a, const Expr &) { return call("log", {a}); });
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i]) || x[i] < 0) EXPECT_TRUE(std::isnan(got[i])) << x[i];
      else if (x[i] == 0) EXPECT_EQ(got[i], -INFINITY);
      else if (std::isinf(x[i])) EXPECT_EQ(got[i], INFINITY);
      else if (x[i] == 1.0f) EXPECT_EQ(got[i], 0.0f);
      else worst = std::max(worst, ulps(got[i], std::log(static_cast<double>(x[i]))));
    }
    EXPECT_LE(worst, 2.0) << lanes << " lanes";
    std::printf("log, %d lanes: at most %.2f ulps over the positive floats\n", lanes, worst);
    // erf and tanh: absolute error over a sweep of [-8, 8], relative error near 0.
    std::vector<float> t;
    for (int i = 0; i < (1 << 16); ++i) t.push_back(static_cast<float>(-8.0 + 16.0 * i / (1 << 16)));
    for (float sp : {1e-30f, -1e-30f, 1e-6f, 0.0f, INFINITY, -INFINITY}) t.push_back(sp);
    while (t.size() % 16) t.push_back(0.25f);
    zero.assign(t.size(), 0.0f);
    for (const char *fn : {"erf", "tanh"}) {
      bool is_erf = std::string(fn) == "erf";
      auto g = run_elementwise(fn, lanes, t, zero, [&](const Expr &a, const Expr &) { return is_erf ? math::erf(a) : math::tanh(a); });
      double abs_err = 0, rel_err = 0;
      for (size_t i = 0; i < t.size(); ++i) {
        double exact = is_erf ? std::erf(static_cast<double>(t[i])) : std::tanh(static_cast<double>(t[i]));
        double e = std::fabs(g[i] - exact);
        abs_err = std::max(abs_err, e);
        if (std::fabs(t[i]) < 0.25 && exact != 0) rel_err = std::max(rel_err, e / std::fabs(exact));
      }
      EXPECT_LE(abs_err, 5e-7) << fn << " " << lanes << " lanes";
      EXPECT_LE(rel_err, 1e-6) << fn << " " << lanes << " lanes";
      std::printf("%s, %d lanes: at most %.2g absolute error over [-8, 8], %.2g relative below |x| = 0.25\n", fn, lanes, abs_err, rel_err);
    }
    // power: positive bases with fractional exponents, negative bases with integer ones, and ONNX's special cases.
    std::vector<float> base, expo;
    for (int i = 1; i <= 400; ++i)
      for (float y : {-2.5f, -1.0f, 0.5f, 1.5f, 3.0f}) base.push_back(static_cast<float>(i) / 40.0f), expo.push_back(y);
    for (int i = 1; i <= 100; ++i)
      for (float y : {2.0f, 3.0f, -1.0f}) base.push_back(-static_cast<float>(i) / 10.0f), expo.push_back(y);
    std::vector<std::pair<float, float>> special{{-2.0f, 0.5f}, {0.0f, 2.0f}, {0.0f, -1.0f}, {5.0f, 0.0f}, {-3.0f, 0.0f}, {0.0f, 0.0f}};
    for (auto [a, b] : special) base.push_back(a), expo.push_back(b);
    while (base.size() % 16) base.push_back(2.0f), expo.push_back(2.0f);
    auto p = run_elementwise("power", lanes, base, expo, [](const Expr &a, const Expr &b) { return math::power(a, b); });
    double rel = 0;
    for (size_t i = 0; i < base.size(); ++i) {
      double exact = std::pow(static_cast<double>(base[i]), static_cast<double>(expo[i]));
      if (std::isnan(exact)) EXPECT_TRUE(std::isnan(p[i])) << base[i] << "^" << expo[i];
      else if (std::isinf(exact) || exact == 0) EXPECT_EQ(p[i], exact) << base[i] << "^" << expo[i];
      else rel = std::max(rel, std::fabs(p[i] - exact) / std::fabs(exact));
    }
    EXPECT_LE(rel, 2e-6) << lanes << " lanes";
    std::printf("power, %d lanes: at most %.2g relative error\n", lanes, rel);
  }
}

TEST(Jit, SmallConstantStridesLoadEveryLanesElement) {
  // Strides 2 to 4 are whole vectors of the loop's width, the last masked, and shuffles; loops of 7
  // and 14 lanes too (a 56-column pool's). The buffer ends at the last lane's element, on the last
  // page before a guard page, so a load one element past it faults.
  long page = sysconf(_SC_PAGESIZE);
  char *map = static_cast<char *>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(map, MAP_FAILED);
  ASSERT_EQ(mprotect(map + page, page, PROT_NONE), 0);
  auto jit = make_jit();
  for (int stride : {2, 3, 4})
    for (int lanes : {4, 7, 8, 14, 16}) {
      int64_t n = static_cast<int64_t>(stride) * (lanes - 1) + 1;
      Buffer a = make_buffer("a", Type::kF32, n, BufferScope::kParam), out = make_buffer("out", Type::kF32, lanes, BufferScope::kParam);
      auto ck = jit->compile(kernel("strided" + std::to_string(stride) + "_" + std::to_string(lanes), {a, out}, 1, 1,
                                    for_loop("v", int_imm(0), int_imm(lanes), ForKind::kVectorized, store(out, var("v"), load(a, var("v") * stride)))));
      ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
      float *av = reinterpret_cast<float *>(map + page) - n;  // ends where the guard page starts
      for (int64_t i = 0; i < n; ++i) av[i] = static_cast<float>(i);
      std::vector<float> ov(lanes);
      void *bufs[] = {av, ov.data()};
      ck->stages[0](bufs, 0, 1);
      for (int l = 0; l < lanes; ++l) EXPECT_EQ(ov[l], static_cast<float>(l * stride)) << stride << " " << lanes;
    }
  munmap(map, 2 * page);
}

TEST(Jit, IllegalLoopIRIsAnErrorNotACrash) {
  Buffer out = make_buffer("out", Type::kF32, 8, BufferScope::kParam);
  auto jit = make_jit();
  Stmt nested = for_loop("a", int_imm(0), int_imm(2), ForKind::kVectorized,
                         for_loop("b", int_imm(0), int_imm(2), ForKind::kVectorized, store(out, var("a") * 2 + var("b"), float_imm(0))));
  auto ck = jit->compile(kernel("bad", {out}, 0, 1, nested));
  ASSERT_FALSE(static_cast<bool>(ck));
  EXPECT_NE(ck.error().message.find("nested vectorized loops"), std::string::npos);
  auto ck2 = jit->compile(kernel("bad2", {out}, 0, 1, for_loop("a", int_imm(0), var("r"), ForKind::kUnrolled, store(out, var("a"), float_imm(0)))));
  ASSERT_FALSE(static_cast<bool>(ck2));
  EXPECT_NE(ck2.error().message.find("needs a constant extent"), std::string::npos);
}

TEST(Jit, ObjectCacheServesASecondCompile) {
  std::string dir = (std::filesystem::temp_directory_path() / ("autotune_jit_cache_" + std::to_string(::getpid()))).string();
  Buffer out = make_buffer("out", Type::kF32, 4, BufferScope::kParam);
  LoweredKernel k = kernel("cached", {out}, 0, 4, store(out, var("r"), float_imm(3)));
  {
    auto jit = make_jit(dir);
    auto ck = jit->compile(k);
    ASSERT_TRUE(static_cast<bool>(ck));
    EXPECT_FALSE(ck->from_cache);
  }
  auto jit = make_jit(dir);  // a new process's JIT: only the disk cache can serve it
  auto ck = jit->compile(k);
  ASSERT_TRUE(static_cast<bool>(ck));
  EXPECT_TRUE(ck->from_cache);
  std::vector<float> o(4);
  void *bufs[] = {o.data()};
  ck->stages[0](bufs, 0, 4);
  EXPECT_EQ(o, (std::vector<float>{3, 3, 3, 3}));
  std::filesystem::remove_all(dir);
}

TEST(Jit, CandidatesThatDifferInOneStageCompileOnlyThatStage) {
  // Two kernels over the same buffers: stage 0 (tmp = 2a) the same, stage 1 (out = tmp + 1 or
  // tmp * 3) not. Each stage is its own object, so the second kernel finds stage 0 linked in this
  // process and, in a new process, in the disk cache: only its stage 1 is compiled.
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / ("autotune_jit_stages_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  Buffer a = make_buffer("a", Type::kF32, 4, BufferScope::kParam), out = make_buffer("out", Type::kF32, 4, BufferScope::kParam);
  Buffer tmp = make_buffer("tmp", Type::kF32, 4, BufferScope::kParam);
  auto two_stages = [&](const std::string &name, bool add) {
    LoweredKernel k = kernel(name, {a, out, tmp}, 1, 4, store(tmp, var("r"), load(a, var("r")) * float_imm(2)));
    Expr t = load(tmp, var("r"));
    k.stages.push_back({"t", "r", 4, store(out, var("r"), add ? t + float_imm(1) : t * float_imm(3))});
    return k;
  };
  // One name, as the candidates of one task have (kernel_name of their group).
  LoweredKernel plus = two_stages("cand", true), times = two_stages("cand", false);
  auto entries = [&] { return std::vector<fs::path>(fs::directory_iterator(dir), fs::directory_iterator{}).size(); };
  auto run = [](const CompiledKernel &ck) {
    std::vector<float> av = {1, 2, 3, 4}, ov(4, -1), tv(4, -1);
    void *bufs[] = {av.data(), ov.data(), tv.data()};
    for (StageFn f : ck.stages) f(bufs, 0, 4);
    return ov;
  };
  {
    auto jit = make_jit(dir);
    auto p = jit->compile(plus);
    ASSERT_TRUE(static_cast<bool>(p)) << p.error().message;
    EXPECT_FALSE(p->from_cache);
    EXPECT_EQ(entries(), 2u);  // one object per stage
    auto t = jit->compile(times);
    ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
    EXPECT_FALSE(t->from_cache);
    EXPECT_EQ(t->stages[0], p->stages[0]);  // the shared stage is linked once
    EXPECT_NE(t->stages[1], p->stages[1]);
    EXPECT_EQ(entries(), 3u);
    EXPECT_EQ(run(*p), (std::vector<float>{3, 5, 7, 9}));
    EXPECT_EQ(run(*t), (std::vector<float>{6, 12, 18, 24}));
  }
  // A new process with only the shared stage in the disk cache: drop both stage-1 objects.
  std::vector<fs::path> second_stages;
  for (const auto &e : fs::directory_iterator(dir))
    if (e.path().filename().string().ends_with("_s1.o")) second_stages.push_back(e.path());
  EXPECT_EQ(second_stages.size(), 2u);
  for (const fs::path &f : second_stages) fs::remove(f);
  ASSERT_EQ(entries(), 1u);
  auto jit = make_jit(dir);
  auto t = jit->compile(times);
  ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
  EXPECT_FALSE(t->from_cache);  // its stage 1 was compiled
  EXPECT_EQ(entries(), 2u);
  EXPECT_EQ(run(*t), (std::vector<float>{6, 12, 18, 24}));
  auto again = make_jit(dir)->compile(times);
  ASSERT_TRUE(static_cast<bool>(again));
  EXPECT_TRUE(again->from_cache);
  fs::remove_all(dir);
}

TEST(Jit, ADamagedCacheEntryIsRebuiltNotTrusted) {
  // A truncated object (a full disk), one with a flipped byte, and one that is not an object at
  // all: each is found out on load, compiled afresh, and the entry rewritten for the next process.
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / ("autotune_jit_damaged_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  Buffer out = make_buffer("out", Type::kF32, 4, BufferScope::kParam);
  LoweredKernel k = kernel("damaged", {out}, 0, 4, store(out, var("r"), float_imm(5)));
  ASSERT_TRUE(static_cast<bool>(make_jit(dir)->compile(k)));
  std::vector<fs::path> entries(fs::directory_iterator(dir), fs::directory_iterator{});
  ASSERT_EQ(entries.size(), 1u);
  std::string good;
  {
    std::ifstream in(entries[0], std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x40;
  for (const std::string &bad : {good.substr(0, good.size() / 3), flipped, std::string(good.size(), 'x'), std::string()}) {
    std::ofstream(entries[0], std::ios::binary | std::ios::trunc) << bad;
    auto jit = make_jit(dir);  // a new process's JIT: only the disk cache could serve it
    auto ck = jit->compile(k);
    ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
    EXPECT_FALSE(ck->from_cache);
    std::vector<float> o(4);
    void *bufs[] = {o.data()};
    ck->stages[0](bufs, 0, 4);
    EXPECT_EQ(o, (std::vector<float>{5, 5, 5, 5}));
    auto again = make_jit(dir)->compile(k);  // the rewritten entry serves the next one
    ASSERT_TRUE(static_cast<bool>(again));
    EXPECT_TRUE(again->from_cache);
  }
  EXPECT_EQ(std::vector<fs::path>(fs::directory_iterator(dir), fs::directory_iterator{}).size(), 1u);  // no temporaries left
  fs::remove_all(dir);
}

}  // namespace
}  // namespace autotune

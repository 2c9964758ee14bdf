// Every template of the lowering, compiled and run against the reference executor on seeded
// random inputs, once per ISA (avx2, avx512): a target this host cannot run is skipped with the
// reason. Each case asserts that no group fell back to the reference executor, so a passing
// case really ran JIT-compiled code for that ISA.
#include <gtest/gtest.h>

#include <map>

#include "codegen/Lower.h"
#include "ir/Parser.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "runtime/Runtime.h"

namespace autotune {
namespace {

/** The lowering tests, run for each ISA. */
class Lower : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto t = resolve_target(GetParam());
    ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
    if (auto st = t->runnable_here(); !st) GTEST_SKIP() << st.error().message;
    target_ = *t;
  }
  CompileOptions options() const {
    CompileOptions o;
    o.cache_dir = "";
    o.target = target_;
    return o;
  }
  /** Compiles IR text (fused here) and compares with the reference on seeded inputs; `want` is the schedule's text per ISA. */
  void expect_compiled_matches(const std::string &ir, double tolerance = 1e-5, const std::map<std::string, std::string> &want = {});
  Target target_;
};

void Lower::expect_compiled_matches(const std::string &ir, double tolerance, const std::map<std::string, std::string> &want) {
  std::string want_schedule = want.count(target_.isa) ? want.at(target_.isa) : "";
  auto g = parse_text(ir);
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  auto m = CompiledModel::compile(*g, options());
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  for (const GroupInfo &gi : (*m)->groups()) {
    EXPECT_EQ(gi.fallback, "") << gi.ops;
    if (!want_schedule.empty()) {
      EXPECT_NE(gi.schedule.find(want_schedule), std::string::npos) << gi.schedule;
    }
  }
  for (uint64_t seed : {1, 2}) {
    auto inputs = random_inputs(*g, seed);
    auto expected = run_reference(*g, inputs);
    auto got = (*m)->run(inputs);
    ASSERT_TRUE(expected && got);
    ASSERT_EQ(expected->size(), got->size());
    for (size_t i = 0; i < got->size(); ++i) {
      auto d = compare((*got)[i], (*expected)[i]);
      ASSERT_TRUE(static_cast<bool>(d));
      EXPECT_LE(d->relative(), tolerance) << "output " << i << ", max abs " << d->max_abs;
      EXPECT_FALSE(d->nan_mismatch);
    }
  }
}

TEST_P(Lower, BlockedConvWithPaddingStrideBiasAndEpilogue) {
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 8, 9, 11), float32]) -> Tensor[(1, 32, 5, 6), float32] {
    %w = constant(Tensor[(32, 8, 3, 3), float32]);
    %b = constant(Tensor[(32), float32]);
    %0 = nn.conv2d(%x, %w, %b, strides=[2, 2], padding=[1, 1, 1, 1]);
    %1 = nn.relu(%0);
    return %1;
  })", 1e-5, {{"avx2", "fuse i2; reorder; split p/6;"}, {"avx512", "fuse i2; reorder; split p/14;"}});
}

TEST_P(Lower, BlockedConvWithResidualAddAndPixelTail) {
  // 7x7 = 49 output pixels: 8 blocks of 6 and a tail of 1.
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 16, 7, 7), float32], %skip: Tensor[(2, 16, 7, 7), float32]) -> Tensor[(2, 16, 7, 7), float32] {
    %w = constant(Tensor[(16, 16, 1, 1), float32]);
    %0 = nn.conv2d(%x, %w);
    %1 = add(%0, %skip);
    %2 = nn.relu(%1);
    return %2;
  })");
}

TEST_P(Lower, BlockedConvWithThreeVectorBlocksAndDilation) {
  // 24 channels: three vectors of 8 per block; one block of channels, so the pixels are split.
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 3, 12, 12), float32]) -> Tensor[(1, 24, 8, 8), float32] {
    %w = constant(Tensor[(24, 3, 3, 3), float32]);
    %0 = nn.conv2d(%x, %w, padding=[0, 0, 0, 0], dilation=[2, 2]);
    return %0;
  })", 1e-5, {{"avx2", "split i1/24; pack/24; fuse i2; reorder; split p/4;"}, {"avx512", "split i1/24; pack/24; fuse i2; reorder; split p/9;"}});
}

TEST_P(Lower, GroupedAndDepthwiseConvsAreTheLoopSketchsRowTile) {
  // No template: the row tile of the loop sketch (rows x columns, the window unrolled).
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 8, 10, 10), float32]) -> Tensor[(1, 8, 5, 5), float32] {
    %w = constant(Tensor[(8, 1, 3, 3), float32]);
    %b = constant(Tensor[(8), float32]);
    %0 = nn.conv2d(%x, %w, %b, strides=[2, 2], padding=[1, 1, 1, 1], groups=8);
    %1 = clip(%0, a_min=0.0f, a_max=6.0f);
    return %1;
  })", 1e-5, {{"avx2", "split i2/5; reorder;"}, {"avx512", "split i2/5; reorder;"}});
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 4, 6, 6), float32]) -> Tensor[(1, 6, 6, 6), float32] {
    %w = constant(Tensor[(6, 2, 3, 3), float32]);
    %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=2);
    return %0;
  })", 1e-5, {{"avx2", "split i2/6; reorder;"}, {"avx512", "split i2/6; reorder;"}});
}

TEST_P(Lower, StridedDepthwiseConvsReadColumnsSplitByPhase) {
  // Column strides 2 and 3, with dilation, odd widths and padding: without dilation the padded
  // copy splits each row's columns by phase (the window's columns two loops, k2 and k3: skipped
  // taps past the window); every output column must still read the right input.
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 6, 13, 13), float32]) -> Tensor[(1, 6, 5, 5), float32] {
    %w = constant(Tensor[(6, 1, 5, 5), float32]);
    %b = constant(Tensor[(6), float32]);
    %0 = nn.conv2d(%x, %w, %b, strides=[2, 2], padding=[2, 1, 2, 3], dilation=[2, 2], groups=6);
    %1 = sigmoid(%0);
    %2 = multiply(%0, %1);
    return %2;
  })", 1e-5, {{"avx2", "steps: partition py;"}, {"avx512", "steps: partition py;"}});
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 4, 11, 17), float32]) -> Tensor[(2, 4, 4, 6), float32] {
    %w = constant(Tensor[(4, 1, 3, 3), float32]);
    %0 = nn.conv2d(%x, %w, strides=[3, 3], padding=[1, 1, 1, 1], groups=4);
    return %0;
  })", 1e-5, {{"avx2", "unroll k3"}, {"avx512", "unroll k3"}});
}

TEST_P(Lower, DenseBlockedAndDirect) {
  expect_compiled_matches(R"(def @main(%x: Tensor[(3, 20), float32]) -> Tensor[(3, 40), float32] {
    %w = constant(Tensor[(40, 20), float32]);
    %b = constant(Tensor[(40), float32]);
    %0 = nn.dense(%x, %w);
    %1 = add(%0, %b);
    %2 = sigmoid(%1);
    return %2;
  })", 1e-5, {{"avx2", "split i1/8; pack/8;"}, {"avx512", "split i1/8; pack/8;"}});
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 5), float32]) -> Tensor[(2, 7), float32] {
    %w = constant(Tensor[(7, 5), float32]);
    %0 = nn.dense(%x, %w);
    return %0;
  })", 1e-5, {{"avx2", "steps: split i1/7; vectorize xi; parallel i0"}, {"avx512", "steps: split i1/7; vectorize xi; parallel i0"}});
}

TEST_P(Lower, MatmulWithBroadcastBatchAndVectorOperands) {
  expect_compiled_matches(R"(def @main(%a: Tensor[(2, 1, 3, 4), float32], %b: Tensor[(3, 4, 9), float32]) -> Tensor[(2, 3, 3, 9), float32] {
    %0 = nn.matmul(%a, %b);
    return %0;
  })");
  expect_compiled_matches(R"(def @main(%a: Tensor[(4), float32], %b: Tensor[(2, 4, 3), float32]) -> Tensor[(2, 3), float32] {
    %0 = nn.matmul(%a, %b);
    return %0;
  })");
  expect_compiled_matches(R"(def @main(%a: Tensor[(5, 4), float32], %b: Tensor[(4), float32]) -> Tensor[(5), float32] {
    %0 = nn.matmul(%a, %b);
    return %0;
  })");
}

TEST_P(Lower, TransformerKernelsWithRowAndColumnTails) {
  // A dense layer on [batch, tokens, K] data: rows x units tiles, rows left over (37 rows: 28 +
  // 9 on AVX-512, 6 x 6 + 1 on AVX2).
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 37, 40), float32]) -> Tensor[(1, 37, 48), float32] {
    %w = constant(Tensor[(48, 40), float32]);
    %b = constant(Tensor[(48), float32]);
    %0 = nn.dense(%x, %w);
    %1 = add(%0, %b);
    %2 = erf(%1);
    return %2;
  })", 1e-5, {{"avx2", "pack/16; reorder; split i0/6"}, {"avx512", "pack/16; reorder; split i0/28"}});
  // A batched matmul with rows and columns left over: all four register tiles.
  expect_compiled_matches(R"(def @main(%a: Tensor[(3, 37, 8), float32], %b: Tensor[(3, 8, 21), float32]) -> Tensor[(3, 37, 21), float32] {
    %0 = nn.matmul(%a, %b);
    %1 = tanh(%0);
    return %1;
  })", 1e-5, {{"avx2", "split i2/16; distribute i1; split i1/6"}, {"avx512", "split i2/16; distribute i1; split i1/30"}});
  // Softmax and mean over the innermost axis as vectors along it, with a remainder.
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 37), float32]) -> Tensor[(2, 3, 37), float32] {
    %0 = nn.softmax(%x, axis=-1);
    return %0;
  })", 1e-5, {{"avx2", "split j1/8; rfactor j1o"}, {"avx512", "split j1/16; rfactor j1o"}});
  // An attention mask computed at run time (booleans are int64 0/1) inlined into a float group:
  // compare, logic, where, and casts both ways, broadcast from [2, 1, 1, 37] over the scores.
  expect_compiled_matches(R"(def @main(%s: Tensor[(2, 4, 5, 37), float32], %m: Tensor[(2, 1, 1, 37), int64]) -> Tensor[(2, 4, 5, 37), float32] {
    %z = constant([0], Tensor[(), int64]);
    %0 = equal(%m, %z);
    %h = constant([0.5f], Tensor[(), float32]);
    %1 = greater(%s, %h);
    %2 = logical_or(%0, %1);
    %3 = logical_not(%2);
    %c = constant([-10000f], Tensor[(), float32]);
    %4 = where(%3, %c, %s);
    %5 = cast(%m, dtype="float32");
    %6 = add(%4, %5);
    %7 = cast(%6, dtype="int64");
    %8 = cast(%7, dtype="float32");
    %9 = cast(%s, dtype="bool");
    %10 = cast(%9, dtype="float32");
    %11 = add(%8, %10);
    %12 = less(%s, %11);
    %13 = logical_and(%12, %0);
    %14 = where(%13, %11, %6);
    return %14;
  })", 1e-6);
  // A layer norm as one kernel: its three passes as vectors along the row (37: a remainder), a
  // residual add fused after it; over two trailing axes (24 elements, the scale broadcast over 3).
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 37), float32], %r: Tensor[(2, 3, 37), float32]) -> Tensor[(2, 3, 37), float32] {
    %g = constant(Tensor[(37), float32]);
    %b = constant(Tensor[(37), float32]);
    %0 = nn.layer_norm(%x, %g, %b, axis=-1, epsilon=1e-05f);
    %1 = add(%0, %r);
    return %1;
  })", 1e-5, {{"avx2", "split j1/8; rfactor j1o"}, {"avx512", "split j1/16; rfactor j1o"}});
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 8), float32]) -> Tensor[(2, 3, 8), float32] {
    %g = constant(Tensor[(8), float32]);
    %b = constant(Tensor[(1, 1), float32]);
    %0 = nn.layer_norm(%x, %g, %b, axis=1, epsilon=0.001f);
    return %0;
  })", 1e-5);
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 5, 40), float32]) -> Tensor[(2, 5, 1), float32] {
    %0 = multiply(%x, %x);
    %1 = mean(%0, axis=[2], keepdims=1);
    return %1;
  })", 1e-5, {{"avx2", "rfactor ko"}, {"avx512", "rfactor ko"}});
  // sum, max, min and prod: over the innermost axis (vector partials, but prod) and over outer ones.
  for (const char *op : {"sum", "max", "min", "prod"}) {
    std::string ir = R"(def @main(%x: Tensor[(2, 5, 40), float32]) -> Tensor[(2, 5), float32] {
    %0 = OP(%x, axis=[2], keepdims=0);
    return %0;
  })";
    ir.replace(ir.find("OP"), 2, op);
    expect_compiled_matches(ir, 1e-5);
    std::string outer = R"(def @main(%x: Tensor[(3, 4, 6), float32]) -> Tensor[(1, 4, 1), float32] {
    %0 = OP(%x, axis=[0, 2], keepdims=1);
    return %0;
  })";
    outer.replace(outer.find("OP"), 2, op);
    expect_compiled_matches(outer, 1e-5);
  }
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 5), float32]) -> Tensor[(2, 6, 15), float32] {
    %0 = tile(%x, reps=[1, 2, 3]);
    %1 = sigmoid(%0);
    return %1;
  })", 1e-5);
  // The transcendental and injective ops a transformer adds, in one elementwise group.
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 6, 20), float32], %y: Tensor[(1, 20), float32]) -> Tensor[(2, 3, 20), float32] {
    %0 = strided_slice(%x, begin=[0, 5, 0], end=[2, -1, 20], strides=[1, -2, 1]);
    %1 = broadcast_to(%y, shape=[2, 3, 20]);
    %2 = abs(%1);
    %3 = clip(%2, a_min=0.5f, a_max=100f);
    %4 = power(%3, %0);
    %5 = log(%3);
    %6 = negative(%5);
    %7 = exp(%6);
    %8 = reciprocal(%7);
    %9 = sqrt(%8);
    %10 = multiply(%4, %9);
    return %10;
  })", 1e-5);
}

TEST_P(Lower, PoolsWithCeilModePaddingAndCountIncludePad) {
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 3, 10, 11), float32]) -> Tensor[(1, 3, 5, 6), float32] {
    %0 = nn.max_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);
    return %0;
  })");
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 3, 10, 11), float32]) -> Tensor[(1, 3, 5, 6), float32] {
    %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2], ceil_mode=1);
    return %0;
  })");
  for (const char *include : {"0", "1"}) {
    std::string ir = R"(def @main(%x: Tensor[(2, 4, 9, 9), float32]) -> Tensor[(2, 4, 5, 5), float32] {
    %0 = nn.avg_pool2d(%x, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], count_include_pad=INC);
    %1 = nn.leaky_relu(%0, alpha=0.1f);
    return %1;
  })";
    ir.replace(ir.find("INC"), 3, include);
    expect_compiled_matches(ir);
  }
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 3, 8, 8), float32]) -> Tensor[(1, 3, 4, 4), float32] {
    %0 = nn.avg_pool2d(%x, pool_size=[3, 3], strides=[2, 2], ceil_mode=1, dilation=[1, 1]);
    return %0;
  })");
}

TEST_P(Lower, GlobalPoolMeanAndSoftmax) {
  // Global pools of a plane shorter than a vector, of 4 x 16-lane vectors and a tail (13x17),
  // and of a fused producer (summed by the generic template).
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 5, 4, 3), float32]) -> Tensor[(2, 5, 1, 1), float32] {
    %0 = nn.global_avg_pool2d(%x);
    return %0;
  })");
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 13, 17), float32]) -> Tensor[(2, 3, 1, 1), float32] {
    %0 = nn.global_avg_pool2d(%x);
    return %0;
  })");
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 4, 7, 7), float32]) -> Tensor[(1, 4, 1, 1), float32] {
    %0 = nn.relu(%x);
    %1 = nn.global_avg_pool2d(%0);
    return %1;
  })");
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 4, 5), float32]) -> Tensor[(2, 1, 1, 5), float32] {
    %0 = sigmoid(%x);
    %1 = mean(%0, axis=[1, 2], keepdims=1);
    return %1;
  })");
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 4), float32]) -> Tensor[(3), float32] {
    %0 = mean(%x, axis=[0, 2], keepdims=0);
    return %0;
  })");
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 4), float32]) -> Tensor[(2, 3, 4), float32] {
    %0 = nn.softmax(%x, axis=1);
    return %0;
  })");
}

TEST_P(Lower, InjectiveAndElementwiseChainsInline) {
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 3, 4), float32], %y: Tensor[(4), float32]) -> Tensor[(2, 6, 12), float32] {
    %0 = transpose(%x, axes=[0, 2, 1]);
    %1 = reshape(%0, newshape=[2, 12]);
    %2 = nn.pad(%1, pad_width=[0, 1, 0, 2], pad_value=-0.5f);
    %3 = nn.hard_swish(%2);
    %4 = nn.hard_sigmoid(%3);
    %5 = concatenate(%4, %4, axis=1);
    %6 = reshape(%5, newshape=[2, 6, 5]);
    %7 = concatenate(%6, %6, axis=2);
    %8 = nn.pad(%7, pad_width=[0, 0, 0, 0, 0, 2]);
    return %8;
  })");
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 10), float32]) -> Tensor[(2, 3, 2), float32] {
    %i = constant([9, 0, -1, 4, 5, 2], Tensor[(3, 2), int64]);
    %0 = take(%x, %i, axis=1);
    %1 = clip(%0, a_min=-0.5f, a_max=0.5f);
    return %1;
  })");
  expect_compiled_matches(R"(def @main(%x: Tensor[(1, 4, 3, 3), float32]) -> Tensor[(1, 4, 3, 3), float32] {
    %g = constant(Tensor[(4), float32]);
    %b = constant(Tensor[(4), float32]);
    %m = constant(Tensor[(4), float32]);
    %v = constant([1.0f, 0.5f, 2.0f, 0.25f], Tensor[(4), float32]);
    %0 = nn.batch_norm(%x, %g, %b, %m, %v);
    %1 = multiply(%0, %x);
    return %1;
  })");
}

TEST_P(Lower, NegativeAxesCountFromTheEnd) {
  // Found by autotune_fuzz: a Gather with axis -1 (valid ONNX) indexed before the start of the
  // output's index list in the compiled kernel.
  expect_compiled_matches(R"(def @main(%x: Tensor[(2, 10), float32], %y: Tensor[(2, 3), float32]) -> Tensor[(2, 7), float32] {
    %i = constant([9, 0, -1, 4], Tensor[(4), int64]);
    %0 = take(%x, %i, axis=-1);
    %1 = concatenate(%0, %y, axis=-1);
    return %1;
  })");
}

TEST_P(Lower, KernelsPrintTheirLoopIR) {
  auto g = parse_text(R"(def @main(%x: Tensor[(1, 16, 4, 4), float32]) -> Tensor[(1, 16, 4, 4), float32] {
    %w = constant(Tensor[(16, 16, 1, 1), float32]);
    %0 = nn.conv2d(%x, %w);
    %1 = nn.relu(%0);
    return %1;
  })");
  ASSERT_TRUE(static_cast<bool>(g));
  auto f = run_passes(*g, {"fuse-ops"}, PassContext{});
  ASSERT_TRUE(static_cast<bool>(f));
  const Graph &body = *f->nodes[0].body;
  auto k = lower_group(body, "conv", default_schedule(body, target_));
  ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
  std::string text = k->to_string();
  // The register-blocked conv as steps: 16 channels x px_block pixels of the flattened output.
  EXPECT_NE(text.find("stage conv2d: parallel (f1, 0, "), std::string::npos) << text;
  // One block of 16 channels: the pixel tiles are split over the threads, the remainder a stage
  // of its own (with 32 registers the 16 pixels are one tile).
  if (target_.threads > 1 && default_schedule(body, target_).px_block < 16) {
    EXPECT_NE(text.find("stage conv2d_1: parallel (f1, 0, 1)"), std::string::npos) << text;
  }
  EXPECT_NE(text.find("fmuladd(p0["), std::string::npos) << text;
  // The channels as vectors of the target's width: one of 16 on AVX-512, two of 8 on AVX2.
  EXPECT_NE(text.find(target_.lanes >= 16 ? "vectorized (oi_1, 0, 16)" : "vectorized (oi_1l, 0, 8)"), std::string::npos) << text;
  ASSERT_EQ(k->packings.size(), 1u);
  EXPECT_EQ(k->packings[0].block, 16);  // 16 channels: two vectors of 8 on AVX2, one of 16 on AVX-512
}

TEST_P(Lower, IntegerKernelsFallBackToTheReferenceExecutorAndSaySo) {
  auto g = parse_text(R"(def @main(%x: Tensor[(4), int64]) -> Tensor[(4), int64] {
    %0 = add(%x, %x);
    return %0;
  })");
  ASSERT_TRUE(static_cast<bool>(g));
  auto m = CompiledModel::compile(*g, options());
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  ASSERT_EQ((*m)->groups().size(), 1u);
  EXPECT_EQ((*m)->groups()[0].fallback, "integer-valued kernels are not compiled");
  auto out = (*m)->run({tensor_i64({4}, {1, -2, 3, 4})});
  ASSERT_TRUE(static_cast<bool>(out));
  EXPECT_EQ(std::vector<int64_t>((*out)[0].i64(), (*out)[0].i64() + 4), (std::vector<int64_t>{2, -4, 6, 8}));
}

INSTANTIATE_TEST_SUITE_P(Isa, Lower, ::testing::Values("avx2", "avx512"), [](const auto &info) { return info.param; });

// A group of several anchors is a chain only where each anchor reads the one before's result as
// its data input, and nothing later reads an earlier segment's values; else lowering says why.
TEST(Segments, AChainSplitsAtTheNextAnchorsDataInputAndOtherShapesAreRefused) {
  auto chain = parse_text(R"(def @main(%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(4, 1, 3, 3), float32], %v: Tensor[(8, 4, 1, 1), float32]) -> Tensor[(1, 8, 6, 6), float32] {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=4);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %v);
  %3 = nn.relu(%2);
  return %3;
})");
  ASSERT_TRUE(static_cast<bool>(chain)) << chain.error().message;
  auto fused = lower_to_stage(*chain, Stage::kOptimized, PassContext{});
  ASSERT_TRUE(static_cast<bool>(fused));
  // The whole graph as one group's body: its inputs are the body's arguments.
  auto segs = split_segments(*fused);
  ASSERT_TRUE(static_cast<bool>(segs)) << segs.error().message;
  ASSERT_EQ(segs->size(), 2u);
  EXPECT_EQ((*segs)[0].body.nodes.size(), 2u);  // the depthwise conv and its relu
  EXPECT_EQ((*segs)[0].args, (std::vector<int>{0, 1}));
  EXPECT_EQ((*segs)[1].body.nodes.size(), 2u);  // the 1x1 conv and its relu, reading the first's result
  EXPECT_EQ((*segs)[1].args, (std::vector<int>{-1, 2}));
  // The second conv's data is the graph input, and the first conv's result comes in only by the epilogue.
  auto side = parse_text(R"(def @main(%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(4, 1, 3, 3), float32], %v: Tensor[(4, 4, 1, 1), float32]) -> Tensor[(1, 4, 6, 6), float32] {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=4);
  %1 = nn.conv2d(%x, %v);
  %2 = add(%1, %0);
  return %2;
})");
  ASSERT_TRUE(static_cast<bool>(side));
  auto refused = split_segments(*side);
  ASSERT_FALSE(static_cast<bool>(refused));
  EXPECT_NE(refused.error().message.find("does not read the previous anchor's result as its data input"), std::string::npos)
      << refused.error().message;
  auto k = lower_group(*side, "side", KernelSchedule{});
  ASSERT_FALSE(static_cast<bool>(k));
  EXPECT_NE(k.error().message.find("previous anchor's result"), std::string::npos) << k.error().message;
}

}  // namespace
}  // namespace autotune

// Behaviours of the reference executor on inputs small enough to check by hand. (ONNX's
// conformance data checks it more widely: ConformanceTest.cpp.)
#include <gtest/gtest.h>

#include <cmath>

#include "ir/Reference.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

/** Runs one-input IR text on `x` and returns output 0. */
Tensor run1(const std::string &ir, const Tensor &x) {
  Graph g = testing::parse_ok(ir);
  auto out = run_reference(g, {x});
  EXPECT_TRUE(static_cast<bool>(out)) << (out ? "" : out.error().message);
  return out ? (*out)[0] : Tensor();
}

std::vector<float> values(const Tensor &t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

Tensor iota(const Shape &s) {
  Tensor t(TensorType{DType::kFloat32, s});
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(i);
  return t;
}

TEST(Reference, Conv2dWithPaddingStrideAndBias) {
  // 1x1x3x3 input 0..8, a 2x2 kernel of ones, bias 1, padding 1, stride 2: each output is
  // 1 + the sum of the input window it covers.
  Tensor y = run1(R"(def @main(%x: Tensor[(1, 1, 3, 3), float32]) -> Tensor[(1, 1, 2, 2), float32] {
    %w = constant([1.0f, 1.0f, 1.0f, 1.0f], Tensor[(1, 1, 2, 2), float32]);
    %b = constant([1.0f], Tensor[(1), float32]);
    %0 = nn.conv2d(%x, %w, %b, strides=[2, 2], padding=[1, 1, 1, 1]);
    return %0;
  })", iota({1, 1, 3, 3}));
  EXPECT_EQ(values(y), (std::vector<float>{1 + 0, 1 + 1 + 2, 1 + 3 + 6, 1 + 4 + 5 + 7 + 8}));
}

TEST(Reference, Conv2dNchwcIsTheNchwConvWithBlockedChannels) {
  // Input channels c of pixel p at x[c / 2][p][c % 2] (block 2); a 1x1 conv whose output channel
  // o adds input channels with weight 10^c (o = 0) and 2 * 10^c (o = 1), plus bias o.
  Tensor x(TensorType{DType::kFloat32, {1, 2, 1, 2, 2}});
  // NCHW x[c][p] = c + 4 p, written at its blocked place.
  for (int c = 0; c < 4; ++c)
    for (int p = 0; p < 2; ++p) x.f32()[((c / 2) * 2 + p) * 2 + c % 2] = static_cast<float>(c + 4 * p);
  Tensor y = run1(R"(def @main(%x: Tensor[(1, 2, 1, 2, 2), float32]) -> Tensor[(1, 1, 1, 2, 2), float32] {
    %w = constant([1.0f, 10.0f, 100.0f, 1000.0f, 2.0f, 20.0f, 200.0f, 2000.0f], Tensor[(2, 4, 1, 1), float32]);
    %b = constant([0.0f, 1.0f], Tensor[(2), float32]);
    %0 = nn.conv2d_nchwc(%x, %w, %b);
    return %0;
  })", x);
  // Pixel p: sum_c (c + 4p) 10^c = 3210 + 4444 p; output o at y[0][p][o].
  EXPECT_EQ(values(y), (std::vector<float>{3210, 2 * 3210 + 1, 3210 + 4444, 2 * (3210 + 4444) + 1}));
}

TEST(Reference, DepthwiseConv2dNchwcConvolvesEachChannelAlone) {
  // Four channels in blocks of 2, one pixel row of 3: channel c is x[c / 2][0][p][c % 2] = 10 c + p,
  // its window (1 x 3, padding 1) weighted 1, 2, 3 plus bias c: output pixel p of channel c sums
  // taps p - 1, p, p + 1 inside the row.
  Tensor x(TensorType{DType::kFloat32, {1, 2, 1, 3, 2}});
  for (int c = 0; c < 4; ++c)
    for (int p = 0; p < 3; ++p) x.f32()[((c / 2) * 3 + p) * 2 + c % 2] = static_cast<float>(10 * c + p);
  Tensor y = run1(R"(def @main(%x: Tensor[(1, 2, 1, 3, 2), float32]) -> Tensor[(1, 2, 1, 3, 2), float32] {
    %w = constant([1.0f, 2.0f, 3.0f, 1.0f, 2.0f, 3.0f, 1.0f, 2.0f, 3.0f, 1.0f, 2.0f, 3.0f], Tensor[(4, 1, 1, 3), float32]);
    %b = constant([0.0f, 1.0f, 2.0f, 3.0f], Tensor[(4), float32]);
    %0 = nn.conv2d_nchwc(%x, %w, %b, padding=[0, 1, 0, 1], groups=4);
    return %0;
  })", x);
  std::vector<float> expected(12);
  for (int c = 0; c < 4; ++c)
    for (int p = 0; p < 3; ++p) {
      float v = static_cast<float>(c);
      for (int k = 0; k < 3; ++k)
        if (int q = p + k - 1; q >= 0 && q < 3) v += static_cast<float>((k + 1) * (10 * c + q));
      expected[((c / 2) * 3 + p) * 2 + c % 2] = v;
    }
  EXPECT_EQ(values(y), expected);
}

TEST(Reference, GroupedConvUsesOnlyItsGroupsChannels) {
  // groups=2: output channel 0 sees input channel 0 only, output channel 1 sees channel 1 only.
  Tensor x = iota({1, 2, 1, 1});
  Tensor y = run1(R"(def @main(%x: Tensor[(1, 2, 1, 1), float32]) -> Tensor[(1, 2, 1, 1), float32] {
    %w = constant([10.0f, 100.0f], Tensor[(2, 1, 1, 1), float32]);
    %0 = nn.conv2d(%x, %w, groups=2);
    return %0;
  })", x);
  EXPECT_EQ(values(y), (std::vector<float>{0.0f, 100.0f}));
}

TEST(Reference, DilatedConvSkipsPixels) {
  Tensor y = run1(R"(def @main(%x: Tensor[(1, 1, 1, 5), float32]) -> Tensor[(1, 1, 1, 1), float32] {
    %w = constant([1.0f, 1.0f, 1.0f], Tensor[(1, 1, 1, 3), float32]);
    %0 = nn.conv2d(%x, %w, dilation=[1, 2]);
    return %0;
  })", iota({1, 1, 1, 5}));
  EXPECT_EQ(values(y), (std::vector<float>{0 + 2 + 4}));
}

TEST(Reference, MaxPoolCeilModeKeepsThePartialWindow) {
  Tensor y = run1(R"(def @main(%x: Tensor[(1, 1, 1, 5), float32]) -> Tensor[(1, 1, 1, 3), float32] {
    %0 = nn.max_pool2d(%x, pool_size=[1, 2], strides=[1, 2], ceil_mode=1);
    return %0;
  })", iota({1, 1, 1, 5}));
  EXPECT_EQ(values(y), (std::vector<float>{1, 3, 4}));
}

TEST(Reference, AvgPoolCountIncludePadChangesTheDivisor) {
  std::string ir = R"(def @main(%x: Tensor[(1, 1, 1, 2), float32]) -> Tensor[(1, 1, 1, 2), float32] {
    %0 = nn.avg_pool2d(%x, pool_size=[1, 2], padding=[0, 1, 0, 0], count_include_pad=INCLUDE);
    return %0;
  })";
  Tensor x = tensor_f32({1, 1, 1, 2}, {2, 4});
  std::string excl = ir, incl = ir;
  excl.replace(excl.find("INCLUDE"), 7, "0");
  incl.replace(incl.find("INCLUDE"), 7, "1");
  EXPECT_EQ(values(run1(excl, x)), (std::vector<float>{2, 3}));
  EXPECT_EQ(values(run1(incl, x)), (std::vector<float>{1, 3}));
}

TEST(Reference, BroadcastingBinaryOps) {
  Graph g = testing::parse_ok(R"(def @main(%a: Tensor[(2, 1), float32], %b: Tensor[(3), float32]) -> Tensor[(2, 3), float32] {
    %0 = subtract(%a, %b);
    return %0;
  })");
  auto out = run_reference(g, {tensor_f32({2, 1}, {10, 20}), tensor_f32({3}, {1, 2, 3})});
  ASSERT_TRUE(static_cast<bool>(out));
  EXPECT_EQ(values((*out)[0]), (std::vector<float>{9, 8, 7, 19, 18, 17}));
}

TEST(Reference, SoftmaxIsStableForLargeInputs) {
  Tensor y = run1(R"(def @main(%x: Tensor[(1, 2), float32]) -> Tensor[(1, 2), float32] {
    %0 = nn.softmax(%x, axis=1);
    return %0;
  })", tensor_f32({1, 2}, {1000.0f, 1000.0f}));
  EXPECT_EQ(values(y), (std::vector<float>{0.5f, 0.5f}));
}

TEST(Reference, MeanOverChosenAxes) {
  Tensor y = run1(R"(def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2), float32] {
    %0 = mean(%x, axis=[1], keepdims=0);
    return %0;
  })", iota({2, 3}));
  EXPECT_EQ(values(y), (std::vector<float>{1, 4}));
}

TEST(Reference, TransposePadConcatTake) {
  Tensor x = iota({2, 3});
  EXPECT_EQ(values(run1(R"(def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(3, 2), float32] {
    %0 = transpose(%x, axes=[1, 0]);
    return %0;
  })", x)), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(values(run1(R"(def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 4), float32] {
    %0 = nn.pad(%x, pad_width=[0, 1, 0, 0], pad_value=-1.0f);
    return %0;
  })", x)), (std::vector<float>{-1, 0, 1, 2, -1, 3, 4, 5}));
  EXPECT_EQ(values(run1(R"(def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 5), float32] {
    %c = constant([7.0f, 8.0f, 9.0f, 10.0f], Tensor[(2, 2), float32]);
    %0 = concatenate(%x, %c, axis=1);
    return %0;
  })", x)), (std::vector<float>{0, 1, 2, 7, 8, 3, 4, 5, 9, 10}));
  EXPECT_EQ(values(run1(R"(def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 2), float32] {
    %i = constant([-1, 0], Tensor[(2), int64]);
    %0 = take(%x, %i, axis=1);
    return %0;
  })", x)), (std::vector<float>{2, 0, 5, 3}));
}

TEST(Reference, MatmulBroadcastsBatchDims) {
  Graph g = testing::parse_ok(R"(def @main(%a: Tensor[(2, 1, 2), float32], %b: Tensor[(2, 1), float32]) -> Tensor[(2, 1, 1), float32] {
    %0 = nn.matmul(%a, %b);
    return %0;
  })");
  auto out = run_reference(g, {tensor_f32({2, 1, 2}, {1, 2, 3, 4}), tensor_f32({2, 1}, {10, 1})});
  ASSERT_TRUE(static_cast<bool>(out));
  EXPECT_EQ(values((*out)[0]), (std::vector<float>{12, 34}));
}

TEST(Reference, ElementwiseActivations) {
  Tensor x = tensor_f32({4}, {-6, -1, 0, 3});
  auto run = [&](const std::string &op) {
    return values(run1("def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {\n  %0 = " + op +
                           ";\n  return %0;\n}",
                       x));
  };
  EXPECT_EQ(run("nn.relu(%x)"), (std::vector<float>{0, 0, 0, 3}));
  EXPECT_EQ(run("nn.leaky_relu(%x, alpha=0.5f)"), (std::vector<float>{-3, -0.5f, 0, 3}));
  EXPECT_EQ(run("clip(%x, a_min=-2.0f, a_max=1.0f)"), (std::vector<float>{-2, -1, 0, 1}));
  EXPECT_EQ(run("nn.hard_swish(%x)"), (std::vector<float>{0, -1.0f / 3, 0, 3}));
  EXPECT_EQ(run("nn.hard_sigmoid(%x)"), (std::vector<float>{0, 0.3f, 0.5f, 1}));
  std::vector<float> s = run("sigmoid(%x)");
  EXPECT_FLOAT_EQ(s[1], static_cast<float>(1 / (1 + std::exp(1.0))));
}

TEST(Reference, BatchNormNormalizesPerChannel) {
  Tensor y = run1(R"(def @main(%x: Tensor[(1, 2, 1, 1), float32]) -> Tensor[(1, 2, 1, 1), float32] {
    %g = constant([2.0f, 1.0f], Tensor[(2), float32]);
    %b = constant([1.0f, 0.0f], Tensor[(2), float32]);
    %m = constant([1.0f, 0.0f], Tensor[(2), float32]);
    %v = constant([4.0f, 1.0f], Tensor[(2), float32]);
    %0 = nn.batch_norm(%x, %g, %b, %m, %v, epsilon=0.0f);
    return %0;
  })", tensor_f32({1, 2, 1, 1}, {5, 3}));
  EXPECT_EQ(values(y), (std::vector<float>{(5 - 1) / 2.0f * 2 + 1, 3}));
}

TEST(Reference, WrongInputTypeIsAnErrorNamingTheInput) {
  Graph g = testing::parse_ok("def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {\n  %0 = nn.relu(%x);\n  return %0;\n}");
  auto out = run_reference(g, {tensor_f32({2}, {1, 2})});
  EXPECT_EQ(testing::error_of(out), "input 'x' must be Tensor[(4), float32], got Tensor[(2), float32]");
}

TEST(Reference, IntegerShapeArithmeticRejectsDivisionByZero) {
  Graph g = testing::parse_ok(R"(def @main(%x: Tensor[(2), int64]) -> Tensor[(2), int64] {
    %z = constant([0, 1], Tensor[(2), int64]);
    %0 = divide(%x, %z);
    return %0;
  })");
  EXPECT_EQ(testing::error_of(run_reference(g, {tensor_i64({2}, {4, 6})})), "node %0 (divide): integer division by zero");
}

}  // namespace
}  // namespace autotune

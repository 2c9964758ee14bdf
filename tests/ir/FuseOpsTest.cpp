// FuseOps on IR text, and on the generated models. Each result is also run against the unfused
// graph on the reference executor.
#include <gtest/gtest.h>

#include <map>

#include "ir/Pass.h"
#include "ir/Printer.h"
#include "ir/Verify.h"
#include "ir/passes/Passes.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

using testing::parse_ok;

Graph fuse(const Graph &g, FuseOptions options = {}) {
  auto f = fuse_ops(g, options);
  EXPECT_TRUE(static_cast<bool>(f)) << (f ? "" : f.error().message);
  if (!f) return Graph{};
  EXPECT_TRUE(static_cast<bool>(verify_graph(*f)));
  auto same = verify_equivalent(g, *f, 5, 0.0);  // fusion moves no arithmetic: bit-identical
  EXPECT_TRUE(static_cast<bool>(same)) << (same ? "" : same.error().message);
  return f.take();
}

/** "op+op" for each group, in order. */
std::vector<std::string> groups(const Graph &g) {
  std::vector<std::string> out;
  for (const Node &n : g.nodes) {
    std::string s;
    for (const Node &m : n.body->nodes) s += (s.empty() ? "" : "+") + m.op;
    out.push_back(s);
  }
  return out;
}

TEST(FuseOps, ConvBiasReluIsOneGroup) {
  Graph g = parse_ok(R"(def @main(%x: Tensor[(1, 2, 4, 4), float32]) -> Tensor[(1, 3, 4, 4), float32] {
  %w = constant(Tensor[(3, 2, 3, 3), float32]);
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %b = constant([0.1f, 0.2f, 0.3f], Tensor[(3, 1, 1), float32]);
  %1 = add(%0, %b);
  %2 = nn.relu(%1);
  return %2;
})");
  EXPECT_EQ(print_text(fuse(g)), R"(def @main(%x: Tensor[(1, 2, 4, 4), float32]) -> Tensor[(1, 3, 4, 4), float32] {
  %w = constant(Tensor[(3, 2, 3, 3), float32]);
  %b = constant([0.1f, 0.2f, 0.3f], Tensor[(3, 1, 1), float32]);
  %0 = fn (%p0: Tensor[(1, 2, 4, 4), float32], %p1: Tensor[(3, 2, 3, 3), float32], %p2: Tensor[(3, 1, 1), float32]) -> Tensor[(1, 3, 4, 4), float32] {
    %0 = nn.conv2d(%p0, %p1, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1); /* ty=Tensor[(1, 3, 4, 4), float32] */
    %1 = add(%0, %p2); /* ty=Tensor[(1, 3, 4, 4), float32] */
    %2 = nn.relu(%1); /* ty=Tensor[(1, 3, 4, 4), float32] */
    return %2;
  }(%x, %w, %b); /* ty=Tensor[(1, 3, 4, 4), float32] */
  return %0;
}
)");
}

TEST(FuseOps, FusedTextRoundTrips) {
  Graph f = fuse(testing::load_model("tiny_cnn"));
  std::string text = print_text(f);
  auto parsed = parse_text(text);
  ASSERT_TRUE(static_cast<bool>(parsed)) << parsed.error().message;
  EXPECT_EQ(print_text(*parsed), text);
}

TEST(FuseOps, DenseBiasReluIsOneGroup) {
  Graph g = parse_ok(R"(def @main(%x: Tensor[(2, 8), float32]) -> Tensor[(2, 4), float32] {
    %w = constant(Tensor[(4, 8), float32]);
    %b = constant(Tensor[(4), float32]);
    %0 = nn.dense(%x, %w);
    %1 = add(%0, %b);
    %2 = nn.relu(%1);
    return %2;
  })");
  EXPECT_EQ(groups(fuse(g)), (std::vector<std::string>{"nn.dense+add+nn.relu"}));
}

TEST(FuseOps, ProducerWhoseConsumersDoNotReconvergeKeepsItsOutput) {
  // %0 feeds two outputs: no node post-dominates it, so it fuses into neither consumer.
  Graph g = parse_ok(R"(def @main(%x: Tensor[(1, 2, 4, 4), float32]) -> (Tensor[(1, 2, 4, 4), float32], Tensor[(1, 2, 4, 4), float32]) {
    %w = constant(Tensor[(2, 2, 1, 1), float32]);
    %0 = nn.conv2d(%x, %w);
    %1 = nn.relu(%0);
    %2 = sigmoid(%0);
    return (%1, %2);
  })");
  EXPECT_EQ(groups(fuse(g)), (std::vector<std::string>{"nn.conv2d", "nn.relu", "sigmoid"}));
}

TEST(FuseOps, ConvFeedingTwoBranchesThatReconvergeAtAnElementwiseAddFuses) {
  // Every path from the conv reaches the add through elementwise ops: one group.
  Graph g = parse_ok(R"(def @main(%x: Tensor[(1, 2, 4, 4), float32]) -> Tensor[(1, 2, 4, 4), float32] {
    %w = constant(Tensor[(2, 2, 1, 1), float32]);
    %0 = nn.conv2d(%x, %w);
    %1 = nn.relu(%0);
    %2 = sigmoid(%0);
    %3 = add(%1, %2);
    return %3;
  })");
  EXPECT_EQ(groups(fuse(g)), (std::vector<std::string>{"nn.conv2d+nn.relu+sigmoid+add"}));
}

TEST(FuseOps, ResidualBlockTakesTheAddIntoTheSecondConvOnly) {
  // A ResNet basic block after BN folding: the block input feeds conv1 and the skip add. The
  // add post-dominates it, but the path through conv1 is not elementwise, so the input's own
  // group stays; conv2 takes the add and the relu; conv1 takes its relu.
  Graph g = parse_ok(R"(def @main(%x: Tensor[(1, 4, 8, 8), float32]) -> Tensor[(1, 4, 8, 8), float32] {
    %w0 = constant(Tensor[(4, 4, 3, 3), float32]);
    %b0 = constant(Tensor[(4), float32]);
    %0 = nn.conv2d(%x, %w0, %b0, padding=[1, 1, 1, 1]);
    %1 = nn.relu(%0);
    %w1 = constant(Tensor[(4, 4, 3, 3), float32]);
    %b1 = constant(Tensor[(4), float32]);
    %2 = nn.conv2d(%1, %w1, %b1, padding=[1, 1, 1, 1]);
    %3 = nn.relu(%2);
    %w2 = constant(Tensor[(4, 4, 3, 3), float32]);
    %b2 = constant(Tensor[(4), float32]);
    %4 = nn.conv2d(%3, %w2, %b2, padding=[1, 1, 1, 1]);
    %5 = add(%4, %1);
    %6 = nn.relu(%5);
    return %6;
  })");
  EXPECT_EQ(groups(fuse(g)),
            (std::vector<std::string>{"nn.conv2d+nn.relu", "nn.conv2d+nn.relu", "nn.conv2d+add+nn.relu"}));
}

TEST(FuseOps, TwoConvsNeverShareAGroup) {
  // Both convs are post-dominated by the add; only the first to reach it takes it.
  Graph g = parse_ok(R"(def @main(%x: Tensor[(1, 4, 8, 8), float32]) -> Tensor[(1, 8, 4, 4), float32] {
    %w0 = constant(Tensor[(8, 4, 3, 3), float32]);
    %0 = nn.conv2d(%x, %w0, strides=[2, 2], padding=[1, 1, 1, 1]);
    %w1 = constant(Tensor[(8, 4, 1, 1), float32]);
    %1 = nn.conv2d(%x, %w1, strides=[2, 2]);
    %2 = add(%0, %1);
    %3 = nn.relu(%2);
    return %3;
  })");
  EXPECT_EQ(groups(fuse(g)), (std::vector<std::string>{"nn.conv2d", "nn.conv2d+add+nn.relu"}));
}

TEST(FuseOps, AReshapeBetweenConvAndReluBlocksTheEpilogue) {
  // The reshape is injective: the conv cannot take it as an elementwise epilogue, so the printed
  // IR shows the conv alone and the reshape fused with the relu instead.
  Graph f = fuse(parse_ok(R"(def @main(%x: Tensor[(1, 2, 4, 4), float32]) -> Tensor[(1, 32), float32] {
    %w = constant(Tensor[(2, 2, 1, 1), float32]);
    %0 = nn.conv2d(%x, %w);
    %1 = reshape(%0, newshape=[1, 32]);
    %2 = nn.relu(%1);
    return %2;
  })"));
  EXPECT_EQ(groups(f), (std::vector<std::string>{"nn.conv2d", "reshape+nn.relu"}));
  EXPECT_NE(print_text(f).find("    %0 = reshape(%p0, newshape=[1, 32]);"), std::string::npos);
}

TEST(FuseOps, ElementwiseOpsJoinAReductionBelowThem) {
  Graph g = parse_ok(R"(def @main(%x: Tensor[(2, 8), float32]) -> Tensor[(2), float32] {
    %0 = sigmoid(%x);
    %1 = mean(%0, axis=[1], keepdims=0);
    return %1;
  })");
  EXPECT_EQ(groups(fuse(g)), (std::vector<std::string>{"sigmoid+mean"}));
}

TEST(FuseOps, MaxGroupSizeIsRespected) {
  std::string ir = "def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {\n  %0 = nn.relu(%x);\n";
  for (int i = 1; i < 10; ++i) ir += "  %" + std::to_string(i) + " = sigmoid(%" + std::to_string(i - 1) + ");\n";
  ir += "  return %9;\n}";
  Graph g = parse_ok(ir);
  EXPECT_EQ(fuse(g).nodes.size(), 1u);
  FuseOptions small;
  small.max_group_size = 3;
  Graph f = fuse(g, small);
  EXPECT_GE(f.nodes.size(), 4u);
  for (const Node &n : f.nodes) EXPECT_LE(n.body->nodes.size(), 3u);
}

/** Group counts by their op sequence, after the optimized pipeline and fuse-ops. */
std::map<std::string, int> census(const std::string &model) {
  auto f = lower_to_stage(testing::load_model(model), Stage::kFused, PassContext{});
  EXPECT_TRUE(static_cast<bool>(f));
  std::map<std::string, int> c;
  if (f)
    for (const std::string &s : groups(*f)) ++c[s];
  return c;
}

TEST(FuseOps, ResNet50FusesToOneGroupPerConvInBothBatchNormForms) {
  for (const char *model : {"resnet50", "resnet50_bn"}) {
    SCOPED_TRACE(model);
    auto c = census(model);
    // 53 convs: 16 take the residual add and relu, 33 a relu, 4 downsample convs stand alone.
    // All but the stem run in NCHW16c (nchwc-layout), converted after the pool; the global pool
    // is the mean of the blocked planes, its 2048 values converted back with the flatten.
    EXPECT_EQ(c["nn.conv2d_nchwc+add+nn.relu"], 16);
    EXPECT_EQ(c["nn.conv2d+nn.relu"], 1);
    EXPECT_EQ(c["nn.conv2d_nchwc+nn.relu"], 32);
    EXPECT_EQ(c["nn.conv2d_nchwc"], 4);
    EXPECT_EQ(c["nn.max_pool2d"], 1);
    EXPECT_EQ(c["nn.to_nchwc"], 1);
    EXPECT_EQ(c["mean"], 1);
    EXPECT_EQ(c["nn.from_nchwc+reshape"], 1);
    EXPECT_EQ(c["nn.dense+add"], 1);
    int total = 0;
    for (const auto &[k, v] : c) total += v;
    EXPECT_EQ(total, 58);
  }
}

}  // namespace
}  // namespace autotune

// The pass infrastructure and the graph optimizations, IR text in and expected IR text out;
// every rewrite is also checked by execution (verify_equivalent).
#include <gtest/gtest.h>

#include "ir/Pass.h"
#include "ir/Printer.h"
#include "ir/Verify.h"
#include "ir/passes/Passes.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

using testing::parse_ok;

/** Applies `pass` to IR text, checks the result computes the same function, returns its text. */
std::string rewrite(Expected<Graph> (*pass)(const Graph &), const std::string &ir) {
  Graph before = parse_ok(ir);
  auto after = pass(before);
  EXPECT_TRUE(static_cast<bool>(after)) << (after ? "" : after.error().message);
  if (!after) return "";
  EXPECT_TRUE(static_cast<bool>(verify_graph(*after)));
  auto same = verify_equivalent(before, *after, 3, 1e-5);
  EXPECT_TRUE(static_cast<bool>(same)) << (same ? "" : same.error().message);
  return print_text(*after);
}

TEST(PassContext, DisabledBeatsRequiredBeatsOptLevel) {
  Pass cse{"eliminate-common-subexpr", 3, nullptr, {}};
  PassContext ctx;
  ctx.opt_level = 2;
  EXPECT_FALSE(ctx.enabled(cse));  // opt level too low
  ctx.required.insert(cse.name);
  EXPECT_TRUE(ctx.enabled(cse));  // required beats opt level
  ctx.disabled.insert(cse.name);
  EXPECT_FALSE(ctx.enabled(cse));  // disabled beats required
  ctx = PassContext{};
  ctx.opt_level = 3;
  EXPECT_TRUE(ctx.enabled(cse));
}

class Recorder : public PassInstrument {
 public:
  Status before_pass(const Pass &p, const Graph &) override {
    names.push_back(p.name);
    return Status::ok();
  }
  std::vector<std::string> names;
};

TEST(PassContext, RequiredPassesRunFirstAndDisabledOnesNever) {
  Graph g = parse_ok("def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {\n  %0 = nn.relu(%x);\n  return %0;\n}");
  auto rec = std::make_shared<Recorder>();
  PassContext ctx;
  ctx.instruments.push_back(rec);
  ctx.opt_level = 1;
  ASSERT_TRUE(static_cast<bool>(run_passes(g, {"fold-constants", "fuse-ops", "eliminate-dead-code"}, ctx)));
  // fold-constants (level 2) is skipped at opt level 1; fuse-ops brings its requirement first.
  EXPECT_EQ(rec->names, (std::vector<std::string>{"infer-shapes", "fuse-ops", "eliminate-dead-code"}));
  rec->names.clear();
  ctx.disabled = {"infer-shapes", "eliminate-dead-code"};
  ASSERT_TRUE(static_cast<bool>(run_passes(g, {"fuse-ops", "eliminate-dead-code"}, ctx)));
  EXPECT_EQ(rec->names, (std::vector<std::string>{"fuse-ops"}));
}

TEST(PassContext, UnknownDisabledPassIsAnError) {
  PassContext ctx;
  ctx.disabled.insert("fold-everything");
  auto r = run_passes(parse_ok("def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {\n  %0 = nn.relu(%x);\n  return %0;\n}"), {}, ctx);
  EXPECT_EQ(testing::error_of(r).rfind("unknown pass 'fold-everything'", 0), 0u);
}

TEST(Verify, APassThatChangesTheResultFailsWithItsName) {
  Graph g = parse_ok("def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {\n  %0 = nn.relu(%x);\n  return %0;\n}");
  Pass broken{"relu-to-sigmoid", 0, [](const Graph &in) -> Expected<Graph> {
                Graph out = in;
                out.nodes[0].op = "sigmoid";
                return out;
              }, {}};
  PassContext ctx;
  ctx.instruments.push_back(std::make_shared<VerifyInstrument>(0, 1e-5));
  Graph cur = g;
  for (const auto &inst : ctx.instruments) ASSERT_TRUE(static_cast<bool>(inst->before_pass(broken, cur)));
  auto next = broken.run(cur);
  Status st = ctx.instruments[0]->after_pass(broken, cur, *next);
  ASSERT_FALSE(static_cast<bool>(st));
  EXPECT_EQ(st.error().message.rfind("verify: pass relu-to-sigmoid changed the result: output 0 differs: value at element", 0), 0u)
      << st.error().message;
}

TEST(Simplify, RemovesIdentityDropoutAndNoOpReshapes) {
  EXPECT_EQ(rewrite(simplify, R"(def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(3, 2), float32] {
    %0 = identity(%x);
    %1 = nn.dropout(%0);
    %2 = reshape(%1, newshape=[2, 3]);
    %3 = transpose(%2, axes=[0, 1]);
    %4 = reshape(%3, newshape=[6]);
    %5 = reshape(%4, newshape=[3, 2]);
    %6 = nn.relu(%5);
    return %6;
  })"),
            R"(def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(3, 2), float32] {
  %0 = reshape(%x, newshape=[6]); /* ty=Tensor[(6), float32] */
  %1 = reshape(%x, newshape=[3, 2]); /* ty=Tensor[(3, 2), float32] */
  %2 = nn.relu(%1); /* ty=Tensor[(3, 2), float32] */
  return %2;
}
)");
}

TEST(Simplify, KeepsOutputsComputedByNodes) {
  std::string ir = "def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {\n  %0 = identity(%x); /* ty=Tensor[(2), float32] */\n  return %0;\n}\n";
  EXPECT_EQ(rewrite(simplify, ir), ir);
}

TEST(FoldConstants, EvaluatesConstantSubgraphs) {
  EXPECT_EQ(rewrite(fold_constants, R"(def @main(%x: Tensor[(1, 2), float32]) -> Tensor[(1, 3), float32] {
    %w = constant([1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f], Tensor[(2, 3), float32]);
    %0 = transpose(%w, axes=[1, 0]);
    %1 = nn.dense(%x, %0);
    return %1;
  })"),
            R"(def @main(%x: Tensor[(1, 2), float32]) -> Tensor[(1, 3), float32] {
  %w.transpose = constant([1.0f, 4.0f, 2.0f, 5.0f, 3.0f, 6.0f], Tensor[(3, 2), float32]);
  %0 = nn.dense(%x, %w.transpose); /* ty=Tensor[(1, 3), float32] */
  return %0;
}
)");
}

TEST(FoldBatchNorm, FoldsIntoTheConvBeforeIt) {
  std::string out = rewrite(fold_batch_norm, R"(def @main(%x: Tensor[(1, 2, 4, 4), float32]) -> Tensor[(1, 3, 4, 4), float32] {
    %w = constant(Tensor[(3, 2, 3, 3), float32]);
    %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
    %g = constant([0.5f, 1.0f, 2.0f], Tensor[(3), float32]);
    %b = constant([0.1f, 0.2f, 0.3f], Tensor[(3), float32]);
    %m = constant([1.0f, -1.0f, 0.0f], Tensor[(3), float32]);
    %v = constant([1.0f, 4.0f, 0.25f], Tensor[(3), float32]);
    %1 = nn.batch_norm(%0, %g, %b, %m, %v, epsilon=0.0f);
    return %1;
  })");
  Graph g = parse_ok(out);
  auto dead = eliminate_dead_code(g);
  ASSERT_TRUE(static_cast<bool>(dead));
  ASSERT_EQ(dead->nodes.size(), 1u);
  EXPECT_EQ(dead->nodes[0].op, "nn.conv2d");
  EXPECT_EQ(dead->nodes[0].inputs.size(), 3u);  // the folded bias
}

TEST(FoldBatchNorm, FoldsIntoDenseWithItsBias) {
  std::string out = rewrite(fold_batch_norm, R"(def @main(%x: Tensor[(2, 4), float32]) -> Tensor[(2, 3), float32] {
    %w = constant(Tensor[(3, 4), float32]);
    %0 = nn.dense(%x, %w);
    %c = constant([1.0f, 2.0f, 3.0f], Tensor[(3), float32]);
    %1 = add(%0, %c);
    %g = constant([0.5f, 1.0f, 2.0f], Tensor[(3), float32]);
    %b = constant([0.1f, 0.2f, 0.3f], Tensor[(3), float32]);
    %m = constant([1.0f, -1.0f, 0.0f], Tensor[(3), float32]);
    %v = constant([1.0f, 4.0f, 0.25f], Tensor[(3), float32]);
    %2 = nn.batch_norm(%1, %g, %b, %m, %v);
    return %2;
  })");
  auto g = eliminate_dead_code(parse_ok(out));
  ASSERT_TRUE(static_cast<bool>(g));
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op, "nn.dense");
  EXPECT_EQ(g->nodes[1].op, "add");
}

TEST(FoldBatchNorm, ElsewhereBecomesPerChannelMultiplyAdd) {
  // As in DenseNet: a batch norm after a relu (after a concat) has no conv to fold into.
  std::string out = rewrite(fold_batch_norm, R"(def @main(%x: Tensor[(1, 2, 3, 3), float32]) -> Tensor[(1, 2, 3, 3), float32] {
    %0 = nn.relu(%x);
    %g = constant([0.5f, 2.0f], Tensor[(2), float32]);
    %b = constant([0.1f, 0.3f], Tensor[(2), float32]);
    %m = constant([1.0f, 0.0f], Tensor[(2), float32]);
    %v = constant([1.0f, 4.0f], Tensor[(2), float32]);
    %1 = nn.batch_norm(%0, %g, %b, %m, %v, epsilon=0.0f);
    return %1;
  })");
  EXPECT_NE(out.find("%bn.scale = constant([0.5f, 1.0f], Tensor[(2, 1, 1), float32]);"), std::string::npos) << out;
  EXPECT_NE(out.find("%1 = multiply(%0, %bn.scale)"), std::string::npos) << out;
  EXPECT_NE(out.find("%2 = add(%1, %bn.shift)"), std::string::npos) << out;
}

TEST(FoldBatchNorm, ConvWithASecondConsumerIsNotRewritten) {
  std::string out = rewrite(fold_batch_norm, R"(def @main(%x: Tensor[(1, 2, 3, 3), float32]) -> (Tensor[(1, 2, 3, 3), float32], Tensor[(1, 2, 3, 3), float32]) {
    %w = constant(Tensor[(2, 2, 1, 1), float32]);
    %0 = nn.conv2d(%x, %w);
    %g = constant([0.5f, 2.0f], Tensor[(2), float32]);
    %b = constant([0.1f, 0.3f], Tensor[(2), float32]);
    %m = constant([1.0f, 0.0f], Tensor[(2), float32]);
    %v = constant([1.0f, 4.0f], Tensor[(2), float32]);
    %1 = nn.batch_norm(%0, %g, %b, %m, %v);
    %2 = nn.relu(%0);
    return (%1, %2);
  })");
  EXPECT_NE(out.find("multiply(%0, "), std::string::npos) << out;
}

int count_of(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

/** The ops of `g` after dead-code elimination, in order, joined by spaces. */
std::string live_ops(const std::string &ir) {
  auto g = eliminate_dead_code(parse_ok(ir));
  EXPECT_TRUE(static_cast<bool>(g));
  std::string ops;
  for (const Node &n : g->nodes) ops += (ops.empty() ? "" : " ") + n.op;
  return ops;
}

/** A layer norm over the last `axes` axes of (2, 3, 8), decomposed as PyTorch's opset-13 export writes it, then `tail`. */
std::string decomposed_layer_norm(const std::string &axes, const std::string &tail, const std::string &outputs = "%9", const std::string &out_type = "Tensor[(2, 3, 8), float32]") {
  return R"(def @main(%x: Tensor[(2, 3, 8), float32]) -> )" + out_type + R"( {
    %0 = mean(%x, axis=)" + axes + R"();
    %1 = subtract(%x, %0);
    %2 = multiply(%1, %1);
    %3 = mean(%2, axis=)" + axes + R"();
    %eps = constant([1e-05f], Tensor[(), float32]);
    %4 = add(%3, %eps);
    %5 = sqrt(%4);
    %6 = divide(%1, %5);
    %g = constant(Tensor[(8), float32]);
    %7 = multiply(%g, %6);
    %b = constant(Tensor[(8), float32]);
    %8 = add(%7, %b);
)" + tail + "    return " + outputs + ";\n  }";
}

TEST(FuseLayerNorm, TheDecomposedFormBecomesOneOp) {
  // Over the last axis, the scale as either operand, then a consumer that stays apart.
  std::string out = rewrite(fuse_layer_norm, decomposed_layer_norm("[-1]", "    %9 = nn.relu(%8);\n"));
  EXPECT_EQ(live_ops(out), "nn.layer_norm nn.relu") << out;
  EXPECT_NE(out.find("axis=2, epsilon=1e-05f"), std::string::npos) << out;
  // Over the last two axes: the scale (8) still broadcasts over the normalized (3, 8).
  out = rewrite(fuse_layer_norm, decomposed_layer_norm("[1, 2]", "    %9 = nn.relu(%8);\n"));
  EXPECT_EQ(live_ops(out), "nn.layer_norm nn.relu") << out;
  EXPECT_NE(out.find("axis=1"), std::string::npos) << out;
  // Without scale and bias: ones and zeros.
  std::string bare = R"(def @main(%x: Tensor[(4, 16), float32]) -> Tensor[(4, 16), float32] {
    %0 = mean(%x, axis=[1]);
    %1 = subtract(%x, %0);
    %2 = multiply(%1, %1);
    %3 = mean(%2, axis=[1]);
    %eps = constant([0.001f], Tensor[(), float32]);
    %4 = add(%eps, %3);
    %5 = sqrt(%4);
    %6 = divide(%1, %5);
    return %6;
  })";
  out = rewrite(fuse_layer_norm, bare);
  EXPECT_EQ(live_ops(out), "nn.layer_norm") << out;
}

TEST(FuseLayerNorm, ChainsWithAnotherUseOrAnotherShapeStay) {
  // The mean is also an output: not fused.
  std::string out = rewrite(fuse_layer_norm, decomposed_layer_norm("[-1]", "", "(%8, %0)", "(Tensor[(2, 3, 8), float32], Tensor[(2, 3, 1), float32])"));
  EXPECT_EQ(out.find("nn.layer_norm"), std::string::npos) << out;
  // Statistics over a middle axis: not a layer norm over trailing axes.
  out = rewrite(fuse_layer_norm, decomposed_layer_norm("[1]", "    %9 = nn.relu(%8);\n"));
  EXPECT_EQ(out.find("nn.layer_norm"), std::string::npos) << out;
  // The divide's result used twice: fused up to the divide only would lose it, so nothing fuses past it.
  out = rewrite(fuse_layer_norm, decomposed_layer_norm("[-1]", "    %9 = add(%8, %6);\n"));
  EXPECT_EQ(count_of(out, "nn.layer_norm"), 1) << out;
  EXPECT_EQ(live_ops(out), "nn.layer_norm multiply add add") << out;
}

TEST(FuseLayerNorm, BothImportedFormsFuseInTheGeneratedModels) {
  // vit_tiny's LayerNormalization (opset 17, decomposed at import) and the transformer's
  // PyTorch opset-13 pattern: every layer norm becomes one op, no sqrt is left.
  for (const char *name : {"vit_tiny", "transformer"}) {
    auto g = lower_to_stage(testing::load_model(name), Stage::kOptimized, PassContext{});
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    std::string text = print_text(*g);
    EXPECT_GE(count_of(text, "nn.layer_norm("), 3) << name;
    EXPECT_EQ(count_of(text, "sqrt("), 0) << name << "\n" << text;
  }
}

TEST(EliminateDeadCode, DropsUnusedNodesAndTheirConstants) {
  EXPECT_EQ(rewrite(eliminate_dead_code, R"(def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
    %c = constant([1.0f, 2.0f], Tensor[(2), float32]);
    %0 = add(%x, %c);
    %1 = nn.relu(%x);
    return %1;
  })"),
            "def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {\n  %0 = nn.relu(%x); /* ty=Tensor[(2), float32] */\n  return %0;\n}\n");
}

TEST(EliminateCommonSubexpr, MergesIdenticalNodes) {
  EXPECT_EQ(rewrite(eliminate_common_subexpr, R"(def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
    %0 = nn.leaky_relu(%x, alpha=0.2f);
    %1 = nn.leaky_relu(%x, alpha=0.2f);
    %2 = nn.leaky_relu(%x, alpha=0.3f);
    %3 = add(%0, %1);
    %4 = add(%3, %2);
    return %4;
  })"),
            R"(def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  %0 = nn.leaky_relu(%x, alpha=0.2f); /* ty=Tensor[(2), float32] */
  %1 = nn.leaky_relu(%x, alpha=0.3f); /* ty=Tensor[(2), float32] */
  %2 = add(%0, %0); /* ty=Tensor[(2), float32] */
  %3 = add(%2, %1); /* ty=Tensor[(2), float32] */
  return %3;
}
)");
}

TEST(NchwcLayout, ConvertsAChainAtItsEndsAndEachValueOnce) {
  // conv -> relu -> 1x1 conv -> residual add -> per-channel multiply stays blocked; the pool
  // reads the plain form and the add after it converts its result back.
  std::string out = rewrite(+[](const Graph &g) { return nchwc_layout(g); }, R"(
def @main(%x: Tensor[(1, 16, 8, 8), float32]) -> Tensor[(1, 32, 8, 8), float32] {
  %w1 = constant(Tensor[(32, 16, 3, 3), float32]);
  %b1 = constant(Tensor[(32), float32]);
  %w2 = constant(Tensor[(32, 32, 1, 1), float32]);
  %s = constant(Tensor[(1, 32, 1, 1), float32]);
  %0 = nn.conv2d(%x, %w1, %b1, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2);
  %3 = add(%2, %1);
  %4 = multiply(%3, %s);
  %5 = nn.max_pool2d(%4, pool_size=[3, 3], padding=[1, 1, 1, 1]);
  %6 = add(%5, %4);
  return %6;
}
)");
  EXPECT_EQ(count_of(out, "nn.conv2d_nchwc("), 2) << out;
  EXPECT_EQ(count_of(out, "nn.to_nchwc("), 2) << out;   // the input, and the pool's result
  EXPECT_EQ(count_of(out, "nn.from_nchwc("), 2) << out; // %4 for the pool (once), and the output
  EXPECT_NE(out.find("Tensor[(1, 2, 1, 1, 16), float32]"), std::string::npos) << out;  // the per-channel constant, blocked
}

TEST(NchwcLayout, ConvertsADepthwiseSeparableBlockWhole) {
  // MobileNet's block (1x1 conv, depthwise conv, 1x1 conv, residual add) and the convs after the
  // pool: every conv blocked, the depthwise one too, so no layout change between them.
  std::string out = rewrite(+[](const Graph &g) { return nchwc_layout(g); }, R"(
def @main(%x: Tensor[(1, 16, 8, 8), float32]) -> Tensor[(1, 16, 8, 8), float32] {
  %w1 = constant(Tensor[(32, 16, 1, 1), float32]);
  %w2 = constant(Tensor[(32, 1, 3, 3), float32]);
  %w3 = constant(Tensor[(16, 32, 1, 1), float32]);
  %w4 = constant(Tensor[(16, 16, 3, 3), float32]);
  %w5 = constant(Tensor[(16, 16, 1, 1), float32]);
  %0 = nn.conv2d(%x, %w1);
  %1 = clip(%0, a_min=0.0, a_max=6.0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1, 1, 1], groups=32);
  %3 = nn.conv2d(%2, %w3);
  %4 = add(%3, %x);
  %5 = nn.max_pool2d(%4, pool_size=[3, 3], padding=[1, 1, 1, 1]);
  %6 = nn.conv2d(%5, %w4, padding=[1, 1, 1, 1]);
  %7 = nn.relu(%6);
  %8 = nn.conv2d(%7, %w5);
  return %8;
}
)");
  EXPECT_EQ(count_of(out, "nn.conv2d("), 0) << out;
  EXPECT_EQ(count_of(out, "nn.conv2d_nchwc("), 5) << out;
  EXPECT_NE(out.find("groups=32"), std::string::npos) << out;
  EXPECT_EQ(count_of(out, "nn.to_nchwc("), 2) << out;    // the input, and the pool's result
  EXPECT_EQ(count_of(out, "nn.from_nchwc("), 2) << out;  // the pool's input, and the output
}

TEST(NchwcLayout, ChangesLayoutNextToAPlainConvOnlyOnSmallTensors) {
  // Four 1x1 convs, then a depthwise conv next to a conv of 24 output channels (which no block of
  // 16 divides: it stays plain). Between the depthwise conv and it a layout change is made where
  // that tensor is small (32 x 32 x 32 floats, 128 KiB): the five convs before it are blocked
  // (one change on each side for five convs). At 160 x 160 (3.3 MB, more than 2 MiB) the
  // depthwise conv stays plain, then the conv before it, and so on: all of them.
  for (int64_t side : {32, 160}) {
    std::string t = "Tensor[(1, 32, " + std::to_string(side) + ", " + std::to_string(side) + "), float32]";
    std::string t24 = "Tensor[(1, 24, " + std::to_string(side) + ", " + std::to_string(side) + "), float32]";
    std::string out = rewrite(+[](const Graph &g) { return nchwc_layout(g); }, "def @main(%x: " + t + ") -> " + t24 + R"( {
  %w1 = constant(Tensor[(32, 32, 1, 1), float32]);
  %w2 = constant(Tensor[(32, 32, 1, 1), float32]);
  %w3 = constant(Tensor[(32, 1, 3, 3), float32]);
  %w4 = constant(Tensor[(24, 32, 1, 1), float32]);
  %0 = nn.conv2d(%x, %w1);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2);
  %3 = nn.conv2d(%2, %w1);
  %4 = nn.conv2d(%3, %w2);
  %5 = nn.conv2d(%4, %w3, padding=[1, 1, 1, 1], groups=32);
  %6 = nn.conv2d(%5, %w4);
  return %6;
}
)");
    EXPECT_EQ(count_of(out, "nn.conv2d_nchwc("), side == 32 ? 5 : 0) << out;
    EXPECT_EQ(count_of(out, "groups=32"), 1) << out;
    EXPECT_EQ(count_of(out, "nn.from_nchwc("), side == 32 ? 1 : 0) << out;
  }
}

TEST(NchwcLayout, ConvertsASqueezeExcitationBlockWithItsPoolAndScaleAsChannelValues) {
  // EfficientNet's block: the expansion, depthwise and projection convs blocked; the
  // squeeze-excitation's pool is the mean of the blocked planes, and only its C values change
  // layout, out to the convs on one pixel (which stay plain) and back in as the multiply's scale.
  std::string out = rewrite(+[](const Graph &g) { return nchwc_layout(g); }, R"(
def @main(%x: Tensor[(1, 16, 8, 8), float32]) -> Tensor[(1, 16, 8, 8), float32] {
  %w1 = constant(Tensor[(64, 16, 1, 1), float32]);
  %w2 = constant(Tensor[(64, 1, 3, 3), float32]);
  %ws1 = constant(Tensor[(16, 64, 1, 1), float32]);
  %ws2 = constant(Tensor[(64, 16, 1, 1), float32]);
  %w3 = constant(Tensor[(16, 64, 1, 1), float32]);
  %0 = nn.conv2d(%x, %w1);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w2, padding=[1, 1, 1, 1], groups=64);
  %3 = nn.relu(%2);
  %4 = nn.global_avg_pool2d(%3);
  %5 = nn.conv2d(%4, %ws1);
  %6 = nn.relu(%5);
  %7 = nn.conv2d(%6, %ws2);
  %8 = sigmoid(%7);
  %9 = multiply(%3, %8);
  %10 = nn.conv2d(%9, %w3);
  %11 = add(%10, %x);
  return %11;
}
)");
  EXPECT_EQ(count_of(out, "nn.conv2d_nchwc("), 3) << out;
  EXPECT_EQ(count_of(out, "nn.conv2d("), 2) << out;
  EXPECT_NE(out.find("mean(%4, axis=[2, 3], keepdims=1); /* ty=Tensor[(1, 4, 1, 1, 16), float32] */"), std::string::npos) << out;
  EXPECT_NE(out.find("nn.to_nchwc(%10, block=16); /* ty=Tensor[(1, 4, 1, 1, 16), float32] */"), std::string::npos) << out;
  EXPECT_EQ(count_of(out, "nn.to_nchwc("), 2) << out;    // the input (once, for the conv and the add), the scale
  EXPECT_EQ(count_of(out, "nn.from_nchwc("), 2) << out;  // the pool's channel values, the output
}

TEST(NchwcLayout, LeavesConvsTheBlockDoesNotDivideAndConvsAlone) {
  // 24 input channels; and a conv with no conv next to it would be converted in and out for itself.
  std::string ir = R"(
def @main(%x: Tensor[(1, 24, 6, 6), float32]) -> Tensor[(1, 32, 6, 6), float32] {
  %w = constant(Tensor[(32, 24, 3, 3), float32]);
  %w2 = constant(Tensor[(32, 32, 3, 3), float32]);
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  %1 = nn.relu(%0);
  %2 = nn.max_pool2d(%1, pool_size=[3, 3], padding=[1, 1, 1, 1]);
  %3 = nn.conv2d(%2, %w2, padding=[1, 1, 1, 1]);
  return %3;
}
)";
  std::string out = rewrite(+[](const Graph &g) { return nchwc_layout(g); }, ir);
  EXPECT_EQ(count_of(out, "nchwc"), 0) << out;
}

TEST(Pipeline, EveryPassKeepsEveryModelsOutputWithin1e5) {
  for (const char *name : {"tiny_cnn", "mlp", "shape_ops", "legacy", "resnet18", "resnet18_bn", "resnet50", "resnet50_bn", "transformer", "vit_tiny", "modern_cnn"}) {
    Graph g = testing::load_model(name);
    // Every model without nchwc-layout, three with it too (the reference's blocked convs are slow).
    bool blocked = std::string(name) == "tiny_cnn" || std::string(name) == "resnet18_bn" || std::string(name) == "legacy";
    for (bool layout : {false, true}) {
      if (layout && !blocked) continue;
      SCOPED_TRACE(std::string(name) + (layout ? " with" : " without") + " nchwc-layout");
      PassContext ctx;
      if (!layout) ctx.disabled.insert("nchwc-layout");
      ctx.instruments.push_back(std::make_shared<VerifyInstrument>(11, 1e-5));
      auto fused = lower_to_stage(g, Stage::kFused, ctx);
      ASSERT_TRUE(static_cast<bool>(fused)) << fused.error().message;
      EXPECT_TRUE(static_cast<bool>(verify_graph(*fused)));
    }
  }
}

}  // namespace
}  // namespace autotune

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

TEST(Pipeline, EveryPassKeepsEveryModelsOutputWithin1e5) {
  for (const char *name : {"tiny_cnn", "mlp", "shape_ops", "legacy", "resnet18", "resnet18_bn", "resnet50", "resnet50_bn"}) {
    SCOPED_TRACE(name);
    Graph g = testing::load_model(name);
    PassContext ctx;
    ctx.instruments.push_back(std::make_shared<VerifyInstrument>(11, 1e-5));
    auto fused = lower_to_stage(g, Stage::kFused, ctx);
    ASSERT_TRUE(static_cast<bool>(fused)) << fused.error().message;
    EXPECT_TRUE(static_cast<bool>(verify_graph(*fused)));
  }
}

}  // namespace
}  // namespace autotune

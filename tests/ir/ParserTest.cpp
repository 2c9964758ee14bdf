#include <gtest/gtest.h>

#include "ir/Printer.h"
#include "ir/Reference.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

using testing::error_of;
using testing::parse_ok;

const char *kConvBlock = R"(def @main(%x: Tensor[(1, 4, 8, 8), float32]) -> Tensor[(1, 8, 8, 8), float32] {
  %w = constant(Tensor[(8, 4, 3, 3), float32]);
  %b = constant([0.5f, -1.0f, 0.25f, 0.0f, 1.0f, 2.0f, 3.0f, -0.125f], Tensor[(8), float32]);
  %0 = nn.conv2d(%x, %w, %b, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1); /* ty=Tensor[(1, 8, 8, 8), float32] */
  %1 = nn.relu(%0); /* ty=Tensor[(1, 8, 8, 8), float32] */
  return %1;
}
)";

TEST(Parser, PrintedTextRoundTrips) {
  Graph g = parse_ok(kConvBlock);
  EXPECT_EQ(print_text(g), kConvBlock);
}

TEST(Parser, MissingAttributesTakeDefaultsAndTypesAreInferred) {
  Graph g = parse_ok(R"(def @main(%x: Tensor[(1, 4, 8, 8), float32]) -> Tensor[(1, 4, 4, 4), float32] {
    %0 = nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]);
    return %0;
  })");
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].attrs.ints("padding"), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(g.nodes[0].attrs.i("ceil_mode"), 0);
  EXPECT_EQ(g.nodes[0].type.shape, (Shape{1, 4, 4, 4}));
}

TEST(Parser, ElidedConstantsGetDeterministicValues) {
  Graph a = parse_ok(kConvBlock), b = parse_ok(kConvBlock);
  auto d = compare(a.constants[0].value, b.constants[0].value);
  ASSERT_TRUE(static_cast<bool>(d));
  EXPECT_EQ(d->max_abs, 0.0);
  EXPECT_GT(d->max_ref, 0.0);  // filled, not zeros
}

TEST(Parser, MultipleOutputs) {
  const char *text = R"(def @main(%x: Tensor[(2, 3), float32]) -> (Tensor[(2, 3), float32], Tensor[(2, 3), float32]) {
  %0 = nn.relu(%x); /* ty=Tensor[(2, 3), float32] */
  %1 = sigmoid(%x); /* ty=Tensor[(2, 3), float32] */
  return (%0, %1);
}
)";
  EXPECT_EQ(print_text(parse_ok(text)), text);
}

TEST(Parser, TypeErrorNamesNodeOpAndReason) {
  std::string msg = error_of(parse_text(R"(def @main(%x: Tensor[(1, 4, 8, 8), float32]) -> Tensor[(1, 8, 8, 8), float32] {
  %w = constant(Tensor[(8, 3, 3, 3), float32]);
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
  return %0;
})", "block.ir"));
  EXPECT_EQ(msg, "block.ir:3:8: %0: nn.conv2d: weight (8, 3, 3, 3) expects 3 input channels, data has 4");
}

TEST(Parser, SyntaxErrorsCarryLineAndColumn) {
  EXPECT_EQ(error_of(parse_text("def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {\n  %0 = nn.relu(%y);\n  return %0;\n}")),
            "<ir>:2:16: %y is not defined");
  EXPECT_EQ(error_of(parse_text("def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {\n  %1 = nn.relu(%x);\n  return %1;\n}")),
            "<ir>:2:3: node results are numbered in order: expected %0, got %1");
  EXPECT_EQ(error_of(parse_text("def @main(%x: Tensor[(2), float32]) -> Tensor[(3), float32] {\n  return %x;\n}")),
            "<ir>:2:3: return value 0 is Tensor[(2), float32] but declared Tensor[(3), float32]");
  EXPECT_EQ(error_of(parse_text("def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {\n  %0 = nn.frobnicate(%x);\n  return %0;\n}")),
            "<ir>:2:8: %0: unknown op 'nn.frobnicate'");
}

TEST(Parser, EveryGeneratedModelRoundTrips) {
  for (const char *name : {"tiny_cnn", "mlp", "shape_ops", "legacy", "resnet18", "resnet18_bn", "resnet50", "resnet50_bn", "transformer", "vit_tiny", "modern_cnn"}) {
    SCOPED_TRACE(name);
    Graph g = testing::load_model(name);
    std::string text = print_text(g);
    auto parsed = parse_text(text, name);
    ASSERT_TRUE(static_cast<bool>(parsed)) << parsed.error().message;
    EXPECT_EQ(print_text(*parsed), text);
    EXPECT_TRUE(static_cast<bool>(verify_graph(*parsed)));
  }
}

}  // namespace
}  // namespace autotune

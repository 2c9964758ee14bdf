#include <gtest/gtest.h>

#include "codegen/LoopIR.h"

namespace autotune::loop {
namespace {

TEST(LoopIR, BuildersFoldConstants) {
  EXPECT_EQ(to_string(int_imm(2) * int_imm(3) + int_imm(1)), "7");
  EXPECT_EQ(to_string(var("x") * 1 + int_imm(0)), "x");
  EXPECT_EQ(to_string((var("x") + int_imm(2)) + int_imm(3)), "(x + 5)");
  EXPECT_EQ(to_string(int_imm(-7) / int_imm(2)), "-4");  // floor division
  EXPECT_EQ(to_string(int_imm(-7) % int_imm(2)), "1");   // floor modulo
}

TEST(LoopIR, StrideOfAffineIndices) {
  Expr x = var("x"), y = var("y");
  EXPECT_EQ(stride_of(x * 4 + y, "y"), 1);
  EXPECT_EQ(stride_of(x * 4 + y, "x"), 4);
  EXPECT_EQ(stride_of((y + x) * 3 - int_imm(1), "x"), 3);
  EXPECT_EQ(stride_of(y * 2, "x"), 0);
  EXPECT_EQ(stride_of(x / int_imm(2), "x"), std::nullopt);
  EXPECT_EQ(stride_of(x * y, "x"), std::nullopt);
  EXPECT_EQ(stride_of(min(x, int_imm(3)), "x"), std::nullopt);
}

TEST(LoopIR, SubstituteRefolds) {
  EXPECT_EQ(to_string(substitute(var("x") * 4 + var("y"), "x", int_imm(2))), "(8 + y)");
}

TEST(LoopIR, PrintsLoopNests) {
  Buffer b = make_buffer("out", Type::kF32, 16, BufferScope::kParam);
  Stmt s = for_loop("i", int_imm(0), int_imm(2), ForKind::kParallel,
                    for_loop("j", int_imm(0), int_imm(8), ForKind::kVectorized, store(b, var("i") * 8 + var("j"), float_imm(1))));
  EXPECT_EQ(to_string(s), "parallel (i, 0, 2) {\n  vectorized (j, 0, 8) {\n    out[((i * 8) + j)] = 1.0f\n  }\n}\n");
}

}  // namespace
}  // namespace autotune::loop

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

TEST(LoopIR, KnownMultipleIsWhatEveryValueOfAnIndexIsDivisibleBy) {
  Expr x = var("x"), y = var("y"), t = var("t");
  EXPECT_EQ(known_multiple(x * 4 + y * 8), 4);
  EXPECT_EQ(known_multiple(x * 4 + y * 8 + int_imm(2)), 2);
  EXPECT_EQ(known_multiple((x * 3) * (y * 4)), 12);
  EXPECT_EQ(known_multiple(x * 4 + y), 1);
  EXPECT_EQ(known_multiple(x * 4 + y, {{"y", 8}}), 4);  // y a multiple of 8
  EXPECT_EQ(known_multiple((t * 16) / int_imm(2)), 1);  // a division proves nothing
  EXPECT_EQ(known_multiple(select(t < int_imm(3), x * 8, y * 12)), 4);
  EXPECT_EQ(known_multiple(int_imm(0) + x * 64), 64);
  // Checked against values: every value of the index at random points is a multiple of it.
  Expr index = (x * 12 + y * 18) * 2 + t * 36;
  int64_t m = known_multiple(index);
  EXPECT_EQ(m, 12);
  for (int64_t a = -3; a < 4; ++a)
    for (int64_t b = 0; b < 5; ++b) EXPECT_EQ(*evaluate(index, {{"x", a}, {"y", b}, {"t", a * b}}) % m, 0);
}

TEST(LoopIR, StructuralHashIsTheStructureNotTheNodes) {
  Buffer a = make_buffer("a", Type::kF32, 64, BufferScope::kParam), b = make_buffer("b", Type::kF32, 64, BufferScope::kParam);
  auto body = [&](int64_t k, const Buffer &to) {
    Expr x = var("x");
    Expr shared = load(a, x) * float_imm(2.0);  // one node used twice: a DAG
    return for_loop("x", int_imm(0), int_imm(64), ForKind::kSerial, store(to, x, shared + shared * float_imm(static_cast<double>(k))));
  };
  // Built twice, node by node: the same hash; as a tree (the shared node copied), the same again.
  EXPECT_EQ(structural_hash(body(3, b)), structural_hash(body(3, b)));
  Expr x = var("x");
  Stmt tree = for_loop("x", int_imm(0), int_imm(64), ForKind::kSerial,
                       store(b, x, load(a, x) * float_imm(2.0) + (load(a, x) * float_imm(2.0)) * float_imm(3.0)));
  EXPECT_EQ(structural_hash(tree), structural_hash(body(3, b)));
  // Any field that differs: a constant, the buffer stored, the loop's kind.
  EXPECT_NE(structural_hash(body(4, b)), structural_hash(body(3, b)));
  EXPECT_NE(structural_hash(body(3, a)), structural_hash(body(3, b)));
  Stmt parallel = for_loop("x", int_imm(0), int_imm(64), ForKind::kParallel, body(3, b)->body[0]);
  EXPECT_NE(structural_hash(parallel), structural_hash(body(3, b)));
}

TEST(LoopIR, AKeptHashFollowsTheNodeNotItsCopies) {
  // A node keeps its hash once computed; a copy of it that is then changed (how rewrites make
  // nodes: copy, set a field) is hashed anew, so a kept hash never describes another structure.
  Buffer a = make_buffer("a", Type::kF32, 64, BufferScope::kParam);
  Expr x = var("x");
  Stmt loop = for_loop("x", int_imm(0), int_imm(64), ForKind::kSerial, store(a, x, load(a, x) + float_imm(1.0)));
  uint64_t h = structural_hash(loop);
  EXPECT_EQ(structural_hash(loop), h);  // kept
  auto copy = std::make_shared<StmtNode>(*loop);
  copy->for_kind = ForKind::kParallel;
  Stmt changed = copy;
  Stmt rebuilt = for_loop("x", int_imm(0), int_imm(64), ForKind::kParallel, loop->body[0]);
  EXPECT_NE(structural_hash(changed), h);
  EXPECT_EQ(structural_hash(changed), structural_hash(rebuilt));  // built fresh: nothing kept to agree with by accident
  auto same = std::make_shared<StmtNode>(*loop);  // a copy left as it is hashes as the original
  EXPECT_EQ(structural_hash(same), h);
}

TEST(LoopIR, SubstituteRefolds) {
  EXPECT_EQ(to_string(substitute(var("x") * 4 + var("y"), "x", int_imm(2))), "(8 + y)");
}

TEST(LoopIR, SubstitutionLeavesSubtreesWithoutItsVariablesAsTheyAre) {
  // vars_filter holds the bit of every variable below a node; a substitution does not enter a
  // subtree without its variable's bit, and hands back that very node.
  Buffer in = make_buffer("in", Type::kF32, 4096, BufferScope::kParam), w = make_buffer("w", Type::kF32, 64, BufferScope::kParam);
  Expr weight = load(w, var("k") * 8 + var("c"));
  Expr e = load(in, var("y") * 64 + var("x")) * weight + float_imm(0.5);
  for (const char *v : {"k", "c", "y", "x"}) EXPECT_TRUE(vars_filter(e) & var_bit(v)) << v;
  EXPECT_EQ(vars_filter(weight) & var_bit("y"), 0u) << "a Bloom filter may share a bit, but not these";
  Expr out = substitute(e, "y", var("t") + int_imm(1));
  EXPECT_EQ(to_string(out), to_string(load(in, (var("t") + int_imm(1)) * 64 + var("x")) * weight + float_imm(0.5)));
  EXPECT_EQ(out->args[0]->args[1].get(), weight.get());  // not rebuilt
  EXPECT_TRUE(vars_filter(out) & var_bit("t"));
  ExprMemo memo;
  Expr fused = substitute_and_fold(e, {{"k", var("f") / int_imm(8)}, {"c", var("f") % int_imm(8)}}, memo);
  EXPECT_EQ(to_string(fused->args[0]->args[1]), to_string(load(w, var("f"))));  // k * 8 + c folded back to f
  EXPECT_EQ(fused->args[0]->args[0].get(), e->args[0]->args[0].get());  // the input's load has neither
}

TEST(LoopIR, FusingSubstitutesBothLoopsAndFoldsDivisionAndModuloPairsBackIntoTheirDividend) {
  // Fusing y (extent 4) and x (extent 56) into f: y = f / 56, x = f % 56.
  Expr f = var("f"), k = var("k"), y = var("y"), x = var("x");
  const std::map<std::string, Expr> fused = {{"y", f / int_imm(56)}, {"x", f % int_imm(56)}};
  Expr index = (y + k) * 56 + x;
  EXPECT_EQ(stride_of(substitute(substitute(index, "y", f / int_imm(56)), "x", f % int_imm(56)), "f"), std::nullopt);  // a gather, unfolded
  ExprMemo memo;
  Expr folded = substitute_and_fold(index, fused, memo);
  EXPECT_EQ(stride_of(folded, "f"), 1);
  EXPECT_EQ(stride_of(folded, "k"), 56);
  // Scaled pairs (a channel plane of 3136 above the pixel), inside a load, and a dividend that is a sum.
  Buffer in = make_buffer("in", Type::kF32, 1 << 20, BufferScope::kParam);
  Expr g = var("c") * 7 + var("p");
  ExprMemo memo2;
  Expr back = substitute_and_fold(load(in, var("a") * 3136 * 7 + var("b") * 3136 + var("q")), {{"a", g / int_imm(7)}, {"b", g % int_imm(7)}}, memo2);
  ASSERT_EQ(back->kind, ExprKind::kLoad);
  EXPECT_EQ(affine_form(back->args[0]), affine_form(var("c") * 21952 + var("p") * 3136 + var("q"))) << to_string(back);
  // Nothing to fold: coefficients that do not pair, different dividends, a modulo alone.
  for (Expr e : {y * 55 + x, var("z") * 56 + x, x * 2 + k, y * 56 - x}) {
    ExprMemo m;
    Expr r = substitute_and_fold(e, {{"y", f / int_imm(56)}, {"x", f % int_imm(56)}, {"z", (f + int_imm(1)) / int_imm(56)}}, m);
    EXPECT_EQ(stride_of(r, "f"), std::nullopt) << to_string(r);
  }
  // Where neither variable occurs, the same node comes back; a node shared by two parents is rewritten once and stays shared.
  Expr other = k * 3 + int_imm(1);
  EXPECT_EQ(substitute_and_fold(other, fused, memo).get(), other.get());
  Expr shared = y * 56 + x;
  ExprMemo memo3;
  Expr both = substitute_and_fold(load(in, shared) + load(in, shared + int_imm(1)), fused, memo3);
  ASSERT_EQ(both->args.size(), 2u);
  EXPECT_EQ(both->args[0]->args[0].get(), both->args[1]->args[0]->args[0].get()) << to_string(both);
  // The identity holds for every value, negative ones included (floor division and modulo).
  for (int64_t v = -200; v <= 200; v += 7) {
    ExprMemo m;
    Expr e = substitute_and_fold(y * 18 + x * 2 + int_imm(3), {{"y", var("v") / int_imm(9)}, {"x", var("v") % int_imm(9)}}, m);
    EXPECT_EQ(as_int(substitute(e, "v", int_imm(v))), 2 * v + 3) << v;
  }
}

TEST(LoopIR, ResolvesDivisionAndModuloWhereTheLoopRangesProveThem) {
  // c = 32 * ob + 16 * o + v with v a 16-lane vector: c / 16 and c % 16 are 2 * ob + o and v.
  Buffer b = make_buffer("b", Type::kF32, 1 << 20, BufferScope::kParam);
  Expr c = var("ob") * 32 + var("v") + int_imm(16);
  Stmt body = for_loop("ob", int_imm(0), int_imm(4), ForKind::kSerial,
                       for_loop("v", int_imm(0), int_imm(16), ForKind::kVectorized,
                                store(b, (c / int_imm(16)) * 1000 + c % int_imm(16), float_imm(1))));
  Stmt s = simplify_div_mod(body);
  const Stmt &st = s->body[0]->body[0];
  ASSERT_EQ(st->kind, StmtKind::kStore);
  EXPECT_EQ(stride_of(st->index, "v"), 1) << to_string(st->index);
  EXPECT_EQ(stride_of(st->index, "ob"), 2000) << to_string(st->index);
  // Unproven: v may reach 16 (extent 17), or the dividend is not a sum of known ranges.
  Stmt wide = simplify_div_mod(for_loop("v", int_imm(0), int_imm(17), ForKind::kSerial, store(b, var("v") / int_imm(16), float_imm(1))));
  EXPECT_EQ(to_string(wide->body[0]->index), "(v / 16)");
  Stmt unknown = simplify_div_mod(store(b, var("q") % int_imm(16), float_imm(1)));
  EXPECT_EQ(to_string(unknown->index), "(q % 16)");
  // A let's range comes from its value (here from the caller's range of u, as a stage's parallel
  // variable): t in [0, 3], so (8k + t) / 8 = k and (8k + t) % 8 = t.
  Expr e = var("k") * 8 + var("t");
  Stmt let_body = simplify_div_mod(let("t", var("u") % int_imm(4), store(b, (e / int_imm(8)) * 100 + e % int_imm(8), float_imm(1))), {{"u", {0, 9}}});
  Expr idx = let_body->body[0]->index;
  EXPECT_EQ(stride_of(idx, "k"), 100) << to_string(idx);
  EXPECT_EQ(stride_of(idx, "t"), 1) << to_string(idx);
}

TEST(LoopIR, SimplifyingKeepsSharedNodesSharedWithinAScopeOnly) {
  // A value shared by two stores stays one node (the emitter then emits it once); a loop or a let
  // inside gives its own ranges, so the same node there is simplified in that scope.
  Buffer a = make_buffer("a", Type::kF32, 64, BufferScope::kParam), b = make_buffer("b", Type::kF32, 64, BufferScope::kParam);
  Expr i = var("v") + int_imm(16);
  Expr shared = load(a, i / int_imm(16)) + load(a, i % int_imm(16));
  Stmt s = simplify_div_mod(for_loop("v", int_imm(0), int_imm(16), ForKind::kSerial,
                                     seq({store(b, int_imm(0), shared), store(b, int_imm(1), shared * shared),
                                          for_loop("w", int_imm(0), int_imm(2), ForKind::kSerial, let("v", var("w") * 16, store(b, int_imm(2), shared)))})));
  const Stmt &body = s->body[0];
  ASSERT_EQ(body->kind, StmtKind::kSeq);
  const Expr &first = body->body[0]->value, &second = body->body[1]->value;
  EXPECT_EQ(to_string(first), "(a[1] + a[v])");
  EXPECT_EQ(first.get(), second->args[0].get());
  EXPECT_EQ(first.get(), second->args[1].get());
  // Under the let, v = 16w is in [0, 16]: (v + 16) / 16 and (v + 16) % 16 are not proven there.
  const Expr &inner = body->body[2]->body[0]->body[0]->value;
  EXPECT_EQ(to_string(inner), "(a[((v + 16) / 16)] + a[((v + 16) % 16)])");
}

TEST(LoopIR, PrintsLoopNests) {
  Buffer b = make_buffer("out", Type::kF32, 16, BufferScope::kParam);
  Stmt s = for_loop("i", int_imm(0), int_imm(2), ForKind::kParallel,
                    for_loop("j", int_imm(0), int_imm(8), ForKind::kVectorized, store(b, var("i") * 8 + var("j"), float_imm(1))));
  EXPECT_EQ(to_string(s), "parallel (i, 0, 2) {\n  vectorized (j, 0, 8) {\n    out[((i * 8) + j)] = 1.0f\n  }\n}\n");
}

TEST(LoopIR, ReplaceBuffersMapsEveryAccessAndLeavesTheRest) {
  Buffer a = make_buffer("a", Type::kF32, 8, BufferScope::kParam), b = make_buffer("b", Type::kF32, 8, BufferScope::kTemp);
  Buffer c = make_buffer("c", Type::kF32, 8, BufferScope::kParam), t = make_buffer("t", Type::kF32, 1, BufferScope::kLocal);
  Buffer a2 = make_buffer("a2", Type::kF32, 8, BufferScope::kParam), t2 = make_buffer("t2", Type::kF32, 1, BufferScope::kLocal);
  // for i: allocate t { t[0] = a[i] * c[i]; b[i] = t[0] + a[7 - i] }
  Stmt s = for_loop("i", int_imm(0), int_imm(8), ForKind::kSerial,
                    allocate(t, seq({store(t, int_imm(0), load(a, var("i")) * load(c, var("i"))),
                                     store(b, var("i"), load(t, int_imm(0)) + load(a, int_imm(7) - var("i")))})));
  Stmt r = replace_buffers(s, {{a.get(), a2}, {t.get(), t2}});
  std::string text = to_string(r);
  EXPECT_EQ(text.find("a["), std::string::npos) << text;   // every read of a, both of them
  EXPECT_EQ(text.find(" t["), std::string::npos) << text;  // the local, its allocation included
  EXPECT_NE(text.find("a2[i]"), std::string::npos) << text;
  EXPECT_NE(text.find("a2[(7 - i)]"), std::string::npos) << text;
  EXPECT_NE(text.find("c[i]"), std::string::npos) << text;  // unmapped buffers stay
  EXPECT_NE(text.find("b[i]"), std::string::npos) << text;
  EXPECT_EQ(to_string(replace_buffers(s, {})), to_string(s));
}

}  // namespace
}  // namespace autotune::loop

// Partitions beyond FuseOps's: prologue moves on fused graphs, each result run against FuseOps's
// partition on the reference executor; illegal moves refused with their reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ir/Partition.h"
#include "ir/Pass.h"
#include "ir/Verify.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

using testing::error_of;
using testing::parse_ok;

/** `g` fused; with `plain`, in NCHW throughout (nchwc-layout off). */
Graph fused(const Graph &g, bool plain = false) {
  auto f = lower_to_stage(g, Stage::kFused, plain ? testing::nchw_throughout() : PassContext{});
  EXPECT_TRUE(static_cast<bool>(f)) << (f ? "" : f.error().message);
  return f ? f.take() : Graph{};
}

const PartitionMove *move_of(const std::vector<PartitionMove> &moves, int producer) {
  for (const PartitionMove &m : moves)
    if (m.producer == producer) return &m;
  return nullptr;
}

// x * scale (squeeze-excitation's multiply) before a 1x1 conv: FuseOps stores the product; the
// prologue move recomputes it in the conv's group.
const char *kScaledConv = R"(def @main(%x: Tensor[(1, 4, 5, 5), float32], %s: Tensor[(1, 4, 1, 1), float32]) -> Tensor[(1, 3, 5, 5), float32] {
  %w = constant(Tensor[(3, 4, 1, 1), float32]);
  %0 = multiply(%x, %s);
  %1 = nn.conv2d(%0, %w);
  %2 = nn.relu(%1);
  return %2;
})";

TEST(Partition, APrologueJoinsTheConvThatReadsIt) {
  Graph f = fused(parse_ok(kScaledConv));
  ASSERT_EQ(f.nodes.size(), 2u);
  auto moves = partition_moves(f);
  ASSERT_EQ(moves.size(), 2u);  // the multiply's prologue, and the conv's group as a chain (refused: the output)
  EXPECT_EQ(moves[1].kind, PartitionMove::kChain);
  EXPECT_NE(moves[1].why_not.find("graph output"), std::string::npos) << moves[1].why_not;
  EXPECT_EQ(moves[0].kind, PartitionMove::kPrologue);
  EXPECT_EQ(moves[0].producer, 0);
  EXPECT_EQ(moves[0].consumers, std::vector<int>{1});
  EXPECT_EQ(moves[0].why_not, "");
  EXPECT_EQ(move_name(moves[0]), "prologue:%0");
  auto m = apply_move(f, 0);
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  ASSERT_TRUE(static_cast<bool>(verify_graph(*m)));
  ASSERT_EQ(m->nodes.size(), 1u);
  std::vector<std::string> ops;
  for (const Node &n : m->nodes[0].body->nodes) ops.push_back(n.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"multiply", "nn.conv2d", "nn.relu"}));
  auto same = verify_equivalent(f, *m, 5, 0.0);  // the same arithmetic in another kernel: bit-identical
  EXPECT_TRUE(static_cast<bool>(same)) << (same ? "" : same.error().message);
}

TEST(Partition, IllegalProloguesAreRefusedWithTheirReason) {
  // The product is also a graph output: it is stored anyway.
  Graph out = fused(parse_ok(R"(def @main(%x: Tensor[(1, 4, 5, 5), float32], %s: Tensor[(1, 4, 1, 1), float32]) -> (Tensor[(1, 4, 5, 5), float32], Tensor[(1, 3, 5, 5), float32]) {
  %w = constant(Tensor[(3, 4, 1, 1), float32]);
  %0 = multiply(%x, %s);
  %1 = nn.conv2d(%0, %w);
  return (%0, %1);
})"));
  EXPECT_NE(error_of(apply_move(out, 0)).find("graph output"), std::string::npos);
  // The product is a conv's weight: only data inputs are recomputed.
  Graph weight = fused(parse_ok(R"(def @main(%x: Tensor[(1, 4, 5, 5), float32], %w: Tensor[(3, 4, 1, 1), float32]) -> Tensor[(1, 3, 5, 5), float32] {
  %0 = nn.relu(%w);
  %1 = nn.conv2d(%x, %0);
  return %1;
})"));
  EXPECT_NE(error_of(apply_move(weight, 0)).find("input 1 of nn.conv2d"), std::string::npos);
  // Three consumers: more copies than the bound allows (two by default).
  Graph three = fused(parse_ok(R"(def @main(%x: Tensor[(1, 4, 5, 5), float32], %s: Tensor[(1, 4, 1, 1), float32]) -> Tensor[(1, 3, 5, 5), float32] {
  %w = constant(Tensor[(3, 4, 1, 1), float32]);
  %0 = multiply(%x, %s);
  %1 = nn.conv2d(%0, %w);
  %2 = nn.max_pool2d(%0, pool_size=[1, 1]);
  %3 = nn.conv2d(%2, %w);
  %4 = nn.global_avg_pool2d(%0);
  %5 = nn.conv2d(%4, %w);
  %6 = add(%1, %3);
  %7 = add(%6, %5);
  return %7;
})"));
  std::vector<PartitionMove> moves = partition_moves(three);
  const PartitionMove *m = move_of(moves, 0);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->consumers.size(), 3u);
  EXPECT_NE(m->why_not.find("3 consumers"), std::string::npos) << m->why_not;
  auto with_three = apply_move(three, 0, 3);  // allowed when the bound says so
  ASSERT_TRUE(static_cast<bool>(with_three)) << with_three.error().message;
  auto same = verify_equivalent(three, *with_three, 3, 0.0);
  EXPECT_TRUE(static_cast<bool>(same)) << (same ? "" : same.error().message);
  // The conv's group is the graph output; no node is none.
  EXPECT_NE(error_of(apply_move(fused(parse_ok(kScaledConv)), 1)).find("graph output"), std::string::npos);
  EXPECT_NE(error_of(apply_move(fused(parse_ok(kScaledConv)), 7)).find("no such node"), std::string::npos);
}

// Random sets of legal moves on the generated mobile models, applied from the last producer to
// the first (so earlier producers keep their index), each checked against FuseOps's partition.
TEST(Partition, RandomPrologueSetsOfTheGeneratedModelsMatchFuseOps) {
  std::mt19937 rng(11);
  int checked = 0;
  // EfficientNet-B0 in NCHW throughout and in NCHW16c, where from 14x14 on the multiply takes its
  // scale's layout change (nn.to_nchwc+multiply): a prologue either way.
  for (auto [name, plain] : {std::pair{"efficientnet_b0", true}, {"efficientnet_b0", false}, {"mobilenet_v2", false}, {"resnet18", false}}) {
    Graph f = fused(testing::load_model(name), plain);
    std::vector<int> legal;
    for (const PartitionMove &m : partition_moves(f))
      if (m.why_not.empty()) legal.push_back(m.producer);
    if (std::string(name) == "efficientnet_b0") {
      int prologues = 0;
      for (const PartitionMove &m : partition_moves(f)) prologues += m.why_not.empty() && m.kind == PartitionMove::kPrologue;
      EXPECT_GE(prologues, 10) << "every squeeze-excitation multiply is a prologue";
    }
    if (legal.empty()) continue;
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<int> pick;
      for (int p : legal)
        if (trial == 0 || rng() % 2) pick.push_back(p);
      std::sort(pick.rbegin(), pick.rend());
      Graph g = f;
      size_t applied = 0;
      for (int p : pick) {
        auto next = apply_move(g, p);
        if (!next) {  // a chain's consumer that took a chain already (moves applied last to first)
          EXPECT_NE(next.error().message.find("chain already"), std::string::npos) << name << ": " << next.error().message;
          continue;
        }
        g = next.take();
        ++applied;
      }
      EXPECT_EQ(g.nodes.size(), f.nodes.size() - applied);
      auto same = verify_equivalent(f, g, 2, 0.0);
      EXPECT_TRUE(static_cast<bool>(same)) << name << ": " << (same ? "" : same.error().message);
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);
}

}  // namespace
}  // namespace autotune
